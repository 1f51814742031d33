// Reading a file whose name says how it is compressed: NAME.gz through zlib (gzip, concatenated
// members too), NAME.zst / NAME.zstd through libzstd's streaming decoder (concatenated frames
// too), anything else as it is. Used by `zt data prepare` (prepare.h) to read corpora as they
// are shipped. A truncated or corrupt stream is an error naming the file, never a short read.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "zt/core/status.h"

namespace zt {

enum class Compression : unsigned char { kNone, kGzip, kZstd };

// From the suffix (case-insensitive): .gz, .zst, .zstd.
Compression compression_from_name(const std::string& path);
// The file name without its compression suffix: "a/b.jsonl.gz" -> "b.jsonl".
std::string input_name_uncompressed(const std::string& path);

class InputStream {
 public:
  virtual ~InputStream() = default;
  // Up to `n` bytes of (decompressed) content into `buf`; 0 at the end. Errors name the file.
  virtual Result<size_t> read(char* buf, size_t n) = 0;
};

// Opens `path`, decompressing as its name says. Errors name the file.
Result<std::unique_ptr<InputStream>> input_stream_open(const std::string& path);

}  // namespace zt
