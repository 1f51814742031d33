// Engine::train_batch and the CUDA-graph step (EngineOptions::cuda_graph).
//
// The graph holds one whole training step of one micro-batch, exactly as the eager path queues
// it on a GPU without host round trips (apply_step_on_device): the micro-batch copied in, the
// model's forward and backward, the gradients' sum of squares and the clip factor on the device,
// and the optimizer. What changes from step to step without changing the kernels comes from
// device memory: the micro-batch (copied from page-locked staging buffers by the graph's first
// nodes), Adam's learning rate and bias corrections (AdamArgs::scalars_at), the clip factor (as
// on the eager path). The per-token losses and the sum of squares go back to page-locked buffers
// by the graph's last nodes; the host sums the losses as forward() does, so the loss is the eager
// path's to the bit. What depends on the host per step but is baked into the kernels' arguments
// (the loss gradient's 1/counted) keys the graph: a micro-batch with another count of counted
// targets captures again, and a run whose count keeps changing stops capturing.
//
// Capture: after kWarmupSteps eager steps (cuBLASLt's heuristics, cuDNN's plans, the rotary
// tables and the allocator's blocks are made by then), the step is queued under stream capture
// (core/device.h CapturedGraph, which keeps the allocator's blocks of the capture for the graph).
// If CUDA refuses the capture, nothing of it ran: its host-side effects on the engine and ZeRO's
// state are undone and the step runs eagerly, with a warning, and the run goes on without the
// graph.
#include <array>
#include <cmath>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "zt/core/log.h"
#include "zt/kernels/ops.h"
#include "zt/nn/models/transformer.h"
#include "zt/runtime/engine_graph.h"
#include "zt/zero/zero_state.h"

namespace zt {
namespace {

constexpr int kWarmupSteps = 2;
// A graph is captured again when the micro-batch's shape or count of counted targets changes;
// after this many captures the run stops capturing (SFT's padded rows change it every step).
constexpr int kMaxCaptures = 3;

}  // namespace

std::string Engine::graph_refusal() const {
  if (!options_.device.is_cuda()) return "the engine is not on a GPU";
  if (comm_->backend_name() != "stub" || options_.model_parallel_comm != nullptr) {
    return "it captures the step of one process training alone (this one has a communicator)";
  }
  if (config_.gradient_accumulation_steps != 1) {
    return fmt::format(
        "gradient_accumulation_steps is {}; the graph is the step of one micro-batch",
        config_.gradient_accumulation_steps);
  }
  if (scaler_.checks_overflow()) {
    return "fp16's overflow check reads the gradients' state back on the host";
  }
  if (zero_->offloaded()) return "the optimizer runs on the CPU (offload_optimizer)";
  if (config_.zero.stage >= 3) return "ZeRO stage 3 gathers and releases parameters in the step";
  if (optimizer_.spec().kind != optim::OptimizerKind::kAdam) {
    return "the optimizer is not Adam or AdamW";
  }
  if (scheduler_ && (scheduler_->momentum() || scheduler_->beta2())) {
    return "the scheduler cycles Adam's betas";
  }
  if (timers_ || profiler_) return "wall_clock_breakdown or the flops profiler time its parts";
  if (ctx_.checkpoint_to_host) return "activation checkpoints go to host memory";
  // LoRA adapters draw a new dropout mask every step from a seed the graph would bake in; without
  // dropout they are plain GEMMs and capture like the rest.
  for (const auto& u : model_.units()) {
    auto* block = dynamic_cast<nn::TransformerBlock*>(u.get());
    if (block == nullptr) continue;
    for (const nn::Linear* l : block->linears()) {
      for (const nn::LoraAdapter& a : l->adapters()) {
        if (a.dropout > 0) {
          return "the LoRA adapters' dropout masks change per step (lora_dropout > 0)";
        }
      }
    }
  }
  return {};
}

int64_t Engine::graph_replays() const {
  return graph_ != nullptr ? graph_->replays : 0;
}

Status Engine::eager_batch(const Tensor& tokens, const Tensor& targets) {
  ZT_ASSIGN_OR_RETURN(const float loss, forward(tokens, targets));
  ZT_RETURN_IF_ERROR(backward(loss));
  return step();
}

Status Engine::train_batch(const Tensor& tokens, const Tensor& targets) {
  if (!options_.cuda_graph || (graph_ != nullptr && graph_->off)) {
    return eager_batch(tokens, targets);
  }
  if (const std::string why = graph_refusal(); !why.empty()) {
    ZT_LOG_WARN("--cuda-graph: the training step runs without a CUDA graph: {}", why);
    graph_ = std::make_unique<GraphState>();
    graph_->off = true;
    return eager_batch(tokens, targets);
  }
  ZT_ASSIGN_OR_RETURN(const int64_t counted, check_batch(tokens, targets));
  const Device dev = options_.device;
  const Stream& s = ctx_.stream;
  if (graph_ == nullptr || !(graph_->shape == tokens.shape())) {
    // Buffers for this shape (a new shape captures anew, after its own warm-up; the captures
    // made for earlier shapes still count against kMaxCaptures).
    auto g = std::make_unique<GraphState>();
    g->shape = tokens.shape();
    if (graph_ != nullptr) g->captures = graph_->captures;
    const DType acc = kernels::accum_dtype(ctx_.compute_dtype);
    g->tokens_host = Tensor::empty_pinned(g->shape, DType::i32);
    g->targets_host = Tensor::empty_pinned(g->shape, DType::i32);
    g->scalars_host = Tensor::empty_pinned({3}, DType::f32);
    g->losses_host = Tensor::empty_pinned({g->shape.numel()}, acc);
    g->sumsq_host = Tensor::empty_pinned({1}, DType::f64);
    g->tokens = Tensor::empty(g->shape, DType::i32, dev, s);
    g->targets = Tensor::empty(g->shape, DType::i32, dev, s);
    g->scalars = Tensor::empty({3}, DType::f32, dev, s);
    graph_ = std::move(g);
  }
  GraphState& g = *graph_;
  if (g.eager_steps < kWarmupSteps) {
    ++g.eager_steps;
    return eager_batch(tokens, targets);
  }
  if (g.graph == nullptr || g.counted != counted) {
    g.graph.reset();  // the loss gradient's 1/counted is in the kernels' arguments
    if (g.captures >= kMaxCaptures) {
      ZT_LOG_INFO(
          "--cuda-graph: {} captures so far, and the micro-batches' shape or counted targets "
          "({} now) keep changing; the step runs without a CUDA graph from here on",
          g.captures, counted);
      g.off = true;
      return eager_batch(tokens, targets);
    }
  }

  // The micro-batch and the step's scalars into the staging buffers (the last step's read-back
  // waited for the graph, so nothing reads them now).
  const Tensor tok = tokens.device().is_cpu() ? tokens : tokens.to(Device::cpu());
  const Tensor tgt = targets.device().is_cpu() ? targets : targets.to(Device::cpu());
  std::memcpy(g.tokens_host.data(), tok.data(), tok.nbytes());
  std::memcpy(g.targets_host.data(), tgt.data(), tgt.nbytes());
  StepStats stats;
  stats.lr = lr();
  const double scale = scaler_.scale();
  stats.loss_scale = scale;
  const optim::StepValues v = step_values(stats.lr);
  const std::array<float, 3> k = optimizer_.next_adam_scalars(v);
  std::memcpy(g.scalars_host.data(), k.data(), sizeof(k));

  if (g.graph == nullptr) {
    ++g.captures;
    const int64_t steps_before = optimizer_.steps();
    Status queued;
    try {
      queued = CapturedGraph::begin(s);
      if (queued.is_ok()) {
        try {
          queued = queue_graph_step(counted, v);
        } catch (const std::exception& e) {
          queued = unavailable("{}", e.what());
        }
        auto captured = CapturedGraph::end(s);
        if (queued.is_ok() && !captured.is_ok()) queued = captured.status();
        if (queued.is_ok()) g.graph = std::move(captured).value();
      }
    } catch (const std::exception& e) {
      queued = unavailable("{}", e.what());
    }
    if (!queued.is_ok()) {
      // Nothing of the capture ran on the GPU: undo what it did on the host (the optimizer's
      // step count, what the pass queued for reduction, the gradients' written marks; the
      // units' saved activations are replaced by the next forward) and run this step and the
      // next ones eagerly.
      optimizer_.set_steps(steps_before);
      zero_->abandon_pass();
      zero_->zero_grads();
      ctx_.targets = nullptr;
      g.off = true;
      ZT_LOG_WARN(
          "--cuda-graph: the training step could not be captured ({}); it runs without "
          "a CUDA graph",
          queued.message());
      return eager_batch(tokens, targets);
    }
    g.counted = counted;
  } else {
    optimizer_.begin_step();  // (the capture's optimizer_step counted the captured step)
  }
  g.graph->launch(s);
  ++g.replays;
  s.synchronize();

  // What step() reads back: the loss as forward() sums it, and the gradients' norm.
  Status us = scaler_.update(false);  // (bf16 and fp32: nothing to check; counts the iteration)
  if (!scaler_.log_line().empty() && comm_->rank() == 0) ZT_LOG_INFO("{}", scaler_.log_line());
  ZT_RETURN_IF_ERROR(us);
  const std::vector<double> losses = g.losses_host.to_doubles();
  double sum = 0;
  for (double l : losses) sum += l;
  stats.loss = counted == 0 ? 0.0f : static_cast<float>(sum / static_cast<double>(counted));
  const double total = std::sqrt(g.sumsq_host.data<double>()[0]);
  stats.grad_norm = std::isfinite(total) ? total / scale : -1.0;
  ZT_RETURN_IF_ERROR(finish_step(stats));
  ++micro_steps_;
  end_step(stats);
  return Status::ok();
}

Status Engine::queue_graph_step(int64_t counted, optim::StepValues v) {
  GraphState& g = *graph_;
  const Device dev = options_.device, cpu = Device::cpu();
  const Stream& s = ctx_.stream;
  memory_copy_async(g.tokens.data(), dev, g.tokens_host.data(), cpu, g.tokens.nbytes(), s);
  memory_copy_async(g.targets.data(), dev, g.targets_host.data(), cpu, g.targets.nbytes(), s);
  memory_copy_async(g.scalars.data(), dev, g.scalars_host.data(), cpu, g.scalars.nbytes(), s);
  // forward(), backward() and apply_step_on_device() on the device buffers, nothing read back.
  ctx_.mode = nn::Mode::kTrain;
  ctx_.targets = &g.targets;
  ctx_.attention_mask = nullptr;
  ctx_.dloss =
      counted == 0 ? 0.0f : static_cast<float>(scaler_.scale() / static_cast<double>(counted));
  ctx_.dropout_seed = dropout_seed(micro_steps_);
  Tensor losses = model_.forward(ctx_, g.tokens, zero_.get());
  ctx_.targets = nullptr;
  ZT_RETURN_IF_ERROR(zero_->finish_pass());
  zero_->set_boundary(true);
  model_.backward(ctx_, zero_.get());
  ZT_RETURN_IF_ERROR(zero_->finish_pass());
  Tensor sumsq = step_sums_.view(0, {1});
  sumsq.zero(s);
  accumulate_grad_sumsq(sumsq);
  kernels::grad_clip_scale(grad_factor_, sumsq, scaler_.scale(), config_.gradient_clipping, s);
  v.grad_scale_at = grad_factor_.data<float>();
  v.scalars_at = g.scalars.data<float>();
  ZT_ASSIGN_OR_RETURN(last_step_groups_, zero_->optimizer_step(optimizer_, v));
  memory_copy_async(g.losses_host.data(), cpu, losses.data(), dev, losses.nbytes(), s);
  memory_copy_async(g.sumsq_host.data(), cpu, sumsq.data(), dev, sizeof(double), s);
  return Status::ok();
}

}  // namespace zt
