// The FLOPs profiler (runtime/flops_profiler.h) against hand counts: a transformer's matmul
// FLOPs are 2 x rows x (every block weight's elements) + the attention's two (T x T) products per
// head + the LM head over the padded vocabulary, computed here from the model's config and
// parameter shapes alone; the elementwise rest is small (norms, activations, residuals) and
// bounded. And the engine's report at profile_step: its parameter count is the model's, its unit
// latencies add up to no more than the forward it times.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "common/test_util.h"
#include "zt/nn/models/registry.h"
#include "zt/runtime/config.h"
#include "zt/runtime/engine.h"
#include "zt/runtime/flops_profiler.h"
#include "zt/tasks/lora.h"

namespace zt {
namespace {

struct Hand {
  double matmul = 0;  // FLOPs
  int64_t params = 0;
};

// 2 N (in x out) for every 2-D block weight, the attention products, the LM head.
Hand hand_count(nn::Transformer& m, int64_t B, int64_t T) {
  const nn::TransformerConfig& c = m.transformer_config();
  const double N = static_cast<double>(B * T);
  Hand h;
  for (auto& u : m.units()) {
    for (nn::Param* p : u->params()) {
      h.params += p->numel();
      const bool block = u->name() != "embedding" && u->name() != "head";
      if (block && p->shape.ndim() == 2) h.matmul += 2.0 * N * static_cast<double>(p->numel());
    }
  }
  h.matmul += c.n_layer * 2 * (2.0 * B * c.n_head * T * T * c.head_dim);
  h.matmul += 2.0 * N * c.embed_dim * c.padded_vocab_size;
  return h;
}

void check_model(const char* name) {
  SCOPED_TRACE(name);
  auto mc = nn::model_config_named(name);
  ASSERT_TRUE(mc.is_ok());
  nn::Transformer model(*mc);
  const int64_t B = 3, T = 40;
  const Hand want = hand_count(model, B, T);
  double macs = 0, flops = 0;
  int64_t params = 0;
  for (const UnitCost& u : transformer_forward_costs(model, B, T)) {
    macs += u.macs;
    flops += u.flops;
    params += u.params;
  }
  EXPECT_DOUBLE_EQ(2 * macs, want.matmul);
  EXPECT_EQ(params, want.params);
  // Elementwise work: a few FLOPs per activation element, well under the matmuls' share here.
  EXPECT_GT(flops, want.matmul);
  EXPECT_LT(flops, 1.05 * want.matmul);
}

TEST(FlopsProfiler, Gpt2MatmulFlopsEqualTheHandCount) { check_model("gpt2-tiny"); }
TEST(FlopsProfiler, LlamaMatmulFlopsEqualTheHandCount) { check_model("llama-tiny"); }

// LoRA adapters add 2 N r (in + rows) per adapter, counted in the layer that runs them.
TEST(FlopsProfiler, LoraAdaptersAreCounted) {
  auto mc = nn::model_config_named("llama-tiny");
  ASSERT_TRUE(mc.is_ok());
  nn::Transformer plain(*mc), lora(*mc);
  ASSERT_TRUE(tasks::lora_apply(lora, {.r = 4, .modules = {"q_proj"}}).is_ok());
  double a = 0, b = 0;
  for (const UnitCost& u : transformer_forward_costs(plain, 2, 8)) a += u.macs;
  for (const UnitCost& u : transformer_forward_costs(lora, 2, 8)) b += u.macs;
  const double q_rows = mc->n_head * mc->head_dim;
  EXPECT_DOUBLE_EQ(b - a, mc->n_layer * 16.0 * 4 * (mc->hidden + q_rows));
}

TEST(FlopsProfiler, EngineReportsAtTheProfileStep) {
  testing::TempDir tmp;
  const std::string out = tmp.file("profile.txt");
  auto cfg = config_parse(fmt::format(R"({{"train_micro_batch_size_per_gpu": 2,
      "gradient_accumulation_steps": 2, "flops_profiler": {{"enabled": true, "profile_step": 1,
      "output_file": "{}"}}}})",
                                      out),
                          "test", 1);
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
  EXPECT_TRUE(cfg->wall_clock_breakdown);  // DeepSpeed: forced on by the profiler
  auto mc = nn::model_config_named("gpt2-tiny");
  ASSERT_TRUE(mc.is_ok());
  nn::Transformer model(*mc);
  auto e = initialize(model, *cfg, {.device = Device::cpu(), .seed = 1});
  ASSERT_TRUE(e.is_ok());
  for (int m = 0; m < 4; ++m) {
    auto loss = (*e)->forward(testing::random_ints({2, 32}, 257, m),
                              testing::random_ints({2, 32}, 257, 10 + m));
    ASSERT_TRUE(loss.is_ok());
    ASSERT_TRUE((*e)->backward(*loss).is_ok());
    ASSERT_TRUE((*e)->step().is_ok());
    // Not before the profiled step (the second) is done.
    EXPECT_EQ(std::filesystem::exists(out), m >= 3) << "micro-step " << m;
  }
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  const std::string r = text.str();
  EXPECT_NE(r.find("Profile Summary at step 1"), std::string::npos) << r;
  EXPECT_TRUE(std::regex_search(
      r, std::regex("params per GPU: +" + flops_number(static_cast<double>(model.num_params())))));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r, m, std::regex(R"(fwd latency:\s+([0-9.]+) (ms|us))")));
  const double fwd_ms = std::stod(m[1]) * (m[2] == "us" ? 1e-3 : 1.0);
  ASSERT_TRUE(std::regex_search(r, m, std::regex(R"(depth 0:\n.*\n.*\n    fwd latency - \{'gpt2': '([0-9.]+) (ms|us)'\})")));
  const double units_ms = std::stod(m[1]) * (m[2] == "us" ? 1e-3 : 1.0);
  EXPECT_GT(units_ms, 0.0);
  EXPECT_LE(units_ms, fwd_ms * 1.01 + 0.01);
  // Every unit has its line in the detailed profile, with the model's parameter count at the top.
  EXPECT_NE(r.find("(head): "), std::string::npos);
  EXPECT_NE(r.find(fmt::format("{} Params, 100.00% Params", flops_number(
                                   static_cast<double>(model.num_params())))),
            std::string::npos);
}

}  // namespace
}  // namespace zt
