// Stage-3 prefetching (zero/zero_state.h): which units ZeroState all-gathers ahead of their turn.
// The oracle is DeepSpeed's loop in PartitionedParameterCoordinator.fetch_sub_module, written out
// here: `while queue and numel_prefetching < min(max_live - live, prefetch_bucket_size)`, so the
// next candidate is fetched whenever both bounds leave room, whatever its size. ZeroState runs a
// real gpt2-tiny forward and backward on one CPU rank with every unit sharded.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "common/engine_runs.h"
#include "common/test_util.h"
#include "zt/comm/communicator.h"
#include "zt/nn/models/gpt2.h"
#include "zt/zero/zero_state.h"

namespace zt::zero {
namespace {

// DeepSpeed's loop for one prefetch point: how many elements it would start fetching when the
// queue holds one candidate of `candidate` elements.
int64_t deepspeed_prefetch(int64_t bucket, int64_t max_live, int64_t live, int64_t candidate) {
  if (bucket <= 0) return 0;  // "if self.__prefetch_bucket_sz > 0"
  const int64_t max_params = std::min(max_live - live, bucket);
  int64_t numel = 0;
  bool queued = true;
  while (queued && numel < max_params) {
    numel += candidate;
    queued = false;
  }
  return numel;
}

TEST(Prefetch, RuleIsDeepSpeedsLoop) {
  const int64_t sizes[] = {1, 10, 1000, 1 << 20};
  for (int64_t bucket : {int64_t{0}, int64_t{1}, int64_t{50}, int64_t{5000}}) {
    for (int64_t max_live : {int64_t{1}, int64_t{100}, int64_t{1} << 30}) {
      for (int64_t live : {int64_t{0}, int64_t{1}, int64_t{99}, int64_t{100}, int64_t{5000}}) {
        for (int64_t cand : sizes) {
          EXPECT_EQ(should_prefetch(bucket, max_live, live),
                    deepspeed_prefetch(bucket, max_live, live, cand) > 0)
              << "bucket " << bucket << " max_live " << max_live << " live " << live
              << " candidate " << cand;
        }
      }
    }
  }
}

// Prefetches in one forward and one backward of gpt2-tiny at stage 3, every unit sharded.
struct Counts {
  int64_t forward = 0, backward = 0;
  int units = 0;
  int64_t largest = 0;  // padded elements of the largest unit
};

Counts run(int64_t bucket, int64_t max_live) {
  auto c = nn::gpt2_config_named("gpt2-tiny");
  ZT_ASSERT(c.is_ok(), "gpt2-tiny");
  nn::Gpt2 model(*c);
  auto comm = communicator_create(DistEnv{}, Device::cpu());
  ZT_ASSERT(comm.is_ok(), "stub communicator");
  ZeroOptions zo;
  zo.optimizer_states = 0;
  zo.stage = 3;
  zo.comm = comm->get();
  zo.persistence_threshold = 0;
  zo.prefetch_elements = bucket;
  zo.max_live_elements = max_live;
  ZeroState zero(model, zo, 7);
  Counts n;
  n.units = static_cast<int>(zero.units().size());
  for (const auto& u : zero.units()) n.largest = std::max(n.largest, u.padded);
  testing::CpuTrainBatch batch(*c, 2, 16);
  model.forward(batch.ctx, batch.tokens, &zero);
  EXPECT_TRUE(zero.finish_pass().is_ok());
  n.forward = zero.prefetches_issued();
  model.backward(batch.ctx, &zero);
  EXPECT_TRUE(zero.finish_pass().is_ok());
  EXPECT_TRUE(zero.hook_status().is_ok());
  n.backward = zero.prefetches_issued() - n.forward;
  return n;
}

TEST(Prefetch, NextUnitGoesAheadWheneverBothBoundsLeaveRoom) {
  constexpr int64_t kBig = std::numeric_limits<int64_t>::max() / 4;
  const Counts all = run(kBig, kBig);
  ASSERT_GE(all.units, 3);
  // Forward prefetches units 1..n-1 while its predecessor computes, backward units n-2..0.
  EXPECT_EQ(all.forward, all.units - 1);
  EXPECT_EQ(all.backward, all.units - 1);
  // A bucket smaller than every unit still prefetches (DeepSpeed fetches the first candidate).
  const Counts tiny_bucket = run(1, kBig);
  EXPECT_EQ(tiny_bucket.forward, all.units - 1);
  EXPECT_EQ(tiny_bucket.backward, all.units - 1);
  // 0 turns it off; so does a live bound the unit being computed already fills.
  for (const Counts& none : {run(0, kBig), run(kBig, 1)}) {
    EXPECT_EQ(none.forward, 0);
    EXPECT_EQ(none.backward, 0);
  }
}

}  // namespace
}  // namespace zt::zero
