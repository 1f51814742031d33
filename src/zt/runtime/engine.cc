#include "zt/runtime/engine.h"

#include <cmath>

#include "zt/core/log.h"
#include "zt/runtime/py_format.h"

namespace zt {
namespace {

zero::MasterCopy master_for(DType round_dtype) {
  return round_dtype == DType::f32 ? zero::MasterCopy::kShared : zero::MasterCopy::kSeparate;
}

}  // namespace

optim::OptimizerSpec optimizer_spec_from_config(const DeepSpeedConfig& config) {
  optim::OptimizerSpec spec;
  const OptimizerConfig& o = config.optimizer;
  if (!o.present) return spec;  // AdamW, DeepSpeed's Adam defaults
  if (o.type == "sgd") {
    spec.kind = optim::OptimizerKind::kSgd;
  } else if (o.type == "lamb") {
    spec.kind = optim::OptimizerKind::kLamb;
  } else {
    spec.kind = optim::OptimizerKind::kAdam;
  }
  spec.lr = o.lr;
  spec.beta1 = o.beta1;
  spec.beta2 = o.beta2;
  spec.eps = o.eps;
  spec.weight_decay = o.weight_decay;
  spec.adam_mode = o.adam_w_mode ? kernels::AdamMode::kAdamW : kernels::AdamMode::kL2;
  spec.bias_correction = o.bias_correction ? kernels::BiasCorrection::kOn
                                           : kernels::BiasCorrection::kOff;
  spec.momentum = o.momentum;
  spec.dampening = o.dampening;
  spec.nesterov = o.nesterov;
  spec.max_coeff = o.max_coeff;
  spec.min_coeff = o.min_coeff;
  return spec;
}

Result<std::unique_ptr<Engine>> initialize(nn::Model& model, const DeepSpeedConfig& config,
                                           const EngineOptions& options) {
  ZT_RETURN_IF_ERROR(device_check(options.device));
  if (config.world_size != 1) {
    return invalid_argument("the config was resolved for world size {}, but this process trains "
                            "alone (world size 1)", config.world_size);
  }
  for (const auto& w : config.warnings) ZT_LOG_WARN("{}", w);
  if (!config.ignored_top_level_keys.empty()) {
    std::string keys;
    for (const auto& k : config.ignored_top_level_keys) keys += (keys.empty() ? "" : ", ") + k;
    ZT_LOG_WARN("ds_config: ignoring unknown top-level keys (as DeepSpeed does): {}", keys);
  }
  if (config.grad_accum_dtype && *config.grad_accum_dtype != "fp32") {
    ZT_LOG_WARN("data_types.grad_accum_dtype={}: ZeroTrain accumulates gradients in fp32 for now",
                *config.grad_accum_dtype);
  }
  if (!config.optimizer.present) {
    ZT_LOG_WARN("ds_config has no \"optimizer\" block: using AdamW with DeepSpeed's defaults "
                "(lr 1e-3, betas [0.9, 0.999], eps 1e-8, weight_decay 0)");
  }
  if (config.zero.stage > 0) {
    ZT_LOG_INFO("zero_optimization.stage={} with one process: there is nothing to partition, "
                "training runs as stage 0", config.zero.stage);
  }
  std::unique_ptr<LrScheduler> scheduler;
  if (config.scheduler.present) {
    optim::OptimizerSpec spec = optimizer_spec_from_config(config);
    ZT_ASSIGN_OR_RETURN(scheduler, lr_scheduler_create(config.scheduler, spec.lr));
  }
  return std::make_unique<Engine>(model, config, options, std::move(scheduler));
}

Engine::Engine(nn::Model& model, const DeepSpeedConfig& config, const EngineOptions& options,
               std::unique_ptr<LrScheduler> scheduler)
    : model_(model),
      config_(config),
      options_(options),
      round_dtype_(config.compute_dtype()),
      optimizer_(optimizer_spec_from_config(config)),
      scheduler_(std::move(scheduler)),
      scaler_(loss_scaler_options(config)) {
  const Device dev = options.device;
  ctx_.device = dev;
  ctx_.stream = Stream::create(dev);
  // The CPU kernels compute in f32; bf16/fp16 there round the parameters' copy (and so every
  // product with them) to the 16-bit type. On CUDA the kernels run in the 16-bit type itself.
  ctx_.compute_dtype = dev.is_cpu() ? DType::f32 : round_dtype_;
  zero::FlatParamsOptions fo{.device = dev,
                             .compute_dtype = ctx_.compute_dtype,
                             .master = master_for(round_dtype_),
                             .optimizer_states = optim::optimizer_state_count(optimizer_.spec()),
                             .world_size = 1};
  params_ = std::make_unique<zero::FlatParams>(model, fo, options.seed);
  if (dev.is_cpu() && round_dtype_ != DType::f32) {
    params_->refresh_compute_copy(round_dtype_, ctx_.stream);
  }
  found_inf_ = Tensor::zeros({1}, DType::f32, dev);
  norm_acc_ = Tensor::zeros({1}, DType::f64, dev);
  zero::ModelStateBytes b = params_->state_bytes();
  ZT_LOG_INFO("engine: {} ({} parameters) on {}, {} compute, {}, model-state bytes: params {} "
              "grads {} master {} optimizer {} (total {:.1f} MiB)",
              model.name(), model.num_params(), dev.str(), dtype_name(round_dtype_),
              optim::optimizer_name(optimizer_.spec()), b.params, b.grads, b.master, b.optimizer,
              b.total() / 1048576.0);
}

nn::Context Engine::eval_context() const {
  nn::Context c = ctx_;
  c.mode = nn::Mode::kEval;
  c.targets = nullptr;
  return c;
}

bool Engine::is_gradient_accumulation_boundary() const {
  return (micro_steps_ + 1) % config_.gradient_accumulation_steps == 0;
}

double Engine::lr() const {
  return scheduler_ ? scheduler_->lr() : optimizer_.spec().lr;
}

Result<float> Engine::forward(const Tensor& tokens, const Tensor& targets) {
  if (tokens.ndim() != 2 || tokens.dtype() != DType::i32 || !(tokens.shape() == targets.shape())) {
    return invalid_argument("forward expects tokens and targets of one shape (batch, seq) i32, "
                            "got {} and {}", tokens.shape().str(), targets.shape().str());
  }
  const int64_t vocab = model_.vocab_size();
  if (vocab > 0) {
    for (const Tensor* t : {&tokens, &targets}) {
      Tensor h = t->device().is_cpu() ? *t : t->to(Device::cpu());
      const int32_t* p = h.data<int32_t>();
      for (int64_t i = 0; i < h.numel(); ++i) {
        if (p[i] < 0 || p[i] >= vocab) {
          return invalid_argument("token id {} at position {} is outside the model's vocabulary "
                                  "of {}; use a model with a larger vocabulary (--vocab-size) or "
                                  "a token file made for this one", p[i], i, vocab);
        }
      }
    }
  }
  const Device dev = options_.device;
  Tensor tok = tokens.device() == dev ? tokens : tokens.to(dev, ctx_.stream);
  targets_dev_ = targets.device() == dev ? targets : targets.to(dev, ctx_.stream);
  const int64_t n = tokens.numel();
  ctx_.mode = nn::Mode::kTrain;
  ctx_.targets = &targets_dev_;
  ctx_.dloss = static_cast<float>(scaler_.scale() /
                                  (static_cast<double>(config_.gradient_accumulation_steps) * n));
  Tensor losses = model_.forward(ctx_, tok);
  ctx_.targets = nullptr;
  std::vector<double> l = losses.to_doubles();
  double sum = 0;
  for (double v : l) sum += v;
  have_forward_ = true;
  return static_cast<float>(sum / static_cast<double>(n));
}

void Engine::backward(float loss) {
  ZT_ASSERT(have_forward_, "backward() without a forward()");
  model_.backward(ctx_);
  have_forward_ = false;
  loss_sum_ += loss;
  ++loss_count_;
}

Status Engine::step() {
  if (!is_gradient_accumulation_boundary()) {
    ++micro_steps_;
    return Status::ok();
  }
  StepStats stats;
  Status s = apply_step(stats);
  ++micro_steps_;
  loss_sum_ = 0;
  loss_count_ = 0;
  if (!s.is_ok()) return s;
  last_step_ = stats;
  if (config_.steps_per_print && *config_.steps_per_print > 0 &&
      global_steps_ % *config_.steps_per_print == 0) {
    report_progress();
  }
  return Status::ok();
}

Status Engine::apply_step(StepStats& stats) {
  const Stream& s = ctx_.stream;
  const Device dev = options_.device;
  auto& units = params_->units();
  stats.loss = loss_count_ > 0 ? loss_sum_ / loss_count_ : 0.0;
  stats.lr = lr();
  const double scale = scaler_.scale();
  stats.loss_scale = scale;

  bool overflow = false;
  if (scaler_.checks_overflow()) {
    found_inf_.zero(s);
    for (auto& b : units) kernels::scale_check_nonfinite(b.grad, 1.0f, found_inf_, s);
    overflow = found_inf_.item() != 0.0;
  }
  Status us = scaler_.update(overflow);
  if (!scaler_.log_line().empty()) ZT_LOG_INFO("{}", scaler_.log_line());
  ZT_RETURN_IF_ERROR(us);

  const int64_t tb = config_.train_batch_size;
  if (overflow) {
    params_->zero_grads(s);
    ++skipped_steps_;
    ++global_steps_;
    global_samples_ += tb;
    stats.skipped = true;
    stats.grad_norm = -1;
    stats.step = global_steps_;
    stats.samples = global_samples_;
    return Status::ok();
  }

  norm_acc_.zero(s);
  for (auto& b : units) kernels::sum_squares_accumulate(norm_acc_, b.grad, s);
  const double total = std::sqrt(norm_acc_.item());  // norm of the scaled gradients
  stats.grad_norm = std::isfinite(total) ? total / scale : -1.0;
  double combined = scale;
  if (config_.gradient_clipping > 0 && std::isfinite(total)) {
    double clip = (total / scale + 1e-6) / config_.gradient_clipping;
    if (clip > 1) combined = clip * scale;
  }

  optim::StepValues v;
  v.lr = stats.lr;
  v.beta1 = optimizer_.spec().beta1;
  v.beta2 = optimizer_.spec().beta2;
  if (scheduler_) {
    if (auto m = scheduler_->momentum()) v.beta1 = *m;
    if (auto b2 = scheduler_->beta2()) v.beta2 = *b2;
  }
  v.grad_scale = static_cast<float>(1.0 / combined);

  const bool write_lowp = dev.is_cuda() && ctx_.compute_dtype != DType::f32;
  std::vector<kernels::OptimChunk> chunks;
  auto chunk_at = [&](zero::UnitBuffers& b, int64_t offset, int64_t n) {
    kernels::OptimChunk c;
    c.param = b.master.data<float>() + offset;
    c.grad = b.grad.data<float>() + offset;
    if (!b.state.empty()) c.state1 = b.state[0].data<float>() + offset;
    if (b.state.size() > 1) c.state2 = b.state[1].data<float>() + offset;
    if (write_lowp) {
      c.param_lowp = static_cast<char*>(b.value.data()) + offset * dtype_size(b.value.dtype());
      c.lowp_dtype = b.value.dtype();
    }
    c.n = n;
    return c;
  };
  if (optimizer_.spec().kind == optim::OptimizerKind::kLamb) {
    for (size_t u = 0; u < units.size(); ++u) {
      for (nn::Param* p : model_.units()[u]->params()) {
        chunks.push_back(chunk_at(units[u], p->offset, p->numel()));
      }
    }
  } else {
    for (auto& b : units) chunks.push_back(chunk_at(b, 0, b.padded_numel));
  }
  optimizer_.step(v, chunks, dev, s);
  if (!write_lowp) params_->refresh_compute_copy(round_dtype_, s);
  params_->zero_grads(s);
  if (scheduler_) scheduler_->step();
  ++global_steps_;
  global_samples_ += tb;
  stats.step = global_steps_;
  stats.samples = global_samples_;
  return Status::ok();
}

void Engine::report_progress() const {
  std::string mom;
  const auto& spec = optimizer_.spec();
  double b1 = spec.beta1, b2 = spec.beta2;
  if (scheduler_) {
    if (auto m = scheduler_->momentum()) b1 = *m;
    if (auto m2 = scheduler_->beta2()) b2 = *m2;
  }
  if (spec.kind == optim::OptimizerKind::kSgd) {
    mom = fmt::format("[{}]", py_float(spec.momentum));
  } else {
    mom = fmt::format("[({}, {})]", py_float(b1), py_float(b2));
  }
  ZT_LOG_INFO("step={}, skipped={}, lr=[{}], mom={}", global_steps_, skipped_steps_, py_float(lr()),
              mom);
}

}  // namespace zt
