// predict_memory (tools/estimate.h): one training step replayed as a sequence of allocations and
// frees, in the order the engine makes them, with the peak of the live bytes taken as it goes.
//
// Each function below mirrors one piece of the training code and names it; a tensor is a handle
// with a reference count, as a Tensor is, so "kept for backward" and "freed when the last holder
// lets go" fall out as they do in the code:
//   Model::forward / Model::backward         nn/model.cc (checkpointing: a block keeps its input)
//   TransformerEmbedding/Block/Head          nn/models/transformer.cc
//   Attention, Mlp, Linear (LoRA), Norm      nn/layers/*.cc
//   ZeroState's hooks, buckets, gathers      zero/zero_state.cc, zero/zero_reduce.cc
// Kernels' own scratch comes from kernels/cuda/attention.cu (the unfused path's f32 scores) and
// flash_attention.cu / cudnn_attention.cc (flash_backward_scratch); the CPU kernels allocate
// none. When those files change what they allocate, this walk must follow;
// tests/unit/tools/estimate_test.cc compares it with measured peaks.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "zt/kernels/ops.h"
#include "zt/optim/optimizer.h"
#include "zt/runtime/engine.h"
#include "zt/tools/estimate.h"
#include "zt/tools/estimate_timeline.h"

namespace zt::tools {

zero::ZeroOptions estimate_zero_options(const DeepSpeedConfig& config, EstimateDevice device) {
  // The engine's own rule (runtime/engine.h); the device decides the compute dtype (the CPU
  // computes in f32) and whether offload moves anything.
  return zero_options_from_config(config,
                                  device == EstimateDevice::kCuda ? Device::cuda(0) : Device::cpu(),
                                  optimizer_spec_from_config(config));
}

namespace {

int64_t flash_backward_scratch(int64_t B, int64_t NH, int64_t KV, int64_t T, int64_t HS);

using estimate_detail::Kind;
using estimate_detail::Timeline;
using estimate_detail::ZeroSim;

// The shapes of one micro-batch through the model.
struct Dims {
  int64_t B, T, N;  // N = B * T tokens
  int64_t C, E, A, QKV, F, U, Vp, NH, KV, HS;
  int64_t d;    // compute dtype bytes
  int64_t acc;  // accumulator bytes (norm statistics, losses, gradients)
  bool cuda, flash, expanded, pre_ln, layernorm;
  bool keep;  // TrainShape::keep_activations
};

struct LinearShape {
  int64_t in, out;
  const std::vector<nn::LoraAdapter>* adapters;
};

// ---- the layers

class Walk {
 public:
  Walk(Timeline& m, const Dims& s) : m_(m), s_(s) {}

  // Norm::forward: the output, and the statistics it keeps (mean for LayerNorm, rstd).
  int norm_forward(int64_t rows, int64_t width, std::vector<int>& kept, Kind out_kind) {
    const int out = m_.alloc(rows * width * s_.d, out_kind);
    kept.push_back(m_.alloc(rows * s_.acc, Kind::kActivation));
    if (s_.layernorm) kept.push_back(m_.alloc(rows * s_.acc, Kind::kActivation));
    return out;
  }
  // Norm::recompute: the same output; its statistics are dropped when it returns.
  int norm_recompute(int64_t rows, int64_t width) {
    const int out = m_.alloc(rows * width * s_.d, Kind::kTemporary);
    int r = m_.alloc(rows * s_.acc, Kind::kTemporary);
    int mean = s_.layernorm ? m_.alloc(rows * s_.acc, Kind::kTemporary) : -1;
    m_.release(mean);
    m_.release(r);
    return out;
  }
  // Linear::forward: y, then each adapter group's u = h A^T (h: x after dropout; nn::
  // adapter_groups); u B^T goes straight into y's block. A training forward keeps each u for
  // backward, dropping the last forward's.
  int linear_forward(const LinearShape& l, Kind kind) {
    const int y = m_.alloc(s_.N * l.out * s_.d, kind);
    if (l.adapters == nullptr) return y;
    release_saved_u(l.adapters);
    std::vector<int> kept;
    for (const nn::AdapterGroup& g : nn::adapter_groups(*l.adapters, /*training=*/true)) {
      const bool dropout = (*l.adapters)[g.first].dropout > 0;
      int h = dropout ? m_.alloc(s_.N * l.in * s_.d, Kind::kTemporary) : -1;
      kept.push_back(m_.alloc(s_.N * static_cast<int64_t>(g.count) * g.r * s_.d,
                              Kind::kActivation));
      m_.release(h);
    }
    if (!kept.empty()) saved_u_[l.adapters] = std::move(kept);
    return y;
  }
  // Linear::backward with an input gradient: the GEMMs write into the caller's buffers and read
  // the output gradient's block in place; each adapter group needs h (with dropout), du, and dh
  // with dropout (without it, du A accumulates into the input gradient directly), and reads the
  // u its forward kept (recomputed where none was kept), all dropped when it returns.
  void linear_backward(const LinearShape& l) {
    if (l.adapters == nullptr) return;
    const bool kept = saved_u_.count(l.adapters) != 0;
    for (const nn::AdapterGroup& g : nn::adapter_groups(*l.adapters, /*training=*/true)) {
      const bool dropout = (*l.adapters)[g.first].dropout > 0;
      const int64_t R = static_cast<int64_t>(g.count) * g.r;
      std::vector<int> t;
      if (dropout) t.push_back(m_.alloc(s_.N * l.in * s_.d, Kind::kTemporary));
      if (!kept) t.push_back(m_.alloc(s_.N * R * s_.d, Kind::kTemporary));
      t.push_back(m_.alloc(s_.N * R * s_.d, Kind::kTemporary));
      if (dropout) t.push_back(m_.alloc(s_.N * l.in * s_.d, Kind::kTemporary));
      m_.release_all(t);
    }
    release_saved_u(l.adapters);
  }
  // Linear::release: what the block's linears kept (TransformerBlock::release_activations).
  void release_saved_u(nn::TransformerBlock& b) {
    for (nn::Linear* l : b.linears()) release_saved_u(&l->adapters());
  }

  // Attention::forward; `kept` gets atty_ and either qkv_full_ + lse_ or qkvr_ + att_.
  int attention_forward(nn::Linear& qkv_l, nn::Linear& out_l, std::vector<int>& kept) {
    const int64_t att_elems = s_.B * s_.NH * s_.T * s_.T;
    // The fused kernels keep the projection's output (rotated in place: rotary_qk_forward); the
    // unfused ones read an expanded copy (qkv_expand_forward).
    int qkv = linear_forward({s_.C, s_.QKV, &qkv_l.adapters()},
                             s_.flash ? Kind::kActivation : Kind::kTemporary);
    if (s_.expanded && !s_.flash) {
      int full = m_.alloc(s_.N * 3 * s_.A * s_.d, Kind::kTemporary);
      m_.release(qkv);
      qkv = full;
    }
    kept.push_back(m_.alloc(s_.N * s_.A * s_.d, Kind::kActivation));  // atty_
    if (s_.flash) {
      kept.push_back(m_.retain(qkv));                                        // qkv_full_
      kept.push_back(m_.alloc(s_.B * s_.NH * s_.T * 4, Kind::kActivation));  // lse_
    } else {
      kept.push_back(m_.alloc(3 * s_.N * s_.A * s_.d, Kind::kActivation));  // qkvr_
      kept.push_back(m_.alloc(att_elems * s_.d, Kind::kActivation));        // att_
      if (s_.cuda) {  // f32 scores (16-bit only) and the heads' output before the permute
        int scores = s_.d != 4 ? m_.alloc(att_elems * 4, Kind::kTemporary) : -1;
        m_.touch(s_.N * s_.A * s_.d);
        m_.release(scores);
      }
    }
    const int y = linear_forward({s_.A, s_.C, &out_l.adapters()}, Kind::kActivation);
    m_.release(qkv);
    return y;
  }
  void attention_backward(nn::Linear& qkv_l, nn::Linear& out_l, std::vector<int>& kept) {
    const int64_t att_elems = s_.B * s_.NH * s_.T * s_.T;
    int datty = m_.alloc(s_.N * s_.A * s_.d, Kind::kTemporary);
    linear_backward({s_.A, s_.C, &out_l.adapters()});
    int dqkv = m_.alloc(s_.N * (s_.flash ? s_.QKV : 3 * s_.A) * s_.d, Kind::kTemporary);
    if (s_.flash) {
      m_.touch(flash_backward_scratch(s_.B, s_.NH, s_.KV, s_.T, s_.A / s_.NH));
    } else if (s_.cuda) {
      std::vector<int> t = {m_.alloc(s_.N * s_.A * s_.d, Kind::kTemporary),      // dyr
                            m_.alloc(3 * s_.N * s_.A * s_.d, Kind::kTemporary),  // dqkvr
                            m_.alloc(att_elems * 4, Kind::kTemporary)};          // datt (f32)
      if (s_.d != 4) t.push_back(m_.alloc(att_elems * s_.d, Kind::kTemporary));  // dpre
      m_.release_all(t);
    }
    if (s_.expanded && !s_.flash) {
      int draw = m_.alloc(s_.N * s_.QKV * s_.d, Kind::kTemporary);
      m_.release(dqkv);
      dqkv = draw;
    }
    linear_backward({s_.C, s_.QKV, &qkv_l.adapters()});
    m_.release_all(kept);  // Attention::release
    m_.release(dqkv);
    m_.release(datty);
  }

  // Mlp::forward: keeps h_ (the up projection's output); the activation is a temporary (both from
  // one GEMM when the activation is fused: the same two buffers, in the same order), or kept too
  // (keep_activations: `a`, freed with h at the end of the MLP's backward).
  int mlp_forward(nn::Linear& up, nn::Linear& down, int& h, int& a) {
    h = linear_forward({s_.C, s_.U, &up.adapters()}, Kind::kActivation);
    int act = m_.alloc(s_.N * s_.F * s_.d, s_.keep ? Kind::kActivation : Kind::kTemporary);
    const int y = linear_forward({s_.F, s_.C, &down.adapters()}, Kind::kActivation);
    if (s_.keep) {
      a = act;
    } else {
      m_.release(act);
    }
    return y;
  }
  void mlp_backward(nn::Linear& up, nn::Linear& down, int& h, int& a) {
    // The activation for down's weight gradient: kept, or recomputed (a temporary).
    const auto recompute = [&] {
      return s_.keep ? -1 : m_.alloc(s_.N * s_.F * s_.d, Kind::kTemporary);
    };
    if (s_.U == s_.F && down.fusable()) {
      // Not gated, no adapter on down: the activation's backward runs in down's din GEMM
      // (Linear::backward_act), which writes dh directly; no separate da.
      int dh = m_.alloc(s_.N * s_.U * s_.d, Kind::kTemporary);
      int act = recompute();
      m_.release(act);
      linear_backward({s_.C, s_.U, &up.adapters()});
      m_.release(h);
      m_.release(a);
      m_.release(dh);
      return;
    }
    int da = m_.alloc(s_.N * s_.F * s_.d, Kind::kTemporary);
    int act = recompute();
    linear_backward({s_.F, s_.C, &down.adapters()});
    m_.release(act);
    int dh = m_.alloc(s_.N * s_.U * s_.d, Kind::kTemporary);
    linear_backward({s_.C, s_.U, &up.adapters()});
    m_.release(h);
    m_.release(a);
    m_.release(dh);
    m_.release(da);
  }

  // ---- units

  struct BlockKept {
    int x = -1, res = -1, h = -1, res2 = -1, mlp_h = -1, mlp_a = -1;
    int n1 = -1, n2 = -1;  // pre-LN norm outputs, when kept
    std::vector<int> norm1, norm2, attn;
    void release(Timeline& m) {
      for (int* id : {&x, &res, &h, &res2, &mlp_h, &mlp_a, &n1, &n2}) m.release(*id);
      m.release_all(norm1);
      m.release_all(norm2);
      m.release_all(attn);
    }
  };

  int block_forward(nn::TransformerBlock& b, int x, BlockKept& k) {
    const std::vector<nn::Linear*> l = b.linears();  // qkv, attention out, up, down
    k.x = m_.retain(x);
    // Each branch's last projection writes the residual sum itself (Linear::forward with a
    // residual): its output is res, res2 or the block's output.
    if (s_.pre_ln) {  // the norms' outputs: temporaries, or kept (keep_activations)
      const Kind nk = s_.keep ? Kind::kActivation : Kind::kTemporary;
      int n1 = norm_forward(s_.N, s_.C, k.norm1, nk);
      k.res = attention_forward(*l[0], *l[1], k.attn);
      if (s_.keep) std::swap(n1, k.n1);
      m_.release(n1);
      int n2 = norm_forward(s_.N, s_.C, k.norm2, nk);
      const int out = mlp_forward(*l[2], *l[3], k.mlp_h, k.mlp_a);
      if (s_.keep) std::swap(n2, k.n2);
      m_.release(n2);
      return out;
    }
    k.res = attention_forward(*l[0], *l[1], k.attn);
    k.h = norm_forward(s_.N, s_.C, k.norm1, Kind::kActivation);
    k.res2 = mlp_forward(*l[2], *l[3], k.mlp_h, k.mlp_a);
    return norm_forward(s_.N, s_.C, k.norm2, Kind::kActivation);
  }

  // A pre-LN norm's output in backward: the kept one (handed over), or recomputed.
  int norm_output(int& kept) {
    if (kept < 0) return norm_recompute(s_.N, s_.C);
    return std::exchange(kept, -1);
  }

  int block_backward(nn::TransformerBlock& b, BlockKept& k) {
    const int64_t NC = s_.N * s_.C;
    const std::vector<nn::Linear*> l = b.linears();
    const int dx = m_.alloc(NC * s_.d, Kind::kTemporary);
    std::vector<int> grads;  // the block's local gradient buffers, freed when it returns
    if (s_.pre_ln) {
      grads.push_back(m_.alloc(NC * s_.d, Kind::kTemporary));  // dn2
      int n2 = norm_output(k.n2);
      mlp_backward(*l[2], *l[3], k.mlp_h, k.mlp_a);
      m_.release(n2);
      grads.push_back(m_.alloc(NC * s_.d, Kind::kTemporary));  // dres
      grads.push_back(m_.alloc(NC * s_.d, Kind::kTemporary));  // dn1
      int n1 = norm_output(k.n1);
      attention_backward(*l[0], *l[1], k.attn);
      m_.release(n1);
    } else {
      grads.push_back(m_.alloc(NC * s_.d, Kind::kTemporary));  // dres2
      grads.push_back(m_.alloc(NC * s_.d, Kind::kTemporary));  // dh
      mlp_backward(*l[2], *l[3], k.mlp_h, k.mlp_a);
      grads.push_back(m_.alloc(NC * s_.d, Kind::kTemporary));  // dres
      attention_backward(*l[0], *l[1], k.attn);
    }
    k.release(m_);
    m_.release_all(grads);
    return dx;
  }

  struct EmbedKept {
    std::vector<int> ids;  // sum_, types_in_, norm statistics
  };
  int embedding_forward(const nn::TransformerConfig& c, EmbedKept& k) {
    const bool fused = c.positions == nn::Positions::kLearned && c.position_offset == 0 &&
                       c.type_vocab == 0 && !c.embed_norm && c.embed_dim == c.hidden;
    if (fused) return m_.alloc(s_.N * s_.C * s_.d, Kind::kActivation);
    int e = m_.alloc(s_.N * s_.E * s_.d, Kind::kActivation);
    if (s_.E != s_.C) {  // OPT's projection in: sum_ keeps its input
      k.ids.push_back(e);
      e = linear_forward({s_.E, s_.C, nullptr}, Kind::kActivation);
    }
    if (c.type_vocab > 0) k.ids.push_back(m_.alloc(s_.N * 4, Kind::kActivation));
    if (c.embed_norm) {
      k.ids.push_back(e);
      e = norm_forward(s_.N, s_.C, k.ids, Kind::kActivation);
    }
    return e;
  }
  void embedding_backward(const nn::TransformerConfig& c, bool frozen, EmbedKept& k) {
    if (!frozen) {
      std::vector<int> t;
      if (c.embed_norm) t.push_back(m_.alloc(s_.N * s_.C * s_.d, Kind::kTemporary));
      if (s_.E != s_.C) t.push_back(m_.alloc(s_.N * s_.E * s_.d, Kind::kTemporary));
      m_.release_all(t);
    }
    m_.release_all(k.ids);
  }

  struct HeadKept {
    std::vector<int> ids;
    std::vector<int> transform_stats;  // masked LM: released inside backward
  };
  // TransformerHead::forward; returns the per-token losses.
  int head_forward(const nn::TransformerConfig& c, int x, HeadKept& k) {
    const int64_t N = s_.N;
    if (c.task == nn::Task::kSequenceClassification || c.task == nn::Task::kReward) {
      // The rows read (first tokens, scored positions) are copied out; the input is not kept.
      for (int i = 0; i < 3; ++i) k.ids.push_back(m_.alloc(s_.B * s_.C * s_.d, Kind::kActivation));
      return m_.alloc((c.task == nn::Task::kReward ? N : s_.B) * s_.acc, Kind::kBatch);
    }
    k.ids.push_back(m_.retain(x));  // x_
    int64_t width = s_.C;
    if (c.final_norm) k.ids.push_back(norm_forward(N, s_.C, k.ids, Kind::kActivation));
    if (s_.E != s_.C) {
      k.ids.push_back(linear_forward({s_.C, s_.E, nullptr}, Kind::kActivation));
      width = s_.E;
    }
    if (c.task == nn::Task::kMaskedLM) {  // dense, GELU, LayerNorm
      k.ids.push_back(linear_forward({width, s_.C, nullptr}, Kind::kActivation));
      k.ids.push_back(m_.alloc(N * s_.C * s_.d, Kind::kActivation));
      k.ids.push_back(norm_forward(N, s_.C, k.transform_stats, Kind::kActivation));
    }
    k.ids.push_back(m_.alloc(N * s_.Vp * s_.d, Kind::kActivation));  // logits_, then dlogits
    return m_.alloc(N * s_.acc, Kind::kBatch);
  }
  int head_backward(const nn::TransformerConfig& c, HeadKept& k) {
    const int64_t N = s_.N;
    std::vector<int> t;
    if (c.task == nn::Task::kSequenceClassification || c.task == nn::Task::kReward) {
      t.push_back(m_.alloc(s_.B * s_.C * s_.d, Kind::kTemporary));
      const int dx = m_.alloc(N * s_.C * s_.d, Kind::kTemporary);
      m_.release_all(t);
      m_.release_all(k.ids);
      return dx;
    }
    const int64_t features = c.task == nn::Task::kMaskedLM ? s_.C : s_.E;
    int dh = m_.alloc(N * features * s_.d, Kind::kTemporary);
    if (c.task == nn::Task::kMaskedLM) {  // transform: norm, GELU, dense, walking back
      int dact = m_.alloc(N * s_.C * s_.d, Kind::kTemporary);
      m_.release_all(k.transform_stats);
      int dpre = m_.alloc(N * s_.C * s_.d, Kind::kTemporary);
      int din = m_.alloc(N * s_.E * s_.d, Kind::kTemporary);
      m_.release(dh);
      dh = din;
      m_.release(dpre);
      m_.release(dact);
    }
    if (s_.E != s_.C) {  // the projection out
      int din = m_.alloc(N * s_.C * s_.d, Kind::kTemporary);
      m_.release(dh);
      dh = din;
    }
    const int dx = c.final_norm ? m_.alloc(N * s_.C * s_.d, Kind::kTemporary) : m_.retain(dh);
    m_.release_all(k.ids);
    m_.release(dh);
    return dx;
  }

 private:
  void release_saved_u(const std::vector<nn::LoraAdapter>* adapters) {
    auto it = saved_u_.find(adapters);
    if (it == saved_u_.end()) return;
    m_.release_all(it->second);
    saved_u_.erase(it);
  }

  Timeline& m_;
  const Dims& s_;
  // Each Linear's kept u per adapter group (Linear::saved_u_), by its adapter list.
  std::map<const std::vector<nn::LoraAdapter>*, std::vector<int>> saved_u_;
};

// The fused attention backward's scratch, freed before it returns: the own kernels' dvec, or
// cuDNN's row sums (the same B NH T f32) with, for the deterministic backward, cuDNN's dP
// workspace (2 bytes per score, its rows padded to 64 and columns to 128 as cuDNN 9.19 sizes it,
// used while within ZT_ATTENTION_WORKSPACE_MB, over chunks of the batch past it) or, for the
// atomic one, the f32 dQ accumulator.
// cuDNN runs where it is installed here (where `zt estimate` runs is where it answers for).
// Grouped-query heads (KV < NH) on the own kernels: the expanded q/k/v and its gradient
// (gqa_attention_backward's fallback, two B T 3 NH HS 16-bit tensors); cuDNN reads the kv heads
// in place and keeps its per-head gradients virtual.
int64_t flash_backward_scratch(int64_t B, int64_t NH, int64_t KV, int64_t T, int64_t HS) {
  const int64_t rows = B * NH * T * 4;
  const int64_t expanded = KV != NH ? 2 * B * T * 3 * NH * HS * 2 : 0;
  if (!kernels::cudnn_available() ||
      kernels::attention_backend() == kernels::AttentionBackend::kOwn) {
    return rows + expanded;
  }
  if (!kernels::attention_deterministic()) return rows + B * NH * T * HS * 4;
  auto up = [](int64_t x, int64_t m) { return (x + m - 1) / m * m; };
  auto ws = [&](int64_t b) { return b * NH * up(T, 64) * up(T, 128) * 2 + 256; };
  // Past the limit, cuDNN runs over chunks of the batch (the largest divisor of B within it;
  // the row sums are then the chunk's), and the own kernels where one sequence is past it.
  int64_t chunk = B;
  while (chunk > 1 && (ws(chunk) > kernels::attention_workspace_limit() || B % chunk != 0)) {
    --chunk;
  }
  if (ws(chunk) > kernels::attention_workspace_limit() &&
      kernels::attention_backend() == kernels::AttentionBackend::kAuto) {
    return rows + expanded;  // the own kernels run it
  }
  return rows / B * chunk + ws(chunk);
}

// The fused attention runs where nn::want_flash says it would on a GPU (a CPU-only build of zt
// estimate must still answer for a GPU, so the rule is restated: CUDA, 16-bit, head size 64 or
// 128, no padding mask, ZT_FLASH_ATTENTION not 0). BERT's tasks (masked LM, classification)
// always pass a padding mask, so BERT is estimated on the unfused path.
bool flash_expected(const nn::TransformerConfig& c, DType compute, bool cuda) {
  const char* v = std::getenv("ZT_FLASH_ATTENTION");
  const bool enabled = v == nullptr || std::string_view(v) != "0";
  return enabled && cuda && (compute == DType::bf16 || compute == DType::f16) &&
         (c.head_dim == 64 || c.head_dim == 128) && c.model_type != "bert";
}

// What the allocator's rounding adds to the model-state tensors predict_state_bytes sums (one
// tensor per kind and unit, optimizer_states tensors of optimizer state; stage 1 keeps a full
// and an own-chunk gradient).
int64_t state_rounding(const Timeline& m, const std::vector<int64_t>& numels,
                       const std::vector<bool>& frozen, const zero::ZeroOptions& o, int world) {
  int64_t extra = 0;
  auto add = [&](int64_t bytes) {
    if (bytes > 0) extra += m.rounded(bytes) - bytes;
  };
  const auto acc = static_cast<int64_t>(dtype_size(kernels::accum_dtype(o.compute_dtype)));
  for (size_t i = 0; i < numels.size(); ++i) {
    const zero::ModelStateBytes b = zero::predict_state_bytes({numels[i]}, o, world, {frozen[i]});
    const zero::UnitLayout l = zero::unit_layout(numels[i], world, 0, o);
    add(b.params);
    if (!frozen[i]) {
      if (o.stage <= 1) add(l.padded * acc);
      if (o.stage >= 1) add(l.shard * 4);
    }
    add(b.master);
    for (int k = 0; k < o.optimizer_states; ++k) add(b.optimizer / std::max(1, o.optimizer_states));
  }
  return extra;
}

}  // namespace

MemoryPrediction predict_memory(nn::Transformer& model, const DeepSpeedConfig& config,
                                EstimateDevice device, int world, const TrainShape& shape) {
  const nn::TransformerConfig& c = model.transformer_config();
  const zero::ZeroOptions zo = estimate_zero_options(config, device);
  const bool cuda = device == EstimateDevice::kCuda;
  const bool ckpt = shape.checkpointing == Checkpointing::kOn;
  bool cpu_checkpointing = false;
  if (auto it = config.blocks.find("activation_checkpointing");
      it != config.blocks.end() && it->is_object()) {
    cpu_checkpointing = it->value("cpu_checkpointing", false);
  }
  // Model::forward moves the kept block inputs to the host only from a GPU.
  const bool to_host = ckpt && cpu_checkpointing && cuda;
  Dims s{};
  s.B = shape.micro_batch;
  s.T = shape.seq_len;
  s.N = s.B * s.T;
  s.C = c.hidden;
  s.E = c.embed_dim;
  s.NH = c.n_head;
  s.KV = c.n_kv_head;
  s.HS = c.head_dim;
  s.A = s.NH * s.HS;
  s.QKV = (s.NH + 2 * s.KV) * s.HS;
  s.F = c.inner;
  s.U = c.gated == nn::Gated::kYes ? 2 * s.F : s.F;
  s.Vp = c.padded_vocab_size;
  s.d = static_cast<int64_t>(dtype_size(zo.compute_dtype));
  s.acc = static_cast<int64_t>(dtype_size(kernels::accum_dtype(zo.compute_dtype)));
  s.cuda = cuda;
  s.keep = shape.keep_activations;
  s.flash = flash_expected(c, zo.compute_dtype, cuda);
  s.expanded = c.positions == nn::Positions::kRotary || s.KV != s.NH;
  s.pre_ln = c.placement == nn::NormPlacement::kPre;
  s.layernorm = c.norm == nn::NormKind::kLayerNorm;

  MemoryPrediction p;
  p.flash = s.flash;
  auto& units = model.units();
  const int n = static_cast<int>(units.size());
  std::vector<int64_t> numels;
  std::vector<bool> frozen;
  std::vector<ZeroSim::Unit> zunits;
  int64_t largest_shard = 0;
  for (auto& u : units) {
    numels.push_back(u->flat_numel());
    frozen.push_back(u->frozen());
    const zero::UnitLayout l = zero::unit_layout(u->flat_numel(), world, 0, zo);
    zunits.push_back({.padded = l.padded,
                      .shard = l.shard,
                      .persistent = l.persistent,
                      .trainable = !u->frozen(),
                      .passive = u->passive(),
                      .extras = u->extra_units()});
    if (!u->frozen()) largest_shard = std::max(largest_shard, l.shard);
  }
  p.states = zero::predict_state_bytes(numels, zo, world, frozen);

  // Everything alive before the step: model states, rotary tables (the host's on the CPU, the
  // device's copies on a GPU), the cached position ids of unfused learned positions, and the
  // engine's overflow flag and norm accumulator.
  Timeline probe(device, 0);
  p.state_rounding = state_rounding(probe, numels, frozen, zo, world);
  if (c.positions == nn::Positions::kRotary) {
    p.model_buffers += 2 * probe.rounded(c.max_positions * (c.head_dim / 2) * 4);
  }
  const bool fused_embedding = c.positions == nn::Positions::kLearned && c.position_offset == 0 &&
                               c.type_vocab == 0 && !c.embed_norm && c.embed_dim == c.hidden;
  if (c.positions == nn::Positions::kLearned && !fused_embedding) {
    p.model_buffers += probe.rounded(s.N * 4);
  }
  p.model_buffers += probe.rounded(4) + probe.rounded(8);

  Timeline m(device, p.states.total() + p.state_rounding + p.model_buffers);
  ZeroSim zs(m, zo, zunits);
  Walk w(m, s);
  auto label = [&](int u) {
    if (dynamic_cast<nn::TransformerEmbedding*>(units[u].get()) != nullptr) {
      return std::string("the embedding");
    }
    if (dynamic_cast<nn::TransformerHead*>(units[u].get()) != nullptr)
      return std::string("the head");
    return fmt::format("block {}", u - 1);
  };

  // The batch: tokens (kept by the embedding until its backward) and targets (by the engine).
  int tokens = m.alloc(s.N * 4, Kind::kBatch);
  int targets = m.alloc(s.N * 4, Kind::kBatch);

  // ---- Model::forward
  std::vector<Walk::BlockKept> blocks(static_cast<size_t>(n));
  std::vector<int> ckpt_in(static_cast<size_t>(n), -1);
  Walk::EmbedKept ek;
  Walk::HeadKept hk;
  int x = -1;
  for (int u = 0; u < n; ++u) {
    if (units[u]->passive()) continue;
    m.set_where("forward: " + label(u));
    zs.before_forward(u);
    int in = x;
    auto* block = dynamic_cast<nn::TransformerBlock*>(units[u].get());
    if (block != nullptr) {
      x = w.block_forward(*block, in, blocks[u]);
      if (ckpt) {  // release_activations; the input is kept (on the host: no device memory)
        blocks[u].release(m);
        w.release_saved_u(*block);
        if (!to_host) ckpt_in[u] = m.retain(in);
      }
    } else if (dynamic_cast<nn::TransformerEmbedding*>(units[u].get()) != nullptr) {
      x = w.embedding_forward(c, ek);
    } else {
      x = w.head_forward(c, in, hk);
    }
    m.release(in);
    zs.after_forward(u);
  }
  m.release(x);  // the per-token losses, read by Engine::forward

  // ---- Model::backward
  int d = -1;
  for (int k = n - 1; k >= 0; --k) {
    if (units[k]->passive()) continue;
    m.set_where("backward: " + label(k));
    zs.before_backward(k);
    auto* block = dynamic_cast<nn::TransformerBlock*>(units[k].get());
    int nd = -1;
    if (block != nullptr) {
      if (ckpt) {  // rerun the block's forward on its kept input
        int in = to_host ? m.alloc(s.N * s.C * s.d, Kind::kActivation) : ckpt_in[k];
        ckpt_in[k] = -1;
        int out = w.block_forward(*block, in, blocks[k]);
        m.release(out);
        m.release(in);
      }
      nd = w.block_backward(*block, blocks[k]);
    } else if (dynamic_cast<nn::TransformerEmbedding*>(units[k].get()) != nullptr) {
      w.embedding_backward(c, units[k]->frozen(), ek);
    } else {
      nd = w.head_backward(c, hk);
    }
    m.release(d);
    d = nd;
    zs.after_backward(k);
  }
  m.set_where("backward: the last gradient bucket");
  zs.finish_pass();
  m.release(d);

  // ---- the step: stages 1-3 on several ranks all-gather each persistent unit's updated chunk
  // from a copy (publish_params); the optimizer itself allocates nothing.
  m.set_where("step");
  if (zo.stage >= 1 && world > 1) m.touch(largest_shard * s.d);
  m.release(tokens);
  m.release(targets);

  p.peak_allocated = m.peak();
  p.at_peak = m.parts();
  p.peak_at = m.peak_at();
  p.workspace = cuda ? int64_t{32} << 20 : 0;  // kernels/cuda/gemm.cc: one per stream with GEMMs
  p.host_state = p.states.host_master + p.states.host_optimizer + p.states.host_params;
  if (zero::offloaded(zo)) {  // OptimizerOffload's two page-locked slots of the largest piece
    const int64_t piece = std::min(zo.offload_piece_elements, largest_shard);
    p.host_staging = 2 * piece * (4 + (zo.compute_dtype != DType::f32 ? s.d : 0));
    if (zo.optimizer_placement == zero::OptimizerPlacement::kNvme) {
      // OptimizerSwap: three slots of every state block of the piece, and a one-block bounce.
      const int64_t block = aio::align_up(piece * 4);
      p.host_staging += (3 * (1 + zo.optimizer_states) + 1) * block;
    }
    int64_t largest_param_block = 0;
    for (const auto& u : zunits) {
      const zero::UnitLayout l{.padded = u.padded, .shard = u.shard, .persistent = u.persistent};
      if (zo.param_placement == zero::ParamPlacement::kNvme && zero::shard_offloaded(zo, l)) {
        largest_param_block = std::max(largest_param_block, aio::align_up(u.shard * s.d));
      }
    }
    if (largest_param_block > 0) {
      // The parameter file's staging ring (buffer_count) and the step's two aligned outputs.
      p.host_staging +=
          std::max(2, zo.param_buffer_count) * largest_param_block + 2 * aio::align_up(piece * s.d);
    }
  }
  if (to_host) p.host_checkpoints = c.n_layer * s.N * s.C * s.d;
  return p;
}

int64_t largest_micro_batch(nn::Transformer& model, const DeepSpeedConfig& config,
                            EstimateDevice device, int world, int64_t seq_len,
                            Checkpointing checkpointing, int64_t device_bytes,
                            bool keep_activations) {
  auto fits = [&](int64_t b) {
    const MemoryPrediction p =
        predict_memory(model, config, device, world, {b, seq_len, checkpointing, keep_activations});
    return p.device_total() + (device == EstimateDevice::kCuda ? kCudaReserveBytes : 0) <=
           device_bytes;
  };
  if (!fits(1)) return 0;
  // The peak grows with the batch: double, then bisect.
  int64_t lo = 1, hi = 2;
  while (hi <= (int64_t{1} << 24) && fits(hi)) {
    lo = hi;
    hi *= 2;
  }
  if (hi > (int64_t{1} << 24)) return lo;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace zt::tools
