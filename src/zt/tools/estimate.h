// `zt estimate`: how much memory training a model needs, before a GPU is rented. Two answers:
//
//  1. DeepSpeed's own estimators, the same numbers and table as
//     estimate_zero2_model_states_mem_needs_all_cold (stage_1_and_2.py) and
//     estimate_zero3_model_states_mem_needs_all_cold (stage3.py): model states only, with their
//     1.5x host buffer factor (estimate_deepspeed.cc).
//  2. ZeroTrain's prediction of the peak of its caching allocator on each GPU for one training
//     step of a micro-batch (estimate_walk.cc): the model states as the engine itself predicts
//     them (zero::predict_state_bytes), plus every tensor the forward keeps for backward, the
//     temporaries of the worst moment, stage-3 gathered units, gradient buckets and the batch,
//     found by replaying the allocations of the transformer's units and of the ZeRO hooks in
//     order (sizes rounded as the allocator rounds them). docs/estimate.md has the formulas,
//     what is left out, and the accuracy measured against real peaks.
//
// Assumes: causal-LM (or masked-LM) training without padding masks, as `zt train` pretrains; the
// walk mirrors nn/models/transformer.cc, nn/layers/*.cc, nn/model.cc and zero/zero_state.cc, and
// tests/unit/tools/estimate_test.cc holds it to peaks measured on the CPU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "zt/core/status.h"
#include "zt/nn/models/transformer.h"
#include "zt/runtime/config.h"
#include "zt/zero/zero_state.h"

namespace zt::tools {

// ---- DeepSpeed's estimators

struct DeepSpeedRow {
  bool offload_param = false;  // stage 3 only
  bool offload_optimizer = false;
  bool zero_init = false;  // stage 3 only
  int64_t cpu_bytes = 0;   // DeepSpeed's "per CPU": host memory of one node
  int64_t gpu_bytes = 0;   // per GPU
};

struct DeepSpeedTable {
  int stage = 2;  // 2: estimate_zero2_*, 3: estimate_zero3_*
  int64_t total_params = 0;
  int64_t largest_layer_params = 0;  // stage 3 only
  int gpus_per_node = 1;
  int nodes = 1;
  std::vector<DeepSpeedRow> rows{};  // in DeepSpeed's order
};

// Rows of estimate_zero2_model_states_mem_needs: offload_optimizer cpu, then none.
DeepSpeedTable deepspeed_zero2_estimate(int64_t total_params, int gpus_per_node, int nodes,
                                        double additional_buffer_factor = 1.5);
// Rows of estimate_zero3_model_states_mem_needs: (offload_param, offload_optimizer) = (cpu, cpu),
// (none, cpu), (none, none), each with zero_init 1 then 0.
DeepSpeedTable deepspeed_zero3_estimate(int64_t total_params, int64_t largest_layer_params,
                                        int gpus_per_node, int nodes,
                                        double additional_buffer_factor = 1.5);
// What DeepSpeed's *_all_cold prints, line for line ("  per CPU  |  per GPU |   Options", ...).
std::string deepspeed_table_text(const DeepSpeedTable& t);
// DeepSpeed's option text of a row: "offload_param=cpu , offload_optimizer=cpu , zero_init=1".
std::string deepspeed_row_options(const DeepSpeedTable& t, const DeepSpeedRow& r);

// What DeepSpeed's model_to_params would count on the Hugging Face model of `model`: every
// parameter once (tied tables once), without ZeroTrain's vocabulary padding rows, and the largest
// torch module's own parameters (an embedding, a linear module with its bias; GPT-2's c_attn is one
// module, the other families' q/k/v and gate/up are separate ones that ZeroTrain fuses).
struct DeepSpeedParamCounts {
  int64_t total = 0;
  int64_t largest_layer = 0;
};
DeepSpeedParamCounts deepspeed_param_counts(const nn::Transformer& model);

// ---- ZeroTrain's prediction

// The device the engine would train on: a GPU (the compute dtype is the training precision,
// fused attention where it applies, the caching allocator's rounding) or the CPU (f32 compute,
// unfused attention, 64-byte rounding: what the CPU tests measure).
enum class EstimateDevice : unsigned char { kCuda, kCpu };
enum class Checkpointing : unsigned char { kOff, kOn };

struct TrainShape {
  int64_t micro_batch = 1;
  int64_t seq_len = 0;
  Checkpointing checkpointing = Checkpointing::kOff;
  bool keep_activations = false;  // EngineOptions::keep_activations
};

// The ZeroOptions an engine on `device` builds from `config` (runtime/engine.h's
// zero_options_from_config).
zero::ZeroOptions estimate_zero_options(const DeepSpeedConfig& config, EstimateDevice device);

// Bytes live at the moment of the peak, by what they are.
struct PeakParts {
  int64_t activations = 0;  // what forward keeps for backward (block inputs when checkpointing)
  int64_t temporaries = 0;  // a unit's temporaries and gradients in flight at that moment
  int64_t gathered = 0;     // stage 3: gathered compute copies (the current unit and prefetches)
  int64_t gradients = 0;    // stages 2-3: full gradients waiting in a bucket, reduce outputs
  int64_t batch = 0;        // tokens, targets, per-token losses
};

struct MemoryPrediction {
  bool flash = false;            // the fused attention runs (no (T, T) probabilities kept)
  zero::ModelStateBytes states;  // zero::predict_state_bytes, the engine's own accounting
  int64_t state_rounding = 0;    // what the allocator's rounding adds to the state tensors
  int64_t model_buffers = 0;     // rotary tables, position ids, the engine's scalars
  PeakParts at_peak;
  std::string peak_at;         // where in the step the peak falls ("backward of block 3")
  int64_t peak_allocated = 0;  // the caching allocator's peak_allocated_bytes for one step
  int64_t workspace = 0;       // cuBLAS workspace: cudaMalloc'ed outside the caching allocator
  // Host memory per rank: offloaded master weights and optimizer state, the offload pipeline's
  // page-locked staging slots, and block inputs kept on the host (cpu_checkpointing).
  int64_t host_state = 0, host_staging = 0, host_checkpoints = 0;
  int64_t device_total() const { return peak_allocated + workspace; }
  int64_t host_total() const { return host_state + host_staging + host_checkpoints; }
};

// One training step (forward, backward, step) of `model` with `config` on `world` ranks, as a
// rank of that job would allocate it.
MemoryPrediction predict_memory(nn::Transformer& model, const DeepSpeedConfig& config,
                                EstimateDevice device, int world, const TrainShape& shape);

// Memory outside the caching allocator that a GPU process also needs (CUDA context, kernels,
// NCCL's buffers): held back when asking whether a micro-batch fits.
constexpr int64_t kCudaReserveBytes = int64_t{1} << 30;

// The largest micro-batch whose predicted device_total() + kCudaReserveBytes fits in
// `device_bytes`; 0 when not even one sequence fits.
int64_t largest_micro_batch(nn::Transformer& model, const DeepSpeedConfig& config,
                            EstimateDevice device, int world, int64_t seq_len,
                            Checkpointing checkpointing, int64_t device_bytes,
                            bool keep_activations = false);

// ---- the whole of `zt estimate`

struct EstimateRequest {
  std::string model;  // a named size or a Hugging Face model directory
  int gpus_per_node = 1;
  int nodes = 1;
  std::optional<int> stage;               // default: the config's, else 0
  std::optional<bool> offload_optimizer;  // default: the config's
  std::optional<int64_t> micro_batch;     // default: the config's, else 1
  std::optional<int64_t> seq_len;         // default: as zt train (context up to 2048)
  std::string config_path;                // ds_config.json; empty: bf16, AdamW, defaults
  std::optional<std::string> dtype;       // f32 | bf16 | fp16: overrides the config's
  Checkpointing checkpointing = Checkpointing::kOff;
  bool keep_activations = false;  // zt train --keep-activations
  int lora_dim = 0;               // 0: no adapters
  float lora_dropout = 0.0f;
  std::vector<std::string> lora_modules;
  bool only_optimize_lora = false;
  EstimateDevice device = EstimateDevice::kCuda;
  int64_t device_bytes = 0;  // the GPU's memory (required > 0)
  std::string
      device_name;  // where device_bytes came from ("NVIDIA H100 80GB HBM3", "--gpu-memory")
};

struct StageFit {
  int stage = 0;
  bool offload_optimizer = false;
  int64_t without_checkpointing = 0;  // largest micro-batch
  int64_t with_checkpointing = 0;
};

struct EstimateReport {
  EstimateRequest request;
  std::string model_name;
  int64_t params = 0;          // ZeroTrain's parameters (padded vocabulary rows included)
  int64_t trained_params = 0;  // not frozen
  DeepSpeedParamCounts ds_counts;
  DeepSpeedTable zero2, zero3;
  int stage = 0;
  bool offload_optimizer = false;
  std::string dtype;
  int64_t micro_batch = 1, seq_len = 0;
  bool cpu_checkpointing = false;
  MemoryPrediction without_checkpointing, with_checkpointing;
  std::vector<StageFit> fits;
};

// Opens the model, applies LoRA, resolves the config with the overrides and predicts; errors name
// the flag or file at fault.
Result<EstimateReport> estimate_run(const EstimateRequest& request);
std::string estimate_text(const EstimateReport& r);
nlohmann::json estimate_json(const EstimateReport& r);

}  // namespace zt::tools
