// ds_config blocks -> DeepSpeedConfig fields, with DeepSpeed's checks and message texts
// (reference §1; runtime/config.py, runtime/zero/config.py, runtime/engine.py
// _configure_basic_optimizer / _do_sanity_check, runtime/zero/stage_1_and_2.py).
#include "zt/runtime/config_blocks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "zt/runtime/config_keys.h"
#include "zt/runtime/lr_scheduler.h"
#include "zt/runtime/py_format.h"

namespace zt::config_detail {
namespace {

Json top_value(const Json& top, std::string_view key) {
  auto it = top.find(std::string(key));
  return it == top.end() ? Json(nullptr) : *it;
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// Deprecated `cpu_offload`-style key -> its replacement (DeepSpeedConfigModel semantics).
Status deprecated_map(ResolvedBlock& rb, std::string_view old_key, std::string_view new_key,
                      const Json& new_value, std::vector<std::string>& warnings) {
  if (!rb.was_given(old_key)) return Status::ok();
  warnings.push_back(
      fmt::format("Config parameter {} is deprecated use {} instead", old_key, new_key));
  if (rb.was_given(new_key)) {
    return invalid_argument(
        "Cannot provide deprecated parameter '{}' and replacing parameter "
        "'{}' together",
        old_key, new_key);
  }
  rb.values[std::string(new_key)] = new_value;
  return Status::ok();
}

Result<OffloadConfig> offload_parse(Json& slot, const BlockSpec& spec,
                                    std::vector<std::string>& warnings) {
  OffloadConfig o;
  if (slot.is_null()) {
    o.buffer_count = spec.path.ends_with("offload_optimizer") ? 4 : 5;
    return o;
  }
  ZT_ASSIGN_OR_RETURN(ResolvedBlock rb, block_resolve(slot, spec, warnings));
  const Json& v = rb.values;
  o.device = v["device"].get<std::string>();
  o.nvme_path = v["nvme_path"].is_null() ? "" : v["nvme_path"].get<std::string>();
  o.buffer_count = static_cast<int>(v["buffer_count"].get<int64_t>());
  o.pin_memory = v["pin_memory"].get<bool>();
  if (v.contains("buffer_size"))
    o.buffer_size = static_cast<double>(v["buffer_size"].get<int64_t>());
  if (v.contains("max_in_cpu")) o.max_in_cpu = static_cast<double>(v["max_in_cpu"].get<int64_t>());
  if (v.contains("pipeline_read")) {
    o.pipeline_read = v["pipeline_read"].get<bool>();
    o.pipeline_write = v["pipeline_write"].get<bool>();
    o.fast_init = v["fast_init"].get<bool>();
    o.ratio = v["ratio"].get<double>();
    if (o.ratio > 1.0) {
      return invalid_argument(
          "{}.ratio must be <= 1 (the fraction of optimizer states on the "
          "CPU), got {}",
          spec.path, py_float(o.ratio));
    }
  }
  if (o.device == "nvme" && o.nvme_path.empty()) {
    return invalid_argument(
        "{}.device is \"nvme\" but nvme_path is not set; give the directory "
        "on the NVMe drive to swap to",
        spec.path);
  }
  slot = v;
  return o;
}

bool is_dynamic_key(std::string_view k) {
  return k == "initial_scale_power" || k == "loss_scale_window" || k == "min_loss_scale" ||
         k == "hysteresis" || k == "consecutive_hysteresis";
}

Status betas_read(const Json& v, double& b1, double& b2) {
  if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number()) {
    return invalid_argument("optimizer.params.betas must be a list of two numbers, got {}",
                            v.dump());
  }
  b1 = v[0].get<double>();
  b2 = v[1].get<double>();
  return Status::ok();
}

// torch.optim's argument checks, with its messages.
Status optimizer_ranges_check(const OptimizerConfig& o) {
  if (o.lr < 0) return invalid_argument("Invalid learning rate: {}", py_float(o.lr));
  if (o.eps < 0) return invalid_argument("Invalid epsilon value: {}", py_float(o.eps));
  if (o.beta1 < 0 || o.beta1 >= 1) {
    return invalid_argument("Invalid beta parameter at index 0: {}", py_float(o.beta1));
  }
  if (o.beta2 < 0 || o.beta2 >= 1) {
    return invalid_argument("Invalid beta parameter at index 1: {}", py_float(o.beta2));
  }
  if (o.weight_decay < 0) {
    return invalid_argument("Invalid weight_decay value: {}", py_float(o.weight_decay));
  }
  return Status::ok();
}

constexpr std::string_view kDeepSpeedOptimizers[] = {
    "adagrad",     "adam",   "adamw",   "lamb",  "onebitadam", "onebitlamb",
    "zerooneadam", "muadam", "muadamw", "musgd", "lion"};
constexpr std::string_view kTorchOptimizers[] = {
    "Adadelta", "Adafactor", "Adagrad", "Adam",  "AdamW",   "SparseAdam", "Adamax",
    "ASGD",     "LBFGS",     "NAdam",   "RAdam", "RMSprop", "Rprop",      "SGD"};
constexpr std::string_view kTorchSchedulers[] = {"LambdaLR",
                                                 "MultiplicativeLR",
                                                 "StepLR",
                                                 "MultiStepLR",
                                                 "ConstantLR",
                                                 "LinearLR",
                                                 "ExponentialLR",
                                                 "SequentialLR",
                                                 "CosineAnnealingLR",
                                                 "ChainedScheduler",
                                                 "ReduceLROnPlateau",
                                                 "CyclicLR",
                                                 "CosineAnnealingWarmRestarts",
                                                 "OneCycleLR",
                                                 "PolynomialLR",
                                                 "LRScheduler"};

template <size_t N>
bool contains(const std::string_view (&list)[N], std::string_view s) {
  return std::find(std::begin(list), std::end(list), s) != std::end(list);
}

}  // namespace

Status precision_parse(const Json& top, DeepSpeedConfig& c) {
  const Json fp16_given = top_value(top, "fp16");
  ZT_ASSIGN_OR_RETURN(ResolvedBlock fp, block_resolve(fp16_given, kFp16Block, c.warnings));
  const Json& v = fp.values;
  Fp16Config& f = c.fp16;
  f.enabled = v["enabled"].get<bool>();
  f.auto_cast = v["auto_cast"].get<bool>();
  f.loss_scale = v["loss_scale"].get<double>();
  f.initial_scale_power = static_cast<int>(v["initial_scale_power"].get<int64_t>());
  f.loss_scale_window = static_cast<int>(v["loss_scale_window"].get<int64_t>());
  f.hysteresis = static_cast<int>(v["hysteresis"].get<int64_t>());
  f.consecutive_hysteresis = v["consecutive_hysteresis"].get<bool>();
  f.min_loss_scale = v["min_loss_scale"].get<double>();
  f.master_weights_and_grads = f.enabled && v["fp16_master_weights_and_grads"].get<bool>();
  // DeepSpeed tests key presence in the user's dict (get_dynamic_loss_scale_args).
  f.has_dynamic_keys = false;
  if (fp16_given.is_object()) {
    for (const auto& [k, val] : fp16_given.items()) f.has_dynamic_keys |= is_dynamic_key(k);
  }
  if (f.initial_scale_power > 1000) {
    return invalid_argument(
        "fp16.initial_scale_power = {} is too large: the loss scale starts "
        "at 2^initial_scale_power (DeepSpeed's default is 16)",
        f.initial_scale_power);
  }
  c.blocks["fp16"] = v;

  // "bf16", then the old name "bfloat16" (get_bfloat16_enabled reads the first one present).
  const bool has_bf16 = top.contains("bf16"), has_old = top.contains("bfloat16");
  if (has_bf16 && has_old) {
    c.warnings.push_back(
        "both \"bf16\" and \"bfloat16\" are given; \"bf16\" is used (as in "
        "DeepSpeed) and \"bfloat16\" is ignored");
  }
  const BlockSpec bf16_spec{has_bf16 || !has_old ? "bf16" : "bfloat16", BlockKind::kPlain,
                            kBf16Fields};
  ZT_ASSIGN_OR_RETURN(ResolvedBlock bf,
                      block_resolve(top_value(top, bf16_spec.path), bf16_spec, c.warnings));
  c.bf16_enabled = bf.values["enabled"].get<bool>();
  c.blocks["bf16"] = bf.values;
  if (f.enabled && c.bf16_enabled) {
    return invalid_argument("bfloat16 and fp16 modes cannot be simultaneously enabled");
  }
  return Status::ok();
}

Status zero_parse(const Json& top, DeepSpeedConfig& c) {
  Json given = top_value(top, "zero_optimization");
  if (given.is_boolean()) {
    // read_zero_config_deprecated: `true` is stage 1 with the top-level allgather_size.
    const bool on = given.get<bool>();
    c.warnings.push_back(
        "DeepSpeedConfig: this format of ZeRO optimization setup is deprecated. "
        "Please use \"zero_optimization\": {\"stage\": N, ...}");
    given = Json{{"stage", on ? 1 : 0}};
    if (on) given["allgather_bucket_size"] = c.blocks.value("allgather_size", Json(500000000));
  }
  ZT_ASSIGN_OR_RETURN(ResolvedBlock rb, block_resolve(given, kZeroBlock, c.warnings));
  ZT_RETURN_IF_ERROR(deprecated_map(
      rb, "cpu_offload", "offload_optimizer",
      rb.values["cpu_offload"] == true ? Json{{"device", "cpu"}} : Json(nullptr), c.warnings));
  ZT_RETURN_IF_ERROR(deprecated_map(
      rb, "cpu_offload_param", "offload_param",
      rb.values["cpu_offload_param"] == true ? Json{{"device", "cpu"}} : Json(nullptr),
      c.warnings));
  ZT_RETURN_IF_ERROR(deprecated_map(
      rb, "stage3_gather_fp16_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save",
      rb.values["stage3_gather_fp16_weights_on_model_save"], c.warnings));
  if (rb.was_given("cpu_offload_use_pin_memory")) {
    c.warnings.push_back(
        "Config parameter cpu_offload_use_pin_memory is deprecated use "
        "offload_param or offload_optimizer instead (its value is ignored)");
  }
  Json& v = rb.values;
  for (const auto& f : kZeroFields) {
    if (f.flags & kDeprecated) v.erase(std::string(f.out_name()));
  }

  ZeroConfig& z = c.zero;
  const int64_t stage = v["stage"].get<int64_t>();
  if (stage > 3) return invalid_argument("DeepSpeedConfig: Maximum supported ZeRO stage is 3");
  z.stage = static_cast<int>(stage);
  z.contiguous_gradients = v["contiguous_gradients"].get<bool>();
  z.reduce_scatter = v["reduce_scatter"].get<bool>();
  z.reduce_bucket_size = v["reduce_bucket_size"].get<int64_t>();
  z.use_multi_rank_bucket_allreduce = v["use_multi_rank_bucket_allreduce"].get<bool>();
  z.allgather_partitions = v["allgather_partitions"].get<bool>();
  z.allgather_bucket_size = v["allgather_bucket_size"].get<int64_t>();
  // overlap_comm_valid: unset means true for stage 3 only.
  z.overlap_comm = v["overlap_comm"].is_null() ? z.stage == 3 : v["overlap_comm"].get<bool>();
  v["overlap_comm"] = z.overlap_comm;
  z.load_from_fp32_weights = v["load_from_fp32_weights"].get<bool>();
  z.sub_group_size = v["sub_group_size"].get<int64_t>();
  z.round_robin_gradients = v["round_robin_gradients"].get<bool>();
  z.ignore_unused_parameters = v["ignore_unused_parameters"].get<bool>();
  z.stage3_prefetch_bucket_size = v["stage3_prefetch_bucket_size"].get<int64_t>();
  z.stage3_param_persistence_threshold = v["stage3_param_persistence_threshold"].get<int64_t>();
  z.stage3_model_persistence_threshold = v["stage3_model_persistence_threshold"].get<int64_t>();
  z.stage3_max_live_parameters = v["stage3_max_live_parameters"].get<int64_t>();
  z.stage3_max_reuse_distance = v["stage3_max_reuse_distance"].get<int64_t>();
  z.stage3_gather_16bit_weights_on_model_save =
      v["stage3_gather_16bit_weights_on_model_save"].get<bool>();
  ZT_ASSIGN_OR_RETURN(z.offload_param,
                      offload_parse(v["offload_param"], kOffloadParamBlock, c.warnings));
  ZT_ASSIGN_OR_RETURN(z.offload_optimizer,
                      offload_parse(v["offload_optimizer"], kOffloadOptimizerBlock, c.warnings));

  if (z.offload_optimizer.ratio < 1.0 && z.stage != 3) {
    return invalid_argument("Partial offloading only supported for ZeRO Stage 3.");
  }
  if ((z.stage == 1 || z.stage == 2) && z.allgather_bucket_size % 2 != 0) {
    // stage_1_and_2.py: nccl_start_alignment_factor = 2 (4-byte alignment of 16-bit elements).
    return invalid_argument(
        "allgather_bucket_size must be a multiple of "
        "nccl_start_alignment_factor, 2 (zero_optimization."
        "allgather_bucket_size = {})",
        z.allgather_bucket_size);
  }
  if (z.offload_param.enabled() && z.stage != 3) {
    c.warnings.push_back(
        fmt::format("zero_optimization.offload_param is only used by stage 3; "
                    "ignored at stage {}",
                    z.stage));
  }
  if (z.offload_optimizer.enabled() && z.stage == 0) {
    c.warnings.push_back(
        "zero_optimization.offload_optimizer needs stage 1, 2 or 3; ignored at "
        "stage 0");
  }
  if (c.fp16.master_weights_and_grads && z.stage != 2) {
    return invalid_argument(
        "Fp16_master_weights_and_grads is only supported with ZeRO Stage 2 "
        "for now.");
  }
  c.blocks["zero_optimization"] = v;
  return Status::ok();
}

Status optimizer_parse(const Json& top, DeepSpeedConfig& c) {
  OptimizerConfig& o = c.optimizer;
  if (!top.contains("optimizer") || top["optimizer"].is_null()) return Status::ok();
  const BlockSpec spec{"optimizer", BlockKind::kPlain, kOptimizerBlockFields};
  ZT_ASSIGN_OR_RETURN(ResolvedBlock rb, block_resolve(top["optimizer"], spec, c.warnings));
  if (rb.values["type"].is_null()) {
    return invalid_argument(
        "optimizer: \"type\" is missing; give one of Adam, AdamW, Lamb, SGD "
        "(DeepSpeed would silently train without this block's settings)");
  }
  const std::string given_type = rb.values["type"].get<std::string>();
  std::string name = given_type;
  if (contains(kDeepSpeedOptimizers, lower(name))) name = lower(name);
  const Json params = rb.values["params"].is_null() ? Json::object() : rb.values["params"];

  // engine.py _do_sanity_check, then _configure_basic_optimizer, in that order.
  if (!contains(kDeepSpeedOptimizers, name) && !contains(kTorchOptimizers, name)) {
    return invalid_argument(
        "{} is not a supported DeepSpeed Optimizer (optimizer.type); "
        "ZeroTrain supports Adam, AdamW, Lamb and SGD",
        given_type);
  }
  if ((name == "lamb" || name == "onebitlamb") && !c.dynamic_loss_scale()) {
    return invalid_argument("DeepSpeed {} optimizer requires dynamic loss scaling", name);
  }
  if (params.contains("max_grad_norm")) {
    return invalid_argument(
        "'max_grad_norm' is not supported as an optimizer parameter, please switch to using the "
        "deepspeed parameter 'gradient_clipping' see: "
        "https://www.deepspeed.ai/docs/config-json/#gradient-clipping for more details");
  }
  if (c.zero.stage > 0) {
    if (name == "onebitadam") return invalid_argument("1bit-Adam is not compatible with ZeRO");
    if (name == "zerooneadam") return invalid_argument("0/1 Adam is not compatible with ZeRO");
    if (name == "onebitlamb") return invalid_argument("1bit-Lamb is not compatible with ZeRO");
  }
  const FieldSpec* table = nullptr;
  size_t table_size = 0;
  if (name == "adam" || name == "adamw") {
    o.type = name;
    table = kAdamParams;
    table_size = std::size(kAdamParams);
  } else if (name == "lamb") {
    o.type = "lamb";
    table = kLambParams;
    table_size = std::size(kLambParams);
  } else if (name == "SGD") {
    o.type = "sgd";
    table = kSgdParams;
    table_size = std::size(kSgdParams);
  } else {
    return invalid_argument(
        "optimizer \"{}\" is not supported by ZeroTrain yet; use Adam, AdamW, "
        "Lamb or SGD",
        given_type);
  }
  if (c.zero.stage > 0 && (o.type == "lamb" || o.type == "sgd") &&
      !c.zero_allow_untested_optimizer) {
    // is_zero_supported_optimizer: FusedLamb and torch SGD are not on DeepSpeed's ZeRO list.
    return invalid_argument(
        "You are using an untested ZeRO Optimizer. Please add "
        "<\"zero_allow_untested_optimizer\": true> in the configuration file "
        "to use it.");
  }
  const BlockSpec pspec{"optimizer.params", BlockKind::kStrict, {table, table_size}};
  ZT_ASSIGN_OR_RETURN(ResolvedBlock pr, block_resolve(params, pspec, c.warnings));
  const Json& p = pr.values;
  o.present = true;
  o.params = params;
  o.lr = p["lr"].get<double>();
  o.weight_decay = p["weight_decay"].get<double>();
  if (o.type == "sgd") {
    o.momentum = p["momentum"].get<double>();
    o.dampening = p["dampening"].get<double>();
    o.nesterov = p["nesterov"].get<bool>();
    if (p["maximize"].get<bool>()) {
      return invalid_argument("optimizer.params.maximize = true is not supported by ZeroTrain");
    }
    if (o.lr < 0) return invalid_argument("Invalid learning rate: {}", py_float(o.lr));
    if (o.momentum < 0) return invalid_argument("Invalid momentum value: {}", py_float(o.momentum));
    if (o.weight_decay < 0) {
      return invalid_argument("Invalid weight_decay value: {}", py_float(o.weight_decay));
    }
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0)) {
      return invalid_argument("Nesterov momentum requires a momentum and zero dampening");
    }
    return Status::ok();
  }
  ZT_RETURN_IF_ERROR(betas_read(p["betas"], o.beta1, o.beta2));
  o.eps = p["eps"].get<double>();
  o.bias_correction = p["bias_correction"].get<bool>();
  if (p["amsgrad"].get<bool>()) {
    return invalid_argument("{} does not support the AMSGrad variant.",
                            o.type == "lamb" ? "FusedLamb" : "FusedAdam");
  }
  if (o.type == "lamb") {
    o.max_coeff = p["max_coeff"].get<double>();
    o.min_coeff = p["min_coeff"].get<double>();
    if (p["eps_inside_sqrt"].get<bool>()) {
      return invalid_argument(
          "optimizer.params.eps_inside_sqrt = true is not supported by "
          "ZeroTrain's Lamb");
    }
  } else {
    // "Adam" is AdamW unless adam_w_mode is false; "AdamW" always is (engine.py).
    o.adam_w_mode = o.type == "adamw" || p["adam_w_mode"].get<bool>();
    o.torch_adam = p["torch_adam"].get<bool>();
    if (!p["fp32_optimizer_states"].get<bool>()) {
      return invalid_argument(
          "optimizer.params.fp32_optimizer_states = false is not supported "
          "by ZeroTrain (optimizer states are fp32)");
    }
  }
  return optimizer_ranges_check(o);
}

Status scheduler_parse(const Json& top, DeepSpeedConfig& c) {
  SchedulerConfig& s = c.scheduler;
  if (!top.contains("scheduler") || top["scheduler"].is_null()) return Status::ok();
  const BlockSpec spec{"scheduler", BlockKind::kPlain, kSchedulerBlockFields};
  ZT_ASSIGN_OR_RETURN(ResolvedBlock rb, block_resolve(top["scheduler"], spec, c.warnings));
  if (rb.values["type"].is_null()) {
    return invalid_argument(
        "scheduler: \"type\" is missing; give one of WarmupLR, WarmupDecayLR, "
        "WarmupCosineLR, OneCycle, LRRangeTest");
  }
  s.type = rb.values["type"].get<std::string>();
  s.params = rb.values["params"].is_null() ? Json::object() : rb.values["params"];
  bool known = false;
  for (const auto& k : kSchedulers) known |= k.type == s.type;
  if (!known) {
    if (contains(kTorchSchedulers, s.type)) {
      return invalid_argument(
          "scheduler \"{}\" (torch.optim.lr_scheduler) is not supported by "
          "ZeroTrain yet; use WarmupLR, WarmupDecayLR, WarmupCosineLR, "
          "OneCycle or LRRangeTest",
          s.type);
    }
    return invalid_argument(
        "DeepSpeed does not recognize LR scheduler {}; ZeroTrain supports "
        "WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest",
        s.type);
  }
  s.present = true;
  // Type and range checks of the params now, so `zt config check` reports them.
  ZT_ASSIGN_OR_RETURN(auto sched, lr_scheduler_create(s, c.optimizer.lr));
  (void)sched;
  return Status::ok();
}

Status secondary_blocks_parse(const Json& top, DeepSpeedConfig& c) {
  for (const auto& nb : kSecondaryBlocks) {
    ZT_ASSIGN_OR_RETURN(ResolvedBlock rb,
                        block_resolve(top_value(top, nb.key), nb.spec, c.warnings));
    Json& v = rb.values;
    if (nb.key == "checkpoint") {
      const std::string mode = v["tag_validation"].get<std::string>();
      if (mode != "WARN" && mode != "IGNORE" && mode != "FAIL") {
        return invalid_argument(
            "Checkpoint config contains invalid tag_validation value of {}, "
            "expecting one of ['WARN', 'IGNORE', 'FAIL']",
            mode);
      }
      c.checkpoint_tag_validation = mode;
      c.checkpoint_load_universal = v["load_universal"].get<bool>();
      c.checkpoint_use_node_local_storage = v["use_node_local_storage"].get<bool>();
      Json& pw = v["parallel_write"];
      Json stage = pw.value("pipeline_stage", Json(false));
      if (!stage.is_boolean()) {
        return invalid_argument(
            "checkpoint::parallel_write::pipeline_stage value of '{}' is "
            "invalid, expecting: true or false",
            stage.dump());
      }
      pw = Json{{"pipeline_stage", stage}};
    } else if (nb.key == "data_types") {
      if (!v["grad_accum_dtype"].is_null()) {
        const std::string d = lower(v["grad_accum_dtype"].get<std::string>());
        std::string canon;
        if (d == "fp32" || d == "float32" || d == "float" || d == "torch.float32") canon = "fp32";
        if (d == "fp16" || d == "float16" || d == "half" || d == "torch.float16") canon = "fp16";
        if (d == "bf16" || d == "bfloat16" || d == "torch.bfloat16") canon = "bf16";
        if (canon.empty()) {
          return invalid_argument(
              "data_types.grad_accum_dtype = \"{}\" is not supported; use "
              "\"fp32\", \"fp16\" or \"bf16\"",
              v["grad_accum_dtype"].get<std::string>());
        }
        v["grad_accum_dtype"] = canon;
        c.grad_accum_dtype = canon;
      }
    } else if ((nb.key == "wandb" || nb.key == "comet") && v["enabled"].get<bool>()) {
      // Both need their service's network; training goes on without them.
      c.warnings.push_back(fmt::format(
          "{}.enabled = true: {} is not available in ZeroTrain (it needs its service online); "
          "enable \"tensorboard\" or \"csv_monitor\" instead (they write the same "
          "Train/Samples/* values to files{})",
          nb.key, nb.key == "wandb" ? "Weights & Biases" : "Comet",
          nb.key == "wandb" ? "; `wandb sync --sync-tensorboard DIR` uploads the event files later"
                            : ""));
    } else if (nb.key == "flops_profiler") {
      // DeepSpeed: wall_clock_breakdown |= flops_profiler.enabled.
      if (v["enabled"].get<bool>()) c.wall_clock_breakdown = true;
    }
    c.blocks[std::string(nb.key)] = v;
  }
  Json timers = top_value(top, "timers");
  if (!timers.is_null() && !timers.is_object()) {
    return invalid_argument("timers must be a JSON object, got {}", timers.dump());
  }
  Json tp = timers.is_object() ? timers.value("throughput", Json(nullptr)) : Json(nullptr);
  ZT_ASSIGN_OR_RETURN(ResolvedBlock trb, block_resolve(tp, kTimersThroughputBlock, c.warnings));
  c.blocks["timers"] = Json{{"throughput", trb.values}};
  return Status::ok();
}

Json zero_to_json(const DeepSpeedConfig& c) {
  const ZeroConfig& z = c.zero;
  Json v = c.blocks.value("zero_optimization", Json::object());
  v["stage"] = z.stage;
  v["contiguous_gradients"] = z.contiguous_gradients;
  v["reduce_scatter"] = z.reduce_scatter;
  v["reduce_bucket_size"] = z.reduce_bucket_size;
  v["use_multi_rank_bucket_allreduce"] = z.use_multi_rank_bucket_allreduce;
  v["allgather_partitions"] = z.allgather_partitions;
  v["allgather_bucket_size"] = z.allgather_bucket_size;
  v["overlap_comm"] = z.overlap_comm;
  v["load_from_fp32_weights"] = z.load_from_fp32_weights;
  v["sub_group_size"] = z.sub_group_size;
  v["round_robin_gradients"] = z.round_robin_gradients;
  v["ignore_unused_parameters"] = z.ignore_unused_parameters;
  v["stage3_prefetch_bucket_size"] = z.stage3_prefetch_bucket_size;
  v["stage3_param_persistence_threshold"] = z.stage3_param_persistence_threshold;
  v["stage3_model_persistence_threshold"] = z.stage3_model_persistence_threshold;
  v["stage3_max_live_parameters"] = z.stage3_max_live_parameters;
  v["stage3_max_reuse_distance"] = z.stage3_max_reuse_distance;
  v["stage3_gather_16bit_weights_on_model_save"] = z.stage3_gather_16bit_weights_on_model_save;
  auto offload = [](const OffloadConfig& o, bool optimizer) -> Json {
    if (!o.enabled()) return nullptr;
    Json j{{"device", o.device},
           {"nvme_path", o.nvme_path.empty() ? Json(nullptr) : Json(o.nvme_path)},
           {"buffer_count", o.buffer_count},
           {"pin_memory", o.pin_memory}};
    if (optimizer) {
      j["pipeline_read"] = o.pipeline_read;
      j["pipeline_write"] = o.pipeline_write;
      j["fast_init"] = o.fast_init;
      j["ratio"] = o.ratio;
    } else {
      j["buffer_size"] = static_cast<int64_t>(o.buffer_size);
      j["max_in_cpu"] = static_cast<int64_t>(o.max_in_cpu);
    }
    return j;
  };
  v["offload_param"] = offload(z.offload_param, false);
  v["offload_optimizer"] = offload(z.offload_optimizer, true);
  return v;
}

Json optimizer_to_json(const OptimizerConfig& o) {
  Json p = Json::object();
  p["lr"] = o.lr;
  p["weight_decay"] = o.weight_decay;
  if (o.type == "sgd") {
    p["momentum"] = o.momentum;
    p["dampening"] = o.dampening;
    p["nesterov"] = o.nesterov;
    // torch's class name: DeepSpeed matches it case-sensitively.
    return Json{{"type", "SGD"}, {"params", p}};
  }
  p["betas"] = Json::array({o.beta1, o.beta2});
  p["eps"] = o.eps;
  p["bias_correction"] = o.bias_correction;
  if (o.type == "lamb") {
    p["max_coeff"] = o.max_coeff;
    p["min_coeff"] = o.min_coeff;
  } else {
    p["adam_w_mode"] = o.adam_w_mode;
    p["torch_adam"] = o.torch_adam;
  }
  return Json{{"type", o.type}, {"params", p}};
}

}  // namespace zt::config_detail
