// The initial values of normal parameters (zero/zero_state.h init_unit_params) against the
// normal distribution itself: mean, standard deviation, the mass within 1, 2 and 3 standard
// deviations (0.682689, 0.954500, 0.997300), no correlation between neighbours or between
// parameters, and other values for another seed. Tolerances are five standard errors of each
// statistic for a million samples.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "zt/nn/layer.h"
#include "zt/zero/zero_state.h"

namespace zt::zero {
namespace {

constexpr int64_t kN = 1000000;

class Params : public nn::Unit {
 public:
  Params() : nn::Unit("p") {
    add_param("w", {1000, 1000}, nn::ParamInit::kNormal, 0.02f);
    add_param("v", {1000, 1000}, nn::ParamInit::kNormal, 0.05f);
    add_param("gain", {100}, nn::ParamInit::kOnes);
    add_param("bias", {100}, nn::ParamInit::kZeros);
  }
  Tensor forward(nn::Context&, const Tensor& x) override { return x; }
  Tensor backward(nn::Context&, const Tensor& d) override { return d; }
};

double correlation(const float* a, const float* b, int64_t n, int64_t stride) {
  double sa = 0, sb = 0, sab = 0, saa = 0, sbb = 0;
  int64_t m = 0;
  for (int64_t i = 0; i < n; i += stride, ++m) {
    sa += a[i];
    sb += b[i];
    sab += static_cast<double>(a[i]) * b[i];
    saa += static_cast<double>(a[i]) * a[i];
    sbb += static_cast<double>(b[i]) * b[i];
  }
  const double cov = sab / m - sa / m * sb / m;
  return cov / std::sqrt((saa / m - sa / m * sa / m) * (sbb / m - sb / m * sb / m));
}

TEST(InitStats, NormalParametersFollowTheNormalDistribution) {
  Params unit;
  std::vector<float> out(unit.flat_numel());
  init_unit_params(unit, out.data(), 1234);
  const std::vector<nn::Param*>& ps = unit.params();
  for (int k = 0; k < 2; ++k) {
    const nn::Param& p = *ps[k];
    SCOPED_TRACE(p.name);
    const float* x = out.data() + p.offset;
    const double sd = p.init_std;
    double sum = 0, sq = 0, peak = 0;
    int64_t within[3] = {0, 0, 0};
    for (int64_t i = 0; i < kN; ++i) {
      sum += x[i];
      sq += static_cast<double>(x[i]) * x[i];
      const double z = std::fabs(x[i]) / sd;
      peak = std::max(peak, z);
      for (int s = 0; s < 3; ++s) within[s] += z < s + 1;
    }
    const double mean = sum / kN;
    EXPECT_LT(std::fabs(mean), 5 * sd / std::sqrt(kN));
    // The sample standard deviation's relative standard error is 1 / sqrt(2n).
    EXPECT_NEAR(std::sqrt(sq / kN - mean * mean) / sd, 1.0, 5 / std::sqrt(2.0 * kN));
    const double mass[3] = {0.682689492, 0.954499736, 0.997300204};
    for (int s = 0; s < 3; ++s) {
      const double f = static_cast<double>(within[s]) / kN;
      EXPECT_NEAR(f, mass[s], 5 * std::sqrt(mass[s] * (1 - mass[s]) / kN)) << "within " << s + 1;
    }
    EXPECT_GT(peak, 4.0);  // a million normals reach past 4 standard deviations
    EXPECT_LT(peak, 6.0);
    // Neighbours are uncorrelated (even and odd offsets: generators that make values in pairs).
    EXPECT_LT(std::fabs(correlation(x, x + 1, kN - 1, 2)), 5 / std::sqrt(kN / 2.0));
    EXPECT_LT(std::fabs(correlation(x + 1, x + 2, kN - 2, 2)), 5 / std::sqrt(kN / 2.0));
  }
  // Two parameters of the same unit, and the same parameter under another seed.
  const float* w = out.data() + ps[0]->offset;
  const float* v = out.data() + ps[1]->offset;
  EXPECT_LT(std::fabs(correlation(w, v, kN, 1)), 5 / std::sqrt(kN));
  std::vector<float> other(unit.flat_numel());
  init_unit_params(unit, other.data(), 1235);
  EXPECT_LT(std::fabs(correlation(w, other.data() + ps[0]->offset, kN, 1)), 5 / std::sqrt(kN));
  for (int64_t i = 0; i < 100; ++i) {
    EXPECT_EQ(out[ps[2]->offset + i], 1.0f);
    EXPECT_EQ(out[ps[3]->offset + i], 0.0f);
  }
}

}  // namespace
}  // namespace zt::zero
