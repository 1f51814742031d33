// ZeroTrain's tokenizer encoding speed: a tokenizer (a tokenizer.json, its folder, or "bytes")
// over a text file split into documents at blank lines, each document encoded on its own without
// special tokens, on one thread and on N threads. Prints one JSON line: MB/s (the documents'
// UTF-8 bytes per second, separators not counted) of the cold first pass and of the warm passes
// after it (the tokenizer keeps a word cache, as its peers do), the token count, and a CRC-32 of
// all ids (zlib's crc32 over the ids as little-endian int32, documents in order), which
// bench/tokenize_peer.py computes from Hugging Face `tokenizers` the same way: equal CRCs mean
// the same ids over the whole text. scripts/gpu_check.sh (section `tokenize`) runs both.
//
//   zt_bench_tokenizer --tokenizer PATH --text FILE [--threads N] [--seconds 2] [--json OUT]
//
// Documents: the file split at each "\n\n" (left to right, as Python's str.split("\n\n") does),
// empty ones dropped. One thread: encode_append of every document into one vector. N threads:
// the documents cut into N contiguous ranges of about equal bytes, one std::thread each, each
// with its own vector, on a freshly loaded tokenizer so that its first pass is cold too.
#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <barrier>
#include <vector>

#include <nlohmann/json.hpp>

#include "zt/data/tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int cpu_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// zlib's CRC-32 (reflected polynomial 0xEDB88320), continued from `crc`.
uint32_t crc32_update(uint32_t crc, const unsigned char* p, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

uint32_t ids_crc32(const std::vector<int32_t>& ids) {
  static_assert(std::endian::native == std::endian::little, "the CRC is over little-endian ids");
  return crc32_update(0, reinterpret_cast<const unsigned char*>(ids.data()),
                      ids.size() * sizeof(int32_t));
}

std::vector<std::string_view> split_documents(std::string_view text) {
  std::vector<std::string_view> docs;
  size_t start = 0;
  while (true) {
    const size_t sep = text.find("\n\n", start);
    const std::string_view d =
        text.substr(start, sep == std::string_view::npos ? std::string_view::npos : sep - start);
    if (!d.empty()) docs.push_back(d);
    if (sep == std::string_view::npos) break;
    start = sep + 2;
  }
  return docs;
}

// Encodes docs[begin, end) into `out` (cleared first); false with a message on an error.
bool encode_range(const zt::Tokenizer& tok, const std::vector<std::string_view>& docs,
                  size_t begin, size_t end, std::vector<int32_t>& out, std::string& error) {
  out.clear();
  for (size_t i = begin; i < end; ++i) {
    zt::Status s = tok.encode_append(docs[i], /*add_special_tokens=*/false, out);
    if (!s.is_ok()) {
      error = "document " + std::to_string(i) + ": " + s.message();
      return false;
    }
  }
  return true;
}

struct Timing {
  double cold_mbps = 0, warm_mbps = 0, warm_s = 0;
  int passes = 0;
  int64_t tokens = 0;
};

// One cold pass, then warm passes until `seconds` have gone by (at least one). `pass` returns
// the number of tokens, or -1 on an error.
template <typename Pass>
bool time_passes(Pass&& pass, int64_t nbytes, double seconds, Timing& t) {
  const double mb = static_cast<double>(nbytes) / 1e6;
  auto t0 = Clock::now();
  t.tokens = pass();
  if (t.tokens < 0) return false;
  t.cold_mbps = mb / seconds_since(t0);
  while (t.passes == 0 || t.warm_s < seconds) {
    t0 = Clock::now();
    const int64_t n = pass();
    t.warm_s += seconds_since(t0);
    ++t.passes;
    if (n != t.tokens) {
      std::fprintf(stderr, "zt_bench_tokenizer: token count changed between passes: %lld then %lld\n",
                   static_cast<long long>(t.tokens), static_cast<long long>(n));
      return false;
    }
  }
  t.warm_mbps = mb * t.passes / t.warm_s;
  return true;
}

nlohmann::json row(int threads, const Timing& t) {
  return {{"engine", "zerotrain"},  {"threads", threads},       {"cold_MBps", t.cold_mbps},
          {"MBps", t.warm_mbps},    {"tokens", t.tokens},       {"passes", t.passes},
          {"seconds", t.warm_s}};
}

int run(int argc, char** argv) {
  std::string tok_path, text_path, json_path;
  int threads = 0;
  double seconds = 2.0;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "zt_bench_tokenizer: %s needs a value\n", k.c_str());
      return 2;
    }
    const std::string v = argv[i + 1];
    if (k == "--tokenizer") {
      tok_path = v;
    } else if (k == "--text") {
      text_path = v;
    } else if (k == "--threads") {
      threads = std::atoi(v.c_str());
    } else if (k == "--seconds") {
      seconds = std::atof(v.c_str());
    } else if (k == "--json") {
      json_path = v;
    } else {
      std::fprintf(stderr, "zt_bench_tokenizer: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (tok_path.empty() || text_path.empty()) {
    std::fprintf(stderr,
                 "usage: zt_bench_tokenizer --tokenizer PATH --text FILE [--threads N] "
                 "[--seconds S] [--json OUT]\n");
    return 2;
  }
  if (threads <= 0) threads = cpu_count();

  std::ifstream f(text_path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "zt_bench_tokenizer: cannot read %s\n", text_path.c_str());
    return 1;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  const std::vector<std::string_view> docs = split_documents(text);
  int64_t nbytes = 0;
  for (auto d : docs) nbytes += static_cast<int64_t>(d.size());
  if (docs.empty()) {
    std::fprintf(stderr, "zt_bench_tokenizer: %s has no text\n", text_path.c_str());
    return 1;
  }

  auto load = [&]() -> std::shared_ptr<const zt::Tokenizer> {
    auto t = zt::tokenizer_load(tok_path);
    if (!t) {
      std::fprintf(stderr, "zt_bench_tokenizer: %s\n", t.status().message().c_str());
      return nullptr;
    }
    return *t;
  };
  auto t0 = Clock::now();
  std::shared_ptr<const zt::Tokenizer> tok = load();
  if (!tok) return 1;
  const double load_s = seconds_since(t0);
  std::fprintf(stderr, "zt_bench_tokenizer: %s (loaded in %.3f s); %s: %zu documents, %lld bytes\n",
               tok->describe().c_str(), load_s, text_path.c_str(), docs.size(),
               static_cast<long long>(nbytes));

  // One thread, one vector for the whole text.
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(nbytes / 3 + 16));
  std::string error;
  auto pass1 = [&]() -> int64_t {
    if (!encode_range(*tok, docs, 0, docs.size(), ids, error)) return -1;
    return static_cast<int64_t>(ids.size());
  };
  Timing one;
  if (!time_passes(pass1, nbytes, seconds, one)) {
    if (!error.empty()) std::fprintf(stderr, "zt_bench_tokenizer: %s\n", error.c_str());
    return 1;
  }
  const uint32_t crc = ids_crc32(ids);
  std::fprintf(stderr, "  1 thread:   cold %8.2f MB/s  warm %8.2f MB/s  %lld tokens\n",
               one.cold_mbps, one.warm_mbps, static_cast<long long>(one.tokens));
  nlohmann::json results = nlohmann::json::array({row(1, one)});

  if (threads > 1) {
    std::shared_ptr<const zt::Tokenizer> fresh = load();  // so its first pass is cold
    if (!fresh) return 1;
    // Contiguous ranges of about nbytes / threads bytes each.
    std::vector<size_t> cut{0};
    int64_t acc = 0;
    for (size_t i = 0; i < docs.size(); ++i) {
      acc += static_cast<int64_t>(docs[i].size());
      if (cut.size() < static_cast<size_t>(threads) &&
          acc * threads >= nbytes * static_cast<int64_t>(cut.size())) {
        cut.push_back(i + 1);
      }
    }
    while (cut.size() < static_cast<size_t>(threads) + 1) cut.push_back(docs.size());
    std::vector<std::vector<int32_t>> outs(static_cast<size_t>(threads));
    std::vector<std::string> errors(static_cast<size_t>(threads));
    // A pool that lives across passes, as data preparation's workers do: each thread keeps
    // its word cache from one pass to the next (a thread per pass would start cold every time).
    std::atomic<bool> ok{true}, stop{false};
    std::barrier start(threads + 1), done(threads + 1);
    std::vector<std::thread> pool;
    pool.reserve(static_cast<size_t>(threads));
    for (int w = 0; w < threads; ++w) {
      pool.emplace_back([&, w] {
        const auto k = static_cast<size_t>(w);
        // The thread's own vector, handed over after each pass: vectors side by side in `outs`
        // share cache lines, and every append would bounce them between cores.
        std::vector<int32_t> mine;
        while (true) {
          start.arrive_and_wait();
          if (stop) return;
          if (!encode_range(*fresh, docs, cut[k], cut[k + 1], mine, errors[k])) ok = false;
          outs[k].swap(mine);
          done.arrive_and_wait();
        }
      });
    }
    auto passn = [&]() -> int64_t {
      start.arrive_and_wait();
      done.arrive_and_wait();
      if (!ok) return -1;
      int64_t n = 0;
      for (const auto& o : outs) n += static_cast<int64_t>(o.size());
      return n;
    };
    struct PoolStop {
      std::atomic<bool>& stop;
      std::barrier<>& start;
      std::vector<std::thread>& pool;
      ~PoolStop() {
        stop = true;
        start.arrive_and_wait();
        for (auto& th : pool) th.join();
      }
    } pool_stop{stop, start, pool};
    Timing many;
    if (!time_passes(passn, nbytes, seconds, many)) {
      for (const auto& e : errors) {
        if (!e.empty()) std::fprintf(stderr, "zt_bench_tokenizer: %s\n", e.c_str());
      }
      return 1;
    }
    std::vector<int32_t> all;
    all.reserve(static_cast<size_t>(many.tokens));
    for (const auto& o : outs) all.insert(all.end(), o.begin(), o.end());
    if (all != ids) {
      std::fprintf(stderr, "zt_bench_tokenizer: %d threads give other ids than one thread\n",
                   threads);
      return 1;
    }
    std::fprintf(stderr, "  %d threads: cold %8.2f MB/s  warm %8.2f MB/s\n", threads,
                 many.cold_mbps, many.warm_mbps);
    results.push_back(row(threads, many));
  }

  nlohmann::json j = {{"impl", "zerotrain"},
                      {"tokenizer", tok_path},
                      {"describe", tok->describe()},
                      {"text", text_path},
                      {"text_bytes", nbytes},
                      {"docs", docs.size()},
                      {"threads", threads},
                      {"load_s", load_s},
                      {"tokens", one.tokens},
                      {"ids_crc32", crc},
                      {"results", results}};
  const std::string line = j.dump();
  std::printf("%s\n", line.c_str());
  if (!json_path.empty()) {
    std::ofstream o(json_path);
    o << line << "\n";
    if (!o) {
      std::fprintf(stderr, "zt_bench_tokenizer: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zt_bench_tokenizer: error: %s\n", e.what());
    return 1;
  }
}
