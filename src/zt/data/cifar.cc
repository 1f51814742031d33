// CIFAR-10 binary reader, normalisation and DistributedSampler's indices (cifar.h). Every
// syscall is checked where it is made; a bad file is one Status naming it.
#include "zt/data/cifar.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <limits>
#include <random>
#include <system_error>

#include "zt/core/assert.h"
#include "zt/core/file_io.h"

namespace zt {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kWhat = "CIFAR-10 file";

struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// Appends the records of one file to `records`, checking its size and every label.
Status cifar_file_read(const std::string& path, std::vector<uint8_t>& records) {
  ZT_RETURN_IF_ERROR(input_file_check(path, kWhat));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found("{} '{}' does not exist", kWhat, path);
    return io_error("cannot open {} '{}': {}", kWhat, path, errno_text());
  }
  FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_error("cannot stat {} '{}': {}", kWhat, path, errno_text());
  const auto bytes = static_cast<int64_t>(st.st_size);
  if (bytes == 0) {
    return invalid_argument("{} '{}' is empty; expected {}-byte records (1 label byte, {} pixel bytes)",
                            kWhat, path, kCifarRecordBytes, kCifarImageBytes);
  }
  if (bytes % kCifarRecordBytes != 0) {
    // CIFAR-100's binary records carry two label bytes (coarse, fine): 3074 bytes.
    const char* hint = bytes % (kCifarRecordBytes + 1) == 0
                           ? "; its size fits CIFAR-100's 3074-byte records, which this reader "
                             "does not take"
                           : "; is it truncated, or not a CIFAR-10 binary file (the python "
                             "pickles of cifar-10-batches-py are not)?";
    return invalid_argument(
        "{} '{}' has {} bytes, not a whole number of {}-byte records (1 label byte, {} pixel "
        "bytes){}",
        kWhat, path, bytes, kCifarRecordBytes, kCifarImageBytes, hint);
  }
  const size_t at = records.size();
  records.resize(at + static_cast<size_t>(bytes));
  ZT_RETURN_IF_ERROR(file_read_at(fd, records.data() + at, static_cast<size_t>(bytes), 0, path, kWhat));
  for (int64_t r = 0; r < bytes / kCifarRecordBytes; ++r) {
    const uint8_t label = records[at + static_cast<size_t>(r * kCifarRecordBytes)];
    if (label >= kCifarClasses) {
      records.resize(at);
      return invalid_argument(
          "{} '{}': record {} (byte offset {}) has label {}; CIFAR-10 labels are 0-{}. Is it "
          "another dataset's file?",
          kWhat, path, r, r * kCifarRecordBytes, label, kCifarClasses - 1);
    }
  }
  return Status::ok();
}

// k of "data_batch_<k>.bin", or -1 when `name` is not such a name.
int64_t train_batch_number(const std::string& name) {
  constexpr std::string_view prefix = "data_batch_", suffix = ".bin";
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) ||
      !name.ends_with(suffix)) {
    return -1;
  }
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size() - suffix.size();
  int64_t k = 0;
  const auto [end, ec] = std::from_chars(first, last, k);
  return ec == std::errc{} && end == last ? k : -1;
}

// The split's files inside `folder`, in the order torchvision reads them.
Result<std::vector<std::string>> cifar_folder_files(const std::string& folder, CifarSplit split) {
  std::error_code ec;
  // The archive unpacks to cifar-10-batches-bin/; accept the folder above it too.
  fs::path dir = folder;
  if (fs::is_directory(dir / "cifar-10-batches-bin", ec)) dir /= "cifar-10-batches-bin";
  if (split == CifarSplit::kTest) {
    const fs::path test = dir / "test_batch.bin";
    if (!fs::exists(test, ec)) {
      return not_found("CIFAR-10 folder '{}' has no test_batch.bin (the test split)", folder);
    }
    return std::vector<std::string>{test.string()};
  }
  std::vector<std::pair<int64_t, std::string>> found;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const int64_t k = train_batch_number(it->path().filename().string());
    if (k >= 0) found.emplace_back(k, it->path().string());
  }
  if (ec) return io_error("cannot list CIFAR-10 folder '{}': {}", dir.string(), ec.message());
  if (found.empty()) {
    return not_found(
        "CIFAR-10 folder '{}' has no data_batch_<k>.bin files (the training split); download "
        "and unpack cifar-10-binary.tar.gz there",
        folder);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> files;
  for (auto& [k, p] : found) files.push_back(std::move(p));
  return files;
}

}  // namespace

Result<CifarDataset> CifarDataset::open(const std::string& path, CifarSplit split) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    ZT_ASSIGN_OR_RETURN(std::vector<std::string> files, cifar_folder_files(path, split));
    return open_files(files);
  }
  return open_files({path});
}

Result<CifarDataset> CifarDataset::open_files(const std::vector<std::string>& paths) {
  if (paths.empty()) return invalid_argument("CIFAR-10: no files given");
  CifarDataset d;
  for (const std::string& p : paths) ZT_RETURN_IF_ERROR(cifar_file_read(p, d.records_));
  d.files_ = paths;
  return d;
}

int32_t CifarDataset::label(int64_t i) const {
  ZT_ASSERT(i >= 0 && i < size(), "CIFAR-10 sample {} of {}", i, size());
  return records_[static_cast<size_t>(i * kCifarRecordBytes)];
}

std::span<const uint8_t> CifarDataset::pixels(int64_t i) const {
  ZT_ASSERT(i >= 0 && i < size(), "CIFAR-10 sample {} of {}", i, size());
  return {records_.data() + i * kCifarRecordBytes + 1, static_cast<size_t>(kCifarImageBytes)};
}

CifarBatch CifarDataset::batch(std::span<const int64_t> indices,
                               const CifarNormalize& normalize) const {
  const auto n = static_cast<int64_t>(indices.size());
  CifarBatch b{Tensor::empty({n, kCifarChannels, kCifarSide, kCifarSide}, DType::f32),
               Tensor::empty({n}, DType::i32)};
  batch_into(b.images, b.labels, indices, normalize);
  return b;
}

void CifarDataset::batch_into(Tensor& images, Tensor& labels, std::span<const int64_t> indices,
                              const CifarNormalize& normalize) const {
  const auto n = static_cast<int64_t>(indices.size());
  ZT_ASSERT(images.device().is_cpu() && labels.device().is_cpu() &&
                images.dtype() == DType::f32 && labels.dtype() == DType::i32 &&
                images.shape() == Shape({n, kCifarChannels, kCifarSide, kCifarSide}) &&
                labels.shape() == Shape({n}),
            "CIFAR-10 batch of {}: images {} {} must be ({}, 3, 32, 32) f32 and labels {} {} ({}) "
            "i32 on the CPU",
            n, images.shape().str(), dtype_name(images.dtype()), n, labels.shape().str(),
            dtype_name(labels.dtype()), n);
  for (int c = 0; c < 3; ++c) {
    ZT_ASSERT(normalize.std[c] != 0.0f, "CIFAR-10 normalisation: std[{}] is 0", c);
  }
  // ToTensor then Normalize, one f32 rounding per step as torch does: every byte value maps to
  // one float per channel, so the table is exact and the loop a lookup.
  std::array<std::array<float, 256>, 3> table{};
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      const float x = static_cast<float>(v) / 255.0f;
      table[c][v] = (x - normalize.mean[c]) / normalize.std[c];
    }
  }
  float* img = images.data<float>();
  int32_t* lab = labels.data<int32_t>();
  constexpr int64_t kPlane = kCifarSide * kCifarSide;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t i = indices[static_cast<size_t>(j)];
    lab[j] = label(i);
    const std::span<const uint8_t> px = pixels(i);
    float* dst = img + j * kCifarImageBytes;
    for (int64_t e = 0; e < kCifarImageBytes; ++e) dst[e] = table[e / kPlane][px[e]];
  }
}

std::vector<int64_t> torch_randperm(int64_t n, uint64_t seed) {
  // torch's small-n branch; its other one (random64, inside-out shuffle) starts here.
  constexpr int64_t kLimit = std::numeric_limits<uint32_t>::max() / 20;
  ZT_ASSERT(n >= 0 && n < kLimit, "torch_randperm: n = {} outside [0, {})", n, kLimit);
  std::vector<int64_t> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) r[static_cast<size_t>(i)] = i;
  std::mt19937 rng(static_cast<uint32_t>(seed));  // at::mt19937 keeps the seed's low 32 bits
  for (int64_t i = 0; i + 1 < n; ++i) {
    const auto z = static_cast<int64_t>(rng() % static_cast<uint64_t>(n - i));
    std::swap(r[static_cast<size_t>(i)], r[static_cast<size_t>(i + z)]);
  }
  return r;
}

Result<std::vector<int64_t>> distributed_sampler_indices(int64_t n, int64_t epoch,
                                                         const DistributedSamplerOptions& o) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return invalid_argument("distributed sampler: rank {} is outside world size {}", o.rank,
                            o.world_size);
  }
  if (n < 0) return invalid_argument("distributed sampler: dataset size {} < 0", n);
  std::vector<int64_t> order;
  if (o.order == SampleOrder::kRandom) {
    order = torch_randperm(n, o.seed + static_cast<uint64_t>(epoch));
  } else {
    order.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  }
  const int64_t W = o.world_size;
  // DistributedSampler: num_samples = ceil(n / W), or with drop_last and n % W != 0
  // ceil((n - W) / W), which is floor(n / W).
  const int64_t per_rank = o.tail == ShardTail::kPad ? (n + W - 1) / W : n / W;
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank));
  for (int64_t j = 0; j < per_rank; ++j) {
    const int64_t pos = o.rank + j * W;  // < per_rank * W, the padded or cut length
    mine.push_back(order[static_cast<size_t>(pos % n)]);  // padding repeats the order cyclically
  }
  return mine;
}

int64_t loader_num_batches(int64_t samples, int64_t batch_size, LastBatch last) {
  ZT_ASSERT(samples >= 0 && batch_size >= 1, "loader_num_batches({}, {})", samples, batch_size);
  return last == LastBatch::kKeep ? (samples + batch_size - 1) / batch_size : samples / batch_size;
}

}  // namespace zt
