// The pipeline engine: DeepSpeed's PipelineEngine (reference §8) over ZeroTrain's units. The ranks
// form a [pipe, data] grid (topology.h); each rank holds one stage's units (stage_model.h, cut by
// partition.h) and trains them with an ordinary Engine over its stage's data-parallel group, at
// ZeRO stage 0 or 1. train_batch runs one batch through DeepSpeed's 1F1B TrainSchedule
// (schedule.h), instruction by instruction:
//
//   LoadMicroBatch   the first stage takes the micro-batch's tokens, the last its targets (both
//                    draw the same micro-batches, in order, from `next`)
//   ForwardPass      the stage's units on the received activation (or the tokens); the last
//                    stage's head computes the losses and, fused, their gradient
//   Send/RecvActivation, Send/RecvGrad
//                    the communicator's send/recv between neighbouring stages of one pipeline;
//                    the first activation of a batch is preceded by its shape and dtype
//   BackwardPass     the stage's units backward from the received gradient (the last stage from
//                    its loss); parameter gradients accumulate over the batch's micro-batches
//   ReduceTiedGrads  a tied unit's gradient summed over the stages that hold it
//   ReduceGrads      every gradient reduced over the data-parallel group (ZeroState::reduce_grads)
//   OptimizerStep    the Engine's step: overflow and the gradient norm reduced over the stages
//                    too (each tied unit counted once), the loss the last stage's mean
//
// Activations in flight: a stage runs the forwards of up to num_pipe_buffers micro-batches before
// their backwards, and a unit keeps what its backward needs in itself, so the stage holds one
// copy of its units per buffer (ZeRO binds them all to the same parameter and gradient buffers:
// the copies cost only their activations, which is what DeepSpeed stores per buffer too). The
// gradients are those of the single-process run of the same global batch, up to the order of
// floating-point sums.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <span>
#include <utility>
#include <vector>

#include "zt/comm/communicator.h"
#include "zt/core/status.h"
#include "zt/core/tensor.h"
#include "zt/nn/model.h"
#include "zt/pipe/partition.h"
#include "zt/pipe/schedule.h"
#include "zt/pipe/stage_model.h"
#include "zt/pipe/topology.h"
#include "zt/runtime/config.h"
#include "zt/runtime/engine.h"

namespace zt::pipe {

// Which part of the model a rank builds: its tensor-parallel rank of tp_size (1: the whole).
struct ModelShard {
  int tp_rank = 0;
  int tp_size = 1;
};

// Builds one whole model (no parameter memory: an engine binds it), or with tensor parallelism
// the shard's part of every block (nn::TransformerConfig::tp_size). Called once per pipeline
// buffer; every call with one shard must build the same model.
using ModelFactory = std::function<Result<std::unique_ptr<nn::Model>>(const ModelShard&)>;

struct PipelineOptions {
  int stages = 1;                                   // --pipeline-parallel-size
  int tensor = 1;                                   // --tensor-parallel-size
  // --sequence-parallel: with tensor > 1, the norms and residual adds on 1/tensor of the tokens
  // each (nn::Context::sequence_parallel).
  bool sequence_parallel = false;
  std::string partition_method = std::string(kDefaultPartitionMethod);
  // The sequence length the "compute" partition estimates each unit's FLOPs at.
  int64_t seq_len = 1024;
  // device, seed, activation checkpointing; comm is the whole job's communicator (every rank),
  // or null for one process. The engine sets the data-parallel and model-parallel groups.
  EngineOptions engine{};
  // Measurement (bench/pipe_bench.cc): the device is synchronised around every forward and
  // backward pass so that busy_ms() counts the stage's compute alone (it slows the pipeline a
  // little; off in training).
  bool time_passes = false;
};

// One micro-batch of a language model: tokens and targets (micro_batch, T) i32 on the host
// (targets of kIgnoreTarget are not counted).
struct MicroBatch {
  Tensor tokens;
  Tensor targets;
  // (batch, seq) i32, 1 a real token and 0 padding; undefined: every position is real. Every
  // stage's attention reads it: it travels with the activations.
  Tensor attention_mask{};
};

class PipelineEngine {
 public:
  // `config` must be resolved for the data-parallel size (world / stages), as DeepSpeed counts
  // batches per data-parallel rank. Errors: a stage count that does not divide the ranks or
  // exceeds the model's units, ZeRO stage 2 or 3 (DeepSpeed refuses them with pipelines too),
  // the partition method's errors, the engine's.
  static Result<std::unique_ptr<PipelineEngine>> create(const ModelFactory& factory,
                                                        const DeepSpeedConfig& config,
                                                        const PipelineOptions& options);
  ~PipelineEngine();
  PipelineEngine(const PipelineEngine&) = delete;
  PipelineEngine& operator=(const PipelineEngine&) = delete;

  // DeepSpeed's train_batch: gradient_accumulation_steps micro-batches through the schedule, the
  // reductions and the optimizer step. `next` is called on the first and the last stage, once per
  // micro-batch in order. Returns the batch's mean loss (over the micro-batches and the
  // data-parallel pipelines), the same on every rank. Collective over the job.
  Result<double> train_batch(const std::function<Result<MicroBatch>()>& next);

  Engine& engine() { return *engine_; }
  const Engine& engine() const { return *engine_; }
  const ProcessTopology& topology() const { return *topology_; }
  const PipeGrid& grid() const { return grid_; }
  const std::vector<int>& parts() const { return parts_; }  // over the running units
  const StageModel& stage_model() const { return *models_.front(); }
  int num_pipe_buffers() const { return static_cast<int>(models_.size()); }
  // The most micro-batches whose activations this stage held at once during the last batch
  // (forward done, backward not yet): at most min(stages - stage_id, micro-batches).
  int peak_activations() const { return peak_activations_; }
  // With PipelineOptions::time_passes: the last batch's wall time on this rank and the part of
  // it its forward and backward passes took; 1 - busy / batch is the stage's idle share (the
  // bubble, and waiting for its neighbours).
  double batch_ms() const { return batch_ms_; }
  double busy_ms() const { return busy_ms_; }
  // "pipe=2 x data=2", with this rank's stage, units and data-parallel index.
  std::string describe() const;

 private:
  PipelineEngine() = default;
  struct Buffer;
  Status run_instruction(const Instruction& in, const std::function<Result<MicroBatch>()>& next);
  Status execute(const Instruction& in, const std::function<Result<MicroBatch>()>& next);
  Status after_pass(Status s);
  void bind_copies();
  // Sums the gradients of elements several tensor ranks hold (nn::ParamSlice::replicated).
  Status reduce_replicated_grads();

  std::unique_ptr<Communicator> own_world_;
  Communicator* world_ = nullptr;
  std::optional<ProcessTopology> topology_;
  PipeGrid grid_;
  std::vector<int> parts_;
  std::unique_ptr<Communicator> dp_comm_, pp_comm_;
  // Tensor parallelism: the rank's tensor-parallel group, and the model-parallel group (every
  // rank of its data index: the stages and their tensor-parallel ranks) the step reduces over.
  std::unique_ptr<Communicator> tp_comm_, mp_comm_;
  // The tensor ranks that hold this rank's key/value heads too (null when none share them).
  std::unique_ptr<Communicator> replica_comm_;
  std::vector<CommHandle> tp_pending_;  // the tensor-parallel collectives of the current pass
  // Per tied unit this stage holds (owner or copy): the stage index and the group of the stages
  // holding it (null when only this stage does).
  struct Tied {
    int unit = 0;
    std::unique_ptr<Communicator> comm;
  };
  std::vector<Tied> tied_;
  std::vector<std::unique_ptr<StageModel>> models_;  // one per pipeline buffer
  std::unique_ptr<Engine> engine_;
  DeepSpeedConfig config_;
  std::vector<Buffer> buffers_;
  std::vector<CommHandle> step_handles_;  // sends (and GPU receives) of the current step
  std::vector<Tensor> step_keep_;         // what those sends read that no buffer holds
  bool sent_meta_ = false, got_meta_ = false;
  bool recv_mask_ = false;  // the batch's activations come with their padding mask
  Shape act_shape_{};  // the activation this stage receives (from the batch's first message)
  DType act_dtype_ = DType::f32;
  double loss_sum_ = 0;
  int loss_count_ = 0;
  // The last stage's per-token losses of each micro-batch and its counted targets, read at the
  // optimizer step.
  std::vector<std::pair<Tensor, int64_t>> pending_losses_;
  int in_flight_ = 0, peak_activations_ = 0;
  bool time_passes_ = false;
  bool sequence_parallel_ = false;
  double batch_ms_ = 0, busy_ms_ = 0;
};

}  // namespace zt::pipe
