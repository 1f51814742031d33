// BERT's sequence-classification head: the fixture model (tests/fixtures/hf/bert_cls, made by
// transformers' BertForSequenceClassification) gives transformers' logits and loss to 1e-5; the
// head's and the whole model's backward equal central finite differences in f64.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "zt/checkpoint/safetensors.h"
#include "zt/nn/hf/hf_config.h"
#include "zt/checkpoint/hf_weights.h"
#include "zt/runtime/inference.h"

namespace zt::nn {
namespace {
using ckpt::load_hf_model;
using ckpt::LoadedModel;

const std::string kDir = ZT_SOURCE_DIR "/tests/fixtures/hf/bert_cls";

Tensor read(const ckpt::SafetensorsFile& f, const std::string& name) {
  auto e = f.find(name);
  EXPECT_TRUE(e.is_ok()) << name;
  Tensor t = Tensor::empty(Shape((*e)->shape), (*e)->dtype);
  EXPECT_TRUE(f.read(name, 0, (*e)->numel, t.data()).is_ok());
  return t;
}

TEST(SequenceClassification, LogitsAndLossEqualTransformers) {
  auto m = load_hf_model(kDir);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  ASSERT_EQ(m->model->transformer_config().task, Task::kSequenceClassification);
  ASSERT_EQ(m->model->transformer_config().num_labels, 3);
  auto w = InferenceWeights::bind(*m->model, Device::cpu(), DType::f32);
  ASSERT_TRUE(w.is_ok());
  auto ex = ckpt::SafetensorsFile::open(kDir + "/expected.safetensors");
  ASSERT_TRUE(ex.is_ok());
  Tensor ids = read(*ex, "input_ids"), mask = read(*ex, "attention_mask"),
         types = read(*ex, "token_type_ids"), labels = read(*ex, "labels");
  Context ctx = w->context();
  ctx.attention_mask = &mask;
  ctx.token_types = &types;
  Tensor logits = m->model->forward(ctx, ids);
  const std::vector<double> want = read(*ex, "logits").to_doubles();
  ASSERT_EQ(logits.numel(), static_cast<int64_t>(want.size()));
  testing::expect_close(logits.to_doubles(), want, 1e-5, 1e-5, "logits");
  ctx.targets = &labels;
  const std::vector<double> losses = m->model->forward(ctx, ids).to_doubles();
  ASSERT_EQ(losses.size(), 2u);
  const double mean = (losses[0] + losses[1]) / 2;
  const double expected = read(*ex, "loss").to_doubles()[0];
  EXPECT_NEAR(mean, expected, 1e-5 * expected);
}

TEST(SequenceClassification, BackwardMatchesFiniteDifferences) {
  const nlohmann::json j = {{"model_type", "bert"},
                            {"architectures", {"BertForSequenceClassification"}},
                            {"num_labels", 3},
                            {"num_hidden_layers", 1},
                            {"num_attention_heads", 2},
                            {"hidden_size", 8},
                            {"intermediate_size", 12},
                            {"vocab_size", 13},
                            {"max_position_embeddings", 6},
                            {"type_vocab_size", 2}};
  auto c = transformer_config_from_hf(j, "test");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  Transformer model(*c);
  std::vector<Tensor> values, grads;
  for (size_t u = 0; u < model.units().size(); ++u) {
    Unit& unit = *model.units()[u];
    values.push_back(testing::random_tensor({unit.flat_numel()}, DType::f64, 40 + u, -0.5, 0.5));
    grads.push_back(Tensor::zeros({unit.flat_numel()}, DType::f64));
    unit.bind(values.back(), grads.back());
  }
  const int64_t B = 3, T = 5;
  Tensor ids = testing::random_ints({B, T}, 13, 1);
  Tensor types = testing::random_ints({B, T}, 2, 2);
  Tensor mask = Tensor::from_doubles({1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0}, {B, T},
                                     DType::f64);
  Tensor mask_i = Tensor::empty({B, T}, DType::i32);
  for (int64_t i = 0; i < B * T; ++i) mask_i.data<int32_t>()[i] = static_cast<int32_t>(mask.to_doubles()[i]);
  Tensor labels = Tensor::empty({B}, DType::i32);
  labels.data<int32_t>()[0] = 2;
  labels.data<int32_t>()[1] = -100;  // not counted
  labels.data<int32_t>()[2] = 0;
  auto ctx_for = [&](Mode mode) {
    Context ctx{.device = Device::cpu(), .stream = {}, .compute_dtype = DType::f64, .mode = mode,
                .targets = &labels};
    ctx.attention_mask = &mask_i;
    ctx.token_types = &types;
    ctx.dloss = 0.5f;  // mean over the two counted rows
    return ctx;
  };
  auto loss = [&] {
    Context ctx = ctx_for(Mode::kEval);
    const std::vector<double> l = model.forward(ctx, ids).to_doubles();
    return (l[0] + l[2]) / 2;
  };
  Context ctx = ctx_for(Mode::kTrain);
  model.forward(ctx, ids);
  model.backward(ctx);
  for (size_t u = 0; u < values.size(); ++u) {
    const std::vector<double> fd = testing::finite_difference(values[u], loss);
    testing::expect_close(grads[u].to_doubles(), fd, 1e-7, 1e-5, model.units()[u]->name().c_str());
  }
}

}  // namespace
}  // namespace zt::nn
