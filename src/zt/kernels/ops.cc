// Device dispatch for kernels/ops.h: every op runs where its first tensor lives.
#include "zt/kernels/ops.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "zt/build_config.h"
#include "zt/core/log.h"
#include "zt/kernels/cpu/cpu_ops.h"
#if ZT_HAVE_CUDA
#include "zt/kernels/cuda/cuda_ops.h"
#include "zt/kernels/cuda/cudnn_attention.h"
#endif

namespace zt::kernels {

std::array<float, 3> adam_step_scalars(const AdamArgs& a) {
  // 1 - beta^step in double, as DeepSpeed's host code computes it, rounded to the kernel's float.
  auto correction = [&](float beta) {
    if (a.bias_correction == BiasCorrection::kOff) return 1.0f;
    return static_cast<float>(1.0 -
                              std::pow(static_cast<double>(beta), static_cast<double>(a.step)));
  };
  return {a.lr, correction(a.beta1), std::sqrt(correction(a.beta2))};
}

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

namespace {

AttentionBackend initial_attention_backend() {
  const char* v = std::getenv("ZT_ATTENTION_BACKEND");
  const std::string_view s = v != nullptr ? v : "";
  if (s.empty() || s == "auto") return AttentionBackend::kAuto;
  if (s == "cudnn") return AttentionBackend::kCudnn;
  if (s == "own") return AttentionBackend::kOwn;
  ZT_LOG_WARN("ZT_ATTENTION_BACKEND={} is not one of auto, cudnn, own; using auto", s);
  return AttentionBackend::kAuto;
}

std::atomic<AttentionBackend>& attention_backend_setting() {
  static std::atomic<AttentionBackend> b{initial_attention_backend()};
  return b;
}

std::atomic<bool>& attention_deterministic_setting() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("ZT_ATTENTION_DETERMINISTIC");
    return v == nullptr || std::string_view(v) != "0";
  }()};
  return on;
}

std::atomic<bool>& gemm_autotune_setting() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("ZT_GEMM_AUTOTUNE");
    return v != nullptr && std::string_view(v) == "1";
  }()};
  return on;
}

}  // namespace

bool gemm_autotune() {
  return gemm_autotune_setting().load();
}

void set_gemm_autotune(bool on) {
  gemm_autotune_setting().store(on);
}

bool attention_deterministic() {
  return attention_deterministic_setting().load();
}

void set_attention_deterministic(bool on) {
  attention_deterministic_setting().store(on);
}

namespace {

std::atomic<int64_t>& attention_workspace_setting() {
  static std::atomic<int64_t> limit{[] {
    const char* v = std::getenv("ZT_ATTENTION_WORKSPACE_MB");
    char* end = nullptr;
    const long long mb = v != nullptr ? std::strtoll(v, &end, 10) : 2048;
    if (v != nullptr && (end == v || *end != 0 || mb < 0)) {
      ZT_LOG_WARN("ZT_ATTENTION_WORKSPACE_MB={} is not a number of MiB; using 2048", v);
      return int64_t{2048} << 20;
    }
    return static_cast<int64_t>(mb) << 20;
  }()};
  return limit;
}

}  // namespace

int64_t attention_workspace_limit() {
  return attention_workspace_setting().load();
}

void set_attention_workspace_limit(int64_t bytes) {
  attention_workspace_setting().store(bytes);
}

AttentionBackend attention_backend() {
  return attention_backend_setting().load();
}

void set_attention_backend(AttentionBackend b) {
  attention_backend_setting().store(b);
}

bool cudnn_available() {
#if ZT_HAVE_CUDA
  return cuda::cudnn_loaded();
#else
  return false;
#endif
}

#define ZT_OP(name, where, params, args)          \
  void name(ZT_OP_LIST params, const Stream& s) { \
    ZT_DISPATCH(where, name, ZT_OP_LIST args, s); \
  }
#include "zt/kernels/op_table.inc"
#undef ZT_OP

}  // namespace zt::kernels
