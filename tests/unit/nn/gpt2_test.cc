// The whole GPT-2 model's backward against central finite differences in f64 (every parameter of
// a tiny model), and the loss of a freshly initialised model against ln(vocab).
#include "zt/nn/models/gpt2.h"

#include <cmath>

#include "common/test_util.h"
#include "zt/kernels/ops.h"
#include "zt/comm/communicator.h"
#include "zt/zero/zero_state.h"

namespace zt::nn {
namespace {

struct Bound {
  std::vector<Tensor> values, grads;
};

// Binds every unit to f64 buffers filled with uniform random values (better conditioned for
// finite differences than GPT-2's tiny init).
Bound bind_f64(Model& model, uint64_t seed) {
  Bound b;
  for (size_t u = 0; u < model.units().size(); ++u) {
    Unit& unit = *model.units()[u];
    b.values.push_back(testing::random_tensor({unit.flat_numel()}, DType::f64, seed + u, -0.5, 0.5));
    b.grads.push_back(Tensor::zeros({unit.flat_numel()}, DType::f64));
    unit.bind(b.values.back(), b.grads.back());
  }
  return b;
}

double mean_loss(Model& model, const Tensor& tokens, const Tensor& targets) {
  Context ctx{.device = Device::cpu(), .stream = {}, .compute_dtype = DType::f64, .mode = Mode::kEval,
              .targets = &targets};
  std::vector<double> l = model.forward(ctx, tokens).to_doubles();
  double s = 0;
  for (double v : l) s += v;
  return s / static_cast<double>(l.size());
}

TEST(Gpt2, BackwardMatchesFiniteDifferences) {
  Gpt2Config c{.n_layer = 2, .n_head = 2, .n_embd = 8, .vocab_size = 11,
               .padded_vocab_size = 16, .max_seq_len = 5};
  Gpt2 model(c);
  Bound b = bind_f64(model, 7);
  const int64_t B = 2, T = 4;
  Tensor tokens = testing::random_ints({B, T}, c.vocab_size, 1);
  Tensor targets = testing::random_ints({B, T}, c.vocab_size, 2);

  Context ctx{.device = Device::cpu(), .stream = {}, .compute_dtype = DType::f64, .mode = Mode::kTrain,
              .targets = &targets, .dloss = 1.0f / static_cast<float>(B * T)};
  model.forward(ctx, tokens);
  model.backward(ctx);

  for (size_t u = 0; u < b.values.size(); ++u) {
    std::vector<double> fd =
        testing::finite_difference(b.values[u], [&] { return mean_loss(model, tokens, targets); });
    testing::expect_close(b.grads[u].to_doubles(), fd, 1e-7, 1e-5,
                          model.units()[u]->name().c_str());
  }
}

TEST(Gpt2, FreshModelLossIsLnVocab) {
  auto c = gpt2_config_named("gpt2-tiny");
  ASSERT_TRUE(c.is_ok());
  Gpt2 model(*c);
  auto comm = communicator_create(DistEnv{}, Device::cpu());
  ASSERT_TRUE(comm.is_ok());
  zero::ZeroOptions zo;
  zo.optimizer_states = 0;
  zo.comm = comm->get();
  zero::ZeroState params(model, zo, 1234);
  const int64_t B = 4, T = 64;
  Tensor tokens = testing::random_ints({B, T}, c->vocab_size, 3);
  Tensor targets = testing::random_ints({B, T}, c->vocab_size, 4);
  Context ctx{.device = Device::cpu(), .stream = {}, .compute_dtype = DType::f32, .mode = Mode::kEval,
              .targets = &targets};
  std::vector<double> l = model.forward(ctx, tokens).to_doubles();
  double mean = 0;
  for (double v : l) mean += v / static_cast<double>(l.size());
  EXPECT_NEAR(mean, std::log(static_cast<double>(c->vocab_size)), 0.05);
}

TEST(Gpt2, NamedSizesHaveKnownParameterCounts) {
  // GPT-2 124M: 124,439,808 parameters with the 50257-token vocabulary (HF's count); the padded
  // vocabulary (50304 rows) adds 47 * 768.
  auto c = gpt2_config_named("gpt2");
  ASSERT_TRUE(c.is_ok());
  Gpt2 model(*c);
  EXPECT_EQ(model.num_params(), 124439808 + (50304 - 50257) * 768);
  EXPECT_FALSE(gpt2_config_named("gpt3").is_ok());
}

}  // namespace
}  // namespace zt::nn
