// ds_config.json -> DeepSpeedConfig: the top level (reference §1): scalars, the batch triad
// (runtime/config.py _set_batch_related_parameters / _batch_assertion), unknown keys, and the
// order in which the blocks are read (config_blocks.cc). Also config_load and config_to_json.
#include "zt/runtime/config.h"

#include "zt/core/file_io.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "zt/core/assert.h"
#include "zt/runtime/config_blocks.h"
#include "zt/runtime/config_keys.h"
#include "zt/runtime/loss_scaler.h"
#include "zt/runtime/lr_scheduler.h"

namespace zt {
namespace {

using namespace config_detail;

// Python's a // b (floor division), b != 0.
int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

std::optional<int64_t> opt_int(const Json& v) {
  return v.is_null() ? std::nullopt : std::optional<int64_t>(v.get<int64_t>());
}

// The six cases of _set_batch_related_parameters, then _batch_assertion's four asserts.
Status batch_resolve(const Json& scalars, DeepSpeedConfig& c) {
  std::optional<int64_t> tb = opt_int(scalars["train_batch_size"]);
  std::optional<int64_t> mb = opt_int(scalars["train_micro_batch_size_per_gpu"]);
  std::optional<int64_t> gas = opt_int(scalars["gradient_accumulation_steps"]);
  const int64_t w = c.world_size;
  auto mb_zero = [] {
    return invalid_argument("Micro batch size per gpu: 0 has to be greater than 0");
  };
  auto gas_zero = [] {
    return invalid_argument("Gradient accumulation steps: 0 has to be greater than 0");
  };
  if (tb && mb && gas) {
    // all three given: kept as they are
  } else if (tb && mb) {
    if (*mb == 0) return mb_zero();  // Python: ZeroDivisionError
    gas = floordiv(floordiv(*tb, *mb), w);
  } else if (tb && gas) {
    if (*gas == 0) return gas_zero();
    mb = floordiv(floordiv(*tb, w), *gas);
  } else if (mb && gas) {
    tb = *mb * *gas * w;
  } else if (tb) {
    gas = 1;
    mb = floordiv(*tb, w);
  } else if (mb) {
    tb = *mb * w;
    gas = 1;
  } else {
    return invalid_argument(
        "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided");
  }
  if (*tb <= 0) return invalid_argument("Train batch size: {} has to be greater than 0", *tb);
  if (*mb <= 0) {
    return invalid_argument("Micro batch size per gpu: {} has to be greater than 0", *mb);
  }
  if (*gas <= 0) {
    return invalid_argument("Gradient accumulation steps: {} has to be greater than 0", *gas);
  }
  if (*tb != *mb * *gas * w) {
    return invalid_argument(
        "Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
        "gradient_acc_step * world_size {} != {} * {} * {}",
        *tb, *mb, *gas, w);
  }
  c.train_batch_size = *tb;
  c.train_micro_batch_size_per_gpu = *mb;
  c.gradient_accumulation_steps = *gas;
  return Status::ok();
}

bool is_block_key(std::string_view k) {
  for (std::string_view b :
       {"zero_optimization", "fp16", "bf16", "bfloat16", "optimizer", "scheduler", "timers"}) {
    if (k == b) return true;
  }
  for (const auto& nb : kSecondaryBlocks) {
    if (nb.key == k) return true;
  }
  return false;
}

// Top-level keys: scalars (converted into `scalars`, defaults filled), DeepSpeed blocks ZeroTrain
// does not implement (kept in c.blocks), unknown keys (c.ignored_top_level_keys).
Status top_level_read(const Json& top, DeepSpeedConfig& c, Json& scalars) {
  for (const auto& [k, v] : top.items()) {
    const FieldSpec* f = nullptr;
    for (const auto& s : kTopLevelScalars) {
      if (s.name == k) f = &s;
    }
    if (f != nullptr) {
      if (value_is_auto(v)) return auto_unresolved(k);
      ZT_ASSIGN_OR_RETURN(scalars[k], value_convert(v, *f, k));
      continue;
    }
    if (is_block_key(k)) continue;
    if (std::find(std::begin(kTopLevelOtherDeepSpeedBlocks),
                  std::end(kTopLevelOtherDeepSpeedBlocks),
                  k) != std::end(kTopLevelOtherDeepSpeedBlocks)) {
      c.blocks[k] = v;
      const bool enabled = v.is_object() && v.value("enabled", Json(false)) == true;
      if (enabled && k == "elasticity") {
        return invalid_argument(
            "elasticity.enabled = true is not supported by ZeroTrain yet (it "
            "would rewrite the batch sizes); remove the block or set "
            "\"enabled\": false");
      }
      if (enabled && k == "hybrid_engine") {
        c.warnings.push_back(
            "hybrid_engine: used by zt train --task ppo (the actor's generation, with "
            "inference_tp_size); other tasks ignore the block");
      } else if (enabled && k != "autotuning") {
        c.warnings.push_back(
            fmt::format("{}: a DeepSpeed feature ZeroTrain does not implement "
                        "yet; the block is ignored",
                        k));
      }
      continue;
    }
    c.ignored_top_level_keys.push_back(k);
  }
  for (const auto& f : kTopLevelScalars) {
    const std::string name(f.name);
    if (!scalars.contains(name)) {
      scalars[name] = Json::parse(f.default_json);
    } else if ((f.flags & kNotActedOn) && scalars[name] != Json::parse(f.default_json)) {
      c.warnings.push_back(fmt::format("{} = {}: parsed but not acted on by ZeroTrain yet", name,
                                       scalars[name].dump()));
    }
  }
  return Status::ok();
}

Status scalars_apply(const Json& s, DeepSpeedConfig& c) {
  c.steps_per_print = opt_int(s["steps_per_print"]);
  c.gradient_clipping = s["gradient_clipping"].get<double>();
  c.prescale_gradients = s["prescale_gradients"].get<bool>();
  c.gradient_predivide_factor = s["gradient_predivide_factor"].get<double>();
  c.wall_clock_breakdown = s["wall_clock_breakdown"].get<bool>();
  c.zero_allow_untested_optimizer = s["zero_allow_untested_optimizer"].get<bool>();
  c.zero_force_ds_cpu_optimizer = s["zero_force_ds_cpu_optimizer"].get<bool>();
  if (!s["communication_data_type"].is_null()) {
    std::string v = s["communication_data_type"].get<std::string>();
    for (char& ch : v) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (v != "fp32" && v != "fp16" && v != "bf16") {
      return invalid_argument(
          "Invalid communication_data_type. Supported data types: ['fp16', "
          "'bf16', 'fp32']. Got: {}",
          v);
    }
    c.communication_data_type = v;
  }
  // Scalars the typed fields do not carry stay in blocks, for config_to_json.
  for (const auto& f : kTopLevelScalars) {
    const std::string name(f.name);
    if ((f.flags & kNotActedOn) || name == "vocabulary_size") c.blocks[name] = s[name];
  }
  if (s.contains("allgather_size")) c.blocks["allgather_size"] = s["allgather_size"];
  return Status::ok();
}

Result<DeepSpeedConfig> parse_impl(std::string_view text, std::string_view source, int world_size) {
  ZT_ASSIGN_OR_RETURN(Json top, json_text_parse(text, source));
  DeepSpeedConfig c;
  c.raw = top;
  c.world_size = world_size;
  Json scalars = Json::object();
  ZT_RETURN_IF_ERROR(top_level_read(top, c, scalars));
  ZT_RETURN_IF_ERROR(scalars_apply(scalars, c));
  // DeepSpeedConfig._initialize_params order: zero, precision, ... then the batch triad; the
  // optimizer/scheduler checks are the engine's (_do_sanity_check, _configure_basic_optimizer).
  ZT_RETURN_IF_ERROR(precision_parse(top, c));
  ZT_RETURN_IF_ERROR(zero_parse(top, c));
  ZT_RETURN_IF_ERROR(secondary_blocks_parse(top, c));
  c.blocks.erase("allgather_size");
  ZT_RETURN_IF_ERROR(batch_resolve(scalars, c));
  ZT_RETURN_IF_ERROR(optimizer_parse(top, c));
  ZT_RETURN_IF_ERROR(scheduler_parse(top, c));
  return c;
}

}  // namespace

namespace config_detail {

Json fp16_to_json(const DeepSpeedConfig& c) {
  const Fp16Config& f = c.fp16;
  Json v = c.blocks.value("fp16", Json::object());
  v["enabled"] = f.enabled;
  v["auto_cast"] = f.auto_cast;
  v["loss_scale"] = f.loss_scale;
  v["fp16_master_weights_and_grads"] = f.master_weights_and_grads;
  v["initial_scale_power"] = f.initial_scale_power;
  v["loss_scale_window"] = f.loss_scale_window;
  v["hysteresis"] = f.hysteresis;
  v["consecutive_hysteresis"] = f.consecutive_hysteresis;
  v["min_loss_scale"] = f.min_loss_scale;
  if (f.enabled && f.loss_scale == 0) {
    // The scaler's effective settings (which, without dynamic keys, depend on the ZeRO stage and
    // optimizer, §2), written as dynamic keys so that reading this output gives the same scaler.
    LossScalerOptions o = loss_scaler_options(c);
    v["initial_scale_power"] = static_cast<int>(std::lround(std::log2(o.init_scale)));
    v["loss_scale_window"] = o.scale_window;
    if (o.kind == LossScalerKind::kZero) v["hysteresis"] = o.hysteresis;
    v["consecutive_hysteresis"] = o.consecutive_hysteresis;
    v["min_loss_scale"] = o.min_scale;
  }
  return v;
}

}  // namespace config_detail

DType DeepSpeedConfig::compute_dtype() const {
  if (fp16.enabled) return DType::f16;
  if (bf16_enabled) return DType::bf16;
  return DType::f32;
}

bool DeepSpeedConfig::dynamic_loss_scale() const {
  // get_loss_scale: fp16 -> fp16.loss_scale; bf16 -> 1.0; else 0 (the default).
  if (fp16.enabled) return fp16.loss_scale == 0;
  return !bf16_enabled;
}

DType DeepSpeedConfig::communication_dtype() const {
  if (communication_data_type) {
    if (*communication_data_type == "fp16") return DType::f16;
    if (*communication_data_type == "bf16") return DType::bf16;
    return DType::f32;
  }
  return compute_dtype();
}

Result<DeepSpeedConfig> config_parse(std::string_view text, std::string_view source,
                                     int world_size) {
  ZT_ASSERT(world_size >= 1, "config_parse: world_size {} < 1", world_size);
  Result<DeepSpeedConfig> r = parse_impl(text, source, world_size);
  if (r.is_ok()) return r;
  const std::string& m = r.status().message();
  if (m.starts_with(std::string(source) + ":")) return r;  // already names the file
  return r.status().with_context(fmt::format("{}: ", source));
}

Result<DeepSpeedConfig> config_load(const std::string& path, int world_size) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return not_found(
        "DeepSpeed config file \"{}\" does not exist; pass the path of your "
        "ds_config.json",
        path);
  }
  if (std::filesystem::is_directory(path, ec)) {
    return io_error(
        "DeepSpeed config \"{}\" is a directory; pass the path of the ds_config.json "
        "file",
        path);
  }
  // A FIFO or device would block or never end; a real config is kilobytes.
  ZT_ASSIGN_OR_RETURN(std::string text,
                      file_read_all(path, "DeepSpeed config file", int64_t{64} << 20));
  return config_parse(text, path, world_size);
}

nlohmann::json config_to_json(const DeepSpeedConfig& c) {
  Json out = c.blocks;
  out["train_batch_size"] = c.train_batch_size;
  out["train_micro_batch_size_per_gpu"] = c.train_micro_batch_size_per_gpu;
  out["gradient_accumulation_steps"] = c.gradient_accumulation_steps;
  out["steps_per_print"] = c.steps_per_print ? Json(*c.steps_per_print) : Json(nullptr);
  out["gradient_clipping"] = c.gradient_clipping;
  out["prescale_gradients"] = c.prescale_gradients;
  out["gradient_predivide_factor"] = c.gradient_predivide_factor;
  out["communication_data_type"] =
      c.communication_data_type ? Json(*c.communication_data_type) : Json(nullptr);
  out["wall_clock_breakdown"] = c.wall_clock_breakdown;
  out["zero_allow_untested_optimizer"] = c.zero_allow_untested_optimizer;
  out["zero_force_ds_cpu_optimizer"] = c.zero_force_ds_cpu_optimizer;
  out["fp16"] = fp16_to_json(c);
  if (!out["bf16"].is_object()) out["bf16"] = Json::object();
  out["bf16"]["enabled"] = c.bf16_enabled;
  out["zero_optimization"] = zero_to_json(c);
  if (c.optimizer.present) out["optimizer"] = optimizer_to_json(c.optimizer);
  if (c.scheduler.present) {
    Result<Json> p = lr_scheduler_params_resolve(c.scheduler);
    out["scheduler"] = Json{{"type", c.scheduler.type}, {"params", p ? *p : c.scheduler.params}};
  }
  if (!out["checkpoint"].is_object()) out["checkpoint"] = Json::object();
  out["checkpoint"]["tag_validation"] = c.checkpoint_tag_validation;
  out["checkpoint"]["load_universal"] = c.checkpoint_load_universal;
  out["checkpoint"]["use_node_local_storage"] = c.checkpoint_use_node_local_storage;
  out["data_types"] =
      Json{{"grad_accum_dtype", c.grad_accum_dtype ? Json(*c.grad_accum_dtype) : Json(nullptr)}};
  return out;
}

}  // namespace zt
