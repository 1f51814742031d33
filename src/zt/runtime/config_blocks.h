// The ds_config blocks that map to DeepSpeedConfig's typed fields (internal to src/zt/runtime):
// each reads its block from the top-level json, checks it with DeepSpeed's rules and messages,
// fills its part of `c`, and keeps the resolved json (defaults filled) in c.blocks for
// config_to_json. Warnings go to c.warnings.
#pragma once

#include "zt/runtime/config.h"
#include "zt/runtime/config_schema.h"

namespace zt::config_detail {

// "fp16", "bf16"/"bfloat16" -> c.fp16, c.bf16_enabled.
Status precision_parse(const Json& top, DeepSpeedConfig& c);
// "zero_optimization" (incl. the deprecated `true`/`false` form and cpu_offload* keys) -> c.zero.
Status zero_parse(const Json& top, DeepSpeedConfig& c);
// "optimizer" -> c.optimizer. Needs c.zero and the precision parsed first.
Status optimizer_parse(const Json& top, DeepSpeedConfig& c);
// "scheduler" -> c.scheduler (type and params checked against lr_schedules.py).
Status scheduler_parse(const Json& top, DeepSpeedConfig& c);
// tensorboard, wandb, csv_monitor, comet, comms_logger, flops_profiler, activation_checkpointing,
// aio, checkpoint, data_types, timers -> c.blocks (and the few typed fields they feed).
Status secondary_blocks_parse(const Json& top, DeepSpeedConfig& c);

// The resolved zero_optimization / fp16 / optimizer json from the typed fields (config_to_json).
Json zero_to_json(const DeepSpeedConfig& c);
Json fp16_to_json(const DeepSpeedConfig& c);
Json optimizer_to_json(const OptimizerConfig& o);

}  // namespace zt::config_detail
