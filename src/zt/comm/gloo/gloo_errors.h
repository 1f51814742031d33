// Turning Gloo's exceptions into Status for users. Gloo reports a dead or stuck peer as an
// IoException whose text names the socket address of the peer's end of the connection
// ("Connection closed by peer [10.0.0.2]:41234"), not its rank; every rank publishes the local
// address of each of its connections in the store after connecting, so the address in a message
// maps back to a rank. After the first failure a Gloo context is unusable (Gloo closes every pair
// on a timeout), so the state remembers it and every later operation fails at once with it.
#pragma once

#include <chrono>
#include <exception>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "zt/core/status.h"

namespace zt {

class GlooErrorState {
 public:
  GlooErrorState(int rank, int world_size, std::chrono::milliseconds timeout)
      : rank_(rank), world_size_(world_size), timeout_(timeout) {}

  // `address` is Gloo's text for the peer end of the connection to `peer` ("[ip]:port").
  void add_peer_address(std::string address, int peer);
  // Non-ok when an earlier operation failed: this operation is refused with that failure.
  Status failed_before(std::string_view op);
  // Translates a Gloo exception raised by `op`, remembers it as the communicator's failure (if it
  // is the first), and returns it.
  Status record(std::string_view op, const std::exception& e);
  // The rank whose address appears in `message`, or -1.
  int peer_in(std::string_view message) const;
  // The Status a Gloo message means (without remembering it).
  Status translate(std::string_view op, std::string_view gloo_message) const;

 private:
  const int rank_;
  const int world_size_;
  const std::chrono::milliseconds timeout_;
  std::vector<std::pair<std::string, int>> peer_addresses_;  // written before any operation
  std::mutex mu_;
  Status first_failure_;
};

}  // namespace zt
