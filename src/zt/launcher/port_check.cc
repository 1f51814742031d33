// Master-port check (see port_check.h). Finding the listener reads Linux's /proc tables:
// /proc/net/tcp{,6} lists sockets as "sl local_address rem_address st ... inode" with the port in
// hex and st 0A for LISTEN; /proc/<pid>/fd/* link to "socket:[inode]".
#include "zt/launcher/port_check.h"

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

#include <fmt/format.h>

namespace zt::launcher {
namespace {

// Inodes of sockets listening on `port` (IPv4 and IPv6).
std::vector<std::string> listener_inodes(int port) {
  std::vector<std::string> inodes;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      if (!(fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
            timeout >> inode)) {
        continue;
      }
      size_t colon = local.rfind(':');
      if (colon == std::string::npos || state != "0A") continue;
      if (std::strtol(local.c_str() + colon + 1, nullptr, 16) == port) inodes.push_back(inode);
    }
  }
  return inodes;
}

std::string process_cmdline(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!raw.empty() && raw.back() == '\0') raw.pop_back();
  for (char& c : raw) {
    if (c == '\0' || c == '\n' || c == '\r' || c == '\t') c = ' ';  // one line in the message
  }
  constexpr size_t kMax = 120;
  if (raw.size() > kMax) raw = raw.substr(0, kMax) + "...";
  return raw;
}

}  // namespace

std::string port_listener_describe(int port) {
  std::vector<std::string> inodes = listener_inodes(port);
  if (inodes.empty()) return "";
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return "";
  std::string found;
  while (dirent* e = readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::string pid = e->d_name;
    std::string fd_dir = "/proc/" + pid + "/fd";
    DIR* fds = opendir(fd_dir.c_str());
    if (fds == nullptr) continue;  // another user's process
    while (dirent* f = readdir(fds)) {
      if (f->d_name[0] == '.') continue;
      char target[128] = {};
      std::string link = fd_dir + "/" + f->d_name;
      ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
      if (n <= 0) continue;
      std::string_view t(target, static_cast<size_t>(n));
      for (const std::string& inode : inodes) {
        if (t == "socket:[" + inode + "]")
          found = fmt::format("pid {} ({})", pid, process_cmdline(pid));
      }
      if (!found.empty()) break;
    }
    closedir(fds);
    if (!found.empty()) break;
  }
  closedir(proc);
  return found;
}

Status master_port_check(int port) {
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool ipv6 = fd >= 0;
  if (!ipv6) fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return io_error("cannot check --master_port {}: socket: {}", port, std::strerror(errno));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int rc = 0;
  if (ipv6) {
    // A dual-stack wildcard bind collides with IPv4 and IPv6 listeners alike.
    int zero = 0;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = htons(static_cast<uint16_t>(port));
    rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  } else {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  }
  int err = errno;
  close(fd);
  if (rc == 0) return Status::ok();
  if (err == EADDRINUSE) {
    std::string who = port_listener_describe(port);
    std::string holder =
        who.empty()
            ? "another process (`ss -ltnp 'sport = :" + std::to_string(port) + "'` shows which)"
            : who;
    return unavailable(
        "--master_port {} is already in use by {}: stop it (a previous run still "
        "going?) or pass another port with --master_port",
        port, holder);
  }
  if (err == EACCES) {
    return unavailable("--master_port {} needs privileges to bind; pick a port above 1023", port);
  }
  return unavailable("--master_port {} cannot be bound: {}", port, std::strerror(err));
}

}  // namespace zt::launcher
