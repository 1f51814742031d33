// GlooErrorState (gloo_errors.h). The message texts matched here are those of Gloo's TCP transport
// (gloo/transport/tcp/{pair,buffer,unbound_buffer}.cc): "Connection closed by peer", "Read error",
// "writev", "Socket closed" for a dead peer; "Timed out waiting", "Read timeout", "Write timeout",
// "Connect timeout" for a stuck one; "Application timeout caused pair closure" on other pending
// operations after a local timeout.
#include "zt/comm/gloo/gloo_errors.h"

#include <cctype>

#include "zt/comm/communicator.h"

namespace zt {
namespace {

// Drops Gloo's "[/path/file.cc:123] " prefix.
std::string_view strip_location(std::string_view m) {
  if (m.starts_with("[")) {
    size_t end = m.find("] ");
    if (end != std::string_view::npos) m.remove_prefix(end + 2);
  }
  return m;
}

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

}  // namespace

void GlooErrorState::add_peer_address(std::string address, int peer) {
  peer_addresses_.emplace_back(std::move(address), peer);
}

int GlooErrorState::peer_in(std::string_view message) const {
  for (const auto& [addr, peer] : peer_addresses_) {
    // "[ip]:1234" must not match inside "[ip]:12345".
    for (size_t pos = message.find(addr); pos != std::string_view::npos;
         pos = message.find(addr, pos + 1)) {
      size_t after = pos + addr.size();
      if (after == message.size() || !std::isdigit(static_cast<unsigned char>(message[after]))) {
        return peer;
      }
    }
  }
  return -1;
}

Status GlooErrorState::translate(std::string_view op, std::string_view gloo_message) const {
  std::string_view m = strip_location(gloo_message);
  int peer = peer_in(m);
  std::string who = peer >= 0 ? fmt::format("peer rank {}", peer) : std::string("a peer rank");
  double seconds = static_cast<double>(timeout_.count()) / 1000.0;
  if (contains(m, "Application timeout caused pair closure")) {
    return {StatusCode::kTimeout,
            comm_failure_message(op, rank_, world_size_,
                                 "an earlier operation on this rank timed out and closed every "
                                 "connection")};
  }
  if (contains(m, "Timed out") || contains(m, "timeout")) {
    return {StatusCode::kTimeout,
            comm_failure_message(
                op, rank_, world_size_,
                fmt::format("no progress for {:g} s{}: a rank did not reach this operation, or "
                            "is stuck or dead (see the other ranks' logs; the timeout is "
                            "ZT_COMM_TIMEOUT_S seconds or DEEPSPEED_TIMEOUT minutes) [gloo: {}]",
                            seconds,
                            peer >= 0 ? fmt::format(" waiting for peer rank {}", peer) : "", m))};
  }
  if (contains(m, "closed by peer") || contains(m, "Socket closed") || contains(m, "Read error") ||
      contains(m, "writev") || contains(m, "Connection reset") || contains(m, "Broken pipe")) {
    return {StatusCode::kUnavailable,
            comm_failure_message(op, rank_, world_size_,
                                 fmt::format("{} closed the connection (the process probably "
                                             "died); see its log [gloo: {}]",
                                             who, m))};
  }
  return {StatusCode::kUnavailable,
          comm_failure_message(op, rank_, world_size_, fmt::format("gloo: {}", m))};
}

Status GlooErrorState::failed_before(std::string_view op) {
  std::lock_guard<std::mutex> lock(mu_);
  if (first_failure_.is_ok()) return Status::ok();
  return {first_failure_.code(),
          comm_failure_message(op, rank_, world_size_,
                               fmt::format("the communicator is unusable after an earlier "
                                           "failure: {}",
                                           first_failure_.message()))};
}

Status GlooErrorState::record(std::string_view op, const std::exception& e) {
  Status s = translate(op, e.what());
  std::lock_guard<std::mutex> lock(mu_);
  if (first_failure_.is_ok()) first_failure_ = s;
  return s;
}

}  // namespace zt
