// safetensors files (the Hugging Face format: an 8-byte little-endian header length, a JSON
// header naming each tensor's dtype, shape and byte range, then the raw bytes): what checkpoints
// and exports hold instead of pickles. The writer hashes every byte it writes (XXH3-64) so the
// checkpoint's metadata can carry a checksum per file; the reader validates the whole header
// (lengths, offsets, dtypes, shapes, nesting) before any tensor is read, so a truncated,
// corrupted or foreign file is one clear error naming it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "zt/core/dtype.h"
#include "zt/core/status.h"

namespace zt::ckpt {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // host memory, numel * dtype size bytes
  // When data is null: called with a host buffer of the tensor's size to fill just before it is
  // written (so a large file never needs all its tensors in host memory at once). An error
  // abandons the file.
  std::function<Status(void*)> produce;
};

struct WrittenFile {
  int64_t bytes = 0;
  uint64_t xxh3 = 0;  // of the whole file as written
};

// Writes `tensors` (in order) and `metadata` (safetensors' "__metadata__": strings only) to
// `path` atomically through the shared writer (core/file_io.h).
Result<WrittenFile> safetensors_write(const std::string& path,
                                      const std::vector<TensorToWrite>& tensors,
                                      const std::map<std::string, std::string>& metadata,
                                      std::string_view what = "safetensors file");

struct TensorEntry {
  DType dtype = DType::f32;
  std::string dtype_name;  // as in the file ("F32", "BF16", ...)
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t begin = 0, end = 0;  // byte range in the file (absolute)
};

class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::string& path);
  SafetensorsFile(SafetensorsFile&& o) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& o) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorEntry>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  int64_t file_bytes() const { return file_bytes_; }
  // The entry of `name`, or an error naming the file and the tensor.
  Result<const TensorEntry*> find(const std::string& name) const;
  // Copies elements [first, first + count) of tensor `name` (its own dtype) into dst.
  Status read(const std::string& name, int64_t first, int64_t count, void* dst) const;
  // Copies bytes [offset, offset + n) of the file (a streaming reader's chunk).
  Status read_bytes(int64_t offset, int64_t n, void* dst) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  int fd_ = -1;
  int64_t file_bytes_ = 0;
  std::map<std::string, TensorEntry> tensors_;
  std::map<std::string, std::string> metadata_;
};

// XXH3-64 of a whole file (the checksums in a checkpoint's metadata), read in large blocks.
Result<uint64_t> file_xxh3(const std::string& path);
std::string hash_hex(uint64_t h);

}  // namespace zt::ckpt
