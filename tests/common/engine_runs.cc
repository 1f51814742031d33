// See engine_runs.h.
#include "common/engine_runs.h"

#include <gtest/gtest.h>

#include "common/test_util.h"
#include "zt/nn/models/registry.h"

namespace zt::testing {

nn::TransformerConfig tiny_llama_config(int vocab) {
  auto c = nn::model_config_named("llama-tiny");
  EXPECT_TRUE(c.is_ok()) << c.status().message();
  nn::TransformerConfig tc = *c;
  tc.n_layer = 2;
  tc.vocab_size = vocab;
  tc.padded_vocab_size = nn::padded_vocab(vocab);
  return tc;
}

nn::Gpt2Config tiny_gpt2_config() {
  return {.n_layer = 2,
          .n_head = 2,
          .n_embd = 16,
          .vocab_size = 23,
          .padded_vocab_size = 64,
          .max_seq_len = 8};
}

nn::Gpt2Config small_gpt2_config(int n_layer) {
  return {.n_layer = n_layer,
          .n_head = 4,
          .n_embd = 64,
          .vocab_size = 97,
          .padded_vocab_size = 128,
          .max_seq_len = 32};
}

EngineRun train_tiny_gpt2(const std::string& json, int micro_steps, uint64_t seed,
                          uint64_t data_seed) {
  EngineRun out;
  auto cfg = config_parse(json, "test", 1);
  EXPECT_TRUE(cfg.is_ok()) << cfg.status().message();
  if (!cfg.is_ok()) return out;
  nn::Gpt2 model(tiny_gpt2_config());
  auto e = initialize(model, *cfg, {.device = Device::cpu(), .seed = seed});
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  if (!e.is_ok()) return out;
  out.bytes = (*e)->model_state_bytes();
  for (auto& u : (*e)->zero_state().units()) out.own_master_elements += u.master.numel();
  for (int s = 0; s < micro_steps; ++s) {
    auto loss = (*e)->forward(random_ints({2, 8}, 23, data_seed + 2 * s),
                              random_ints({2, 8}, 23, data_seed + 2 * s + 1));
    EXPECT_TRUE(loss.is_ok());
    if (!loss.is_ok()) return out;
    EXPECT_TRUE((*e)->backward(*loss).is_ok());
    EXPECT_TRUE((*e)->step().is_ok());
    out.losses.push_back(*loss);
    out.step_groups.push_back((*e)->last_step_groups());
  }
  out.master = master_flat(**e);
  return out;
}

std::vector<double> master_flat(Engine& e) {
  std::vector<double> out;
  auto full = e.gather_master();
  EXPECT_TRUE(full.is_ok()) << full.status().message();
  if (!full.is_ok()) return out;
  for (auto& t : *full) {
    auto v = t.to_doubles();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

CpuTrainBatch::CpuTrainBatch(const nn::Gpt2Config& c, int64_t batch, int64_t seq)
    : tokens(random_ints({batch, seq}, c.vocab_size, 1)),
      targets(random_ints({batch, seq}, c.vocab_size, 2)),
      ctx{.device = Device::cpu(),
          .stream = {},
          .compute_dtype = DType::f32,
          .mode = nn::Mode::kTrain,
          .targets = &targets,
          .dloss = 1.0f / static_cast<float>(batch * seq)} {}

}  // namespace zt::testing
