// Pre-flight of a multi-node job (see preflight.h).
#include "zt/launcher/preflight.h"

#include <arpa/inet.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "zt/build_config.h"
#include "zt/core/device.h"
#include "zt/launcher/multi_node.h"
#include "zt/launcher/port_check.h"
#include "zt/launcher/shell_quote.h"

extern char** environ;  // NOLINT: POSIX

namespace zt::launcher {
namespace {

// Every host must answer within this (ssh's ConnectTimeout plus time to run the check).
constexpr double kPreflightTimeoutS = kSshConnectTimeout + 10.0;

int gnu_build_id_note(dl_phdr_info* info, size_t /*size*/, void* data) {
  auto* out = static_cast<std::string*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto* n = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const char* name = p + sizeof(ElfW(Nhdr));
      const char* desc = name + ((n->n_namesz + 3) & ~3u);
      if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0 &&
          desc + n->n_descsz <= end) {
        for (unsigned k = 0; k < n->n_descsz; ++k) {
          *out += fmt::format("{:02x}", static_cast<unsigned char>(desc[k]));
        }
        return 1;
      }
      p = desc + ((n->n_descsz + 3) & ~3u);
    }
  }
  return 1;  // only the first object (the executable) counts
}

std::string now_text(double epoch) {
  std::time_t t = static_cast<std::time_t>(epoch);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char text[32] = {};
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S UTC", &utc);
  return text;
}

double epoch_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "" when a TCP connection to addr:port succeeds within 5 s, else why not.
std::string tcp_connect_try(const std::string& addr, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(addr.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return fmt::format("cannot resolve {}: {}", addr, gai_strerror(rc));
  }
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
      rc = poll(&p, 1, 5000);
      if (rc == 0) {
        close(fd);
        why = "no answer within 5 s";
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc == 0) {
      close(fd);
      freeaddrinfo(found);
      return "";
    }
    why = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(found);
  return why;
}

// Listens on `port` (all interfaces) while the nodes try to connect; closed by the destructor.
class PortListener {
 public:
  explicit PortListener(int port) {
    fd_ = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ >= 0) {
      int off = 0;
      int on = 1;
      setsockopt(fd_, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
      setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(static_cast<uint16_t>(port));
      if (bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 && listen(fd_, 64) == 0) return;
      close(fd_);
    }
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return;
    int on = 1;
    setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd_, 64) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  PortListener(const PortListener&) = delete;
  PortListener& operator=(const PortListener&) = delete;
  ~PortListener() {
    if (fd_ >= 0) close(fd_);
  }

 private:
  int fd_ = -1;
};

std::string slots_text(const std::vector<int>& slots) {
  std::string out;
  for (int s : slots) {
    if (!out.empty()) out += ',';
    out += std::to_string(s);
  }
  return out;
}

}  // namespace

std::string zt_build_identity() {
  std::string id;
  dl_iterate_phdr(gnu_build_id_note, &id);
  if (id.empty()) {
    // No build-id note: FNV-1a over the executable's bytes.
    std::ifstream in("/proc/self/exe", std::ios::binary);
    uint64_t h = 1469598103934665603ull;
    char buf[65536];
    while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
      for (std::streamsize i = 0; i < in.gcount(); ++i) {
        h = (h ^ static_cast<unsigned char>(buf[i])) * 1099511628211ull;
      }
    }
    id = fmt::format("fnv{:016x}", h);
  }
  return fmt::format("{}+{}", ZT_VERSION_STRING, id);
}

int preflight_answer(const std::string& spec) {
  std::vector<std::string> f;
  size_t start = 0;
  while (true) {
    size_t comma = spec.find(',', start);
    f.push_back(spec.substr(start, comma == std::string::npos ? comma : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  int port = 0;
  int needed = 0;
  if (f.size() != 5 || std::from_chars(f[1].data(), f[1].data() + f[1].size(), port).ec != std::errc() ||
      std::from_chars(f[3].data(), f[3].data() + f[3].size(), needed).ec != std::errc()) {
    std::fprintf(stderr, "zt launch: error: --zt_preflight '%s' is not ADDR,PORT,KIND,N,CHECK\n",
                 spec.c_str());
    return 2;
  }
  nlohmann::json j;
  j["build"] = zt_build_identity();
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  j["hostname"] = host;
  j["slots"] = f[2] == "cpu" ? static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN))
                             : zt::cuda_device_count();
  std::string port_problem;
  if (f[4] == "bind") {
    Status s = master_port_check(port);
    if (!s.is_ok()) port_problem = s.message();
  } else if (f[4] == "connect") {
    port_problem = tcp_connect_try(f[0], port);
  }
  j["port"] = port_problem;
  j["time"] = epoch_now();
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

std::vector<Captured> run_captured_parallel(const std::vector<std::vector<std::string>>& argvs,
                                            double timeout_s) {
  using Clock = std::chrono::steady_clock;
  struct Child {
    pid_t pid = -1;
    int out = -1;
    int err = -1;
    bool reaped = false;
  };
  std::vector<Captured> results(argvs.size());
  std::vector<Child> children(argvs.size());
  for (size_t i = 0; i < argvs.size(); ++i) {
    int out[2];
    int err[2];
    if (pipe2(out, O_CLOEXEC) != 0) continue;
    if (pipe2(err, O_CLOEXEC) != 0) {
      close(out[0]);
      close(out[1]);
      continue;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setpgroup(&attr, 0);  // a timeout kills the whole tree
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    std::vector<char*> argv;
    for (const std::string& a : argvs[i]) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = -1;
    int rc = posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    close(out[1]);
    close(err[1]);
    if (rc != 0) {
      close(out[0]);
      close(err[0]);
      results[i].err = fmt::format("cannot run {}: {}", argvs[i][0], std::strerror(rc));
      results[i].exit_code = rc == ENOENT ? 127 : 126;
      children[i].reaped = true;
      continue;
    }
    children[i] = Child{.pid = pid, .out = out[0], .err = err[0], .reaped = false};
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::llround(timeout_s * 1000));
  while (true) {
    std::vector<pollfd> fds;
    std::vector<std::pair<size_t, bool>> owners;  // child, is stdout
    for (size_t i = 0; i < children.size(); ++i) {
      if (children[i].out >= 0) {
        fds.push_back({children[i].out, POLLIN, 0});
        owners.emplace_back(i, true);
      }
      if (children[i].err >= 0) {
        fds.push_back({children[i].err, POLLIN, 0});
        owners.emplace_back(i, false);
      }
    }
    bool all_reaped = true;
    for (size_t i = 0; i < children.size(); ++i) {
      Child& c = children[i];
      if (c.reaped) continue;
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.reaped = true;
        results[i].exit_code =
            WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      } else {
        all_reaped = false;
      }
    }
    if (all_reaped && fds.empty()) break;
    const auto now = Clock::now();
    if (now >= deadline) {
      for (size_t i = 0; i < children.size(); ++i) {
        Child& c = children[i];
        if (!c.reaped) {
          killpg(c.pid, SIGKILL);
          int status = 0;
          waitpid(c.pid, &status, 0);
          c.reaped = true;
          results[i].timed_out = true;
          results[i].exit_code = 128 + SIGKILL;
        }
        for (int* fd : {&c.out, &c.err}) {
          if (*fd >= 0) close(*fd);
          *fd = -1;
        }
      }
      break;
    }
    const int wait_ms = static_cast<int>(std::min<int64_t>(
        50, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1));
    poll(fds.data(), fds.size(), all_reaped ? wait_ms : std::min(wait_ms, 50));
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      auto [i, is_out] = owners[k];
      int& fd = is_out ? children[i].out : children[i].err;
      char buf[4096];
      ssize_t n = read(fd, buf, sizeof(buf));
      if (n > 0) {
        (is_out ? results[i].out : results[i].err).append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(fd);
        fd = -1;
      }
    }
  }
  return results;
}

std::string last_line(const std::string& text) {
  std::string_view t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.remove_suffix(1);
  const size_t nl = t.rfind('\n');
  if (nl != std::string_view::npos) t.remove_prefix(nl + 1);
  return std::string(t);
}

Status preflight_run(const PreflightInputs& in) {
  const LaunchOptions& o = *in.options;
  const WorldInfo& world = *in.world;
  std::vector<std::string> problems;
  auto problem = [&problems](const std::string& host, const std::string& what) {
    problems.push_back(fmt::format("multi-node pre-flight: host {}: {}", host, what));
  };
  // The master port: the first host binds it; when that is this machine, hold it open while
  // the other hosts try to reach it.
  const bool master_here = world.local.front();
  std::unique_ptr<PortListener> listener;
  if (master_here) {
    Status s = master_port_check(o.master_port);
    if (!s.is_ok()) {
      return invalid_argument("multi-node pre-flight: host {} (the master): {}",
                              world.hosts.front().host, s.message());
    }
    listener = std::make_unique<PortListener>(o.master_port);
  }
  if (o.no_ssh_check) return Status::ok();

  std::vector<std::vector<std::string>> argvs;
  for (size_t n = 0; n < world.hosts.size(); ++n) {
    const HostSlots& h = world.hosts[n];
    const char* check = n == 0 ? (master_here ? "none" : "bind") : (master_here ? "connect" : "none");
    const int needed = world.kind == SlotKind::kCpu
                           ? static_cast<int>(h.slots.size())
                           : (h.slots.empty() ? 0 : *std::max_element(h.slots.begin(), h.slots.end()) + 1);
    std::vector<std::string> responder = {
        in.zt_bin, "launch",
        fmt::format("--zt_preflight={},{},{},{},{}", in.master_addr, o.master_port,
                    world.kind == SlotKind::kCpu ? "cpu" : "gpu", needed, check)};
    argvs.push_back(world.local[n] ? responder : ssh_argv(in.ssh, o, h.host, shell_join(responder)));
  }
  std::vector<Captured> answers = run_captured_parallel(argvs, kPreflightTimeoutS);
  const double here = epoch_now();
  const std::string build = zt_build_identity();
  for (size_t n = 0; n < world.hosts.size(); ++n) {
    const HostSlots& h = world.hosts[n];
    const Captured& a = answers[n];
    const std::string err = last_line(a.err);
    if (a.timed_out) {
      problem(h.host, fmt::format("no answer within {:.0f} s (is it up and reachable? try `ssh {} "
                                  "true`)",
                                  kPreflightTimeoutS, h.host));
      continue;
    }
    if (!world.local[n] && a.exit_code == 255 &&
        err.find("Could not resolve hostname") != std::string::npos) {
      problem(h.host, fmt::format("the name does not resolve ({}); fix the host name in the "
                                  "hostfile {}, or add it to /etc/hosts or DNS",
                                  err, o.hostfile));
      continue;
    }
    if (!world.local[n] && a.exit_code == 255) {
      problem(h.host, fmt::format("ssh without a password failed: {}; set up key login "
                                  "(ssh-copy-id {}) or pass --no_ssh_check",
                                  err.empty() ? "ssh exited with code 255" : err, h.host));
      continue;
    }
    if (a.exit_code == 126 || a.exit_code == 127) {
      problem(h.host, fmt::format("cannot run {} there ({}); install the same zt build at the "
                                  "same path on every node",
                                  in.zt_bin, err.empty() ? "not found" : err));
      continue;
    }
    nlohmann::json j = nlohmann::json::parse(last_line(a.out), nullptr, false);
    if (a.exit_code != 0 || !j.is_object() || !j.contains("build")) {
      problem(h.host, fmt::format("{} there did not answer the pre-flight (exit {}: {}); install "
                                  "the same zt build at the same path on every node",
                                  in.zt_bin, a.exit_code, err.empty() ? "no output" : err));
      continue;
    }
    if (j.value("build", "") != build) {
      problem(h.host, fmt::format("{} there is build {}, this machine runs {}; install the same "
                                  "zt build at the same path on every node",
                                  in.zt_bin, j.value("build", ""), build));
    }
    const std::string port = j.value("port", "");
    if (!port.empty()) {
      if (n == 0) {
        problem(h.host, fmt::format("the master port {} is not free there: {}", o.master_port, port));
      } else {
        problem(h.host, fmt::format("cannot reach the master at {}:{} ({}); open the port in the "
                                    "firewall, or pass --master_addr with an address every node "
                                    "reaches",
                                    in.master_addr, o.master_port, port));
      }
    }
    const int slots = j.value("slots", 0);
    if (world.kind == SlotKind::kGpu && !h.slots.empty() &&
        *std::max_element(h.slots.begin(), h.slots.end()) >= slots) {
      problem(h.host, fmt::format("the job gives it GPU slots {} but it has {} GPU(s) (nvidia-smi "
                                  "-L there); fix its slots= in the hostfile, or for CPU ranks "
                                  "pass --num_procs N",
                                  slots_text(h.slots), slots));
    }
    if (world.kind == SlotKind::kCpu && static_cast<int>(h.slots.size()) > slots) {
      std::fprintf(stderr,
                   "zt launch: note: host %s runs %zu CPU ranks on %d online CPU(s); they will "
                   "share cores\n",
                   h.host.c_str(), h.slots.size(), slots);
    }
    const double theirs = j.value("time", 0.0);
    if (std::fabs(theirs - here) > kMaxClockSkewSeconds) {
      problem(h.host, fmt::format("its clock says {} while this machine's says {} ({:.0f} s "
                                  "apart, more than {:.0f}); sync the clocks (chrony or "
                                  "systemd-timesyncd)",
                                  now_text(theirs), now_text(here), std::fabs(theirs - here),
                                  kMaxClockSkewSeconds));
    }
  }
  if (problems.empty()) return Status::ok();
  std::string message;
  for (const std::string& p : problems) {
    if (!message.empty()) message += '\n';
    message += p;
  }
  return unavailable("{}", message);
}

}  // namespace zt::launcher
