// Tests of the CPU residual ops (kernels/cpu/residual.cc): out = a + b and out += in against
// element-by-element sums in the same dtype, including outputs that alias an input.
#include <gtest/gtest.h>

#include <vector>

#include "common/test_util.h"
#include "zt/kernels/ops.h"

namespace zt {
namespace {

using testing::expect_close;
using testing::random_tensor;

// a + b rounded to dt's precision (f32 or f64), the sum the kernel must produce.
std::vector<double> sum_in(DType dt, const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r;
  for (size_t i = 0; i < a.size(); ++i) {
    r.push_back(dt == DType::f32
                    ? static_cast<double>(static_cast<float>(a[i]) + static_cast<float>(b[i]))
                    : a[i] + b[i]);
  }
  return r;
}

TEST(Residual, ForwardAndAddInplace) {
  // The large shape is above the kernels' OpenMP threshold, so the parallel loops run too.
  for (const Shape& shape : {Shape{2, 5, 8}, Shape{4, 100, 100}}) {
    for (DType dt : {DType::f32, DType::f64}) {
      Tensor a = random_tensor(shape, dt, 1), b = random_tensor(shape, dt, 2);
      Tensor out = random_tensor(shape, dt, 3);  // garbage: out is written
      kernels::residual_forward(out, a, b);
      const std::vector<double> av = a.to_doubles(), bv = b.to_doubles();
      const std::vector<double> ab = sum_in(dt, av, bv);
      EXPECT_EQ(out.to_doubles(), ab) << "residual_forward";

      kernels::add_inplace(out, b);  // out = (a + b) + b
      EXPECT_EQ(out.to_doubles(), sum_in(dt, ab, bv)) << "add_inplace";

      Tensor alias = a.clone();  // out aliasing a, as the residual stream is updated in place
      kernels::residual_forward(alias, alias, b);
      EXPECT_EQ(alias.to_doubles(), ab) << "residual_forward with out == a";
    }
  }
}

}  // namespace
}  // namespace zt
