// Page-locked host memory (core/device.h memory_allocate_pinned): blocks from 16 MiB up are an
// anonymous mapping faulted in by OpenMP threads and registered with cudaHostRegister, smaller
// ones come from cudaHostAlloc. Both must be what CUDA calls pinned (cudaHostGetFlags knows the
// pointer) and carry asynchronous copies both ways intact; the oracle is the bytes written on
// the host.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#include "common/test_util.h"
#include "zt/core/tensor.h"

namespace zt {
namespace {

void round_trip(int64_t elements) {
  SCOPED_TRACE(::testing::Message() << elements << " float elements");
  Tensor a = Tensor::empty_pinned({elements}, DType::f32);
  Tensor b = Tensor::empty_pinned({elements}, DType::f32);
  unsigned int flags = 0;
  ASSERT_EQ(cudaHostGetFlags(&flags, a.data()), cudaSuccess) << "not page-locked";
  ASSERT_EQ(cudaHostGetFlags(&flags, b.data()), cudaSuccess) << "not page-locked";
  // The last element too: the end of a mapping that is not a whole number of huge pages.
  ASSERT_EQ(cudaHostGetFlags(&flags, a.data<float>() + elements - 1), cudaSuccess);
  float* pa = a.data<float>();
  for (int64_t i = 0; i < elements; ++i) pa[i] = static_cast<float>(i % 9973) - 17.5f;
  b.zero();
  Stream s = Stream::create(Device::cuda(0));
  Tensor d = Tensor::empty({elements}, DType::f32, Device::cuda(0), s);
  memory_copy_async(d.data(), d.device(), a.data(), Device::cpu(), a.nbytes(), s);
  memory_copy_async(b.data(), Device::cpu(), d.data(), d.device(), b.nbytes(), s);
  s.synchronize();
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
}

TEST(GpuPinnedMemory, RegisteredAndCudaHostAllocBlocksCarryCopiesBothWays) {
  ZT_SKIP_WITHOUT_CUDA();
  round_trip(1000);                         // 4 KB: cudaHostAlloc
  round_trip((int64_t{40} << 20) / 4 + 3);  // 40 MiB and 12 bytes: registered
}

TEST(GpuPinnedMemory, ManyLargeBlocksAllocateAndFreeRepeatedly) {
  ZT_SKIP_WITHOUT_CUDA();
  // Freed blocks are unregistered and unmapped: CUDA no longer knows the pointer, and the same
  // sizes can be had again, round after round.
  for (int round = 0; round < 3; ++round) {
    std::vector<Tensor> live;
    for (int i = 0; i < 10; ++i) {
      live.push_back(Tensor::empty_pinned({int64_t{16} << 20}, DType::f32));
    }
    for (const Tensor& t : live) {
      unsigned int flags = 0;
      EXPECT_EQ(cudaHostGetFlags(&flags, t.data()), cudaSuccess);
    }
    void* first = live.front().data();
    live.clear();
    unsigned int flags = 0;
    EXPECT_NE(cudaHostGetFlags(&flags, first), cudaSuccess) << "a freed block is still registered";
    (void)cudaGetLastError();
  }
}

}  // namespace
}  // namespace zt
