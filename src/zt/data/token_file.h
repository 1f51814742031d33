// Token files: a flat array of token ids on disk, memory-mapped read-only (MAP_PRIVATE) so a
// dataset of any size costs only the pages a batch touches. Two on-disk formats, the ones users
// already have:
//   - llm.c's (dev/data/data_common.py write_datafile): a header of 256 little-endian int32
//     (header[0] magic, header[1] version, header[2] number of tokens), then the tokens.
//     GPT-2 files: magic 20240520, version 1, uint16 tokens. Llama-3 files: magic 20240801,
//     version 7, uint32 tokens.
//   - nanoGPT's (prepare.py, np.memmap): raw headerless tokens, uint16 unless told otherwise.
// Assumes a little-endian host (as both producers do: numpy's native order on x86 and ARM).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "zt/core/dtype.h"
#include "zt/core/file_io.h"
#include "zt/core/status.h"

namespace zt {

// llm.c header constants.
inline constexpr int32_t kLlmcMagicGpt2 = 20240520;    // version 1, uint16 tokens
inline constexpr int32_t kLlmcMagicLlama3 = 20240801;  // version 7, uint32 tokens
inline constexpr int32_t kLlmcVersionGpt2 = 1;
inline constexpr int32_t kLlmcVersionLlama3 = 7;
inline constexpr int64_t kLlmcHeaderInts = 256;
inline constexpr int64_t kLlmcHeaderBytes = kLlmcHeaderInts * 4;

enum class TokenFileFormat : unsigned char {
  kAuto,  // llm.c when the file opens with a known magic, else raw
  kLlmc,  // require an llm.c header
  kRaw,   // headerless tokens of TokenFileOptions::raw_dtype (nanoGPT)
};

struct TokenFileOptions {
  TokenFileFormat format = TokenFileFormat::kAuto;
  // Element type of a headerless file: u16 (nanoGPT), u8, or i32 (4-byte tokens; read as their
  // unsigned bit pattern, so a negative value shows up as an out-of-vocabulary token).
  DType raw_dtype = DType::u16;
};

class TokenFile {
 public:
  // Maps `path`. Errors name the file, what was expected and what was found: missing file, a
  // size that is not a whole number of tokens, an llm.c header whose version is unknown or whose
  // token count disagrees with the file size (truncated or trailing bytes).
  static Result<TokenFile> open(const std::string& path, const TokenFileOptions& options = {});

  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();

  const std::string& path() const { return path_; }
  TokenFileFormat format() const { return format_; }  // kLlmc or kRaw once opened
  int64_t num_tokens() const { return num_tokens_; }
  int token_bytes() const { return token_bytes_; }  // 1, 2 or 4

  // Token i as stored (unsigned). i must be in [0, num_tokens()).
  uint32_t token(int64_t i) const;
  // Copies tokens [begin, begin + out.size()) into `out`; the range must lie inside the file.
  void read_tokens(int64_t begin, std::span<uint32_t> out) const;

 private:
  TokenFile() = default;
  void release();

  std::string path_;
  TokenFileFormat format_ = TokenFileFormat::kRaw;
  void* map_ = nullptr;  // whole file, from mmap
  size_t map_bytes_ = 0;
  const unsigned char* tokens_ = nullptr;  // first token, inside map_
  int64_t num_tokens_ = 0;
  int token_bytes_ = 2;
};

// Writes `tokens` as an llm.c token file: the GPT-2 header and uint16 tokens when
// vocab_size <= 65536, else the Llama-3 header and uint32 tokens. Every token must be in
// [0, vocab_size). The write is atomic: a temporary file beside `path` is written, synced and
// renamed over it, so a reader never sees a half-written file. Missing parent folders are made.
Status token_file_write(const std::string& path, std::span<const int32_t> tokens,
                        int64_t vocab_size);

// The streaming form of token_file_write, for corpora larger than memory: append() any number
// of times, then finish() publishes the file. Destroying an unfinished writer removes its
// temporary file and leaves `path` untouched.
class TokenFileWriter {
 public:
  static Result<TokenFileWriter> create(const std::string& path, int64_t vocab_size);

  TokenFileWriter(TokenFileWriter&& other) noexcept;
  TokenFileWriter& operator=(TokenFileWriter&& other) = delete;
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;
  ~TokenFileWriter();

  Status append(std::span<const int32_t> tokens);
  Status finish();
  int64_t num_tokens() const { return num_tokens_; }

 private:
  TokenFileWriter() = default;

  OutputFile out_;
  int64_t vocab_size_ = 0;
  int token_bytes_ = 2;
  int64_t num_tokens_ = 0;
};

}  // namespace zt
