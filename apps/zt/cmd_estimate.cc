// `zt estimate`: the memory a training run needs per GPU and per node, before it runs: DeepSpeed's
// model-state tables (its estimate_zero2/zero3_model_states_mem_needs_all_cold) and ZeroTrain's
// own prediction of its peak for the chosen stage, micro-batch and sequence (tools/estimate.h).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "cli_args.h"
#include "commands.h"
#include "zt/core/device.h"
#include "zt/tools/estimate.h"

namespace zt::cli {
namespace {

constexpr const char* kUsage = R"(Usage: zt estimate --model NAME|DIR [options]

Prints DeepSpeed's model-state estimates (the tables of its
estimate_zero2_model_states_mem_needs_all_cold and estimate_zero3_..._all_cold), then ZeroTrain's
prediction of the peak GPU memory of one training step with the chosen stage, offload,
micro-batch and sequence, with and without activation checkpointing, the host memory per node,
and the largest micro-batch that fits at each stage. Without --config: bf16, AdamW and
DeepSpeed's defaults. docs/estimate.md explains every line and the accuracy measured.

Options:
)";

const std::vector<FlagSpec> kFlags = {
    {"--model", FlagKind::kValue,
     "a named size (gpt2, llama-8b, ...) or a Hugging Face model directory (config.json)",
     "NAME|DIR"},
    {"--num-gpus", FlagKind::kValue, "GPUs per node (default 1)", "G"},
    {"--num-nodes", FlagKind::kValue, "nodes (default 1)", "N"},
    {"--stage", FlagKind::kValue, "ZeRO stage 0-3 (default: the config's, else 0)", "S"},
    {"--offload", FlagKind::kValue, "offload_optimizer device: cpu or none (default: the config's)",
     "cpu|none"},
    {"--micro-batch", FlagKind::kValue,
     "sequences per GPU per micro-step (default: the config's, else 1)", "B"},
    {"--seq-len", FlagKind::kValue,
     "tokens per sequence (default: as zt train, the model's context up to 2048)", "T"},
    {"--config", FlagKind::kValue, "a ds_config.json (precision, ZeRO and optimizer settings)",
     "FILE"},
    {"--dtype", FlagKind::kValue, "training precision f32, bf16 or fp16 (default: the config's)",
     "DTYPE"},
    {"--gradient-checkpointing", FlagKind::kSwitch,
     "mark activation checkpointing as the chosen setup (both are always shown)"},
    {"--keep-activations", FlagKind::kSwitch,
     "as zt train --keep-activations: what backward would recompute is kept"},
    {"--lora-dim", FlagKind::kValue, "LoRA: rank-R adapters, as zt train --lora-dim", "R"},
    {"--lora-dropout", FlagKind::kValue, "LoRA: dropout on the adapters' input (default 0)", "P"},
    {"--lora-modules", FlagKind::kValue, "LoRA: comma-separated module names (default: all)",
     "LIST"},
    {"--only-optimize-lora", FlagKind::kSwitch, "LoRA: the base weights are frozen"},
    {"--gpu-memory", FlagKind::kValue,
     "memory per GPU in GiB (default: the visible GPU's, else 80)", "GIB"},
    {"--device", FlagKind::kValue,
     "cuda (default) or cpu: predict a CPU engine (f32, unfused attention), as tests measure",
     "DEV"},
    {"--json", FlagKind::kSwitch, "one JSON object instead of the tables"},
    {"--help", FlagKind::kSwitch, "this help"},
};

Result<double> parse_positive(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(x) || x <= 0) {
    return invalid_argument("{} expects a positive number, got '{}'", flag, v);
  }
  return x;
}

Result<tools::EstimateRequest> request_from(const ParsedArgs& a) {
  tools::EstimateRequest r;
  auto model = a.get("--model");
  if (!model)
    return invalid_argument("zt estimate needs --model NAME|DIR (see zt estimate --help)");
  r.model = *model;
  auto int_flag = [&](const char* flag, int64_t min_value,
                      int64_t max_value) -> Result<std::optional<int64_t>> {
    auto v = a.get(flag);
    if (!v) return std::optional<int64_t>();
    ZT_ASSIGN_OR_RETURN(int64_t x, parse_int(flag, *v, min_value));
    if (x > max_value) return invalid_argument("{} must be at most {}, got {}", flag, max_value, x);
    return std::optional<int64_t>(x);
  };
  ZT_ASSIGN_OR_RETURN(auto gpus, int_flag("--num-gpus", 1, 1 << 16));
  ZT_ASSIGN_OR_RETURN(auto nodes, int_flag("--num-nodes", 1, 1 << 16));
  ZT_ASSIGN_OR_RETURN(auto stage, int_flag("--stage", 0, 3));
  ZT_ASSIGN_OR_RETURN(auto micro, int_flag("--micro-batch", 1, int64_t{1} << 24));
  ZT_ASSIGN_OR_RETURN(auto seq, int_flag("--seq-len", 1, int64_t{1} << 24));
  ZT_ASSIGN_OR_RETURN(auto lora, int_flag("--lora-dim", 1, 1 << 16));
  if (gpus) r.gpus_per_node = static_cast<int>(*gpus);
  if (nodes) r.nodes = static_cast<int>(*nodes);
  if (static_cast<int64_t>(r.gpus_per_node) * r.nodes > (1 << 20)) {
    return invalid_argument("--num-gpus x --num-nodes is more than {} ranks", 1 << 20);
  }
  if (stage) r.stage = static_cast<int>(*stage);
  r.micro_batch = micro;
  r.seq_len = seq;
  if (auto o = a.get("--offload")) {
    if (*o != "cpu" && *o != "none") {
      return invalid_argument("--offload must be cpu or none, not '{}'", *o);
    }
    r.offload_optimizer = *o == "cpu";
  }
  if (auto c = a.get("--config")) r.config_path = *c;
  if (auto d = a.get("--dtype")) {
    r.dtype = *d == "fp32" ? "f32" : *d == "f16" ? "fp16" : *d;
    if (*r.dtype != "f32" && *r.dtype != "bf16" && *r.dtype != "fp16") {
      return invalid_argument("--dtype must be f32, bf16 or fp16, not '{}'", *d);
    }
  }
  r.checkpointing =
      a.has("--gradient-checkpointing") ? tools::Checkpointing::kOn : tools::Checkpointing::kOff;
  r.keep_activations = a.has("--keep-activations");
  for (const char* f : {"--lora-dropout", "--lora-modules", "--only-optimize-lora"}) {
    if (a.has(f) && !lora) return invalid_argument("{} needs --lora-dim R (the adapters' rank)", f);
  }
  if (lora) {
    r.lora_dim = static_cast<int>(*lora);
    r.only_optimize_lora = a.has("--only-optimize-lora");
    if (auto p = a.get("--lora-dropout")) {
      char* end = nullptr;
      r.lora_dropout = std::strtof(p->c_str(), &end);
      if (p->empty() || *end != '\0') {
        return invalid_argument("--lora-dropout must be a number, got '{}'", *p);
      }
    }
    if (auto m = a.get("--lora-modules")) {
      std::stringstream list(*m);
      for (std::string item; std::getline(list, item, ',');) {
        if (!item.empty()) r.lora_modules.push_back(item);
      }
    }
  }
  if (auto d = a.get("--device")) {
    if (*d != "cuda" && *d != "cpu") {
      return invalid_argument("--device must be cuda or cpu, not '{}'", *d);
    }
    r.device = *d == "cpu" ? tools::EstimateDevice::kCpu : tools::EstimateDevice::kCuda;
  }
  if (auto g = a.get("--gpu-memory")) {
    ZT_ASSIGN_OR_RETURN(double gib, parse_positive("--gpu-memory", *g));
    if (gib > 1e6) return invalid_argument("--gpu-memory {} GiB is more than any GPU has", *g);
    r.device_bytes = static_cast<int64_t>(gib * 1073741824.0);
    r.device_name = "--gpu-memory";
  } else if (cuda_device_count() > 0) {
    r.device_bytes = cuda_device_total_memory(0);
    r.device_name = cuda_device_name(0);
  } else {
    r.device_bytes = int64_t{80} << 30;
    r.device_name = "no GPU visible: 80 GiB assumed";
  }
  return r;
}

}  // namespace

int cmd_estimate(const Args& args) {
  auto parsed = parse_command("zt estimate", kUsage, kFlags, args);
  if (!parsed) return fail(parsed.status());
  if (!parsed->has_value()) return 0;
  auto request = request_from(**parsed);
  if (!request) return fail(request.status());
  auto report = tools::estimate_run(*request);
  if (!report) return fail(report.status());
  if ((*parsed)->has("--json")) {
    std::printf("%s\n", tools::estimate_json(*report).dump(2).c_str());
  } else {
    std::fputs(tools::estimate_text(*report).c_str(), stdout);
  }
  return 0;
}

}  // namespace zt::cli
