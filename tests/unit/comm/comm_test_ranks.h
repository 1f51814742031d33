// Helpers for communicator tests that run several ranks as threads of one test process: the
// environment of rank r of `world` on loopback, running fn(rank) on every rank, creating a rank's
// communicator.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "zt/comm/communicator.h"
#include "zt/comm/env.h"

namespace zt::testing {

inline DistEnv rank_env(int rank, int world, int port, std::chrono::milliseconds timeout,
                        const std::string& token) {
  DistEnv env;
  env.rank = rank;
  env.world_size = world;
  env.local_rank = rank;
  env.local_size = world;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  env.job_token = token;
  env.timeout = timeout;
  env.source = DistSource::kRankEnv;
  return env;
}

// Runs fn(rank) on `world` threads and joins them.
inline void run_ranks(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(fn, r);
  for (std::thread& t : threads) t.join();
}

inline std::unique_ptr<Communicator> create_communicator(const DistEnv& env, Device device) {
  auto c = communicator_create(env, device);
  EXPECT_TRUE(c.is_ok()) << "rank " << env.rank << ": " << c.status().message();
  return c.is_ok() ? std::move(c).value() : nullptr;
}

}  // namespace zt::testing
