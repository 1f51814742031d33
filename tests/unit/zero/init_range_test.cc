// init_unit_params over a range (zero/zero_state.h): a rank that holds one chunk of a unit draws
// only that chunk, and must get exactly the values the whole-unit draw puts there (the oracle:
// the whole draw), for ranges that cut parameters and 1M-element draw blocks anywhere, written
// to a buffer of the range's size and nothing outside it.
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

TEST(InitRange, ChunkEqualsTheWholeDrawThere) {
  TwoParams unit;
  const int64_t n = unit.flat_numel();
  std::vector<float> whole(n);
  init_unit_params(unit, whole.data(), 1234);
  const int64_t cuts[][2] = {
      {0, n},        {0, 500},          {900, 1200}, {1048000, 1049600}, {n / 3, 2 * n / 3},
      {n - 1500, n}, {2200000, 3300500}, {n - 10, n + 6}};  // the last: into the padding
  for (const auto& c : cuts) {
    SCOPED_TRACE(::testing::Message() << c[0] << ".." << c[1]);
    // The chunk lands in out[0, end - begin); a guard element on each side must stay untouched.
    const int64_t len = c[1] - c[0];
    std::vector<float> part(len + 2, -7.0f);
    init_unit_params(unit, part.data() + 1, 1234, c[0], c[1]);
    int64_t bad = 0;
    for (int64_t i = 0; i < len; ++i) {
      const float want = c[0] + i < n ? whole[c[0] + i] : 0.0f;  // padding past the params: 0
      bad += part[i + 1] != want;
    }
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(part.front(), -7.0f);
    EXPECT_EQ(part.back(), -7.0f);
  }
}

}  // namespace
}  // namespace zt::zero
