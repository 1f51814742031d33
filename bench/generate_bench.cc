// ZeroTrain's generation speed: greedy decoding with the KV cache from a model (named size or
// model directory) in bf16, a batch of identical random prompts; prints one JSON line with the
// prefill time, the decode step time, tokens/s and the weight-read bandwidth of a decode step
// (the weights' bytes divided by the step time: a decode step reads every weight once, so this
// against the GPU's memory bandwidth says how close the step is to its floor). Its peer is
// bench/generate_torch.py (transformers' generate with its static cache), run by
// scripts/gpu_check.sh with the same model, batch, prompt and length.
//
//   zt_bench_generate [--model llama-1b] [--batch 1] [--prompt 128] [--new 256] [--dtype bf16]
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <nlohmann/json.hpp>

#include "zt/nn/generate.h"
#include "zt/checkpoint/model_open.h"
#include "zt/runtime/inference.h"

namespace {

int run(int argc, char** argv) {
  std::string model_name = "llama-1b", dtype_name = "bf16", device_name = "cuda";
  int batch = 1, prompt_len = 128, new_tokens = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") {
      model_name = v;
    } else if (k == "--batch") {
      batch = std::atoi(v.c_str());
    } else if (k == "--prompt") {
      prompt_len = std::atoi(v.c_str());
    } else if (k == "--new") {
      new_tokens = std::atoi(v.c_str());
    } else if (k == "--dtype") {
      dtype_name = v;
    } else if (k == "--device") {
      device_name = v;
    } else {
      std::fprintf(stderr, "zt_bench_generate: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  auto choice = zt::ckpt::model_open(model_name);
  auto device = zt::device_parse(device_name);
  auto dtype = zt::dtype_parse(dtype_name);
  if (!choice || !device || !dtype) {
    std::fprintf(stderr, "zt_bench_generate: bad --model, --device or --dtype\n");
    return 2;
  }
  zt::nn::Transformer& model = *choice->model;
  const zt::nn::TransformerConfig& c = model.transformer_config();
  auto weights = zt::InferenceWeights::bind(model, *device, *dtype, 1);
  if (!weights) {
    std::fprintf(stderr, "%s\n", weights.status().message().c_str());
    return 1;
  }
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
  uint64_t x = 88172645463325252ull;
  for (auto& t : prompt) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    t = static_cast<int32_t>(x % static_cast<uint64_t>(c.vocab_size));
  }
  const std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(batch), prompt);
  zt::nn::GenerateOptions o{.max_new_tokens = new_tokens,
                            .sampling = zt::nn::Sampling::kGreedy,
                            .vocab_size = c.vocab_size,
                            .max_seq_len = static_cast<int>(c.max_positions),
                            .num_layers = c.n_layer};
  // One short warm-up (kernel selection, allocator), then the measured run.
  zt::nn::GenerateOptions warm = o;
  warm.max_new_tokens = 4;
  zt::nn::generate_batch(model, weights->context(), prompts, warm);
  zt::allocator_reset_peak(*device);
  zt::nn::GenerateStats st;
  auto out = zt::nn::generate_batch(model, weights->context(), prompts, o, nullptr, &st);
  const double step_s = st.decode_s / static_cast<double>(std::max<int64_t>(1, st.decode_steps));
  const double total_s = st.prefill_s + st.decode_s;
  const double made = static_cast<double>(out[0].size()) * batch;
  nlohmann::json j = {{"impl", "zerotrain"},
                      {"model", model_name},
                      {"params", model.num_params()},
                      {"batch", batch},
                      {"prompt", prompt_len},
                      {"new_tokens", out[0].size()},
                      {"dtype", dtype_name},
                      {"prefill_ms", st.prefill_s * 1e3},
                      {"decode_step_ms", step_s * 1e3},
                      {"tokens_per_s", made / total_s},
                      {"decode_tokens_per_s", batch / step_s},
                      {"weight_GBps", static_cast<double>(weights->bytes()) / step_s / 1e9},
                      {"peak_mem_bytes", zt::allocator_stats(*device).peak_allocated_bytes}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zt_bench_generate: error: %s\n", e.what());
    return 1;
  }
}
