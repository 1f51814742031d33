// A small TCP key-value store for rendezvous: rank 0 serves it on MASTER_PORT (one thread, poll),
// every rank (rank 0 included) talks to it through a TcpStore client. It carries Gloo's pair
// addresses and NCCL's unique id. Values are byte strings; counters (add) are decimal text.
//
// Every message carries the job token; the server answers a message with another token by
// refusing it and closing the connection, so a stale process of an earlier job that still holds
// or dials the port fails with a clear error instead of joining. Every call has a deadline: the
// client connects with retry until then (rank 0 may start last), and a get/wait whose key does not
// appear in time returns a kTimeout Status naming the key. Wire format: store/store_wire.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "zt/core/status.h"

namespace zt {

class TcpStoreServer;

enum class StoreRole : unsigned char {
  kClient,           // connect to a server elsewhere
  kServerAndClient,  // serve on `port` in this process (rank 0), then connect to it
};

struct TcpStoreOptions {
  std::string host = "127.0.0.1";  // where the server is (for kServerAndClient: any local name)
  int port = 0;                    // kServerAndClient: 0 picks a free port (tests)
  std::string token;
  std::chrono::milliseconds timeout = std::chrono::seconds(30);  // default for every call
  int rank = 0;                                                  // for messages only
  StoreRole role = StoreRole::kClient;
};

class TcpStore {
 public:
  // Connects (serving first for kServerAndClient), retrying until options.timeout.
  static Result<std::unique_ptr<TcpStore>> connect(const TcpStoreOptions& options);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  Status set(const std::string& key, const std::string& value);
  // Waits until `key` exists, then returns its value.
  Result<std::string> get(const std::string& key);
  Result<std::string> get(const std::string& key, std::chrono::milliseconds timeout);
  // Adds `delta` to the counter `key` (created at 0) and returns the new value.
  Result<int64_t> add(const std::string& key, int64_t delta);
  // Waits until every key exists.
  Status wait(const std::vector<std::string>& keys);
  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Whether every key exists now (does not wait).
  Result<bool> check(const std::vector<std::string>& keys);
  // Removes `key`; whether it existed.
  Result<bool> delete_key(const std::string& key);

  int port() const { return options_.port; }  // the served port when this process serves
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  // "127.0.0.1:29500", for messages.
  std::string address() const;

 private:
  explicit TcpStore(TcpStoreOptions options);
  Status connect_locked(std::chrono::steady_clock::time_point deadline);
  // Sends one request and reads its reply into `reply` (the payload after the reply code).
  // `timeout` is the call's whole budget, for the message.
  Status call_locked(const std::string& request, std::string& reply,
                     std::chrono::steady_clock::time_point deadline,
                     std::chrono::milliseconds timeout, std::string_view what);
  void close_locked();

  TcpStoreOptions options_;
  std::unique_ptr<TcpStoreServer> server_;  // only on the serving rank
  std::mutex mu_;                           // one request at a time on the connection
  int fd_ = -1;
};

// The server alone (TcpStore owns one for kServerAndClient). Binds every interface on `port`.
class TcpStoreServer {
 public:
  // Serves on `port` of the address the job's ranks reach it at (`host`, MASTER_ADDR): loopback
  // for a one-machine job, else that address; every interface only when it is not one of this
  // machine's. The job token is compared in constant time; a connection that stalls mid-frame
  // is closed after 10 s; one peer address holds at most 1024 connections.
  static Result<std::unique_ptr<TcpStoreServer>> start(int port, std::string token,
                                                       const std::string& host = "127.0.0.1");
  // The address bound: "127.0.0.1", "10.0.0.5", or "*" for every interface.
  const std::string& bound_address() const { return bound_; }
  ~TcpStoreServer();  // stops the thread and closes every connection
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  int port() const { return port_; }

 private:
  struct State;
  TcpStoreServer() = default;
  std::string bound_;
  void run();

  int port_ = 0;
  std::unique_ptr<State> state_;
};

}  // namespace zt
