// The rendezvous store's client (tcp_store.h). One connection, one request at a time (a mutex),
// every socket operation bounded by the call's deadline through poll. A call that times out closes
// the connection (the server may still answer the abandoned request later) and the next call
// reconnects.
#include "zt/comm/store/tcp_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "zt/comm/store/store_wire.h"

namespace zt {
namespace {

using Clock = std::chrono::steady_clock;
using store_wire::Op;
using store_wire::Reply;

int ms_until(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1 << 30));
}

std::string seconds_text(std::chrono::milliseconds t) {
  return fmt::format("{:.3g} s", static_cast<double>(t.count()) / 1000.0);
}

// Waits for `events` on `fd` until `deadline`: 1 ready, 0 timed out, -1 error.
int wait_fd(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, ms_until(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return rc;
    return 1;
  }
}

// One non-blocking connect attempt to any address of host:port; the fd or -1 (errno text in
// `error`).
int try_connect(const std::string& host, int port, Clock::time_point deadline, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port_text = std::to_string(port);
  int gai = getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res);
  if (gai != 0) {
    error = fmt::format("cannot resolve '{}': {}", host, gai_strerror(gai));
    return -1;
  }
  int fd = -1;
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    int s = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (s < 0) {
      error = std::strerror(errno);
      continue;
    }
    int rc = ::connect(s, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      // A black-holed SYN must not eat the whole deadline: retry after a second.
      auto attempt = std::min(deadline, Clock::now() + std::chrono::seconds(1));
      if (wait_fd(s, POLLOUT, attempt) == 1) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      int one = 1;
      setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      fd = s;
    } else {
      error = std::strerror(errno);
      close(s);
    }
  }
  freeaddrinfo(res);
  return fd;
}

// Builds a request frame: op, token, then the fields added by `fill`.
template <typename Fill>
std::string build(Op op, const std::string& token, Fill fill) {
  store_wire::Writer w;
  w.u8(static_cast<uint8_t>(op));
  w.str(token);
  fill(w);
  return w.frame();
}

}  // namespace

TcpStore::TcpStore(TcpStoreOptions options) : options_(std::move(options)) {}

TcpStore::~TcpStore() {
  std::lock_guard<std::mutex> lock(mu_);
  close_locked();
}

Result<std::unique_ptr<TcpStore>> TcpStore::connect(const TcpStoreOptions& options) {
  std::unique_ptr<TcpStore> store(new TcpStore(options));
  if (options.role == StoreRole::kServerAndClient) {
    ZT_ASSIGN_OR_RETURN(store->server_, TcpStoreServer::start(options.port, options.token, options.host));
    store->options_.port = store->server_->port();
    // The server is this process: connect to the address it bound (MASTER_ADDR's, which need
    // not be loopback on a multi-node job), or loopback when it serves every interface.
    const std::string& bound = store->server_->bound_address();
    store->options_.host = bound == "*" ? "127.0.0.1" : bound;
  }
  std::lock_guard<std::mutex> lock(store->mu_);
  ZT_RETURN_IF_ERROR(store->connect_locked(Clock::now() + options.timeout));
  return store;
}

std::string TcpStore::address() const {
  return fmt::format("{}:{}", options_.host, options_.port);
}

void TcpStore::close_locked() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

Status TcpStore::connect_locked(Clock::time_point deadline) {
  std::string error = "no attempt";
  while (true) {
    fd_ = try_connect(options_.host, options_.port, deadline, error);
    if (fd_ >= 0) break;
    if (Clock::now() >= deadline) {
      return {StatusCode::kTimeout,
              fmt::format("rank {} cannot reach the rendezvous store at {} within {} (last "
                          "error: {}); check that rank 0 is running and that MASTER_ADDR and "
                          "MASTER_PORT point at its host",
                          options_.rank, address(), seconds_text(options_.timeout), error)};
    }
    std::this_thread::sleep_for(
        std::min<Clock::duration>(std::chrono::milliseconds(100), deadline - Clock::now()));
  }
  std::string reply;
  std::string hello = build(Op::kHello, options_.token, [](store_wire::Writer&) {});
  ZT_RETURN_IF_ERROR(call_locked(hello, reply, deadline, options_.timeout, "the greeting"));
  store_wire::Reader r(reply);
  if (r.str() != store_wire::kStoreMagic || !r.ok()) {
    close_locked();
    return unavailable(
        "the service at {} is not a ZeroTrain rendezvous store; another program "
        "holds MASTER_PORT: choose another port",
        address());
  }
  return Status::ok();
}

Status TcpStore::call_locked(const std::string& request, std::string& reply,
                             Clock::time_point deadline, std::chrono::milliseconds timeout,
                             std::string_view what) {
  if (fd_ < 0) ZT_RETURN_IF_ERROR(connect_locked(deadline));
  auto lost = [&](std::string_view how) {
    close_locked();
    return Status(StatusCode::kUnavailable,
                  fmt::format("rank {}: the rendezvous store at {} {} during {} (rank 0, which "
                              "serves it, probably exited; see its log)",
                              options_.rank, address(), how, what));
  };
  auto timed_out = [&] {
    close_locked();
    return Status(StatusCode::kTimeout,
                  fmt::format("rank {}: timed out after {} waiting for {} in the rendezvous "
                              "store at {}; check that every rank was started and got this far",
                              options_.rank, seconds_text(timeout), what, address()));
  };
  size_t sent = 0;
  while (sent < request.size()) {
    ssize_t n = ::send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int w = wait_fd(fd_, POLLOUT, deadline);
      if (w == 0) return timed_out();
      if (w < 0) return lost("failed");
      continue;
    }
    return lost("closed the connection");
  }
  // Reads the 4-byte length, then the payload.
  std::string buf;
  size_t want = 4;
  bool have_length = false;
  char chunk[16384];
  while (buf.size() < want) {
    ssize_t n = ::recv(fd_, chunk, std::min(sizeof(chunk), want - buf.size()), 0);
    if (n > 0) {
      buf.append(chunk, static_cast<size_t>(n));
      if (!have_length && buf.size() == 4) {
        uint32_t len = store_wire::frame_length(buf);
        if (len == 0 || len > store_wire::kMaxFrameBytes) {
          close_locked();
          return unavailable(
              "the service at {} is not a ZeroTrain rendezvous store; another "
              "program holds MASTER_PORT: choose another port",
              address());
        }
        want = 4 + len;
        have_length = true;
      }
      continue;
    }
    if (n == 0) return lost("closed the connection");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return lost("failed");
    int w = wait_fd(fd_, POLLIN, deadline);
    if (w == 0) return timed_out();
    if (w < 0) return lost("failed");
  }
  auto code = static_cast<Reply>(static_cast<uint8_t>(buf[4]));
  if (code == Reply::kBadToken) {
    close_locked();
    return unavailable(
        "rank {}: the rendezvous store at {} refused this process: it belongs to "
        "another job (job token mismatch). A process of an earlier run probably "
        "still holds MASTER_PORT {}: stop it, or choose another --master_port",
        options_.rank, address(), options_.port);
  }
  if (code != Reply::kOk) {
    close_locked();
    return invalid_argument(
        "rank {}: the rendezvous store at {} rejected the request for {} "
        "(a key used as a counter holds text, or a protocol mismatch)",
        options_.rank, address(), what);
  }
  reply = buf.substr(5);
  return Status::ok();
}

Status TcpStore::set(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string reply;
  std::string req = build(Op::kSet, options_.token, [&](store_wire::Writer& w) {
    w.str(key);
    w.str(value);
  });
  return call_locked(req, reply, Clock::now() + options_.timeout, options_.timeout,
                     fmt::format("setting '{}'", key));
}

Result<std::string> TcpStore::get(const std::string& key) {
  return get(key, options_.timeout);
}

Result<std::string> TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string reply;
  std::string req = build(Op::kGet, options_.token, [&](store_wire::Writer& w) { w.str(key); });
  ZT_RETURN_IF_ERROR(
      call_locked(req, reply, Clock::now() + timeout, timeout, fmt::format("key '{}'", key)));
  store_wire::Reader r(reply);
  std::string value(r.str());
  if (!r.ok()) return unavailable("malformed reply from the rendezvous store at {}", address());
  return value;
}

Result<int64_t> TcpStore::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string reply;
  std::string req = build(Op::kAdd, options_.token, [&](store_wire::Writer& w) {
    w.str(key);
    w.i64(delta);
  });
  ZT_RETURN_IF_ERROR(call_locked(req, reply, Clock::now() + options_.timeout, options_.timeout,
                                 fmt::format("adding to '{}'", key)));
  store_wire::Reader r(reply);
  int64_t v = r.i64();
  if (!r.ok()) return unavailable("malformed reply from the rendezvous store at {}", address());
  return v;
}

Status TcpStore::wait(const std::vector<std::string>& keys) {
  return wait(keys, options_.timeout);
}

Status TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string reply;
  std::string req = build(Op::kWait, options_.token, [&](store_wire::Writer& w) {
    w.u32(static_cast<uint32_t>(keys.size()));
    for (const std::string& k : keys) w.str(k);
  });
  return call_locked(req, reply, Clock::now() + timeout, timeout,
                     fmt::format("key(s) '{}'", fmt::join(keys, "', '")));
}

Result<bool> TcpStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string reply;
  std::string req = build(Op::kCheck, options_.token, [&](store_wire::Writer& w) {
    w.u32(static_cast<uint32_t>(keys.size()));
    for (const std::string& k : keys) w.str(k);
  });
  ZT_RETURN_IF_ERROR(
      call_locked(req, reply, Clock::now() + options_.timeout, options_.timeout, "a key check"));
  store_wire::Reader r(reply);
  bool present = r.u8() != 0;
  if (!r.ok()) return unavailable("malformed reply from the rendezvous store at {}", address());
  return present;
}

Result<bool> TcpStore::delete_key(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string reply;
  std::string req = build(Op::kDelete, options_.token, [&](store_wire::Writer& w) { w.str(key); });
  ZT_RETURN_IF_ERROR(call_locked(req, reply, Clock::now() + options_.timeout, options_.timeout,
                                 fmt::format("deleting '{}'", key)));
  store_wire::Reader r(reply);
  bool existed = r.u8() != 0;
  if (!r.ok()) return unavailable("malformed reply from the rendezvous store at {}", address());
  return existed;
}

}  // namespace zt
