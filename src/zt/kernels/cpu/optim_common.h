// Pieces shared by the CPU optimizers (adam.cc, sgd.cc, lamb.cc).
#pragma once

#include <type_traits>

#include "zt/core/half.h"

namespace zt::kernels::cpu {

// Writes the updated parameter into the chunk's 16-bit compute copy; Lowp is bf16_t, f16_t, or
// void when the chunk has none (then nothing is written).
template <typename Lowp>
inline void store_lowp([[maybe_unused]] Lowp* lowp, [[maybe_unused]] int64_t i,
                       [[maybe_unused]] float value) {
  if constexpr (std::is_same_v<Lowp, bf16_t>) {
    lowp[i] = float_to_bf16(value);
  } else if constexpr (std::is_same_v<Lowp, f16_t>) {
    lowp[i] = float_to_f16(value);
  }
}

}  // namespace zt::kernels::cpu
