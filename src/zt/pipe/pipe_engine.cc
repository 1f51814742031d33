#include "zt/pipe/pipe_engine.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include <fmt/ranges.h>

#include "zt/checkpoint/unit_layout.h"
#include "zt/core/log.h"
#include "zt/pipe/partition.h"
#include "zt/runtime/flops_profiler.h"

namespace zt::pipe {

// One pipeline buffer: what a micro-batch in flight on this stage holds.
struct PipelineEngine::Buffer {
  Tensor input;     // the received activation, or the tokens on the first stage (device)
  Tensor output;    // the forward's output: the activation to send, or the last stage's losses
  Tensor grad_in;   // the received gradient of the output
  Tensor grad_out;  // the gradient of the input, to send back
  Tensor targets;   // the last stage's targets (device)
  Tensor mask;      // the padding mask (device; undefined: none), loaded or received
  int64_t counted = 0;  // targets counted in the loss (not kIgnoreTarget)
  nn::Context ctx;      // the passes' context: targets and dloss of this micro-batch
};

namespace {

// The shape and dtype message before a batch's first activation: dtype, ndim, dims, and whether
// a padding mask follows each activation.
constexpr int64_t kMetaLen = 3 + Shape::kMaxDims;

Tensor meta_of(const Tensor& t, bool mask, Device dev) {
  std::vector<double> v(kMetaLen, 0.0);
  v[kMetaLen - 1] = mask ? 1.0 : 0.0;
  v[0] = static_cast<double>(static_cast<int>(t.dtype()));
  v[1] = t.ndim();
  for (int i = 0; i < t.ndim(); ++i) v[static_cast<size_t>(2 + i)] = static_cast<double>(t.size(i));
  return Tensor::from_doubles(v, {kMetaLen}, DType::i64, dev);
}

}  // namespace

Result<std::unique_ptr<PipelineEngine>> PipelineEngine::create(const ModelFactory& factory,
                                                               const DeepSpeedConfig& config,
                                                               const PipelineOptions& options) {
  if (config.zero.stage >= 2 && options.stages == 1 && options.tensor > 1) {
    return invalid_argument(
        "zero_optimization.stage {} with --tensor-parallel-size is not supported yet: use stage 0 "
        "or 1",
        config.zero.stage);
  }
  if (config.zero.stage >= 2) {
    return invalid_argument(
        "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism (zero_optimization.stage "
        "is {}; DeepSpeed refuses it too): use stage 0 or 1 with --pipeline-parallel-size",
        config.zero.stage);
  }
  if (options.sequence_parallel && options.tensor < 2) {
    return invalid_argument(
        "--sequence-parallel splits the tokens of a tensor-parallel group: it needs "
        "--tensor-parallel-size 2 or more (got {})",
        options.tensor);
  }
  std::unique_ptr<PipelineEngine> pe(new PipelineEngine());
  pe->config_ = config;
  pe->sequence_parallel_ = options.sequence_parallel;
  if (options.engine.comm == nullptr) {
    auto c = communicator_create(DistEnv{}, options.engine.device);
    if (!c.is_ok()) return c.status();
    pe->own_world_ = std::move(c).value();
    pe->world_ = pe->own_world_.get();
  } else {
    pe->world_ = options.engine.comm;
  }
  Communicator& world = *pe->world_;
  ZT_ASSIGN_OR_RETURN(ProcessTopology topo,
                      topology_for_world(world.world_size(),
                                         {.pipeline = options.stages, .tensor = options.tensor}));
  pe->topology_ = topo;
  ZT_ASSIGN_OR_RETURN(pe->grid_, pipe_grid(topo, world.rank()));
  const PipeGrid& g = pe->grid_;
  const int S = g.pipe_parallel_size;
  const ModelShard shard{.tp_rank = g.slice_rank, .tp_size = g.slice_parallel_size};

  // The partition, from one model (every rank computes the same: the tensor-parallel parts
  // of a unit are alike, and the partition counts the units' parameters over all ranks alike).
  ZT_ASSIGN_OR_RETURN(std::unique_ptr<nn::Model> first, factory(shard));
  const std::vector<int> running = running_units(*first);
  const std::vector<UnitInfo> all = describe_units(*first);
  std::vector<UnitInfo> infos;
  for (int u : running) infos.push_back(all[static_cast<size_t>(u)]);
  // Each unit's forward FLOPs for a micro-batch (the "compute" method), where the model is one of
  // the transformer families (others leave them unknown).
  if (const auto* t = dynamic_cast<const nn::Transformer*>(first.get())) {
    const std::vector<UnitCost> costs = transformer_forward_costs(
        *t, config.train_micro_batch_size_per_gpu, std::max<int64_t>(1, options.seq_len));
    for (size_t k = 0; k < running.size(); ++k) {
      infos[k].flops = costs[static_cast<size_t>(running[k])].flops;
    }
  }
  auto parts = partition_units(infos, S, options.partition_method);
  if (!parts.is_ok()) {
    return parts.status().with_context(fmt::format(
        "partitioning {}'s {} units over --pipeline-parallel-size {}: ", first->name(),
        infos.size(), S));
  }
  pe->parts_ = *parts;
  std::vector<StagePlan> plans;
  for (int s = 0; s < S; ++s) {
    ZT_ASSIGN_OR_RETURN(StagePlan p, stage_plan(*first, pe->parts_, s));
    plans.push_back(std::move(p));
  }
  // Tied units: a unit some stage holds as a copy, and the stages holding it (owner + copies).
  std::map<int, std::set<int>> holders;
  for (const StagePlan& p : plans) {
    for (size_t i = 0; i < p.copies.size(); ++i) {
      holders[p.copies[i]].insert(p.copy_owners[i]);
      holders[p.copies[i]].insert(p.stage);
    }
  }

  // The groups, created in the same order on every rank: data-parallel (one per stage),
  // pipelines (one per data index), then each pipeline's tied groups.
  for (const auto& list : topo.axis_comm_lists(kAxisData)) {
    ZT_ASSIGN_OR_RETURN(auto c, world.new_group(list));
    if (c) pe->dp_comm_ = std::move(c);
  }
  const auto pipelines = topo.axis_comm_lists(kAxisPipe);
  for (const auto& list : pipelines) {
    ZT_ASSIGN_OR_RETURN(auto c, world.new_group(list));
    if (c) pe->pp_comm_ = std::move(c);
  }
  const StagePlan& mine = plans[static_cast<size_t>(g.stage_id)];
  for (const auto& list : pipelines) {
    const bool my_pipeline = std::find(list.begin(), list.end(), world.rank()) != list.end();
    for (const auto& [unit, stages] : holders) {
      std::vector<int> ranks;
      for (int s : stages) ranks.push_back(list[static_cast<size_t>(s)]);
      ZT_ASSIGN_OR_RETURN(auto c, world.new_group(ranks));
      if (!my_pipeline || !stages.contains(g.stage_id)) continue;
      const auto at = std::find(mine.units.begin(), mine.units.end(), unit);
      ZT_ASSERT(at != mine.units.end(), "tied unit {} is not held by stage {}", unit, g.stage_id);
      pe->tied_.push_back(Tied{static_cast<int>(at - mine.units.begin()), std::move(c)});
    }
  }
  if (g.slice_parallel_size > 1) {
    for (const auto& list : topo.axis_comm_lists(kAxisModel)) {
      ZT_ASSIGN_OR_RETURN(auto c, world.new_group(list));
      if (c) pe->tp_comm_ = std::move(c);
    }
    for (int d = 0; d < g.data_parallel_size; ++d) {
      ZT_ASSIGN_OR_RETURN(auto c, world.new_group(topo.filter_match({{kAxisData, d}})));
      if (c) pe->mp_comm_ = std::move(c);
    }
    // Key/value heads fewer than the tensor ranks: each is held by R consecutive tensor ranks
    // (nn::ParamSlice::replicas), which sum its gradient before the step.
    int replicas = 1;
    for (const auto& u : first->units()) {
      for (const nn::Param* p : u->params()) {
        if (p->slice) replicas = std::max(replicas, p->slice->replicas);
      }
    }
    if (replicas > 1) {
      for (const auto& list : topo.axis_comm_lists(kAxisModel)) {
        for (size_t i = 0; i + replicas <= list.size(); i += static_cast<size_t>(replicas)) {
          const std::vector<int> ranks(list.begin() + static_cast<std::ptrdiff_t>(i),
                                       list.begin() + static_cast<std::ptrdiff_t>(i + replicas));
          ZT_ASSIGN_OR_RETURN(auto c, world.new_group(ranks));
          if (c) pe->replica_comm_ = std::move(c);
        }
      }
    }
  }
  ZT_ASSERT(pe->dp_comm_ && pe->pp_comm_, "rank {} is in no data-parallel or pipeline group",
            world.rank());

  // Checkpoints describe the whole model: every unit, with the stage that saves it, and with
  // tensor parallelism what each tensor rank's part of it holds (the other ranks' parts are
  // built for their slices alone: a model holds no parameter memory until an engine binds it).
  CheckpointStage cs{.stage = g.stage_id,
                     .stages = S,
                     .tensor_rank = g.slice_rank,
                     .tensor = g.slice_parallel_size,
                     .whole_units = nlohmann::json::array(),
                     .job_comm = &world};
  {
    std::vector<std::unique_ptr<nn::Model>> others;
    std::vector<const nn::Model*> tensor_parts;
    for (int t = 0; t < g.slice_parallel_size; ++t) {
      if (t == g.slice_rank) {
        tensor_parts.push_back(first.get());
        continue;
      }
      ZT_ASSIGN_OR_RETURN(auto m, factory({.tp_rank = t, .tp_size = g.slice_parallel_size}));
      if (m->units().size() != first->units().size()) {
        return invalid_argument("tensor-parallel rank {}'s part of {} has {} units, rank {}'s {}",
                                t, first->name(), m->units().size(), g.slice_rank,
                                first->units().size());
      }
      tensor_parts.push_back(m.get());
      others.push_back(std::move(m));
    }
    std::vector<int> owner(first->units().size(), 0);
    for (const StagePlan& p : plans) {
      for (int u : p.units) {
        if (std::find(p.copies.begin(), p.copies.end(), u) == p.copies.end()) {
          owner[static_cast<size_t>(u)] = p.stage;
        }
      }
    }
    for (size_t u = 0; u < first->units().size(); ++u) {
      std::vector<const nn::Unit*> parts;
      for (const nn::Model* m : tensor_parts) parts.push_back(m->units()[u].get());
      nlohmann::json j = ckpt::unit_json(parts);
      j["stage"] = owner[u];
      cs.whole_units.push_back(std::move(j));
    }
    for (int u : mine.units) {
      cs.global_unit.push_back(u);
      cs.saved.push_back(std::find(mine.copies.begin(), mine.copies.end(), u) ==
                         mine.copies.end());
    }
  }

  // One stage model per pipeline buffer (the most micro-batches in flight on this stage).
  const int buffers =
      train_num_pipe_buffers(config.gradient_accumulation_steps, S, g.stage_id);
  pe->models_.push_back(std::make_unique<StageModel>(std::move(first), mine));
  for (int k = 1; k < buffers; ++k) {
    ZT_ASSIGN_OR_RETURN(std::unique_ptr<nn::Model> whole, factory(shard));
    pe->models_.push_back(std::make_unique<StageModel>(std::move(whole), mine));
  }
  EngineOptions eo = options.engine;
  eo.comm = pe->dp_comm_.get();
  eo.model_parallel_comm = pe->mp_comm_ ? pe->mp_comm_.get() : pe->pp_comm_.get();
  eo.norm_skip_replicated = g.slice_rank > 0;  // (the whole parameters: tensor rank 0 counts)
  eo.norm_excluded_units = pe->models_.front()->copy_indices();
  eo.checkpoint_stage = std::move(cs);
  ZT_ASSIGN_OR_RETURN(pe->engine_, initialize(*pe->models_.front(), config, eo));
  pe->buffers_.resize(static_cast<size_t>(buffers));
  pe->time_passes_ = options.time_passes;
  pe->bind_copies();
  if (config.gradient_accumulation_steps < S && world.rank() == 0) {
    ZT_LOG_WARN(
        "pipeline: {} micro-batches (gradient_accumulation_steps) on {} stages: each stage idles "
        "for {:.0f}% of a batch (the bubble, (P-1)/(m+P-1)); use at least {} micro-batches",
        config.gradient_accumulation_steps, S,
        100.0 * (S - 1) / (config.gradient_accumulation_steps + S - 1), S);
  }
  if (g.data_parallel_id == 0) {
    ZT_LOG_INFO("pipeline: {}", pe->describe());
  }
  return pe;
}

PipelineEngine::~PipelineEngine() {
  for (CommHandle& h : step_handles_) (void)h.wait();
  engine_.reset();  // before the stage models and the groups it uses
}

std::string PipelineEngine::describe() const {
  const StageModel& m = *models_.front();
  std::string units;
  for (size_t i = 0; i < m.units().size(); ++i) {
    if (!m.runs_unit(i)) continue;
    units += (units.empty() ? "" : ", ") + m.units()[i]->name();
  }
  std::string copies;
  for (int c : m.copy_indices()) {
    copies += fmt::format("{}{}", copies.empty() ? "; holds a copy of " : ", ",
                          m.units()[static_cast<size_t>(c)]->name());
  }
  const std::string tensor =
      grid_.slice_parallel_size > 1
          ? fmt::format(", tensor-parallel rank {} of {}{}", grid_.slice_rank,
                        grid_.slice_parallel_size, sequence_parallel_ ? ", sequence-parallel" : "")
          : std::string();
  return fmt::format("{} ranks as {}; stage {} of {} (data-parallel index {}{}): units {}{}",
                     topology_->world_size(), topology_->describe(), grid_.stage_id,
                     grid_.pipe_parallel_size, grid_.data_parallel_id, tensor, units, copies);
}

Status PipelineEngine::reduce_replicated_grads() {
  if (!replica_comm_) return Status::ok();
  // The batch's gradients of the shared rows, each rank's from its own query heads: summed once
  // per batch (the buffers hold every micro-batch's), before the data-parallel reduction.
  std::vector<Tensor> parts;
  StageModel& m = *models_.front();
  for (size_t u = 0; u < m.units().size(); ++u) {
    if (!m.runs_unit(u)) continue;
    for (nn::Param* p : m.units()[u]->params()) {
      if (!p->slice || p->slice->replicas <= 1 || !p->grad.defined()) continue;
      for (const auto& [lo, hi] : p->slice->replicated) parts.push_back(p->grad.view(lo, {hi - lo}));
    }
  }
  if (parts.empty()) return Status::ok();
  return replica_comm_->all_reduce_coalesced(parts, ReduceOp::kSum, engine_->stream()).wait();
}

void PipelineEngine::bind_copies() {
  // The copies add into the buffers the model's own units write first: whichever runs the
  // batch's first backward, it adds to zeros.
  engine_->zero_state().clear_unwritten_grads();
  auto& states = engine_->zero_state().units();
  for (size_t k = 1; k < models_.size(); ++k) {
    auto& units = models_[k]->units();
    for (size_t u = 0; u < units.size(); ++u) {
      units[u]->bind_values(states[u].value);
      if (states[u].grad.defined()) units[u]->bind_grads(states[u].grad);
    }
  }
}

Result<double> PipelineEngine::train_batch(const std::function<Result<MicroBatch>()>& next) {
  const int M = config_.gradient_accumulation_steps;
  ZT_ASSIGN_OR_RETURN(Schedule schedule,
                      train_schedule(M, grid_.pipe_parallel_size, grid_.stage_id));
  bind_copies();  // (the engine may have replaced a buffer: a checkpoint load)
  sent_meta_ = got_meta_ = false;
  loss_sum_ = 0;
  loss_count_ = 0;
  pending_losses_.clear();
  in_flight_ = peak_activations_ = 0;
  busy_ms_ = 0;
  const auto batch_start = std::chrono::steady_clock::now();
  Status failed;
  for (const Step& step : schedule.steps) {
    for (const Instruction& in : step) {
      failed = run_instruction(in, next);
      if (!failed.is_ok()) break;
    }
    // The step's sends (and a GPU's receives) complete before the next step reuses a buffer.
    for (CommHandle& h : step_handles_) {
      Status s = h.wait();
      if (failed.is_ok() && !s.is_ok()) failed = s;
    }
    step_handles_.clear();
    step_keep_.clear();
    if (!failed.is_ok()) break;
  }
  for (Buffer& b : buffers_) b = Buffer{};
  ZT_RETURN_IF_ERROR(failed);
  if (time_passes_) engine_->stream().synchronize();
  batch_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                        batch_start)
                  .count();
  const auto& last = engine_->last_step();
  return last ? last->loss : 0.0;
}

Status PipelineEngine::run_instruction(const Instruction& in,
                                       const std::function<Result<MicroBatch>()>& next) {
  const bool pass = in.op == Op::kForwardPass || in.op == Op::kBackwardPass;
  if (!time_passes_ || !pass) return after_pass(execute(in, next));
  // Only the pass itself: what it waits for (a receive on the stream) is not its work.
  engine_->stream().synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  Status s = execute(in, next);
  engine_->stream().synchronize();
  busy_ms_ +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return after_pass(std::move(s));
}

Status PipelineEngine::after_pass(Status s) {
  // The pass's tensor-parallel collectives complete with the step's sends (a GPU orders them on
  // the stream already; on the CPU only failures are left here).
  for (CommHandle& h : tp_pending_) step_handles_.push_back(std::move(h));
  tp_pending_.clear();
  return s;
}

Status PipelineEngine::execute(const Instruction& in,
                               const std::function<Result<MicroBatch>()>& next) {
  const bool first = grid_.is_first_stage(), last = grid_.is_last_stage();
  const Device dev = engine_->device();
  const Stream& stream = engine_->stream();
  Communicator& world = *world_;
  Buffer* b = in.buffer_id >= 0 ? &buffers_[static_cast<size_t>(in.buffer_id)] : nullptr;
  StageModel* model = in.buffer_id >= 0 ? models_[static_cast<size_t>(in.buffer_id)].get() : nullptr;
  switch (in.op) {
    case Op::kLoadMicroBatch: {
      ZT_ASSIGN_OR_RETURN(MicroBatch mb, next());
      // The model's own rule (tokens and targets, or images and labels); both ends check the
      // whole micro-batch, so they agree on it.
      Result<int64_t> counted = models_.front()->check_batch(mb.tokens, mb.targets);
      if (!counted) {
        return counted.status().with_context(fmt::format("pipeline micro-batch {}: ", in.micro_batch));
      }
      if (first) b->input = mb.tokens.to(dev, stream);
      if (last) {
        b->counted = *counted;
        b->targets = mb.targets.to(dev, stream);
      }
      if (mb.attention_mask.defined() && (mb.attention_mask.dtype() != DType::i32 ||
                                          !(mb.attention_mask.shape() == mb.tokens.shape()))) {
        return invalid_argument(
            "pipeline micro-batch {}: the attention mask must be (batch, seq) i32 like the tokens "
            "{}, got {}",
            in.micro_batch, mb.tokens.shape().str(), mb.attention_mask.shape().str());
      }
      b->mask = mb.attention_mask.defined() ? mb.attention_mask.to(dev, stream) : Tensor();
      return Status::ok();
    }
    case Op::kForwardPass: {
      b->ctx = engine_->train_context();
      b->ctx.attention_mask = b->mask.defined() ? &b->mask : nullptr;
      if (last) {
        b->ctx.targets = &b->targets;
        b->ctx.dloss =
            b->counted == 0
                ? 0.0f
                : static_cast<float>(engine_->loss_scale() /
                                     (static_cast<double>(config_.gradient_accumulation_steps) *
                                      static_cast<double>(b->counted)));
      }
      // The micro-step this micro-batch is, as the engine counts them (the same masks as an
      // engine running the batch's micro-batches one after another).
      b->ctx.dropout_seed = engine_->dropout_seed(engine_->micro_steps() + in.micro_batch);
      b->ctx.tp_rank = grid_.slice_rank;
      b->ctx.tp_size = grid_.slice_parallel_size;
      b->ctx.tp_comm = tp_comm_.get();
      b->ctx.tp_pending = &tp_pending_;
      b->ctx.sequence_parallel = sequence_parallel_;
      b->output = model->forward(b->ctx, b->input, nullptr);
      peak_activations_ = std::max(peak_activations_, ++in_flight_);
      // The per-token losses are read at the optimizer step, all at once: reading each
      // micro-batch's here would make the host wait for every forward before it queues the
      // backward (the tensor keeps them; the fused backward overwrites only the logits).
      if (last) pending_losses_.emplace_back(b->output, b->counted);
      return Status::ok();
    }
    case Op::kBackwardPass: {
      b->grad_out = model->backward(b->ctx, last ? Tensor() : b->grad_in, nullptr);
      --in_flight_;
      if (!first && !(b->grad_out.defined() && b->grad_out.shape() == b->input.shape() &&
                      b->grad_out.dtype() == b->input.dtype())) {
        return invalid_argument(
            "pipeline stage {}: the gradient of its input is {} {}, the input was {} {}; a "
            "stage's first unit must return the gradient of its input",
            grid_.stage_id, b->grad_out.defined() ? b->grad_out.shape().str() : "undefined",
            b->grad_out.defined() ? dtype_name(b->grad_out.dtype()) : "",
            b->input.shape().str(), dtype_name(b->input.dtype()));
      }
      b->input = Tensor();
      b->output = Tensor();
      b->grad_in = Tensor();
      b->targets = Tensor();
      return Status::ok();
    }
    case Op::kSendActivation: {
      if (!sent_meta_) {
        step_keep_.push_back(meta_of(b->output, b->mask.defined(), dev));
        step_handles_.push_back(world.send(step_keep_.back(), grid_.next_stage_rank, stream));
        sent_meta_ = true;
      }
      step_handles_.push_back(world.send(b->output, grid_.next_stage_rank, stream));
      if (b->mask.defined()) {
        step_handles_.push_back(world.send(b->mask, grid_.next_stage_rank, stream));
      }
      return Status::ok();
    }
    case Op::kRecvActivation: {
      if (!got_meta_) {
        Tensor meta = Tensor::zeros({kMetaLen}, DType::i64, dev);
        ZT_RETURN_IF_ERROR(world.recv(meta, grid_.prev_stage_rank, stream).wait());
        const std::vector<double> v = meta.to_doubles();
        const int ndim = static_cast<int>(v[1]);
        ZT_ASSERT(ndim >= 1 && ndim <= Shape::kMaxDims, "pipeline: activation of {} dims", ndim);
        std::vector<int64_t> dims;
        for (int i = 0; i < ndim; ++i) dims.push_back(static_cast<int64_t>(v[static_cast<size_t>(2 + i)]));
        act_shape_ = Shape(dims);
        act_dtype_ = static_cast<DType>(static_cast<int>(v[0]));
        recv_mask_ = v[kMetaLen - 1] != 0.0;
        got_meta_ = true;
      }
      b->input = Tensor::empty(act_shape_, act_dtype_, dev, stream);
      CommHandle h = world.recv(b->input, grid_.prev_stage_rank, stream);
      if (dev.is_cpu()) ZT_RETURN_IF_ERROR(h.wait());  // the forward reads it next
      if (!dev.is_cpu()) step_handles_.push_back(std::move(h));
      if (recv_mask_) {  // (its rows and positions are the activation's first two dims)
        b->mask = Tensor::empty({act_shape_[0], act_shape_[1]}, DType::i32, dev, stream);
        CommHandle m = world.recv(b->mask, grid_.prev_stage_rank, stream);
        if (dev.is_cpu()) return m.wait();
        step_handles_.push_back(std::move(m));
      }
      return Status::ok();
    }
    case Op::kSendGrad:
      step_handles_.push_back(world.send(b->grad_out, grid_.prev_stage_rank, stream));
      return Status::ok();
    case Op::kRecvGrad: {
      b->grad_in = Tensor::empty(b->output.shape(), b->output.dtype(), dev, stream);
      CommHandle h = world.recv(b->grad_in, grid_.next_stage_rank, stream);
      if (dev.is_cpu()) return h.wait();
      step_handles_.push_back(std::move(h));
      return Status::ok();
    }
    case Op::kReduceTiedGrads: {
      auto& states = engine_->zero_state().units();
      for (Tied& t : tied_) {
        Tensor& grad = states[static_cast<size_t>(t.unit)].grad;
        if (t.comm == nullptr || !grad.defined()) continue;
        ZT_RETURN_IF_ERROR(t.comm->all_reduce(grad, ReduceOp::kSum, stream).wait());
      }
      return Status::ok();
    }
    case Op::kReduceGrads:
      ZT_RETURN_IF_ERROR(reduce_replicated_grads());
      return engine_->zero_state().reduce_grads();
    case Op::kOptimizerStep: {
      // The last stage's mean loss over the micro-batches, on every stage of the pipeline.
      for (const auto& [losses, counted] : pending_losses_) {
        double sum = 0;
        for (double v : losses.to_doubles()) sum += v;
        // Rounded to float as Engine::forward returns it, so one stage reports what the engine
        // does.
        loss_sum_ += counted == 0 ? 0.0f : static_cast<float>(sum / static_cast<double>(counted));
        ++loss_count_;
      }
      pending_losses_.clear();
      Tensor loss = Tensor::from_doubles(
          {loss_count_ > 0 ? loss_sum_ / loss_count_ : 0.0}, {1}, DType::f64, dev);
      ZT_RETURN_IF_ERROR(
          pp_comm_->broadcast(loss, grid_.pipe_parallel_size - 1, stream).wait());
      return engine_->pipeline_step(loss.to_doubles()[0]);
    }
  }
  return Status::ok();
}

}  // namespace zt::pipe
