#include "zt/tasks/lm_loss.h"

#include <algorithm>

namespace zt::tasks {

std::vector<LmBatch> lm_batches(const std::vector<TokenExample>& examples, int64_t micro_batch,
                                nn::Task task) {
  std::vector<LmBatch> out;
  for (size_t first = 0; first < examples.size(); first += static_cast<size_t>(micro_batch)) {
    const size_t last = std::min(examples.size(), first + static_cast<size_t>(micro_batch));
    LmBatch b;
    b.B = static_cast<int64_t>(last - first);
    for (size_t i = first; i < last; ++i) {
      b.T = std::max<int64_t>(b.T, static_cast<int64_t>(examples[i].input_ids.size()));
    }
    const size_t n = static_cast<size_t>(b.B * b.T);
    b.input_ids.assign(n, 0);
    b.targets.assign(n, -100);
    b.attention_mask.assign(n, 0);
    b.token_type_ids.assign(n, 0);
    for (size_t i = first; i < last; ++i) {
      const TokenExample& e = examples[i];
      const int64_t len = static_cast<int64_t>(e.input_ids.size());
      const size_t row = (i - first) * static_cast<size_t>(b.T);
      const std::vector<int32_t>& labels = e.labels.empty() ? e.input_ids : e.labels;
      for (int64_t t = 0; t < len; ++t) {
        b.input_ids[row + t] = e.input_ids[t];
        b.attention_mask[row + t] = e.attention_mask.empty() ? 1 : e.attention_mask[t];
        if (!e.token_type_ids.empty()) b.token_type_ids[row + t] = e.token_type_ids[t];
        if (task == nn::Task::kCausalLM) {
          b.targets[row + t] = t + 1 < len ? labels[t + 1] : -100;
        } else {
          b.targets[row + t] = labels[t];
        }
      }
    }
    b.padded = std::find(b.attention_mask.begin(), b.attention_mask.end(), 0) !=
               b.attention_mask.end();
    out.push_back(std::move(b));
  }
  return out;
}

Tensor lm_forward(nn::Model& model, nn::Context ctx, const LmBatch& batch, LmOutput output,
                  nn::UnitHooks* hooks) {
  auto upload = [&](const std::vector<int32_t>& v) {
    Tensor host = Tensor::from_blob(const_cast<int32_t*>(v.data()), {batch.B, batch.T}, DType::i32,
                                    Device::cpu());
    return ctx.device.is_cpu() ? host.clone() : host.to(ctx.device, ctx.stream);
  };
  Tensor ids = upload(batch.input_ids), targets, mask, types = upload(batch.token_type_ids);
  ctx.mode = nn::Mode::kEval;
  ctx.targets = nullptr;
  if (output == LmOutput::kLosses) {
    targets = upload(batch.targets);
    ctx.targets = &targets;
  }
  if (batch.padded) {
    mask = upload(batch.attention_mask);
    ctx.attention_mask = &mask;
  }
  ctx.token_types = &types;
  return model.forward(ctx, ids, hooks);
}

void lm_loss_accumulate(nn::Model& model, nn::Context ctx, const LmBatch& batch, LossSum& into,
                        nn::UnitHooks* hooks) {
  const std::vector<double> losses =
      lm_forward(model, std::move(ctx), batch, LmOutput::kLosses, hooks).to_doubles();
  for (size_t i = 0; i < losses.size(); ++i) {
    if (batch.targets[i] >= 0) {
      into.sum += losses[i];
      ++into.count;
    }
  }
}

}  // namespace zt::tasks
