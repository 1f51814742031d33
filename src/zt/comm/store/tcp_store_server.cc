// The rendezvous store's server (tcp_store.h): one thread polls the listening socket, a wake-up
// pipe (for shutdown) and every client connection. A get/wait whose keys are missing is parked on
// its connection and answered when a set/add makes them present; clients are synchronous (one
// request in flight per connection), so each connection parks at most one request. A client that
// gives up on a parked request closes its connection, which drops the request.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <netdb.h>

#include <cerrno>
#include <chrono>
#include <charconv>
#include <cstring>
#include <list>
#include <map>
#include <optional>
#include <thread>

#include "zt/comm/store/store_wire.h"
#include "zt/comm/store/tcp_store.h"
#include "zt/core/log.h"

namespace zt {
namespace {

using store_wire::Op;
using store_wire::Reply;

struct Parked {
  Op op = Op::kGet;
  std::vector<std::string> keys;
};

// A connection that sent part of a frame and then nothing for this long is closed (a client
// that stalls mid-request would otherwise hold its connection, and its buffer, forever).
constexpr std::chrono::seconds kPartialFrameTimeout{10};
// Connections one peer address may hold at once: far above what a node's ranks open (one or
// two each), far below what would exhaust the server's descriptors.
constexpr int kMaxConnectionsPerPeer = 1024;

struct Client {
  int fd = -1;
  std::string peer;  // the peer's address, for the per-peer cap
  std::chrono::steady_clock::time_point last_read;
  std::string in;
  std::string out;
  std::optional<Parked> parked;
  bool close_after_flush = false;
  bool dead = false;
};

void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// The address the store binds for a job whose ranks reach it at `host` (MASTER_ADDR): loopback
// when every address `host` names is a loopback one (a one-machine job: nothing outside the
// machine can reach the store), else the first address `host` names. Empty: every interface
// (an address that is not this machine's, or a name that does not resolve here).
struct BindAddress {
  sockaddr_storage addr{};
  socklen_t len = 0;
  std::string text;
};

std::optional<BindAddress> bind_address_for(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (host.empty() || getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return std::nullopt;
  std::optional<BindAddress> first, loop;
  bool all_loopback = true;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    BindAddress b;
    std::memcpy(&b.addr, a->ai_addr, a->ai_addrlen);
    b.len = a->ai_addrlen;
    bool loopback = false;
    char text[INET6_ADDRSTRLEN] = {0};
    if (a->ai_family == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(&b.addr);
      in->sin_port = htons(static_cast<uint16_t>(port));
      loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
      inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    } else if (a->ai_family == AF_INET6) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&b.addr);
      in6->sin6_port = htons(static_cast<uint16_t>(port));
      loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
      inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    } else {
      continue;
    }
    b.text = text;
    all_loopback = all_loopback && loopback;
    if (!first) first = b;
    if (loopback && !loop) loop = b;
  }
  freeaddrinfo(res);
  if (!first) return std::nullopt;
  return all_loopback ? loop : first;
}

Result<int> bind_one(const sockaddr* addr, socklen_t len, int port, std::string& error) {
  int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::strerror(errno);
    return -1;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (addr->sa_family == AF_INET6) {
    int zero = 0;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  }
  if (bind(fd, addr, len) == 0 && listen(fd, 1024) == 0) {
    set_nonblocking(fd);
    return fd;
  }
  const int err = errno;
  close(fd);
  if (err == EADDRINUSE) {
    return unavailable(
        "cannot serve the rendezvous store on port {}: the port is in use (another job, or a "
        "stale process of an earlier run, holds it); stop that process or choose another "
        "MASTER_PORT (--master_port)",
        port);
  }
  error = std::strerror(err);
  return -1;
}

// Binds `port` on the address the job's ranks use (bind_address_for), else on every interface:
// IPv6 dual-stack when the host has IPv6, else IPv4.
Result<int> listen_on(int port, const std::string& host, std::string& bound) {
  std::string first_error;
  if (auto b = bind_address_for(host, port)) {
    ZT_ASSIGN_OR_RETURN(int fd, bind_one(reinterpret_cast<const sockaddr*>(&b->addr), b->len,
                                         port, first_error));
    if (fd >= 0) {
      bound = b->text;
      return fd;
    }
    ZT_LOG_WARN("rendezvous store: cannot bind {} ({}) for MASTER_ADDR {}; serving on every "
                "interface instead",
                b->text, first_error, host);
  }
  for (int family : {AF_INET6, AF_INET}) {
    sockaddr_storage st{};
    socklen_t len = 0;
    if (family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&st);
      a->sin6_family = AF_INET6;
      a->sin6_addr = in6addr_any;
      a->sin6_port = htons(static_cast<uint16_t>(port));
      len = sizeof(sockaddr_in6);
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&st);
      a->sin_family = AF_INET;
      a->sin_addr.s_addr = htonl(INADDR_ANY);
      a->sin_port = htons(static_cast<uint16_t>(port));
      len = sizeof(sockaddr_in);
    }
    std::string err;
    ZT_ASSIGN_OR_RETURN(int fd, bind_one(reinterpret_cast<const sockaddr*>(&st), len, port, err));
    if (fd >= 0) {
      bound.assign(1, '*');  // (a literal assignment trips GCC 12's -Wrestrict here)
      return fd;
    }
    if (first_error.empty()) first_error.swap(err);
  }
  return unavailable("cannot serve the rendezvous store on port {}: {}", port, first_error);
}

// Compares the job token without an early exit, so the time taken says nothing of how much of
// a guess was right.
bool token_equal(std::string_view a, std::string_view b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < a.size(); ++i) {
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(a[i]) ^ y;
  }
  return diff == 0;
}

}  // namespace

struct TcpStoreServer::State {
  std::string token;
  int listen_fd = -1;
  int wake_read = -1;
  int wake_write = -1;
  std::thread thread;
  std::map<std::string, std::string> data;
  std::list<Client> clients;
  bool cap_warned = false;

  bool present(const std::vector<std::string>& keys) const {
    for (const std::string& k : keys) {
      if (!data.contains(k)) return false;
    }
    return true;
  }

  static void reply(Client& c, const store_wire::Writer& w) { c.out += w.frame(); }

  void answer_parked(Client& c) {
    store_wire::Writer w;
    w.u8(static_cast<uint8_t>(Reply::kOk));
    if (c.parked->op == Op::kGet) w.str(data.at(c.parked->keys[0]));
    reply(c, w);
    c.parked.reset();
  }

  void wake_parked() {
    for (Client& c : clients) {
      if (c.parked && present(c.parked->keys)) answer_parked(c);
    }
  }

  void refuse(Client& c, Reply code) {
    store_wire::Writer w;
    w.u8(static_cast<uint8_t>(code));
    reply(c, w);
    c.close_after_flush = true;
  }

  // Handles one request payload from `c`.
  void handle(Client& c, std::string_view payload) {
    store_wire::Reader r(payload);
    auto op = static_cast<Op>(r.u8());
    std::string_view tok = r.str();
    if (!r.ok()) return refuse(c, Reply::kBadRequest);
    if (!token_equal(tok, token)) {
      ZT_LOG_WARN(
          "rendezvous store: refused a request with another job's token (a stale process "
          "of an earlier run?)");
      return refuse(c, Reply::kBadToken);
    }
    store_wire::Writer w;
    w.u8(static_cast<uint8_t>(Reply::kOk));
    switch (op) {
      case Op::kHello:
        w.str(store_wire::kStoreMagic);
        break;
      case Op::kSet: {
        std::string key(r.str());
        std::string value(r.str());
        if (!r.ok()) return refuse(c, Reply::kBadRequest);
        data[key] = std::move(value);
        reply(c, w);
        return wake_parked();
      }
      case Op::kAdd: {
        std::string key(r.str());
        int64_t delta = r.i64();
        if (!r.ok()) return refuse(c, Reply::kBadRequest);
        int64_t v = 0;
        if (auto it = data.find(key); it != data.end()) {
          const std::string& s = it->second;
          auto res = std::from_chars(s.data(), s.data() + s.size(), v);
          if (res.ec != std::errc() || res.ptr != s.data() + s.size()) {
            return refuse(c, Reply::kBadRequest);  // a non-counter key: client misuse
          }
        }
        v += delta;
        data[key] = std::to_string(v);
        w.i64(v);
        reply(c, w);
        return wake_parked();
      }
      case Op::kGet:
      case Op::kWait:
      case Op::kCheck: {
        std::vector<std::string> keys;
        if (op == Op::kGet) {
          keys.emplace_back(r.str());
        } else {
          uint32_t n = r.u32();
          for (uint32_t i = 0; i < n && r.ok(); ++i) keys.emplace_back(r.str());
        }
        if (!r.ok()) return refuse(c, Reply::kBadRequest);
        if (op == Op::kCheck) {
          w.u8(present(keys) ? 1 : 0);
          break;
        }
        c.parked = Parked{op, std::move(keys)};
        if (present(c.parked->keys)) answer_parked(c);
        return;
      }
      case Op::kDelete: {
        std::string key(r.str());
        if (!r.ok()) return refuse(c, Reply::kBadRequest);
        w.u8(data.erase(key) > 0 ? 1 : 0);
        break;
      }
      default:
        return refuse(c, Reply::kBadRequest);
    }
    reply(c, w);
  }

  void read_from(Client& c) {
    char buf[16384];
    while (true) {
      ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
      if (n > 0) {
        c.in.append(buf, static_cast<size_t>(n));
        c.last_read = std::chrono::steady_clock::now();
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) c.dead = true;
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    while (!c.close_after_flush && c.in.size() >= 4) {
      uint32_t len = store_wire::frame_length(c.in);
      if (len > store_wire::kMaxFrameBytes) {
        refuse(c, Reply::kBadRequest);
        break;
      }
      if (c.in.size() < 4 + static_cast<size_t>(len)) break;
      std::string payload = c.in.substr(4, len);
      c.in.erase(0, 4 + static_cast<size_t>(len));
      handle(c, payload);
    }
  }

  void flush(Client& c) {
    while (!c.out.empty()) {
      ssize_t n = send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        c.out.erase(0, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      c.dead = true;
      return;
    }
    if (c.close_after_flush) c.dead = true;
  }

  void accept_all() {
    while (true) {
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN: none left; other errors: the client retries
      char text[INET6_ADDRSTRLEN] = {0};
      if (addr.ss_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, text, sizeof text);
      } else if (addr.ss_family == AF_INET6) {
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, text,
                  sizeof text);
      }
      int from_peer = 0;
      for (const Client& c : clients) from_peer += c.peer == text ? 1 : 0;
      if (from_peer >= kMaxConnectionsPerPeer) {
        if (!cap_warned) {
          ZT_LOG_WARN("rendezvous store: {} holds {} connections already; refusing more from it",
                      text, from_peer);
          cap_warned = true;
        }
        close(fd);
        continue;
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      Client c;
      c.fd = fd;
      c.peer = text;
      c.last_read = std::chrono::steady_clock::now();
      clients.push_back(std::move(c));
    }
  }

  // Closes connections that stalled in the middle of a frame.
  void drop_stalled() {
    const auto now = std::chrono::steady_clock::now();
    for (Client& c : clients) {
      if (!c.in.empty() && now - c.last_read > kPartialFrameTimeout) c.dead = true;
    }
  }
};

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::start(int port, std::string token,
                                                               const std::string& host) {
  std::string bound;
  ZT_ASSIGN_OR_RETURN(int fd, listen_on(port, host, bound));
  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer());
  server->state_ = std::make_unique<State>();
  State& s = *server->state_;
  s.token = std::move(token);
  s.listen_fd = fd;
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return io_error("getsockname on the rendezvous store socket: {}", std::strerror(errno));
  }
  server->bound_ = bound;
  server->port_ = addr.ss_family == AF_INET6
                      ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                      : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return io_error("pipe for the rendezvous store thread: {}", std::strerror(errno));
  }
  s.wake_read = pipe_fds[0];
  s.wake_write = pipe_fds[1];
  s.thread = std::thread([srv = server.get()] { srv->run(); });
  return server;
}

TcpStoreServer::~TcpStoreServer() {
  if (!state_) return;
  State& s = *state_;
  if (s.thread.joinable()) {
    char b = 1;
    while (write(s.wake_write, &b, 1) < 0 && errno == EINTR) {
    }
    s.thread.join();
  }
  for (Client& c : s.clients) close(c.fd);
  for (int fd : {s.listen_fd, s.wake_read, s.wake_write}) {
    if (fd >= 0) close(fd);
  }
}

void TcpStoreServer::run() {
  State& s = *state_;
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back({s.wake_read, POLLIN, 0});
    fds.push_back({s.listen_fd, POLLIN, 0});
    for (const Client& c : s.clients) {
      auto events = static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT));
      fds.push_back({c.fd, events, 0});
    }
    // A tick, so that stalled partial frames are noticed without other traffic.
    int rc = poll(fds.data(), fds.size(), 1000);
    if (rc < 0) {
      if (errno == EINTR) continue;
      ZT_LOG_ERROR("rendezvous store: poll failed ({}); the store stops serving",
                   std::strerror(errno));
      return;
    }
    if (fds[0].revents != 0) return;  // shutdown
    if (fds[1].revents & POLLIN) s.accept_all();
    s.drop_stalled();
    size_t i = 2;
    for (Client& c : s.clients) {
      if (i >= fds.size()) break;  // accepted this round: polled next round
      short ev = fds[i++].revents;
      if (ev & (POLLIN | POLLHUP | POLLERR)) s.read_from(c);
    }
    // Replies (including those woken by another client's set) go out now; dead clients are
    // dropped, which also drops their parked request.
    for (auto it = s.clients.begin(); it != s.clients.end();) {
      if (!it->dead) s.flush(*it);
      if (it->dead) {
        close(it->fd);
        it = s.clients.erase(it);
      } else {
        ++it;
      }
    }
  }
}

}  // namespace zt
