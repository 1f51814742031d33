// Host-to-host copies and zeroing (core/device.h memory_copy, memory_zero on the CPU): from
// 64 MiB up they are split over the OpenMP threads in 4 MiB slices. Every byte must arrive, the
// last partial slice included; the oracle is memcmp against the source and a zero buffer.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "zt/core/device.h"

namespace zt {
namespace {

TEST(HostCopy, LargeCopiesAndZeroingReachEveryByte) {
  for (size_t bytes :
       {size_t{1000}, (size_t{64} << 20) - 1, (size_t{64} << 20) + (size_t{3} << 20) + 5}) {
    SCOPED_TRACE(::testing::Message() << bytes << " bytes");
    std::vector<unsigned char> src(bytes), dst(bytes, 0xAB);
    for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<unsigned char>((i * 131 + 7) % 251);
    memory_copy(dst.data(), Device::cpu(), src.data(), Device::cpu(), bytes, Stream());
    EXPECT_EQ(std::memcmp(dst.data(), src.data(), bytes), 0);
    memory_zero(dst.data(), Device::cpu(), bytes, Stream());
    const std::vector<unsigned char> zero(bytes, 0);
    EXPECT_EQ(std::memcmp(dst.data(), zero.data(), bytes), 0);
  }
}

}  // namespace
}  // namespace zt
