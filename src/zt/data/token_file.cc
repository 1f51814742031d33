// Token files: mmap reader and atomic llm.c-format writer (token_file.h). Every syscall is
// checked where it is made; its failure becomes a Status naming the file and errno text.
#include "zt/data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "zt/core/assert.h"
#include "zt/core/file_io.h"

namespace zt {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian; a big-endian host would need byte swapping");

namespace {

// Closes an fd on scope exit (open() error paths).
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// Token width of an llm.c header, or 0 when (magic, version) is not one llm.c writes.
int llmc_token_bytes(int32_t magic, int32_t version) {
  if (magic == kLlmcMagicGpt2 && version == kLlmcVersionGpt2) return 2;
  if (magic == kLlmcMagicLlama3 && version == kLlmcVersionLlama3) return 4;
  return 0;
}

bool is_llmc_magic(int32_t magic) {
  return magic == kLlmcMagicGpt2 || magic == kLlmcMagicLlama3;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Reader

Result<TokenFile> TokenFile::open(const std::string& path, const TokenFileOptions& options) {
  int raw_bytes = 0;
  switch (options.raw_dtype) {
    case DType::u8:
      raw_bytes = 1;
      break;
    case DType::u16:
      raw_bytes = 2;
      break;
    case DType::i32:
      raw_bytes = 4;
      break;
    default:
      return invalid_argument(
          "token file '{}': raw token dtype {} is not supported; use u16 "
          "(nanoGPT), u8 or i32",
          path, dtype_name(options.raw_dtype));
  }

  // A FIFO would block the open until a writer came; a folder or device fails later and worse.
  ZT_RETURN_IF_ERROR(input_file_check(path, "token file"));
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found("token file '{}' does not exist", path);
    return io_error("cannot open token file '{}': {}", path, errno_text());
  }
  FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_error("cannot stat token file '{}': {}", path, errno_text());
  if (!S_ISREG(st.st_mode)) return invalid_argument("token file '{}' is not a regular file", path);
  const auto file_bytes = static_cast<int64_t>(st.st_size);
  if (file_bytes == 0) {
    return invalid_argument("token file '{}' is empty (0 bytes); expected tokens", path);
  }

  TokenFile f;
  f.path_ = path;

  // Decide the format from the first header ints (pread: no mapping needed for tiny files).
  std::array<int32_t, 3> head{};
  bool has_magic = false;
  if (file_bytes >= 4) {
    ZT_RETURN_IF_ERROR(file_read_at(fd, head.data(), 4, 0, path, "token file"));
    has_magic = is_llmc_magic(head[0]);
  }
  TokenFileFormat format = options.format;
  if (format == TokenFileFormat::kAuto) {
    format = has_magic ? TokenFileFormat::kLlmc : TokenFileFormat::kRaw;
  }

  // A headerless file whose first two tokens happen to spell the magic (odds ~2^-32) is taken
  // for llm.c; the header errors then say how to force the raw reading.
  const char* raw_hint = options.format == TokenFileFormat::kAuto
                             ? "; if it is a headerless (nanoGPT) file, open it as raw"
                             : "";
  int64_t data_offset = 0;
  if (format == TokenFileFormat::kLlmc) {
    if (!has_magic) {
      return invalid_argument(
          "token file '{}' is not an llm.c token file: expected magic {} or {} in its first 4 "
          "bytes, found {}; for a headerless (nanoGPT) file use the raw format",
          path, kLlmcMagicGpt2, kLlmcMagicLlama3, file_bytes >= 4 ? head[0] : 0);
    }
    if (file_bytes < kLlmcHeaderBytes) {
      return invalid_argument(
          "token file '{}' is truncated: an llm.c header needs {} bytes, the file has {}", path,
          kLlmcHeaderBytes, file_bytes);
    }
    ZT_RETURN_IF_ERROR(file_read_at(fd, head.data(), sizeof(head), 0, path, "token file"));
    f.token_bytes_ = llmc_token_bytes(head[0], head[1]);
    if (f.token_bytes_ == 0) {
      return invalid_argument(
          "token file '{}' has a corrupt or unknown llm.c header: magic {} with version {}; "
          "expected version {} with magic {} (uint16 tokens) or version {} with magic {} "
          "(uint32 tokens){}",
          path, head[0], head[1], kLlmcVersionGpt2, kLlmcMagicGpt2, kLlmcVersionLlama3,
          kLlmcMagicLlama3, raw_hint);
    }
    if (head[2] < 0) {
      return invalid_argument("token file '{}' has a corrupt llm.c header: token count {} < 0",
                              path, head[2]);
    }
    const int64_t expected = kLlmcHeaderBytes + int64_t{head[2]} * f.token_bytes_;
    if (file_bytes != expected) {
      return invalid_argument(
          "token file '{}' is {}: its header says {} tokens of {} bytes ({} bytes with the "
          "header), the file has {} bytes; regenerate it{}",
          path, file_bytes < expected ? "truncated" : "the wrong size (trailing bytes)", head[2],
          f.token_bytes_, expected, file_bytes, raw_hint);
    }
    f.num_tokens_ = head[2];
    data_offset = kLlmcHeaderBytes;
  } else {
    f.token_bytes_ = raw_bytes;
    if (file_bytes % raw_bytes != 0) {
      return invalid_argument(
          "token file '{}' has {} bytes, not a whole number of {}-byte ({}) tokens; is it "
          "truncated, or is the raw dtype wrong?",
          path, file_bytes, raw_bytes, dtype_name(options.raw_dtype));
    }
    f.num_tokens_ = file_bytes / raw_bytes;
  }
  f.format_ = format;

  void* map = ::mmap(nullptr, static_cast<size_t>(file_bytes), PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) {
    return io_error("cannot memory-map token file '{}' ({} bytes): {}", path, file_bytes,
                    errno_text());
  }
  f.map_ = map;
  f.map_bytes_ = static_cast<size_t>(file_bytes);
  f.tokens_ = static_cast<const unsigned char*>(map) + data_offset;
  return f;  // the mapping stays valid after the fd closes
}

TokenFile::TokenFile(TokenFile&& other) noexcept {
  *this = std::move(other);
}

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this == &other) return *this;
  release();
  path_ = std::move(other.path_);
  format_ = other.format_;
  map_ = std::exchange(other.map_, nullptr);
  map_bytes_ = std::exchange(other.map_bytes_, 0);
  tokens_ = std::exchange(other.tokens_, nullptr);
  num_tokens_ = std::exchange(other.num_tokens_, 0);
  token_bytes_ = other.token_bytes_;
  return *this;
}

TokenFile::~TokenFile() {
  release();
}

void TokenFile::release() {
  if (map_ != nullptr) {
    // munmap of a mapping we made cannot fail unless the pointer is wrong: a bug.
    ZT_ASSERT(::munmap(map_, map_bytes_) == 0, "munmap '{}': {}", path_, errno_text());
  }
  map_ = nullptr;
  map_bytes_ = 0;
  tokens_ = nullptr;
}

uint32_t TokenFile::token(int64_t i) const {
  ZT_ASSERT(i >= 0 && i < num_tokens_, "token {} out of range [0, {}) in '{}'", i, num_tokens_,
            path_);
  const unsigned char* p = tokens_ + i * token_bytes_;
  // memcpy, not a cast: a typed load through a byte pointer breaks strict aliasing.
  switch (token_bytes_) {
    case 1:
      return *p;
    case 2: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    default: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
  }
}

void TokenFile::read_tokens(int64_t begin, std::span<uint32_t> out) const {
  const auto n = static_cast<int64_t>(out.size());
  ZT_ASSERT(begin >= 0 && n >= 0 && begin + n <= num_tokens_,
            "token range [{}, {}) outside [0, {}) in '{}'", begin, begin + n, num_tokens_, path_);
  const unsigned char* p = tokens_ + begin * token_bytes_;
  // One loop per width so the compiler vectorises each.
  switch (token_bytes_) {
    case 1:
      for (int64_t i = 0; i < n; ++i) out[i] = p[i];
      break;
    case 2:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        out[i] = v;
      }
      break;
    default:
      std::memcpy(out.data(), p, static_cast<size_t>(n) * 4);
      break;
  }
}

// ---------------------------------------------------------------------------------------------
// Writer

Result<TokenFileWriter> TokenFileWriter::create(const std::string& path, int64_t vocab_size) {
  if (vocab_size <= 0) {
    return invalid_argument("writing token file '{}': vocab_size must be > 0, got {}", path,
                            vocab_size);
  }
  if (vocab_size > int64_t{1} << 32) {
    return invalid_argument(
        "writing token file '{}': vocab_size {} does not fit llm.c's uint32 tokens (max 2^32)",
        path, vocab_size);
  }
  // The shared writer (core/file_io.h): a temporary renamed into place at finish(), or a device
  // or FIFO written in place.
  ZT_ASSIGN_OR_RETURN(OutputFile out, OutputFile::create(path, {.what = "token file"}));
  TokenFileWriter w;
  w.out_ = std::move(out);
  w.vocab_size_ = vocab_size;
  w.token_bytes_ = vocab_size <= 65536 ? 2 : 4;
  // Header placeholder; the real one (with the token count) is written over it by finish().
  std::vector<int32_t> header(kLlmcHeaderInts, 0);
  ZT_RETURN_IF_ERROR(w.out_.write(header.data(), kLlmcHeaderBytes));
  return w;
}

TokenFileWriter::TokenFileWriter(TokenFileWriter&& other) noexcept = default;
TokenFileWriter::~TokenFileWriter() = default;

Status TokenFileWriter::append(std::span<const int32_t> tokens) {
  ZT_ASSERT(out_.is_open(), "append to a finished or failed token file writer ('{}')",
            out_.path());
  // llm.c's header stores the count as int32.
  if (num_tokens_ + static_cast<int64_t>(tokens.size()) > INT32_MAX) {
    out_.abandon();
    return invalid_argument(
        "writing token file '{}': more than {} tokens do not fit llm.c's int32 header count; "
        "split the corpus into several files",
        out_.path(), INT32_MAX);
  }
  constexpr size_t kChunk = 1 << 16;
  std::vector<unsigned char> buf(std::min(tokens.size(), kChunk) * token_bytes_);
  for (size_t begin = 0; begin < tokens.size(); begin += kChunk) {
    const size_t n = std::min(kChunk, tokens.size() - begin);
    for (size_t i = 0; i < n; ++i) {
      const int32_t t = tokens[begin + i];
      if (t < 0 || t >= vocab_size_) {
        out_.abandon();
        return invalid_argument(
            "writing token file '{}': token {} at index {} is outside the vocabulary [0, {})",
            out_.path(), t, num_tokens_ + static_cast<int64_t>(begin + i), vocab_size_);
      }
      if (token_bytes_ == 2) {
        const auto v = static_cast<uint16_t>(t);
        std::memcpy(buf.data() + 2 * i, &v, 2);
      } else {
        const auto v = static_cast<uint32_t>(t);
        std::memcpy(buf.data() + 4 * i, &v, 4);
      }
    }
    ZT_RETURN_IF_ERROR(out_.write(buf.data(), n * token_bytes_));
  }
  num_tokens_ += static_cast<int64_t>(tokens.size());
  return Status::ok();
}

Status TokenFileWriter::finish() {
  ZT_ASSERT(out_.is_open(), "finish of a finished or failed token file writer ('{}')",
            out_.path());
  std::vector<int32_t> header(kLlmcHeaderInts, 0);
  const bool wide = token_bytes_ == 4;
  header[0] = wide ? kLlmcMagicLlama3 : kLlmcMagicGpt2;
  header[1] = wide ? kLlmcVersionLlama3 : kLlmcVersionGpt2;
  header[2] = static_cast<int32_t>(num_tokens_);
  ZT_RETURN_IF_ERROR(out_.write_at(header.data(), kLlmcHeaderBytes, 0));
  return out_.commit();
}

Status token_file_write(const std::string& path, std::span<const int32_t> tokens,
                        int64_t vocab_size) {
  ZT_ASSIGN_OR_RETURN(TokenFileWriter writer, TokenFileWriter::create(path, vocab_size));
  ZT_RETURN_IF_ERROR(writer.append(tokens));
  return writer.finish();
}

}  // namespace zt
