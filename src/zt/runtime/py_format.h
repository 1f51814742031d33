// Python's repr() of a float ("0.001", "6e-05", "1.0"), for log lines users grep exactly as
// DeepSpeed prints them.
#pragma once

#include <string>

namespace zt {

std::string py_float(double v);

}  // namespace zt
