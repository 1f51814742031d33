// The training engine: DeepSpeed's engine API and semantics (reference §4) over ZeroTrain's
// explicit-backward models. One process for now; the ZeRO stages plug in under the same API.
//
//   auto engine = zt::initialize(model, config, {.device = Device::cuda(0)});
//   for (...) {
//     float loss = engine->forward(tokens, targets).value();
//     engine->backward(loss);  // divides by gradient_accumulation_steps, applies the loss scale
//     engine->step();          // every micro-batch; acts at the accumulation boundary
//   }
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>

#include "zt/checkpoint/safetensors.h"
#include "zt/comm/communicator.h"
#include "zt/core/tensor.h"
#include "zt/nn/model.h"
#include "zt/optim/optimizer.h"
#include "zt/runtime/config.h"
#include "zt/runtime/flops_profiler.h"
#include "zt/runtime/timers.h"
#include "zt/runtime/loss_scaler.h"
#include "zt/runtime/lr_scheduler.h"
#include "zt/zero/zero_state.h"

namespace zt {

// A pipeline stage's (and tensor-parallel rank's) place in the whole model, for checkpoints
// (pipe/pipe_engine.h builds it). A checkpoint always describes the whole model: each stage's
// ranks write the chunks of the units the stage owns, in files named by their data-parallel rank
// and model-parallel rank (zero_pp_rank_{R}_mp_rank_{M:02d}_optim_states, M = stage * tensor +
// tensor_rank, DeepSpeed's model-parallel rank in its [pipe, data, model] grid), under the whole
// model's unit numbers, so any layout (another stage count, another tensor-parallel size, no
// pipeline) loads it by the same re-slice as ZeRO's, through whole parameters where the tensor
// layouts differ (checkpoint/unit_layout.h).
struct CheckpointStage {
  int stage = 0, stages = 1;
  int tensor_rank = 0, tensor = 1;  // this rank's tensor-parallel rank and the group's size
  // The whole model's units as the metadata lists them (+ "stage"; with tensor > 1 every tensor
  // rank's part of them, ckpt::unit_json).
  nlohmann::json whole_units;
  std::vector<int> global_unit{};  // this engine's unit i is the whole model's global_unit[i]
  std::vector<bool> saved{};       // whether this stage writes unit i (false: another stage's copy)
  // Every rank of the job (all stages): checkpoints agree and publish across it.
  Communicator* job_comm = nullptr;
};

struct EngineOptions {
  Device device = Device::cpu();
  uint64_t seed = 1234;  // parameter initialisation
  // The data-parallel group; null: this process trains alone (a single-process communicator).
  // Not owned: it must outlive the engine.
  Communicator* comm = nullptr;
  // ZeRO-Offload: the host steps the own chunks in pieces of at most this many elements, each
  // copied while the previous one is stepped (zero/optimizer_offload.h). Tests make it small.
  int64_t offload_piece_elements = int64_t{1} << 23;
  // Activation checkpointing (--gradient-checkpointing): each transformer block keeps only its
  // input through forward and recomputes its activations before its backward; the config's
  // activation_checkpointing.cpu_checkpointing keeps those inputs in host memory.
  bool activation_checkpointing = false;
  // --activation-checkpoint-interval (DeepSpeed PipelineModule's activation_checkpoint_interval):
  // with activation_checkpointing, units are checkpointed in segments of this many
  // (nn::Context::checkpoint_interval).
  int activation_checkpoint_interval = 1;
  // nn::Context::keep_activations (--keep-activations): the MLP's activation and a pre-LN
  // block's norm outputs kept from forward for backward instead of recomputed.
  bool keep_activations = false;
  // Pipeline parallelism (pipe/pipe_engine.h): `comm` is then the stage's data-parallel group,
  // and this is DeepSpeed's model-parallel group (every stage of this rank's pipeline), over which
  // the overflow flag and the gradients' sum of squares are reduced too, so every stage clips
  // and skips alike. Not owned. Null: no pipeline.
  Communicator* model_parallel_comm = nullptr;
  // Units whose gradient another stage's copy also holds (a tied embedding replicated on the last
  // stage: DeepSpeed's ds_pipe_replicated): left out of the norm, so each counts once.
  std::vector<int> norm_excluded_units{};
  // Tensor-parallel ranks but the first of their group: parameters that are whole on every rank
  // of the group (no nn::ParamSlice: norms, embeddings, row-parallel biases) are left out of the
  // norm, which then counts them once (Megatron's rule).
  bool norm_skip_replicated = false;
  // Pipeline stages: where this engine's units sit in the whole model (checkpoints). Unset: the
  // engine's model is the whole model.
  std::optional<CheckpointStage> checkpoint_stage{};
  // --cuda-graph: Engine::train_batch captures the whole training step (forward, backward, the
  // optimizer) as a CUDA graph after two warm-up steps and replays it from then on, so the GPU
  // runs the step's kernels without the host's launch gaps (docs/performance.md). Where the run
  // cannot be captured (Engine::graph_refusal) the step runs as usual and the log says why once.
  bool cuda_graph = false;
};

// What happened at the last optimizer step (the boundary micro-batch).
struct StepStats {
  int64_t step = 0;       // global_steps after the step
  double loss = 0;        // mean loss over the step's micro-batches
  double lr = 0;          // learning rate the step used
  double loss_scale = 1;  // scale the step's gradients carried
  double grad_norm = 0;   // global L2 norm of the unscaled gradients (-1 if inf/nan)
  bool skipped = false;   // fp16 overflow: step skipped
  int64_t samples = 0;    // global_samples after the step
  // wall_clock_breakdown: milliseconds of this step's forward, backward, backward_inner,
  // backward_allreduce and step (summed over its micro-steps; DeepSpeed's global timers and its
  // Train/Samples/elapsed_time_ms_* names); empty without it.
  std::vector<std::pair<std::string, double>> elapsed_ms;
};

// What load_checkpoint restores besides the model's weights (DeepSpeed's keyword arguments).
struct CheckpointLoadOptions {
  std::string tag;                        // empty: the tag `latest` names
  bool load_optimizer_states = true;      // optimizer state, its step count and the loss scaler
  bool load_lr_scheduler_states = true;
  bool load_module_only = false;          // weights only: counters, optimizer, scheduler fresh
};

struct LoadedCheckpoint {
  std::string path;  // DIR/<tag>
  std::string tag;
  nlohmann::json client_state;
  int saved_world_size = 0;
  int saved_stage = 0;
};

// Writes a model's whole weights (gather_master's: f32 host tensors, unit by unit) in `dtype`
// as Engine::save_16bit_model does: a Transformer under the default file name as the Hugging
// Face folder transformers loads, any other as DIR/<file> and DIR/config.json. One process.
Status write_model_weights(nn::Model& model, const std::vector<Tensor>& full, DType dtype,
                           const std::string& dir, const std::string& file = "model.safetensors");

class Engine {
 public:
  // Use initialize(), which validates first.
  Engine(nn::Model& model, const DeepSpeedConfig& config, const EngineOptions& options,
         std::unique_ptr<LrScheduler> scheduler);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // One micro-batch: tokens and targets are (micro_batch, T) i32 on the host; a target of
  // kIgnoreTarget (-100) is not counted (prompt and padding positions in fine-tuning). Returns
  // the mean loss over the counted targets (unscaled; 0 when none is counted), and the gradient
  // is that mean's, as for a transformers model's loss: with -100 targets each micro-batch (and
  // each rank) is averaged over its own counted targets, as DeepSpeed with transformers does.
  Result<float> forward(const Tensor& tokens, const Tensor& targets);
  // The same with an attention mask (B, T) i32 (1 a real token, 0 padding) for encoders whose
  // rows are padded (BERT); null: every position is real.
  Result<float> forward(const Tensor& tokens, const Tensor& targets,
                        const Tensor* attention_mask);
  // Backward of the last forward (the loss value is only recorded). Reduces gradients as the
  // ZeRO stage says; a non-ok Status is a communication failure (a dead or missing peer).
  Status backward(float loss);

  // Losses computed outside the model from what it outputs per position (PPO's actor and critic:
  // tasks/ppo_math.h). Each pair is one micro-step like forward/backward (the same hooks,
  // reductions and accumulation boundary); `loss` is only recorded, for the step's report.
  // forward_token_losses: a training forward whose head returns every position's cross-entropy
  // against `targets` (-log p(target); 0 where the target is -100), its gradient kept at weight
  // 1; backward_weighted(w, loss) then backpropagates sum_t w[t] loss_t, w one weight per
  // position (d total / d loss_t of this micro-batch; the loss scale and the gradient-accumulation
  // average are applied here, as for forward's own loss). Causal LM heads, without tensor or
  // sequence parallelism.
  Result<std::vector<double>> forward_token_losses(const Tensor& tokens, const Tensor& targets,
                                                   const Tensor* attention_mask = nullptr);
  Status backward_weighted(std::span<const float> weights, float loss);
  // forward_outputs: a training forward without targets, returning what the model's last unit
  // gives (a value head's (B,T) values) on the engine's device; backward_outputs(d, loss)
  // backpropagates d = d total / d outputs (its shape; scaled here as above). Value heads
  // (nn::Task::kReward).
  Result<Tensor> forward_outputs(const Tensor& tokens, const Tensor* attention_mask = nullptr);
  Status backward_outputs(const Tensor& dout, float loss);

  // Called every micro-batch; at the accumulation boundary it unscales, checks overflow, clips,
  // steps the optimizer and scheduler, zeroes gradients and advances global_steps. A non-ok
  // Status means training cannot go on (fp16 loss scale at its minimum). With
  // zero_optimization.offload_optimizer on a GPU the optimizer runs on the host
  // (zero/optimizer_offload.h); everything else is the same.
  Status step();
  // One optimizer step on one micro-batch when gradient_accumulation_steps is 1: forward,
  // backward and step() in one call (last_step() then has its figures); the micro-batch as
  // forward() takes it. With EngineOptions::cuda_graph the step is a replayed CUDA graph (same
  // kernels, same results); otherwise, or with more micro-batches a step, it is the three calls.
  Status train_batch(const Tensor& tokens, const Tensor& targets);
  // Why this engine's steps cannot be captured as a CUDA graph (empty when they can), and how
  // many steps ran as a replayed graph so far.
  std::string graph_refusal() const;
  int64_t graph_replays() const;
  // Pipeline engines (pipe/pipe_engine.h), which run the micro-batches' forward and backward
  // passes themselves and reduce the gradients (ZeroState::reduce_grads): the optimizer step of
  // one batch of gradient_accumulation_steps micro-batches whose mean loss (over the pipeline's
  // last stage, the same value on every stage) is `mean_loss`. Counts the micro-steps and steps
  // as gradient_accumulation_steps step() calls would.
  Status pipeline_step(double mean_loss);
  // The context a pipeline stage's training passes run with (device, stream, dtypes,
  // checkpointing); the caller sets targets and dloss.
  nn::Context train_context() const;
  // The dropout seed of micro-step `micro_step` (counted from 0 over the run) on this rank: a
  // fresh mask every micro-step and data-parallel rank, reproducible from the run's seed.
  uint64_t dropout_seed(int64_t micro_step) const;

  bool is_gradient_accumulation_boundary() const;
  int64_t global_steps() const { return global_steps_; }
  int64_t global_samples() const { return global_samples_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  int64_t micro_steps() const { return micro_steps_; }
  double lr() const;  // the learning rate the next step will use
  double loss_scale() const { return scaler_.scale(); }
  const std::optional<StepStats>& last_step() const { return last_step_; }
  // Optimizer calls of the last applied step on the device (stage 3: one per sub-group of at most
  // zero_optimization.sub_group_size elements; otherwise 1).
  int64_t last_step_groups() const { return last_step_groups_; }
  const LrScheduler* lr_scheduler() const { return scheduler_.get(); }

  const DeepSpeedConfig& config() const { return config_; }
  nn::Model& model() { return model_; }
  Device device() const { return options_.device; }
  DType compute_dtype() const { return ctx_.compute_dtype; }
  const Stream& stream() const { return ctx_.stream; }
  zero::ModelStateBytes model_state_bytes() const { return zero_->state_bytes(); }
  const optim::OptimizerSpec& optimizer_spec() const { return optimizer_.spec(); }
  zero::ZeroState& zero_state() { return *zero_; }
  int rank() const { return comm_->rank(); }
  int world_size() const { return comm_->world_size(); }
  // The job: every rank that takes part in this engine's checkpoints (all stages of a pipeline;
  // else the data-parallel group), and a few doubles summed (or maxed) across it.
  int job_rank() const;
  int job_world_size() const;
  Status all_reduce_job(std::vector<double>& values, ReduceOp op);
  // A forward-only context (for generation / evaluation) on this engine's device and dtype, and
  // the hooks a forward must run with (ZeRO-3 gathers parameters through them).
  nn::Context eval_context() const;
  nn::UnitHooks* hooks() { return zero_.get(); }
  // The hybrid engine (DeepSpeed's enable_hybrid_engine; zero/zero_state.h hold_full_weights):
  // at ZeRO-3 the whole model's compute copy gathered once onto every rank and kept, so
  // forwards may then run without hooks (generation: no collective per unit and token) until
  // release_full_weights. Collective. step() refuses to run while they are held (the copies
  // would go stale). No-ops below stage 3, where the compute copy is whole at rest.
  Status hold_full_weights() { return zero_->hold_full_weights(); }
  void release_full_weights() { zero_->release_full_weights(); }
  bool holds_full_weights() const { return zero_->holds_full_weights(); }
  // The full fp32 master weights, unit by unit (collective: every rank must call it).
  Result<std::vector<Tensor>> gather_master() { return zero_->gather_master(); }

  // DeepSpeed's save_checkpoint (runtime/engine_checkpoint.cc; layout in
  // checkpoint/checkpoint_dir.h). Collective: every rank calls it between optimizer steps; each
  // writes its own shard, rank 0 the metadata, and `latest` is replaced last. Tag empty:
  // "global_step{N}". checkpoint.tag_validation compares the tag across ranks. A rank that fails
  // makes every rank return an error; nothing saved before is touched.
  Status save_checkpoint(const std::string& dir, const std::string& tag = "",
                         const nlohmann::json& client_state = nlohmann::json::object());
  // The same checkpoint written in the background (--save-async): the call copies this rank's
  // state into a host snapshot (the only stall; the snapshot buffer stays allocated between
  // saves) and returns; a thread writes the shard while training goes on, and rank 0's thread
  // publishes the checkpoint once every rank's shard is written (no collective meanwhile).
  // keep_last > 0 then prunes to that many tags. The outcome comes from checkpoint_wait(), which
  // the next save (sync or async) and the destructor call.
  Status save_checkpoint_async(const std::string& dir, const std::string& tag = "",
                               const nlohmann::json& client_state = nlohmann::json::object(),
                               int keep_last = 0);
  // DeepSpeed's save_16bit_model: the whole model's weights in the training precision (bf16,
  // fp16, or fp32 for fp32 training) and DIR/config.json, written by rank 0. A Transformer (every
  // family of nn/models) with the default file name is written as transformers' from_pretrained
  // reads it (checkpoint/hf_export.h: its tensor names, sharded past 5GB); another model or
  // file name gets DIR/<file>, one tensor per parameter under ZeroTrain's names. Collective (the weights are gathered). At ZeRO stage 3 it
  // needs zero_optimization.stage3_gather_16bit_weights_on_model_save, as in DeepSpeed: without
  // it nothing is written, a warning says why, and the result is false.
  Result<bool> save_16bit_model(const std::string& dir,
                                const std::string& file = "model.safetensors");
  // Waits for a save in flight on this rank; its error if it failed (ok when none).
  Status checkpoint_wait();
  ~Engine();
  // DeepSpeed's load_checkpoint. Collective. A checkpoint saved at any world size and ZeRO stage
  // loads at this engine's (a re-slice of the unit-flat chunks). nullopt (and one warning) when
  // DIR has no `latest` and no tag was given: nothing to resume, training starts fresh.
  Result<std::optional<LoadedCheckpoint>> load_checkpoint(const std::string& dir,
                                                          const CheckpointLoadOptions& options = {});

 private:
  Status apply_step(StepStats& stats);
  // apply_step on a GPU without overflow checks or an offloaded optimizer: the loss, the norm
  // and the clip factor stay on the device until the optimizer is queued.
  Status apply_step_on_device(StepStats& stats, double local_loss);
  // Adds every trainable unit's reduced-gradient sum of squares into acc ((1) f64, device).
  void accumulate_grad_sumsq(Tensor& acc);
  // The optimizer's step values but the gradient factor (the config, the scheduler).
  optim::StepValues step_values(double lr) const;
  // After the optimizer: zero gradients, step the scheduler, advance the counters.
  Status finish_step(StepStats& stats);
  // forward()'s checks of a micro-batch; the number of counted targets.
  Result<int64_t> check_batch(const Tensor& tokens, const Tensor& targets) const;
  // CUDA graphs (runtime/engine_graph.cc): the step's buffers and its graph.
  struct GraphState;
  std::unique_ptr<GraphState> graph_;
  // The three calls of train_batch, on tensors already checked.
  Status eager_batch(const Tensor& tokens, const Tensor& targets);
  // Queues one whole step on the stream (what the graph captures).
  Status queue_graph_step(int64_t counted, optim::StepValues v);
  // What step() does after apply_step: the counters, last_step(), the progress line.
  void end_step(const StepStats& stats);
  void report_progress() const;
  // A save in flight (save_checkpoint_async): the shard is written from a host snapshot by a
  // thread of its own; rank 0's thread then waits for every rank's note and publishes.
  struct PendingSave {
    std::thread thread;
    Status result;
    std::string path;
    int64_t step = 0;
    int64_t bytes = 0;
  };
  Result<std::string> save_begin(const std::string& dir, const std::string& tag);
  std::vector<ckpt::TensorToWrite> shard_tensors();
  nlohmann::json checkpoint_metadata(const std::string& tag, const nlohmann::json& client) const;
  enum class RestorePhase : unsigned char { kCheck, kApply };
  Status restore_from(const nlohmann::json& meta, const std::string& path,
                      const CheckpointLoadOptions& options, RestorePhase phase);

  nn::Model& model_;
  DeepSpeedConfig config_;
  EngineOptions options_;
  nn::Context ctx_;
  DType round_dtype_;  // the precision parameters are rounded to (CPU emulation of bf16/fp16)
  std::unique_ptr<Communicator> own_comm_;  // when the caller gave none
  Communicator* comm_ = nullptr;
  std::unique_ptr<zero::ZeroState> zero_;
  optim::Optimizer optimizer_;
  std::unique_ptr<LrScheduler> scheduler_;
  LossScaler scaler_;
  Tensor targets_dev_;
  Tensor attention_mask_dev_;
  Tensor found_inf_;  // (1) f32
  // (2) f64 on the device: the gradients' sum of squares (the norm's accumulator on both step
  // paths), the mean loss (apply_step_on_device)
  Tensor step_sums_;
  Tensor grad_factor_;  // (1) f32 on the device: grad_clip_scale's output
  Tensor step_sums_host_;  // (2) f64 page-locked: step_sums_'s way in and out (GPU engines)
  int64_t global_steps_ = 0, global_samples_ = 0, skipped_steps_ = 0, micro_steps_ = 0;
  double loss_sum_ = 0;
  int loss_count_ = 0;
  bool have_forward_ = false;
  // forward_token_losses: the head's gradient at weight 1 per position, and the losses it gave.
  bool per_token_ = false;
  std::vector<double> token_losses_;
  // The micro-batch's attention mask on the device, in the context (none: cleared).
  void bind_attention_mask(const Tensor* attention_mask);
  // The backward of the current micro-step: from the head's own loss gradient, or from `dout`.
  Status backward_pass(float loss, const Tensor& dout);
  std::optional<StepStats> last_step_;
  // wall_clock_breakdown (null without it): DeepSpeed's micro-step and global timers.
  std::unique_ptr<EventTimers> timers_;
  // flops_profiler (unset when not enabled); the unit timer lives through the profiled step.
  std::optional<FlopsProfilerOptions> profiler_;
  std::unique_ptr<UnitForwardTimer> unit_timer_;
  int64_t profiled_rows_ = 0, profiled_seq_ = 0;
  int profiled_micro_steps_ = 0;
  void profiler_report(const StepStats& stats);
  void timer_start(const char* micro, const char* global);
  void timer_stop(const char* micro, const char* global);
  std::unique_ptr<PendingSave> pending_save_;
  Tensor save_snapshot_;  // host copy an asynchronous save writes from
  int64_t last_step_groups_ = 0;
};

// The ZeroOptions an engine on `device` builds from `config` (everything but the stream and the
// communicator, which the engine adds): what `zt estimate` predicts with, so the two agree.
zero::ZeroOptions zero_options_from_config(const DeepSpeedConfig& config, Device device,
                                           const optim::OptimizerSpec& optimizer,
                                           int64_t offload_piece_elements = int64_t{1} << 23);

// DeepSpeed's deepspeed.initialize for ZeroTrain models: validates the config against this
// process (device, dtype), builds the engine. Errors name the key or device at fault.
Result<std::unique_ptr<Engine>> initialize(nn::Model& model, const DeepSpeedConfig& config,
                                           const EngineOptions& options = {});

// The optimizer spec a config asks for (AdamW with DeepSpeed's defaults when there is no block).
optim::OptimizerSpec optimizer_spec_from_config(const DeepSpeedConfig& config);

}  // namespace zt
