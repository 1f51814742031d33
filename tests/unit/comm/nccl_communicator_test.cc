// Tests of the NCCL communicator (src/zt/comm/nccl/) with 2 ranks as threads of this test on
// cuda:0 and cuda:1; skipped without two CUDA devices. Same oracle as the Gloo tests: every
// collective and dtype against values computed here, plus the watchdog: a rank that skips a
// collective makes the other's wait() fail at the timeout (and abort NCCL) instead of hanging.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "unit/comm/comm_test_ranks.h"
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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

constexpr int kWorld = 2;

using testing::free_tcp_port;

DistEnv rank_env(int rank, int port, std::chrono::milliseconds timeout) {
  return testing::rank_env(rank, kWorld, port, timeout, "nccl-test");
}
void run_ranks(const std::function<void(int)>& fn) { testing::run_ranks(kWorld, fn); }
std::unique_ptr<Communicator> create(const DistEnv& env) {
  return testing::create_communicator(env, Device::cuda(env.rank));
}

// As in gloo_communicator_test.cc: small integers (halved for floats), exact in bf16.
double value(int rank, int64_t i, DType d) {
  double v = static_cast<double>((rank * 3 + i * 5) % 11) + 1;
  if (d == DType::u8) return v;
  v -= 6;
  return dtype_is_float(d) ? v * 0.5 : v;
}

std::vector<double> values(int rank, int64_t n, DType d) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = value(rank, i, d);
  return out;
}

double reduced(ReduceOp op, int64_t i, DType d) {
  double a = value(0, i, d), b = value(1, i, d);
  switch (op) {
    case ReduceOp::kSum:
      return a + b;
    case ReduceOp::kMax:
      return std::max(a, b);
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kAvg:
      return dtype_is_float(d) ? (a + b) / 2 : std::trunc((a + b) / 2);
  }
  return 0;
}

void expect_ok(CommHandle h, const char* what) {
  Status s = h.wait();
  EXPECT_TRUE(s.is_ok()) << what << ": " << s.message();
}

#define ZT_SKIP_WITHOUT_TWO_GPUS()                                               \
  do {                                                                           \
    if (::zt::cuda_device_count() < 2) GTEST_SKIP() << "needs two CUDA devices"; \
  } while (0)

TEST(NcclCommunicator, EveryCollectiveEveryDtype) {
  ZT_SKIP_WITHOUT_TWO_GPUS();
  const int port = free_tcp_port();
  run_ranks([&](int rank) {
    auto comm = create(rank_env(rank, port, 60s));
    ASSERT_NE(comm, nullptr);
    EXPECT_EQ(comm->backend_name(), "nccl");
    const Device dev = Device::cuda(rank);
    for (DType d :
         {DType::f32, DType::f16, DType::bf16, DType::f64, DType::i32, DType::i64, DType::u8}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
        Tensor t = Tensor::from_doubles(values(rank, 7, d), {7}, d, dev);
        expect_ok(comm->all_reduce(t, op), "all_reduce");
        std::vector<double> got = t.to_doubles();
        for (int64_t i = 0; i < 7; ++i) {
          EXPECT_NEAR(got[static_cast<size_t>(i)], reduced(op, i, d), 1e-2)
              << "all_reduce " << reduce_op_name(op) << " " << dtype_name(d) << " [" << i << "]";
        }
        Tensor in = Tensor::from_doubles(values(rank, 10, d), {10}, d, dev);
        Tensor out = Tensor::zeros({5}, d, dev);
        expect_ok(comm->reduce_scatter(out, in, op), "reduce_scatter");
        got = out.to_doubles();
        for (int64_t k = 0; k < 5; ++k) {
          EXPECT_NEAR(got[static_cast<size_t>(k)], reduced(op, rank * 5 + k, d), 1e-2)
              << "reduce_scatter " << reduce_op_name(op) << " " << dtype_name(d);
        }
      }
      Tensor in = Tensor::from_doubles(values(rank, 5, d), {5}, d, dev);
      Tensor out = Tensor::zeros({10}, d, dev);
      expect_ok(comm->all_gather(out, in), "all_gather");
      std::vector<double> want = values(0, 5, d);
      std::vector<double> second = values(1, 5, d);
      want.insert(want.end(), second.begin(), second.end());
      EXPECT_EQ(out.to_doubles(), want) << "all_gather " << dtype_name(d);
      Tensor b = Tensor::from_doubles(values(rank, 7, d), {7}, d, dev);
      expect_ok(comm->broadcast(b, 1), "broadcast");
      EXPECT_EQ(b.to_doubles(), values(1, 7, d)) << "broadcast " << dtype_name(d);
    }
    // Rank 0 sends first, rank 1 receives first (no cycle of sends).
    Tensor s = Tensor::from_doubles(values(rank, 6, DType::f32), {6}, DType::f32, dev);
    Tensor r = Tensor::zeros({6}, DType::f32, dev);
    const int peer = 1 - rank;
    if (rank == 0) {
      expect_ok(comm->send(s, peer), "send");
      expect_ok(comm->recv(r, peer), "recv");
    } else {
      expect_ok(comm->recv(r, peer), "recv");
      expect_ok(comm->send(s, peer), "send");
    }
    EXPECT_EQ(r.to_doubles(), values(peer, 6, DType::f32));
    expect_ok(comm->barrier(), "barrier");
  });
}

// The coalesced forms (one NCCL group) on a stream of their own, as ZeRO's communication stream
// uses them. The inputs live on another stream (`work`) and are dropped as soon as the operation
// is queued; rank 1 joins 300 ms late, so rank 0's group is still waiting for it while rank 0
// allocates same-sized blocks on `work` and overwrites them. The caching allocator must not hand
// out the dropped inputs' blocks before the group finished (the communicator marks them as used
// on its stream: Tensor::record_stream); if it did, rank 0 would send the overwritten zeros.
TEST(NcclCommunicator, CoalescedOnASideStreamWithInputsDroppedEarly) {
  ZT_SKIP_WITHOUT_TWO_GPUS();
  const int port = free_tcp_port();
  const std::vector<int64_t> blocks = {1, 700, 40000};
  run_ranks([&](int rank) {
    auto comm = create(rank_env(rank, port, 60s));
    ASSERT_NE(comm, nullptr);
    const Device dev = Device::cuda(rank);
    const Stream work = Stream::create(dev);
    const Stream side = Stream::create(dev);
    Event inputs_ready(dev, EventTiming::kSyncOnly);
    // An input of n elements with values offset `off`, written on `work`.
    auto input = [&](int64_t n, int64_t off) {
      std::vector<double> v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value(rank, off + i, DType::f32);
      Tensor t = Tensor::empty({n}, DType::f32, dev, work);
      t.copy_from(Tensor::from_doubles(v, {n}, DType::f32), work);
      return t;
    };
    std::vector<Tensor> sums, outs;
    std::vector<Tensor> ins;
    for (size_t k = 0; k < blocks.size(); ++k) {
      sums.push_back(input(blocks[k] * 2, 1000 * static_cast<int64_t>(k)));
      ins.push_back(input(blocks[k] * 2, 1000 * static_cast<int64_t>(k)));
      outs.push_back(Tensor::zeros({blocks[k]}, DType::f32, dev, side));
    }
    inputs_ready.record(work);
    inputs_ready.wait(side);
    if (rank == 1) std::this_thread::sleep_for(300ms);
    CommHandle scatter = comm->reduce_scatter_coalesced(outs, ins, ReduceOp::kSum, side);
    ins.clear();  // dropped while rank 0's group still waits for rank 1
    std::vector<Tensor> scribbles;
    for (int64_t b : blocks) scribbles.push_back(Tensor::zeros({b * 2}, DType::f32, dev, work));
    expect_ok(std::move(scatter), "reduce_scatter_coalesced");
    expect_ok(comm->all_reduce_coalesced(sums, ReduceOp::kSum, side), "all_reduce_coalesced");
    side.synchronize();
    for (size_t k = 0; k < blocks.size(); ++k) {
      const int64_t off = 1000 * static_cast<int64_t>(k);
      std::vector<double> got = outs[k].to_doubles();
      for (int64_t i = 0; i < blocks[k]; ++i) {
        ASSERT_EQ(got[static_cast<size_t>(i)],
                  reduced(ReduceOp::kSum, off + rank * blocks[k] + i, DType::f32))
            << "reduce_scatter_coalesced tensor " << k << " element " << i;
      }
      got = sums[k].to_doubles();
      for (int64_t i = 0; i < blocks[k] * 2; ++i) {
        ASSERT_EQ(got[static_cast<size_t>(i)], reduced(ReduceOp::kSum, off + i, DType::f32))
            << "all_reduce_coalesced tensor " << k << " element " << i;
      }
    }
    expect_ok(comm->barrier(), "barrier");
  });
}

// new_group through ncclCommSplit: the pair numbered against rank order (rank 1 is the group's
// rank 0), then a group of rank 0 alone; sums, send/recv and the parent after them.
TEST(NcclCommunicator, NewGroupsSplitTheCommunicator) {
  ZT_SKIP_WITHOUT_TWO_GPUS();
  const int port = free_tcp_port();
  run_ranks([&](int rank) {
    auto comm = create(rank_env(rank, port, 60s));
    ASSERT_NE(comm, nullptr);
    const Device dev = Device::cuda(rank);
    auto pair = comm->new_group(std::vector<int>{1, 0});
    ASSERT_TRUE(pair.is_ok()) << pair.status().message();
    ASSERT_NE(*pair, nullptr);
    EXPECT_EQ((*pair)->rank(), 1 - rank);
    EXPECT_EQ((*pair)->world_size(), 2);
    Tensor t = Tensor::from_doubles({static_cast<double>(rank + 1)}, {1}, DType::f32, dev);
    const Status sum = (*pair)->all_reduce(t, ReduceOp::kSum).wait();
    ASSERT_TRUE(sum.is_ok()) << sum.message();
    EXPECT_EQ(t.to_doubles()[0], 3.0);
    Tensor m = Tensor::from_doubles({static_cast<double>(rank * 10 + 5)}, {1}, DType::f32, dev);
    if (rank == 1) {
      ASSERT_TRUE((*pair)->send(m, 1).wait().is_ok());  // to rank 0 (the group's rank 1)
    } else {
      ASSERT_TRUE((*pair)->recv(m, 0).wait().is_ok());
      EXPECT_EQ(m.to_doubles()[0], 15.0);
    }
    auto alone = comm->new_group(std::vector<int>{0});
    ASSERT_TRUE(alone.is_ok()) << alone.status().message();
    EXPECT_EQ(*alone != nullptr, rank == 0);
    if (rank == 0) {
      Tensor one = Tensor::from_doubles({4.0}, {1}, DType::f32, dev);
      ASSERT_TRUE((*alone)->all_reduce(one, ReduceOp::kSum).wait().is_ok());
      EXPECT_EQ(one.to_doubles()[0], 4.0);
    }
    Tensor w = Tensor::from_doubles({1.0}, {1}, DType::f32, dev);
    ASSERT_TRUE(comm->all_reduce(w, ReduceOp::kSum).wait().is_ok());
    EXPECT_EQ(w.to_doubles()[0], 2.0);
  });
}

TEST(NcclCommunicator, RankThatSkipsACollectiveTimesOutTheOtherWithoutHanging) {
  ZT_SKIP_WITHOUT_TWO_GPUS();
  const int port = free_tcp_port();
  std::latch rank0_done(1);
  run_ranks([&](int rank) {
    auto comm = create(rank_env(rank, port, 3s));
    ASSERT_NE(comm, nullptr);
    if (rank == 1) {
      rank0_done.wait();  // alive, but never calls all_reduce
      return;
    }
    Tensor t = Tensor::from_doubles({1, 2, 3}, {3}, DType::f32, Device::cuda(0));
    auto start = Clock::now();
    Status st = comm->all_reduce(t, ReduceOp::kSum).wait();
    EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.message();
    EXPECT_NE(st.message().find("all_reduce on rank 0 of 2 failed"), std::string::npos)
        << st.message();
    EXPECT_LT(Clock::now() - start, 20s);
    Status again = comm->barrier().wait();
    EXPECT_NE(again.message().find("earlier failure"), std::string::npos) << again.message();
    rank0_done.count_down();
  });
}

}  // namespace
}  // namespace zt
