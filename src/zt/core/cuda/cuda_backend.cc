// CUDA runtime calls behind core/device.h: device queries, streams, events, copies.
#include "zt/core/cuda/cuda_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cublas_api.h>
#include <cuda_runtime.h>

#include "zt/core/cuda/cuda_check.h"
#include "zt/core/log.h"

namespace zt::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: report zero, clear the sticky error
    return 0;
  }
  return n;
}

std::string device_name(int index) {
  cudaDeviceProp prop{};
  ZT_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  return prop.name;
}

int64_t device_total_memory(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return static_cast<int64_t>(prop.totalGlobalMem);
}

void set_device(int index) { ZT_CUDA_CHECK(cudaSetDevice(index)); }

void versions(int* driver, int* runtime, int* toolkit, int* cublas) {
  *driver = *runtime = *cublas = 0;
  if (cudaDriverGetVersion(driver) != cudaSuccess) *driver = 0;
  if (cudaRuntimeGetVersion(runtime) != cudaSuccess) *runtime = 0;
  (void)cudaGetLastError();
  *toolkit = CUDART_VERSION;
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS) {
    *cublas = major * 10000 + minor * 100 + patch;
  }
}

int device_capability(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return prop.major * 10 + prop.minor;
}

void* stream_create(int device) {
  ZT_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t s = nullptr;
  // A blocking stream: work on the legacy default stream (host copies made without an explicit
  // stream, e.g. Tensor::to_doubles) waits for it, so such reads never see unfinished results.
  ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamDefault));
  return s;
}

void stream_synchronize(void* stream) {
  ZT_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

void graph_begin(void* stream) {
  // Relaxed: the caching allocator may still call cudaMalloc for a size it has not cached.
  ZT_CUDA_CHECK(
      cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), cudaStreamCaptureModeRelaxed));
}

std::string graph_end(void* stream, void** graph, void** exec) {
  cudaGraph_t g = nullptr;
  cudaError_t err = cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &g);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (g != nullptr) (void)cudaGraphDestroy(g);
    return cudaGetErrorString(err);
  }
  cudaGraphExec_t e = nullptr;
  err = cudaGraphInstantiate(&e, g, 0);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaGraphDestroy(g);
    return cudaGetErrorString(err);
  }
  *graph = g;
  *exec = e;
  return {};
}

void graph_launch(void* exec, void* stream) {
  ZT_CUDA_CHECK(
      cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), static_cast<cudaStream_t>(stream)));
}

void graph_destroy(void* graph, void* exec) {
  if (exec != nullptr) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
  if (graph != nullptr) (void)cudaGraphDestroy(static_cast<cudaGraph_t>(graph));
}

void* event_create(int device, int timing) {
  ZT_CUDA_CHECK(cudaSetDevice(device));
  cudaEvent_t e = nullptr;
  ZT_CUDA_CHECK(
      cudaEventCreateWithFlags(&e, timing != 0 ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}

void event_destroy(void* event) { (void)cudaEventDestroy(static_cast<cudaEvent_t>(event)); }

void event_record(void* event, void* stream) {
  ZT_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
}

void event_wait(void* event, void* stream) {
  ZT_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream),
                                    static_cast<cudaEvent_t>(event), 0));
}

void event_synchronize(void* event) {
  ZT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

float event_elapsed_ms(void* start, void* end) {
  float ms = 0;
  ZT_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start),
                                     static_cast<cudaEvent_t>(end)));
  return ms;
}

void memcpy_async(void* dst, const void* src, size_t bytes, int kind, void* stream) {
  static constexpr cudaMemcpyKind kKinds[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                              cudaMemcpyDeviceToDevice, cudaMemcpyHostToHost};
  ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kKinds[kind], static_cast<cudaStream_t>(stream)));
}

void memcpy_2d_async(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                     size_t height, void* stream) {
  ZT_CUDA_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height,
                                  cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)));
}

void* host_alloc_pinned(size_t bytes) {
  void* p = nullptr;
  // Portable: every device (and every stream) can copy to and from it by DMA.
  cudaError_t err = cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (err == cudaErrorMemoryAllocation) {
      throw HostOutOfMemory(fmt::format(
          "out of page-locked host memory allocating {:.1f} MiB (cudaHostAlloc): the machine "
          "has too little free RAM, or the locked-memory limit (ulimit -l) is too low; set "
          "zero_optimization.offload_optimizer.pin_memory to false, or train with more host "
          "memory per rank",
          bytes / 1048576.0));
    }
    ::zt::detail::assert_fail(__FILE__, __LINE__, "cudaHostAlloc", cudaGetErrorString(err));
  }
  return p;
}

void host_free_pinned(void* ptr) {
  cudaError_t err = cudaFreeHost(ptr);
  // A tensor freed during static destruction, after the runtime unloaded: the process is ending
  // and the memory goes with it.
  if (err == cudaErrorCudartUnloading) {
    (void)cudaGetLastError();
    return;
  }
  ZT_CUDA_CHECK(err);
}

void* host_register_pinned(size_t bytes, int threads) {
  const size_t size = bytes == 0 ? 1 : bytes;
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    throw HostOutOfMemory(fmt::format(
        "out of host memory mapping {:.1f} MiB for page-locked memory ({}): the machine has "
        "too little free RAM; train with more host memory per rank",
        size / 1048576.0, std::strerror(errno)));
  }
  // Huge pages where the kernel allows them: 512x fewer faults and pages to pin. Advice only.
  (void)madvise(p, size, MADV_HUGEPAGE);
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto* bytes_at = static_cast<volatile char*>(p);
  const auto pages = static_cast<int64_t>((size + page - 1) / page);
#pragma omp parallel for schedule(static) num_threads(threads > 0 ? threads : 1)
  for (int64_t i = 0; i < pages; ++i) bytes_at[static_cast<size_t>(i) * page] = 0;
  cudaError_t err = cudaHostRegister(p, size, cudaHostRegisterPortable);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    munmap(p, size);
    if (err == cudaErrorMemoryAllocation || err == cudaErrorHostMemoryAlreadyRegistered) {
      throw HostOutOfMemory(fmt::format(
          "out of page-locked host memory registering {:.1f} MiB (cudaHostRegister: {}): the "
          "machine has too little free RAM, or the locked-memory limit (ulimit -l) is too low; "
          "set zero_optimization.offload_optimizer.pin_memory to false, or train with more host "
          "memory per rank",
          size / 1048576.0, cudaGetErrorString(err)));
    }
    ::zt::detail::assert_fail(__FILE__, __LINE__, "cudaHostRegister", cudaGetErrorString(err));
  }
  return p;
}

void host_unregister_pinned(void* ptr, size_t bytes) {
  const size_t size = bytes == 0 ? 1 : bytes;
  cudaError_t err = cudaHostUnregister(ptr);
  if (err != cudaSuccess && err != cudaErrorCudartUnloading) {
    (void)cudaGetLastError();
    ::zt::detail::assert_fail(__FILE__, __LINE__, "cudaHostUnregister", cudaGetErrorString(err));
  }
  if (err == cudaErrorCudartUnloading) (void)cudaGetLastError();
  munmap(ptr, size);
}

void memset_async(void* dst, size_t bytes, void* stream) {
  ZT_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, static_cast<cudaStream_t>(stream)));
}

void device_synchronize(int device) {
  ZT_CUDA_CHECK(cudaSetDevice(device));
  ZT_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace zt::cuda
