// ds_config blocks: zero_optimization (+ offload), precision, optimizer, scheduler, and the
// secondary blocks. Expected values are DeepSpeed's defaults and error texts (reference §1;
// runtime/zero/config.py, engine.py), written here by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "zt/runtime/config.h"

namespace zt {
namespace {

using ::testing::HasSubstr;

Result<DeepSpeedConfig> parse(const std::string& body, int world_size = 1) {
  // `body` is the inside of the object, after a valid batch size.
  return config_parse("{\"train_batch_size\": 8" + (body.empty() ? "" : ", " + body) + "}",
                      "test.json", world_size);
}

DeepSpeedConfig ok(const std::string& body) {
  Result<DeepSpeedConfig> r = parse(body);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? *r : DeepSpeedConfig{};
}

std::string error_of(const std::string& body) {
  Result<DeepSpeedConfig> r = parse(body);
  EXPECT_FALSE(r.is_ok()) << "expected an error for: " << body;
  return r.is_ok() ? std::string() : r.status().message();
}

std::string warnings_of(const DeepSpeedConfig& c) {
  return ::testing::PrintToString(c.warnings);
}

TEST(ConfigZero, Defaults) {
  DeepSpeedConfig c = ok("");
  const ZeroConfig& z = c.zero;
  EXPECT_EQ(z.stage, 0);
  EXPECT_TRUE(z.contiguous_gradients);
  EXPECT_TRUE(z.reduce_scatter);
  EXPECT_EQ(z.reduce_bucket_size, 500000000);
  EXPECT_TRUE(z.use_multi_rank_bucket_allreduce);
  EXPECT_TRUE(z.allgather_partitions);
  EXPECT_EQ(z.allgather_bucket_size, 500000000);
  EXPECT_FALSE(z.overlap_comm);
  EXPECT_TRUE(z.load_from_fp32_weights);
  EXPECT_EQ(z.sub_group_size, 1000000000);
  EXPECT_FALSE(z.round_robin_gradients);
  EXPECT_TRUE(z.ignore_unused_parameters);
  EXPECT_EQ(z.stage3_prefetch_bucket_size, 50000000);
  EXPECT_EQ(z.stage3_param_persistence_threshold, 100000);
  EXPECT_EQ(z.stage3_model_persistence_threshold, 9223372036854775807LL);
  EXPECT_EQ(z.stage3_max_live_parameters, 1000000000);
  EXPECT_EQ(z.stage3_max_reuse_distance, 1000000000);
  EXPECT_FALSE(z.stage3_gather_16bit_weights_on_model_save);
  EXPECT_EQ(z.offload_param.device, "none");
  EXPECT_EQ(z.offload_optimizer.device, "none");
}

TEST(ConfigZero, OverlapCommDefaultDependsOnStage) {
  EXPECT_TRUE(ok(R"("zero_optimization": {"stage": 3})").zero.overlap_comm);
  EXPECT_FALSE(ok(R"("zero_optimization": {"stage": 2})").zero.overlap_comm);
  EXPECT_FALSE(ok(R"("zero_optimization": {"stage": 3, "overlap_comm": false})").zero.overlap_comm);
  EXPECT_TRUE(ok(R"("zero_optimization": {"stage": 1, "overlap_comm": true})").zero.overlap_comm);
}

TEST(ConfigZero, UnknownKeySuggestsTheNearest) {
  EXPECT_EQ(error_of(R"("zero_optimization": {"stage": 3, "stage3_prefetch_bucket_sise": 5})"),
            "test.json: zero_optimization: unknown key \"stage3_prefetch_bucket_sise\"; did you "
            "mean \"stage3_prefetch_bucket_size\"?");
  EXPECT_EQ(error_of(R"("zero_optimization": {"stage": 3, "offload_optimizer": {"devce": "cpu"}})"),
            "test.json: zero_optimization.offload_optimizer: unknown key \"devce\"; did you mean "
            "\"device\"?");
  EXPECT_THAT(error_of(R"("zero_optimization": {"completely_different": 1})"),
              HasSubstr("valid keys: stage, contiguous_gradients"));
  EXPECT_THAT(error_of(R"("tensorboard": {"enable": true})"),
              HasSubstr("tensorboard: unknown key \"enable\"; did you mean \"enabled\"?"));
  EXPECT_THAT(error_of(R"("comms_logger": {"enabled": true, "prof_al": true})"),
              HasSubstr("did you mean \"prof_all\""));
}

TEST(ConfigZero, Stage3PrefixIsOptional) {
  DeepSpeedConfig a = ok(R"("zero_optimization": {"prefetch_bucket_size": 123,
                                                  "max_live_parameters": 7})");
  EXPECT_EQ(a.zero.stage3_prefetch_bucket_size, 123);
  EXPECT_EQ(a.zero.stage3_max_live_parameters, 7);
  DeepSpeedConfig b = ok(R"("zero_optimization": {"stage3_prefetch_bucket_size": 456})");
  EXPECT_EQ(b.zero.stage3_prefetch_bucket_size, 456);
  EXPECT_THAT(error_of(R"("zero_optimization": {"prefetch_bucket_size": 1,
                                                "stage3_prefetch_bucket_size": 2})"),
              HasSubstr("same setting"));
}

TEST(ConfigZero, AutoMeansDefaultInsideTheBlock) {
  DeepSpeedConfig c = ok(R"("zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
                                                  "stage3_prefetch_bucket_size": "auto",
                                                  "overlap_comm": "auto",
                                                  "offload_optimizer": {"device": "cpu",
                                                                        "buffer_count": "auto"}})");
  EXPECT_EQ(c.zero.reduce_bucket_size, 500000000);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 50000000);
  EXPECT_TRUE(c.zero.overlap_comm);  // unset at stage 3
  EXPECT_EQ(c.zero.offload_optimizer.buffer_count, 4);
}

TEST(ConfigZero, NumbersAndTypes) {
  EXPECT_EQ(ok(R"("zero_optimization": {"reduce_bucket_size": 5e8})").zero.reduce_bucket_size,
            500000000);
  EXPECT_THAT(error_of(R"("zero_optimization": {"reduce_bucket_size": 2.5})"),
              HasSubstr("zero_optimization.reduce_bucket_size must be an integer, got 2.5"));
  EXPECT_THAT(error_of(R"("zero_optimization": {"contiguous_gradients": "maybe"})"),
              HasSubstr("zero_optimization.contiguous_gradients must be true or false"));
  EXPECT_THAT(error_of(R"("zero_optimization": {"reduce_bucket_size": 0})"),
              HasSubstr("zero_optimization.reduce_bucket_size must be > 0, got 0"));
  EXPECT_THAT(error_of(R"("zero_optimization": {"stage3_max_live_parameters": -1})"),
              HasSubstr("zero_optimization.stage3_max_live_parameters must be >= 0, got -1"));
  EXPECT_THAT(error_of(R"("zero_optimization": {"offload_param": {"buffer_count": -2}})"),
              HasSubstr("zero_optimization.offload_param.buffer_count must be >= 0"));
  EXPECT_THAT(error_of(R"("zero_optimization": {"offload_param": {"device": "gpu"}})"),
              HasSubstr("expected one of none|cpu|nvme"));
}

TEST(ConfigZero, StageAboveThree) {
  EXPECT_EQ(error_of(R"("zero_optimization": {"stage": 4})"),
            "test.json: DeepSpeedConfig: Maximum supported ZeRO stage is 3");
}

TEST(ConfigZero, AllgatherBucketMustBeEvenForStages1And2) {
  EXPECT_THAT(error_of(R"("zero_optimization": {"stage": 2, "allgather_bucket_size": 5})"),
              HasSubstr("allgather_bucket_size must be a multiple of nccl_start_alignment_factor"));
  EXPECT_EQ(ok(R"("zero_optimization": {"stage": 0, "allgather_bucket_size": 5})")
                .zero.allgather_bucket_size,
            5);
}

TEST(ConfigZero, DeprecatedCpuOffloadKeys) {
  DeepSpeedConfig c = ok(R"("zero_optimization": {"stage": 3, "cpu_offload": true,
                                                  "cpu_offload_param": true})");
  EXPECT_EQ(c.zero.offload_optimizer.device, "cpu");
  EXPECT_EQ(c.zero.offload_optimizer.buffer_count, 4);  // offload_optimizer's default
  EXPECT_EQ(c.zero.offload_param.device, "cpu");
  EXPECT_EQ(c.zero.offload_param.buffer_count, 5);
  EXPECT_THAT(warnings_of(c), HasSubstr("cpu_offload is deprecated use offload_optimizer"));
  EXPECT_EQ(ok(R"("zero_optimization": {"stage": 2, "cpu_offload": false})")
                .zero.offload_optimizer.device,
            "none");
  EXPECT_THAT(error_of(R"("zero_optimization": {"cpu_offload": true,
                                                "offload_optimizer": {"device": "cpu"}})"),
              HasSubstr("Cannot provide deprecated parameter 'cpu_offload' and replacing "
                        "parameter 'offload_optimizer' together"));
  DeepSpeedConfig g = ok(R"("zero_optimization": {"stage3_gather_fp16_weights_on_model_save":
                                                  true})");
  EXPECT_TRUE(g.zero.stage3_gather_16bit_weights_on_model_save);
}

TEST(ConfigZero, OldBooleanForm) {
  EXPECT_EQ(ok(R"("zero_optimization": true)").zero.stage, 1);
  EXPECT_EQ(ok(R"("zero_optimization": true, "allgather_size": 1000)").zero.allgather_bucket_size,
            1000);
  EXPECT_EQ(ok(R"("zero_optimization": false)").zero.stage, 0);
}

TEST(ConfigZero, OffloadChecks) {
  EXPECT_EQ(error_of(R"("zero_optimization": {"stage": 2,
                                              "offload_optimizer": {"device": "cpu",
                                                                    "ratio": 0.5}})"),
            "test.json: Partial offloading only supported for ZeRO Stage 3.");
  EXPECT_EQ(ok(R"("zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu",
                                                                          "ratio": 0.5}})")
                .zero.offload_optimizer.ratio,
            0.5);
  EXPECT_THAT(error_of(R"("zero_optimization": {"stage": 3,
                                                "offload_param": {"device": "nvme"}})"),
              HasSubstr("nvme_path is not set"));
  DeepSpeedConfig c = ok(R"("zero_optimization": {"stage": 3,
      "offload_param": {"device": "nvme", "nvme_path": "/local_nvme", "buffer_count": 6,
                        "buffer_size": 2e8, "max_in_cpu": 5e8}})");
  EXPECT_EQ(c.zero.offload_param.nvme_path, "/local_nvme");
  EXPECT_EQ(c.zero.offload_param.buffer_count, 6);
  EXPECT_EQ(c.zero.offload_param.buffer_size, 2e8);
  EXPECT_EQ(c.zero.offload_param.max_in_cpu, 5e8);
}

TEST(ConfigZero, NotActedOnAndMisplacedKeysWarn) {
  DeepSpeedConfig c = ok(R"("zero_optimization": {"stage": 2, "zero_quantized_weights": true,
                                                  "memory_efficient_linear": true,
                                                  "offload_param": {"device": "cpu"}},
                            "optimizer": {"type": "Adam", "legacy_fusion": true, "extra": 1},
                            "aio": {"blok_size": 4})");
  const std::string w = warnings_of(c);
  EXPECT_THAT(w, HasSubstr("zero_optimization.zero_quantized_weights = true: parsed but not "
                           "acted on"));
  EXPECT_THAT(w, ::testing::Not(HasSubstr("memory_efficient_linear")));  // the default value
  EXPECT_THAT(w, HasSubstr("offload_param is only used by stage 3"));
  EXPECT_THAT(w, HasSubstr("optimizer.legacy_fusion = true"));
  EXPECT_THAT(w, HasSubstr("optimizer: unknown key \\\"extra\\\" ignored"));
  EXPECT_THAT(w, HasSubstr("did you mean \\\"block_size\\\""));
  EXPECT_EQ(c.blocks["aio"]["block_size"], 1048576);
}

TEST(ConfigPrecision, Fp16AndBf16) {
  EXPECT_EQ(error_of(R"("fp16": {"enabled": true}, "bf16": {"enabled": true})"),
            "test.json: bfloat16 and fp16 modes cannot be simultaneously enabled");
  EXPECT_TRUE(ok(R"("bfloat16": {"enabled": true})").bf16_enabled);  // old alias
  DeepSpeedConfig f = ok(R"("fp16": {"enabled": true})");
  EXPECT_EQ(f.compute_dtype(), DType::f16);
  EXPECT_EQ(f.fp16.loss_scale, 0);
  EXPECT_EQ(f.fp16.initial_scale_power, 16);
  EXPECT_EQ(f.fp16.loss_scale_window, 1000);
  EXPECT_EQ(f.fp16.hysteresis, 2);
  EXPECT_FALSE(f.fp16.consecutive_hysteresis);
  EXPECT_EQ(f.fp16.min_loss_scale, 1);
  EXPECT_FALSE(f.fp16.has_dynamic_keys);
  EXPECT_TRUE(f.dynamic_loss_scale());
  EXPECT_TRUE(
      ok(R"("fp16": {"enabled": true, "consecutive_hysteresis": false})").fp16.has_dynamic_keys);
  EXPECT_TRUE(ok(R"("fp16": {"enabled": true, "min_loss_scale": 1})").fp16.has_dynamic_keys);
  EXPECT_FALSE(
      ok(R"("fp16": {"enabled": true, "loss_scale": 0, "auto_cast": true})").fp16.has_dynamic_keys);
  EXPECT_FALSE(ok(R"("fp16": {"enabled": true, "loss_scale": 128})").dynamic_loss_scale());
  EXPECT_FALSE(ok(R"("bf16": {"enabled": true})").dynamic_loss_scale());
  EXPECT_EQ(error_of(R"("fp16": {"enabled": true, "fp16_master_weights_and_grads": true})"),
            "test.json: Fp16_master_weights_and_grads is only supported with ZeRO Stage 2 for "
            "now.");
}

TEST(ConfigPrecision, UnknownFp16KeyIsAWarningAsInDeepSpeed) {
  DeepSpeedConfig c = ok(R"("fp16": {"enabled": true, "loss_scale_windw": 10})");
  EXPECT_EQ(c.fp16.loss_scale_window, 1000);
  EXPECT_THAT(warnings_of(c), HasSubstr("did you mean \\\"loss_scale_window\\\""));
}

TEST(ConfigOptimizer, AdamIsAdamWUnlessTurnedOff) {
  DeepSpeedConfig a = ok(R"("optimizer": {"type": "Adam", "params": {"lr": 0.01}})");
  EXPECT_TRUE(a.optimizer.present);
  EXPECT_EQ(a.optimizer.type, "adam");
  EXPECT_TRUE(a.optimizer.adam_w_mode);
  EXPECT_EQ(a.optimizer.lr, 0.01);
  EXPECT_EQ(a.optimizer.beta1, 0.9);
  EXPECT_EQ(a.optimizer.beta2, 0.999);
  EXPECT_EQ(a.optimizer.eps, 1e-8);
  EXPECT_EQ(a.optimizer.weight_decay, 0);
  EXPECT_TRUE(a.optimizer.bias_correction);
  EXPECT_FALSE(ok(R"("optimizer": {"type": "adam", "params": {"adam_w_mode": false}})")
                   .optimizer.adam_w_mode);
  EXPECT_TRUE(ok(R"("optimizer": {"type": "AdamW", "params": {"adam_w_mode": false}})")
                  .optimizer.adam_w_mode);
  EXPECT_EQ(ok(R"("optimizer": {"type": "ADAMW"})").optimizer.type, "adamw");
}

TEST(ConfigOptimizer, MaxGradNormRejected) {
  EXPECT_THAT(error_of(R"("optimizer": {"type": "Adam", "params": {"max_grad_norm": 1.0}})"),
              HasSubstr("'max_grad_norm' is not supported as an optimizer parameter, please "
                        "switch to using the deepspeed parameter 'gradient_clipping' see: "
                        "https://www.deepspeed.ai/docs/config-json/#gradient-clipping for more "
                        "details"));
}

TEST(ConfigOptimizer, UnknownAndUnsupportedTypes) {
  EXPECT_THAT(error_of(R"("optimizer": {"type": "Adamm"})"),
              HasSubstr("Adamm is not a supported DeepSpeed Optimizer"));
  EXPECT_THAT(error_of(R"("optimizer": {"type": "sgd"})"),  // torch names are case-sensitive
              HasSubstr("sgd is not a supported DeepSpeed Optimizer"));
  EXPECT_THAT(error_of(R"("optimizer": {"type": "Lion"})"),
              HasSubstr("not supported by ZeroTrain yet; use Adam, AdamW, Lamb or SGD"));
  EXPECT_THAT(error_of(R"("optimizer": {"type": "RMSprop"})"),
              HasSubstr("not supported by ZeroTrain yet"));
  EXPECT_THAT(error_of(R"("optimizer": {"params": {"lr": 1}})"),
              HasSubstr("optimizer: \"type\" is missing"));
}

TEST(ConfigOptimizer, OneBitWithZeroRejected) {
  EXPECT_THAT(error_of(R"("zero_optimization": {"stage": 1}, "optimizer": {"type": "OneBitAdam"})"),
              HasSubstr("1bit-Adam is not compatible with ZeRO"));
  EXPECT_THAT(
      error_of(R"("zero_optimization": {"stage": 2}, "optimizer": {"type": "ZeroOneAdam"})"),
      HasSubstr("0/1 Adam is not compatible with ZeRO"));
  EXPECT_THAT(error_of(R"("zero_optimization": {"stage": 3}, "fp16": {"enabled": true},
                          "optimizer": {"type": "OneBitLamb"})"),
              HasSubstr("1bit-Lamb is not compatible with ZeRO"));
  EXPECT_THAT(error_of(R"("optimizer": {"type": "OneBitAdam"})"),
              HasSubstr("not supported by ZeroTrain yet"));
}

TEST(ConfigOptimizer, LambNeedsDynamicLossScaleAndUntestedFlagUnderZero) {
  EXPECT_EQ(error_of(R"("bf16": {"enabled": true}, "optimizer": {"type": "Lamb"})"),
            "test.json: DeepSpeed lamb optimizer requires dynamic loss scaling");
  EXPECT_THAT(error_of(R"("fp16": {"enabled": true, "loss_scale": 128},
                          "optimizer": {"type": "Lamb"})"),
              HasSubstr("requires dynamic loss scaling"));
  EXPECT_EQ(ok(R"("fp16": {"enabled": true}, "optimizer": {"type": "LAMB"})").optimizer.type,
            "lamb");
  EXPECT_THAT(error_of(R"("zero_optimization": {"stage": 1}, "optimizer": {"type": "Lamb"})"),
              HasSubstr("You are using an untested ZeRO Optimizer. Please add "
                        "<\"zero_allow_untested_optimizer\": true>"));
  EXPECT_EQ(ok(R"("zero_optimization": {"stage": 1}, "zero_allow_untested_optimizer": true,
                  "optimizer": {"type": "Lamb", "params": {"max_coeff": 1.5}})")
                .optimizer.max_coeff,
            1.5);
}

TEST(ConfigOptimizer, Params) {
  DeepSpeedConfig s = ok(R"("optimizer": {"type": "SGD",
      "params": {"lr": 0.1, "momentum": 0.9, "nesterov": true, "weight_decay": 1e-4}})");
  EXPECT_EQ(s.optimizer.type, "sgd");
  EXPECT_EQ(s.optimizer.momentum, 0.9);
  EXPECT_TRUE(s.optimizer.nesterov);
  EXPECT_THAT(error_of(R"("optimizer": {"type": "SGD", "params": {"nesterov": true}})"),
              HasSubstr("Nesterov momentum requires a momentum and zero dampening"));
  EXPECT_THAT(error_of(R"("optimizer": {"type": "Adam", "params": {"betas": [0.9]}})"),
              HasSubstr("betas must be a list of two numbers"));
  EXPECT_THAT(error_of(R"("optimizer": {"type": "Adam", "params": {"betas": [1.5, 0.9]}})"),
              HasSubstr("Invalid beta parameter at index 0: 1.5"));
  EXPECT_THAT(error_of(R"("optimizer": {"type": "Adam", "params": {"lr": -1}})"),
              HasSubstr("Invalid learning rate: -1.0"));
  EXPECT_EQ(error_of(R"("optimizer": {"type": "Adam", "params": {"weight_decai": 0.1}})"),
            "test.json: optimizer.params: unknown key \"weight_decai\"; did you mean "
            "\"weight_decay\"?");
  EXPECT_THAT(error_of(R"("optimizer": {"type": "Adam", "params": {"lr": "auto"}})"),
              HasSubstr("optimizer.params.lr is \"auto\""));
  EXPECT_THAT(error_of(R"("optimizer": {"type": "Adam", "params": {"amsgrad": true}})"),
              HasSubstr("FusedAdam does not support the AMSGrad variant."));
}

TEST(ConfigScheduler, TypeAndParamsChecked) {
  DeepSpeedConfig c = ok(R"("scheduler": {"type": "WarmupLR",
                                          "params": {"warmup_num_steps": 10}})");
  EXPECT_TRUE(c.scheduler.present);
  EXPECT_EQ(c.scheduler.type, "WarmupLR");
  EXPECT_EQ(c.scheduler.params["warmup_num_steps"], 10);
  EXPECT_THAT(error_of(R"("scheduler": {"type": "WarmUpLR"})"),
              HasSubstr("DeepSpeed does not recognize LR scheduler WarmUpLR"));
  EXPECT_THAT(error_of(R"("scheduler": {"type": "StepLR"})"),
              HasSubstr("not supported by ZeroTrain yet"));
  EXPECT_EQ(error_of(R"("scheduler": {"type": "WarmupLR", "params": {"warmup_max_l": 1}})"),
            "test.json: scheduler.params (WarmupLR): unknown key \"warmup_max_l\"; did you mean "
            "\"warmup_max_lr\"?");
  EXPECT_THAT(error_of(R"("scheduler": {"type": "WarmupDecayLR", "params": {}})"),
              HasSubstr("missing required key \"total_num_steps\""));
  EXPECT_THAT(error_of(R"("scheduler": {"type": "WarmupLR",
                                        "params": {"warmup_max_lr": "auto"}})"),
              HasSubstr("scheduler.params (WarmupLR).warmup_max_lr is \"auto\""));
}

TEST(ConfigSecondary, CheckpointDataTypesFlops) {
  DeepSpeedConfig c = ok(R"("checkpoint": {"tag_validation": "ignore", "load_universal": true},
                            "data_types": {"grad_accum_dtype": "bfloat16"},
                            "flops_profiler": {"enabled": true})");
  EXPECT_EQ(c.checkpoint_tag_validation, "IGNORE");
  EXPECT_TRUE(c.checkpoint_load_universal);
  EXPECT_EQ(c.grad_accum_dtype, "bf16");
  EXPECT_TRUE(c.wall_clock_breakdown);  // forced on by the flops profiler
  EXPECT_EQ(error_of(R"("checkpoint": {"tag_validation": "bogus"})"),
            "test.json: Checkpoint config contains invalid tag_validation value of BOGUS, "
            "expecting one of ['WARN', 'IGNORE', 'FAIL']");
  EXPECT_THAT(error_of(R"("checkpoint": {"parallel_write": {"pipeline_stage": 1}})"),
              HasSubstr("checkpoint::parallel_write::pipeline_stage value of '1' is invalid, "
                        "expecting: true or false"));
  EXPECT_THAT(error_of(R"("data_types": {"grad_accum_dtype": "int8"})"),
              HasSubstr("data_types.grad_accum_dtype = \"int8\" is not supported"));
  DeepSpeedConfig d = ok(R"("aio": {"block_size": 262144, "queue_depth": 32},
                            "activation_checkpointing": {"number_checkpoints": 4},
                            "timers": {"throughput": {"enabled": false}})");
  EXPECT_EQ(d.blocks["aio"]["block_size"], 262144);
  EXPECT_EQ(d.blocks["aio"]["intra_op_parallelism"], 1);
  EXPECT_EQ(d.blocks["activation_checkpointing"]["number_checkpoints"], 4);
  EXPECT_EQ(d.blocks["timers"]["throughput"]["enabled"], false);
  EXPECT_EQ(d.blocks["timers"]["throughput"]["synchronized"], true);
  EXPECT_THAT(error_of(R"("aio": {"queue_depth": 0})"), HasSubstr("aio.queue_depth must be > 0"));
  EXPECT_THAT(error_of(R"("wandb": {"enabled": true, "projekt": "x"})"),
              HasSubstr("did you mean \"project\""));
  // wandb and comet need their services: one warning each, naming what works offline.
  const std::string w = warnings_of(ok(R"("wandb": {"enabled": true}, "comet": {"enabled": true})"));
  EXPECT_THAT(w, HasSubstr("wandb.enabled = true: Weights & Biases is not available"));
  EXPECT_THAT(w, HasSubstr("comet.enabled = true: Comet is not available"));
  EXPECT_THAT(w, HasSubstr("csv_monitor"));
  EXPECT_THAT(w, ::testing::Not(HasSubstr("not acted on")));
}

}  // namespace
}  // namespace zt
