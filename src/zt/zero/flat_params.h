// The unit-flat parameter store (DESIGN.md "Flat, sharded parameters"): for every unit one flat
// buffer of the parameters' compute copy, one of gradients, the fp32 master weights and the
// optimizer state. Each flat size is padded to a multiple of world_size * kShardAlignElems so rank
// r owns the equal chunk r of every unit. This first version keeps everything whole on every rank
// (stage 0, one process); the ZeRO stages shard the same layout.
#pragma once

#include <cstdint>
#include <vector>

#include "zt/core/tensor.h"
#include "zt/nn/model.h"

namespace zt::zero {

constexpr int64_t kShardAlignElems = 64;

enum class MasterCopy : unsigned char {
  kShared,    // the compute copy is fp32 and is the master itself
  kSeparate,  // fp32 master weights beside a 16-bit (or rounded) compute copy
};

struct FlatParamsOptions {
  Device device = Device::cpu();
  DType compute_dtype = DType::f32;  // dtype of the compute copy (kernels' dtype)
  MasterCopy master = MasterCopy::kShared;
  int optimizer_states = 2;  // fp32 buffers per element (Adam: 2, SGD with momentum: 1)
  int world_size = 1;
};

struct UnitBuffers {
  int64_t numel = 0;         // unpadded flat size (alignment gaps included)
  int64_t padded_numel = 0;  // multiple of world_size * kShardAlignElems
  Tensor value;              // (padded) compute dtype
  Tensor grad;               // (padded) accum dtype
  Tensor master;             // (padded) f32; aliases `value` when MasterCopy::kShared
  std::vector<Tensor> state; // optimizer_states x (padded) f32, zero-initialised
};

// Bytes of model state held by this process, by kind (what each ZeRO stage saves).
struct ModelStateBytes {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t master = 0;
  int64_t optimizer = 0;
  int64_t total() const { return params + grads + master + optimizer; }
};

class FlatParams {
 public:
  // Allocates the buffers, initialises parameters with GPT-2-style specs from each Param (the
  // same values for any world size or device: each parameter draws from its own seeded stream),
  // and binds every Param's value/grad views.
  FlatParams(nn::Model& model, const FlatParamsOptions& options, uint64_t seed);
  std::vector<UnitBuffers>& units() { return units_; }
  const FlatParamsOptions& options() const { return options_; }
  ModelStateBytes state_bytes() const;
  void zero_grads(const Stream& s);
  // Copies the master weights into the compute copy (casting; on the CPU with a 16-bit
  // compute_dtype the values are rounded to it and kept as f32). No-op when shared.
  void refresh_compute_copy(DType round_to, const Stream& s);

 private:
  FlatParamsOptions options_;
  std::vector<UnitBuffers> units_;
};

// Fills `out` (host f32, numel = unit flat size) with the initial values of the unit's params.
void init_unit_params(nn::Unit& unit, float* out, uint64_t seed);

}  // namespace zt::zero
