// pipe/topology.h against DeepSpeed's documented layouts (the examples in the docstrings of
// deepspeed/runtime/pipe/topology.py) and against a brute-force enumeration of the grid in
// nested loops, the last axis innermost.
#include "zt/pipe/topology.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace zt::pipe {
namespace {

using Lists = std::vector<std::vector<int>>;

ProcessTopology make(std::vector<std::string> axes, std::vector<int> dims) {
  auto t = ProcessTopology::create(std::move(axes), std::move(dims));
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  return std::move(t).value();
}

TEST(PipeTopology, DeepSpeedDocstringExamples) {
  // ProcessTopology(axes=['x', 'y'], dims=[2, 3]).
  const ProcessTopology xy = make({"x", "y"}, {2, 3});
  EXPECT_EQ(xy.rank_of({{"x", 0}, {"y", 1}}), 1);
  EXPECT_EQ(xy.dim("y"), 3);
  EXPECT_EQ(xy.dim("z"), 0);
  EXPECT_EQ(xy.coord_of(1), (std::vector<int>{0, 1}));
  EXPECT_EQ(xy.axis_list("x", 0), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(xy.axis_list("y", 0), (std::vector<int>{0, 3}));
  EXPECT_TRUE(xy.axis_comm_lists("z").empty());

  // Topo(axes=['pipe', 'data', 'model'], dims=[2, 2, 2]).
  const ProcessTopology pdm = make({"pipe", "data", "model"}, {2, 2, 2});
  EXPECT_EQ(pdm.axis_comm_lists("pipe"), (Lists{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(pdm.filter_match({{"pipe", 0}, {"data", 1}}), (std::vector<int>{2, 3}));

  // Topo(axes=['a', 'b'], dims=[2, 2]).get_rank_repr(rank=3).
  const ProcessTopology ab = make({"a", "b"}, {2, 2});
  EXPECT_EQ(ab.rank_repr(3), "a_01-b_01");
  EXPECT_EQ(ab.rank_repr(3, {"a"}), "b_01");
}

TEST(PipeTopology, PipeTwoDataTwo) {
  // [pipe, data]: the two replicas of a stage are neighbours; a pipeline strides over them.
  auto t = topology_for_world(4, {.pipeline = 2});
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ(t->axes(), (std::vector<std::string>{"pipe", "data"}));
  EXPECT_EQ(t->dims(), (std::vector<int>{2, 2}));
  EXPECT_EQ(t->axis_comm_lists("data"), (Lists{{0, 1}, {2, 3}}));
  EXPECT_EQ(t->axis_comm_lists("pipe"), (Lists{{0, 2}, {1, 3}}));
  EXPECT_EQ(t->filter_match({{"pipe", 1}}), (std::vector<int>{2, 3}));
  EXPECT_EQ(t->coord_of(3), (std::vector<int>{1, 1}));
  EXPECT_EQ(t->rank_repr(3), "");  // DeepSpeed omits data and pipe from file names
}

TEST(PipeTopology, PipeTwoDataTwoModelTwo) {
  // [pipe, data, model]: rank = 4 * pipe + 2 * data + model; tensor groups are adjacent ranks.
  auto t = topology_for_world(8, {.pipeline = 2, .tensor = 2});
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ(t->axes(), (std::vector<std::string>{"pipe", "data", "model"}));
  for (int p = 0; p < 2; ++p) {
    for (int d = 0; d < 2; ++d) {
      for (int m = 0; m < 2; ++m) {
        EXPECT_EQ(t->rank_of({{"pipe", p}, {"data", d}, {"model", m}}), 4 * p + 2 * d + m);
        EXPECT_EQ(t->rank_of({{"model", m}, {"pipe", p}, {"data", d}}), 4 * p + 2 * d + m);
      }
    }
  }
  EXPECT_EQ(t->axis_comm_lists("model"), (Lists{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(t->axis_comm_lists("data"), (Lists{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(t->axis_comm_lists("pipe"), (Lists{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(t->rank_repr(5), "model_01");
  EXPECT_EQ(t->rank_repr(5, {}), "pipe_01-data_00-model_01");

  // Rank 5 is stage 1, replica 0, tensor slice 1.
  auto g = pipe_grid(*t, 5);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  EXPECT_EQ(g->stage_id, 1);
  EXPECT_EQ(g->data_parallel_id, 0);
  EXPECT_EQ(g->slice_rank, 1);
  EXPECT_EQ(g->dp_group, (std::vector<int>{5, 7}));
  EXPECT_EQ(g->pp_group, (std::vector<int>{1, 5}));
  EXPECT_EQ(g->slice_group, (std::vector<int>{4, 5}));
  EXPECT_EQ(g->model_parallel_group, (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(g->prev_stage_rank, 1);
  EXPECT_EQ(g->next_stage_rank, -1);
  EXPECT_TRUE(g->is_last_stage());
  EXPECT_FALSE(g->is_first_stage());
}

TEST(PipeTopology, GridWithoutModelAxisHasSingletonSlices) {
  auto t = pipe_data_parallel_topology(3, 2);
  ASSERT_TRUE(t.is_ok());
  auto g = pipe_grid(*t, 2);  // stage 1, replica 0
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(g->stage_id, 1);
  EXPECT_EQ(g->slice_group, (std::vector<int>{2}));
  EXPECT_EQ(g->slice_parallel_size, 1);
  EXPECT_EQ(g->prev_stage_rank, 0);
  EXPECT_EQ(g->next_stage_rank, 4);
  EXPECT_EQ(g->pp_group, (std::vector<int>{0, 2, 4}));
  EXPECT_FALSE(pipe_grid(*t, 6).is_ok());
  EXPECT_FALSE(pipe_grid(make({"x", "y"}, {2, 2}), 0).is_ok());
}

TEST(PipeTopology, MatchesNestedLoopEnumeration) {
  // Uneven sizes: pipe 3, data 2, model 4 (24 ranks). The oracle counts ranks in nested loops.
  auto t = pipe_model_data_parallel_topology(/*num_pp=*/3, /*num_mp=*/4, /*num_dp=*/2);
  ASSERT_TRUE(t.is_ok());
  ASSERT_EQ(t->world_size(), 24);
  std::map<std::vector<int>, int> rank_at;
  int next = 0;
  for (int p = 0; p < 3; ++p) {
    for (int d = 0; d < 2; ++d) {
      for (int m = 0; m < 4; ++m) rank_at[{p, d, m}] = next++;
    }
  }
  for (const auto& [coord, rank] : rank_at) {
    EXPECT_EQ(t->rank_of(coord), rank);
    EXPECT_EQ(t->coord_of(rank), coord);
    EXPECT_EQ(t->coord_of(rank, "model"), coord[2]);
  }
  // Groups along each axis: ranks equal in the other two coordinates, ordered along the axis,
  // groups ordered by the other coordinates row-major.
  for (int axis = 0; axis < 3; ++axis) {
    Lists expected;
    for (const auto& [coord, rank] : rank_at) {
      if (coord[static_cast<size_t>(axis)] != 0) continue;  // std::map iterates row-major
      std::vector<int> group;
      for (int i = 0; i < t->dims()[static_cast<size_t>(axis)]; ++i) {
        std::vector<int> c = coord;
        c[static_cast<size_t>(axis)] = i;
        group.push_back(rank_at[c]);
      }
      expected.push_back(group);
    }
    EXPECT_EQ(t->axis_comm_lists(t->axes()[static_cast<size_t>(axis)]), expected) << axis;
  }
  std::vector<int> stage2_replica1;
  for (const auto& [coord, rank] : rank_at) {
    if (coord[0] == 2 && coord[1] == 1) stage2_replica1.push_back(rank);
  }
  EXPECT_EQ(t->filter_match({{"pipe", 2}, {"data", 1}}), stage2_replica1);
  for (int r = 0; r < 24; ++r) {
    for (int s = 0; s < 3; ++s) {
      std::vector<int> c = t->coord_of(r);
      c[0] = s;
      EXPECT_EQ(stage_to_global(*t, r, s), rank_at[c]);
    }
  }
}

TEST(PipeTopology, SizesThatDoNotDivideTheRanksAreRefused) {
  auto bad_pipe = topology_for_world(8, {.pipeline = 3});
  ASSERT_FALSE(bad_pipe.is_ok());
  EXPECT_NE(
      bad_pipe.status().message().find("--pipeline-parallel-size 3 does not divide the 8 ranks"),
      std::string::npos)
      << bad_pipe.status().message();
  EXPECT_NE(bad_pipe.status().message().find("1, 2, 4, 8"), std::string::npos);

  auto bad_tensor = topology_for_world(8, {.pipeline = 2, .tensor = 3});
  ASSERT_FALSE(bad_tensor.is_ok());
  EXPECT_NE(bad_tensor.status().message().find("--tensor-parallel-size 3"), std::string::npos);

  // Each divides 4 ranks, their product does not.
  auto bad_product = topology_for_world(4, {.pipeline = 2, .tensor = 4});
  ASSERT_FALSE(bad_product.is_ok());
  EXPECT_NE(bad_product.status().message().find("= 8 does not divide the 4 ranks"),
            std::string::npos)
      << bad_product.status().message();

  EXPECT_FALSE(topology_for_world(8, {.pipeline = 0}).is_ok());
  EXPECT_FALSE(topology_for_world(0, {}).is_ok());

  const ProcessTopology t = make({"pipe", "data"}, {2, 2});
  EXPECT_TRUE(t.check_world_size(4).is_ok());
  const Status s = t.check_world_size(8);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("pipe=2 x data=2 has 4 ranks but the job has 8"), std::string::npos)
      << s.message();

  EXPECT_FALSE(ProcessTopology::create({"pipe", "pipe"}, {2, 2}).is_ok());
  EXPECT_FALSE(ProcessTopology::create({"pipe", "data"}, {2, 0}).is_ok());
  EXPECT_FALSE(ProcessTopology::create({"pipe"}, {2, 2}).is_ok());
  EXPECT_FALSE(ProcessTopology::create({""}, {2}).is_ok());
}

TEST(PipeTopology, DefaultGridAlternatesPrimeFactors) {
  // DeepSpeed's PipelineParallelGrid without a topology: primes of the world size, smallest
  // first, alternately to pipe and data.
  struct Case {
    int world, pipe, data;
  };
  for (const Case& c : {Case{1, 1, 1}, Case{2, 2, 1}, Case{4, 2, 2}, Case{7, 7, 1}, Case{8, 4, 2},
                        Case{12, 6, 2}, Case{36, 6, 6}, Case{30, 10, 3}}) {
    auto t = default_pipe_data_topology(c.world);
    ASSERT_TRUE(t.is_ok());
    EXPECT_EQ(t->dim("pipe"), c.pipe) << c.world;
    EXPECT_EQ(t->dim("data"), c.data) << c.world;
  }
}

}  // namespace
}  // namespace zt::pipe
