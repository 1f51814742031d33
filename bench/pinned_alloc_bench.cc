// Page-locked host memory as ZeRO-Offload allocates it at start-up (master weights and optimizer
// state, one buffer per unit and kind): --gib in all, in buffers of --piece-mib, each zeroed.
// Two ways: cudaHostAlloc then a memset (`cudahostalloc`), and an anonymous mapping faulted in
// by OpenMP threads and registered with cudaHostRegister (`register`, cuda::host_register_pinned).
// Prints one JSON line per way: seconds and GiB/s. Its peer is bench/pinned_alloc_torch.py
// (torch.empty(pin_memory=True) and zero_()). Run one process per GPU at once, as ranks do.
//
//   zt_bench_pinned_alloc [--gib 16] [--piece-mib 768] [--threads N (default: OpenMP's)]
//                         [--ways cudahostalloc,register]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <omp.h>

#include "zt/core/cuda/cuda_backend.h"
#include "zt/core/device.h"

int main(int argc, char** argv) {
  double gib = 16;
  double piece_mib = 768;
  int threads = omp_get_max_threads();
  std::string ways = "cudahostalloc,register";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--gib") {
      gib = std::atof(argv[i + 1]);
    } else if (k == "--piece-mib") {
      piece_mib = std::atof(argv[i + 1]);
    } else if (k == "--threads") {
      threads = std::atoi(argv[i + 1]);
    } else if (k == "--ways") {
      ways = argv[i + 1];
    } else {
      std::fprintf(stderr, "zt_bench_pinned_alloc: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (zt::cuda_device_count() == 0) {
    std::fprintf(stderr, "zt_bench_pinned_alloc: no CUDA device\n");
    return 1;
  }
  zt::cuda::set_device(0);
  const auto piece = static_cast<size_t>(piece_mib * 1048576.0);
  const auto count = static_cast<size_t>(gib * 1073741824.0 / static_cast<double>(piece));
  const double total = static_cast<double>(piece) * static_cast<double>(count);
  for (const char* way : {"cudahostalloc", "register"}) {
    if (ways.find(way) == std::string::npos) continue;
    const bool reg = std::strcmp(way, "register") == 0;
    std::vector<void*> ptrs;
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < count; ++i) {
      if (reg) {
        ptrs.push_back(zt::cuda::host_register_pinned(piece, threads));
      } else {
        ptrs.push_back(zt::cuda::host_alloc_pinned(piece));
        std::memset(ptrs.back(), 0, piece);
      }
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (void* p : ptrs) {
      if (reg) {
        zt::cuda::host_unregister_pinned(p, piece);
      } else {
        zt::cuda::host_free_pinned(p);
      }
    }
    std::printf(
        "{\"impl\":\"zerotrain\",\"way\":\"%s\",\"gib\":%.3f,\"piece_mib\":%.1f,\"threads\":%d,"
        "\"seconds\":%.3f,\"gib_per_s\":%.3f}\n",
        way, total / 1073741824.0, piece_mib, threads, secs, total / 1073741824.0 / secs);
    std::fflush(stdout);
  }
  return 0;
}
