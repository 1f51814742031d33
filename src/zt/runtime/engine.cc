#include "zt/runtime/engine.h"

#include <algorithm>
#include <cmath>

#include "zt/comm/env.h"
#include "zt/core/aio.h"
#include "zt/core/file_io.h"
#include "zt/core/host_memory.h"
#include "zt/core/log.h"
#include "zt/kernels/grad_clip.h"
#include "zt/nn/models/transformer.h"
#include "zt/runtime/engine_graph.h"
#include "zt/runtime/py_format.h"

namespace zt {

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
  spec.bias_correction =
      o.bias_correction ? kernels::BiasCorrection::kOn : kernels::BiasCorrection::kOff;
  spec.momentum = o.momentum;
  spec.dampening = o.dampening;
  spec.nesterov = o.nesterov;
  spec.max_coeff = o.max_coeff;
  spec.min_coeff = o.min_coeff;
  return spec;
}

namespace {

// wall_clock_breakdown: DeepSpeed's timer names (micro-step and global, in its log order).
const std::vector<std::string> kMicroTimers = {"fwd_microstep", "bwd_microstep",
                                               "bwd_inner_microstep", "bwd_allreduce_microstep",
                                               "step_microstep"};
const std::vector<std::string> kGlobalTimers = {"fwd", "bwd", "bwd_inner", "bwd_allreduce",
                                                "step"};

// The ranks of this job on this host: the launcher's local size when its world is the
// communicator's, else all of them (the ranks of an in-process world share this host).
int ranks_on_this_host(int world) {
  auto env = dist_env_from_environment();
  if (env.is_ok() && env->world_size == world) return std::max(1, env->local_size);
  return world;
}

// Where offload_optimizer puts the master weights and optimizer state on this device
// (DeepSpeed: stages 1-3 only, and stages 1-2 treat any device other than "none" as the CPU).
// NVMe (ZeRO-Infinity) swaps at every stage 1-3 and on a CPU engine too, where DeepSpeed would
// keep stages 1-2 in host memory: a user who names an nvme_path asks for the disk
// (docs/zero.md says so).
zero::OptimizerPlacement optimizer_placement(const ZeroConfig& z, Device device) {
  const OffloadConfig& o = z.offload_optimizer;
  if (!o.enabled() || z.stage == 0) return zero::OptimizerPlacement::kDevice;
  if (o.device == "nvme") return zero::OptimizerPlacement::kNvme;
  if (device.is_cpu()) return zero::OptimizerPlacement::kDevice;
  return o.pin_memory ? zero::OptimizerPlacement::kHostPinned
                      : zero::OptimizerPlacement::kHostPageable;
}

// Where offload_param puts the sharded units' own chunks (stage 3; only with an offloaded
// optimizer, see ZeroState).
zero::ParamPlacement param_placement(const ZeroConfig& z) {
  const OffloadConfig& o = z.offload_param;
  if (!o.enabled() || z.stage != 3) return zero::ParamPlacement::kDevice;
  if (o.device == "nvme") return zero::ParamPlacement::kNvme;
  return o.pin_memory ? zero::ParamPlacement::kHostPinned : zero::ParamPlacement::kHostPageable;
}

// The offloaded step's piece size: sub_group_size at stage 3 and with NVMe; with offload_param
// nvme also a multiple of 2048 elements, so that every piece of a 16-bit chunk starts on a 4 KiB
// (O_DIRECT) boundary of its block in the parameter swap file.
int64_t offload_piece_size(const ZeroConfig& z, int64_t piece) {
  if (z.stage == 3 || z.offload_optimizer.device == "nvme") piece = std::min(piece, z.sub_group_size);
  if (z.stage == 3 && z.offload_param.device == "nvme") piece = (piece + 2047) / 2048 * 2048;
  return piece;
}

// DeepSpeed's aio block (its defaults where absent).
aio::Options aio_options(const DeepSpeedConfig& config) {
  aio::Options a;
  auto it = config.blocks.find("aio");
  if (it == config.blocks.end() || !it->is_object()) return a;
  const nlohmann::json& b = *it;
  a.block_size = b.value("block_size", a.block_size);
  a.queue_depth = b.value("queue_depth", a.queue_depth);
  a.thread_count = b.value("intra_op_parallelism", b.value("thread_count", a.thread_count));
  a.single_submit = b.value("single_submit", a.single_submit);
  a.overlap_events = b.value("overlap_events", a.overlap_events);
  return a;
}

}  // namespace

zero::ZeroOptions zero_options_from_config(const DeepSpeedConfig& config, Device device,
                                           const optim::OptimizerSpec& optimizer,
                                           int64_t offload_piece_elements) {
  const ZeroConfig& z = config.zero;
  const DType round = config.compute_dtype();
  return {.device = device,
          .stream = {},
          // The CPU kernels compute in f32 and round to the training precision.
          .compute_dtype = device.is_cpu() ? DType::f32 : round,
          .round_dtype = round,
          .optimizer_states = optim::optimizer_state_count(optimizer),
          .stage = z.stage,
          .comm = nullptr,
          .persistence_threshold = z.stage3_param_persistence_threshold,
          .prefetch_elements = z.stage3_prefetch_bucket_size,
          .max_live_elements = z.stage3_max_live_parameters,
          .predivide_factor = config.gradient_predivide_factor,
          .prescale = config.prescale_gradients,
          .reduce_bucket_elements = z.reduce_bucket_size,
          .overlap = z.overlap_comm ? zero::CommOverlap::kOn : zero::CommOverlap::kOff,
          .optimizer_placement = optimizer_placement(z, device),
          .offload_granularity = optimizer.kind == optim::OptimizerKind::kLamb
                                     ? zero::OffloadGranularity::kParamTensors
                                     : zero::OffloadGranularity::kPieces,
          // Stage 3 offload steps sub-groups too: pieces of at most sub_group_size, and NVMe
          // swaps in them at every stage.
          .offload_piece_elements = offload_piece_size(z, offload_piece_elements),
          .nvme_folder = z.offload_optimizer.nvme_path,
          .aio = aio_options(config),
          .swap_pipeline_read = z.offload_optimizer.pipeline_read,
          .swap_pipeline_write = z.offload_optimizer.pipeline_write,
          .param_placement = param_placement(z),
          .param_nvme_folder = z.offload_param.nvme_path,
          .param_buffer_count = z.offload_param.buffer_count,
          .sub_group_elements = z.sub_group_size,
          .comm_dtype = config.communication_data_type
                            ? std::optional<DType>(config.communication_dtype())
                            : std::nullopt};
}

namespace {

// Sums (or maxes) a few host doubles over `comm` (null or one rank: nothing to do), through a
// tensor on the communicator's device (on stream `s`).
Status all_reduce_host_doubles(Communicator* comm, std::vector<double>& values, ReduceOp op,
                               const Stream& s) {
  if (comm == nullptr || comm->world_size() == 1 || values.empty()) return Status::ok();
  Tensor t = Tensor::from_doubles(values, {static_cast<int64_t>(values.size())}, DType::f64,
                                  comm->device());
  ZT_RETURN_IF_ERROR(comm->all_reduce(t, op, s).wait());
  values = t.to_doubles();
  return Status::ok();
}

Status offload_check(const DeepSpeedConfig& config, Device device) {
  const ZeroConfig& z = config.zero;
  const OffloadConfig& o = z.offload_optimizer;
  if (o.enabled() && z.stage >= 1 && o.device != "nvme") {
    if (device.is_cpu()) {
      ZT_LOG_INFO(
          "zero_optimization.offload_optimizer.device={}: on a CPU engine the optimizer "
          "state is already in host memory; nothing to move",
          o.device);
    } else {
      if (o.ratio < 1.0) {
        ZT_LOG_WARN(
            "zero_optimization.offload_optimizer.ratio={}: partial offload is not "
            "implemented; all of the optimizer state goes to host memory",
            py_float(o.ratio));
      }
    }
  }
  if (z.offload_param.enabled() && z.stage == 3) {
    if (!o.enabled()) {
      ZT_LOG_WARN(
          "zero_optimization.offload_param.device={} without offload_optimizer moves nothing: "
          "the fp32 master (12-16 bytes per parameter with its optimizer state) stays on {} and "
          "each gather casts the 16-bit chunk from it, so no chunk rests on the device to move; "
          "add \"offload_optimizer\": {{\"device\": \"cpu\"}} (or nvme) to offload both",
          z.offload_param.device, device.str());
    } else if (device.is_cpu() && z.offload_param.device == "cpu") {
      ZT_LOG_INFO(
          "zero_optimization.offload_param.device=cpu: on a CPU engine the parameters are "
          "already in host memory; nothing to move");
    }
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Engine>> initialize(nn::Model& model, const DeepSpeedConfig& config,
                                           const EngineOptions& options) {
  ZT_RETURN_IF_ERROR(device_check(options.device));
  const int world = options.comm != nullptr ? options.comm->world_size() : 1;
  if (config.world_size != world) {
    return invalid_argument(
        "the config's batch sizes were resolved for a data-parallel size of "
        "{}, but this job has {} rank(s); resolve it with world size {}",
        config.world_size, world, world);
  }
  if (options.comm != nullptr && options.comm->device() != options.device) {
    return invalid_argument("the communicator is on {} but the engine on {}",
                            options.comm->device().str(), options.device.str());
  }
  if (world > 1 && config.zero.stage >= 1 && config.optimizer.present &&
      config.optimizer.type == "lamb") {
    return invalid_argument(
        "optimizer Lamb needs whole parameter tensors for its trust ratio; "
        "with ZeRO stage {} on {} ranks they are split. Use Adam/AdamW, or "
        "zero_optimization.stage 0",
        config.zero.stage, world);
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
    ZT_LOG_WARN(
        "ds_config has no \"optimizer\" block: using AdamW with DeepSpeed's defaults "
        "(lr 1e-3, betas [0.9, 0.999], eps 1e-8, weight_decay 0)");
  }
  ZT_RETURN_IF_ERROR(offload_check(config, options.device));
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
  ctx_.checkpoint_activations = options.activation_checkpointing;
  ctx_.checkpoint_interval = std::max(1, options.activation_checkpoint_interval);
  ctx_.keep_activations = options.keep_activations;
  if (config.wall_clock_breakdown) timers_ = std::make_unique<EventTimers>(options.device);
  if (config.blocks.contains("flops_profiler") &&
      config.blocks["flops_profiler"].value("enabled", false)) {
    const auto& fp = config.blocks["flops_profiler"];
    profiler_ = FlopsProfilerOptions{
        .profile_step = fp.value("profile_step", 1),
        .module_depth = fp.value("module_depth", -1),
        .top_modules = fp.value("top_modules", 1),
        .detailed = fp.value("detailed", true),
        .output_file = fp["output_file"].is_string() ? fp["output_file"].get<std::string>() : ""};
  }
  if (auto it = config.blocks.find("activation_checkpointing");
      it != config.blocks.end() && it->is_object()) {
    ctx_.checkpoint_to_host =
        options.activation_checkpointing && it->value("cpu_checkpointing", false);
  }
  comm_ = options.comm;
  if (comm_ == nullptr) {
    auto c = communicator_create(DistEnv{}, dev);
    ZT_ASSERT(c.is_ok(), "single-process communicator: {}", c.status().message());
    own_comm_ = std::move(c).value();
    comm_ = own_comm_.get();
  }
  const ZeroConfig& z = config.zero;
  zero::ZeroOptions zo =
      zero_options_from_config(config, dev, optimizer_.spec(), options.offload_piece_elements);
  zo.stream = ctx_.stream;
  zo.comm = comm_;
  // The units' sizes, for the checks below of what the model state needs on each tier.
  std::vector<int64_t> numels;
  std::vector<bool> frozen;
  for (auto& u : model.units()) {
    numels.push_back(u->flat_numel());
    frozen.push_back(u->frozen());
  }
  if (dev.is_cuda()) {
    // Model state larger than the whole GPU can never train: say so, with what would fit, before
    // minutes of drawing initial values end in an allocation failure.
    const std::string err = zero::model_state_fit_error(
        numels, zo, comm_->world_size(), cuda_device_total_memory(dev.index), dev.str(), frozen);
    if (!err.empty()) throw GpuOutOfMemory(err);
    // Offloaded state larger than the host's free memory ends in the kernel's OOM killer (no
    // message) or a failed page-locked allocation after minutes of start-up. Every rank reads
    // what is available before any allocates (the all-reduce orders the two), and all refuse
    // together when one host is short, so no rank waits in a collective for one that stopped.
    if (zero::offloaded(zo)) {
      const int world = comm_->world_size();
      const HostMemory host = host_memory();
      const int on_host = ranks_on_this_host(world);
      const std::string host_err =
          zero::host_state_fit_error(numels, zo, world, on_host, host.available, frozen);
      const double need = static_cast<double>(
          zero::predict_state_bytes(numels, zo, world, frozen).host_total() * on_host);
      std::vector<double> spare{host.available > 0 ? static_cast<double>(host.available) - need
                                                   : 1e30};
      if (world > 1) {
        Tensor t = Tensor::from_doubles(spare, {1}, DType::f64, dev);
        const Status s = comm_->all_reduce(t, ReduceOp::kMin, ctx_.stream).wait();
        if (!s.is_ok()) throw std::runtime_error(fmt::format("engine start-up: {}", s.message()));
        spare = t.to_doubles();
      }
      if (!host_err.empty()) throw HostOutOfMemory(host_err);
      if (spare[0] < 0) {
        throw HostOutOfMemory(fmt::format(
            "offload_optimizer: another rank's host lacks {:.1f} GiB of host memory for the "
            "offloaded optimizer state (that rank's message has the figures); this rank's host "
            "has enough",
            -spare[0] / (1024.0 * 1024.0 * 1024.0)));
      }
      if (comm_->rank() == 0 && host.available > 0) {
        ZT_LOG_INFO(
            "engine: offloaded model state {:.1f} GiB for the {} rank(s) on this host, "
            "{:.1f} GiB of host memory available{}",
            need / (1024.0 * 1024.0 * 1024.0), on_host, host.available / (1024.0 * 1024.0 * 1024.0),
            host.cgroup_limit ? " (within the control group's limit)" : "");
      }
    }
  }
  const bool optimizer_nvme = zo.optimizer_placement == zero::OptimizerPlacement::kNvme;
  const bool params_nvme = zo.param_placement == zero::ParamPlacement::kNvme && zero::offloaded(zo);
  if (optimizer_nvme || params_nvme) {
    // The swap files of every rank on this host share the disk: the folder must hold them all
    // (each rank's own file is also reserved with fallocate when it is created).
    const int world = comm_->world_size();
    const int64_t on_host = ranks_on_this_host(world);
    zero::ZeroOptions no_params = zo;
    no_params.param_placement = zero::ParamPlacement::kDevice;
    const int64_t all = zero::predict_state_bytes(numels, zo, world, frozen).nvme * on_host;
    const int64_t opt = zero::predict_state_bytes(numels, no_params, world, frozen).nvme * on_host;
    auto check = [](const std::string& folder, int64_t need, std::string_view key) {
      const Status ok = aio::nvme_path_check(folder, need, key);
      if (!ok.is_ok()) throw std::runtime_error(ok.message());
    };
    if (optimizer_nvme && params_nvme && zo.nvme_folder == zo.param_nvme_folder) {
      check(zo.nvme_folder, all, "zero_optimization.offload_optimizer.nvme_path");
    } else {
      if (optimizer_nvme) check(zo.nvme_folder, opt, "zero_optimization.offload_optimizer.nvme_path");
      if (params_nvme) {
        check(zo.param_nvme_folder, all - opt, "zero_optimization.offload_param.nvme_path");
      }
    }
  }
  zero_ = std::make_unique<zero::ZeroState>(model, zo, options.seed);
  if (timers_ && z.stage == 3) zero_->set_gather_timing(true);
  found_inf_ = Tensor::zeros({1}, DType::f32, dev);
  step_sums_ = Tensor::zeros({2}, DType::f64, dev);
  grad_factor_ = Tensor::zeros({1}, DType::f32, dev);
  if (dev.is_cuda()) step_sums_host_ = Tensor::empty_pinned({2}, DType::f64);
  zero::ModelStateBytes b = zero_->state_bytes();
  if (comm_->rank() == 0) {
    std::string host;
    if (b.host_params > 0 || (params_nvme && z.stage == 3)) {
      host += fmt::format("; offload_param: sharded 16-bit chunks at rest in {} ({:.1f} MiB)",
                          params_nvme ? "the parameter swap file" : "host memory",
                          (params_nvme ? static_cast<double>(zero_->param_file() != nullptr
                                                                 ? zero_->param_file()->size()
                                                                 : 0)
                                       : static_cast<double>(b.host_params)) /
                              1048576.0);
    }
    if (zo.optimizer_placement == zero::OptimizerPlacement::kNvme) {
      host += fmt::format("; master and optimizer state swapped to NVMe: {:.1f} MiB per rank, "
                         "staging {:.1f} MiB of host memory",
                         b.nvme / 1048576.0, b.host_buffers / 1048576.0);
    } else if (zero_->offloaded()) {
      host += fmt::format(
          "; offloaded to {} host memory: master {} optimizer {} staging {} "
          "(total {:.1f} MiB)",
          zo.optimizer_placement == zero::OptimizerPlacement::kHostPinned ? "pinned" : "pageable",
          b.host_master, b.host_optimizer, b.host_buffers, b.host_total() / 1048576.0);
    }
    // Frozen units (LoRA's --only-optimize-lora): how many parameters are trained.
    int64_t trained = 0;
    for (auto& u : model.units()) {
      if (u->frozen()) continue;
      for (nn::Param* p : u->params()) trained += p->numel();
    }
    const std::string count =
        trained == model.num_params()
            ? fmt::format("{} parameters", trained)
            : fmt::format("{} parameters, {} trained ({:.2f}%)", model.num_params(), trained,
                          100.0 * static_cast<double>(trained) /
                              static_cast<double>(model.num_params()));
    ZT_LOG_INFO(
        "engine: {} ({}) on {} x {} ({}), {} compute, {}, ZeRO stage {}; "
        "model-state bytes per rank on {}: params {} grads {} master {} optimizer {} "
        "(total {:.1f} MiB){}",
        model.name(), count, comm_->world_size(), dev.str(), comm_->backend_name(),
        dtype_name(round_dtype_), optim::optimizer_name(optimizer_.spec()), z.stage, dev.str(),
        b.params, b.grads, b.master, b.optimizer, b.total() / 1048576.0, host);
  }
}

nn::Context Engine::eval_context() const {
  nn::Context c = ctx_;
  c.mode = nn::Mode::kEval;
  c.targets = nullptr;
  c.attention_mask = nullptr;  // evaluation passes its own batches' masks
  return c;
}

int Engine::job_rank() const {
  const auto& cs = options_.checkpoint_stage;
  return cs && cs->job_comm != nullptr ? cs->job_comm->rank() : comm_->rank();
}

int Engine::job_world_size() const {
  const auto& cs = options_.checkpoint_stage;
  return cs && cs->job_comm != nullptr ? cs->job_comm->world_size() : comm_->world_size();
}

Status Engine::all_reduce_job(std::vector<double>& values, ReduceOp op) {
  const auto& cs = options_.checkpoint_stage;
  if (cs && cs->job_comm != nullptr) {
    return all_reduce_host_doubles(cs->job_comm, values, op, ctx_.stream);
  }
  return zero_->all_reduce_doubles(values, op);
}

uint64_t Engine::dropout_seed(int64_t micro_step) const {
  return (options_.seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(micro_step + 1)) ^
         (0xbf58476d1ce4e5b9ull * static_cast<uint64_t>(comm_->rank() + 1));
}

nn::Context Engine::train_context() const {
  nn::Context c = ctx_;
  c.mode = nn::Mode::kTrain;
  c.targets = nullptr;
  c.attention_mask = nullptr;
  return c;
}

Status Engine::pipeline_step(double mean_loss) {
  loss_sum_ = mean_loss;
  loss_count_ = 1;
  // The batch's micro-steps but the last were the stages' passes; step() counts the boundary.
  micro_steps_ += config_.gradient_accumulation_steps - 1;
  return step();
}

bool Engine::is_gradient_accumulation_boundary() const {
  return (micro_steps_ + 1) % config_.gradient_accumulation_steps == 0;
}

double Engine::lr() const {
  return scheduler_ ? scheduler_->lr() : optimizer_.spec().lr;
}

Result<int64_t> Engine::check_batch(const Tensor& tokens, const Tensor& targets) const {
  // The loss is the mean over the counted targets of this micro-batch, as a transformers
  // model's loss is; what counts is the model's rule (Model::check_batch).
  return model_.check_batch(tokens, targets);
}

Result<float> Engine::forward(const Tensor& tokens, const Tensor& targets) {
  return forward(tokens, targets, nullptr);
}

Result<float> Engine::forward(const Tensor& tokens, const Tensor& targets,
                              const Tensor* attention_mask) {
  if (attention_mask != nullptr &&
      (attention_mask->dtype() != DType::i32 || !(attention_mask->shape() == tokens.shape()))) {
    return invalid_argument("forward expects an attention mask (batch, seq) i32 like the tokens "
                            "{}, got {}",
                            tokens.shape().str(), attention_mask->shape().str());
  }
  ZT_ASSIGN_OR_RETURN(const int64_t counted, check_batch(tokens, targets));
  const Device dev = options_.device;
  Tensor tok = tokens.device() == dev ? tokens : tokens.to(dev, ctx_.stream);
  targets_dev_ = targets.device() == dev ? targets : targets.to(dev, ctx_.stream);
  ctx_.mode = nn::Mode::kTrain;
  ctx_.targets = &targets_dev_;
  bind_attention_mask(attention_mask);
  // The gradient of this micro-batch's mean loss, scaled and averaged over the micro-steps (per
  // position at weight 1 for forward_token_losses: backward_weighted applies the weights).
  const double micro_steps_per_step = static_cast<double>(config_.gradient_accumulation_steps);
  ctx_.dloss = per_token_     ? static_cast<float>(scaler_.scale() / micro_steps_per_step)
               : counted == 0 ? 0.0f
                              : static_cast<float>(scaler_.scale() /
                                                   (micro_steps_per_step *
                                                    static_cast<double>(counted)));
  // Dropout masks (LoRA's): a fresh one every micro-step and rank, reproducible from the seed.
  ctx_.dropout_seed = dropout_seed(micro_steps_);
  // Gathers timed outside training passes (evaluation, generation) belong to no step.
  if (timers_ && config_.zero.stage == 3 && micro_steps_ % config_.gradient_accumulation_steps == 0) {
    (void)zero_->take_gather_ms();
  }
  timer_start("fwd_microstep", "fwd");
  // flops_profiler: the forwards of step `profile_step` (DeepSpeed's count of finished steps)
  // run through a timer of every unit.
  nn::UnitHooks* hooks = zero_.get();
  if (profiler_ && global_steps_ == profiler_->profile_step) {
    if (!unit_timer_) {
      unit_timer_ = std::make_unique<UnitForwardTimer>(options_.device, ctx_.stream,
                                                       model_.units().size());
      profiled_micro_steps_ = 0;
    }
    unit_timer_->set_inner(zero_.get());
    hooks = unit_timer_.get();
    profiled_rows_ = tok.size(0);
    profiled_seq_ = tok.size(1);
    ++profiled_micro_steps_;
  }
  Tensor losses = model_.forward(ctx_, tok, hooks);
  ctx_.targets = nullptr;
  const Status done = zero_->finish_pass();
  timer_stop("fwd_microstep", "fwd");
  ZT_RETURN_IF_ERROR(done);
  std::vector<double> l = losses.to_doubles();
  if (per_token_) token_losses_ = l;
  double sum = 0;
  for (double v : l) sum += v;
  have_forward_ = true;
  return counted == 0 ? 0.0f : static_cast<float>(sum / static_cast<double>(counted));
}

void Engine::bind_attention_mask(const Tensor* attention_mask) {
  // Kept on the device until the next forward: backward (and a checkpointed block's recompute)
  // reads it through the context too.
  const Device dev = options_.device;
  if (attention_mask != nullptr) {
    attention_mask_dev_ = attention_mask->device() == dev ? *attention_mask
                                                          : attention_mask->to(dev, ctx_.stream);
    ctx_.attention_mask = &attention_mask_dev_;
  } else {
    attention_mask_dev_ = Tensor();
    ctx_.attention_mask = nullptr;
  }
}

Result<std::vector<double>> Engine::forward_token_losses(const Tensor& tokens,
                                                         const Tensor& targets,
                                                         const Tensor* attention_mask) {
  const auto* t = dynamic_cast<const nn::Transformer*>(&model_);
  if (t == nullptr || t->transformer_config().task != nn::Task::kCausalLM ||
      t->transformer_config().tp_size > 1) {
    return invalid_argument("forward_token_losses needs a causal language model without tensor "
                            "parallelism (its head's per-token losses), not {}", model_.name());
  }
  per_token_ = true;
  Result<float> r = forward(tokens, targets, attention_mask);
  per_token_ = false;
  ZT_RETURN_IF_ERROR(r.status());
  return token_losses_;
}

Status Engine::backward_weighted(std::span<const float> weights, float loss) {
  ZT_ASSERT(have_forward_, "backward_weighted() without a forward");
  if (weights.size() != token_losses_.size()) {
    return invalid_argument("backward_weighted: {} weights for the {} positions of the forward",
                            weights.size(), token_losses_.size());
  }
  Tensor w = Tensor::from_floats(std::vector<float>(weights.begin(), weights.end()),
                                 {static_cast<int64_t>(weights.size())}, DType::f32)
                 .to(options_.device, ctx_.stream);
  ctx_.row_scale = &w;
  const Status st = backward_pass(loss, Tensor());
  ctx_.row_scale = nullptr;
  token_losses_.clear();
  return st;
}

Result<Tensor> Engine::forward_outputs(const Tensor& tokens, const Tensor* attention_mask) {
  const auto* t = dynamic_cast<const nn::Transformer*>(&model_);
  if (t == nullptr || t->transformer_config().task != nn::Task::kReward) {
    return invalid_argument("forward_outputs trains a value head (a reward model), not {}",
                            model_.name());
  }
  if (tokens.ndim() != 2 || tokens.dtype() != DType::i32 ||
      (attention_mask != nullptr && !(attention_mask->shape() == tokens.shape()))) {
    return invalid_argument("forward_outputs expects tokens (batch, seq) i32 (and a mask like "
                            "them), got {}",
                            tokens.shape().str());
  }
  ZT_RETURN_IF_ERROR(model_.check_batch(tokens, tokens).status());
  const Device dev = options_.device;
  Tensor tok = tokens.device() == dev ? tokens : tokens.to(dev, ctx_.stream);
  ctx_.mode = nn::Mode::kTrain;
  ctx_.targets = nullptr;
  bind_attention_mask(attention_mask);
  ctx_.dropout_seed = dropout_seed(micro_steps_);
  timer_start("fwd_microstep", "fwd");
  Tensor out = model_.forward(ctx_, tok, zero_.get());
  const Status done = zero_->finish_pass();
  timer_stop("fwd_microstep", "fwd");
  ZT_RETURN_IF_ERROR(done);
  have_forward_ = true;
  return out;
}

Status Engine::backward_outputs(const Tensor& dout, float loss) {
  ZT_ASSERT(have_forward_, "backward_outputs() without a forward");
  // An f32 copy on the device (dout may be on the host, or in the compute dtype), scaled.
  Tensor d = Tensor::empty(dout.shape(), DType::f32, options_.device, ctx_.stream);
  if (dout.dtype() == DType::f32 || !dout.device().is_cuda()) {
    d.copy_from(dout, ctx_.stream);
  } else {
    kernels::cast(d, dout, ctx_.stream);
  }
  kernels::scale_inplace(
      d, static_cast<float>(scaler_.scale() / static_cast<double>(config_.gradient_accumulation_steps)),
      ctx_.stream);
  return backward_pass(loss, d);
}

Status Engine::backward(float loss) {
  return backward_pass(loss, Tensor());
}

Status Engine::backward_pass(float loss, const Tensor& dout) {
  ZT_ASSERT(have_forward_, "backward() without a forward()");
  zero_->set_boundary(is_gradient_accumulation_boundary());
  // bwd_inner: the units' backward (with the reductions it overlaps); bwd_allreduce: what is left
  // of the gradient reductions after it (the last buckets, and waiting for the ones in flight).
  timer_start("bwd_microstep", "bwd");
  timer_start("bwd_inner_microstep", "bwd_inner");
  (void)model_.backward(ctx_, dout, zero_.get());
  timer_stop("bwd_inner_microstep", "bwd_inner");
  timer_start("bwd_allreduce_microstep", "bwd_allreduce");
  have_forward_ = false;
  loss_sum_ += loss;
  ++loss_count_;
  const Status done = zero_->finish_pass();
  timer_stop("bwd_allreduce_microstep", "bwd_allreduce");
  timer_stop("bwd_microstep", "bwd");
  return done;
}

void Engine::profiler_report(const StepStats& stats) {
  std::unique_ptr<UnitForwardTimer> timer = std::move(unit_timer_);
  const std::vector<double> unit_ms = timer->unit_ms();
  if (comm_->rank() != 0) return;
  const auto* transformer = dynamic_cast<const nn::Transformer*>(&model_);
  if (transformer == nullptr) {
    ZT_LOG_WARN("flops_profiler: model '{}' is not a transformer of nn/models; no FLOPs to count",
                model_.name());
    return;
  }
  FlopsProfileInput in{.model_name = model_.name(),
                       .units = transformer_forward_costs(*transformer, profiled_rows_,
                                                          profiled_seq_),
                       .unit_fwd_ms = unit_ms,
                       .micro_steps = profiled_micro_steps_,
                       .world_size = comm_->world_size(),
                       .micro_batch = profiled_rows_,
                       .fwd_ms = 0,
                       .bwd_ms = 0,
                       .step_ms = 0,
                       .step = profiler_->profile_step,
                       .recompute = ctx_.checkpoint_activations};
  for (const auto& [name, ms] : stats.elapsed_ms) {
    if (name == "forward") in.fwd_ms = ms;
    if (name == "backward") in.bwd_ms = ms;
    if (name == "step") in.step_ms = ms;
  }
  const std::string report = flops_profile_report(in, *profiler_);
  if (profiler_->output_file.empty()) {
    ZT_LOG_INFO("{}", report);
    return;
  }
  const Status s = file_write_atomic(profiler_->output_file, report, "flops profile");
  if (s.is_ok()) {
    ZT_LOG_INFO("flops_profiler: step {} profile written to {}", global_steps_,
                profiler_->output_file);
  } else {
    ZT_LOG_WARN("flops_profiler: {}", s.message());
  }
}

void Engine::timer_start(const char* micro, const char* global) {
  if (!timers_) return;
  timers_->start(micro, ctx_.stream);
  timers_->start(global, ctx_.stream);
}

void Engine::timer_stop(const char* micro, const char* global) {
  if (!timers_) return;
  timers_->stop(micro, ctx_.stream);
  timers_->stop(global, ctx_.stream);
}

Status Engine::step() {
  if (zero_->holds_full_weights()) {
    return invalid_argument(
        "the optimizer step would leave the whole weights gathered for inference (hybrid "
        "engine) stale: release_full_weights() first");
  }
  const bool log = timers_ && comm_->rank() == 0;
  if (!is_gradient_accumulation_boundary()) {
    ++micro_steps_;
    // DeepSpeed logs the micro-step timers at every step() call.
    if (log) ZT_LOG_INFO("{}", timers_->log_line(kMicroTimers));
    return Status::ok();
  }
  StepStats stats;
  timer_start("step_microstep", "step");
  Status s = apply_step(stats);
  timer_stop("step_microstep", "step");
  ++micro_steps_;
  loss_sum_ = 0;
  loss_count_ = 0;
  if (!s.is_ok()) return s;
  if (timers_) {
    // The global timers cover the whole step (every micro-step); their sums go to the monitors
    // (Train/Samples/elapsed_time_ms_*), then both lines are logged and reset.
    for (const auto& [name, tag] : {std::pair{"fwd", "forward"}, std::pair{"bwd", "backward"},
                                    std::pair{"bwd_inner", "backward_inner"},
                                    std::pair{"bwd_allreduce", "backward_allreduce"},
                                    std::pair{"step", "step"}}) {
      stats.elapsed_ms.emplace_back(tag, timers_->elapsed_ms(name, /*reset=*/false));
    }
    const std::string micro = timers_->log_line(kMicroTimers);
    std::string global = timers_->log_line(kGlobalTimers);
    if (config_.zero.stage == 3) {
      // ZeRO-3's parameter gathers as the compute stream paid for them (inside fwd and bwd).
      const double gather_ms = zero_->take_gather_ms();
      stats.elapsed_ms.emplace_back("allgather", gather_ms);
      global += fmt::format(" | allgather: {:.2f}", gather_ms);
    }
    if (log) {
      ZT_LOG_INFO("{}", micro);
      ZT_LOG_INFO("{}", global);
    }
  }
  if (unit_timer_) profiler_report(stats);
  end_step(stats);
  return Status::ok();
}

void Engine::end_step(const StepStats& stats) {
  last_step_ = stats;
  if (config_.steps_per_print && *config_.steps_per_print > 0 &&
      global_steps_ % *config_.steps_per_print == 0) {
    report_progress();
  }
}

Status Engine::apply_step(StepStats& stats) {
  const Stream& s = ctx_.stream;
  const int n_units = static_cast<int>(zero_->units().size());
  const bool sharded = config_.zero.stage >= 1;
  const double local_loss = loss_count_ > 0 ? loss_sum_ / loss_count_ : 0.0;
  stats.lr = lr();
  const double scale = scaler_.scale();
  stats.loss_scale = scale;
  // Without an overflow check or offload, a GPU step reads nothing back before the optimizer
  // (apply_step_on_device); the loss is summed over ranks there.
  Communicator* mp = options_.model_parallel_comm;
  const bool on_device = options_.device.is_cuda() && (sharded || comm_->world_size() == 1) &&
                         !scaler_.checks_overflow() && !zero_->offloaded() && mp == nullptr;
  if (!on_device) {
    std::vector<double> loss{local_loss};
    ZT_RETURN_IF_ERROR(zero_->all_reduce_doubles(loss, ReduceOp::kSum));
    stats.loss = loss[0] / comm_->world_size();
  }

  // Overflow: an inf/nan in this rank's reduced gradient, MAX-reduced over ranks (§2).
  bool overflow = false;
  if (scaler_.checks_overflow()) {
    found_inf_.zero(s);
    for (int u = 0; u < n_units; ++u) {
      if (zero_->trainable(u)) kernels::scale_check_nonfinite(zero_->step_grad(u), 1.0f, found_inf_, s);
    }
    std::vector<double> flag{found_inf_.item()};
    ZT_RETURN_IF_ERROR(zero_->all_reduce_doubles(flag, ReduceOp::kMax));
    ZT_RETURN_IF_ERROR(all_reduce_host_doubles(mp, flag, ReduceOp::kMax, s));
    overflow = flag[0] != 0.0;
  }
  Status us = scaler_.update(overflow);
  if (!scaler_.log_line().empty() && comm_->rank() == 0) ZT_LOG_INFO("{}", scaler_.log_line());
  ZT_RETURN_IF_ERROR(us);
  if (on_device) return apply_step_on_device(stats, local_loss);  // (no overflow check: none)

  const int64_t tb = config_.train_batch_size;
  if (overflow) {
    zero_->zero_grads();
    ++skipped_steps_;
    ++global_steps_;
    global_samples_ += tb;
    stats.skipped = true;
    stats.grad_norm = -1;
    stats.step = global_steps_;
    stats.samples = global_samples_;
    return Status::ok();
  }

  // Global gradient norm: each rank's own chunks, summed over ranks (stage 0: every rank holds
  // the whole all-reduced gradient, so its local sum is already global).
  Tensor acc = step_sums_.view(0, {1});
  acc.zero(s);
  accumulate_grad_sumsq(acc);
  std::vector<double> sumsq{acc.item()};
  if (sharded) ZT_RETURN_IF_ERROR(zero_->all_reduce_doubles(sumsq, ReduceOp::kSum));
  ZT_RETURN_IF_ERROR(all_reduce_host_doubles(mp, sumsq, ReduceOp::kSum, s));  // over the stages
  const double total = std::sqrt(sumsq[0]);  // norm of the scaled gradients
  stats.grad_norm = std::isfinite(total) ? total / scale : -1.0;
  optim::StepValues v = step_values(stats.lr);
  v.grad_scale = kernels::grad_clip_factor(sumsq[0], scale, config_.gradient_clipping);

  ZT_ASSIGN_OR_RETURN(last_step_groups_, zero_->optimizer_step(optimizer_, v));
  return finish_step(stats);
}

// The same step as apply_step's host path, to the bit, but nothing is read back before the
// optimizer is queued: the host would wait for the end of backward and the GPU would then idle
// through the round trips (two all-reduces of host values and their copies: ~18 ms a step of
// Llama 8B on two GPUs). The gradients' sum of squares and the mean loss are summed over ranks in
// one collective on the compute stream, grad_clip_scale turns the sum into the factor the
// optimizer kernels read from device memory, and the sums come back once the optimizer is queued.
Status Engine::apply_step_on_device(StepStats& stats, double local_loss) {
  const Stream& s = ctx_.stream;
  // Through page-locked memory both ways, so the copy in is queued, not waited for (the last
  // step's read-back drained the stream, so nothing still reads the buffer).
  double* host = step_sums_host_.data<double>();
  host[0] = 0.0;
  host[1] = local_loss;
  constexpr size_t kBytes = 2 * sizeof(double);
  memory_copy_async(step_sums_.data(), step_sums_.device(), host, Device::cpu(), kBytes, s);
  Tensor sumsq = step_sums_.view(0, {1});
  accumulate_grad_sumsq(sumsq);
  CommHandle sums;
  if (comm_->world_size() > 1) sums = comm_->all_reduce(step_sums_, ReduceOp::kSum, s);
  const double scale = scaler_.scale();
  kernels::grad_clip_scale(grad_factor_, sumsq, scale, config_.gradient_clipping, s);
  optim::StepValues v = step_values(stats.lr);
  v.grad_scale_at = grad_factor_.data<float>();
  Result<int64_t> groups = zero_->optimizer_step(optimizer_, v);
  if (!groups.is_ok()) {
    // Drain what was queued (the copy from the page-locked buffer, the collective) before
    // handing the failure up: the next step writes that buffer.
    (void)sums.wait();
    s.synchronize();
    return groups.status();
  }
  last_step_groups_ = *groups;
  ZT_RETURN_IF_ERROR(sums.wait());  // (a default handle is complete)
  memory_copy_async(host, Device::cpu(), step_sums_.data(), step_sums_.device(), kBytes, s);
  s.synchronize();
  stats.loss = host[1] / comm_->world_size();
  const double total = std::sqrt(host[0]);
  stats.grad_norm = std::isfinite(total) ? total / scale : -1.0;
  return finish_step(stats);
}

void Engine::accumulate_grad_sumsq(Tensor& acc) {
  const int n_units = static_cast<int>(zero_->units().size());
  const auto& excluded = options_.norm_excluded_units;
  for (int u = 0; u < n_units; ++u) {
    if (!zero_->trainable(u) || std::find(excluded.begin(), excluded.end(), u) != excluded.end()) {
      continue;
    }
    Tensor& g = zero_->step_grad(u);
    if (!options_.norm_skip_replicated) {
      kernels::sum_squares_accumulate(acc, g, ctx_.stream);
      continue;
    }
    // Only the tensor-parallel parts, each where it meets this rank's extent of the unit; of
    // elements several ranks hold (shared key/value heads), only the first rank's count.
    const auto [begin, end] = zero_->master_extent(u);
    for (nn::Param* p : model_.units()[static_cast<size_t>(u)]->params()) {
      if (!p->slice) continue;
      std::vector<std::pair<int64_t, int64_t>> runs;  // of the parameter's own elements
      int64_t at = 0;
      if (!p->slice->counts_replicated) {
        for (const auto& [lo, hi] : p->slice->replicated) {
          if (lo > at) runs.emplace_back(at, lo);
          at = hi;
        }
      }
      if (at < p->numel()) runs.emplace_back(at, p->numel());
      for (const auto& [a, b] : runs) {
        const int64_t lo = std::max(begin, p->offset + a), hi = std::min(end, p->offset + b);
        if (lo < hi) {
          kernels::sum_squares_accumulate(acc, g.view(lo - begin, {hi - lo}), ctx_.stream);
        }
      }
    }
  }
}

optim::StepValues Engine::step_values(double lr) const {
  optim::StepValues v;
  v.lr = lr;
  v.beta1 = optimizer_.spec().beta1;
  v.beta2 = optimizer_.spec().beta2;
  if (scheduler_) {
    if (auto m = scheduler_->momentum()) v.beta1 = *m;
    if (auto b2 = scheduler_->beta2()) v.beta2 = *b2;
  }
  return v;
}

Status Engine::finish_step(StepStats& stats) {
  zero_->zero_grads();
  zero_->prefetch_next_forward();
  if (scheduler_) scheduler_->step();
  ++global_steps_;
  global_samples_ += config_.train_batch_size;
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
  if (job_rank() != 0) return;  // (one line for all pipeline stages)
  ZT_LOG_INFO("step={}, skipped={}, lr=[{}], mom={}", global_steps_, skipped_steps_, py_float(lr()),
              mom);
}

}  // namespace zt
