// Helpers of the CUDA-vs-CPU op tests (tests/gpu): inputs that every compute dtype represents
// exactly, copies onto the GPU in a given dtype, and per-dtype tolerances. With exact inputs the
// f32 CPU reference (kernels/cpu, the specification) sees the same numbers as the bf16/f16 GPU
// run, so one reference serves every dtype and the tolerance covers only the GPU's own roundings.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/test_util.h"
#include "zt/core/tensor.h"

namespace zt::testing {

// Uniform values k/64 * scale, k in [-64, 64]: at most 7 significant bits, so exact in bf16, f16
// and f32 as long as `scale` is a power of two (and the result stays in f16's range).
inline Tensor exact_tensor(const Shape& shape, uint64_t seed, double scale = 1.0) {
  std::vector<double> v = random_tensor(shape, DType::f64, seed).to_doubles();
  for (double& x : v) x = std::round(x * 64.0) / 64.0 * scale;
  return Tensor::from_doubles(v, shape, DType::f32);
}

// `cpu` (any float dtype) converted to `dtype` on cuda:0.
inline Tensor to_cuda(const Tensor& cpu, DType dtype) {
  Tensor t = Tensor::empty(cpu.shape(), dtype, Device::cuda(0));
  t.copy_from(cpu);
  return t;
}

// The compute dtypes of the CUDA ops, with the tolerance of one output rounded to that dtype
// (bf16 keeps 8 significant bits, f16 11); tests scale them by the size of their sums.
struct DtypeCase {
  DType dtype;
  double rtol;
  const char* name;
};
inline constexpr DtypeCase kComputeDtypes[] = {
    {DType::f32, 1e-5, "f32"},
    {DType::bf16, 8e-3, "bf16"},
    {DType::f16, 1e-3, "f16"},
};

inline std::vector<double> values(const Tensor& t) {
  return t.to_doubles();
}

// max |a - b| / max |b|: a norm-wise error, since 16-bit attention has absolute, not relative,
// error on elements near zero (a NaN in a counts as infinite).
inline double relative_max_error(const std::vector<double>& a, const std::vector<double>& b) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::isnan(a[i]) ? INFINITY : std::abs(a[i] - b[i]));
    ref = std::max(ref, std::abs(b[i]));
  }
  return err / std::max(ref, 1e-30);
}

}  // namespace zt::testing
