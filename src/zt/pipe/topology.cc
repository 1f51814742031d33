// Process topologies (topology.h): row-major rank numbering over named axes.
#include "zt/pipe/topology.h"

#include <algorithm>

#include <fmt/format.h>

#include "zt/core/assert.h"

namespace zt::pipe {
namespace {

// No job has a billion ranks; the bound keeps every product inside int.
constexpr int64_t kMaxRanks = int64_t{1} << 30;

// "1, 2, 4, 8": the sizes that divide n, for error messages.
std::string divisors_of(int n) {
  std::string out;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) out += fmt::format("{}{}", out.empty() ? "" : ", ", d);
  }
  return out;
}

}  // namespace

Result<ProcessTopology> ProcessTopology::create(std::vector<std::string> axes,
                                                std::vector<int> dims) {
  if (axes.empty() || axes.size() != dims.size()) {
    return invalid_argument("a process topology needs one size per axis ({} axes, {} sizes)",
                            axes.size(), dims.size());
  }
  ProcessTopology t;
  int64_t world = 1;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i].empty()) return invalid_argument("process topology axis {} has no name", i);
    for (size_t j = 0; j < i; ++j) {
      if (axes[j] == axes[i])
        return invalid_argument("process topology axis '{}' is named twice", axes[i]);
    }
    if (dims[i] < 1) {
      return invalid_argument(
          "process topology axis '{}' has size {}; every axis needs at least 1 rank", axes[i],
          dims[i]);
    }
    world *= dims[i];
    if (world > kMaxRanks)
      return invalid_argument("process topology has more than {} ranks", kMaxRanks);
  }
  t.axes_ = std::move(axes);
  t.dims_ = std::move(dims);
  t.world_size_ = static_cast<int>(world);
  t.strides_.assign(t.dims_.size(), 1);
  for (size_t i = t.dims_.size() - 1; i > 0; --i) t.strides_[i - 1] = t.strides_[i] * t.dims_[i];
  return t;
}

int ProcessTopology::axis_position(std::string_view axis) const {
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (axes_[i] == axis) return static_cast<int>(i);
  }
  return -1;
}

int ProcessTopology::dim(std::string_view axis) const {
  const int a = axis_position(axis);
  return a < 0 ? 0 : dims_[static_cast<size_t>(a)];
}

int ProcessTopology::rank_of(const std::vector<int>& coord) const {
  ZT_ASSERT(coord.size() == dims_.size(), "coordinate of {} axes for a topology of {}",
            coord.size(), dims_.size());
  int rank = 0;
  for (size_t i = 0; i < coord.size(); ++i) {
    ZT_ASSERT(coord[i] >= 0 && coord[i] < dims_[i], "index {} outside axis '{}' of size {}",
              coord[i], axes_[i], dims_[i]);
    rank += coord[i] * strides_[i];
  }
  return rank;
}

int ProcessTopology::rank_of(std::initializer_list<AxisIndex> coord) const {
  // Every axis exactly once: a partial coordinate is a slice (filter_match), as in DeepSpeed.
  ZT_ASSERT(coord.size() == axes_.size(), "rank_of needs every axis; use filter_match for slices");
  std::vector<int> full(axes_.size(), -1);
  for (const AxisIndex& c : coord) {
    const int a = axis_position(c.axis);
    ZT_ASSERT(a >= 0 && full[static_cast<size_t>(a)] < 0, "axis '{}' unknown or named twice",
              c.axis);
    full[static_cast<size_t>(a)] = c.index;
  }
  return rank_of(full);
}

std::vector<int> ProcessTopology::coord_of(int rank) const {
  ZT_ASSERT(rank >= 0 && rank < world_size_, "rank {} outside a topology of {}", rank, world_size_);
  std::vector<int> coord(dims_.size());
  for (size_t i = 0; i < dims_.size(); ++i) coord[i] = (rank / strides_[i]) % dims_[i];
  return coord;
}

int ProcessTopology::coord_of(int rank, std::string_view axis) const {
  const int a = axis_position(axis);
  ZT_ASSERT(a >= 0, "topology {} has no axis '{}'", describe(), axis);
  return coord_of(rank)[static_cast<size_t>(a)];
}

std::vector<std::vector<int>> ProcessTopology::axis_comm_lists(std::string_view axis) const {
  const int a = axis_position(axis);
  if (a < 0) return {};
  const auto ua = static_cast<size_t>(a);
  // The ranks at index 0 along `axis`, in rank order, enumerate the other axes row-major.
  std::vector<std::vector<int>> lists;
  for (int r = 0; r < world_size_; ++r) {
    if ((r / strides_[ua]) % dims_[ua] != 0) continue;
    std::vector<int> group(static_cast<size_t>(dims_[ua]));
    for (int i = 0; i < dims_[ua]; ++i) group[static_cast<size_t>(i)] = r + i * strides_[ua];
    lists.push_back(std::move(group));
  }
  return lists;
}

std::vector<int> ProcessTopology::filter_match(std::initializer_list<AxisIndex> criteria) const {
  std::vector<std::pair<size_t, int>> want;
  for (const AxisIndex& c : criteria) {
    const int a = axis_position(c.axis);
    ZT_ASSERT(a >= 0, "topology {} has no axis '{}'", describe(), c.axis);
    want.emplace_back(static_cast<size_t>(a), c.index);
  }
  std::vector<int> ranks;
  for (int r = 0; r < world_size_; ++r) {
    const std::vector<int> coord = coord_of(r);
    if (std::all_of(want.begin(), want.end(),
                    [&](const auto& w) { return coord[w.first] == w.second; })) {
      ranks.push_back(r);
    }
  }
  return ranks;
}

std::vector<int> ProcessTopology::axis_list(std::string_view axis, int index) const {
  const int a = axis_position(axis);
  ZT_ASSERT(a >= 0, "topology {} has no axis '{}'", describe(), axis);
  std::vector<int> ranks;
  for (int r = 0; r < world_size_; ++r) {
    if (coord_of(r)[static_cast<size_t>(a)] == index) ranks.push_back(r);
  }
  return ranks;
}

std::string ProcessTopology::rank_repr(int rank, const std::vector<std::string_view>& omit_axes,
                                       std::string_view inner_sep,
                                       std::string_view outer_sep) const {
  const std::vector<int> coord = coord_of(rank);
  std::string out;
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (std::find(omit_axes.begin(), omit_axes.end(), axes_[i]) != omit_axes.end()) continue;
    if (!out.empty()) out += outer_sep;
    out += fmt::format("{}{}{:02d}", axes_[i], inner_sep, coord[i]);
  }
  return out;
}

std::string ProcessTopology::describe() const {
  std::string out;
  for (size_t i = 0; i < axes_.size(); ++i) {
    out += fmt::format("{}{}={}", i ? " x " : "", axes_[i], dims_[i]);
  }
  return out;
}

Status ProcessTopology::check_world_size(int world_size) const {
  if (world_size == world_size_) return Status::ok();
  return invalid_argument(
      "the process topology {} has {} ranks but the job has {}; make the product of the "
      "parallel sizes equal the number of ranks",
      describe(), world_size_, world_size);
}

Result<ProcessTopology> pipe_data_parallel_topology(int num_pp, int num_dp) {
  return ProcessTopology::create({std::string(kAxisPipe), std::string(kAxisData)},
                                 {num_pp, num_dp});
}

Result<ProcessTopology> pipe_model_data_parallel_topology(int num_pp, int num_mp, int num_dp) {
  return ProcessTopology::create(
      {std::string(kAxisPipe), std::string(kAxisData), std::string(kAxisModel)},
      {num_pp, num_dp, num_mp});
}

Result<ProcessTopology> topology_for_world(int world_size, ParallelSizes sizes) {
  if (world_size < 1)
    return invalid_argument("the job has {} ranks; it needs at least 1", world_size);
  if (sizes.pipeline < 1) {
    return invalid_argument("--pipeline-parallel-size must be at least 1 (got {})", sizes.pipeline);
  }
  if (sizes.tensor < 1) {
    return invalid_argument("--tensor-parallel-size must be at least 1 (got {})", sizes.tensor);
  }
  if (world_size % sizes.pipeline != 0) {
    return invalid_argument(
        "--pipeline-parallel-size {} does not divide the {} ranks; use one of {}", sizes.pipeline,
        world_size, divisors_of(world_size));
  }
  if (world_size % sizes.tensor != 0) {
    return invalid_argument("--tensor-parallel-size {} does not divide the {} ranks; use one of {}",
                            sizes.tensor, world_size, divisors_of(world_size));
  }
  const int64_t both = int64_t{sizes.pipeline} * sizes.tensor;
  if (world_size % both != 0) {
    return invalid_argument(
        "--pipeline-parallel-size {} x --tensor-parallel-size {} = {} does not divide the {} "
        "ranks; with "
        "pipeline size {} the tensor size must be one of {}",
        sizes.pipeline, sizes.tensor, both, world_size, sizes.pipeline,
        divisors_of(world_size / sizes.pipeline));
  }
  const int dp = static_cast<int>(world_size / both);
  if (sizes.tensor == 1) return pipe_data_parallel_topology(sizes.pipeline, dp);
  return pipe_model_data_parallel_topology(sizes.pipeline, sizes.tensor, dp);
}

Result<ProcessTopology> default_pipe_data_topology(int world_size) {
  if (world_size < 1)
    return invalid_argument("the job has {} ranks; it needs at least 1", world_size);
  int pp = 1, dp = 1, n = world_size, index = 0;
  for (int p = 2; n > 1;) {
    if (n % p != 0) {
      ++p;
      continue;
    }
    (index++ % 2 == 0 ? pp : dp) *= p;
    n /= p;
  }
  return pipe_data_parallel_topology(pp, dp);
}

int stage_to_global(const ProcessTopology& topology, int rank, int stage) {
  std::vector<int> coord = topology.coord_of(rank);
  for (size_t i = 0; i < topology.axes().size(); ++i) {
    if (topology.axes()[i] == kAxisPipe) coord[i] = stage;
  }
  return topology.rank_of(coord);
}

Result<PipeGrid> pipe_grid(const ProcessTopology& topology, int rank) {
  if (!topology.has_axis(kAxisPipe) || !topology.has_axis(kAxisData)) {
    return invalid_argument("a pipeline needs a topology with '{}' and '{}' axes; {} has not both",
                            kAxisPipe, kAxisData, topology.describe());
  }
  if (rank < 0 || rank >= topology.world_size()) {
    return invalid_argument("rank {} is outside the process topology {} ({} ranks)", rank,
                            topology.describe(), topology.world_size());
  }
  PipeGrid g;
  g.rank = rank;
  g.stage_id = topology.coord_of(rank, kAxisPipe);
  g.data_parallel_id = topology.coord_of(rank, kAxisData);
  g.pipe_parallel_size = topology.dim(kAxisPipe);
  g.data_parallel_size = topology.dim(kAxisData);
  g.slice_parallel_size = std::max(topology.dim(kAxisModel), 1);
  g.slice_rank = topology.has_axis(kAxisModel) ? topology.coord_of(rank, kAxisModel) : 0;
  auto containing = [&](std::string_view axis) {
    for (std::vector<int>& list : topology.axis_comm_lists(axis)) {
      if (std::find(list.begin(), list.end(), rank) != list.end()) return list;
    }
    return std::vector<int>{rank};
  };
  g.dp_group = containing(kAxisData);
  g.pp_group = containing(kAxisPipe);
  g.slice_group = containing(kAxisModel);
  g.model_parallel_group = topology.axis_list(kAxisData, g.data_parallel_id);
  if (!g.is_first_stage()) g.prev_stage_rank = stage_to_global(topology, rank, g.stage_id - 1);
  if (!g.is_last_stage()) g.next_stage_rank = stage_to_global(topology, rank, g.stage_id + 1);
  return g;
}

}  // namespace zt::pipe
