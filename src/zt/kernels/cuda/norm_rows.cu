// Launch plans of the row-normalisation kernels' fused parameter gradients (norm_rows.cuh).
#include "zt/kernels/cuda/norm_rows.cuh"

#include <cstdlib>
#include <mutex>
#include <set>
#include <string_view>
#include <utility>

namespace zt::kernels::cuda {

namespace {

constexpr int64_t kMaxBlocksPerSm = 2;      // 16 warps: what the backward kernels' registers allow
constexpr size_t kReservedPerBlock = 1024;  // shared memory the runtime keeps per block

struct SmemLimits {
  size_t per_block = 0;  // opt-in maximum of one block
  size_t per_sm = 0;
};

// The current device's limits (asked once per device, as sm_count).
SmemLimits smem_limits() {
  int device = 0;
  ZT_CUDA_CHECK(cudaGetDevice(&device));
  constexpr int kMaxDevices = 64;
  static std::mutex mu;
  static SmemLimits known[kMaxDevices];
  std::lock_guard<std::mutex> lock(mu);
  if (device < kMaxDevices && known[device].per_block > 0) return known[device];
  int per_block = 0, per_sm = 0;
  ZT_CUDA_CHECK(
      cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  ZT_CUDA_CHECK(
      cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  const SmemLimits lim{static_cast<size_t>(per_block), static_cast<size_t>(per_sm)};
  if (device < kMaxDevices) known[device] = lim;
  return lim;
}

}  // namespace

NormGradPlan norm_grad_plan(int64_t rows, int64_t C, int64_t slice_floats, int split, int kOut,
                            int vals, bool with_grads, Device device, const Stream& s) {
  NormGradPlan plan;
  const int64_t groups = kNormWarps / split;
  const size_t xch = static_cast<size_t>(norm_xch_floats(split, vals)) * sizeof(float);
  if (!with_grads) {
    // A group per row, no slices, no partial sums.
    plan.blocks = static_cast<unsigned>(std::max<int64_t>(1, ceil_div(rows, groups)));
    plan.smem = xch;
    return plan;
  }
  const SmemLimits lim = smem_limits();
  plan.smem = static_cast<size_t>(kNormWarps) * static_cast<size_t>(kOut) *
                  static_cast<size_t>(slice_floats) * sizeof(float) +
              xch;
  if (plan.smem > lim.per_block) {
    plan.blocks = 0;
    return plan;
  }
  const int64_t per_sm = std::clamp<int64_t>(
      static_cast<int64_t>(lim.per_sm / (plan.smem + kReservedPerBlock)), 1, kMaxBlocksPerSm);
  plan.blocks = static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>(sm_count() * per_sm, ceil_div(rows, groups))));
  plan.partial =
      Tensor::empty({kOut * static_cast<int64_t>(plan.blocks) * C}, DType::f32, device, s);
  return plan;
}

bool norm_rows_path() {
  const char* v = std::getenv("ZT_NORM_PATH");
  return v == nullptr || std::string_view(v) != "loops";
}

void allow_dynamic_smem(const void* kernel) {
  int device = 0;
  ZT_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mu;
  static std::set<std::pair<const void*, int>> done;
  std::lock_guard<std::mutex> lock(mu);
  if (done.count({kernel, device}) != 0) return;
  ZT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem_limits().per_block)));
  done.insert({kernel, device});
}

}  // namespace zt::kernels::cuda
