// The generated-input harness (no libFuzzer needed): for each target, N inputs made from its
// seeds by random byte flips, insertions, deletions, truncations, repeats and splices of JSON
// and binary fragments (deeply nested brackets, huge numbers, long strings), deterministic for a
// seed. A crash is the test failing (ASan/UBSan builds catch memory errors too).
//   zt_fuzz_driver [--runs N] [--seed S] [--target NAME]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "fuzz_targets.h"

namespace {

const char* const kFragments[] = {
    "{", "}", "[", "]", "\"", ":", ",", "null", "true", "-", "1e308", "7E667", "99999999999999999999",
    "-9223372036854775809", "\"auto\"", "NaN", "\\u0000", "\xff\xfe", "slots=", " slots=-1",
    "{\"a\":", "\"dtype\":\"F32\"", "\"shape\":[", "\"data_offsets\":[", "\"__metadata__\":",
    "\xff\xff\xff\xff\xff\xff\xff\x7f", "\x00\x00\x00\x00"};

std::string mutate(std::string s, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng() % n); };
  const int edits = 1 + static_cast<int>(rng() % 8);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 7) {
      case 0:
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:
        s.insert(pick(s.size() + 1), 1, static_cast<char>(rng() % 256));
        break;
      case 2:
        if (!s.empty()) s.erase(pick(s.size()), 1 + pick(16));
        break;
      case 3:
        s.resize(pick(s.size() + 1));
        break;
      case 4: {
        const char* f = kFragments[pick(std::size(kFragments))];
        s.insert(pick(s.size() + 1), f, std::strlen(f) > 0 ? std::strlen(f) : 4);
        break;
      }
      case 5: {  // deep nesting
        const size_t depth = 1 + pick(rng() % 4 == 0 ? 200000 : 300);
        const size_t at = pick(s.size() + 1);
        s.insert(at, std::string(depth, rng() % 2 ? '[' : '{'));
        break;
      }
      case 6:
        if (!s.empty() && s.size() < (1u << 20)) {
          const size_t a = pick(s.size()), n = 1 + pick(std::min<size_t>(64, s.size() - a));
          s.insert(pick(s.size() + 1), s.substr(a, n));
        }
        break;
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  long runs = 2000;
  uint64_t seed = 1;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) runs = std::atol(argv[++i]);
    else if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--target") && i + 1 < argc) only = argv[++i];
  }
  for (const auto& t : zt::fuzz::targets()) {
    if (!only.empty() && only != t.name) continue;
    std::mt19937_64 rng(seed);
    const auto t0 = std::chrono::steady_clock::now();
    for (const std::string& s : t.seeds) {
      t.run(reinterpret_cast<const uint8_t*>(s.data()), s.size());
    }
    for (long r = 0; r < runs; ++r) {
      std::string in = t.seeds[static_cast<size_t>(rng() % t.seeds.size())];
      in = mutate(std::move(in), rng);
      t.run(reinterpret_cast<const uint8_t*>(in.data()), in.size());
    }
    std::printf("%-20s %ld inputs, no crash (%.1f s)\n", t.name, runs,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 0;
}
