// init_unit_params over a range (zero/zero_state.h): a rank that holds one chunk of a unit draws
// only that chunk, and must get exactly the values the whole-unit draw puts there (the oracle:
// the whole draw), for ranges that cut parameters and 1M-element draw blocks anywhere, while
// leaving everything outside the range untouched.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "zt/nn/layer.h"
#include "zt/zero/zero_state.h"

namespace zt::zero {
namespace {

class TwoParams : public nn::Unit {
 public:
  TwoParams() : nn::Unit("two") {
    add_param("small", {1000}, nn::ParamInit::kOnes);
    add_param("big", {3, 1100000}, nn::ParamInit::kNormal, 0.02f);  // crosses 1M blocks
    add_param("bias", {777}, nn::ParamInit::kZeros);
  }
  Tensor forward(nn::Context&, const Tensor& x) override { return x; }
  Tensor backward(nn::Context&, const Tensor& d) override { return d; }
};

TEST(InitRange, ChunkEqualsTheWholeDrawThereAndLeavesTheRest) {
  TwoParams unit;
  const int64_t n = unit.flat_numel();
  std::vector<float> whole(n);
  init_unit_params(unit, whole.data(), 1234);
  const int64_t cuts[][2] = {
      {0, n},        {0, 500},          {900, 1200}, {1048000, 1049600}, {n / 3, 2 * n / 3},
      {n - 1500, n}, {2200000, 3300500}};
  for (const auto& c : cuts) {
    SCOPED_TRACE(::testing::Message() << c[0] << ".." << c[1]);
    std::vector<float> part(n, -7.0f);
    init_unit_params(unit, part.data(), 1234, c[0], c[1]);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float want = (i >= c[0] && i < c[1]) ? whole[i] : -7.0f;
      bad += part[i] != want;
    }
    EXPECT_EQ(bad, 0);
  }
}

}  // namespace
}  // namespace zt::zero
