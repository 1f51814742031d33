// Process topologies for 3D parallelism, as DeepSpeed's deepspeed/runtime/pipe/topology.py lays
// them out: the ranks of a job form a grid with named axes ("pipe", "data", "model"), numbered
// row-major, so the LAST axis varies fastest. PipeModelDataParallelTopology orders its axes
// [pipe, data, model]: the ranks of one tensor-parallel (model) group are consecutive, so on
// nodes of 8 GPUs they share a node and its NVLink first; data-parallel replicas come next and
// pipeline stages, whose traffic is the smallest (one activation per micro-batch), are furthest
// apart. A checkpoint written under one topology names the same rank coordinates here.
//
// Pure arithmetic: no communicator. The engine builds its groups from the rank lists
// (axis_comm_lists) and a rank's view of them (PipeGrid).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "zt/core/status.h"

namespace zt::pipe {

// The axis names DeepSpeed uses; the topology accepts any names, these are the ones the
// pipeline engine reads.
inline constexpr std::string_view kAxisPipe = "pipe";
inline constexpr std::string_view kAxisData = "data";
inline constexpr std::string_view kAxisModel = "model";

// One axis fixed to one index: filter_match({{"pipe", 0}, {"data", 1}}).
struct AxisIndex {
  std::string_view axis;
  int index = 0;
};

class ProcessTopology {
 public:
  // Errors: an empty or repeated axis name, an axis of size below 1.
  static Result<ProcessTopology> create(std::vector<std::string> axes, std::vector<int> dims);

  const std::vector<std::string>& axes() const { return axes_; }
  const std::vector<int>& dims() const { return dims_; }
  int world_size() const { return world_size_; }
  bool has_axis(std::string_view axis) const { return axis_position(axis) >= 0; }
  // The size of `axis`; 0 when the topology has no such axis (as DeepSpeed's get_dim).
  int dim(std::string_view axis) const;

  // The rank at a full coordinate (one index per axis, in axis order), and back.
  int rank_of(const std::vector<int>& coord) const;
  int rank_of(std::initializer_list<AxisIndex> coord) const;  // every axis named once
  std::vector<int> coord_of(int rank) const;
  int coord_of(int rank, std::string_view axis) const;

  // Lists of ranks that differ only in `axis`, one per combination of the other axes (those
  // enumerated row-major), each ordered by the index along `axis`: the communicator groups
  // along that axis. Empty when the topology has no such axis.
  std::vector<std::vector<int>> axis_comm_lists(std::string_view axis) const;
  // Ranks whose coordinates match every given axis index, in rank order.
  std::vector<int> filter_match(std::initializer_list<AxisIndex> criteria) const;
  // Ranks whose index along `axis` is `index`, in rank order.
  std::vector<int> axis_list(std::string_view axis, int index) const;
  // "model_01": the axes not omitted, each as name + inner_sep + the index in two digits,
  // joined by outer_sep (DeepSpeed's get_rank_repr, used in checkpoint file names).
  std::string rank_repr(int rank,
                        const std::vector<std::string_view>& omit_axes = {kAxisData, kAxisPipe},
                        std::string_view inner_sep = "_", std::string_view outer_sep = "-") const;
  // "pipe=2 x data=2 x model=2".
  std::string describe() const;

  // Fails unless the grid's size is the job's world size.
  Status check_world_size(int world_size) const;

 private:
  ProcessTopology() = default;
  int axis_position(std::string_view axis) const;  // -1 when absent

  std::vector<std::string> axes_;
  std::vector<int> dims_;
  std::vector<int> strides_;  // row-major: the last axis has stride 1
  int world_size_ = 1;
};

// Axes [pipe, data] (DeepSpeed's PipeDataParallelTopology): data-parallel replicas of a stage
// are adjacent ranks.
Result<ProcessTopology> pipe_data_parallel_topology(int num_pp, int num_dp);
// Axes [pipe, data, model] (PipeModelDataParallelTopology(num_pp, num_mp, num_dp)).
Result<ProcessTopology> pipe_model_data_parallel_topology(int num_pp, int num_mp, int num_dp);

// The sizes a user chooses; data parallelism takes the ranks that are left.
struct ParallelSizes {
  int pipeline = 1;  // --pipeline-parallel-size
  int tensor = 1;    // --tensor-parallel-size
};
// The topology of `world_size` ranks for the chosen sizes: [pipe, data] when tensor == 1 (what
// DeepSpeed's PipelineModule(num_stages=...) builds), else [pipe, data, model]. Errors name the
// flag and list the sizes that would divide the ranks.
Result<ProcessTopology> topology_for_world(int world_size, ParallelSizes sizes);
// DeepSpeed's grid when no topology is given: the prime factors of the world size, smallest
// first, go alternately to pipe and data (8 ranks: pipe 4, data 2; 12: pipe 6, data 2).
Result<ProcessTopology> default_pipe_data_topology(int world_size);

// One rank's place in a pipe/data(/model) topology and the rank lists of its groups
// (DeepSpeed's PipelineParallelGrid without the process groups).
struct PipeGrid {
  int rank = 0;
  int stage_id = 0;          // index along "pipe"
  int data_parallel_id = 0;  // index along "data"
  int slice_rank = 0;        // index along "model" (0 without that axis)
  int pipe_parallel_size = 1, data_parallel_size = 1, slice_parallel_size = 1;
  std::vector<int> dp_group;     // same stage and model index: gradients are reduced here
  std::vector<int> pp_group;     // same data and model index: the stages of this pipeline
  std::vector<int> slice_group;  // same stage and data index: tensor-parallel peers ({rank} alone
                                 // without "model")
  // Every rank with this rank's data index (pipe x model), sorted: DeepSpeed's "model
  // parallel group", over which overflow and the gradient norm are reduced.
  std::vector<int> model_parallel_group;
  int prev_stage_rank = -1;  // the rank of stage_id - 1 in this pipeline, -1 on the first stage
  int next_stage_rank = -1;  // the rank of stage_id + 1, -1 on the last stage
  bool is_first_stage() const { return stage_id == 0; }
  bool is_last_stage() const { return stage_id == pipe_parallel_size - 1; }
};
// Errors: a topology without "pipe" or "data" axes, a rank outside it.
Result<PipeGrid> pipe_grid(const ProcessTopology& topology, int rank);
// The rank of `stage` in the same pipeline as `rank` (same data and model index).
int stage_to_global(const ProcessTopology& topology, int rank, int stage);

}  // namespace zt::pipe
