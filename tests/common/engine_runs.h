// A tiny GPT-2 trained through the public engine API on the CPU, for tests that compare two
// configurations run by run (the oracle is the other run): the losses of every micro-step, the
// gathered fp32 master weights at the end, the model-state bytes and the optimizer sub-groups of
// the last step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "zt/nn/models/gpt2.h"
#include "zt/nn/models/transformer.h"
#include "zt/runtime/engine.h"

namespace zt::testing {

// 2 layers, 2 heads, width 16, vocabulary 23 (padded to 64), sequence 8.
nn::Gpt2Config tiny_gpt2_config();
// llama-tiny with 2 layers and a vocabulary of `vocab` tokens (the PPO tests' actor and critic).
nn::TransformerConfig tiny_llama_config(int vocab);
// The GPU tests' model: `n_layer` layers, 4 heads, width 64, vocabulary 97 (padded to 128),
// sequence 32.
nn::Gpt2Config small_gpt2_config(int n_layer);

struct EngineRun {
  std::vector<double> losses;        // one per micro-step
  std::vector<double> master;        // every unit's fp32 master weights, gathered
  std::vector<int64_t> step_groups;  // Engine::last_step_groups() after each micro-step
  zero::ModelStateBytes bytes;
  int64_t own_master_elements = 0;  // this rank's master elements (all units)
};

// Every unit's fp32 master weights, gathered and concatenated (collective).
std::vector<double> master_flat(Engine& e);

// Parses `json` for one process, initialises a tiny GPT-2 on the CPU (seed `seed`), and runs
// `micro_steps` forward/backward/step calls on batches (2, 8) of random tokens drawn from
// `data_seed` + step. Failures are test failures; the run then stops where it failed.
EngineRun train_tiny_gpt2(const std::string& json, int micro_steps, uint64_t seed,
                          uint64_t data_seed);

// A training micro-batch of random tokens and targets (seeds 1 and 2) for driving a model's
// forward and backward directly on the CPU in f32, with the context that points at them (so
// it is built in place and neither copied nor moved).
struct CpuTrainBatch {
  CpuTrainBatch(const nn::Gpt2Config& c, int64_t batch, int64_t seq);
  CpuTrainBatch(const CpuTrainBatch&) = delete;
  CpuTrainBatch& operator=(const CpuTrainBatch&) = delete;
  Tensor tokens, targets;
  nn::Context ctx;
};

}  // namespace zt::testing
