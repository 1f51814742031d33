// The out-of-line pieces of cuda_common.cuh.
#include "zt/kernels/cuda/cuda_common.cuh"

#include <atomic>

namespace zt::kernels::cuda {

int sm_count() {
  int device = 0;
  ZT_CUDA_CHECK(cudaGetDevice(&device));
  constexpr int kMaxDevices = 64;
  static std::atomic<int> counts[kMaxDevices] = {};  // 0: not asked yet (every writer agrees)
  if (device < kMaxDevices) {
    const int known = counts[device].load(std::memory_order_relaxed);
    if (known > 0) return known;
  }
  int n = 0;
  ZT_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  if (device < kMaxDevices) counts[device].store(n, std::memory_order_relaxed);
  return n;
}

}  // namespace zt::kernels::cuda
