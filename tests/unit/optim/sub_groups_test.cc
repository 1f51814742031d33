// Stepping the optimizer in sub-groups (zero_optimization.sub_group_size, stage 3): the split of
// chunks into groups (every element exactly once, in order, no group over the limit, Lamb's
// tensors whole), and the engine: a stage-3 run with a small sub_group_size makes one optimizer
// call per group (ceil(elements / sub_group_size) of them) and trains exactly as the run with the
// default (Adam is elementwise, so the split cannot change a value: the oracle is that run).
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "common/engine_runs.h"
#include "zt/optim/optimizer.h"

namespace zt {
namespace {

using kernels::OptimChunk;

// Chunks over one buffer whose element i holds i: the groups' parameter pointers show which
// elements each covers.
struct Buffers {
  std::vector<float> p, g, m;
  std::vector<OptimChunk> chunks;
  explicit Buffers(const std::vector<int64_t>& sizes) {
    const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
    p.resize(total);
    g.resize(total);
    m.resize(total);
    std::iota(p.begin(), p.end(), 0.0f);
    int64_t at = 0;
    for (int64_t n : sizes) {
      chunks.push_back(
          {.param = p.data() + at, .grad = g.data() + at, .state1 = m.data() + at, .n = n});
      at += n;
    }
  }
};

TEST(SubGroups, EveryElementOnceInOrderWithinTheLimit) {
  Buffers b({10, 3, 25, 1, 7});
  for (int64_t limit : {1, 4, 7, 10, 13, 46, 1000}) {
    SCOPED_TRACE(limit);
    auto groups = optim::split_into_groups(b.chunks, limit, optim::Split::kAnywhere);
    float next = 0;
    for (const auto& grp : groups) {
      int64_t n = 0;
      for (const OptimChunk& c : grp) {
        EXPECT_EQ(*c.param, next);  // contiguous, in order
        EXPECT_EQ(c.grad - b.g.data(), c.param - b.p.data());
        EXPECT_EQ(c.state1 - b.m.data(), c.param - b.p.data());
        next += static_cast<float>(c.n);
        n += c.n;
      }
      EXPECT_LE(n, limit);
      EXPECT_GT(n, 0);
    }
    EXPECT_EQ(next, 46.0f);
    EXPECT_EQ(static_cast<int64_t>(groups.size()), (46 + limit - 1) / limit);
  }
}

TEST(SubGroups, WholeChunksStayWhole) {
  Buffers b({10, 3, 25, 1, 7});
  auto groups = optim::split_into_groups(b.chunks, 12, optim::Split::kWholeChunks);
  // 10+... 3 would make 13 > 12: {10}, {3}, {25} alone (larger than the limit), {1, 7}.
  ASSERT_EQ(groups.size(), 4u);
  EXPECT_EQ(groups[0].size(), 1u);
  EXPECT_EQ(groups[0][0].n, 10);
  EXPECT_EQ(groups[1][0].n, 3);
  EXPECT_EQ(groups[2][0].n, 25);
  ASSERT_EQ(groups[3].size(), 2u);
  EXPECT_EQ(groups[3][0].n + groups[3][1].n, 8);
}

std::string stage3_json(const std::string& sub_group) {
  return R"({"train_batch_size": 2, "gradient_clipping": 0.5,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.1}},
      "zero_optimization": {"stage": 3)" +
         sub_group + "}}";
}

TEST(SubGroups, Stage3StepsInSubGroupsAndTrainsTheSame) {
  const testing::EngineRun whole = testing::train_tiny_gpt2(stage3_json(""), 3, 9, 10);
  const testing::EngineRun split =
      testing::train_tiny_gpt2(stage3_json(R"(, "sub_group_size": 1000)"), 3, 9, 10);
  ASSERT_EQ(whole.losses.size(), 3u);
  const int64_t expected = (split.own_master_elements + 999) / 1000;
  EXPECT_GT(expected, 3);  // the tiny model has several thousand elements
  for (int64_t g : whole.step_groups) EXPECT_EQ(g, 1);
  for (int64_t g : split.step_groups) EXPECT_EQ(g, expected);
  EXPECT_EQ(split.losses, whole.losses);
  EXPECT_EQ(split.master, whole.master);
}

}  // namespace
}  // namespace zt
