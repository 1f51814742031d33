// Hostfile parsing (see hostfile.h). The error texts start with DeepSpeed's own words so that a
// user who searches for them finds the same advice, then add the file and line.
#include "zt/launcher/hostfile.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace zt::launcher {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

std::string_view strip(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

struct Entry {
  std::string host;
  int slots = 0;
};

// Matches `^(\S+)\s+slots=(\d+)` on a stripped line. Returns false on no match; `too_many` is set
// when the digits match but exceed kMaxSlotsPerHost.
bool entry_match(std::string_view line, Entry* entry, bool* too_many) {
  size_t i = 0;
  while (i < line.size() && !is_space(line[i])) ++i;
  if (i == 0) return false;
  entry->host = std::string(line.substr(0, i));
  size_t j = i;
  while (j < line.size() && is_space(line[j])) ++j;
  if (j == i) return false;
  constexpr std::string_view kSlots = "slots=";
  if (line.substr(j, kSlots.size()) != kSlots) return false;
  j += kSlots.size();
  size_t digits_begin = j;
  int64_t value = 0;
  while (j < line.size() && is_digit(line[j])) {
    if (value <= kMaxSlotsPerHost) value = value * 10 + (line[j] - '0');
    ++j;
  }
  if (j == digits_begin) return false;
  *too_many = value > kMaxSlotsPerHost;
  entry->slots = static_cast<int>(*too_many ? 0 : value);
  return true;
}

}  // namespace

Result<Resources> hostfile_parse(std::string_view text, std::string_view source) {
  Resources pool;
  int line_number = 0;
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view raw = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    ++line_number;
    std::string_view line = strip(raw);
    if (line.empty() || line.front() == '#') continue;
    Entry entry;
    bool too_many = false;
    if (!entry_match(line, &entry, &too_many)) {
      return invalid_argument(
          "Hostfile contains a bad entry: {}, unable to proceed with launching ({} line {}: "
          "expected 'HOSTNAME slots=N', e.g. 'localhost slots=4')",
          line, source, line_number);
    }
    if (too_many) {
      return invalid_argument("hostfile {} line {}: {} declares more than {} slots; fix the count",
                              source, line_number, entry.host, kMaxSlotsPerHost);
    }
    for (const HostSlots& seen : pool) {
      if (seen.host == entry.host) {
        return invalid_argument(
            "Hostfile contains multiple entries for {}, unable to proceed with launching ({} "
            "line {}: list each host once, with all its slots)",
            entry.host, source, line_number);
      }
    }
    HostSlots host{.host = entry.host, .slots = {}};
    host.slots.reserve(entry.slots);
    for (int s = 0; s < entry.slots; ++s) host.slots.push_back(s);
    pool.push_back(std::move(host));
  }
  if (pool.empty()) {
    return invalid_argument(
        "Hostfile is empty or not formatted correctly, unable to proceed with launching ({}: "
        "expected lines 'HOSTNAME slots=N')",
        source);
  }
  return pool;
}

Result<Resources> hostfile_read(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return invalid_argument("hostfile {} is a directory; pass the file that lists the hosts", path);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    if (err == ENOENT) return not_found("hostfile {} does not exist", path);
    return io_error("cannot read hostfile {}: {}", path, std::strerror(err));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return io_error("error while reading hostfile {}", path);
  return hostfile_parse(text.str(), path);
}

}  // namespace zt::launcher
