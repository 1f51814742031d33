// Shared test helpers: seeded random tensors, central finite differences, closeness checks, and
// the skip for tests that need a CUDA device.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "zt/core/device.h"
#include "zt/core/tensor.h"

namespace zt::testing {

// Uniform values in [lo, hi) from a fixed-seed generator.
Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double lo = -1.0,
                     double hi = 1.0, Device device = Device::cpu());
// Integers in [0, hi) as i32.
Tensor random_ints(const Shape& shape, int32_t hi, uint64_t seed, Device device = Device::cpu());

// Central finite difference of a scalar function f with respect to every element of x (f64 CPU
// tensor): grad[i] = (f(x + h e_i) - f(x - h e_i)) / 2h. x is restored afterwards.
std::vector<double> finite_difference(Tensor& x, const std::function<double()>& f,
                                      double h = 1e-6);

// Max |a-b| / (atol + rtol |b|) over elements; <= 1 means close.
double max_scaled_error(const std::vector<double>& a, const std::vector<double>& b, double atol,
                        double rtol);

// Expects every element close; prints the worst index on failure.
void expect_close(const std::vector<double>& actual, const std::vector<double>& expected,
                  double atol, double rtol, const char* what);

// Dot product of a tensor's values with fixed random weights: a scalar "loss" whose gradient with
// respect to the tensor is those weights (for finite-difference checks of ops with tensor outputs).
std::vector<double> random_weights(int64_t n, uint64_t seed);
double weighted_sum(const Tensor& t, const std::vector<double>& w);

// ||a - b|| / ||b|| (L2 norms): how far a run's weights are from a reference run's as a whole.
double rel_l2(const std::vector<double>& a, const std::vector<double>& b);

// A fresh folder under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "zt_test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A loopback TCP port that was free a moment ago (bind to port 0, read it back, close).
int free_tcp_port();

// True in the AddressSanitizer build (scripts/test.sh's second phase), where every step costs
// many times more: the longest multi-rank learning runs skip there, their single-rank siblings
// and the normal build keep them covered.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kUnderSanitizer = true;
#else
inline constexpr bool kUnderSanitizer = false;
#endif

}  // namespace zt::testing

#define ZT_SKIP_WITHOUT_CUDA()                                               \
  do {                                                                       \
    if (::zt::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";    \
  } while (0)
