#include "zt/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "zt/core/file_io.h"
#include "zt/core/json_limits.h"

namespace zt::ckpt {
namespace {

// safetensors' dtype names for ours (the format's table; F64 etc. for completeness).
struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::f32, "F32"}, {DType::f16, "F16"}, {DType::bf16, "BF16"}, {DType::f64, "F64"},
    {DType::i32, "I32"}, {DType::i64, "I64"}, {DType::u16, "U16"},   {DType::u8, "U8"},
};

const char* st_dtype_name(DType d) {
  for (const auto& e : kDTypeNames)
    if (e.dtype == d) return e.name;
  return "?";
}

// The header may be at most this large: real ones are kilobytes (a 70B model's is ~100 KB).
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

}  // namespace

std::string hash_hex(uint64_t h) {
  return fmt::format("{:016x}", h);
}

Result<WrittenFile> safetensors_write(const std::string& path,
                                      const std::vector<TensorToWrite>& tensors,
                                      const std::map<std::string, std::string>& metadata,
                                      std::string_view what) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  int64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    const int64_t bytes = numel * static_cast<int64_t>(dtype_size(t.dtype));
    header[t.name] = {{"dtype", st_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  // The data starts 8-byte aligned (readers map it and view it as typed arrays).
  h.append((8 - (8 + h.size()) % 8) % 8, ' ');
  const uint64_t n = h.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));

  ZT_ASSIGN_OR_RETURN(OutputFile f, OutputFile::create(path, {.what = what}));
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  auto put = [&](const void* p, size_t bytes) -> Status {
    XXH3_64bits_update(state, p, bytes);
    return f.write(p, bytes);
  };
  Status s = put(len, 8);
  if (s.is_ok()) s = put(h.data(), h.size());
  std::vector<char> buf;
  for (const TensorToWrite& t : tensors) {
    if (!s.is_ok()) break;
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    const auto bytes = static_cast<size_t>(numel) * dtype_size(t.dtype);
    if (bytes == 0) continue;
    const void* src = t.data;
    if (src == nullptr) {
      if (buf.size() < bytes) buf.resize(bytes);
      s = t.produce(buf.data());
      if (!s.is_ok()) break;
      src = buf.data();
    }
    s = put(src, bytes);
  }
  WrittenFile out{.bytes = f.bytes_written(), .xxh3 = XXH3_64bits_digest(state)};
  XXH3_freeState(state);
  ZT_RETURN_IF_ERROR(s);
  ZT_RETURN_IF_ERROR(f.commit());
  return out;
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  ZT_RETURN_IF_ERROR(input_file_check(path, "safetensors file"));
  SafetensorsFile f;
  f.path_ = path;
  f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd_ < 0) return io_error("cannot read '{}': {}", path, errno_text());
  (void)::posix_fadvise(f.fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
  struct stat st {};
  if (::fstat(f.fd_, &st) != 0) return io_error("cannot read '{}': {}", path, errno_text());
  f.file_bytes_ = st.st_size;
  auto bad = [&](const std::string& why) {
    return invalid_argument("'{}' is not a valid safetensors file: {}", path, why);
  };
  if (f.file_bytes_ < 8) return bad(fmt::format("it has {} bytes, less than the 8-byte header "
                                                "length (truncated?)", f.file_bytes_));
  unsigned char len[8];
  ZT_RETURN_IF_ERROR(file_read_at(f.fd_, len, 8, 0, path, "safetensors file"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > kMaxHeaderBytes || n > static_cast<uint64_t>(f.file_bytes_ - 8)) {
    return bad(fmt::format("its header length {} does not fit the file's {} bytes (truncated, "
                           "or another kind of file)", n, f.file_bytes_));
  }
  std::string text(n, '\0');
  ZT_RETURN_IF_ERROR(file_read_at(f.fd_, text.data(), n, 8, path, "safetensors file"));
  ZT_RETURN_IF_ERROR(json_nesting_check(text, path, 8));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return bad(fmt::format("its header is not JSON ({})", e.what()));
  }
  if (!header.is_object()) return bad("its header is not a JSON object");
  const int64_t data_begin = 8 + static_cast<int64_t>(n);
  const int64_t data_bytes = f.file_bytes_ - data_begin;
  try {
    for (const auto& [name, e] : header.items()) {
      if (name == "__metadata__") {
        if (!e.is_object()) return bad("__metadata__ is not an object");
        for (const auto& [k, v] : e.items()) {
          if (!v.is_string()) return bad(fmt::format("__metadata__.{} is not a string", k));
          f.metadata_[k] = v.get<std::string>();
        }
        continue;
      }
      if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
          !e.contains("data_offsets")) {
        return bad(fmt::format("tensor '{}' lacks dtype, shape or data_offsets", name));
      }
      TensorEntry t;
      t.dtype_name = e.at("dtype").get<std::string>();
      bool known = false;
      for (const auto& d : kDTypeNames) {
        if (t.dtype_name == d.name) {
          t.dtype = d.dtype;
          known = true;
        }
      }
      if (!known) return bad(fmt::format("tensor '{}' has dtype {}, not one ZeroTrain reads",
                                         name, t.dtype_name));
      t.numel = 1;
      const auto& shape = e.at("shape");
      if (!shape.is_array() || shape.size() > 8) {
        return bad(fmt::format("tensor '{}' has a bad shape", name));
      }
      for (const auto& d : shape) {
        if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 40)) {
          return bad(fmt::format("tensor '{}' has a bad shape {}", name, shape.dump()));
        }
        t.shape.push_back(d.get<int64_t>());
        // Checked before multiplying: 2^40 x 2^40 would overflow.
        constexpr int64_t kMaxElements = int64_t{1} << 40;
        if (t.shape.back() > 0 && t.numel > kMaxElements / t.shape.back()) {
          return bad(fmt::format("tensor '{}' is too large (shape {})", name, shape.dump()));
        }
        t.numel *= t.shape.back();
      }
      const auto& off = e.at("data_offsets");
      if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
          !off[1].is_number_unsigned()) {
        return bad(fmt::format("tensor '{}' has bad data_offsets", name));
      }
      const uint64_t a = off[0].get<uint64_t>(), b = off[1].get<uint64_t>();
      if (a > b || b > static_cast<uint64_t>(data_bytes)) {
        return bad(fmt::format("tensor '{}' lies at bytes [{}, {}) of a data section of {} bytes "
                               "(truncated?)", name, a, b, data_bytes));
      }
      if (b - a != static_cast<uint64_t>(t.numel) * dtype_size(t.dtype)) {
        return bad(fmt::format("tensor '{}' has {} bytes for a {} tensor of {} elements", name,
                               b - a, t.dtype_name, t.numel));
      }
      t.begin = data_begin + static_cast<int64_t>(a);
      t.end = data_begin + static_cast<int64_t>(b);
      f.tensors_[name] = std::move(t);
    }
  } catch (const nlohmann::json::exception& e) {
    return bad(e.what());
  }
  return f;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(std::exchange(o.fd_, -1)),
      file_bytes_(o.file_bytes_),
      tensors_(std::move(o.tensors_)),
      metadata_(std::move(o.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
    file_bytes_ = o.file_bytes_;
    tensors_ = std::move(o.tensors_);
    metadata_ = std::move(o.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

Result<const TensorEntry*> SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return not_found("'{}' has no tensor '{}' (a checkpoint of another model, or a damaged "
                     "file)", path_, name);
  }
  return &it->second;
}

Status SafetensorsFile::read(const std::string& name, int64_t first, int64_t count,
                             void* dst) const {
  ZT_ASSIGN_OR_RETURN(const TensorEntry* e, find(name));
  if (first < 0 || count < 0 || first + count > e->numel) {
    return invalid_argument("'{}': tensor '{}' has {} elements; elements [{}, {}) were asked for",
                            path_, name, e->numel, first, first + count);
  }
  const auto es = static_cast<int64_t>(dtype_size(e->dtype));
  return file_read_at(fd_, dst, static_cast<size_t>(count * es), e->begin + first * es, path_,
                      "safetensors file");
}

Status SafetensorsFile::read_bytes(int64_t offset, int64_t n, void* dst) const {
  if (offset < 0 || n < 0 || offset + n > file_bytes_) {
    return invalid_argument("'{}': bytes [{}, {}) lie outside its {} bytes", path_, offset,
                            offset + n, file_bytes_);
  }
  return file_read_at(fd_, dst, static_cast<size_t>(n), offset, path_, "safetensors file");
}

Result<uint64_t> file_xxh3(const std::string& path) {
  ZT_RETURN_IF_ERROR(input_file_check(path, "checkpoint file"));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot read '{}': {}", path, errno_text());
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::vector<char> buf(size_t{8} << 20);
  Status s;
  for (;;) {
    const ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r < 0) {
      if (errno == EINTR) continue;
      s = io_error("reading '{}': {}", path, errno_text());
      break;
    }
    if (r == 0) break;
    XXH3_64bits_update(state, buf.data(), static_cast<size_t>(r));
  }
  ::close(fd);
  const uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  ZT_RETURN_IF_ERROR(s);
  return h;
}

}  // namespace zt::ckpt
