// The readers ZeroTrain exposes to files a user (or an attacker) controls, as fuzz targets: each
// takes arbitrary bytes and must return (an error Status is fine) without crashing, hanging or
// touching memory it does not own. Built two ways (tests/CMakeLists.txt, scripts/fuzz.sh):
// with clang's libFuzzer (coverage-guided, -fsanitize=fuzzer,address,undefined) for long runs,
// and into fuzz_driver.cc's generated-input harness that every CI build runs briefly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zt::fuzz {

struct Target {
  const char* name;
  void (*run)(const uint8_t* data, size_t size);
  std::vector<std::string> seeds;  // valid inputs the mutations start from
};

const std::vector<Target>& targets();

}  // namespace zt::fuzz
