#include "zt/runtime/py_format.h"

#include <fmt/format.h>

#include <cmath>

namespace zt {

std::string py_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, like Python; Python switches to exponent form below 1e-4 and
  // at or above 1e16.
  double a = std::fabs(v);
  std::string s;
  if (a != 0 && (a < 1e-4 || a >= 1e16)) {
    s = fmt::format("{:e}", v);
    // Use the shortest representation's digits.
    std::string shortest = fmt::format("{}", v);
    if (shortest.find('e') != std::string::npos) s = shortest;
    // Python writes at least two exponent digits: 6e-05.
    auto e = s.find('e');
    if (e != std::string::npos) {
      std::string mant = s.substr(0, e);
      int exp = std::stoi(s.substr(e + 1));
      s = fmt::format("{}e{}{:02d}", mant, exp < 0 ? '-' : '+', std::abs(exp));
    }
    return s;
  }
  s = fmt::format("{}", v);
  if (s.find('e') != std::string::npos) {
    // fmt chose exponent form where Python would not: print fixed with enough digits.
    s = fmt::format("{:f}", v);
    while (!s.empty() && s.back() == '0') s.pop_back();
  }
  if (s.find('.') == std::string::npos) s += ".0";
  if (s.back() == '.') s += "0";
  return s;
}

}  // namespace zt
