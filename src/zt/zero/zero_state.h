// The unit-flat parameter store and the ZeRO stages (DESIGN.md "Flat, sharded parameters").
// Every unit's parameters live in one flat buffer padded to a multiple of world_size * 64
// elements; rank r owns chunk r (shard_offset = r * shard) of every unit. One layout serves every
// stage; what each rank keeps differs:
//
//   stage 0  full compute copy, full gradients (all-reduced at the accumulation boundary),
//            full master weights and optimizer state.
//   stage 1  + master weights and optimizer state only for the own chunk; full gradients
//            accumulate locally and are reduce-scattered at the boundary; after the step the
//            updated chunks are all-gathered into the compute copy.
//   stage 2  + gradients reduce-scattered as backward finishes the units, every micro-step,
//            accumulated into the own chunk; a unit's full gradient buffer lives from its
//            backward until its bucket is reduced.
//   stage 3  + the compute copy is sharded at rest: a unit is all-gathered just before its
//            forward and its backward (the next unit prefetched), and released after, unless it
//            is smaller than stage3_param_persistence_threshold.
//
// ZeroState implements nn::UnitHooks: the model calls it around every unit. Gradient reductions
// are coalesced in buckets of reduce_bucket_size elements (grad_bucket.h; one collective per
// bucket, zero_reduce.cc). Collectives run on the compute stream (NCCL, overlap_comm off: ordered
// with the kernels), on a communication stream (NCCL, overlap_comm on: comm_lane.h), or on Gloo's
// worker thread (CPU); with overlap_comm, up to two buckets stay in flight while backward goes on.
// Their handles are waited once per pass (finish_pass), where a timeout or a dead peer surfaces.
//
// ZeRO-Offload (offload_optimizer, stages 1-3): the master weights and optimizer state of the own
// chunks live in host memory instead (OptimizerPlacement), and OptimizerOffload
// (zero/optimizer_offload.h) steps them there; the compute copy and gradients stay on the device.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <span>
#include <vector>

#include "zt/checkpoint/flat_layout.h"
#include "zt/comm/communicator.h"
#include "zt/core/aio.h"
#include "zt/core/tensor.h"
#include "zt/nn/model.h"
#include "zt/optim/optimizer.h"
#include "zt/zero/comm_lane.h"
#include "zt/zero/grad_bucket.h"

namespace zt::zero {

// The layout itself (padding, chunks) is checkpoint/flat_layout.h, shared with checkpoints.
constexpr int64_t kShardAlignElems = ckpt::kShardAlignElems;

class OptimizerOffload;
class OptimizerSwap;
struct OffloadPiece;

// Where the fp32 master weights and the optimizer state of the own chunks live.
enum class OptimizerPlacement : unsigned char {
  kDevice,        // on the training device (no offload; every CPU engine)
  kHostPinned,    // offload_optimizer, pin_memory true: page-locked host memory
  kHostPageable,  // offload_optimizer, pin_memory false: ordinary host memory
  kNvme,          // offload_optimizer {device: nvme}: a swap file under nvme_path (ZeRO-Infinity)
};

// Where a stage-3 unit's own 16-bit chunk lives at rest (offload_param; docs/zero.md). Only
// units sharded at rest move (persistent units stay whole on the device), and only together
// with an offloaded optimizer: without it the chunk is cast from the fp32 master on the device
// at each gather and there is nothing at rest to move.
enum class ParamPlacement : unsigned char {
  kDevice,        // on the training device
  kHostPinned,    // offload_param {device: cpu, pin_memory: true}: page-locked host memory
  kHostPageable,  // offload_param {device: cpu}: ordinary host memory
  kNvme,          // offload_param {device: nvme}: a swap file under nvme_path
};

// How the offloaded host step cuts the own chunks: pieces of at most offload_piece_elements
// (Adam, SGD: elementwise, any split gives the same result), or whole parameter tensors (Lamb's
// trust ratio needs them; possible only where the own chunk holds whole tensors, one rank).
enum class OffloadGranularity : unsigned char { kPieces, kParamTensors };

struct ZeroOptions {
  Device device = Device::cpu();
  Stream stream;                     // the compute stream
  DType compute_dtype = DType::f32;  // dtype of the compute copy (the kernels' dtype)
  DType round_dtype = DType::f32;    // the training precision; != compute only on the CPU
  int optimizer_states = 2;          // fp32 buffers per element (Adam 2, SGD+momentum 1)
  int stage = 0;
  Communicator* comm = nullptr;                // required
  int64_t persistence_threshold = 100000;      // stage 3: units at most this large stay whole
  // Stage 3 prefetch, DeepSpeed's rule (PartitionedParameterCoordinator): the next unit is
  // gathered ahead while nothing is being prefetched yet and the gathered elements are under
  // max_live_elements, whatever its size; prefetch_elements 0 turns prefetching off.
  int64_t prefetch_elements = 50000000;
  int64_t max_live_elements = 1000000000;
  double predivide_factor = 1.0;               // gradient_predivide_factor
  bool prescale = false;                       // prescale_gradients
  int64_t reduce_bucket_elements = 500000000;  // reduce_bucket_size: padded elements per bucket
  CommOverlap overlap = CommOverlap::kOff;     // overlap_comm (resolved: stage 3 => on)
  // Offload (stages 1-3). The engine asks for a host placement only on a CUDA device; on the CPU
  // the host is the device, and the placement only routes the step through OptimizerOffload
  // (which tests use to check the pipeline without a GPU).
  OptimizerPlacement optimizer_placement = OptimizerPlacement::kDevice;
  OffloadGranularity offload_granularity = OffloadGranularity::kPieces;
  int64_t offload_piece_elements = int64_t{1} << 23;  // 32 MiB of f32 gradient per copy
  // kNvme: the folder the swap file goes under (nvme_path), the aio block, and whether the
  // pipeline overlaps reads and writes with the host step (pipeline_read / pipeline_write).
  std::string nvme_folder = {};
  aio::Options aio = {};
  bool swap_pipeline_read = true;
  bool swap_pipeline_write = true;
  // offload_param (stage 3 with an offloaded optimizer; ParamPlacement), its nvme_path and how
  // many chunks may be between the disk and the device at once (buffer_count).
  ParamPlacement param_placement = ParamPlacement::kDevice;
  std::string param_nvme_folder = {};
  int param_buffer_count = 5;
  // Stage 3 steps the optimizer in sub-groups of at most this many elements (sub_group_size).
  int64_t sub_group_elements = 1000000000;
  // communication_data_type: the dtype gradients are reduced in; unset: as accumulated (f32,
  // where DeepSpeed would use the training precision: docs/zero.md says why).
  std::optional<DType> comm_dtype;
};

struct UnitState {
  // A frozen unit (nn::Unit::frozen) keeps only its compute copy: no gradient, no master
  // weights, no optimizer state; the step, the reductions and the norm skip it.
  bool trainable = true;
  int64_t numel = 0;         // unpadded flat size
  int64_t padded = 0;        // multiple of world_size * kShardAlignElems
  int64_t shard = 0;         // padded / world_size
  int64_t shard_offset = 0;  // rank * shard
  bool persistent = true;    // compute copy kept whole (stages 0-2, small units at stage 3)
  Tensor value;              // full compute copy (stage 3: only while gathered, unless persistent)
  Tensor value_shard;        // stage 3, not persistent: the own chunk of the compute copy
  // Stage 3, not persistent, 16-bit on a GPU without offload: value_shard is not kept; each
  // gather casts the own chunk from the fp32 master (2 bytes per parameter / W saved, as FSDP2).
  bool shard_from_master = false;
  // offload_param: the own chunk is not on the device at rest but in value_shard on the host
  // (kHost*) or at param_file_offset of the parameter swap file (kNvme; value_shard undefined).
  bool shard_offloaded = false;
  int64_t param_file_offset = -1;
  // offload_param nvme: a prefetch's read of the chunk into staging buffer param_read_stage
  // (-1: none in flight), which the gather that follows takes instead of reading again.
  int param_read_stage = -1;
  int64_t param_read_ticket = 0;
  Tensor grad;                // full gradient (stages 2-3: from its backward until reduced)
  Tensor grad_shard;          // stages 1-3: own chunk of the reduced, averaged gradient (f32)
  // zero_grads() leaves grad_shard's old values and sets this instead of clearing it: the first
  // reduction of the next step writes it whole, and step_grad() clears it for a unit none wrote.
  bool shard_stale = false;
  Tensor master;              // fp32 master weights: full (stage 0) or own chunk (stages 1-3)
  std::vector<Tensor> state;  // optimizer state, same extent as master
  // (master and state are in host memory when offloaded: ZeroOptions::optimizer_placement)
  int gather_refs = 0;
  CommHandle pending_gather;
  CommDone gather_done;  // the prefetch's completion on the communication stream
  bool gather_in_flight = false;
};

// Bytes of model state this rank holds at rest, by kind (what each ZeRO stage saves) and by
// place: the first four are on the training device (a GPU, or the host for a CPU engine); the
// host_* fields are what offload_optimizer moved off a GPU into host memory (0 without offload).
struct ModelStateBytes {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t master = 0;
  int64_t optimizer = 0;
  int64_t host_master = 0;     // fp32 master weights of the own chunks
  int64_t host_optimizer = 0;  // optimizer state of the own chunks
  int64_t host_buffers = 0;    // the offload pipeline's page-locked staging buffers
  int64_t host_params = 0;     // offload_param cpu: the 16-bit own chunks of sharded units
  int64_t nvme = 0;            // the swap files (optimizer state; offload_param nvme's chunks)
  int64_t total() const { return params + grads + master + optimizer; }
  int64_t host_total() const { return host_master + host_optimizer + host_buffers + host_params; }
};

// Where a unit of `numel` elements lives on `world` ranks: padded to a multiple of world *
// kShardAlignElems, the rank's equal shard, and whether its compute copy stays whole
// (persistent: stages 0-2, and units no larger than persistence_threshold at stage 3).
struct UnitLayout {
  int64_t padded = 0;
  int64_t shard = 0;
  int64_t shard_offset = 0;
  bool persistent = true;
};
UnitLayout unit_layout(int64_t numel, int world, int rank, const ZeroOptions& options);

// What ZeroOptions decide about the buffers (ZeroState's methods of the same names ask these).
bool offloaded(const ZeroOptions& o);
// The master weights alias the compute copy (fp32 training without offload).
bool master_shared(const ZeroOptions& o);
// Stage 3 on a GPU in 16-bit without offload keeps no 16-bit shard of a sharded unit at rest.
bool shard_from_master(const ZeroOptions& o, const UnitLayout& l);
// The length of the pieces the offloaded step (and the NVMe swap file) cuts a rank's `shard`
// elements of a unit into, the last one shorter: offload_piece_elements, or the whole chunk
// for Lamb (OffloadGranularity::kParamTensors).
int64_t offload_piece_step(const ZeroOptions& o, int64_t shard);
// offload_param moves this unit's own chunk off the device (a sharded unit at stage 3, with the
// optimizer offloaded).
bool shard_offloaded(const ZeroOptions& o, const UnitLayout& l);

// The model-state bytes a ZeroState with these options on `world` ranks holds at rest for units
// of `unit_numels` elements, computed without allocating anything: what state_bytes() reports
// once it is built, except host_buffers (the offload pipeline's staging). The engine compares it
// with the GPU's memory before drawing a single initial value.
// `frozen` (empty: none) marks the frozen units, which hold their compute copy only.
ModelStateBytes predict_state_bytes(const std::vector<int64_t>& unit_numels,
                                    const ZeroOptions& options, int world,
                                    const std::vector<bool>& frozen = {});

// Empty when the model state of predict_state_bytes fits in `device_bytes` (the GPU's memory in
// all), else one line for the user: what it needs per GPU and of what, the GPU's size, and what
// would fit (stage 3, stage 3 with offload_optimizer, more GPUs). Activations and buffers come on
// top, so passing says only that training is not impossible.
std::string model_state_fit_error(const std::vector<int64_t>& unit_numels,
                                  const ZeroOptions& options, int world, int64_t device_bytes,
                                  const std::string& device_name,
                                  const std::vector<bool>& frozen = {});

// Empty when the offloaded model state (host_master + host_optimizer of predict_state_bytes) of
// `ranks_on_host` ranks fits in `available_bytes` of host memory (host_memory().available; 0 =
// unknown, never refused), else one line for the user: what a rank keeps on the host and of what,
// the sum over the ranks on this host, what is available, and what would fit. Options without
// offload need nothing on the host and always pass.
std::string host_state_fit_error(const std::vector<int64_t>& unit_numels,
                                 const ZeroOptions& options, int world, int ranks_on_host,
                                 int64_t available_bytes, const std::vector<bool>& frozen = {});

class ZeroState : public nn::UnitHooks {
 public:
  // Allocates this rank's buffers, initialises parameters (every parameter from its own stream
  // seeded by (seed, name): the same model for any world size, stage or device) and binds views.
  ZeroState(nn::Model& model, const ZeroOptions& options, uint64_t seed);
  ~ZeroState() override;

  std::vector<UnitState>& units() { return units_; }
  const ZeroOptions& options() const { return options_; }
  int rank() const { return options_.comm->rank(); }
  int world_size() const { return options_.comm->world_size(); }
  ModelStateBytes state_bytes() const;
  // Whether the master weights and optimizer state live in host memory (offload_optimizer).
  bool offloaded() const { return zero::offloaded(options_); }
  // Whether the master weights alias the compute copy (fp32 training without offload).
  bool master_shared() const { return zero::master_shared(options_); }
  // The host step of offload_optimizer; null without offload.
  OptimizerOffload* offload() { return offload_.get(); }
  // The NVMe swap file of the master and optimizer state (kNvme), and the pieces it is laid out
  // in; null and empty otherwise. A swapped unit's master and state tensors are undefined.
  OptimizerSwap* swap() { return swap_.get(); }
  const std::vector<OffloadPiece>& swap_pieces() const { return swap_pieces_; }

  // Set before each backward: whether this micro-step reduces gradients (stages 0-1: only at
  // the accumulation boundary; stages 2-3: always).
  void set_boundary(bool boundary) { boundary_ = boundary; }
  // After a forward or backward pass: completes its collectives (gradient reductions, GPU
  // gathers) and returns the first error any of them met.
  Status finish_pass();
  // Stages 0-1, outside a backward pass (the pipeline engine's ReduceGrads instruction, after
  // every micro-batch's backward ran with set_boundary(false)): reduces every trainable unit's
  // accumulated gradient, last unit first, as the boundary micro-step's backward would, and
  // completes the collectives.
  Status reduce_grads();

  // Whether unit u is trained (not frozen): only those have the buffers below.
  bool trainable(int u) const { return units_[u].trainable; }
  // The gradient the optimizer step reads for unit u: the full all-reduced gradient (stage 0) or
  // the own reduced chunk (stages 1-3).
  Tensor& step_grad(int u);
  // Where the own chunk of unit u's compute copy lives (the optimizer writes it); undefined for a
  // unit whose chunk is cast from the master at each gather (UnitState::shard_from_master).
  Tensor own_compute_chunk(int u);
  // After the optimizer updated the master weights: refreshes the compute copy's own chunks
  // (`lowp_written`: the optimizer already wrote them) and all-gathers them (stages 1-2, and
  // persistent units at stage 3).
  // `with_frozen`: the frozen units' chunks too (start-up only: they never change after).
  Status publish_params(bool lowp_written, bool with_frozen = false);
  // Starts the next accumulation: stages 0-1 leave the buffers' values and mark the gradients
  // unwritten (Param::grad_unwritten), stages 2-3 clear what is bound.
  void zero_grads();
  // Clears every trainable unit's gradient buffer, whole, and marks it written (for a caller
  // that adds into the buffers through other bindings of them, such as the pipeline's copies of
  // its units: they then add to zeros, as before gradients were written first).
  void clear_unwritten_grads();
  // Forgets a pass whose work never ran (a refused CUDA-graph capture): the gradients queued for
  // reduction and the handles of collectives, and at stages 2-3 the pass's gradient buffers.
  void abandon_pass();
  // Stage 3 on a GPU, after the optimizer step: starts the gather of the next forward's first
  // unit on the communication stream, so it runs while the host reads the step back and makes
  // the next batch (nothing computes before that gather, so it would otherwise be exposed).
  void prefetch_next_forward();
  // Waits for and drops gathers (and parameter-file reads) issued ahead that no unit consumed:
  // they hold values from before a write to the weights (checkpoint loads).
  void drop_prefetches();
  // Sums (or maxes) a few doubles over all ranks; a no-op with one rank.
  Status all_reduce_doubles(std::vector<double>& values, ReduceOp op);
  // Gathers the full fp32 master weights of every unit onto this rank (checks, exports). With
  // `in_place_of_master`, a trained unit whose entry is defined gathers that tensor (laid out
  // as its master extent: a moving average of it) instead.
  Result<std::vector<Tensor>> gather_master(std::span<const Tensor> in_place_of_master = {});
  // Unit u's fp32 master over its master extent: the tensor itself, or (swapped to NVMe) a host
  // copy read from the swap file.
  Result<Tensor> master_values(int u);
  // The own chunk of unit u's compute copy on the training device, wherever it lives at rest
  // (offload_param: copied from the host or read from the swap file, enqueued on `s`).
  Result<Tensor> load_own_chunk(int u, const Stream& s);
  // Writes a device copy of unit u's own chunk to where it lives at rest (waits for it).
  Status store_own_chunk(int u, const Tensor& chunk);
  // offload_param nvme: the parameter swap file, and where the optimizer writes piece values.
  aio::SwapFile* param_file() { return param_file_.get(); }

  // One optimizer step of every unit's master weights (zero_step.cc): the engine computed the
  // step values (unscale and clip factor, lr, betas); this cuts the master extents into the
  // optimizer's chunks (whole parameter tensors for Lamb, sub_group_size pieces at stage 3),
  // runs it on the device or through OptimizerOffload on the host, and publishes the updated
  // compute copy. Returns the optimizer calls made on the device (sub-groups; 0 when offloaded).
  Result<int64_t> optimizer_step(optim::Optimizer& optimizer, const optim::StepValues& values);

  // ---- checkpoints (zero_checkpoint.cc). Tensor kinds: 0 = fp32 master, 1.. = optimizer state.
  // The elements of unit u this rank saves: the part of its own chunk inside the unit
  // (checkpoint/flat_layout.h), the same at every stage (stage 0 saves chunk `rank` of its whole
  // master), so what a checkpoint holds does not depend on the stage.
  ckpt::FlatChunk saved_chunk(int u) const;
  // The elements of unit u whose master weights and optimizer state this rank keeps: [0, padded)
  // at stage 0, its own chunk otherwise. A frozen unit has only kind 0, its compute copy: the
  // extent it keeps ([0, padded) when whole, else its own chunk), converted to and from f32.
  std::pair<int64_t, int64_t> master_extent(int u) const;
  // Copies the saved chunk of tensor `kind` of unit u into host memory (saved_numel floats).
  // Fails only where the state is swapped to NVMe and the file cannot be read.
  Status read_saved(int u, int kind, float* dst);
  // Zeroes tensor `kind` of unit u over its master extent.
  Status zero_extent(int u, int kind);
  // Copies n host values into tensor `kind` of unit u, `offset` elements into its master extent.
  Status write_range(int u, int kind, int64_t offset, const float* src, int64_t n);
  // After write_range: the compute copy is made from the master weights again (collective:
  // the persistent units' chunks are all-gathered, as after a step).
  Status refresh_params();

  // DeepSpeed's hybrid engine (--enable-hybrid-engine): at stage 3 every unit's compute copy is
  // all-gathered once and stays bound, so forwards run without hooks (no collective per unit and
  // token in generation) until release_full_weights frees the gathered copies; training hooks
  // meanwhile find each unit gathered already. Below stage 3 the compute copy is whole at rest
  // and both are no-ops. Collective. Fails, naming the sizes, when the device cannot hold the
  // whole model beside what it holds (nothing is gathered then).
  Status hold_full_weights();
  void release_full_weights();
  bool holds_full_weights() const { return held_; }
  // What hold_full_weights adds on this rank: the gathered units' bytes (0 below stage 3).
  int64_t full_weights_bytes() const;

  // nn::UnitHooks
  void before_forward(int unit) override;
  void after_forward(int unit) override;
  void before_backward(int unit) override;
  void after_backward(int unit) override;
  // First error a hook met (hooks cannot return one); checked by the engine after each pass.
  const Status& hook_status() const { return hook_status_; }
  // Stage 3: all-gathers issued ahead of their unit (prefetches) since construction.
  int64_t prefetches_issued() const { return prefetches_issued_; }
  // Stage 3 gather timing (wall_clock_breakdown): with it on, each gather records events on the
  // compute stream around what it costs there (the collective in line, or the wait for a
  // prefetched one); take_gather_ms sums and clears them (synchronising).
  void set_gather_timing(bool on) { time_gathers_ = on; }
  double take_gather_ms() { return gather_spans_.elapsed_ms(/*reset=*/true); }

 private:
  // One flushed bucket. The full gradients it reads need no reference here: Gloo's worker holds
  // them until it ran, and on a GPU they were marked as used on the collective's stream.
  struct PendingReduce {
    std::vector<int> units;
    // Per unit: its reduce-scatter result (stages 1-3) or its all-reduced full gradient (stage 0).
    std::vector<Tensor> outs;
    CommHandle handle;
    CommDone done;  // communication stream only
  };
  // The all-gather of unit u's compute copy into a fresh st.value, on the lane.
  CommHandle issue_gather(int u, CommDone& done);
  void gather(int u);
  void release(int u);
  void prefetch(int u);
  void keep_stream_handle(CommHandle h);
  void bucket_unit(int u);
  void flush_bucket();
  void complete_reduce(PendingReduce& p);
  void ensure_grad(int u);
  void record(const Status& s);
  void scale_pre(Tensor& g);
  // The factor a reduced gradient is multiplied by after the collective (DeepSpeed: 1 with
  // prescale_gradients, else gradient_predivide_factor / world size), and applying it in place.
  float post_factor() const;
  void scale_post(Tensor& g);

  nn::Model& model_;
  ZeroOptions options_;
  std::vector<UnitState> units_;
  CommLane lane_;
  GradBucket bucket_;
  std::deque<PendingReduce> pending_;
  bool boundary_ = true;
  std::vector<CommHandle> stream_handles_;  // GPU: stream-ordered operations, waited per pass
  int64_t live_elements_ = 0;
  int64_t prefetches_issued_ = 0;
  bool time_gathers_ = false;
  EventSpans gather_spans_;
  Status hook_status_;
  bool held_ = false;
  Status place_own_chunk(UnitState& st, const Tensor& chunk);
  // offload_param nvme: the next staging buffer free of a pending read (waiting for its last
  // copy to the device), a prefetch's asynchronous read of unit u's chunk, and the settling of
  // reads no gather took (before the optimizer rewrites the file).
  int take_param_stage();
  void start_param_read(int u);
  void settle_param_reads();
  std::unique_ptr<OptimizerSwap> swap_;
  // offload_param nvme: the file, and a ring of page-locked staging buffers that chunks read
  // from it cross to the device through (each reused once its copy has finished).
  std::unique_ptr<aio::SwapFile> param_file_;
  struct ParamStage;
  std::vector<std::unique_ptr<ParamStage>> param_stages_;
  size_t next_param_stage_ = 0;
  std::vector<OffloadPiece> swap_pieces_;
  std::unique_ptr<OptimizerOffload> offload_;
};

// Stage 3: whether the next unit is all-gathered ahead, by DeepSpeed's rule: it fetches while
// `numel_prefetching < min(max_live_parameters - live, prefetch_bucket_size)`, so the first
// candidate goes whenever both bounds leave room, however large it is.
inline bool should_prefetch(int64_t prefetch_elements, int64_t max_live_elements,
                            int64_t live_elements) {
  return prefetch_elements > 0 && live_elements < max_live_elements;
}

// dst (compute dtype) = src (f32) rounded to `round` (the 16-bit training dtype on the CPU, where
// the kernels compute in f32) or simply cast: how every compute copy is made from f32 values.
void round_into(Tensor& dst, const Tensor& src, DType round, const Stream& s);

// Fills `out` (host f32, numel = unit flat size) with the initial values of the unit's params: read
// from the weight files for parameters with a source (nn/param.h), else drawn by their ParamInit.
void init_unit_params(nn::Unit& unit, float* out, uint64_t seed);
// The same values for elements [begin, end) of the flat buffer only, written to out[0, end -
// begin): what a rank holding one chunk of the unit needs (it draws and holds no more).
void init_unit_params(nn::Unit& unit, float* out, uint64_t seed, int64_t begin, int64_t end);

}  // namespace zt::zero
