// Tensor::extend: a view that reaches past its tensor's end into the same storage (adapters whose
// A matrices lie back to back in one flat buffer, read as one matrix). Oracle: the flat buffer's
// own elements; past the storage's end it refuses, naming the sizes.
#include <gtest/gtest.h>

#include <numeric>

#include "zt/core/tensor.h"

namespace zt {
namespace {

TEST(TensorExtend, ReadsTheNeighbouringElementsOfTheStorage) {
  Tensor flat = Tensor::empty({24}, DType::f32, Device::cpu());
  std::iota(flat.data<float>(), flat.data<float>() + 24, 0.0f);
  const Tensor a = flat.view(4, {2, 3});  // elements 4..9
  const Tensor both = a.extend({4, 3});   // 4..15: a and the 2 x 3 after it
  ASSERT_EQ(both.numel(), 12);
  EXPECT_EQ(both.data<float>(), a.data<float>());
  for (int i = 0; i < 12; ++i) EXPECT_EQ(both.data<float>()[i], 4.0f + i);
  EXPECT_EQ(a.extend({20}).numel(), 20);  // up to the storage's last element
}

TEST(TensorExtendDeathTest, RefusesToPassTheStoragesEnd) {
  Tensor flat = Tensor::empty({24}, DType::f32, Device::cpu());
  const Tensor a = flat.view(4, {2, 3});
  EXPECT_DEATH((void)a.extend({21}), "passes the end of its storage \\(96 bytes\\)");
}

}  // namespace
}  // namespace zt
