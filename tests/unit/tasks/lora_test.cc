// LoRA (tasks/lora.h, nn::LoraAdapter, frozen units in zero/zero_state.h) against independent
// oracles: the adapters' gradients against central finite differences (the loss is linear in W
// and bilinear in A, B, so central differences are exact up to rounding), the frozen weights
// against their initial values after AdamW steps with weight decay (a stepped weight would
// decay), the model-state bytes against the adapters' size, the merged export against
// W + (alpha/r) B A computed here from the checkpoint's fp32 weights (`zt ckpt to-fp32`'s reader,
// which merges nothing), and the PEFT adapter's tensors against the same weights.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "zt/checkpoint/consolidate.h"
#include "zt/checkpoint/hf_export.h"
#include "zt/checkpoint/safetensors.h"
#include "zt/kernels/ops.h"
#include "zt/nn/models/registry.h"
#include "zt/runtime/config.h"
#include "zt/runtime/engine.h"
#include "zt/tasks/lora.h"

namespace zt {
namespace {

// A unit that only holds parameters for the layer under test.
class Holder : public nn::Unit {
 public:
  using nn::Unit::Unit;
  Tensor forward(nn::Context&, const Tensor& x) override { return x; }
  Tensor backward(nn::Context&, const Tensor& d) override { return d; }
};

Tensor filled(int64_t n, uint64_t seed, float scale = 1.0f) {
  Tensor t = Tensor::empty({n}, DType::f32, Device::cpu());
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = dist(rng);
  return t;
}

double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    s += static_cast<double>(a.data<float>()[i]) * b.data<float>()[i];
  }
  return s;
}

// A Linear (6 -> 9, with bias) and two rank-2 adapters: one on rows [3, 7) with dropout 0.25
// (salt 11), one on all rows without. The base's and the adapters' parameters in their own units.
struct AdaptedLinear {
  static constexpr int64_t kIn = 6, kOut = 9, kRank = 2;
  Holder base{"base"}, adapters{"adapters"};
  nn::Linear linear{base, "proj", kIn, kOut, nn::Bias::kWith};
  AdaptedLinear() {
    nn::Param& a1 = adapters.add_param("a1", {kRank, kIn}, nn::ParamInit::kNormal);
    nn::Param& b1 = adapters.add_param("b1", {4, kRank}, nn::ParamInit::kNormal);
    nn::Param& a2 = adapters.add_param("a2", {kRank, kIn}, nn::ParamInit::kNormal);
    nn::Param& b2 = adapters.add_param("b2", {kOut, kRank}, nn::ParamInit::kNormal);
    linear.add_adapter(
        {.a = &a1, .b = &b1, .row0 = 3, .rows = 4, .scale = 0.7f, .dropout = 0.25f, .salt = 11});
    linear.add_adapter(
        {.a = &a2, .b = &b2, .row0 = 0, .rows = kOut, .scale = 1.5f, .dropout = 0.0f, .salt = 12});
  }
};

// y = Linear(x) with the two adapters; the loss is sum(y * G). Gradients of W, A, B and x against
// central differences.
TEST(LoraLinear, GradientsMatchFiniteDifferences) {
  AdaptedLinear al;
  Holder &base = al.base, &adapters = al.adapters;
  nn::Linear& linear = al.linear;
  constexpr int64_t kIn = AdaptedLinear::kIn, kOut = AdaptedLinear::kOut, kRows = 8;
  Tensor base_v = filled(base.flat_numel(), 1),
         base_g = Tensor::zeros({base.flat_numel()}, DType::f32, Device::cpu());
  Tensor ad_v = filled(adapters.flat_numel(), 2),
         ad_g = Tensor::zeros({adapters.flat_numel()}, DType::f32, Device::cpu());
  base.bind(base_v, base_g);
  adapters.bind(ad_v, ad_g);
  Tensor x = filled(kRows * kIn, 3).reshape({kRows, kIn});
  const Tensor G = filled(kRows * kOut, 4).reshape({kRows, kOut});
  nn::Context ctx;
  ctx.dropout_seed = 99;
  auto loss = [&]() { return dot(linear.forward(ctx, x), G); };
  Tensor dx = Tensor::empty({kRows, kIn}, DType::f32, Device::cpu());
  (void)linear.forward(ctx, x);
  linear.backward(ctx, G, x, &dx);

  // The dropout mask drops some of the first adapter's inputs, so its path is really tested.
  Tensor ones = Tensor::empty({1000}, DType::f32, Device::cpu());
  for (int64_t i = 0; i < 1000; ++i) ones.data<float>()[i] = 1.0f;
  Tensor dropped = Tensor::empty({1000}, DType::f32, Device::cpu());
  kernels::dropout_apply(dropped, ones, 0.25f, 99 ^ 11);
  int zeros = 0;
  for (int64_t i = 0; i < 1000; ++i) zeros += dropped.data<float>()[i] == 0.0f;
  EXPECT_GT(zeros, 150);
  EXPECT_LT(zeros, 350);

  auto check = [&](Tensor values, const Tensor& grads, const char* what) {
    for (int64_t i = 0; i < values.numel(); ++i) {
      float* v = values.data<float>() + i;
      const float keep = *v, h = 1e-2f;
      *v = keep + h;
      const double up = loss();
      *v = keep - h;
      const double down = loss();
      *v = keep;
      const double fd = (up - down) / (2.0 * h);
      EXPECT_NEAR(grads.data<float>()[i], fd, 2e-3 * std::max(1.0, std::fabs(fd)))
          << what << " element " << i;
    }
  };
  check(base_v, base_g, "W, b");
  check(ad_v, ad_g, "A, B");
  check(x, dx, "x");
}

// A training forward keeps each adapter's u = h A^T for backward; backward after release() (what
// a block's release_activations does) recomputes it. Both must give the same bits.
TEST(LoraLinear, KeptAdapterProjectionGivesTheRecomputedGradients) {
  AdaptedLinear al;
  Holder &base = al.base, &adapters = al.adapters;
  nn::Linear& linear = al.linear;
  constexpr int64_t kIn = AdaptedLinear::kIn, kOut = AdaptedLinear::kOut, kRows = 8;
  const Tensor base_v = filled(base.flat_numel(), 1), ad_v = filled(adapters.flat_numel(), 2);
  const Tensor x = filled(kRows * kIn, 3).reshape({kRows, kIn});
  const Tensor G = filled(kRows * kOut, 4).reshape({kRows, kOut});
  auto run = [&](bool release) {
    Tensor base_g = Tensor::zeros({base.flat_numel()}, DType::f32, Device::cpu());
    Tensor ad_g = Tensor::zeros({adapters.flat_numel()}, DType::f32, Device::cpu());
    base.bind(base_v, base_g);
    adapters.bind(ad_v, ad_g);
    nn::Context ctx;
    ctx.mode = nn::Mode::kTrain;
    ctx.dropout_seed = 99;
    (void)linear.forward(ctx, x);
    if (release) linear.release();
    Tensor dx = Tensor::empty({kRows, kIn}, DType::f32, Device::cpu());
    linear.backward(ctx, G, x, &dx);
    return std::vector<std::vector<double>>{dx.to_doubles(), base_g.to_doubles(),
                                            ad_g.to_doubles()};
  };
  const auto kept = run(false), recomputed = run(true);
  EXPECT_EQ(kept[0], recomputed[0]) << "dx";
  EXPECT_EQ(kept[1], recomputed[1]) << "the base's gradients";
  EXPECT_EQ(kept[2], recomputed[2]) << "the adapters' gradients";
  EXPECT_NE(kept[2], std::vector<double>(kept[2].size(), 0.0));
}

// Three rank-2 adapters on one Linear (8 -> 12; rows [0, 4), [4, 8), all), no dropout, their A
// matrices back to back (A, A, A, then B, B, B, as lora_apply lays out a Linear's adapters) or
// interleaved (A, B, A, B, A, B).
struct ThreeAdapters {
  static constexpr int64_t kIn = 8, kOut = 12, kRank = 2;  // r * in = 16: aligned, no gaps
  Holder base{"base"}, adapters{"adapters"};
  nn::Linear linear{base, "proj", kIn, kOut, nn::Bias::kWith};
  explicit ThreeAdapters(bool stacked) {
    const int64_t rows[3] = {4, 4, kOut}, row0[3] = {0, 4, 0};
    nn::Param* a[3];
    nn::Param* b[3];
    for (int j = 0; j < 3; ++j) {
      a[j] = &adapters.add_param(fmt::format("a{}", j), {kRank, kIn}, nn::ParamInit::kNormal);
      if (!stacked)
        b[j] = &adapters.add_param(fmt::format("b{}", j), {rows[j], kRank}, nn::ParamInit::kNormal);
    }
    for (int j = 0; stacked && j < 3; ++j) {
      b[j] = &adapters.add_param(fmt::format("b{}", j), {rows[j], kRank}, nn::ParamInit::kNormal);
    }
    for (int j = 0; j < 3; ++j) {
      linear.add_adapter({.a = a[j], .b = b[j], .row0 = row0[j], .rows = rows[j],
                          .scale = 0.5f + 0.25f * j, .dropout = 0.0f, .salt = 20u + j});
    }
  }
  // Each parameter's values, by name, from one seed (the same model in either layout).
  void bind(std::vector<Tensor>& grads) {
    Tensor bv = filled(base.flat_numel(), 1);
    Tensor av = Tensor::zeros({adapters.flat_numel()}, DType::f32, Device::cpu());
    for (nn::Param* p : adapters.params()) {  // seed by name: "a0".."b2"
      const uint64_t seed = 100 + (p->name[0] == 'a' ? 0 : 10) + (p->name[1] - '0');
      const Tensor v = filled(p->numel(), seed);
      std::copy(v.data<float>(), v.data<float>() + p->numel(), av.data<float>() + p->offset);
    }
    grads = {Tensor::zeros({base.flat_numel()}, DType::f32, Device::cpu()),
             Tensor::zeros({adapters.flat_numel()}, DType::f32, Device::cpu())};
    base.bind(bv, grads[0]);
    adapters.bind(av, grads[1]);
  }
  // The adapters' gradients by parameter name, each as its values.
  std::map<std::string, std::vector<double>> adapter_grads() {
    std::map<std::string, std::vector<double>> out;
    for (nn::Param* p : adapters.params()) out[p->name] = p->grad.to_doubles();
    return out;
  }
};

// Back to back, the three adapters form one group (one GEMM for u, one for dA, one for du A);
// interleaved, three. Both give the gradients of finite differences, and each other's within
// f32 rounding; with the A gradients bound apart (a layout that separates them), the group's
// dA falls back to one GEMM per adapter and gives the same.
TEST(LoraLinear, StackedAdaptersGiveTheSeparateAdaptersGradients) {
  constexpr int64_t kRows = 5, kIn = ThreeAdapters::kIn, kOut = ThreeAdapters::kOut;
  const Tensor x0 = filled(kRows * kIn, 3).reshape({kRows, kIn});
  const Tensor G = filled(kRows * kOut, 4).reshape({kRows, kOut});
  struct Result {
    std::vector<double> y, dx;
    std::map<std::string, std::vector<double>> grads;
  };
  auto run = [&](bool stacked, bool apart) {
    ThreeAdapters t(stacked);
    const auto groups = nn::adapter_groups(t.linear.adapters(), /*training=*/true);
    EXPECT_EQ(groups.size(), stacked ? 1u : 3u);
    std::vector<Tensor> grads;
    t.bind(grads);
    Tensor own;
    if (apart) {  // a1's gradient in a buffer of its own
      own = Tensor::zeros({ThreeAdapters::kRank * kIn}, DType::f32, Device::cpu());
      t.adapters.params()[1]->grad = own.reshape({ThreeAdapters::kRank, kIn});
    }
    nn::Context ctx;
    Tensor x = x0.clone();
    Result r;
    r.y = t.linear.forward(ctx, x).to_doubles();
    Tensor dx = Tensor::empty({kRows, kIn}, DType::f32, Device::cpu());
    t.linear.backward(ctx, G, x, &dx);
    r.dx = dx.to_doubles();
    r.grads = t.adapter_grads();
    if (stacked && !apart) {  // finite differences of sum(y * G) for every adapter element
      auto loss = [&]() { return dot(t.linear.forward(ctx, x), G); };
      for (nn::Param* p : t.adapters.params()) {
        for (int64_t i = 0; i < p->numel(); ++i) {
          float* v = p->value.data<float>() + i;
          const float keep = *v, h = 1e-2f;
          *v = keep + h;
          const double up = loss();
          *v = keep - h;
          const double down = loss();
          *v = keep;
          const double fd = (up - down) / (2.0 * h);
          EXPECT_NEAR(r.grads[p->name][i], fd, 2e-3 * std::max(1.0, std::fabs(fd)))
              << p->name << " element " << i;
        }
      }
    }
    return r;
  };
  const Result stacked = run(true, false), separate = run(false, false),
               apart = run(true, true);
  for (const Result* other : {&separate, &apart}) {
    testing::expect_close(stacked.y, other->y, 1e-5, 1e-5, "y");
    testing::expect_close(stacked.dx, other->dx, 1e-5, 1e-5, "dx");
    for (const auto& [name, g] : stacked.grads) {
      testing::expect_close(g, other->grads.at(name), 1e-5, 1e-5, name.c_str());
    }
  }
}

// A frozen base skips its weight gradients but still passes the input gradient on.
TEST(LoraLinear, FrozenBaseHasNoWeightGradientButTheSameInputGradient) {
  Holder base("base");
  nn::Linear linear(base, "proj", 5, 7, nn::Bias::kWith);
  Tensor v = filled(base.flat_numel(), 5),
         g = Tensor::zeros({base.flat_numel()}, DType::f32, Device::cpu());
  const Tensor x = filled(3 * 5, 6).reshape({3, 5}), G = filled(3 * 7, 7).reshape({3, 7});
  nn::Context ctx;
  Tensor dx_trained = Tensor::empty({3, 5}, DType::f32, Device::cpu());
  base.bind(v, g);
  linear.backward(ctx, G, x, &dx_trained);
  Tensor dx_frozen = Tensor::empty({3, 5}, DType::f32, Device::cpu());
  base.bind(v, Tensor());  // what ZeroState binds for a frozen unit
  linear.backward(ctx, G, x, &dx_frozen);
  EXPECT_EQ(dx_trained.to_doubles(), dx_frozen.to_doubles());
}

struct LoraRun {
  std::vector<Tensor> before, after;  // per unit, f32 on the host
  std::vector<double> losses;
  zero::ModelStateBytes bytes;
  int64_t adapter_elements = 0;  // padded sizes of the adapter units
  size_t base_units = 0;
};

// The adapters train_lora puts on llama-tiny (rank 4, dropout 0.1, three modules).
tasks::LoraOptions tiny_lora(bool only_optimize) {
  return {.r = 4,
          .alpha = 8.0f,
          .dropout = 0.1f,
          .modules = {"q_proj", "v_proj", "down_proj"},
          .only_optimize = only_optimize};
}

// llama-tiny with rank-4 adapters, AdamW with weight decay, three steps.
LoraRun train_lora(int stage, bool offload, bool only_optimize, const std::string& save_dir = "") {
  const std::string json = fmt::format(
      R"({{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {{"stage": {}{}}},
          "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-2, "weight_decay": 0.1}}}}}})",
      stage, offload ? R"(, "offload_optimizer": {"device": "cpu"})" : "");
  auto cfg = config_parse(json, "test", 1);
  EXPECT_TRUE(cfg.is_ok()) << cfg.status().message();
  auto mc = nn::model_config_named("llama-tiny");
  EXPECT_TRUE(mc.is_ok());
  nn::Transformer model(*mc);
  LoraRun out;
  out.base_units = model.units().size();
  EXPECT_TRUE(tasks::lora_apply(model, tiny_lora(only_optimize)).is_ok());
  auto e = initialize(model, *cfg, {.device = Device::cpu(), .seed = 5});
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  for (size_t u = out.base_units; u < model.units().size(); ++u) {
    out.adapter_elements += (*e)->gather_master()->at(u).numel();
  }
  out.before = *(*e)->gather_master();
  for (int s = 0; s < 3; ++s) {
    auto loss = (*e)->forward(testing::random_ints({2, 16}, 257, 10 + s),
                              testing::random_ints({2, 16}, 257, 20 + s));
    EXPECT_TRUE(loss.is_ok());
    EXPECT_TRUE((*e)->backward(*loss).is_ok());
    EXPECT_TRUE((*e)->step().is_ok());
    out.losses.push_back(*loss);
  }
  out.after = *(*e)->gather_master();
  out.bytes = (*e)->model_state_bytes();
  if (!save_dir.empty()) {
    EXPECT_TRUE((*e)->save_checkpoint(save_dir, "t").is_ok());
  }
  return out;
}

TEST(Lora, FrozenWeightsStayAndAdaptersLearnAtEveryStage) {
  for (int stage : {0, 1, 2, 3}) {
    for (bool offload : {false, true}) {
      if (offload && stage == 0) continue;
      SCOPED_TRACE(fmt::format("stage {}{}", stage, offload ? " offload" : ""));
      const LoraRun r = train_lora(stage, offload, /*only_optimize=*/true);
      ASSERT_EQ(r.before.size(), r.after.size());
      for (size_t u = 0; u < r.before.size(); ++u) {
        const bool adapter = u >= r.base_units;
        if (adapter) {
          EXPECT_NE(r.before[u].to_doubles(), r.after[u].to_doubles()) << "unit " << u;
        } else {
          EXPECT_EQ(r.before[u].to_doubles(), r.after[u].to_doubles()) << "unit " << u;
        }
      }
      // Gradients, master weights (fp32 training shares them with the compute copy) and Adam's
      // two states exist for the adapters only.
      const int64_t f32 = 4;
      EXPECT_EQ(r.bytes.optimizer + r.bytes.host_optimizer, 2 * f32 * r.adapter_elements);
      EXPECT_LE(r.bytes.grads, 2 * f32 * r.adapter_elements);
      EXPECT_GT(r.bytes.grads, 0);
    }
  }
}

TEST(Lora, WithoutOnlyOptimizeTheBaseTrainsToo) {
  const LoraRun r = train_lora(2, false, /*only_optimize=*/false);
  EXPECT_NE(r.before[1].to_doubles(), r.after[1].to_doubles());
}

// B starts at zero: the first loss is the base model's.
TEST(Lora, AdaptersStartFromTheBaseFunction) {
  auto mc = nn::model_config_named("llama-tiny");
  ASSERT_TRUE(mc.is_ok());
  auto cfg = config_parse(R"({"train_micro_batch_size_per_gpu": 2})", "test", 1);
  ASSERT_TRUE(cfg.is_ok());
  std::vector<float> losses;
  for (bool lora : {false, true}) {
    nn::Transformer model(*mc);
    if (lora) {
      ASSERT_TRUE(tasks::lora_apply(model, {.r = 4, .alpha = 8.0f}).is_ok());
    }
    auto e = initialize(model, *cfg, {.device = Device::cpu(), .seed = 5});
    ASSERT_TRUE(e.is_ok());
    auto loss =
        (*e)->forward(testing::random_ints({2, 16}, 257, 1), testing::random_ints({2, 16}, 257, 2));
    ASSERT_TRUE(loss.is_ok());
    losses.push_back(*loss);
  }
  EXPECT_EQ(losses[0], losses[1]);
}

TEST(Lora, UnknownModuleIsRefusedWithTheModelsModules) {
  auto mc = nn::model_config_named("llama-tiny");
  ASSERT_TRUE(mc.is_ok());
  nn::Transformer model(*mc);
  const Status s = tasks::lora_apply(model, {.r = 4, .modules = {"c_attn"}});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("'c_attn'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("self_attn.q_proj"), std::string::npos) << s.message();
  EXPECT_FALSE(tasks::lora_apply(model, {.r = 0}).is_ok());
  EXPECT_FALSE(tasks::lora_apply(model, {.r = 4, .dropout = 1.0f}).is_ok());
}

// Host copies of every tensor of a safetensors file as f32.
std::map<std::string, std::vector<float>> tensors_of(const std::string& path) {
  std::map<std::string, std::vector<float>> out;
  auto f = ckpt::SafetensorsFile::open(path);
  EXPECT_TRUE(f.is_ok()) << f.status().message();
  if (!f.is_ok()) return out;
  for (const auto& [name, e] : f->tensors()) {
    EXPECT_EQ(e.dtype, DType::f32) << name;
    std::vector<float> v(static_cast<size_t>(e.numel));
    EXPECT_TRUE(f->read(name, 0, e.numel, v.data()).is_ok());
    out[name] = std::move(v);
  }
  return out;
}

TEST(Lora, MergedExportIsWPlusScaledBAAndTheAdapterIsPeftShaped) {
  testing::TempDir tmp;
  (void)train_lora(1, false, /*only_optimize=*/true, tmp.file("ckpt"));
  // The checkpoint's own weights, nothing merged: base and adapters by ZeroTrain's names.
  ASSERT_TRUE(ckpt::consolidate_fp32(tmp.file("ckpt"), tmp.file("fp32"), {}).is_ok());
  auto raw = tensors_of(tmp.file("fp32/model.safetensors"));
  ASSERT_TRUE(ckpt::hf_export(tmp.file("ckpt"), tmp.file("merged"), {}).is_ok());
  auto merged = tensors_of(tmp.file("merged/model.safetensors"));
  auto mc = nn::model_config_named("llama-tiny");
  ASSERT_TRUE(mc.is_ok());
  const int64_t C = mc->hidden, q_rows = int64_t{mc->n_head} * mc->head_dim,
                kv_rows = int64_t{mc->n_kv_head} * mc->head_dim;
  const float scale = 8.0f / 4.0f;
  for (int layer : {0, mc->n_layer - 1}) {
    const std::string p = fmt::format("layers.{}.", layer);
    const auto& qkv = raw.at(p + "self_attn.qkv_proj.weight");
    // q: rows [0, q_rows) with its adapter; k: untouched; v: rows after q and k.
    struct Part {
      const char* name;
      int64_t row0, rows;
      bool adapted;
    };
    for (const Part& part :
         {Part{"q_proj", 0, q_rows, true}, Part{"k_proj", q_rows, kv_rows, false},
          Part{"v_proj", q_rows + kv_rows, kv_rows, true}}) {
      const auto& got = merged.at(fmt::format("model.{}self_attn.{}.weight", p, part.name));
      ASSERT_EQ(static_cast<int64_t>(got.size()), part.rows * C);
      std::vector<float> A, B;
      if (part.adapted) {
        A = raw.at(fmt::format("{}self_attn.{}.lora_A.weight", p, part.name));
        B = raw.at(fmt::format("{}self_attn.{}.lora_B.weight", p, part.name));
        double bnorm = 0;
        for (float b : B) bnorm += std::fabs(b);
        EXPECT_GT(bnorm, 0.0) << "B trained away from zero";
      }
      for (int64_t r = 0; r < part.rows; ++r) {
        for (int64_t c = 0; c < C; ++c) {
          double want = qkv[static_cast<size_t>((part.row0 + r) * C + c)];
          if (part.adapted) {
            double d = 0;
            for (int k = 0; k < 4; ++k)
              d += double{B[static_cast<size_t>(r * 4 + k)]} * A[static_cast<size_t>(k * C + c)];
            want += scale * d;
          }
          ASSERT_NEAR(got[static_cast<size_t>(r * C + c)], want, 1e-6) << part.name << " " << r;
        }
      }
    }
  }
  EXPECT_EQ(merged.count("model.layers.0.self_attn.q_proj.lora_A.weight"), 0u);

  ckpt::HfExportOptions only;
  only.adapter_only = true;
  ASSERT_TRUE(ckpt::hf_export(tmp.file("ckpt"), tmp.file("adapter"), only).is_ok());
  auto adapter = tensors_of(tmp.file("adapter/adapter_model.safetensors"));
  EXPECT_EQ(adapter.size(), static_cast<size_t>(mc->n_layer) * 3 * 2);
  EXPECT_EQ(adapter.at("base_model.model.model.layers.0.mlp.down_proj.lora_B.weight"),
            raw.at("layers.0.mlp.down_proj.lora_B.weight"));
  std::ifstream in(tmp.file("adapter/adapter_config.json"));
  const nlohmann::json config = nlohmann::json::parse(in);
  EXPECT_EQ(config.at("peft_type"), "LORA");
  EXPECT_EQ(config.at("r"), 4);
  EXPECT_EQ(config.at("lora_alpha"), 8.0);
  EXPECT_EQ(config.at("target_modules"),
            nlohmann::json({"self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj"}));
}

// A checkpoint whose unit lists its parameters in another order than this run's (an older
// layout of the adapters) is read by parameter name, not by position: here the saved metadata
// swaps the names of block 0's two A matrices (q_proj's and v_proj's, of one shape), so each
// must come back with the other's saved values, and everything else as saved.
TEST(Lora, CheckpointOfAnotherParameterOrderLoadsByName) {
  testing::TempDir tmp;
  const LoraRun saved = train_lora(0, false, /*only_optimize=*/true, tmp.file("ckpt"));
  const std::string meta_path = tmp.file("ckpt") + "/t/mp_rank_00_model_states.json";
  nlohmann::json meta;
  {
    std::ifstream in(meta_path);
    ASSERT_TRUE(in.good()) << meta_path;
    in >> meta;
  }
  const std::string q = "layers.0.self_attn.q_proj.lora_A.weight",
                    v = "layers.0.self_attn.v_proj.lora_A.weight";
  int64_t q_at = -1, v_at = -1, numel = 0;
  size_t lora0 = 0;
  nlohmann::json& units = meta.at("model").at("units");
  for (size_t u = 0; u < units.size(); ++u) {
    for (auto& p : units[u]["params"]) {
      if (p["name"] == q) {
        p["name"] = v;
        q_at = p["offset"];
        lora0 = u;
        numel = p["shape"][0].get<int64_t>() * p["shape"][1].get<int64_t>();
      } else if (p["name"] == v) {
        p["name"] = q;
        v_at = p["offset"];
      }
    }
  }
  ASSERT_GE(q_at, 0);
  ASSERT_GE(v_at, 0);
  {
    std::ofstream out(meta_path);
    out << meta.dump(1);
  }
  auto cfg = config_parse(R"({"train_micro_batch_size_per_gpu": 2,
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.1}}})", "test", 1);
  ASSERT_TRUE(cfg.is_ok());
  auto mc = nn::model_config_named("llama-tiny");
  ASSERT_TRUE(mc.is_ok());
  nn::Transformer model(*mc);
  ASSERT_TRUE(tasks::lora_apply(model, tiny_lora(/*only_optimize=*/true)).is_ok());
  auto e = initialize(model, *cfg, {.device = Device::cpu(), .seed = 77});
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  auto loaded = (*e)->load_checkpoint(tmp.file("ckpt"));
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  const std::vector<Tensor> now = *(*e)->gather_master();
  ASSERT_EQ(now.size(), saved.after.size());
  for (size_t u = 0; u < now.size(); ++u) {
    const std::vector<double> got = now[u].to_doubles(), want = saved.after[u].to_doubles();
    ASSERT_EQ(got.size(), want.size()) << "unit " << u;
    for (size_t i = 0; i < got.size(); ++i) {
      const int64_t at = static_cast<int64_t>(i);
      size_t from = i;  // where this element's value was saved
      if (u == lora0 && at >= q_at && at < q_at + numel)
        from = static_cast<size_t>(v_at + at - q_at);
      if (u == lora0 && at >= v_at && at < v_at + numel)
        from = static_cast<size_t>(q_at + at - v_at);
      ASSERT_EQ(got[i], want[from]) << "unit " << u << " element " << i;
    }
  }
  const std::vector<double> qv = now[lora0].to_doubles(), sv = saved.after[lora0].to_doubles();
  EXPECT_NE(std::vector<double>(qv.begin() + q_at, qv.begin() + q_at + numel),
            std::vector<double>(sv.begin() + q_at, sv.begin() + q_at + numel))
      << "the swap must be visible";
}

TEST(Lora, ResumingWithOtherAdaptersIsRefused) {
  testing::TempDir tmp;
  (void)train_lora(0, false, /*only_optimize=*/true, tmp.file("ckpt"));
  auto cfg = config_parse(R"({"train_micro_batch_size_per_gpu": 2})", "test", 1);
  ASSERT_TRUE(cfg.is_ok());
  auto mc = nn::model_config_named("llama-tiny");
  ASSERT_TRUE(mc.is_ok());
  nn::Transformer model(*mc);  // no adapters
  auto e = initialize(model, *cfg, {.device = Device::cpu(), .seed = 5});
  ASSERT_TRUE(e.is_ok());
  auto loaded = (*e)->load_checkpoint(tmp.file("ckpt"));
  ASSERT_FALSE(loaded.is_ok());
  EXPECT_NE(loaded.status().message().find("--lora-dim"), std::string::npos)
      << loaded.status().message();
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

// The adapters' gradients do not depend on whether the base is frozen: one SGD step (B's
// gradient flows back through every later block's frozen norms, attention and MLP) moves the
// adapters the same with and without --only-optimize-lora.
TEST(Lora, FreezingTheBaseLeavesTheAdaptersGradientsAlone) {
  auto mc = nn::model_config_named("llama-tiny");
  ASSERT_TRUE(mc.is_ok());
  auto cfg =
      config_parse(R"({"train_micro_batch_size_per_gpu": 2, "zero_allow_untested_optimizer": true,
      "optimizer": {"type": "SGD", "params": {"lr": 0.5}}})",
                   "test", 1);
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
  std::vector<std::vector<double>> adapters;
  for (bool only : {false, true}) {
    nn::Transformer model(*mc);
    const size_t base_units = model.units().size();
    ASSERT_TRUE(tasks::lora_apply(model, {.r = 4, .alpha = 8.0f, .only_optimize = only}).is_ok());
    auto e = initialize(model, *cfg, {.device = Device::cpu(), .seed = 5});
    ASSERT_TRUE(e.is_ok());
    auto loss =
        (*e)->forward(testing::random_ints({2, 16}, 257, 1), testing::random_ints({2, 16}, 257, 2));
    ASSERT_TRUE(loss.is_ok());
    ASSERT_TRUE((*e)->backward(*loss).is_ok());
    ASSERT_TRUE((*e)->step().is_ok());
    std::vector<double> flat;
    auto all = (*e)->gather_master();
    for (size_t u = base_units; u < all->size(); ++u) {
      auto v = all->at(u).to_doubles();
      flat.insert(flat.end(), v.begin(), v.end());
    }
    adapters.push_back(flat);
  }
  EXPECT_EQ(adapters[0], adapters[1]);
}

}  // namespace
}  // namespace zt
