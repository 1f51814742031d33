// DeepSpeed's flops_profiler for the engine: at `profile_step`, every unit's parameters, forward
// FLOPs and forward latency (events on the compute stream around each unit), the step's forward,
// backward and optimizer latency (the wall_clock_breakdown timers), and the model's achieved
// FLOP/s, printed in DeepSpeed's layout (summary, aggregated top modules by depth, detailed per
// module) to the log or `output_file`.
//
// FLOPs follow DeepSpeed's counting rules (profiling/flops_profiler/profiler.py) applied to the
// layers' own shapes rather than to traced torch calls: a linear layer 2 * rows * in * out (bias
// not counted), attention's two batched matmuls 2 * B * heads * T * T * head_dim each (the causal
// mask does not halve them), layer norm 5 flops per element with an affine (RMSNorm: 4), an
// activation or softmax 1 per element, a residual add 1 per element, an embedding lookup 0.
// MACs are half the matmul FLOPs. The backward is counted as twice the forward (DeepSpeed's
// rule), plus one more forward for activation checkpointing's recompute.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zt/core/device.h"
#include "zt/nn/model.h"
#include "zt/nn/models/transformer.h"

namespace zt {

struct LayerCost {
  std::string name;     // "attn.qkv", "attn.scores", "mlp.up", "norm1", ...
  int64_t params = 0;   // parameters the layer owns
  double flops = 0;     // forward FLOPs for the micro-batch
  double macs = 0;      // multiply-accumulates (matmuls only)
};

struct UnitCost {
  std::string name;  // the unit's name ("embedding", "h.3", "head", "lora.3")
  int64_t params = 0;
  double flops = 0, macs = 0;  // sums over its layers
  std::vector<LayerCost> layers;
};

// The forward cost of every unit of `model` for a micro-batch of B rows of T tokens, in unit
// order (passive units: 0 FLOPs, their adapters are counted in the layers that run them).
std::vector<UnitCost> transformer_forward_costs(const nn::Transformer& model, int64_t B, int64_t T);

struct FlopsProfilerOptions {
  int profile_step = 1;
  int module_depth = -1;  // -1: every depth
  int top_modules = 1;
  bool detailed = true;
  std::string output_file;  // empty: the log
};

// Wraps the engine's unit hooks to time each unit's forward with events while profiling.
class UnitForwardTimer : public nn::UnitHooks {
 public:
  UnitForwardTimer(Device device, Stream stream, size_t units);
  void set_inner(nn::UnitHooks* inner) { inner_ = inner; }
  void before_forward(int unit) override;
  void after_forward(int unit) override;
  void before_backward(int unit) override;
  void after_backward(int unit) override;
  // Milliseconds per unit over the forwards since construction (synchronises).
  std::vector<double> unit_ms();

 private:
  Device device_;
  Stream stream_;  // the compute stream
  nn::UnitHooks* inner_ = nullptr;
  std::vector<EventSpans> spans_;  // per unit
};

struct FlopsProfileInput {
  std::string model_name;
  std::vector<UnitCost> units;      // per micro-batch
  std::vector<double> unit_fwd_ms;  // summed over the step's micro-batches
  int micro_steps = 1;              // micro-batches in the profiled step
  int world_size = 1;
  int64_t micro_batch = 1;          // rows per GPU per micro-step
  double fwd_ms = 0, bwd_ms = 0, step_ms = 0;  // the step's (all micro-steps)
  int64_t step = 0;
  bool recompute = false;  // activation checkpointing: the forward runs twice
};

// DeepSpeed's report as text.
std::string flops_profile_report(const FlopsProfileInput& in, const FlopsProfilerOptions& o);

// "336.23 M", "3139.93 G", "81.9 T": DeepSpeed's number formatting.
std::string flops_number(double v, const std::string& unit = "");

}  // namespace zt
