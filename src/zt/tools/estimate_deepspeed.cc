// DeepSpeed's model-state estimators (tools/estimate.h), reproduced from their published
// arithmetic: deepspeed/runtime/zero/stage_1_and_2.py estimate_zero2_model_states_mem_needs and
// stage3.py estimate_zero3_model_states_mem_needs, with the *_all_cold print-out. Python's
// arithmetic is kept: products of the (integer) parameter count with integers are exact, the
// buffer factor and 1/nodes are floats, and int() truncates; every intermediate value is below
// 2^53, so doubles give Python's results bit for bit.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "zt/tools/estimate.h"

namespace zt::tools {

DeepSpeedTable deepspeed_zero2_estimate(int64_t total_params, int gpus_per_node, int nodes,
                                        double additional_buffer_factor) {
  DeepSpeedTable t{
      .stage = 2, .total_params = total_params, .gpus_per_node = gpus_per_node, .nodes = nodes};
  const auto P = static_cast<double>(total_params);
  const auto G = static_cast<double>(static_cast<int64_t>(nodes) * gpus_per_node);
  for (const bool cpu_offload : {true, false}) {
    double cpu = 0, gpu = 0;
    if (cpu_offload) {
      gpu = 2 * P;
      cpu = P * std::max(4 * G, 16.0) * additional_buffer_factor;
    } else {
      // 2 = 16-bit params; 18 = 16-bit and fp32 gradients, fp32 params, Adam's two moments.
      gpu = 2 * P + std::trunc(18 * P / G);
      cpu = P * 4 * gpus_per_node * additional_buffer_factor;
    }
    t.rows.push_back({.offload_optimizer = cpu_offload,
                      .cpu_bytes = static_cast<int64_t>(std::trunc(cpu)),
                      .gpu_bytes = static_cast<int64_t>(std::trunc(gpu))});
  }
  return t;
}

DeepSpeedTable deepspeed_zero3_estimate(int64_t total_params, int64_t largest_layer_params,
                                        int gpus_per_node, int nodes,
                                        double additional_buffer_factor) {
  DeepSpeedTable t{.stage = 3,
                   .total_params = total_params,
                   .largest_layer_params = largest_layer_params,
                   .gpus_per_node = gpus_per_node,
                   .nodes = nodes};
  const auto P = static_cast<double>(total_params);
  const auto L = static_cast<double>(largest_layer_params);
  const auto G = static_cast<double>(static_cast<int64_t>(nodes) * gpus_per_node);
  const auto gpn = static_cast<double>(gpus_per_node);
  const double gpus_factor = 1.0 / nodes;
  const double abf = additional_buffer_factor;
  const double largest_layer_memory = 4 * L;
  auto row = [&](bool cpu_offload, bool cpu_offload_params, bool zero_init) {
    double cpu = 0, gpu = 0;
    if (cpu_offload && cpu_offload_params) {
      gpu = largest_layer_memory;
      cpu = zero_init ? P * 18 * gpus_factor * abf : P * std::max(4 * gpn, 18 * gpus_factor) * abf;
    } else if (cpu_offload) {
      gpu = largest_layer_memory + std::trunc(2 * P / G);
      cpu = zero_init ? P * 16 * gpus_factor * abf : P * std::max(4 * gpn, 16 * gpus_factor) * abf;
    } else {
      gpu = largest_layer_memory + std::trunc(18 * P / G);
      cpu = zero_init ? L * 4 * gpn * abf : P * 4 * gpn * abf;
    }
    t.rows.push_back({.offload_param = cpu_offload_params,
                      .offload_optimizer = cpu_offload,
                      .zero_init = zero_init,
                      .cpu_bytes = static_cast<int64_t>(std::trunc(cpu)),
                      .gpu_bytes = static_cast<int64_t>(std::trunc(gpu))});
  };
  for (const bool cpu_offload : {true, false}) {
    for (const bool cpu_offload_params : {true, false}) {
      if (!cpu_offload && cpu_offload_params) continue;
      for (const bool zero_init : {true, false}) row(cpu_offload, cpu_offload_params, zero_init);
    }
  }
  return t;
}

std::string deepspeed_row_options(const DeepSpeedTable& t, const DeepSpeedRow& r) {
  // DeepSpeed pads the enum's "cpu" to four characters (f'{OffloadDeviceEnum.cpu:4}').
  auto device = [](bool cpu) { return cpu ? std::string("cpu ") : std::string("none"); };
  if (t.stage == 2) return "offload_optimizer=" + device(r.offload_optimizer);
  return fmt::format("offload_param={}, offload_optimizer={}, zero_init={}",
                     device(r.offload_param), device(r.offload_optimizer), r.zero_init ? 1 : 0);
}

std::string deepspeed_table_text(const DeepSpeedTable& t) {
  constexpr double kGiB = 1073741824.0;  // DeepSpeed's 2**30, printed as "GB"
  std::string out = "Estimated memory needed for params, optim states and gradients for a:\n" +
                    fmt::format("HW: Setup with {} {}, {} {} per node.\n", t.nodes,
                                t.nodes > 1 ? "nodes" : "node", t.gpus_per_node,
                                t.gpus_per_node > 1 ? "GPUs" : "GPU") +
                    fmt::format("SW: Model with {}M total params",
                                static_cast<int64_t>(static_cast<double>(t.total_params) / 1e6));
  if (t.stage == 3) {
    out += fmt::format(", {}M largest layer params",
                       static_cast<int64_t>(static_cast<double>(t.largest_layer_params) / 1e6));
  }
  out += ".\n  per CPU  |  per GPU |   Options\n";
  for (const DeepSpeedRow& r : t.rows) {
    out += fmt::format(" {:7.2f}GB | {:6.2f}GB | {}\n", static_cast<double>(r.cpu_bytes) / kGiB,
                       static_cast<double>(r.gpu_bytes) / kGiB, deepspeed_row_options(t, r));
  }
  return out;
}

DeepSpeedParamCounts deepspeed_param_counts(const nn::Transformer& model) {
  const nn::TransformerConfig& c = model.transformer_config();
  const int64_t pad_rows = c.padded_vocab_size - c.vocab_size;
  const bool lm_head = c.task == nn::Task::kCausalLM || c.task == nn::Task::kMaskedLM;
  DeepSpeedParamCounts n;
  n.total = model.num_params() - pad_rows * c.embed_dim;  // the token table's padding rows
  if (lm_head && c.tied == nn::Tied::kNo) n.total -= pad_rows * c.embed_dim;
  if (c.task == nn::Task::kMaskedLM) n.total -= pad_rows;  // the decoder's bias
  // The largest module's own parameters (torch's parameters(recurse=False)).
  const int64_t C = c.hidden, F = c.inner;
  const int64_t A = c.n_head * c.head_dim, KVW = c.n_kv_head * c.head_dim;
  auto with_bias = [](int64_t out, int64_t in, nn::Bias b) {
    return out * in + (b == nn::Bias::kWith ? out : 0);
  };
  std::vector<int64_t> modules = {int64_t{c.vocab_size} * c.embed_dim, with_bias(C, A, c.out_bias),
                                  with_bias(F, C, c.mlp_bias), with_bias(C, F, c.mlp_bias)};
  if (c.positions == nn::Positions::kLearned) {
    modules.push_back((c.max_positions + c.position_offset) * C);
  }
  if (c.type_vocab > 0) modules.push_back(c.type_vocab * C);
  if (c.model_type == "gpt2") {
    modules.push_back(with_bias(A + 2 * KVW, C, c.qkv_bias));  // c_attn: q, k and v in one
  } else {
    modules.push_back(with_bias(A, C, c.qkv_bias));  // q_proj (k_proj and v_proj are smaller)
  }
  n.largest_layer = *std::max_element(modules.begin(), modules.end());
  return n;
}

}  // namespace zt::tools
