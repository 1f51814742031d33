// ds_config top level: JSON reading (comments, duplicates, syntax errors), the batch triad, "auto",
// unknown keys, config_load and config_to_json. Expected values and messages are DeepSpeed's
// (reference §1; runtime/config.py), computed here by hand, never taken from the parser.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "zt/runtime/config.h"

namespace zt {
namespace {

using ::testing::HasSubstr;

Result<DeepSpeedConfig> parse(std::string_view text, int world_size = 1) {
  return config_parse(text, "test.json", world_size);
}

std::string error_of(std::string_view text, int world_size = 1) {
  Result<DeepSpeedConfig> r = parse(text, world_size);
  EXPECT_FALSE(r.is_ok()) << "expected an error for: " << text;
  return r.is_ok() ? std::string() : r.status().message();
}

struct Triad {
  int64_t tb, mb, gas;
};

Triad triad_of(std::string_view text, int world_size) {
  Result<DeepSpeedConfig> r = parse(text, world_size);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  if (!r.is_ok()) return {-1, -1, -1};
  return {r->train_batch_size, r->train_micro_batch_size_per_gpu, r->gradient_accumulation_steps};
}

void expect_triad(const Triad& t, int64_t tb, int64_t mb, int64_t gas) {
  EXPECT_EQ(t.tb, tb);
  EXPECT_EQ(t.mb, mb);
  EXPECT_EQ(t.gas, gas);
}

TEST(ConfigBatch, AllThreeGivenAreKept) {
  expect_triad(triad_of(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
                            "gradient_accumulation_steps": 2})",
                        4),
               32, 4, 2);
}

TEST(ConfigBatch, TrainAndMicroGiveAccumulationByIntegerDivision) {
  // GAS = 32 // 4 // 2 = 4.
  expect_triad(triad_of(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})", 2), 32,
               4, 4);
  // GAS = 30 // 4 // 2 = 3, and then 30 != 4 * 3 * 2 fails DeepSpeed's assertion.
  EXPECT_EQ(error_of(R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4})", 2),
            "test.json: Check batch related parameters. train_batch_size is not equal to "
            "micro_batch_per_gpu * gradient_acc_step * world_size 30 != 4 * 3 * 2");
}

TEST(ConfigBatch, TrainAndAccumulationGiveMicro) {
  // MB = 32 // 4 // 2 = 4.
  expect_triad(triad_of(R"({"train_batch_size": 32, "gradient_accumulation_steps": 2})", 4), 32, 4,
               2);
}

TEST(ConfigBatch, MicroAndAccumulationGiveTrain) {
  expect_triad(triad_of(R"({"train_micro_batch_size_per_gpu": 3,
                            "gradient_accumulation_steps": 5})",
                        2),
               30, 3, 5);
}

TEST(ConfigBatch, TrainOnly) {
  expect_triad(triad_of(R"({"train_batch_size": 16})", 4), 16, 4, 1);
  // MB = 10 // 4 = 2; 10 != 2 * 1 * 4.
  EXPECT_THAT(error_of(R"({"train_batch_size": 10})", 4), HasSubstr("10 != 2 * 1 * 4"));
}

TEST(ConfigBatch, MicroOnly) {
  expect_triad(triad_of(R"({"train_micro_batch_size_per_gpu": 8})", 3), 24, 8, 1);
}

TEST(ConfigBatch, NeitherTrainNorMicro) {
  const char* msg =
      "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided";
  EXPECT_THAT(error_of("{}"), HasSubstr(msg));
  EXPECT_THAT(error_of(R"({"gradient_accumulation_steps": 4})"), HasSubstr(msg));
}

TEST(ConfigBatch, MustBePositive) {
  EXPECT_THAT(error_of(R"({"train_batch_size": 0})"),
              HasSubstr("Train batch size: 0 has to be greater than 0"));
  EXPECT_THAT(error_of(R"({"train_batch_size": -8, "train_micro_batch_size_per_gpu": 2})"),
              HasSubstr("Train batch size: -8 has to be greater than 0"));
  EXPECT_THAT(error_of(R"({"train_micro_batch_size_per_gpu": -1,
                           "gradient_accumulation_steps": 2})"),
              HasSubstr("Train batch size: -2 has to be greater than 0"));
  EXPECT_THAT(error_of(R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 0})"),
              HasSubstr("Micro batch size per gpu: 0 has to be greater than 0"));
  EXPECT_THAT(error_of(R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8,
                           "gradient_accumulation_steps": 0})"),
              HasSubstr("Gradient accumulation steps: 0 has to be greater than 0"));
  // MB = 2 // 4 = 0 with four ranks.
  EXPECT_THAT(error_of(R"({"train_batch_size": 2})", 4),
              HasSubstr("Micro batch size per gpu: 0 has to be greater than 0"));
}

TEST(ConfigBatch, IntegralFloatsAcceptedFractionalRejected) {
  expect_triad(triad_of(R"({"train_batch_size": 3.2e1})", 1), 32, 32, 1);
  EXPECT_THAT(error_of(R"({"train_batch_size": 32.5})"),
              HasSubstr("train_batch_size must be an integer, got 32.5"));
}

TEST(ConfigAuto, TopLevelAutoIsAnErrorNamingTheKey) {
  std::string m = error_of(R"({"train_batch_size": "auto"})");
  EXPECT_THAT(m, HasSubstr("train_batch_size is \"auto\""));
  EXPECT_THAT(m, HasSubstr("must be resolved by the caller"));
  EXPECT_THAT(error_of(R"({"train_batch_size": 8, "gradient_clipping": "auto"})"),
              HasSubstr("gradient_clipping is \"auto\""));
  // fp16 is a plain dict in DeepSpeed ("auto" would be truthy there): an error here.
  EXPECT_THAT(error_of(R"({"train_batch_size": 8, "fp16": {"enabled": "auto"}})"),
              HasSubstr("fp16.enabled is \"auto\""));
}

TEST(ConfigJson, DuplicateKeysAtAnyDepth) {
  EXPECT_EQ(error_of(R"({"train_batch_size": 8, "train_batch_size": 16})"),
            "test.json: Duplicate keys in DeepSpeed config: ['train_batch_size']");
  EXPECT_EQ(error_of(R"({"train_batch_size": 8,
                         "zero_optimization": {"offload_param": {"device": "cpu",
                                                                 "device": "nvme"}}})"),
            "test.json: Duplicate keys in DeepSpeed config: ['device']");
  EXPECT_THAT(error_of(R"({"a": 1, "b": 2, "a": 3, "b": 4, "train_batch_size": 1})"),
              HasSubstr("['a', 'b']"));
  // The same key in two different objects is not a duplicate.
  EXPECT_TRUE(parse(R"({"train_batch_size": 8, "fp16": {"enabled": false},
                        "bf16": {"enabled": false}})")
                  .is_ok());
}

TEST(ConfigJson, SyntaxErrorNamesFileLineAndColumn) {
  std::string m = error_of("{\n  \"train_batch_size\": 8,\n  \"fp16\": {\"enabled\": tru}\n}");
  EXPECT_THAT(m, HasSubstr("test.json:3:"));
  EXPECT_THAT(m, HasSubstr("line 3, column"));
  m = error_of("{\"train_batch_size\": 8\n\"fp16\": {}}");  // missing comma
  EXPECT_THAT(m, HasSubstr("line 2, column 1"));
  EXPECT_THAT(error_of("[1, 2]"), HasSubstr("must be a JSON object"));
}

TEST(ConfigJson, CommentsAndTrailingCommasAccepted) {
  Result<DeepSpeedConfig> r = parse(R"(// leading comment
    {
      /* block
         comment */
      "train_batch_size": 8,  // trailing comment
      # hjson comment
      "tensorboard": {"enabled": true, "output_path": "http://x/#not-a-comment//", },
      "zero_optimization": {"stage": 1,},
    })");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->train_batch_size, 8);
  EXPECT_EQ(r->zero.stage, 1);
  EXPECT_EQ(r->blocks["tensorboard"]["output_path"], "http://x/#not-a-comment//");
  // A syntax error after a comment still reports the right line and column.
  EXPECT_THAT(error_of("/* x */ {\n// c\n  \"a\": 1 \"b\"\n}"), HasSubstr("line 3, column 10"));
}

TEST(ConfigTopLevel, UnknownKeysAreCollectedNotErrors) {
  Result<DeepSpeedConfig> r =
      parse(R"({"train_batch_size": 8, "my_key": 1, "another": {"x": 2}, "amp": {"x": 1}})");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  std::vector<std::string> keys = r->ignored_top_level_keys;
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"another", "my_key"}));
}

TEST(ConfigTopLevel, Defaults) {
  Result<DeepSpeedConfig> r = parse(R"({"train_batch_size": 8})");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_FALSE(r->steps_per_print.has_value());  // None, not the documented 10
  EXPECT_EQ(r->gradient_clipping, 0.0);
  EXPECT_FALSE(r->prescale_gradients);
  EXPECT_EQ(r->gradient_predivide_factor, 1.0);
  EXPECT_FALSE(r->communication_data_type.has_value());
  EXPECT_FALSE(r->wall_clock_breakdown);
  EXPECT_FALSE(r->zero_allow_untested_optimizer);
  EXPECT_TRUE(r->zero_force_ds_cpu_optimizer);
  EXPECT_FALSE(r->grad_accum_dtype.has_value());
  EXPECT_EQ(r->compute_dtype(), DType::f32);
  EXPECT_FALSE(r->optimizer.present);
  EXPECT_FALSE(r->scheduler.present);
  EXPECT_EQ(r->world_size, 1);
}

TEST(ConfigTopLevel, CommunicationDataType) {
  Result<DeepSpeedConfig> r =
      parse(R"({"train_batch_size": 8, "communication_data_type": "FP16"})");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->communication_data_type, "fp16");
  EXPECT_EQ(r->communication_dtype(), DType::f16);
  EXPECT_THAT(error_of(R"({"train_batch_size": 8, "communication_data_type": "fp8"})"),
              HasSubstr("Invalid communication_data_type. Supported data types: ['fp16', 'bf16', "
                        "'fp32']. Got: fp8"));
}

TEST(ConfigTopLevel, ElasticityEnabledIsRejectedOtherBlocksWarn) {
  EXPECT_THAT(error_of(R"({"train_batch_size": 8, "elasticity": {"enabled": true}})"),
              HasSubstr("elasticity.enabled"));
  Result<DeepSpeedConfig> r =
      parse(R"({"train_batch_size": 8, "sparse_attention": {"mode": "fixed"},
                "amp": {"enabled": true}})");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->ignored_top_level_keys.empty());
  EXPECT_THAT(::testing::PrintToString(r->warnings), HasSubstr("amp: a DeepSpeed feature"));
}

TEST(ConfigLoad, MissingFileNamesThePath) {
  Result<DeepSpeedConfig> r = config_load("/nonexistent/dir/ds_config.json", 1);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("/nonexistent/dir/ds_config.json"));
  r = config_load(ZT_SOURCE_DIR "/tests/data/configs", 1);
  ASSERT_FALSE(r.is_ok());
  EXPECT_THAT(r.status().message(), HasSubstr("is a directory"));
}

TEST(ConfigLoad, ErrorsNameTheFile) {
  const std::string path = ::testing::TempDir() + "zt_config_test_bad.json";
  {
    std::ofstream f(path);
    f << "{\"train_batch_size\": 0}";
  }
  Result<DeepSpeedConfig> r = config_load(path, 1);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), path + ": Train batch size: 0 has to be greater than 0");
}

TEST(ConfigLoad, SampleConfigs) {
  const std::string dir = ZT_SOURCE_DIR "/tests/data/configs/";
  Result<DeepSpeedConfig> z3 = config_load(dir + "zero3_offload_hf.json", 2);
  ASSERT_TRUE(z3.is_ok()) << z3.status().message();
  EXPECT_EQ(z3->zero.stage, 3);
  EXPECT_EQ(z3->zero.reduce_bucket_size, 500000000);          // "auto" -> default
  EXPECT_EQ(z3->zero.stage3_prefetch_bucket_size, 50000000);  // "auto" -> default
  EXPECT_EQ(z3->zero.stage3_param_persistence_threshold, 100000);
  EXPECT_EQ(z3->zero.sub_group_size, 1000000000);  // 1e9 float accepted
  EXPECT_EQ(z3->zero.offload_optimizer.device, "cpu");
  EXPECT_TRUE(z3->zero.offload_param.pin_memory);
  EXPECT_TRUE(z3->zero.stage3_gather_16bit_weights_on_model_save);
  EXPECT_EQ(z3->steps_per_print, 2000);
  EXPECT_EQ(z3->optimizer.type, "adamw");
  EXPECT_EQ(z3->optimizer.weight_decay, 0.01);
  EXPECT_EQ(z3->compute_dtype(), DType::f16);
  EXPECT_TRUE(z3->fp16.has_dynamic_keys);
  EXPECT_EQ(z3->warnings, std::vector<std::string>{});  // a usual config warns about nothing

  Result<DeepSpeedConfig> z2 = config_load(dir + "zero2_bf16_cosine.json", 4);
  ASSERT_TRUE(z2.is_ok()) << z2.status().message();
  EXPECT_EQ(z2->train_batch_size, 4 * 2 * 4);
  EXPECT_EQ(z2->compute_dtype(), DType::bf16);
  EXPECT_EQ(z2->zero.allgather_bucket_size, 200000000);
  EXPECT_EQ(z2->checkpoint_tag_validation, "FAIL");
  EXPECT_EQ(z2->communication_data_type, "fp32");
  EXPECT_EQ(z2->optimizer.beta2, 0.95);
  EXPECT_TRUE(z2->optimizer.adam_w_mode);
  EXPECT_EQ(z2->warnings, std::vector<std::string>{});

  Result<DeepSpeedConfig> l = config_load(dir + "stage0_fp16_lamb_onecycle.json", 1);
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  EXPECT_EQ(l->optimizer.type, "lamb");
  EXPECT_EQ(l->optimizer.max_coeff, 0.3);
  EXPECT_EQ(l->ignored_top_level_keys, std::vector<std::string>{"my_project_settings"});
}

TEST(ConfigToJson, DefaultsFilledWithDeepSpeedNames) {
  Result<DeepSpeedConfig> r = parse(R"({"train_batch_size": 8})", 2);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  nlohmann::json j = config_to_json(*r);
  EXPECT_EQ(j["train_batch_size"], 8);
  EXPECT_EQ(j["train_micro_batch_size_per_gpu"], 4);
  EXPECT_EQ(j["gradient_accumulation_steps"], 1);
  EXPECT_TRUE(j["steps_per_print"].is_null());
  EXPECT_EQ(j["zero_optimization"]["stage"], 0);
  EXPECT_EQ(j["zero_optimization"]["stage3_max_live_parameters"], 1000000000);
  EXPECT_EQ(j["zero_optimization"]["stage3_model_persistence_threshold"], INT64_MAX);
  EXPECT_EQ(j["zero_optimization"]["overlap_comm"], false);
  EXPECT_TRUE(j["zero_optimization"]["offload_param"].is_null());
  EXPECT_EQ(j["tensorboard"]["job_name"], "DeepSpeedJobName");
  EXPECT_EQ(j["wandb"]["project"], "deepspeed");
  EXPECT_EQ(j["aio"]["block_size"], 1048576);
  EXPECT_EQ(j["aio"]["queue_depth"], 8);
  EXPECT_EQ(j["flops_profiler"]["module_depth"], -1);
  EXPECT_EQ(j["checkpoint"]["tag_validation"], "WARN");
  EXPECT_EQ(j["comms_logger"]["prof_all"], true);
  EXPECT_EQ(j["activation_checkpointing"]["partition_activations"], false);
  EXPECT_EQ(j["fp16"]["enabled"], false);
  EXPECT_EQ(j["bf16"]["enabled"], false);
}

TEST(ConfigToJson, OutputReadsBackToTheSameConfig) {
  const std::string dir = ZT_SOURCE_DIR "/tests/data/configs/";
  for (const char* name : {"zero3_offload_hf.json", "zero2_bf16_cosine.json", "minimal.json",
                           "stage0_fp16_lamb_onecycle.json"}) {
    Result<DeepSpeedConfig> a = config_load(dir + name, 2);
    ASSERT_TRUE(a.is_ok()) << name << ": " << a.status().message();
    nlohmann::json ja = config_to_json(*a);
    Result<DeepSpeedConfig> b = config_parse(ja.dump(2), name, 2);
    ASSERT_TRUE(b.is_ok()) << name << ": " << b.status().message();
    EXPECT_EQ(config_to_json(*b), ja) << name;
    EXPECT_EQ(b->train_batch_size, a->train_batch_size);
    EXPECT_EQ(b->zero.overlap_comm, a->zero.overlap_comm);
    EXPECT_EQ(b->optimizer.adam_w_mode, a->optimizer.adam_w_mode);
    EXPECT_TRUE(b->ignored_top_level_keys.empty()) << name;
  }
}

}  // namespace
}  // namespace zt
