// TensorBoard and CSV monitors (monitor.h).
#include "zt/tools/monitor.h"

#include <nmmintrin.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>

namespace zt::tools {

uint32_t crc32c(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t crc = 0xFFFFFFFFu;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    crc = _mm_crc32_u64(crc, w);
    p += 8;
    n -= 8;
  }
  auto c = static_cast<uint32_t>(crc);
  while (n-- > 0) c = _mm_crc32_u8(c, *p++);
  return c ^ 0xFFFFFFFFu;
}

uint32_t tfrecord_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Protocol buffer wire format, the few field kinds an Event uses.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void key(std::string& out, int field, int wire) { varint(out, static_cast<uint64_t>(field << 3 | wire)); }
void fixed64(std::string& out, double v) {
  char b[8];
  std::memcpy(b, &v, 8);
  out.append(b, 8);
}
void fixed32(std::string& out, float v) {
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}
void bytes_field(std::string& out, int field, std::string_view s) {
  key(out, field, 2);
  varint(out, s.size());
  out.append(s);
}

// Event{wall_time = 1 (double), step = 2 (int64), file_version = 3 | summary = 5}.
std::string event_file_version(double wall) {
  std::string e;
  key(e, 1, 1);
  fixed64(e, wall);
  bytes_field(e, 3, "brain.Event:2");
  return e;
}
std::string event_scalar(double wall, int64_t step, std::string_view tag, float value) {
  std::string v;  // Summary.Value{tag = 1, simple_value = 2 (float)}
  bytes_field(v, 1, tag);
  key(v, 2, 5);
  fixed32(v, value);
  std::string summary;  // Summary{value = 1 (repeated)}
  bytes_field(summary, 1, v);
  std::string e;
  key(e, 1, 1);
  fixed64(e, wall);
  key(e, 2, 0);
  varint(e, static_cast<uint64_t>(step));
  bytes_field(e, 5, summary);
  return e;
}

std::string tfrecord(const std::string& data) {
  std::string r;
  const uint64_t len = data.size();
  char lb[8];
  std::memcpy(lb, &len, 8);
  r.append(lb, 8);
  const uint32_t lc = tfrecord_mask(crc32c(lb, 8));
  r.append(reinterpret_cast<const char*>(&lc), 4);
  r += data;
  const uint32_t dc = tfrecord_mask(crc32c(data.data(), data.size()));
  r.append(reinterpret_cast<const char*>(&dc), 4);
  return r;
}

Status make_dir(const std::string& dir, const char* what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error("{}: cannot create the folder {}: {}", what, dir, ec.message());
  return Status::ok();
}

class TensorBoardMonitor final : public Monitor {
 public:
  TensorBoardMonitor(std::string path, std::ofstream out) : path_(std::move(path)), out_(std::move(out)) {}
  Status write(const std::vector<MonitorEvent>& events) override {
    const double wall = now_seconds();
    for (const MonitorEvent& e : events) {
      out_ << tfrecord(event_scalar(wall, e.step, e.tag, static_cast<float>(e.value)));
    }
    if (!out_) return io_error("tensorboard: writing {} failed", path_);
    return Status::ok();
  }
  Status flush() override {
    out_.flush();
    if (!out_) return io_error("tensorboard: writing {} failed", path_);
    return Status::ok();
  }
  std::string describe() const override { return "tensorboard " + path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

class CsvMonitor final : public Monitor {
 public:
  explicit CsvMonitor(std::string dir) : dir_(std::move(dir)) {}
  Status write(const std::vector<MonitorEvent>& events) override {
    for (const MonitorEvent& e : events) {
      std::string name = e.tag;
      for (char& c : name) {
        if (c == '/' || c == ' ') c = '_';
      }
      auto it = files_.find(name);
      if (it == files_.end()) {
        const std::string path = dir_ + "/" + name + ".csv";
        std::ofstream f(path, std::ios::app);
        if (!f) return io_error("csv_monitor: cannot open {}", path);
        const size_t slash = e.tag.rfind('/');
        f << "step," << (slash == std::string::npos ? e.tag : e.tag.substr(slash + 1)) << "\n";
        it = files_.emplace(name, std::move(f)).first;
      }
      it->second << e.step << "," << fmt::format("{}", e.value) << "\n";
      if (!it->second) return io_error("csv_monitor: writing {}/{}.csv failed", dir_, name);
    }
    return Status::ok();
  }
  Status flush() override {
    for (auto& [name, f] : files_) {
      f.flush();
      if (!f) return io_error("csv_monitor: writing {}/{}.csv failed", dir_, name);
    }
    return Status::ok();
  }
  std::string describe() const override { return "csv_monitor " + dir_; }

 private:
  std::string dir_;
  std::map<std::string, std::ofstream> files_;
};

std::string monitor_dir(const nlohmann::json& block) {
  std::string out = block.value("output_path", std::string());
  if (out.empty()) out = "runs";
  return (std::filesystem::path(out) / block.value("job_name", std::string("DeepSpeedJobName"))).string();
}

}  // namespace

Result<std::unique_ptr<Monitor>> tensorboard_monitor_create(const std::string& dir) {
  ZT_RETURN_IF_ERROR(make_dir(dir, "tensorboard"));
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const double wall = now_seconds();
  const std::string path =
      fmt::format("{}/events.out.tfevents.{}.{}", dir, static_cast<int64_t>(wall), host);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return io_error("tensorboard: cannot create {}", path);
  out << tfrecord(event_file_version(wall));
  return std::unique_ptr<Monitor>(new TensorBoardMonitor(path, std::move(out)));
}

Result<std::unique_ptr<Monitor>> csv_monitor_create(const std::string& dir) {
  ZT_RETURN_IF_ERROR(make_dir(dir, "csv_monitor"));
  return std::unique_ptr<Monitor>(new CsvMonitor(dir));
}

Result<std::vector<std::unique_ptr<Monitor>>> monitors_from_config(const nlohmann::json& blocks) {
  std::vector<std::unique_ptr<Monitor>> out;
  auto enabled = [&](const char* name) -> const nlohmann::json* {
    auto it = blocks.find(name);
    if (it == blocks.end() || !it->is_object() || !it->value("enabled", false)) return nullptr;
    return &*it;
  };
  if (const nlohmann::json* b = enabled("tensorboard")) {
    ZT_ASSIGN_OR_RETURN(auto m, tensorboard_monitor_create(monitor_dir(*b)));
    out.push_back(std::move(m));
  }
  if (const nlohmann::json* b = enabled("csv_monitor")) {
    ZT_ASSIGN_OR_RETURN(auto m, csv_monitor_create(monitor_dir(*b)));
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace zt::tools
