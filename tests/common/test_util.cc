#include "common/test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace zt::testing {

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double lo, double hi,
                     Device device) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (double& x : v) x = dist(rng);
  return Tensor::from_doubles(v, shape, dtype, device);
}

Tensor random_ints(const Shape& shape, int32_t hi, uint64_t seed, Device device) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, hi - 1);
  Tensor t = Tensor::empty(shape, DType::i32, Device::cpu());
  auto* p = t.data<int32_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return device.is_cpu() ? t : t.to(device);
}

std::vector<double> finite_difference(Tensor& x, const std::function<double()>& f, double h) {
  ZT_ASSERT(x.dtype() == DType::f64 && x.device().is_cpu(), "finite differences need f64 CPU");
  std::vector<double> g(static_cast<size_t>(x.numel()));
  double* p = x.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    double orig = p[i];
    p[i] = orig + h;
    double fp = f();
    p[i] = orig - h;
    double fm = f();
    p[i] = orig;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

double max_scaled_error(const std::vector<double>& a, const std::vector<double>& b, double atol,
                        double rtol) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double e = std::abs(a[i] - b[i]) / (atol + rtol * std::abs(b[i]));
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
  }
  return worst;
}

void expect_close(const std::vector<double>& actual, const std::vector<double>& expected,
                  double atol, double rtol, const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  size_t worst_i = 0;
  double worst = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    double e = std::abs(actual[i] - expected[i]) / (atol + rtol * std::abs(expected[i]));
    if (std::isnan(e) || e > worst) {
      worst = std::isnan(e) ? INFINITY : e;
      worst_i = i;
    }
  }
  EXPECT_LE(worst, 1.0) << what << ": worst element " << worst_i << " actual "
                        << actual[worst_i] << " expected " << expected[worst_i] << " (atol "
                        << atol << ", rtol " << rtol << ", n " << actual.size() << ")";
}

std::vector<double> random_weights(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> w(static_cast<size_t>(n));
  for (double& x : w) x = dist(rng);
  return w;
}

double weighted_sum(const Tensor& t, const std::vector<double>& w) {
  std::vector<double> v = t.to_doubles();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * w[i];
  return s;
}

TempDir::TempDir(const std::string& prefix) {
  std::random_device rd;
  path_ = std::filesystem::temp_directory_path() /
          fmt::format("{}_{}_{}", prefix, ::getpid(), rd());
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

int free_tcp_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

double rel_l2(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace zt::testing
