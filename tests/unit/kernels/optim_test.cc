// Tests of the CPU optimizer steps (kernels/cpu/adam.cc, sgd.cc, lamb.cc): several steps over two
// or more chunks against scalar f64 references written here from the formulas of kernels/ops.h
// (DeepSpeed csrc/adam, torch.optim.SGD, DeepSpeed FusedLamb), and the fused 16-bit parameter copy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/test_util.h"
#include "zt/core/half.h"
#include "zt/kernels/ops.h"

namespace zt {
namespace {

using testing::expect_close;

std::vector<double> uniform_values(size_t n, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

// Above the kernels' OpenMP threshold, so the multi-threaded loops (and reductions) run too.
constexpr size_t kLargeChunk = 40000;

// Which 16-bit copy of the parameters a test asks the optimizer to write.
enum class Lowp { kNone, kBf16, kF16 };

// One chunk's fp32 buffers (what the kernel sees) and f64 copies (what the reference updates).
// The reference starts from the fp32-rounded values, so both see identical inputs.
struct TestChunk {
  std::vector<float> param, grad, state1, state2;
  std::vector<bf16_t> lowp_bf16;
  std::vector<f16_t> lowp_f16;
  std::vector<double> ref_param, ref_state1, ref_state2;

  explicit TestChunk(const std::vector<double>& p) {
    const size_t n = p.size();
    for (double x : p) param.push_back(static_cast<float>(x));
    grad.assign(n, 0.0f);
    state1.assign(n, 0.0f);  // Adam/Lamb moments start at zero

    state2.assign(n, 0.0f);
    lowp_bf16.assign(n, bf16_t{0});
    lowp_f16.assign(n, f16_t{0});
    ref_param.assign(param.begin(), param.end());
    ref_state1.assign(n, 0.0);
    ref_state2.assign(n, 0.0);
  }
  void set_grad(uint64_t seed) {
    const std::vector<double> g = uniform_values(grad.size(), seed, -1.0, 1.0);
    for (size_t i = 0; i < g.size(); ++i) grad[i] = static_cast<float>(g[i]);
  }
  kernels::OptimChunk view(Lowp lowp) {
    kernels::OptimChunk c{.param = param.data(),
                          .grad = grad.data(),
                          .state1 = state1.data(),
                          .state2 = state2.data(),
                          .n = static_cast<int64_t>(param.size())};
    if (lowp == Lowp::kBf16) {
      c.param_lowp = lowp_bf16.data();
      c.lowp_dtype = DType::bf16;
    } else if (lowp == Lowp::kF16) {
      c.param_lowp = lowp_f16.data();
      c.lowp_dtype = DType::f16;
    }
    return c;
  }
  std::vector<double> doubles(const std::vector<float>& v) const { return {v.begin(), v.end()}; }
};

// ---- Adam

void adam_reference(const kernels::AdamArgs& a, TestChunk& c) {
  const double b1 = a.beta1, b2 = a.beta2, wd = a.weight_decay;
  const bool on = a.bias_correction == kernels::BiasCorrection::kOn;
  const double bc1 = on ? 1.0 - std::pow(b1, static_cast<double>(a.step)) : 1.0;
  const double bc2 = on ? 1.0 - std::pow(b2, static_cast<double>(a.step)) : 1.0;
  for (size_t i = 0; i < c.param.size(); ++i) {
    double& p = c.ref_param[i];
    double& m = c.ref_state1[i];
    double& v = c.ref_state2[i];
    double g = static_cast<double>(c.grad[i]) * a.grad_scale;
    if (a.mode == kernels::AdamMode::kL2) g += wd * p;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    double u = (m / bc1) / (std::sqrt(v) / std::sqrt(bc2) + a.eps);
    if (a.mode == kernels::AdamMode::kAdamW) u += wd * p;
    p -= a.lr * u;
  }
}

void adam_check(kernels::AdamArgs args, Lowp lowp) {
  std::vector<TestChunk> chunks;
  chunks.emplace_back(uniform_values(37, 1, -1.0, 1.0));
  chunks.emplace_back(uniform_values(64, 2, -2.0, 2.0));
  chunks.emplace_back(uniform_values(kLargeChunk, 9, -1.0, 1.0));
  for (int64_t step = 1; step <= 5; ++step) {
    args.step = step;
    std::vector<kernels::OptimChunk> views;
    for (size_t k = 0; k < chunks.size(); ++k) {
      chunks[k].set_grad(100 * step + k);
      views.push_back(chunks[k].view(lowp));
      adam_reference(args, chunks[k]);
    }
    kernels::adam_step(args, views, Device::cpu());
  }
  for (TestChunk& c : chunks) {
    expect_close(c.doubles(c.param), c.ref_param, 1e-6, 1e-5, "adam param");
    expect_close(c.doubles(c.state1), c.ref_state1, 1e-7, 1e-5, "adam exp_avg");
    expect_close(c.doubles(c.state2), c.ref_state2, 1e-9, 1e-5, "adam exp_avg_sq");
    for (size_t i = 0; i < c.param.size(); ++i) {
      if (lowp == Lowp::kBf16) {
        ASSERT_EQ(c.lowp_bf16[i].bits, float_to_bf16(c.param[i]).bits) << "bf16 copy at " << i;
      } else if (lowp == Lowp::kF16) {
        ASSERT_EQ(c.lowp_f16[i].bits, float_to_f16(c.param[i]).bits) << "f16 copy at " << i;
      } else {
        ASSERT_EQ(c.lowp_bf16[i].bits, 0) << "no 16-bit copy was asked for";
      }
    }
  }
}

TEST(AdamStep, AdamWMatchesReference) {
  adam_check({.lr = 1e-2f, .weight_decay = 0.1f, .mode = kernels::AdamMode::kAdamW}, Lowp::kNone);
}

TEST(AdamStep, L2MatchesReference) {
  adam_check({.lr = 1e-2f, .weight_decay = 0.1f, .mode = kernels::AdamMode::kL2}, Lowp::kNone);
}

TEST(AdamStep, WithoutBiasCorrectionMatchesReference) {
  adam_check({.lr = 1e-2f, .weight_decay = 0.01f, .bias_correction = kernels::BiasCorrection::kOff},
             Lowp::kNone);
}

TEST(AdamStep, GradScaleAppliesBeforeTheMoments) {
  // A large eps makes the update depend on the gradient's magnitude, and the moments are
  // compared directly, so an ignored grad_scale fails.
  adam_check({.lr = 1e-2f,
              .eps = 1e-2f,
              .weight_decay = 0.05f,
              .grad_scale = 0.25f,
              .mode = kernels::AdamMode::kL2},
             Lowp::kNone);
}

TEST(AdamStep, WritesBf16AndF16Copies) {
  adam_check({.lr = 1e-2f, .weight_decay = 0.1f}, Lowp::kBf16);
  adam_check({.lr = 1e-2f, .weight_decay = 0.1f}, Lowp::kF16);
}

// ---- SGD

void sgd_reference(const kernels::SgdArgs& a, TestChunk& c) {
  const double mu = a.momentum, damp = a.dampening, wd = a.weight_decay;
  for (size_t i = 0; i < c.param.size(); ++i) {
    double& p = c.ref_param[i];
    double& buf = c.ref_state1[i];
    double d = static_cast<double>(c.grad[i]) * a.grad_scale;
    if (wd != 0) d += wd * p;
    if (mu != 0) {
      buf = a.first_step ? d : mu * buf + (1 - damp) * d;  // torch: buf = clone(d) at first
      d = a.nesterov ? d + mu * buf : buf;
    }
    p -= a.lr * d;
  }
}

void sgd_check(kernels::SgdArgs args, Lowp lowp) {
  std::vector<TestChunk> chunks;
  chunks.emplace_back(uniform_values(37, 3, -1.0, 1.0));
  chunks.emplace_back(uniform_values(50, 4, -1.0, 1.0));
  chunks.emplace_back(uniform_values(kLargeChunk, 10, -1.0, 1.0));
  for (TestChunk& c : chunks) c.state1.assign(c.param.size(), 123.0f);  // read only after step 1
  for (int64_t step = 1; step <= 4; ++step) {
    args.first_step = step == 1;
    std::vector<kernels::OptimChunk> views;
    for (size_t k = 0; k < chunks.size(); ++k) {
      chunks[k].set_grad(200 * step + k);
      views.push_back(chunks[k].view(lowp));
      sgd_reference(args, chunks[k]);
    }
    kernels::sgd_step(args, views, Device::cpu());
  }
  for (TestChunk& c : chunks) {
    expect_close(c.doubles(c.param), c.ref_param, 1e-6, 1e-5, "sgd param");
    if (args.momentum != 0) {
      expect_close(c.doubles(c.state1), c.ref_state1, 1e-6, 1e-5, "sgd momentum buffer");
    } else {
      EXPECT_EQ(c.doubles(c.state1), std::vector<double>(c.param.size(), 123.0))
          << "momentum buffer untouched without momentum";
    }
    if (lowp == Lowp::kBf16) {
      for (size_t i = 0; i < c.param.size(); ++i) {
        ASSERT_EQ(c.lowp_bf16[i].bits, float_to_bf16(c.param[i]).bits) << "bf16 copy at " << i;
      }
    }
  }
}

TEST(SgdStep, PlainWithWeightDecay) {
  sgd_check({.lr = 0.1f, .weight_decay = 0.01f}, Lowp::kNone);
}

TEST(SgdStep, MomentumWithDampening) {
  sgd_check({.lr = 0.1f, .momentum = 0.9f, .dampening = 0.1f, .weight_decay = 0.01f}, Lowp::kNone);
}

TEST(SgdStep, NesterovWithGradScale) {
  sgd_check({.lr = 0.05f, .momentum = 0.8f, .nesterov = true, .grad_scale = 0.5f}, Lowp::kBf16);
}

// ---- LAMB

// Returns the trust ratio the reference used.
double lamb_reference(const kernels::LambArgs& a, TestChunk& c) {
  const double b1 = a.beta1, b2 = a.beta2, wd = a.weight_decay;
  const bool on = a.bias_correction == kernels::BiasCorrection::kOn;
  const double bc1 = on ? 1.0 - std::pow(b1, static_cast<double>(a.step)) : 1.0;
  const double bc2 = on ? 1.0 - std::pow(b2, static_cast<double>(a.step)) : 1.0;
  const size_t n = c.param.size();
  std::vector<double> u(n);
  double p_sq = 0, u_sq = 0;
  for (size_t i = 0; i < n; ++i) {
    double& m = c.ref_state1[i];
    double& v = c.ref_state2[i];
    const double g = static_cast<double>(c.grad[i]) * a.grad_scale;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    u[i] = (m / bc1) / (std::sqrt(v / bc2) + a.eps) + wd * c.ref_param[i];
    p_sq += c.ref_param[i] * c.ref_param[i];
    u_sq += u[i] * u[i];
  }
  const double pn = std::sqrt(p_sq), un = std::sqrt(u_sq);
  const double trust = pn > 0 && un > 0 ? std::clamp(pn / un, static_cast<double>(a.min_coeff),
                                                     static_cast<double>(a.max_coeff))
                                        : 1.0;
  for (size_t i = 0; i < n; ++i) c.ref_param[i] -= a.lr * trust * u[i];
  return trust;
}

void lamb_check(kernels::LambArgs args, Lowp lowp) {
  std::vector<TestChunk> chunks;
  chunks.emplace_back(uniform_values(37, 5, -1.0, 1.0));            // trust inside the clamp
  chunks.emplace_back(uniform_values(20, 6, 50.0, 100.0));          // ||p||/||u|| > max_coeff
  chunks.emplace_back(std::vector<double>(16, 0.0));                // ||p|| = 0: trust 1
  chunks.emplace_back(uniform_values(24, 8, -1e-5, 1e-5));          // ||p||/||u|| < min_coeff
  chunks.emplace_back(uniform_values(kLargeChunk, 11, -1.0, 1.0));  // the parallel reduction
  std::vector<double> first_trust;
  for (int64_t step = 1; step <= 3; ++step) {
    args.step = step;
    std::vector<kernels::OptimChunk> views;
    for (size_t k = 0; k < chunks.size(); ++k) {
      chunks[k].set_grad(300 * step + k);
      views.push_back(chunks[k].view(lowp));
      const double trust = lamb_reference(args, chunks[k]);
      if (step == 1) first_trust.push_back(trust);
    }
    kernels::lamb_step(args, views, Device::cpu());
  }
  // The chunks really exercise the three cases (a check of the test itself).
  EXPECT_GT(first_trust[0], args.min_coeff);
  EXPECT_LT(first_trust[0], args.max_coeff);
  EXPECT_EQ(first_trust[1], static_cast<double>(args.max_coeff));
  EXPECT_EQ(first_trust[2], 1.0);
  EXPECT_EQ(first_trust[3], static_cast<double>(args.min_coeff));
  for (TestChunk& c : chunks) {
    expect_close(c.doubles(c.param), c.ref_param, 1e-6, 1e-5, "lamb param");
    expect_close(c.doubles(c.state1), c.ref_state1, 1e-7, 1e-5, "lamb exp_avg");
    expect_close(c.doubles(c.state2), c.ref_state2, 1e-9, 1e-5, "lamb exp_avg_sq");
    if (lowp == Lowp::kBf16) {
      for (size_t i = 0; i < c.param.size(); ++i) {
        ASSERT_EQ(c.lowp_bf16[i].bits, float_to_bf16(c.param[i]).bits) << "bf16 copy at " << i;
      }
    }
  }
}

TEST(LambStep, MatchesReferenceWithTrustClamps) {
  lamb_check({.lr = 1e-2f, .weight_decay = 0.01f}, Lowp::kNone);
}

TEST(LambStep, WithoutBiasCorrectionWithGradScaleAndBf16Copy) {
  lamb_check({.lr = 1e-2f,
              .weight_decay = 0.01f,
              .grad_scale = 0.5f,
              .bias_correction = kernels::BiasCorrection::kOff},
             Lowp::kBf16);
}

}  // namespace
}  // namespace zt
