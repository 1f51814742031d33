// Device dispatch for kernels/ops.h: every op runs where its first tensor lives.
#include "zt/kernels/ops.h"

#include "zt/build_config.h"
#include "zt/kernels/cpu/cpu_ops.h"
#if ZT_HAVE_CUDA
#include "zt/kernels/cuda/cuda_ops.h"
#endif

namespace zt::kernels {

#if ZT_HAVE_CUDA
#define ZT_DISPATCH(device, op, ...) \
  do {                               \
    if ((device).is_cuda()) {        \
      cuda::op(__VA_ARGS__);         \
    } else {                         \
      cpu::op(__VA_ARGS__);          \
    }                                \
  } while (0)
#else
#define ZT_DISPATCH(device, op, ...)                                                    \
  do {                                                                                  \
    ZT_ASSERT((device).is_cpu(), #op " on {} in a build without CUDA", (device).str()); \
    cpu::op(__VA_ARGS__);                                                               \
  } while (0)
#endif

bool flash_attention_supported(Device device, DType dtype, int64_t head_size) {
  if (device.is_cpu()) return dtype == DType::f32 || dtype == DType::f64;
  return ZT_HAVE_CUDA && (dtype == DType::bf16 || dtype == DType::f16) &&
         (head_size == 64 || head_size == 128);
}

#define ZT_OP(name, where, params, args)          \
  void name(ZT_OP_LIST params, const Stream& s) { \
    ZT_DISPATCH(where, name, ZT_OP_LIST args, s); \
  }
#include "zt/kernels/op_table.inc"
#undef ZT_OP

}  // namespace zt::kernels
