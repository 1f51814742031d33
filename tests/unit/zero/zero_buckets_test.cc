// Tests of gradient bucketing (src/zt/zero/grad_bucket.h, zero_reduce.cc): which units' gradients
// ZeroState reduces together. The oracle is DeepSpeed's rule written out plainly here: units in
// backward order, the bucket flushed before a unit when `elems + numel > reduce_bucket_size`, and
// at the end of backward. ZeroState runs a real gpt2-tiny backward on one CPU rank through a
// communicator that records every collective (and forwards it to the single-process stub); the
// multi-rank sums are checked by tests/dist/zero_equivalence.py.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "common/engine_runs.h"
#include "common/test_util.h"
#include "zt/comm/communicator.h"
#include "zt/nn/models/gpt2.h"
#include "zt/zero/grad_bucket.h"
#include "zt/zero/zero_state.h"

namespace zt::zero {
namespace {

// DeepSpeed's rule: the groups (as element counts) for units of `sizes` in backward order.
std::vector<std::vector<int64_t>> deepspeed_groups(const std::vector<int64_t>& sizes,
                                                   int64_t capacity) {
  std::vector<std::vector<int64_t>> groups;
  std::vector<int64_t> bucket;
  int64_t elems = 0;
  for (int64_t n : sizes) {
    if (elems + n > capacity && !bucket.empty()) {
      groups.push_back(bucket);
      bucket.clear();
      elems = 0;
    }
    bucket.push_back(n);
    elems += n;
  }
  if (!bucket.empty()) groups.push_back(bucket);
  return groups;
}

TEST(GradBucket, GroupsAsDeepSpeedFlushes) {
  const std::vector<int64_t> sizes = {3, 4, 10, 2, 2, 1, 7, 7};
  for (int64_t capacity : {1, 4, 5, 7, 8, 9, 14, 100}) {
    GradBucket bucket(capacity);
    std::vector<std::vector<int64_t>> got;
    auto flush = [&] {
      std::vector<int64_t> g;
      for (int u : bucket.take()) g.push_back(sizes[static_cast<size_t>(u)]);
      if (!g.empty()) got.push_back(g);
    };
    for (size_t u = 0; u < sizes.size(); ++u) {
      if (bucket.overflows_with(sizes[u])) flush();
      bucket.add(static_cast<int>(u), sizes[u]);
      if (bucket.full()) flush();
    }
    flush();
    EXPECT_EQ(got, deepspeed_groups(sizes, capacity)) << "capacity " << capacity;
  }
}

// A world-of-one communicator that records the element counts of every coalesced collective and
// forwards everything to the stub.
class RecordingComm final : public Communicator {
 public:
  struct Call {
    std::string op;
    std::vector<int64_t> elems;  // per tensor (reduce-scatter: the input, i.e. the full gradient)
  };
  std::vector<Call> calls;

  RecordingComm() {
    auto c = communicator_create(DistEnv{}, Device::cpu());
    ZT_ASSERT(c.is_ok(), "stub");
    inner_ = std::move(c).value();
  }
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  Device device() const override { return Device::cpu(); }
  std::string_view backend_name() const override { return "recording"; }
  CommHandle all_reduce(Tensor& t, ReduceOp op, std::optional<Stream> s) override {
    calls.push_back({"all_reduce", {t.numel()}});
    return inner_->all_reduce(t, op, s);
  }
  CommHandle reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op,
                            std::optional<Stream> s) override {
    calls.push_back({"reduce_scatter", {in.numel()}});
    return inner_->reduce_scatter(out, in, op, s);
  }
  CommHandle all_reduce_coalesced(std::span<Tensor> ts, ReduceOp op,
                                  std::optional<Stream> s) override {
    Call c{"all_reduce_coalesced", {}};
    for (const Tensor& t : ts) c.elems.push_back(t.numel());
    calls.push_back(c);
    return inner_->all_reduce_coalesced(ts, op, s);
  }
  CommHandle reduce_scatter_coalesced(std::span<Tensor> outs, std::span<const Tensor> ins,
                                      ReduceOp op, std::optional<Stream> s) override {
    Call c{"reduce_scatter_coalesced", {}};
    for (const Tensor& t : ins) c.elems.push_back(t.numel());
    calls.push_back(c);
    return inner_->reduce_scatter_coalesced(outs, ins, op, s);
  }
  CommHandle all_gather(Tensor& out, const Tensor& in, std::optional<Stream> s) override {
    return inner_->all_gather(out, in, s);
  }
  CommHandle broadcast(Tensor& t, int root, std::optional<Stream> s) override {
    return inner_->broadcast(t, root, s);
  }
  CommHandle send(const Tensor& t, int peer, std::optional<Stream> s) override {
    return inner_->send(t, peer, s);
  }
  CommHandle recv(Tensor& t, int peer, std::optional<Stream> s) override {
    return inner_->recv(t, peer, s);
  }
  CommHandle barrier(std::optional<Stream> s) override { return inner_->barrier(s); }

 private:
  std::unique_ptr<Communicator> inner_;
};

struct BackwardRun {
  std::vector<RecordingComm::Call> calls;
  std::vector<int64_t> backward_sizes;  // padded unit sizes, in backward order
  bool grads_released = false;          // every full gradient freed after the pass
};

// One forward and backward of gpt2-tiny through ZeroState, then finish_pass.
BackwardRun run_backward(int stage, int64_t capacity, CommOverlap overlap, bool boundary) {
  auto c = nn::gpt2_config_named("gpt2-tiny");
  ZT_ASSERT(c.is_ok(), "gpt2-tiny");
  nn::Gpt2 model(*c);
  RecordingComm comm;
  ZeroOptions zo;
  zo.optimizer_states = 0;
  zo.stage = stage;
  zo.comm = &comm;
  zo.reduce_bucket_elements = capacity;
  zo.overlap = overlap;
  ZeroState zero(model, zo, 7);
  BackwardRun run;
  for (size_t u = zero.units().size(); u-- > 0;)
    run.backward_sizes.push_back(zero.units()[u].padded);
  testing::CpuTrainBatch batch(*c, 2, 16);
  model.forward(batch.ctx, batch.tokens, &zero);
  EXPECT_TRUE(zero.finish_pass().is_ok());
  comm.calls.clear();  // stage 3 gathers in the forward: not what is checked
  zero.set_boundary(boundary);
  model.backward(batch.ctx, &zero);
  EXPECT_TRUE(zero.finish_pass().is_ok());
  for (auto& call : comm.calls) {
    if (call.op != "all_gather") run.calls.push_back(call);
  }
  run.grads_released = true;
  for (auto& u : zero.units()) run.grads_released &= !u.grad.defined();
  return run;
}

std::vector<std::vector<int64_t>> coalesced_groups(const BackwardRun& run, const std::string& op) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& c : run.calls) {
    EXPECT_EQ(c.op, op) << "every reduction is one coalesced collective";
    out.push_back(c.elems);
  }
  return out;
}

TEST(ZeroBuckets, EachStageReducesInDeepSpeedsBuckets) {
  // gpt2-tiny's units in backward order: head (small), 4 blocks, embedding. A capacity of 2.1
  // blocks makes the head share a bucket with the last block, then pairs of blocks, ...; one of
  // 0.5 blocks makes every block larger than the bucket, reduced alone.
  const BackwardRun probe = run_backward(2, int64_t{1} << 40, CommOverlap::kOff, true);
  const int64_t block = probe.backward_sizes[1];
  const int64_t shared_capacity = block * 21 / 10;
  for (int stage = 0; stage <= 3; ++stage) {
    const std::string op = stage == 0 ? "all_reduce_coalesced" : "reduce_scatter_coalesced";
    for (auto [capacity, overlap] :
         {std::pair{block / 2, CommOverlap::kOff}, std::pair{shared_capacity, CommOverlap::kOff},
          std::pair{shared_capacity, CommOverlap::kOn},
          std::pair{int64_t{1} << 40, CommOverlap::kOn}}) {
      BackwardRun run = run_backward(stage, capacity, overlap, true);
      auto want = deepspeed_groups(run.backward_sizes, capacity);
      EXPECT_EQ(coalesced_groups(run, op), want) << "stage " << stage << " capacity " << capacity
                                                 << " overlap " << (overlap == CommOverlap::kOn);
      // Stages 2-3 keep no full gradient once its bucket is reduced.
      if (stage >= 2) {
        EXPECT_TRUE(run.grads_released) << "stage " << stage;
      }
    }
  }
  // The middle capacities really make shared buckets and a unit alone past the capacity.
  auto shared = deepspeed_groups(probe.backward_sizes, shared_capacity);
  EXPECT_LT(shared.size(), probe.backward_sizes.size());
  EXPECT_EQ(deepspeed_groups(probe.backward_sizes, block / 2).size(), probe.backward_sizes.size());
}

TEST(ZeroBuckets, StagesZeroAndOneReduceOnlyAtTheBoundary) {
  for (int stage = 0; stage <= 3; ++stage) {
    BackwardRun run = run_backward(stage, 300000, CommOverlap::kOn, false);
    if (stage <= 1) {
      EXPECT_TRUE(run.calls.empty()) << "stage " << stage << " reduced off the boundary";
    } else {
      EXPECT_FALSE(run.calls.empty()) << "stage " << stage << " reduces every micro-step";
    }
  }
}

}  // namespace
}  // namespace zt::zero
