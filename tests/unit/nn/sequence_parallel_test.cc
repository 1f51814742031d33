// Sequence parallelism in the layers (nn::Context::sequence_parallel), two tensor-parallel ranks
// as threads over Gloo. Oracle: the one-process model (same initial values: each part draws the
// whole parameters' values at its elements). Each rank's embedding output must be its half of
// the tokens, rows [r N/2, (r+1) N/2) of the one-process output (so the split is really made);
// the per-token losses must be the one-process losses on every rank; after backward, a norm's
// weight gradient (summed over the ranks' tokens) and a column-parallel weight's gradient (this
// rank's rows) must equal the one-process gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "unit/comm/comm_test_ranks.h"
#include "common/engine_runs.h"
#include "common/test_util.h"
#include "zt/nn/models/gpt2.h"
#include "zt/zero/zero_state.h"

namespace zt {
namespace {

struct Pass {
  std::vector<double> embedding;  // the embedding unit's output
  std::vector<double> losses;
  std::vector<double> norm_grad;  // h.0's first norm weight
  std::vector<double> qkv_grad;   // h.0's q|k|v weight (this rank's rows)
};

const nn::Param& param(nn::Model& m, const std::string& suffix) {
  for (auto& u : m.units()) {
    for (nn::Param* p : u->params()) {
      if (p->name.size() >= suffix.size() &&
          p->name.compare(p->name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        return *p;
      }
    }
  }
  ADD_FAILURE() << "no parameter " << suffix;
  static nn::Param none;
  return none;
}

// One forward and backward of `model` (parameters bound by a stage-0 ZeroState of its own).
Pass run(nn::Model& model, const nn::Gpt2Config& c, nn::Context ctx) {
  zero::ZeroOptions zo;
  zo.optimizer_states = 0;
  auto stub = communicator_create(DistEnv{}, Device::cpu());
  EXPECT_TRUE(stub.is_ok());
  zo.comm = stub->get();
  zero::ZeroState zero(model, zo, 5);
  testing::CpuTrainBatch batch(c, 2, 16);
  ctx.targets = &batch.targets;
  ctx.dloss = batch.ctx.dloss;
  Pass out;
  out.embedding = model.units().front()->forward(ctx, batch.tokens).to_doubles();
  model.units().front()->release_activations();
  out.losses = model.forward(ctx, batch.tokens, &zero).to_doubles();
  EXPECT_TRUE(zero.finish_pass().is_ok());
  zero.set_boundary(true);
  model.backward(ctx, &zero);
  EXPECT_TRUE(zero.finish_pass().is_ok());
  out.norm_grad = param(model, "h.0.ln_1.weight").grad.to_doubles();
  out.qkv_grad = param(model, "h.0.attn.c_attn.weight").grad.to_doubles();
  return out;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0, worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::abs(want[i]));
    worst = std::max(worst, std::abs(got[i] - want[i]));
  }
  EXPECT_LE(worst, 1e-5 * scale + 1e-7) << what;
}

TEST(SequenceParallel, EachRankKeepsHalfTheTokensAndTheResultsAreTheOneProcessModels) {
  auto named = nn::gpt2_config_named("gpt2-tiny");
  ASSERT_TRUE(named.is_ok());
  nn::Gpt2Config c = *named;
  nn::Gpt2 whole(c);
  nn::Context base;  // (the CPU in f32, training)
  base.mode = nn::Mode::kTrain;
  const Pass one = run(whole, c, base);
  constexpr int kRanks = 2;
  std::vector<Pass> parts(kRanks);
  const int port = testing::free_tcp_port();
  testing::run_ranks(kRanks, [&](int r) {
    auto comm = testing::create_communicator(
        testing::rank_env(r, kRanks, port, std::chrono::seconds(60), "sp"), Device::cpu());
    if (comm == nullptr) return;
    auto part = nn::tensor_parallel_part(whole, r, kRanks);
    ASSERT_TRUE(part.is_ok()) << part.status().message();
    nn::Context ctx = base;
    ctx.tp_rank = r;
    ctx.tp_size = kRanks;
    ctx.tp_comm = comm.get();
    ctx.sequence_parallel = true;
    parts[r] = run(**part, c, ctx);
  });
  const size_t half = one.embedding.size() / kRanks;
  for (int r = 0; r < kRanks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    expect_near(parts[r].embedding,
                {one.embedding.begin() + r * half, one.embedding.begin() + (r + 1) * half},
                "embedding output: this rank's half of the tokens");
    expect_near(parts[r].losses, one.losses, "per-token losses");
    expect_near(parts[r].norm_grad, one.norm_grad, "norm weight gradient");
    // This rank's q, k and v rows: [r C/2, (r+1) C/2) of each of the three C-row blocks.
    std::vector<double> want;
    const int64_t C = c.n_embd, h = C / kRanks;
    for (int64_t b = 0; b < 3; ++b) {
      want.insert(want.end(), one.qkv_grad.begin() + (b * C + r * h) * C,
                  one.qkv_grad.begin() + (b * C + (r + 1) * h) * C);
    }
    expect_near(parts[r].qkv_grad, want, "q|k|v weight gradient rows");
  }
}

}  // namespace
}  // namespace zt
