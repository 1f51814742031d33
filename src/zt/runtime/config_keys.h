// Every ds_config key ZeroTrain knows, declared once: name, pydantic alias, type, DeepSpeed's
// default, and flags (config_schema.h). Read from microsoft/DeepSpeed 38327e0:
// runtime/constants.py, runtime/zero/config.py, runtime/zero/offload_config.py,
// monitor/config.py, comm/config.py, profiling/constants.py, activation_checkpointing/config.py,
// swap_tensor/constants.py, utils/config.py, runtime/lr_schedules.py, ops/adam/fused_adam.py,
// ops/lamb/fused_lamb.py, torch.optim.SGD. docs/config.md is the user-facing copy of these tables.
#pragma once

#include <string_view>

#include "zt/runtime/config_schema.h"

namespace zt::config_detail {

using K = FieldKind;

// Top-level scalars (read with get_scalar_param in DeepSpeed: plain, "auto" is an error here).
inline constexpr FieldSpec kTopLevelScalars[] = {
    {"train_batch_size", "", K::kInt, "null", kNullable},
    {"train_micro_batch_size_per_gpu", "", K::kInt, "null", kNullable},
    {"gradient_accumulation_steps", "", K::kInt, "null", kNullable},
    {"steps_per_print", "", K::kInt, "null", kNullable | kPositive},
    {"gradient_clipping", "", K::kNumber, "0.0", kNonNegative},
    {"prescale_gradients", "", K::kBool, "false"},
    {"gradient_predivide_factor", "", K::kNumber, "1.0", kPositive},
    {"communication_data_type", "", K::kString, "null", kNullable},
    {"wall_clock_breakdown", "", K::kBool, "false"},
    {"zero_allow_untested_optimizer", "", K::kBool, "false"},
    {"zero_force_ds_cpu_optimizer", "", K::kBool, "true"},
    {"seq_parallel_comm_data_type", "", K::kString, "\"fp32\"", kNotActedOn},
    {"memory_breakdown", "", K::kBool, "false", kNotActedOn},
    {"dump_state", "", K::kBool, "false", kNotActedOn},
    {"sparse_gradients", "", K::kBool, "false", kNotActedOn},
    {"disable_allgather", "", K::kBool, "false", kNotActedOn},
    {"dataloader_drop_last", "", K::kBool, "false", kNotActedOn},
    {"graph_harvesting", "", K::kBool, "false", kNotActedOn},
    {"use_data_before_expert_parallelism", "", K::kBool, "false", kNotActedOn},
    {"vocabulary_size", "", K::kInt, "null", kNullable},
    {"allgather_size", "", K::kInt, "500000000", kPositive},  // only with "zero_optimization": true
};

// Top-level DeepSpeed blocks ZeroTrain keeps (in config_to_json) but does not implement. A block
// with "enabled": true gets a warning; elasticity (which would rewrite the batch sizes) an error.
inline constexpr std::string_view kTopLevelOtherDeepSpeedBlocks[] = {
    "amp",
    "sparse_attention",
    "pipeline",
    "compression_training",
    "elasticity",
    "eigenvalue",
    "progressive_layer_drop",
    "curriculum_learning",
    "data_efficiency",
    "hybrid_engine",
    "nebula",
    "autotuning",
    "weight_quantization",
    "tensor_parallel",
    "quantize_training",
    "compile",
};

inline constexpr FieldSpec kFp16Fields[] = {
    {"enabled", "", K::kBool, "false"},
    {"auto_cast", "", K::kBool, "false"},
    {"loss_scale", "", K::kNumber, "0", kNonNegative},
    {"initial_scale_power", "", K::kInt, "16", kNonNegative},
    {"loss_scale_window", "", K::kInt, "1000", kPositive},
    {"hysteresis", "", K::kInt, "2", kPositive},
    {"consecutive_hysteresis", "", K::kBool, "false"},
    {"min_loss_scale", "", K::kNumber, "1", kPositive},
    {"fp16_master_weights_and_grads", "", K::kBool, "false"},
};
inline constexpr BlockSpec kFp16Block{"fp16", BlockKind::kPlain, kFp16Fields};

inline constexpr FieldSpec kBf16Fields[] = {
    {"enabled", "", K::kBool, "false"},
    {"immediate_grad_update", "", K::kBool, "false", kNotActedOn},
};

inline constexpr FieldSpec kZeroFields[] = {
    {"stage", "", K::kInt, "0", kNonNegative},
    {"contiguous_gradients", "", K::kBool, "true"},
    {"reduce_scatter", "", K::kBool, "true"},
    {"reduce_bucket_size", "", K::kInt, "500000000", kPositive},
    {"use_multi_rank_bucket_allreduce", "", K::kBool, "true"},
    {"allgather_partitions", "", K::kBool, "true"},
    {"allgather_bucket_size", "", K::kInt, "500000000", kPositive},
    {"overlap_comm", "", K::kBool, "null", kNullable},
    {"load_from_fp32_weights", "", K::kBool, "true"},
    {"elastic_checkpoint", "", K::kBool, "false", kNotActedOn},
    {"offload_param", "", K::kObject, "null", kNullable},
    {"offload_optimizer", "", K::kObject, "null", kNullable},
    {"sub_group_size", "", K::kInt, "1000000000", kPositive},
    {"cpu_offload_param", "", K::kBool, "null", kNullable | kDeprecated},
    {"cpu_offload_use_pin_memory", "", K::kBool, "null", kNullable | kDeprecated},
    {"cpu_offload", "", K::kBool, "null", kNullable | kDeprecated},
    {"prefetch_bucket_size", "stage3_prefetch_bucket_size", K::kInt, "50000000", kNonNegative},
    {"param_persistence_threshold", "stage3_param_persistence_threshold", K::kInt, "100000",
     kNonNegative},
    {"model_persistence_threshold", "stage3_model_persistence_threshold", K::kInt,
     "9223372036854775807", kNonNegative},
    {"max_live_parameters", "stage3_max_live_parameters", K::kInt, "1000000000", kNonNegative},
    {"max_reuse_distance", "stage3_max_reuse_distance", K::kInt, "1000000000", kNonNegative},
    {"gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save", K::kBool,
     "false"},
    {"module_granularity_threshold", "stage3_module_granularity_threshold", K::kInt, "0",
     kNotActedOn},
    {"use_all_reduce_for_fetch_params", "stage3_use_all_reduce_for_fetch_params", K::kBool, "false",
     kNotActedOn},
    {"stage3_gather_fp16_weights_on_model_save", "", K::kBool, "false", kDeprecated},
    {"ignore_unused_parameters", "", K::kBool, "true"},
    {"legacy_stage1", "", K::kBool, "false", kNotActedOn},
    {"round_robin_gradients", "", K::kBool, "false"},
    {"zero_hpz_partition_size", "", K::kInt, "1", kNonNegative | kNotActedOn},
    {"zero_quantized_weights", "", K::kBool, "false", kNotActedOn},
    {"zero_quantized_nontrainable_weights", "", K::kBool, "false", kNotActedOn},
    {"zero_quantized_gradients", "", K::kBool, "false", kNotActedOn},
    {"zeropp_loco_param", "", K::kObject, "null", kNullable | kNotActedOn},
    {"mics_shard_size", "", K::kInt, "-1", kNotActedOn},
    {"mics_hierarchical_params_gather", "", K::kBool, "false", kNotActedOn},
    {"memory_efficient_linear", "", K::kBool, "true", kNotActedOn},
    {"pipeline_loading_checkpoint", "", K::kBool, "false", kNotActedOn},
    {"override_module_apply", "", K::kBool, "true", kNotActedOn},
    {"log_trace_cache_warnings", "", K::kBool, "false", kNotActedOn},
};
inline constexpr BlockSpec kZeroBlock{"zero_optimization", BlockKind::kPydantic, kZeroFields};

inline constexpr FieldSpec kOffloadParamFields[] = {
    {"device", "", K::kString, "\"none\"", kFlagNone, "none|cpu|nvme"},
    {"nvme_path", "", K::kString, "null", kNullable},
    {"buffer_count", "", K::kInt, "5", kNonNegative},
    {"buffer_size", "", K::kInt, "100000000", kPositive},
    {"max_in_cpu", "", K::kInt, "1000000000", kNonNegative},
    {"pin_memory", "", K::kBool, "false"},
};
inline constexpr BlockSpec kOffloadParamBlock{"zero_optimization.offload_param",
                                              BlockKind::kPydantic, kOffloadParamFields};

inline constexpr FieldSpec kOffloadOptimizerFields[] = {
    {"device", "", K::kString, "\"none\"", kFlagNone, "none|cpu|nvme"},
    {"nvme_path", "", K::kString, "null", kNullable},
    {"buffer_count", "", K::kInt, "4", kNonNegative},
    {"pin_memory", "", K::kBool, "false"},
    {"pipeline_read", "", K::kBool, "false"},
    {"pipeline_write", "", K::kBool, "false"},
    {"fast_init", "", K::kBool, "false"},
    {"ratio", "", K::kNumber, "1.0", kNonNegative},
};
inline constexpr BlockSpec kOffloadOptimizerBlock{"zero_optimization.offload_optimizer",
                                                  BlockKind::kPydantic, kOffloadOptimizerFields};

// Monitors (monitor/config.py), comms logger, timers: pydantic.
inline constexpr FieldSpec kTensorboardFields[] = {
    {"enabled", "", K::kBool, "false"},
    {"output_path", "", K::kString, "\"\""},
    {"job_name", "", K::kString, "\"DeepSpeedJobName\""},
};
inline constexpr FieldSpec kWandbFields[] = {
    {"enabled", "", K::kBool, "false"},  // enabled: one warning of its own (config_blocks.cc)
    {"group", "", K::kString, "null", kNullable},
    {"team", "", K::kString, "null", kNullable},
    {"project", "", K::kString, "\"deepspeed\""},
};
inline constexpr FieldSpec kCsvMonitorFields[] = {
    {"enabled", "", K::kBool, "false"},
    {"output_path", "", K::kString, "\"\""},
    {"job_name", "", K::kString, "\"DeepSpeedJobName\""},
};
inline constexpr FieldSpec kCometFields[] = {
    {"enabled", "", K::kBool, "false"},  // enabled: one warning of its own (config_blocks.cc)
    {"samples_log_interval", "", K::kInt, "100"},
    {"project", "", K::kString, "null", kNullable},
    {"workspace", "", K::kString, "null", kNullable},
    {"api_key", "", K::kString, "null", kNullable},
    {"experiment_name", "", K::kString, "null", kNullable},
    {"experiment_key", "", K::kString, "null", kNullable},
    {"online", "", K::kBool, "null", kNullable},
    {"mode", "", K::kString, "null", kNullable},
};
inline constexpr FieldSpec kCommsLoggerFields[] = {
    {"enabled", "", K::kBool, "false", kNotActedOn},
    {"prof_all", "", K::kBool, "true"},
    {"prof_ops", "", K::kList, "[]"},
    {"verbose", "", K::kBool, "false"},
    {"debug", "", K::kBool, "false"},
};
inline constexpr FieldSpec kTimersThroughputFields[] = {
    {"enabled", "", K::kBool, "true"},
    {"synchronized", "", K::kBool, "true"},
};

// Plain get_scalar_param blocks.
inline constexpr FieldSpec kFlopsProfilerFields[] = {
    {"enabled", "", K::kBool, "false"},
    {"recompute_fwd_factor", "", K::kNumber, "0.0"},
    {"profile_step", "", K::kInt, "1"},
    {"module_depth", "", K::kInt, "-1"},
    {"top_modules", "", K::kInt, "1"},
    {"detailed", "", K::kBool, "true"},
    {"output_file", "", K::kString, "null", kNullable},
};
inline constexpr FieldSpec kActivationCheckpointingFields[] = {
    {"partition_activations", "", K::kBool, "false", kNotActedOn},
    {"contiguous_memory_optimization", "", K::kBool, "false", kNotActedOn},
    {"cpu_checkpointing", "", K::kBool, "false"},  // with --gradient-checkpointing
    {"number_checkpoints", "", K::kInt, "null", kNullable | kNotActedOn},
    {"profile", "", K::kBool, "false", kNotActedOn},
    {"synchronize_checkpoint_boundary", "", K::kBool, "false", kNotActedOn},
};
inline constexpr FieldSpec kAioFields[] = {
    {"block_size", "", K::kInt, "1048576", kPositive},
    {"queue_depth", "", K::kInt, "8", kPositive},
    {"intra_op_parallelism", "", K::kInt, "1", kPositive},
    {"single_submit", "", K::kBool, "false"},
    {"overlap_events", "", K::kBool, "true"},
    {"use_gds", "", K::kBool, "false", kNotActedOn},
};
inline constexpr FieldSpec kCheckpointFields[] = {
    {"tag_validation", "", K::kString, "\"WARN\"", kUpperCase},  // checked in config_blocks.cc
    {"load_universal", "", K::kBool, "false"},
    {"use_node_local_storage", "", K::kBool, "false"},
    {"parallel_write", "", K::kObject, "{\"pipeline_stage\": false}"},
};
inline constexpr FieldSpec kDataTypesFields[] = {
    {"grad_accum_dtype", "", K::kString, "null", kNullable},
};

struct NamedBlock {
  std::string_view key;  // top-level key
  BlockSpec spec;
};
// The secondary blocks config.cc resolves generically into DeepSpeedConfig::blocks.
inline constexpr NamedBlock kSecondaryBlocks[] = {
    {"tensorboard", {"tensorboard", BlockKind::kPydantic, kTensorboardFields}},
    {"wandb", {"wandb", BlockKind::kPydantic, kWandbFields}},
    {"csv_monitor", {"csv_monitor", BlockKind::kPydantic, kCsvMonitorFields}},
    {"comet", {"comet", BlockKind::kPydantic, kCometFields}},
    {"comms_logger", {"comms_logger", BlockKind::kPydantic, kCommsLoggerFields}},
    {"flops_profiler", {"flops_profiler", BlockKind::kPlain, kFlopsProfilerFields}},
    {"activation_checkpointing",
     {"activation_checkpointing", BlockKind::kPlain, kActivationCheckpointingFields}},
    {"aio", {"aio", BlockKind::kPlain, kAioFields}},
    {"checkpoint", {"checkpoint", BlockKind::kPlain, kCheckpointFields}},
    {"data_types", {"data_types", BlockKind::kPlain, kDataTypesFields}},
};
inline constexpr BlockSpec kTimersThroughputBlock{"timers.throughput", BlockKind::kPydantic,
                                                  kTimersThroughputFields};

// "optimizer" and "scheduler" blocks themselves (plain dicts in DeepSpeed).
inline constexpr FieldSpec kOptimizerBlockFields[] = {
    {"type", "", K::kString, "null", kNullable},
    {"params", "", K::kObject, "{}", kNullable},
    {"legacy_fusion", "", K::kBool, "false", kNotActedOn},
};
inline constexpr FieldSpec kSchedulerBlockFields[] = {
    {"type", "", K::kString, "null", kNullable},
    {"params", "", K::kObject, "{}", kNullable},
};

// Optimizer params: the keyword arguments of FusedAdam/DeepSpeedCPUAdam (+ DeepSpeed's
// adam_w_mode/torch_adam), FusedLamb, and torch.optim.SGD.
inline constexpr FieldSpec kAdamParams[] = {
    {"lr", "", K::kNumber, "0.001"},           {"betas", "", K::kList, "[0.9, 0.999]"},
    {"eps", "", K::kNumber, "1e-08"},          {"weight_decay", "", K::kNumber, "0.0"},
    {"bias_correction", "", K::kBool, "true"}, {"adam_w_mode", "", K::kBool, "true"},
    {"torch_adam", "", K::kBool, "false"},     {"amsgrad", "", K::kBool, "false"},
    {"set_grad_none", "", K::kBool, "true"},   {"fp32_optimizer_states", "", K::kBool, "true"},
};
inline constexpr FieldSpec kLambParams[] = {
    {"lr", "", K::kNumber, "0.001"},           {"betas", "", K::kList, "[0.9, 0.999]"},
    {"eps", "", K::kNumber, "1e-08"},          {"weight_decay", "", K::kNumber, "0.0"},
    {"bias_correction", "", K::kBool, "true"}, {"eps_inside_sqrt", "", K::kBool, "false"},
    {"max_coeff", "", K::kNumber, "10.0"},     {"min_coeff", "", K::kNumber, "0.01"},
    {"amsgrad", "", K::kBool, "false"},
};
inline constexpr FieldSpec kSgdParams[] = {
    {"lr", "", K::kNumber, "0.001"},      {"momentum", "", K::kNumber, "0.0"},
    {"dampening", "", K::kNumber, "0.0"}, {"weight_decay", "", K::kNumber, "0.0"},
    {"nesterov", "", K::kBool, "false"},  {"maximize", "", K::kBool, "false"},
};

// Scheduler params (runtime/lr_schedules.py constructors).
inline constexpr FieldSpec kWarmupLrParams[] = {
    {"warmup_min_lr", "", K::kNumber, "0.0"},
    {"warmup_max_lr", "", K::kNumber, "0.001"},
    {"warmup_num_steps", "", K::kInt, "1000"},
    {"warmup_type", "", K::kString, "\"log\"", kFlagNone, "log|linear"},
    {"last_batch_iteration", "", K::kInt, "-1"},
};
inline constexpr FieldSpec kWarmupDecayLrParams[] = {
    {"total_num_steps", "", K::kInt, "null", kRequired},
    {"warmup_min_lr", "", K::kNumber, "0.0"},
    {"warmup_max_lr", "", K::kNumber, "0.001"},
    {"warmup_num_steps", "", K::kInt, "1000"},
    {"warmup_type", "", K::kString, "\"log\"", kFlagNone, "log|linear"},
    {"last_batch_iteration", "", K::kInt, "-1"},
};
inline constexpr FieldSpec kWarmupCosineLrParams[] = {
    {"total_num_steps", "", K::kInt, "null", kRequired},
    {"warmup_min_ratio", "", K::kNumber, "0.0"},
    {"warmup_num_steps", "", K::kInt, "1000"},
    {"cos_min_ratio", "", K::kNumber, "0.0001"},
    {"warmup_type", "", K::kString, "\"log\"", kFlagNone, "log|linear"},
    {"last_batch_iteration", "", K::kInt, "-1"},
};
inline constexpr FieldSpec kOneCycleParams[] = {
    {"cycle_min_lr", "", K::kNumber, "null", kRequired},
    {"cycle_max_lr", "", K::kNumber, "null", kRequired},
    {"decay_lr_rate", "", K::kNumber, "0.0"},
    {"cycle_first_step_size", "", K::kNumber, "2000", kPositive},
    {"cycle_second_step_size", "", K::kNumber, "null", kNullable | kNonNegative},
    {"cycle_first_stair_count", "", K::kInt, "0"},
    {"cycle_second_stair_count", "", K::kInt, "null", kNullable},
    {"decay_step_size", "", K::kNumber, "0", kNonNegative},
    {"cycle_momentum", "", K::kBool, "true"},
    {"cycle_min_mom", "", K::kNumber, "0.8"},
    {"cycle_max_mom", "", K::kNumber, "0.9"},
    {"decay_mom_rate", "", K::kNumber, "0.0"},
    {"last_batch_iteration", "", K::kInt, "-1"},
};
inline constexpr FieldSpec kLrRangeTestParams[] = {
    {"lr_range_test_min_lr", "", K::kNumber, "0.001"},
    {"lr_range_test_step_size", "", K::kNumber, "2000", kPositive},
    {"lr_range_test_step_rate", "", K::kNumber, "1.0"},
    {"lr_range_test_staircase", "", K::kBool, "false"},
    {"last_batch_iteration", "", K::kInt, "-1"},
};

struct SchedulerSpec {
  std::string_view type;  // DeepSpeed's class name, case-sensitive
  std::span<const FieldSpec> params;
};
inline constexpr SchedulerSpec kSchedulers[] = {
    {"WarmupLR", kWarmupLrParams},
    {"WarmupDecayLR", kWarmupDecayLrParams},
    {"WarmupCosineLR", kWarmupCosineLrParams},
    {"OneCycle", kOneCycleParams},
    {"LRRangeTest", kLrRangeTestParams},
};

}  // namespace zt::config_detail
