// The caching allocator's cross-stream rule on a real GPU (core/block_cache.h, the rule itself is
// unit-tested with a fake device in tests/unit/core/block_cache_test.cc): a block written by a
// side stream (as ZeRO's communication stream writes a gathered unit) and freed while that work
// is still queued must not be handed to the next request on its own stream until the side
// stream's work has finished. The side stream is kept busy for a long time first (a chain of
// adds over 256 MiB, tens of milliseconds on an H100) and writes the block at the end of it, so
// the host frees and reallocates well before that write happens. Were the block reused, the new
// tensor would end up holding the side stream's ones instead of its own zeros.
#include <vector>

#include "common/test_util.h"
#include "zt/kernels/ops.h"

namespace zt {
namespace {

TEST(GpuRecordStream, BlockUsedOnASideStreamIsNotReusedBeforeTheSideWorkFinished) {
  ZT_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  const Stream compute = Stream::create(dev);
  const Stream side = Stream::create(dev);
  const int64_t n = int64_t{1} << 20;

  // Control: without another stream, a freed block serves the next same-sized request at once,
  // so the check below can fail.
  {
    Tensor x = Tensor::empty({n}, DType::f32, dev, compute);
    void* p = x.data();
    x = Tensor();
    EXPECT_EQ(Tensor::empty({n}, DType::f32, dev, compute).data(), p);
  }

  Tensor big = Tensor::zeros({int64_t{64} << 20}, DType::f32, dev, side);
  Tensor big_in = Tensor::zeros({int64_t{64} << 20}, DType::f32, dev, side);
  Tensor ones =
      Tensor::from_floats(std::vector<float>(static_cast<size_t>(n), 1.0f), {n}, DType::f32, dev);
  device_synchronize(dev);

  Tensor a = Tensor::zeros({n}, DType::f32, dev, compute);
  void* a_ptr = a.data();
  Event a_ready(dev, EventTiming::kSyncOnly);
  a_ready.record(compute);
  a_ready.wait(side);
  for (int i = 0; i < 300; ++i) kernels::add_inplace(big, big_in, side);  // the long wait
  kernels::add_inplace(a, ones, side);                                    // then writes a
  a.record_stream(side);
  a = Tensor();  // freed while the side stream's work is queued

  Tensor b = Tensor::empty({n}, DType::f32, dev, compute);
  EXPECT_NE(b.data(), a_ptr) << "the block was handed out while the side stream still used it";
  b.zero(compute);
  side.synchronize();
  compute.synchronize();
  std::vector<double> got = b.to_doubles();
  double worst = 0;
  for (double v : got) worst = std::max(worst, std::abs(v));
  EXPECT_EQ(worst, 0.0) << "the side stream wrote into a block reallocated on the compute stream";

  // Once the side stream is done, the block serves its stream again (no leak).
  EXPECT_EQ(Tensor::empty({n}, DType::f32, dev, compute).data(), a_ptr);
}

}  // namespace
}  // namespace zt
