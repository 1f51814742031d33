// Optimizers over the unit-flat fp32 master weights: Adam/AdamW (DeepSpeed's math), SGD (torch),
// Lamb (DeepSpeed FusedLamb). One call steps every chunk through the multi-tensor kernels of
// kernels/ops.h; the 16-bit compute copy is written in the same pass when there is one.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "zt/kernels/ops.h"

namespace zt::optim {

enum class OptimizerKind : unsigned char { kAdam, kSgd, kLamb };

struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::kAdam;
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  kernels::AdamMode adam_mode = kernels::AdamMode::kAdamW;
  kernels::BiasCorrection bias_correction = kernels::BiasCorrection::kOn;
  double momentum = 0.0, dampening = 0.0;
  bool nesterov = false;
  double max_coeff = 10.0, min_coeff = 0.01;
};

// fp32 state buffers per parameter element.
int optimizer_state_count(const OptimizerSpec& spec);
std::string optimizer_name(const OptimizerSpec& spec);
// The names of the state buffers, in order, as torch's optimizers name them in a state dict
// (checkpoints use them): Adam/Lamb exp_avg, exp_avg_sq; SGD with momentum momentum_buffer.
std::vector<std::string> optimizer_state_names(const OptimizerSpec& spec);

// Chunk splitting for stepping in sub-groups (zero_optimization.sub_group_size, stage 3): groups of
// consecutive chunks of at most `limit` elements each, in order. Elementwise optimizers (Adam,
// SGD: `Split::kAnywhere`) have chunks cut at group boundaries; Lamb (`Split::kWholeChunks`)
// keeps every chunk whole, and a chunk larger than `limit` forms a group of its own.
enum class Split : unsigned char { kAnywhere, kWholeChunks };
std::vector<std::vector<kernels::OptimChunk>> split_into_groups(
    std::span<const kernels::OptimChunk> chunks, int64_t limit, Split split);

// Per-step values that schedulers change.
struct StepValues {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  float grad_scale = 1.0f;  // gradients are multiplied by this first
  // When set, a float on the optimizer's device used instead of grad_scale (kernels::AdamArgs).
  const float* grad_scale_at = nullptr;
  // Adam on a GPU, when set: kernels::AdamArgs::scalars_at (the step's lr and bias corrections
  // from device memory: a CUDA graph's replays).
  const float* scalars_at = nullptr;
};

class Optimizer {
 public:
  explicit Optimizer(const OptimizerSpec& spec) : spec_(spec) {}
  const OptimizerSpec& spec() const { return spec_; }
  int64_t steps() const { return steps_; }
  void set_steps(int64_t steps) { steps_ = steps; }
  // Applies one step to every chunk (all on `device`). Lamb expects one chunk per parameter
  // tensor (its trust ratio is per tensor); Adam and SGD take any split.
  void step(const StepValues& v, std::span<const kernels::OptimChunk> chunks, Device device,
            const Stream& s);
  // The same step in parts (ZeRO-Offload steps its chunks piece by piece as their gradients
  // arrive on the host): begin_step() once, then apply() on every chunk exactly once.
  void begin_step() { ++steps_; }
  // Adam: what the next step (steps() + 1) puts behind StepValues::scalars_at for `v`.
  std::array<float, 3> next_adam_scalars(const StepValues& v) const;
  void apply(const StepValues& v, std::span<const kernels::OptimChunk> chunks, Device device,
             const Stream& s) const;

 private:
  OptimizerSpec spec_;
  int64_t steps_ = 0;
};

}  // namespace zt::optim
