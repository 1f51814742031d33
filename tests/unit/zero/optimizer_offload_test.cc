// The offload pipeline's bookkeeping (zero/optimizer_offload.h) without a GPU: a ZeroState whose
// master weights and optimizer state sit in "offloaded" host buffers on a CPU device, stepped
// piece by piece through OptimizerOffload, must end where the plain optimizer step over whole
// unit chunks ends (the oracle: one Optimizer::step over the same gradients, as Engine does
// without offload). Pieces smaller than a unit, a last piece shorter than the others, two
// staging slots reused over many pieces and several steps, one or two state buffers, and Lamb's
// per-tensor chunks are all exercised. The CPU kernels are elementwise (Adam, SGD) or per tensor
// (Lamb), so cutting a chunk into pieces changes no arithmetic: the tolerance is a few ulps, and
// an indexing mistake (a piece stepped twice, skipped, or read from the wrong slot) is O(1).
#include "zt/zero/optimizer_offload.h"

#include <memory>

#include "common/engine_runs.h"
#include "common/test_util.h"
#include "zt/comm/communicator.h"
#include "zt/nn/models/gpt2.h"
#include "zt/optim/optimizer.h"
#include "zt/zero/zero_state.h"

namespace zt::zero {
namespace {

struct Trial {
  std::unique_ptr<nn::Gpt2> model;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<ZeroState> zero;
};

Trial make(int stage, const optim::OptimizerSpec& spec, OptimizerPlacement placement,
           int64_t piece) {
  Trial r;
  r.model = std::make_unique<nn::Gpt2>(testing::tiny_gpt2_config());
  auto c = communicator_create(DistEnv{}, Device::cpu());
  EXPECT_TRUE(c.is_ok());
  r.comm = std::move(c).value();
  ZeroOptions o{.device = Device::cpu(),
                .stream = Stream::create(Device::cpu()),
                .optimizer_states = optim::optimizer_state_count(spec),
                .stage = stage,
                .comm = r.comm.get(),
                // stage 3: no unit stays whole, so the own chunk is value_shard
                .persistence_threshold = 0,
                .optimizer_placement = placement,
                .offload_granularity = spec.kind == optim::OptimizerKind::kLamb
                                           ? OffloadGranularity::kParamTensors
                                           : OffloadGranularity::kPieces,
                .offload_piece_elements = piece,
                .comm_dtype = std::nullopt};
  r.zero = std::make_unique<ZeroState>(*r.model, o, 77);
  return r;
}

// The same pseudo-random reduced gradient in both runs, new each step.
void fill_grads(ZeroState& z, int step) {
  for (int u = 0; u < static_cast<int>(z.units().size()); ++u) {
    Tensor& g = z.step_grad(u);
    g.copy_from(testing::random_tensor(g.shape(), DType::f32, 1000 * step + u, -0.5, 0.5));
  }
}

// What Engine::apply_step does without offload: one optimizer step over every unit's chunk (Lamb:
// one chunk per parameter tensor), then the compute copy refreshed from the master.
void step_reference(ZeroState& z, nn::Model& model, optim::Optimizer& opt,
                    const optim::StepValues& v) {
  std::vector<kernels::OptimChunk> chunks;
  for (int u = 0; u < static_cast<int>(z.units().size()); ++u) {
    UnitState& st = z.units()[u];
    auto chunk = [&](int64_t off, int64_t n) {
      kernels::OptimChunk c;
      c.param = st.master.data<float>() + off;
      c.grad = z.step_grad(u).data<float>() + off;
      if (!st.state.empty()) c.state1 = st.state[0].data<float>() + off;
      if (st.state.size() > 1) c.state2 = st.state[1].data<float>() + off;
      c.n = n;
      chunks.push_back(c);
    };
    if (opt.spec().kind == optim::OptimizerKind::kLamb) {
      for (nn::Param* p : model.units()[u]->params()) chunk(p->offset, p->numel());
    } else {
      chunk(0, st.master.numel());
    }
  }
  opt.step(v, chunks, Device::cpu(), {});
  ASSERT_TRUE(z.publish_params(false).is_ok());
}

std::vector<double> flat(const std::vector<Tensor>& ts) {
  std::vector<double> out;
  for (const Tensor& t : ts) {
    auto v = t.to_doubles();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

void expect_same_training(int stage, const optim::OptimizerSpec& spec, int64_t piece) {
  Trial ref = make(stage, spec, OptimizerPlacement::kDevice, piece);
  Trial off = make(stage, spec, OptimizerPlacement::kHostPageable, piece);
  ASSERT_NE(off.zero->offload(), nullptr);
  ASSERT_EQ(ref.zero->offload(), nullptr);
  optim::Optimizer opt_ref(spec), opt_off(spec);
  optim::StepValues v{.lr = spec.lr, .beta1 = spec.beta1, .beta2 = spec.beta2, .grad_scale = 0.5f};
  for (int step = 1; step <= 3; ++step) {
    fill_grads(*ref.zero, step);
    fill_grads(*off.zero, step);
    step_reference(*ref.zero, *ref.model, opt_ref, v);
    ASSERT_TRUE(off.zero->offload()->step(opt_off, v).is_ok());
    ASSERT_TRUE(off.zero->publish_params(true).is_ok());
  }
  EXPECT_EQ(opt_off.steps(), 3);
  std::vector<Tensor> ref_value, off_value, ref_state, off_state;
  for (size_t u = 0; u < ref.zero->units().size(); ++u) {
    ref_value.push_back(ref.zero->own_compute_chunk(static_cast<int>(u)));
    off_value.push_back(off.zero->own_compute_chunk(static_cast<int>(u)));
    for (const Tensor& t : ref.zero->units()[u].state) ref_state.push_back(t);
    for (const Tensor& t : off.zero->units()[u].state) off_state.push_back(t);
  }
  auto master_ref = ref.zero->gather_master();
  auto master_off = off.zero->gather_master();
  ASSERT_TRUE(master_ref.is_ok() && master_off.is_ok());
  testing::expect_close(flat(*master_off), flat(*master_ref), 1e-9, 1e-6, "master weights");
  testing::expect_close(flat(off_value), flat(ref_value), 1e-9, 1e-6, "compute copy");
  testing::expect_close(flat(off_state), flat(ref_state), 1e-9, 1e-6, "optimizer state");
  // The compute copy moved: the comparison above is not between two untouched copies.
  Trial fresh = make(stage, spec, OptimizerPlacement::kDevice, piece);
  std::vector<Tensor> start;
  for (size_t u = 0; u < fresh.zero->units().size(); ++u) {
    start.push_back(fresh.zero->own_compute_chunk(static_cast<int>(u)));
  }
  EXPECT_GT(testing::max_scaled_error(flat(off_value), flat(start), 1e-4, 0), 1.0);
}

optim::OptimizerSpec adamw() {
  return {.kind = optim::OptimizerKind::kAdam, .lr = 0.01, .weight_decay = 0.1};
}

TEST(OptimizerOffload, AdamPiecesMatchWholeChunksAtEveryStage) {
  // 1000 elements: units of 64 to ~3,400 elements become 1-4 pieces, the last one shorter.
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE(stage);
    expect_same_training(stage, adamw(), 1000);
  }
}

TEST(OptimizerOffload, OnePiecePerUnit) {
  expect_same_training(2, adamw(), int64_t{1} << 23);
}

TEST(OptimizerOffload, SgdWithMomentumAndWithout) {
  expect_same_training(
      1, {.kind = optim::OptimizerKind::kSgd, .lr = 0.1, .momentum = 0.9, .nesterov = true}, 777);
  expect_same_training(2, {.kind = optim::OptimizerKind::kSgd, .lr = 0.1}, 777);
}

TEST(OptimizerOffload, LambStepsWholeParameterTensors) {
  expect_same_training(1, {.kind = optim::OptimizerKind::kLamb, .lr = 0.01, .weight_decay = 0.01},
                       1000);
}

TEST(OptimizerOffload, StateBytesCountTheHost) {
  Trial ref = make(2, adamw(), OptimizerPlacement::kDevice, 1000);
  Trial off = make(2, adamw(), OptimizerPlacement::kHostPageable, 1000);
  ModelStateBytes r = ref.zero->state_bytes(), o = off.zero->state_bytes();
  // f32 without offload: the master is the compute copy (0 bytes of its own).
  EXPECT_EQ(r.master, 0);
  EXPECT_EQ(r.host_total(), 0);
  EXPECT_EQ(o.master, 0);
  EXPECT_EQ(o.optimizer, 0);
  EXPECT_EQ(o.params, r.params);
  EXPECT_EQ(o.grads, r.grads);
  EXPECT_EQ(o.host_master, r.params);  // f32 compute copy: as many bytes as the master
  EXPECT_EQ(o.host_optimizer, r.optimizer);
  // Two slots of the largest piece, f32 gradients only (no 16-bit copy in f32 training).
  EXPECT_EQ(o.host_buffers, 2 * 1000 * 4);
}

}  // namespace
}  // namespace zt::zero
