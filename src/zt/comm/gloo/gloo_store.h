// Gloo's rendezvous store interface over the TCP store (store/tcp_store.h), with every key under a
// prefix. Gloo calls the store from inside connectFullMesh and only understands exceptions, so a
// failing call throws StoreFailure carrying the Status; gloo_communicator.cc catches it and
// returns the Status. A timeout names the rank whose key never appeared (Gloo's keys are "<rank>"
// and "rank_<rank>").
#pragma once

#include <gloo/rendezvous/store.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "zt/comm/store/tcp_store.h"

namespace zt {

struct StoreFailure : std::runtime_error {
  explicit StoreFailure(Status s) : std::runtime_error(s.message()), status(std::move(s)) {}
  Status status;
};

class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<TcpStore> store, std::string prefix)
      : store_(std::move(store)), prefix_(std::move(prefix)) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  // Throws StoreFailure for a non-ok status; a timeout's message names the missing rank.
  void raise(const Status& s, const std::vector<std::string>& keys,
             std::chrono::milliseconds timeout) const;

  std::shared_ptr<TcpStore> store_;
  std::string prefix_;
};

}  // namespace zt
