// ds_config.json: DeepSpeed's configuration file, read with DeepSpeed's key names, aliases,
// defaults, "auto" rules and error texts (reference §1), resolved against a data-parallel world
// size. docs/config.md lists every key, its default, and which keys are parsed but not acted on.
//
// Assumes: the text is JSON with `//`, `/* */` and `#` comments and trailing commas allowed (a
// subset of hjson, DeepSpeed's file parser); numbers given as floats for integer keys (5e8) are
// accepted when integral. "auto" must have been resolved by the caller (as the Hugging Face
// Trainer does), except inside DeepSpeed's pydantic blocks where it means "the default".
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zt/core/dtype.h"
#include "zt/core/status.h"

namespace zt {

struct OptimizerConfig {
  bool present = false;  // "optimizer" block given
  std::string type;      // canonical lower-case: "adam", "adamw", "sgd", "lamb"
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool adam_w_mode = true;  // "Adam" is AdamW unless adam_w_mode:false; "AdamW" always true
  bool bias_correction = true;
  bool torch_adam = false;  // DeepSpeed: torch.optim.Adam(W) instead of FusedAdam (same math)
  double momentum = 0, dampening = 0;  // SGD
  bool nesterov = false;
  double max_coeff = 10.0, min_coeff = 0.01;  // Lamb
  nlohmann::json params;                      // the "params" object as given
};

struct SchedulerConfig {
  bool present = false;
  std::string type;       // DeepSpeed's name: WarmupLR, WarmupDecayLR, WarmupCosineLR, ...
  nlohmann::json params;  // as given ({} when absent)
};

struct Fp16Config {
  bool enabled = false;
  double loss_scale = 0;  // 0 = dynamic
  int initial_scale_power = 16;
  int loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1;
  // Any of initial_scale_power, loss_scale_window, min_loss_scale, hysteresis,
  // consecutive_hysteresis given (§2: the ZeRO scaler's defaults differ when none is).
  bool has_dynamic_keys = false;
  bool auto_cast = false;
  bool master_weights_and_grads = false;  // fp16.fp16_master_weights_and_grads (stage 2 only)
};

struct OffloadConfig {
  std::string device = "none";  // none | cpu | nvme
  std::string nvme_path;        // "" when not given
  int buffer_count = 5;         // offload_param 5, offload_optimizer 4
  double buffer_size = 1e8;     // elements (offload_param only)
  double max_in_cpu = 1e9;      // elements (offload_param only)
  bool pin_memory = false;
  bool pipeline_read = false, pipeline_write = false;  // offload_optimizer only
  bool fast_init = false;                              // offload_optimizer only
  double ratio = 1.0;                                  // offload_optimizer only; < 1 needs stage 3
  bool enabled() const { return device != "none"; }
};

struct ZeroConfig {
  int stage = 0;
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  int64_t reduce_bucket_size = 500000000;
  bool use_multi_rank_bucket_allreduce = true;
  bool allgather_partitions = true;
  int64_t allgather_bucket_size = 500000000;
  bool overlap_comm = false;  // resolved: unset => true for stage 3 else false
  bool load_from_fp32_weights = true;
  int64_t sub_group_size = 1000000000;
  bool round_robin_gradients = false;
  bool ignore_unused_parameters = true;
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_param_persistence_threshold = 100000;
  int64_t stage3_model_persistence_threshold = INT64_MAX;  // Python's sys.maxsize
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_max_reuse_distance = 1000000000;
  bool stage3_gather_16bit_weights_on_model_save = false;
  OffloadConfig offload_param, offload_optimizer;
};

struct DeepSpeedConfig {
  // Resolved batch triad: train_batch_size == micro * gas * world_size.
  int64_t train_batch_size = 0, train_micro_batch_size_per_gpu = 0, gradient_accumulation_steps = 0;
  int world_size = 1;                      // the data-parallel size it was resolved against
  std::optional<int64_t> steps_per_print;  // None by default (no progress line)
  double gradient_clipping = 0;
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1;
  std::optional<std::string> communication_data_type;  // "fp16"|"bf16"|"fp32" when given
  bool wall_clock_breakdown = false;  // forced on by flops_profiler.enabled, as in DeepSpeed
  bool zero_allow_untested_optimizer = false;
  bool zero_force_ds_cpu_optimizer = true;
  std::optional<std::string> grad_accum_dtype;  // data_types.grad_accum_dtype: fp32|fp16|bf16
  Fp16Config fp16;
  bool bf16_enabled = false;  // "bf16" or alias "bfloat16"
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  ZeroConfig zero;
  // checkpoint block
  std::string checkpoint_tag_validation = "WARN";  // IGNORE | WARN | FAIL
  bool checkpoint_load_universal = false;
  bool checkpoint_use_node_local_storage = false;
  // Resolved secondary blocks, DeepSpeed key names, defaults filled (config_to_json emits them):
  // tensorboard, wandb, csv_monitor, comet, comms_logger, flops_profiler,
  // activation_checkpointing, aio, checkpoint, data_types, timers.
  nlohmann::json blocks = nlohmann::json::object();

  std::vector<std::string>
      ignored_top_level_keys;  // unknown top-level keys (one warning lists them)
  // Other things the engine should log once: keys DeepSpeed ignores inside its plain-dict blocks,
  // deprecated keys, DeepSpeed features set in the file that ZeroTrain parses but does not do.
  std::vector<std::string> warnings;
  nlohmann::json raw;  // the parsed input

  DType compute_dtype() const;  // f16 / bf16 / f32
  // DeepSpeed's dynamic_loss_scale(): loss_scale == 0 in the effective precision (bf16 => 1).
  bool dynamic_loss_scale() const;
  // The dtype gradients travel in: communication_data_type, else the compute dtype.
  DType communication_dtype() const;
};

// text: the file's content; source: the file name used in messages.
Result<DeepSpeedConfig> config_parse(std::string_view text, std::string_view source,
                                     int world_size);
// Missing/unreadable file -> a Status naming the path.
Result<DeepSpeedConfig> config_load(const std::string& path, int world_size);
// Fully resolved, DeepSpeed key names, defaults filled; config_parse accepts it back.
nlohmann::json config_to_json(const DeepSpeedConfig& c);

}  // namespace zt
