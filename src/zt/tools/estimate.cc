// `zt estimate` from request to report (tools/estimate.h): the model opened as `zt train` opens
// it (LoRA applied the same way), the ds_config resolved with the command line's overrides by
// the same parser, DeepSpeed's tables, ZeroTrain's prediction with and without activation
// checkpointing, and the largest micro-batch per stage; then the text and the JSON.
#include <filesystem>

#include <fmt/format.h>

#include "zt/checkpoint/model_open.h"
#include "zt/core/file_io.h"
#include "zt/runtime/config_schema.h"
#include "zt/tasks/lora.h"
#include "zt/tools/estimate.h"

namespace zt::tools {
namespace {

using Json = nlohmann::json;
constexpr double kGiB = 1073741824.0;

// The config's JSON: the file's (comments and trailing commas allowed, as config_load reads it),
// or ZeroTrain's defaults for a GPU run without one: bf16, DeepSpeed's other defaults.
Result<Json> config_json(const EstimateRequest& r) {
  if (r.config_path.empty()) return Json{{"bf16", {{"enabled", true}}}};
  std::error_code ec;
  if (!std::filesystem::exists(r.config_path, ec)) {
    return not_found("--config {}: no such file; pass the path of your ds_config.json",
                     r.config_path);
  }
  ZT_ASSIGN_OR_RETURN(std::string text,
                      file_read_all(r.config_path, "DeepSpeed config file", int64_t{64} << 20));
  ZT_ASSIGN_OR_RETURN(Json top, config_detail::json_text_parse(text, r.config_path));
  if (!top.is_object()) {
    return invalid_argument("--config {}: a ds_config.json holds one JSON object", r.config_path);
  }
  return top;
}

// Sets a precision block's "enabled" (creating the block only to enable it).
void precision_set(Json& top, const std::string& key, bool enabled) {
  if (top.contains(key) && top[key].is_object()) {
    top[key]["enabled"] = enabled;
  } else if (enabled) {
    top[key] = Json{{"enabled", true}};
  }
}

// The command line's overrides on the config's JSON.
Status config_override(Json& top, const EstimateRequest& r) {
  if (r.dtype) {
    const std::string& d = *r.dtype;
    if (d != "f32" && d != "bf16" && d != "fp16") {
      return invalid_argument("--dtype must be f32, bf16 or fp16, not '{}'", d);
    }
    precision_set(top, "fp16", d == "fp16");
    precision_set(top, top.contains("bfloat16") ? "bfloat16" : "bf16", d == "bf16");
  }
  if (r.stage || r.offload_optimizer) {
    if (!top.contains("zero_optimization") || !top["zero_optimization"].is_object()) {
      top["zero_optimization"] = Json::object();
    }
    Json& z = top["zero_optimization"];
    if (r.stage) z["stage"] = *r.stage;
    if (r.offload_optimizer) {
      if (!z.contains("offload_optimizer") || !z["offload_optimizer"].is_object()) {
        z["offload_optimizer"] = Json{{"pin_memory", true}};
      }
      z["offload_optimizer"]["device"] = *r.offload_optimizer ? "cpu" : "none";
    }
  }
  if (r.micro_batch) {
    // The micro-batch is what memory depends on; the global batch follows from it.
    top.erase("train_batch_size");
    top["train_micro_batch_size_per_gpu"] = *r.micro_batch;
  } else if (!top.contains("train_batch_size") && !top.contains("train_micro_batch_size_per_gpu")) {
    top["train_micro_batch_size_per_gpu"] = 1;
  }
  return Status::ok();
}

Result<DeepSpeedConfig> config_resolve(const Json& top, const EstimateRequest& r, int world) {
  const std::string source = r.config_path.empty() ? "zt estimate" : r.config_path;
  ZT_ASSIGN_OR_RETURN(DeepSpeedConfig c, config_parse(top.dump(), source, world));
  const OffloadConfig& o = c.zero.offload_optimizer;
  if (o.enabled() && c.zero.stage == 0) {
    return invalid_argument(
        "{} needs ZeRO stage 1, 2 or 3 (offload_optimizer moves the optimizer state those "
        "stages partition); add --stage 1, 2 or 3",
        r.offload_optimizer.value_or(false)
            ? std::string("--offload cpu")
            : "zero_optimization.offload_optimizer.device " + o.device);
  }
  return c;
}

int64_t trained_params(nn::Transformer& model) {
  int64_t n = 0;
  for (auto& u : model.units()) {
    if (u->frozen()) continue;
    for (nn::Param* p : u->params()) n += p->numel();
  }
  return n;
}

}  // namespace

Result<EstimateReport> estimate_run(const EstimateRequest& req) {
  if (req.gpus_per_node < 1) return invalid_argument("--num-gpus must be at least 1");
  if (req.nodes < 1) return invalid_argument("--num-nodes must be at least 1");
  if (req.stage && (*req.stage < 0 || *req.stage > 3)) {
    return invalid_argument("--stage must be 0, 1, 2 or 3, not {}", *req.stage);
  }
  if (req.device_bytes <= 0) return invalid_argument("--gpu-memory must be positive");
  const int world = req.gpus_per_node * req.nodes;
  EstimateReport rep;
  rep.request = req;
  rep.model_name = req.model;
  ZT_ASSIGN_OR_RETURN(ckpt::ModelChoice choice, ckpt::model_open(req.model));
  nn::Transformer& model = *choice.model;
  if (req.lora_dim > 0) {
    ZT_RETURN_IF_ERROR(tasks::lora_apply(model, {.r = req.lora_dim,
                                                 .dropout = req.lora_dropout,
                                                 .modules = req.lora_modules,
                                                 .only_optimize = req.only_optimize_lora}));
  }
  const nn::TransformerConfig& mc = model.transformer_config();
  rep.params = model.num_params();
  rep.trained_params = trained_params(model);

  // The configuration, as the engine would resolve it.
  ZT_ASSIGN_OR_RETURN(Json top, config_json(req));
  ZT_RETURN_IF_ERROR(config_override(top, req));
  ZT_ASSIGN_OR_RETURN(DeepSpeedConfig cfg, config_resolve(top, req, world));
  rep.stage = cfg.zero.stage;
  rep.offload_optimizer = cfg.zero.offload_optimizer.enabled();
  rep.dtype = dtype_name(cfg.compute_dtype());
  rep.micro_batch = cfg.train_micro_batch_size_per_gpu;
  if (auto it = cfg.blocks.find("activation_checkpointing");
      it != cfg.blocks.end() && it->is_object()) {
    rep.cpu_checkpointing = it->value("cpu_checkpointing", false);
  }
  // The sequence, as zt train defaults it.
  const bool tiny = req.model == "gpt2-tiny" || req.model == "llama-tiny";
  rep.seq_len = req.seq_len.value_or(tiny ? 128 : std::min<int64_t>(mc.max_positions, 2048));
  if (rep.seq_len < 1) return invalid_argument("--seq-len must be at least 1");
  if (rep.seq_len > mc.max_positions) {
    return invalid_argument("--seq-len {} exceeds {}'s context of {}", rep.seq_len, req.model,
                            mc.max_positions);
  }

  rep.ds_counts = deepspeed_param_counts(model);
  rep.zero2 = deepspeed_zero2_estimate(rep.ds_counts.total, req.gpus_per_node, req.nodes);
  rep.zero3 = deepspeed_zero3_estimate(rep.ds_counts.total, rep.ds_counts.largest_layer,
                                       req.gpus_per_node, req.nodes);

  rep.without_checkpointing =
      predict_memory(model, cfg, req.device, world,
                     {rep.micro_batch, rep.seq_len, Checkpointing::kOff, req.keep_activations});
  rep.with_checkpointing =
      predict_memory(model, cfg, req.device, world,
                     {rep.micro_batch, rep.seq_len, Checkpointing::kOn, req.keep_activations});

  // The largest micro-batch of each stage, without and with offload_optimizer.
  for (int stage = 0; stage <= 3; ++stage) {
    for (const bool offload : {false, true}) {
      if (offload && stage == 0) continue;
      Json variant = top;
      EstimateRequest vr = req;
      vr.stage = stage;
      vr.offload_optimizer = offload;
      vr.dtype.reset();
      vr.micro_batch.reset();
      ZT_RETURN_IF_ERROR(config_override(variant, vr));
      ZT_ASSIGN_OR_RETURN(DeepSpeedConfig vc, config_resolve(variant, vr, world));
      StageFit f{.stage = stage, .offload_optimizer = offload};
      f.without_checkpointing =
          largest_micro_batch(model, vc, req.device, world, rep.seq_len, Checkpointing::kOff,
                              req.device_bytes, req.keep_activations);
      f.with_checkpointing =
          largest_micro_batch(model, vc, req.device, world, rep.seq_len, Checkpointing::kOn,
                              req.device_bytes, req.keep_activations);
      rep.fits.push_back(f);
    }
  }
  return rep;
}

namespace {

std::string gib(int64_t bytes) {
  return fmt::format("{:.2f}", static_cast<double>(bytes) / kGiB);
}

std::string count_text(int64_t n) {
  if (n >= 1000000000) return fmt::format("{:.2f}B", static_cast<double>(n) / 1e9);
  if (n >= 1000000) return fmt::format("{:.1f}M", static_cast<double>(n) / 1e6);
  return fmt::format("{}", n);
}

int64_t reserve_of(const EstimateReport& r) {
  return r.request.device == EstimateDevice::kCuda ? kCudaReserveBytes : 0;
}

Json prediction_json(const EstimateReport& r, const MemoryPrediction& p) {
  const int64_t total = p.device_total() + reserve_of(r);
  return Json{{"flash_attention", p.flash},
              {"model_states",
               {{"params", p.states.params},
                {"grads", p.states.grads},
                {"master", p.states.master},
                {"optimizer", p.states.optimizer},
                {"total", p.states.total()}}},
              {"state_rounding_bytes", p.state_rounding},
              {"model_buffers_bytes", p.model_buffers},
              {"at_peak",
               {{"activations", p.at_peak.activations},
                {"temporaries", p.at_peak.temporaries},
                {"gathered_params", p.at_peak.gathered},
                {"gradient_buffers", p.at_peak.gradients},
                {"batch", p.at_peak.batch}}},
              {"peak_at", p.peak_at},
              {"peak_allocated_bytes", p.peak_allocated},
              {"cublas_workspace_bytes", p.workspace},
              {"reserve_bytes", reserve_of(r)},
              {"device_total_bytes", total},
              {"fits", total <= r.request.device_bytes},
              {"host_per_rank",
               {{"offloaded_state", p.host_state},
                {"offload_staging", p.host_staging},
                {"checkpointed_inputs", p.host_checkpoints},
                {"total", p.host_total()}}},
              {"host_per_node", p.host_total() * r.request.gpus_per_node},
              {"nvme_per_rank", p.states.nvme},
              {"nvme_per_node", p.states.nvme * r.request.gpus_per_node}};
}

Json deepspeed_json(const DeepSpeedTable& t) {
  Json rows = Json::array();
  for (const DeepSpeedRow& row : t.rows) {
    Json j{{"options", deepspeed_row_options(t, row)},
           {"offload_optimizer", row.offload_optimizer},
           {"cpu_bytes", row.cpu_bytes},
           {"gpu_bytes", row.gpu_bytes}};
    if (t.stage == 3) {
      j["offload_param"] = row.offload_param;
      j["zero_init"] = row.zero_init;
    }
    rows.push_back(j);
  }
  Json j{{"total_params", t.total_params}, {"rows", rows}};
  if (t.stage == 3) j["largest_layer_params"] = t.largest_layer_params;
  return j;
}

}  // namespace

nlohmann::json estimate_json(const EstimateReport& r) {
  const EstimateRequest& q = r.request;
  Json fits = Json::array();
  for (const StageFit& f : r.fits) {
    fits.push_back({{"stage", f.stage},
                    {"offload_optimizer", f.offload_optimizer},
                    {"without_checkpointing", f.without_checkpointing},
                    {"with_checkpointing", f.with_checkpointing}});
  }
  return Json{
      {"model",
       {{"name", r.model_name},
        {"params", r.params},
        {"trained_params", r.trained_params},
        {"deepspeed_total_params", r.ds_counts.total},
        {"deepspeed_largest_layer_params", r.ds_counts.largest_layer}}},
      {"setup",
       {{"num_gpus", q.gpus_per_node},
        {"num_nodes", q.nodes},
        {"world_size", q.gpus_per_node * q.nodes},
        {"device", q.device == EstimateDevice::kCuda ? "cuda" : "cpu"},
        {"device_memory_bytes", q.device_bytes},
        {"device_memory_from", q.device_name},
        {"stage", r.stage},
        {"offload_optimizer", r.offload_optimizer},
        {"dtype", r.dtype},
        {"micro_batch", r.micro_batch},
        {"seq_len", r.seq_len},
        {"gradient_checkpointing", q.checkpointing == Checkpointing::kOn},
        {"cpu_checkpointing", r.cpu_checkpointing}}},
      {"deepspeed", {{"zero2", deepspeed_json(r.zero2)}, {"zero3", deepspeed_json(r.zero3)}}},
      {"zerotrain",
       {{"without_checkpointing", prediction_json(r, r.without_checkpointing)},
        {"with_checkpointing", prediction_json(r, r.with_checkpointing)}}},
      {"largest_micro_batch", fits}};
}

std::string estimate_text(const EstimateReport& r) {
  const EstimateRequest& q = r.request;
  const bool cuda = q.device == EstimateDevice::kCuda;
  const bool ckpt = q.checkpointing == Checkpointing::kOn;
  std::string out = fmt::format(
      "Model: {}, {} parameters{}\n"
      "Setup: {} node(s) x {} GPU(s), ZeRO stage {}, offload_optimizer {}, {}, micro-batch {} x "
      "{} tokens{}\n"
      "GPU memory: {} GiB ({})\n\n",
      r.model_name, count_text(r.params),
      r.trained_params != r.params ? fmt::format(" ({} trained)", count_text(r.trained_params))
                                   : "",
      q.nodes, q.gpus_per_node, r.stage, r.offload_optimizer ? "cpu" : "none", r.dtype,
      r.micro_batch, r.seq_len, cuda ? "" : ", on the CPU", gib(q.device_bytes), q.device_name);
  out += "DeepSpeed (estimate_zero2_model_states_mem_needs_all_cold; model states only):\n";
  out += deepspeed_table_text(r.zero2);
  out += "\nDeepSpeed (estimate_zero3_model_states_mem_needs_all_cold; model states only):\n";
  out += deepspeed_table_text(r.zero3);

  const MemoryPrediction& a = r.without_checkpointing;
  const MemoryPrediction& b = r.with_checkpointing;
  const int64_t reserve = reserve_of(r);
  auto line = [&](const char* what, int64_t x, int64_t y) {
    return fmt::format("  {:<46} {:>9} {:>9}\n", what, gib(x), gib(y));
  };
  out += fmt::format(
      "\nZeroTrain, per GPU (GiB; peak of one training step; attention {}):\n"
      "  {:<46} {:>9} {:>9}\n",
      a.flash ? "fused (flash)" : "unfused, (T, T) probabilities kept", "",
      ckpt ? "no ckpt" : "no ckpt *", ckpt ? "ckpt *" : "ckpt");
  out += line("model states (predict_state_bytes)", a.states.total(), b.states.total());
  out += fmt::format("    params {}, grads {}, fp32 master {}, optimizer state {}\n",
                     gib(a.states.params), gib(a.states.grads), gib(a.states.master),
                     gib(a.states.optimizer));
  out += line("activations kept for backward", a.at_peak.activations, b.at_peak.activations);
  out += line("temporaries at the peak", a.at_peak.temporaries, b.at_peak.temporaries);
  out += line("gathered parameters (stage 3)", a.at_peak.gathered, b.at_peak.gathered);
  out += line("gradient buckets (stages 2-3), reduce outputs", a.at_peak.gradients,
              b.at_peak.gradients);
  out += line("batch, model buffers, allocator rounding",
              a.at_peak.batch + a.model_buffers + a.state_rounding,
              b.at_peak.batch + b.model_buffers + b.state_rounding);
  out += line("peak allocated (caching allocator)", a.peak_allocated, b.peak_allocated);
  if (cuda) {
    out += line("cuBLAS workspace", a.workspace, b.workspace);
    out += line("CUDA context, kernels, NCCL (assumed)", reserve, reserve);
  }
  out += line("total", a.device_total() + reserve, b.device_total() + reserve);
  out += fmt::format("  {:<46} {:>9} {:>9}\n", fmt::format("fits in {} GiB", gib(q.device_bytes)),
                     a.device_total() + reserve <= q.device_bytes ? "yes" : "NO",
                     b.device_total() + reserve <= q.device_bytes ? "yes" : "NO");
  out += fmt::format("  peak during: {} (no ckpt), {} (ckpt)\n", a.peak_at, b.peak_at);
  if (a.host_total() > 0 || b.host_total() > 0) {
    out += fmt::format("ZeroTrain, host memory per node ({} rank(s); GiB):\n", q.gpus_per_node);
    const int64_t k = q.gpus_per_node;
    out += line("offloaded master weights + optimizer state", a.host_state * k, b.host_state * k);
    out += line("offload staging (page-locked)", a.host_staging * k, b.host_staging * k);
    out += line("block inputs (cpu_checkpointing)", a.host_checkpoints * k, b.host_checkpoints * k);
  }
  if (a.states.nvme > 0) {
    out += fmt::format("ZeroTrain, NVMe swap files per node ({} rank(s); GiB):\n", q.gpus_per_node);
    out += line("optimizer state and offload_param nvme chunks", a.states.nvme * q.gpus_per_node,
                b.states.nvme * q.gpus_per_node);
  }
  out += fmt::format("\nLargest micro-batch per GPU at seq {} ({} GiB per GPU{}):\n", r.seq_len,
                     gib(q.device_bytes),
                     cuda ? fmt::format(", {} GiB held back for CUDA", gib(reserve)) : "");
  out += fmt::format("  {:<6} {:<18} {:>10} {:>10}\n", "stage", "offload_optimizer", "no ckpt",
                     "ckpt");
  for (const StageFit& f : r.fits) {
    const bool chosen = f.stage == r.stage && f.offload_optimizer == r.offload_optimizer;
    out += fmt::format("  {:<6} {:<18} {:>10} {:>10}{}\n", f.stage,
                       f.offload_optimizer ? "cpu|nvme" : "none", f.without_checkpointing,
                       f.with_checkpointing, chosen ? "  <- this setup" : "");
  }
  return out;
}

}  // namespace zt::tools
