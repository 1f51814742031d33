#include "zt/nn/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace zt::nn {

int32_t sample_logits(const std::vector<float>& logits, const GenerateOptions& options,
                      double uniform01) {
  const int V = options.vocab_size > 0 ? std::min<int>(options.vocab_size, logits.size())
                                       : static_cast<int>(logits.size());
  if (options.sampling == Sampling::kGreedy || options.top_k <= 1) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + V) -
                                logits.begin());
  }
  const int k = std::min(options.top_k, V);
  std::vector<int32_t> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const double t = std::max(1e-6, static_cast<double>(options.temperature));
  std::vector<double> p(k);
  double maxl = logits[idx[0]], sum = 0;
  for (int i = 0; i < k; ++i) sum += p[i] = std::exp((logits[idx[i]] - maxl) / t);
  double r = uniform01 * sum;
  for (int i = 0; i < k; ++i) {
    r -= p[i];
    if (r <= 0) return idx[i];
  }
  return idx[k - 1];
}

std::vector<int32_t> generate(Model& model, Context ctx, std::vector<int32_t> prompt,
                              const GenerateOptions& options, UnitHooks* hooks) {
  ZT_ASSERT(!prompt.empty(), "generate needs at least one prompt token");
  ZT_ASSERT(options.max_seq_len > 0, "generate needs max_seq_len");
  ctx.mode = Mode::kEval;
  ctx.targets = nullptr;
  std::mt19937_64 rng(options.seed);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  std::vector<int32_t> out;
  for (int n = 0; n < options.max_new_tokens; ++n) {
    const size_t T = std::min<size_t>(prompt.size(), options.max_seq_len);
    std::vector<int32_t> window(prompt.end() - T, prompt.end());
    Tensor tokens = Tensor::from_blob(window.data(), {1, static_cast<int64_t>(T)}, DType::i32,
                                      Device::cpu());
    Tensor dev_tokens = ctx.device.is_cpu() ? tokens.clone() : tokens.to(ctx.device, ctx.stream);
    Tensor logits = model.forward(ctx, dev_tokens, hooks);
    const int64_t Vp = logits.size(-1);
    std::vector<float> last =
        logits.view((static_cast<int64_t>(T) - 1) * Vp, {Vp}).to_floats();
    int32_t next = sample_logits(last, options, uni(rng));
    prompt.push_back(next);
    out.push_back(next);
  }
  return out;
}

}  // namespace zt::nn
