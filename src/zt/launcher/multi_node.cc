// World info, the node launcher's command line and the failure marker (see multi_node.h).
#include "zt/launcher/multi_node.h"

#include <charconv>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "zt/launcher/shell_quote.h"

namespace zt::launcher {
namespace {

constexpr char kUrlSafe[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

std::string base64_encode(std::string_view bytes) {
  std::string out;
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) |
                       (static_cast<uint8_t>(bytes[i + 1]) << 8) | static_cast<uint8_t>(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out.push_back(kUrlSafe[(v >> s) & 63]);
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (rest == 2) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out.push_back(kUrlSafe[(v >> 18) & 63]);
    out.push_back(kUrlSafe[(v >> 12) & 63]);
    out.push_back(rest == 2 ? kUrlSafe[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-' || c == '+') return 62;
  if (c == '_' || c == '/') return 63;
  return -1;
}

std::optional<std::string> base64_decode(std::string_view text) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int v = base64_value(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

}  // namespace

std::string world_info_encode(const Resources& hosts) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const HostSlots& h : hosts) j[h.host] = h.slots;
  return base64_encode(j.dump());
}

Result<Resources> world_info_decode(std::string_view b64) {
  constexpr const char* kWhat =
      "it is what the master zt launch passes to each node; run zt launch without it";
  std::optional<std::string> text = base64_decode(b64);
  if (!text) return invalid_argument("--world_info: not base64 ({})", kWhat);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.empty()) {
    return invalid_argument("--world_info: not a JSON object {{host: [slots]}} ({})", kWhat);
  }
  Resources hosts;
  for (auto it = j.begin(); it != j.end(); ++it) {
    HostSlots h{.host = it.key(), .slots = {}};
    if (!it.value().is_array()) {
      return invalid_argument("--world_info: host {} has no slot list ({})", h.host, kWhat);
    }
    for (const auto& s : it.value()) {
      if (!s.is_number_integer() || s.get<int64_t>() < 0 || s.get<int64_t>() >= kMaxSlotsPerHost) {
        return invalid_argument("--world_info: host {} has a bad slot {} ({})", h.host, s.dump(),
                                kWhat);
      }
      h.slots.push_back(s.get<int>());
    }
    hosts.push_back(std::move(h));
  }
  return hosts;
}

std::string node_failure_marker(const NodeFailure& failure) {
  return fmt::format("{}rank={} code={} what={}", kNodeFailureMarker, failure.rank, failure.code,
                     failure.what);
}

std::optional<NodeFailure> node_failure_parse(std::string_view line) {
  if (!line.starts_with(kNodeFailureMarker)) return std::nullopt;
  line.remove_prefix(std::string_view(kNodeFailureMarker).size());
  NodeFailure f;
  auto field = [&line](std::string_view key, int* out) {
    if (!line.starts_with(key)) return false;
    line.remove_prefix(key.size());
    auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), *out);
    if (ec != std::errc() || end == line.data() + line.size() || *end != ' ') return false;
    line.remove_prefix(static_cast<size_t>(end - line.data()) + 1);
    return true;
  };
  if (!field("rank=", &f.rank) || !field("code=", &f.code) || !line.starts_with("what=")) {
    return std::nullopt;
  }
  f.what = std::string(line.substr(5));
  return f;
}

std::vector<std::string> node_launcher_argv(const NodeCommandInputs& in,
                                            std::string_view node_rank) {
  const LaunchOptions& o = *in.options;
  std::vector<std::string> argv = {
      in.zt_bin,
      "launch",
      fmt::format("--node_rank={}", node_rank),
      fmt::format("--world_info={}", world_info_encode(in.world->hosts)),
      fmt::format("--master_addr={}", in.master_addr),
      fmt::format("--master_port={}", o.master_port),
      fmt::format("--zt_job_token={}", in.job_token),
      fmt::format("--zt_slot_kind={}", in.world->kind == SlotKind::kCpu ? "cpu" : "gpu"),
  };
  if (in.link_stdin) argv.push_back("--zt_link_stdin");
  argv.push_back("--zt_prefix_output");
  if (o.no_local_rank) argv.push_back("--no_local_rank");
  if (o.module) argv.push_back("--module");
  if (o.no_python) argv.push_back("--no_python");
  if (o.each_rank_log_dir) argv.push_back(fmt::format("--enable_each_rank_log={}", *o.each_rank_log_dir));
  if (o.bind_cores_to_rank) argv.push_back("--bind_cores_to_rank");
  if (o.bind_core_list) argv.push_back(fmt::format("--bind_core_list={}", *o.bind_core_list));
  argv.push_back("--");
  argv.push_back(o.program);
  argv.insert(argv.end(), o.program_args.begin(), o.program_args.end());
  return argv;
}

std::string remote_command(const std::string& cwd, const std::vector<ExportedVar>& env,
                           const std::vector<std::string>& argv) {
  std::string out = fmt::format("cd {} && exec env", shell_quote(cwd));
  for (const ExportedVar& v : env) {
    out += ' ';
    out += shell_quote(fmt::format("{}={}", v.key, v.value));
  }
  out += ' ';
  out += shell_join(argv);
  return out;
}

std::vector<std::string> ssh_argv(const std::string& ssh, const LaunchOptions& o,
                                  const std::string& host, const std::string& remote) {
  std::vector<std::string> argv = {ssh};
  argv.insert(argv.end(), o.launcher_args.begin(), o.launcher_args.end());
  for (std::string opt : {std::string("BatchMode=yes"),
                          fmt::format("ConnectTimeout={}", kSshConnectTimeout),
                          fmt::format("ServerAliveInterval={}", kSshAliveInterval),
                          fmt::format("ServerAliveCountMax={}", kSshAliveCount)}) {
    argv.push_back("-o");
    argv.push_back(std::move(opt));
  }
  argv.push_back("-T");  // no terminal: stdin is the link, bytes must arrive as written
  if (o.ssh_port > 0) {
    argv.push_back("-p");
    argv.push_back(std::to_string(o.ssh_port));
  }
  argv.push_back("--");
  argv.push_back(host);
  argv.push_back(remote);
  return argv;
}

std::vector<std::string> pdsh_argv(const std::string& pdsh, const LaunchOptions& o,
                                   const Resources& hosts, const std::string& remote) {
  std::string workers;
  for (const HostSlots& h : hosts) {
    if (!workers.empty()) workers += ',';
    workers += h.host;
  }
  std::vector<std::string> argv = {pdsh, "-S", "-f", "1024", "-w", workers};
  argv.insert(argv.end(), o.launcher_args.begin(), o.launcher_args.end());
  argv.push_back(remote);
  return argv;
}

}  // namespace zt::launcher
