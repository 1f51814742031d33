// The out-of-line pieces of cuda_common.cuh.
#include "zt/kernels/cuda/cuda_common.cuh"

namespace zt::kernels::cuda {

int sm_count() {
  int device = 0;
  ZT_CUDA_CHECK(cudaGetDevice(&device));
  constexpr int kMaxDevices = 64;
  static int counts[kMaxDevices] = {};  // 0: not asked yet (a benign race: every writer agrees)
  if (device < kMaxDevices && counts[device] > 0) return counts[device];
  int n = 0;
  ZT_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  if (device < kMaxDevices) counts[device] = n;
  return n;
}

}  // namespace zt::kernels::cuda
