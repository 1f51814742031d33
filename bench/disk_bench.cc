// Sequential O_DIRECT throughput of a folder's disk through aio::SwapFile, as fio measures it
// (rw=write then rw=read, direct=1, bs=block size, iodepth=queue depth): the disk's measured
// O_DIRECT bandwidth that NVMe swapping (ZeRO-Infinity) is compared against.
//
//   zt_bench_disk --dir D [--size-gb 1] [--block-size 1048576] [--queue-depth 8] [--threads 1]
//                 [--backend auto|io_uring|libaio|threads] [--single-submit] [--no-overlap]
//                 [--qd1-size-gb G]
//
// Writes G GB to a swap file in D (reserved first with fallocate, as swapping does), reads it
// back, then does the same at queue depth 1 with one thread (over --qd1-size-gb, by default the
// smaller of G and 1) for contrast, and removes the file. Prints one JSON line: write_gbs,
// read_gbs (1e9 bytes per second), the queue-depth-1 pair, the backend and its note.
//
// Every request of a pass is queued at once; the SwapFile keeps queue_depth blocks in flight per
// ring. All writes share one source buffer and all reads one destination buffer (the kernel
// only reads a write's buffer; concurrent reads into one buffer carry the same bytes), so memory
// stays at one buffer of at most 256 MiB whatever the size. The destination is compared with the
// source after the read (verified, a sanity check). O_DIRECT bypasses the page cache, so the read
// measures the disk either way; the cache is still dropped between the passes where the process may
// (root), and drop_caches says whether it could. Writes are not fsynced: an O_DIRECT write is
// complete on the device when it completes, as with fio's default.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "zt/core/aio.h"

namespace {

using zt::bench::check;
using zt::bench::drop_caches;
using zt::bench::seconds_since;

namespace aio = zt::aio;

struct Pass {
  double write_gbs = 0, read_gbs = 0;
  bool verified = false, dropped = false;
  std::string backend, note;
};

// One write pass and one read pass over `bytes` of a fresh swap file at `path`.
Pass run_pass(const std::string& path, int64_t bytes, const aio::Options& options) {
  auto created = aio::SwapFile::create(path, bytes, options, "benchmark swap file");
  check(created.status());
  aio::SwapFile& file = **created;
  const int64_t chunk = std::min<int64_t>(bytes, int64_t{256} << 20);
  aio::AlignedBuffer src(chunk), dst(chunk);
  // Bytes that differ page to page, so a block read from the wrong place shows in the check.
  auto* s = static_cast<unsigned char*>(src.data());
  for (int64_t i = 0; i < chunk; ++i)
    s[i] = static_cast<unsigned char>((i * 131 + i / 4096) & 0xff);
  std::memset(dst.data(), 0, static_cast<size_t>(chunk));

  Pass p;
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t off = 0; off < bytes; off += chunk) {
    file.write_async(src.data(), std::min(chunk, bytes - off), off);
  }
  check(file.wait_all());
  p.write_gbs = static_cast<double>(bytes) / seconds_since(t0) / 1e9;
  p.dropped = drop_caches();
  t0 = std::chrono::steady_clock::now();
  for (int64_t off = 0; off < bytes; off += chunk) {
    file.read_async(dst.data(), std::min(chunk, bytes - off), off);
  }
  check(file.wait_all());
  p.read_gbs = static_cast<double>(bytes) / seconds_since(t0) / 1e9;
  // A sanity check, not a proof: every chunk was read into dst and the first covers all of it;
  // each holds the source's bytes over its length.
  p.verified = std::memcmp(dst.data(), src.data(), static_cast<size_t>(chunk)) == 0;
  p.backend = aio::backend_name(file.backend());
  p.note = file.backend_note();
  check(file.remove());
  return p;
}

int64_t gb_to_bytes(double gb) {
  return aio::align_up(static_cast<int64_t>(gb * 1e9));
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  double size_gb = 1, qd1_size_gb = -1;
  aio::Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    try {
      if (k == "--dir")
        dir = next();
      else if (k == "--size-gb")
        size_gb = std::stod(next());
      else if (k == "--qd1-size-gb")
        qd1_size_gb = std::stod(next());
      else if (k == "--block-size")
        options.block_size = std::stoll(next());
      else if (k == "--queue-depth")
        options.queue_depth = std::stoi(next());
      else if (k == "--threads")
        options.thread_count = std::stoi(next());
      else if (k == "--single-submit")
        options.single_submit = true;
      else if (k == "--no-overlap")
        options.overlap_events = false;
      else if (k == "--backend") {
        const std::string name = next();
        auto b = aio::backend_parse(name);
        if (!b) {
          std::fprintf(stderr,
                       "zt_bench_disk: --backend %s: use auto, io_uring, libaio or threads\n",
                       name.c_str());
          return 2;
        }
        options.backend = *b;
      } else {
        std::fprintf(stderr, "zt_bench_disk: unknown argument %s\n", k.c_str());
        return 2;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "zt_bench_disk: %s needs a number\n", k.c_str());
      return 2;
    }
  }
  if (dir.empty() || size_gb <= 0) {
    std::fprintf(stderr, "zt_bench_disk needs --dir PATH (and --size-gb above 0)\n");
    return 2;
  }
  if (qd1_size_gb <= 0) qd1_size_gb = std::min(size_gb, 1.0);
  try {
    const int64_t bytes = gb_to_bytes(size_gb), bytes_qd1 = gb_to_bytes(qd1_size_gb);
    check(aio::nvme_path_check(dir, std::max(bytes, bytes_qd1), "--dir"));
    const std::string path =
        (std::filesystem::path(dir) / fmt::format("zt_bench_disk.{}.swp", ::getpid())).string();
    const Pass deep = run_pass(path, bytes, options);
    aio::Options qd1 = options;
    qd1.queue_depth = 1;
    qd1.thread_count = 1;
    const Pass shallow = run_pass(path, bytes_qd1, qd1);
    nlohmann::json r = {{"impl", "zerotrain"},
                        {"dir", dir},
                        {"bytes", bytes},
                        {"block_size", options.block_size},
                        {"queue_depth", options.queue_depth},
                        {"threads", options.thread_count},
                        {"single_submit", options.single_submit},
                        {"overlap_events", options.overlap_events},
                        {"backend", deep.backend},
                        {"backend_note", deep.note},
                        {"write_gbs", deep.write_gbs},
                        {"read_gbs", deep.read_gbs},
                        {"bytes_qd1", bytes_qd1},
                        {"write_gbs_qd1", shallow.write_gbs},
                        {"read_gbs_qd1", shallow.read_gbs},
                        {"verified", deep.verified && shallow.verified},
                        {"drop_caches", deep.dropped && shallow.dropped}};
    std::printf("%s\n", r.dump().c_str());
    return deep.verified && shallow.verified ? 0 : 1;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "zt_bench_disk: %s\n", ex.what());
    return 1;
  }
}
