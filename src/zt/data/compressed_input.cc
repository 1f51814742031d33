// Plain, gzip and zstd input streams (compressed_input.h).
#include "zt/data/compressed_input.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <vector>

namespace zt {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string lower_name(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return name;
}

class PlainStream final : public InputStream {
 public:
  PlainStream(std::string path, std::FILE* f) : path_(std::move(path)), f_(f) {}
  ~PlainStream() override { std::fclose(f_); }
  PlainStream(const PlainStream&) = delete;
  PlainStream& operator=(const PlainStream&) = delete;
  Result<size_t> read(char* buf, size_t n) override {
    const size_t got = std::fread(buf, 1, n, f_);
    if (got == 0 && std::ferror(f_) != 0) {
      return io_error("reading '{}' failed: {}", path_, std::strerror(errno));
    }
    return got;
  }

 private:
  std::string path_;
  std::FILE* f_;
};

class GzipStream final : public InputStream {
 public:
  GzipStream(std::string path, gzFile f) : path_(std::move(path)), f_(f) { gzbuffer(f_, 1U << 18); }
  ~GzipStream() override { gzclose(f_); }
  GzipStream(const GzipStream&) = delete;
  GzipStream& operator=(const GzipStream&) = delete;
  Result<size_t> read(char* buf, size_t n) override {
    const int got = gzread(f_, buf, static_cast<unsigned>(std::min<size_t>(n, INT_MAX / 2)));
    int err = Z_OK;
    const char* msg = gzerror(f_, &err);
    if (got < 0 || (got == 0 && err != Z_OK && err != Z_STREAM_END)) {
      return io_error("'{}' is not valid gzip data ({}){}", path_, msg,
                      err == Z_BUF_ERROR ? "; the file is truncated" : "");
    }
    // zlib passes data without a gzip header through unchanged; a .gz name promises gzip.
    if (got > 0 && gzdirect(f_) != 0) {
      return io_error("'{}' ends in .gz but is not gzip data; rename it", path_);
    }
    return static_cast<size_t>(got);
  }

 private:
  std::string path_;
  gzFile f_;
};

class ZstdStream final : public InputStream {
 public:
  ZstdStream(std::string path, std::FILE* f)
      : path_(std::move(path)), f_(f), dctx_(ZSTD_createDCtx()), in_(ZSTD_DStreamInSize()) {}
  ~ZstdStream() override {
    ZSTD_freeDCtx(dctx_);
    std::fclose(f_);
  }
  ZstdStream(const ZstdStream&) = delete;
  ZstdStream& operator=(const ZstdStream&) = delete;
  Result<size_t> read(char* buf, size_t n) override {
    if (dctx_ == nullptr) return io_error("out of memory for a zstd decoder");
    ZSTD_outBuffer out{buf, n, 0};
    for (;;) {
      if (in_buf_.pos == in_buf_.size && !eof_) {
        const size_t got = std::fread(in_.data(), 1, in_.size(), f_);
        if (got == 0) {
          if (std::ferror(f_) != 0) {
            return io_error("reading '{}' failed: {}", path_, std::strerror(errno));
          }
          eof_ = true;
        }
        in_buf_ = ZSTD_inBuffer{in_.data(), got, 0};
      }
      const size_t in_before = in_buf_.pos;
      const size_t r = ZSTD_decompressStream(dctx_, &out, &in_buf_);
      if (ZSTD_isError(r) != 0) {
        return io_error("'{}' is not valid zstd data ({})", path_, ZSTD_getErrorName(r));
      }
      const bool progressed = in_buf_.pos != in_before || out.pos > 0;
      if (progressed) frame_open_ = r != 0;  // 0: a frame just ended
      if (out.pos > 0) return out.pos;
      if (eof_ && in_buf_.pos == in_buf_.size && !progressed) {
        if (frame_open_) {
          return io_error("'{}' is truncated: its last zstd frame is incomplete", path_);
        }
        return size_t{0};
      }
    }
  }

 private:
  std::string path_;
  std::FILE* f_;
  ZSTD_DCtx* dctx_;
  std::vector<char> in_;
  ZSTD_inBuffer in_buf_{nullptr, 0, 0};
  bool eof_ = false;
  bool frame_open_ = false;
};

}  // namespace

Compression compression_from_name(const std::string& path) {
  const std::string name = lower_name(path);
  if (ends_with(name, ".gz")) return Compression::kGzip;
  if (ends_with(name, ".zst") || ends_with(name, ".zstd")) return Compression::kZstd;
  return Compression::kNone;
}

std::string input_name_uncompressed(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  const std::string lower = lower_name(path);
  for (std::string_view suffix : {".gz", ".zstd", ".zst"}) {
    if (ends_with(lower, suffix)) return name.substr(0, name.size() - suffix.size());
  }
  return name;
}

Result<std::unique_ptr<InputStream>> input_stream_open(const std::string& path) {
  const Compression c = compression_from_name(path);
  if (c == Compression::kGzip) {
    gzFile f = gzopen(path.c_str(), "rb");
    if (f == nullptr) {
      return io_error("cannot open '{}' for reading: {}", path, std::strerror(errno));
    }
    return std::unique_ptr<InputStream>(new GzipStream(path, f));
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return io_error("cannot open '{}' for reading: {}", path, std::strerror(errno));
  }
  if (c == Compression::kZstd) return std::unique_ptr<InputStream>(new ZstdStream(path, f));
  return std::unique_ptr<InputStream>(new PlainStream(path, f));
}

}  // namespace zt
