// Tests of the Gloo communicator (src/zt/comm/gloo/) and the backend choice, with W in {2, 3, 4}
// ranks as threads of this test, each with its own store client and Gloo context on 127.0.0.1.
// Every collective and dtype is checked against values computed here from rank-dependent data
// (integers and halves, exact in bf16, so sums are exact); sizes are not multiples of W. Failure
// tests: a rank that never arrives, a rank that skips a collective, a rank that dies.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "unit/comm/comm_test_ranks.h"
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <latch>
#include <thread>

#include "zt/comm/communicator.h"

namespace zt {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using testing::free_tcp_port;

DistEnv rank_env(int rank, int world, int port, std::chrono::milliseconds timeout) {
  return testing::rank_env(rank, world, port, timeout, "gloo-test");
}
using testing::run_ranks;
std::unique_ptr<Communicator> create(const DistEnv& env) {
  return testing::create_communicator(env, Device::cpu());
}

// Rank-dependent data: small integers (u8: 1..11; others -5..5), halved for float dtypes, so
// every value and every sum of up to 4 of them is exact in bf16. Ranks differ at every index.
double value(int rank, int64_t i, DType d) {
  double v = static_cast<double>((rank * 3 + i * 5) % 11) + 1;
  if (d == DType::u8) return v;
  v -= 6;
  return dtype_is_float(d) ? v * 0.5 : v;
}

std::vector<double> values(int rank, int64_t n, DType d, int64_t offset = 0) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = value(rank, offset + i, d);
  return out;
}

// The oracle: element i of the reduction over ranks of value(q, i).
double reduced(ReduceOp op, int world, int64_t i, DType d) {
  double sum = 0, mx = -1e9, mn = 1e9;
  for (int q = 0; q < world; ++q) {
    double v = value(q, i, d);
    sum += v;
    mx = std::max(mx, v);
    mn = std::min(mn, v);
  }
  switch (op) {
    case ReduceOp::kSum:
      return sum;
    case ReduceOp::kMax:
      return mx;
    case ReduceOp::kMin:
      return mn;
    case ReduceOp::kAvg:
      return dtype_is_float(d) ? sum / world : std::trunc(sum / world);
  }
  return 0;
}

// Relative tolerance of an average (the only inexact result) in each dtype.
double avg_tolerance(DType d) {
  switch (d) {
    case DType::bf16:
      return 1.0 / 256;
    case DType::f16:
      return 1.0 / 2048;
    case DType::f32:
      return 1e-6;
    default:
      return 0;
  }
}

void expect_reduced(const std::vector<double>& got, ReduceOp op, int world, DType d, int64_t offset,
                    const char* what) {
  for (size_t k = 0; k < got.size(); ++k) {
    double want = reduced(op, world, offset + static_cast<int64_t>(k), d);
    double tol = op == ReduceOp::kAvg ? avg_tolerance(d) * std::abs(want) : 0;
    EXPECT_LE(std::abs(got[k] - want), tol)
        << what << " " << reduce_op_name(op) << " " << dtype_name(d) << " W=" << world
        << " element " << offset + static_cast<int64_t>(k) << ": got " << got[k] << ", want "
        << want;
  }
}

void expect_ok(CommHandle h, const char* what) {
  Status s = h.wait();
  EXPECT_TRUE(s.is_ok()) << what << ": " << s.message();
}

const DType kDTypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64,
                         DType::i32, DType::i64, DType::u8};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};

class GlooWorld : public ::testing::TestWithParam<int> {};

TEST_P(GlooWorld, EveryCollectiveEveryDtype) {
  const int world = GetParam();
  const int port = free_tcp_port();
  run_ranks(world, [&](int rank) {
    auto comm = create(rank_env(rank, world, port, 20s));
    ASSERT_NE(comm, nullptr);
    EXPECT_EQ(comm->backend_name(), "gloo");
    EXPECT_EQ(comm->rank(), rank);
    EXPECT_EQ(comm->world_size(), world);
    for (DType d : kDTypes) {
      // all_reduce of 7 elements: not a multiple of W.
      for (ReduceOp op : kOps) {
        Tensor t = Tensor::from_doubles(values(rank, 7, d), {7}, d);
        expect_ok(comm->all_reduce(t, op), "all_reduce");
        expect_reduced(t.to_doubles(), op, world, d, 0, "all_reduce");
      }
      // reduce_scatter: blocks of 5; rank r gets block r.
      for (ReduceOp op : kOps) {
        const int64_t block = 5;
        Tensor in = Tensor::from_doubles(values(rank, block * world, d), {block * world}, d);
        Tensor out = Tensor::zeros({block}, d);
        expect_ok(comm->reduce_scatter(out, in, op), "reduce_scatter");
        expect_reduced(out.to_doubles(), op, world, d, rank * block, "reduce_scatter");
      }
      // all_gather: blocks of 5, then the in-place form (in is this rank's slot of out).
      {
        Tensor in = Tensor::from_doubles(values(rank, 5, d), {5}, d);
        Tensor out = Tensor::zeros({5 * world}, d);
        expect_ok(comm->all_gather(out, in), "all_gather");
        std::vector<double> got = out.to_doubles();
        Tensor inplace = Tensor::zeros({5 * world}, d);
        Tensor slot = inplace.view(rank * 5, {5});
        slot.copy_from(in);
        expect_ok(comm->all_gather(inplace, slot), "all_gather in place");
        std::vector<double> got_inplace = inplace.to_doubles();
        for (int q = 0; q < world; ++q) {
          for (int64_t k = 0; k < 5; ++k) {
            EXPECT_EQ(got[static_cast<size_t>(q * 5 + k)], value(q, k, d))
                << "all_gather " << dtype_name(d) << " rank " << q << " element " << k;
            EXPECT_EQ(got_inplace[static_cast<size_t>(q * 5 + k)], value(q, k, d))
                << "in-place all_gather " << dtype_name(d);
          }
        }
      }
      // broadcast of 7 elements from the last rank.
      {
        const int root = world - 1;
        Tensor t = Tensor::from_doubles(values(rank, 7, d), {7}, d);
        expect_ok(comm->broadcast(t, root), "broadcast");
        EXPECT_EQ(t.to_doubles(), values(root, 7, d)) << "broadcast " << dtype_name(d);
      }
    }
    expect_ok(comm->barrier(), "barrier");
  });
}

TEST_P(GlooWorld, SendRecvRingPostedBeforeWaiting) {
  const int world = GetParam();
  const int port = free_tcp_port();
  run_ranks(world, [&](int rank) {
    auto comm = create(rank_env(rank, world, port, 20s));
    ASSERT_NE(comm, nullptr);
    const int right = (rank + 1) % world;
    const int left = (rank + world - 1) % world;
    // Two messages each way, every rank sending first: the k-th send matches the k-th recv.
    Tensor a = Tensor::from_doubles(values(rank, 6, DType::f32), {6}, DType::f32);
    Tensor b = Tensor::from_doubles(values(rank + 5, 3, DType::i64), {3}, DType::i64);
    Tensor ra = Tensor::zeros({6}, DType::f32);
    Tensor rb = Tensor::zeros({3}, DType::i64);
    CommHandle s1 = comm->send(a, right);
    CommHandle s2 = comm->send(b, right);
    CommHandle r1 = comm->recv(ra, left);
    CommHandle r2 = comm->recv(rb, left);
    expect_ok(std::move(s1), "send 1");
    expect_ok(std::move(s2), "send 2");
    expect_ok(std::move(r1), "recv 1");
    expect_ok(std::move(r2), "recv 2");
    EXPECT_EQ(ra.to_doubles(), values(left, 6, DType::f32));
    EXPECT_EQ(rb.to_doubles(), values(left + 5, 3, DType::i64));
    expect_ok(comm->barrier(), "barrier");
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, GlooWorld, ::testing::Values(2, 3, 4));

// Larger sizes than the tests above: Gloo's algorithms split work into per-rank segments; W=3
// exercises the non-power-of-two path of the halving-doubling reduce-scatter.
TEST(GlooCommunicator, LargerReduceScatterAndAllReduce) {
  const int world = 3;
  const int port = free_tcp_port();
  run_ranks(world, [&](int rank) {
    auto comm = create(rank_env(rank, world, port, 20s));
    ASSERT_NE(comm, nullptr);
    const int64_t block = 40'001;
    Tensor in =
        Tensor::from_doubles(values(rank, block * world, DType::f32), {block * world}, DType::f32);
    Tensor out = Tensor::zeros({block}, DType::f32);
    expect_ok(comm->reduce_scatter(out, in, ReduceOp::kSum), "reduce_scatter");
    expect_reduced(out.to_doubles(), ReduceOp::kSum, world, DType::f32, rank * block,
                   "large reduce_scatter");
    expect_ok(comm->all_reduce(in, ReduceOp::kSum), "all_reduce");
    expect_reduced(in.to_doubles(), ReduceOp::kSum, world, DType::f32, 0, "large all_reduce");
    expect_ok(comm->barrier(), "barrier");
  });
}

// reduce_scatter runs in rounds of bounded scratch; a tiny bound makes 13-element blocks take
// three rounds (5, 5, 3 elements per rank-block with W=3 and 4-byte compute values).
TEST(GlooCommunicator, ReduceScatterInSeveralRounds) {
  const int world = 3;
  const int port = free_tcp_port();
  setenv("ZT_GLOO_SCATTER_CHUNK_BYTES", "64", 1);
  run_ranks(world, [&](int rank) {
    auto comm = create(rank_env(rank, world, port, 20s));
    ASSERT_NE(comm, nullptr);
    for (DType d : {DType::f32, DType::bf16, DType::i64}) {
      const int64_t block = 13;
      Tensor in = Tensor::from_doubles(values(rank, block * world, d), {block * world}, d);
      Tensor out = Tensor::zeros({block}, d);
      expect_ok(comm->reduce_scatter(out, in, ReduceOp::kSum), "reduce_scatter");
      expect_reduced(out.to_doubles(), ReduceOp::kSum, world, d, rank * block,
                     "reduce_scatter in rounds");
    }
    expect_ok(comm->barrier(), "barrier");
  });
  unsetenv("ZT_GLOO_SCATTER_CHUNK_BYTES");
}

// The coalesced forms give each tensor what its own collective would: tensors of different sizes
// (blocks of 1, 7 and 40 elements per rank), each with its own data (a distinct offset into the
// rank's value sequence), for sums and averages in f32, bf16 and i64. A tiny scratch bound makes
// the reduce-scatter rounds cut across the tensors' boundaries.
TEST(GlooCommunicator, CoalescedFormsMatchOneCollectivePerTensor) {
  const int world = 3;
  const int port = free_tcp_port();
  setenv("ZT_GLOO_SCATTER_CHUNK_BYTES", "96", 1);
  const std::vector<int64_t> blocks = {1, 7, 40};
  const std::vector<int64_t> offsets = {1000, 2000, 3000};
  run_ranks(world, [&](int rank) {
    auto comm = create(rank_env(rank, world, port, 20s));
    ASSERT_NE(comm, nullptr);
    for (DType d : {DType::f32, DType::bf16, DType::i64}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        std::vector<Tensor> inouts, outs, ins;
        for (size_t k = 0; k < blocks.size(); ++k) {
          const int64_t n = blocks[k] * world;
          inouts.push_back(Tensor::from_doubles(values(rank, n, d, offsets[k]), {n}, d));
          ins.push_back(Tensor::from_doubles(values(rank, n, d, offsets[k]), {n}, d));
          outs.push_back(Tensor::zeros({blocks[k]}, d));
        }
        expect_ok(comm->all_reduce_coalesced(inouts, op), "all_reduce_coalesced");
        expect_ok(comm->reduce_scatter_coalesced(outs, ins, op), "reduce_scatter_coalesced");
        for (size_t k = 0; k < blocks.size(); ++k) {
          expect_reduced(inouts[k].to_doubles(), op, world, d, offsets[k], "all_reduce_coalesced");
          expect_reduced(outs[k].to_doubles(), op, world, d, offsets[k] + rank * blocks[k],
                         "reduce_scatter_coalesced");
        }
      }
    }
    std::vector<Tensor> none;
    expect_ok(comm->all_reduce_coalesced(none, ReduceOp::kSum), "empty all_reduce_coalesced");
    expect_ok(comm->barrier(), "barrier");
  });
  unsetenv("ZT_GLOO_SCATTER_CHUNK_BYTES");
}

// new_group: two disjoint pairs, then a pair numbered against rank order, then a group of one.
// Each group's all_reduce sums only its members' values (the oracle is the sum computed here),
// send/recv use group ranks, a rank outside a group gets null, and the parent still works after.
TEST(GlooCommunicator, NewGroupsReduceOverTheirMembersOnly) {
  const int world = 4;
  const int port = free_tcp_port();
  run_ranks(world, [&](int rank) {
    auto comm = create(rank_env(rank, world, port, 20s));
    ASSERT_NE(comm, nullptr);
    std::vector<std::unique_ptr<Communicator>> pairs;
    for (std::vector<int> g : {std::vector<int>{0, 1}, std::vector<int>{2, 3}}) {
      auto c = comm->new_group(g);
      ASSERT_TRUE(c.is_ok()) << c.status().message();
      const bool member = std::find(g.begin(), g.end(), rank) != g.end();
      EXPECT_EQ(*c != nullptr, member) << "rank " << rank;
      if (member) pairs.push_back(std::move(c).value());
    }
    ASSERT_EQ(pairs.size(), 1u);
    Communicator& pair = *pairs[0];
    EXPECT_EQ(pair.world_size(), 2);
    EXPECT_EQ(pair.rank(), rank % 2);
    const int first = rank - rank % 2;
    Tensor t = Tensor::from_doubles({static_cast<double>(rank + 1)}, {1}, DType::f32);
    expect_ok(pair.all_reduce(t, ReduceOp::kSum), "group all_reduce");
    EXPECT_EQ(t.to_doubles()[0], static_cast<double>(2 * first + 3)) << "rank " << rank;
    // A group of a group: its keys nest under the pair's, so the two pairs' sub-groups (and the
    // job's own first group) never read each other's addresses.
    auto sub = pair.new_group(std::vector<int>{1, 0});
    ASSERT_TRUE(sub.is_ok()) << sub.status().message();
    ASSERT_NE(*sub, nullptr);
    Tensor u = Tensor::from_doubles({static_cast<double>(10 * (rank + 1))}, {1}, DType::f32);
    expect_ok((*sub)->all_reduce(u, ReduceOp::kSum), "sub-group all_reduce");
    EXPECT_EQ(u.to_doubles()[0], static_cast<double>(10 * (2 * first + 3))) << "rank " << rank;
    // Reversed numbering: ranks 3 and 1, so rank 3 is the group's rank 0.
    auto rev = comm->new_group(std::vector<int>{3, 1});
    ASSERT_TRUE(rev.is_ok()) << rev.status().message();
    if (rank == 1 || rank == 3) {
      ASSERT_NE(*rev, nullptr);
      EXPECT_EQ((*rev)->rank(), rank == 3 ? 0 : 1);
      Tensor m = Tensor::from_doubles({static_cast<double>(rank * 10)}, {1}, DType::f32);
      if (rank == 3) {
        expect_ok((*rev)->send(m, 1), "group send");
      } else {
        expect_ok((*rev)->recv(m, 0), "group recv");
        EXPECT_EQ(m.to_doubles()[0], 30.0);
      }
    } else {
      EXPECT_EQ(*rev, nullptr);
    }
    auto one = comm->new_group(std::vector<int>{0});
    ASSERT_TRUE(one.is_ok());
    EXPECT_EQ(*one != nullptr, rank == 0);
    if (rank == 0) {
      EXPECT_EQ((*one)->world_size(), 1);
    }
    // Bad lists fail on every rank alike, before any communication.
    EXPECT_FALSE(comm->new_group(std::vector<int>{}).is_ok());
    EXPECT_FALSE(comm->new_group(std::vector<int>{1, 1}).is_ok());
    auto outside = comm->new_group(std::vector<int>{0, 4});
    ASSERT_FALSE(outside.is_ok());
    EXPECT_NE(outside.status().message().find("outside the world of 4"), std::string::npos);
    Tensor w = Tensor::from_doubles({1.0}, {1}, DType::f32);
    expect_ok(comm->all_reduce(w, ReduceOp::kSum), "parent all_reduce after the groups");
    EXPECT_EQ(w.to_doubles()[0], 4.0);
  });
}

TEST(GlooCommunicator, RankThatNeverArrivesFailsTheOthersWithinTheTimeout) {
  const int world = 3;
  const int port = free_tcp_port();
  run_ranks(world - 1, [&](int rank) {  // rank 2 is never started
    auto start = Clock::now();
    auto c = communicator_create(rank_env(rank, world, port, 1500ms), Device::cpu());
    auto took = Clock::now() - start;
    ASSERT_FALSE(c.is_ok());
    EXPECT_EQ(c.status().code(), StatusCode::kTimeout) << c.status().message();
    EXPECT_NE(c.status().message().find("rank 2"), std::string::npos) << c.status().message();
    EXPECT_NE(c.status().message().find(fmt::format("rank {} of 3", rank)), std::string::npos)
        << c.status().message();
    EXPECT_LT(took, 8s);
  });
}

TEST(GlooCommunicator, RankThatSkipsACollectiveTimesOutTheOthers) {
  const int world = 2;
  const int port = free_tcp_port();
  std::latch rank0_done(1);
  run_ranks(world, [&](int rank) {
    auto comm = create(rank_env(rank, world, port, 1500ms));
    ASSERT_NE(comm, nullptr);
    if (rank == 1) {
      rank0_done.wait();  // alive, but never calls all_reduce
      return;
    }
    Tensor t = Tensor::from_doubles({1, 2, 3}, {3}, DType::f32);
    auto start = Clock::now();
    Status s = comm->all_reduce(t, ReduceOp::kSum).wait();
    auto took = Clock::now() - start;
    EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.message();
    EXPECT_NE(s.message().find("all_reduce on rank 0 of 2 failed"), std::string::npos)
        << s.message();
    EXPECT_GE(took, 1s);
    EXPECT_LT(took, 8s);
    // The communicator refuses further work at once, with the first failure.
    start = Clock::now();
    Status again = comm->barrier().wait();
    EXPECT_FALSE(again.is_ok());
    EXPECT_NE(again.message().find("earlier failure"), std::string::npos) << again.message();
    EXPECT_LT(Clock::now() - start, 1s);
    rank0_done.count_down();
  });
}

// (world, rank that dies)
class GlooDeadPeer : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(GlooDeadPeer, NextCollectiveNamesTheDeadPeer) {
  const auto [world, dead] = GetParam();
  const int port = free_tcp_port();
  std::latch died(1);
  // Survivors keep their communicators until every survivor has seen its error: a survivor that
  // tore down first would close its own connections, and a third rank could then (rightly) see
  // that survivor's connection close before the dead rank's.
  std::latch checked(world - 1);
  run_ranks(world, [&, world = world, dead = dead](int rank) {
    // A long timeout: the failure must come from the closed connection, not the timeout.
    auto comm = create(rank_env(rank, world, port, 30s));
    ASSERT_NE(comm, nullptr);
    Tensor t = Tensor::from_doubles(values(rank, 4, DType::f32), {4}, DType::f32);
    expect_ok(comm->all_reduce(t, ReduceOp::kSum), "all_reduce before the death");
    if (rank == dead) {
      expect_ok(comm->barrier(), "barrier");  // everyone is past the first all_reduce
      comm.reset();                           // closes every connection, like a killed process
      died.count_down();
      return;
    }
    expect_ok(comm->barrier(), "barrier");
    died.wait();
    std::this_thread::sleep_for(100ms);
    auto start = Clock::now();
    Status s = comm->all_reduce(t, ReduceOp::kSum).wait();
    EXPECT_FALSE(s.is_ok());
    EXPECT_LT(Clock::now() - start, 10s);
    EXPECT_NE(s.message().find(fmt::format("all_reduce on rank {} of {} failed", rank, world)),
              std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find(fmt::format("peer rank {}", dead)), std::string::npos)
        << s.message();
    checked.arrive_and_wait();
  });
}

INSTANTIATE_TEST_SUITE_P(Deaths, GlooDeadPeer, ::testing::Values(std::pair{2, 0}, std::pair{3, 1}));

TEST(StubCommunicator, WorldOfOneCopiesOrDoesNothing) {
  auto c = communicator_create(DistEnv{}, Device::cpu());
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  Communicator& comm = **c;
  EXPECT_EQ(comm.backend_name(), "stub");
  EXPECT_EQ(comm.world_size(), 1);
  for (ReduceOp op : kOps) {
    Tensor t = Tensor::from_doubles({1.5, -2, 3}, {3}, DType::bf16);
    expect_ok(comm.all_reduce(t, op), "all_reduce");
    EXPECT_EQ(t.to_doubles(), (std::vector<double>{1.5, -2, 3}));
  }
  Tensor in = Tensor::from_doubles({4, 5}, {2}, DType::i32);
  Tensor out = Tensor::zeros({2}, DType::i32);
  expect_ok(comm.reduce_scatter(out, in, ReduceOp::kSum), "reduce_scatter");
  EXPECT_EQ(out.to_doubles(), (std::vector<double>{4, 5}));
  Tensor gathered = Tensor::zeros({2}, DType::i32);
  expect_ok(comm.all_gather(gathered, in), "all_gather");
  EXPECT_EQ(gathered.to_doubles(), (std::vector<double>{4, 5}));
  expect_ok(comm.broadcast(in, 0), "broadcast");
  expect_ok(comm.barrier(), "barrier");
  // The coalesced forms loop over the tensors.
  std::vector<Tensor> ins = {in, Tensor::from_doubles({6}, {1}, DType::i32)};
  std::vector<Tensor> outs = {Tensor::zeros({2}, DType::i32), Tensor::zeros({1}, DType::i32)};
  expect_ok(comm.reduce_scatter_coalesced(outs, ins, ReduceOp::kSum), "reduce_scatter_coalesced");
  EXPECT_EQ(outs[0].to_doubles(), (std::vector<double>{4, 5}));
  EXPECT_EQ(outs[1].to_doubles(), (std::vector<double>{6}));
  expect_ok(comm.all_reduce_coalesced(ins, ReduceOp::kMax), "all_reduce_coalesced");
  EXPECT_EQ(ins[1].to_doubles(), (std::vector<double>{6}));
}

TEST(StubCommunicatorDeathTest, MisuseAborts) {
  auto c = communicator_create(DistEnv{}, Device::cpu());
  ASSERT_TRUE(c.is_ok());
  Tensor t = Tensor::zeros({2}, DType::f32);
  Tensor wrong = Tensor::zeros({3}, DType::f32);
  EXPECT_DEATH((void)(*c)->reduce_scatter(wrong, t, ReduceOp::kSum), "reduce_scatter");
  EXPECT_DEATH((void)(*c)->send(t, 1), "no peer");
}

}  // namespace
}  // namespace zt
