// Every family against transformers (tests/fixtures/hf, made by make_fixtures.py on the same
// weights and inputs): the logits and the loss of each fixture model directory loaded as a user
// would load it (single file, shards with an index, bf16 on disk), in f32 to 1e-5. Then the
// loader's errors for broken directories: one line naming the file and the tensor or key.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/test_util.h"
#include "zt/checkpoint/safetensors.h"
#include "zt/core/file_io.h"
#include "zt/checkpoint/hf_weights.h"
#include "zt/zero/zero_state.h"

namespace zt::ckpt {
namespace {
using namespace zt::nn;  // the models these files hold
namespace fs = std::filesystem;

const std::string kFixtures = ZT_SOURCE_DIR "/tests/fixtures/hf/";

Tensor read_tensor(const SafetensorsFile& f, const std::string& name) {
  auto e = f.find(name);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  Tensor t = Tensor::empty(Shape((*e)->shape), (*e)->dtype);
  EXPECT_TRUE(f.read(name, 0, (*e)->numel, t.data()).is_ok());
  return t;
}

// Binds every unit to an f32 buffer holding its initial values (read from the weight files).
struct Bound {
  std::vector<Tensor> values, grads;
};
Bound bind_initial(Model& model) {
  Bound b;
  for (auto& unit : model.units()) {
    b.values.push_back(Tensor::empty({unit->flat_numel()}, DType::f32));
    b.grads.push_back(Tensor::zeros({unit->flat_numel()}, DType::f32));
    zero::init_unit_params(*unit, b.values.back().data<float>(), 1);
    unit->bind(b.values.back(), b.grads.back());
  }
  return b;
}

struct FixtureResult {
  std::vector<double> logits, expected_logits;
  double loss = 0, expected_loss = 0;
};

FixtureResult run_fixture(const std::string& name) {
  const std::string dir = kFixtures + name;
  auto loaded = load_hf_model(dir);
  if (!loaded.is_ok()) {
    ADD_FAILURE() << loaded.status().message();
    return {};
  }
  EXPECT_TRUE(loaded->has_weights);
  Transformer& model = *loaded->model;
  Bound bound = bind_initial(model);
  auto ex = SafetensorsFile::open(dir + "/expected.safetensors");
  if (!ex.is_ok()) {
    ADD_FAILURE() << ex.status().message();
    return {};
  }
  Tensor ids = read_tensor(*ex, "input_ids");
  Tensor labels = read_tensor(*ex, "labels");
  Tensor expected = read_tensor(*ex, "logits");
  const int64_t B = ids.size(0), T = ids.size(1);
  Context ctx;
  ctx.mode = Mode::kEval;
  Tensor mask, types;
  if (ex->tensors().count("token_type_ids") != 0) {
    mask = read_tensor(*ex, "attention_mask");
    types = read_tensor(*ex, "token_type_ids");
    ctx.attention_mask = &mask;
    ctx.token_types = &types;
  }
  FixtureResult r;
  Tensor logits = model.forward(ctx, ids);
  const int64_t Vp = logits.size(2), V = expected.size(2);
  const std::vector<double> all = logits.to_doubles();
  for (int64_t i = 0; i < B * T; ++i) {
    for (int64_t v = 0; v < V; ++v) r.logits.push_back(all[i * Vp + v]);
  }
  r.expected_logits = expected.to_doubles();
  // transformers' loss: causal LM predicts labels[t + 1] at t; MLM predicts labels[t] at t;
  // -100 does not count; the mean is over the counted positions.
  const bool causal = model.transformer_config().task == Task::kCausalLM;
  Tensor targets = Tensor::empty({B, T}, DType::i32);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int32_t* l = labels.data<int32_t>() + b * T;
      targets.data<int32_t>()[b * T + t] = causal ? (t + 1 < T ? l[t + 1] : -100) : l[t];
    }
  }
  ctx.targets = &targets;
  const std::vector<double> losses = model.forward(ctx, ids).to_doubles();
  double sum = 0;
  int64_t counted = 0;
  for (int64_t i = 0; i < B * T; ++i) {
    if (targets.data<int32_t>()[i] >= 0) {
      sum += losses[i];
      ++counted;
    }
  }
  r.loss = sum / static_cast<double>(counted);
  r.expected_loss = read_tensor(*ex, "loss").to_doubles()[0];
  return r;
}

class HfFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(HfFixture, LogitsAndLossEqualTransformers) {
  FixtureResult r = run_fixture(GetParam());
  ASSERT_FALSE(r.logits.empty());
  ASSERT_EQ(r.logits.size(), r.expected_logits.size());
  double scale = 0;
  for (double v : r.expected_logits) scale = std::max(scale, std::abs(v));
  testing::expect_close(r.logits, r.expected_logits, 1e-5 * scale, 1e-5, "logits");
  EXPECT_NEAR(r.loss, r.expected_loss, 1e-5 * std::abs(r.expected_loss)) << "loss";
}

INSTANTIATE_TEST_SUITE_P(Families, HfFixture,
                         ::testing::Values("gpt2", "llama", "llama_tied_mqa", "llama_bf16",
                                           "llama_sharded", "qwen2", "opt", "opt_postln",
                                           "bert_mlm"),
                         [](const auto& info) { return std::string(info.param); });

// A copy of a fixture directory to break.
std::string copy_fixture(const testing::TempDir& tmp, const std::string& name) {
  static int copies = 0;
  const fs::path to = tmp.path() / fmt::format("{}_{}", name, copies++);
  fs::copy(kFixtures + name, to, fs::copy_options::recursive);
  return to.string();
}

void edit_json(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in);
  edit(j);
  std::ofstream(path) << j.dump(2);
}

std::string load_error(const std::string& dir) {
  auto r = load_hf_model(dir);
  EXPECT_FALSE(r.is_ok());
  return r.is_ok() ? "" : r.status().message();
}

TEST(HfLoader, BrokenDirectoriesAreOneLineNamingTheFileAndTensor) {
  testing::TempDir tmp;
  {  // a shard the index names is missing
    const std::string d = copy_fixture(tmp, "llama_sharded");
    fs::remove(fs::path(d) / "model-00002-of-00007.safetensors");
    const std::string e = load_error(d);
    EXPECT_NE(e.find("model-00002-of-00007.safetensors"), std::string::npos) << e;
  }
  {  // a truncated weight file
    const std::string d = copy_fixture(tmp, "gpt2");
    const fs::path f = fs::path(d) / "model.safetensors";
    fs::resize_file(f, fs::file_size(f) - 100);
    const std::string e = load_error(d);
    EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
  }
  {  // a config that does not match the weights: wider than the tensors
    const std::string d = copy_fixture(tmp, "llama");
    edit_json(d + "/config.json", [](nlohmann::json& j) { j["intermediate_size"] = 128; });
    const std::string e = load_error(d);
    EXPECT_NE(e.find("mlp.gate_proj.weight"), std::string::npos) << e;
    EXPECT_NE(e.find("shape"), std::string::npos) << e;
  }
  {  // fewer layers in the config than in the files
    const std::string d = copy_fixture(tmp, "opt");
    edit_json(d + "/config.json", [](nlohmann::json& j) { j["num_hidden_layers"] = 1; });
    const std::string e = load_error(d);
    EXPECT_NE(e.find("layers.1."), std::string::npos) << e;
  }
  {  // an unknown family and an unsupported key are errors naming the key
    const std::string d = copy_fixture(tmp, "qwen2");
    edit_json(d + "/config.json", [](nlohmann::json& j) {
      j["use_sliding_window"] = true;
      j["sliding_window"] = 16;
    });
    EXPECT_NE(load_error(d).find("use_sliding_window"), std::string::npos);
    edit_json(d + "/config.json", [](nlohmann::json& j) { j["model_type"] = "mamba"; });
    EXPECT_NE(load_error(d).find("model_type"), std::string::npos);
  }
  {  // pickle weights: told how to convert
    const std::string d = copy_fixture(tmp, "gpt2");
    fs::remove(fs::path(d) / "model.safetensors");
    std::ofstream(d + "/pytorch_model.bin") << "x";
    EXPECT_NE(load_error(d).find("safetensors"), std::string::npos);
  }
}

TEST(HfLoader, ConfigWithoutWeightsInitialisesByTheFamilyRule) {
  testing::TempDir tmp;
  const std::string d = copy_fixture(tmp, "llama");
  fs::remove(fs::path(d) / "model.safetensors");
  auto r = load_hf_model(d);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_FALSE(r->has_weights);
  for (auto& unit : r->model->units()) {
    for (Param* p : unit->params()) EXPECT_EQ(p->source, nullptr) << p->name;
  }
}

}  // namespace
}  // namespace zt::ckpt
