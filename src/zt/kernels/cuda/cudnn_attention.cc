// Attention, causal or bidirectional, through cuDNN's fused flash-attention engines (the kernels
// PyTorch's cuDNN SDPA backend runs), built with cuDNN's graph (backend) API. The operation graphs
// below are the ones cuDNN's fused engines recognise: scores = Q K^T * scale, the causal mask (when
// causal) as a generated row/column index comparison and a select of -inf, the softmax with its
// statistics (max + log sum exp, the same lse ZeroTrain's own kernels keep, so either backward can
// follow either forward), and P V. The backward is the "dP workspace" form, in which dQ is written
// by one matmul rather than accumulated with atomics: cuDNN's deterministic algorithm, and engines
// whose numerical notes say "nondeterministic" are skipped. Q, K, V, O and their gradients are read
// and written in place in ZeroTrain's packed layouts (qkv (B,T,(NH+2KV)HS), out (B,T,C)) through
// strides. With grouped-query heads (KV < NH) the forward reads the KV heads directly (each query
// head's matmul with its group's k and v), and the backward forms dK and dV per query head
// (virtual) and sums each group with a reduction, as cuDNN's frontend builds it.
//
// Plans are built once per shape (cuDNN may compile its kernel at run time: the first step pays
// that) and cached per thread and device; a shape cuDNN declines is remembered, and the caller
// uses ZeroTrain's own kernels for it.
#include "zt/kernels/cuda/cudnn_attention.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <tuple>
#include <utility>

#include "zt/core/assert.h"
#include "zt/core/cuda/cuda_check.h"
#include "zt/core/log.h"
#include "zt/kernels/cuda/cudnn_api.h"

namespace zt::kernels::cuda {
namespace {

using cudnn::Desc;
using cudnn::execute;
using cudnn::Plan;

// Unique ids of the graph's real tensors (the variant pack's keys).
enum Uid : int64_t {
  kQ = 1,
  kK = 2,
  kV = 3,
  kO = 4,
  kStats = 5,
  kDO = 6,
  kDQ = 7,
  kDK = 8,
  kDV = 9,
  kScale = 10,
  kNegInf = 11,
  kOne = 12,
  kSoftmaxSum = 13,
  kDQAccum = 14,
  kFirstVirtual = 100,
};

struct Shape4 {
  std::vector<int64_t> dim, stride;
};

// The graph under construction: tensor and operation descriptors, kept alive with the plan.
class Graph {
 public:
  explicit Graph(cudnnDataType_t io) : io_(io) {}

  const Desc& tensor(int64_t uid, cudnnDataType_t t, const Shape4& s, bool is_virtual,
                     bool by_value = false) {
    Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    d.set_dtype(CUDNN_ATTR_TENSOR_DATA_TYPE, t)
        .set_i64(CUDNN_ATTR_TENSOR_DIMENSIONS, s.dim)
        .set_i64(CUDNN_ATTR_TENSOR_STRIDES, s.stride)
        .set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, {uid})
        .set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, {16})
        .set_bool(CUDNN_ATTR_TENSOR_IS_VIRTUAL, is_virtual);
    if (by_value) d.set_bool(CUDNN_ATTR_TENSOR_IS_BY_VALUE, true);
    d.finalize("tensor descriptor");
    return keep(std::move(d));
  }
  const Desc& real(int64_t uid, const Shape4& s) { return tensor(uid, io_, s, false); }
  const Desc& real_f32(int64_t uid, const Shape4& s) {
    return tensor(uid, CUDNN_DATA_FLOAT, s, false);
  }
  const Desc& scalar(int64_t uid) {
    return tensor(uid, CUDNN_DATA_FLOAT, Shape4{{1, 1, 1, 1}, {1, 1, 1, 1}}, false, true);
  }
  const Desc& virt(const Shape4& s, cudnnDataType_t t = CUDNN_DATA_FLOAT) {
    return tensor(next_virtual_++, t, s, true);
  }

  void matmul(const Desc& a, const Desc& b, const Desc& c) {
    Desc m(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    m.set_dtype(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT).finalize("matmul descriptor");
    Desc op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c)
        .set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, m)
        .finalize("matmul operation");
    keep(std::move(m));
    ops_.push_back(&keep(std::move(op)));
  }

  // y = mode(x[, b[, t]]); `axis` for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, const Desc& x, const Desc* b, const Desc* t,
                 const Desc& y, cudnnDataType_t prec = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
        .set_dtype(CUDNN_ATTR_POINTWISE_MATH_PREC, prec);
    if (axis >= 0) pw.set_i64(CUDNN_ATTR_POINTWISE_AXIS, {axis});
    pw.finalize("pointwise descriptor");
    Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
        .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b != nullptr) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
    if (t != nullptr) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t);
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y).finalize("pointwise operation");
    keep(std::move(pw));
    ops_.push_back(&keep(std::move(op)));
  }

  void reduction(cudnnReduceTensorOp_t mode, const Desc& x, const Desc& y) {
    Desc r(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode)
        .set_dtype(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT)
        .finalize("reduction descriptor");
    Desc op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x)
        .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y)
        .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r)
        .finalize("reduction operation");
    keep(std::move(r));
    ops_.push_back(&keep(std::move(op)));
  }

  void reshape(const Desc& x, const Desc& y) {
    Desc op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x)
        .set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y)
        .finalize("reshape operation");
    ops_.push_back(&keep(std::move(op)));
  }

  // The causal mask on scores s: keep s where row >= column, else -inf (the scalar kNegInf).
  const Desc& causal(const Desc& s, const Shape4& sh) {
    const Desc& neg_inf = scalar(kNegInf);
    const Desc& row = virt(sh, CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, nullptr, row, CUDNN_DATA_FLOAT, 2);
    const Desc& col = virt(sh, CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, nullptr, col, CUDNN_DATA_FLOAT, 3);
    const Desc& keep_it = virt(sh, CUDNN_DATA_BOOLEAN);
    pointwise(CUDNN_POINTWISE_CMP_GE, row, &col, nullptr, keep_it, CUDNN_DATA_BOOLEAN);
    const Desc& out = virt(sh);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, &neg_inf, &keep_it, out);
    return out;
  }

  std::vector<std::unique_ptr<Desc>> take() { return std::move(descs_); }
  const std::vector<const Desc*>& ops() const { return ops_; }
  cudnnDataType_t io() const { return io_; }

 private:
  const Desc& keep(Desc d) {
    descs_.push_back(std::make_unique<Desc>(std::move(d)));
    return *descs_.back();
  }

  cudnnDataType_t io_;
  int64_t next_virtual_ = kFirstVirtual;
  std::vector<std::unique_ptr<Desc>> descs_;
  std::vector<const Desc*> ops_;
};

struct Dims {
  int64_t B, NH, KV, T, HS;  // KV = NH: multi-head; KV < NH: grouped-query heads
  bool causal;
  int64_t C() const { return NH * HS; }
  int64_t W() const { return (NH + 2 * KV) * HS; }  // a token's packed q/k/v values
  bool gqa() const { return KV != NH; }
  const char* kind() const { return causal ? "causal" : "bidirectional"; }
  // q of the packed (B,T,(NH+2KV)HS) seen as (B, NH, T, HS).
  Shape4 q_bhsd() const { return {{B, NH, T, HS}, {T * W(), HS, W(), 1}}; }
  // k or v seen as (B, KV, T, HS).
  Shape4 kv_bhsd() const { return {{B, KV, T, HS}, {T * W(), HS, W(), 1}}; }
  // k or v seen as (B, KV, HS, T): the transposed operand.
  Shape4 kv_bhds() const { return {{B, KV, HS, T}, {T * W(), HS, 1, W()}}; }
  // A gradient of k or v for every query head, (B, NH, T, HS) contiguous (virtual), that the
  // grouped-query backward sums over each kv head's group.
  Shape4 full_head() const { return {{B, NH, T, HS}, {NH * T * HS, T * HS, HS, 1}}; }
  // out (B,T,C) as (B, NH, T, HS).
  Shape4 out_bhsd() const { return {{B, NH, T, HS}, {T * C(), HS, C(), 1}}; }
  Shape4 scores() const { return {{B, NH, T, T}, {NH * T * T, T * T, T, 1}}; }
  Shape4 scores_t() const { return {{B, NH, T, T}, {NH * T * T, T * T, 1, T}}; }
  Shape4 rows() const { return {{B, NH, T, 1}, {NH * T, T, 1, 1}}; }
};

void build_forward(Graph& g, const Dims& d) {
  const Desc& q = g.real(kQ, d.q_bhsd());
  const Desc& kt = g.real(kK, d.kv_bhds());
  const Desc& v = g.real(kV, d.kv_bhsd());
  const Desc& o = g.real(kO, d.out_bhsd());
  const Desc& stats = g.real_f32(kStats, d.rows());
  const Desc& scale = g.scalar(kScale);
  const Shape4 ss = d.scores(), rs = d.rows();

  const Desc& s = g.virt(ss);
  g.matmul(q, kt, s);
  const Desc& s_scaled = g.virt(ss);
  g.pointwise(CUDNN_POINTWISE_MUL, s, &scale, nullptr, s_scaled);
  const Desc& s_masked = d.causal ? g.causal(s_scaled, ss) : s_scaled;
  // softmax, keeping max + log(sum) as the statistics
  const Desc& m = g.virt(rs);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, s_masked, m);
  const Desc& centred = g.virt(ss);
  g.pointwise(CUDNN_POINTWISE_SUB, s_masked, &m, nullptr, centred);
  const Desc& e = g.virt(ss);
  g.pointwise(CUDNN_POINTWISE_EXP, centred, nullptr, nullptr, e);
  const Desc& l = g.virt(rs);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, l);
  const Desc& log_l = g.virt(rs);
  g.pointwise(CUDNN_POINTWISE_LOG, l, nullptr, nullptr, log_l);
  g.pointwise(CUDNN_POINTWISE_ADD, m, &log_l, nullptr, stats);
  const Desc& p = g.virt(ss, g.io());
  g.pointwise(CUDNN_POINTWISE_DIV, e, &l, nullptr, p);
  g.matmul(p, v, o);
}

void build_backward(Graph& g, const Dims& d, bool deterministic) {
  const Desc& q = g.real(kQ, d.q_bhsd());
  const Desc& kt = g.real(kK, d.kv_bhds());
  const Desc& vt = g.real(kV, d.kv_bhds());
  const Desc& o = g.real(kO, d.out_bhsd());
  const Desc& stats = g.real_f32(kStats, d.rows());
  const Desc& dout = g.real(kDO, d.out_bhsd());
  const Desc& dq = g.real(kDQ, d.q_bhsd());
  const Desc& dk = g.real(kDK, d.kv_bhsd());
  const Desc& dv = g.real(kDV, d.kv_bhsd());
  // Grouped-query heads: dK and dV per query head, then summed over each kv head's group by a
  // reduction. As cudnn-frontend builds it for dense layouts, the per-head tensors are virtual
  // and of the I/O type (real f32 buffers here gave wrong dK/dV on cuDNN 9 / H100).
  const Desc* dk_full = d.gqa() ? &g.virt(d.full_head(), g.io()) : nullptr;
  const Desc* dv_full = d.gqa() ? &g.virt(d.full_head(), g.io()) : nullptr;
  const Desc& scale = g.scalar(kScale);
  const Desc& one = g.scalar(kOne);
  const Desc& softmax_sum = g.real_f32(kSoftmaxSum, d.rows());
  const Shape4 ss = d.scores(), rs = d.rows();

  // softmax_sum = rowsum(dO * O)
  const Desc& dout_o =
      g.virt(Shape4{{d.B, d.NH, d.T, d.HS}, {d.NH * d.T * d.HS, d.T * d.HS, d.NH * d.HS, 1}});
  g.pointwise(CUDNN_POINTWISE_MUL, dout, &o, nullptr, dout_o);
  const Desc& rowsum = g.virt(rs);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, dout_o, rowsum);
  g.pointwise(CUDNN_POINTWISE_MUL, rowsum, &one, nullptr, softmax_sum);
  // P = exp(Q K^T * scale - stats), masked
  const Desc& s = g.virt(ss);
  g.matmul(q, kt, s);
  const Desc& s_scaled = g.virt(ss);
  g.pointwise(CUDNN_POINTWISE_MUL, s, &scale, nullptr, s_scaled);
  const Desc& s_centred = g.virt(ss);
  g.pointwise(CUDNN_POINTWISE_SUB, s_scaled, &stats, nullptr, s_centred);
  const Desc& s_masked = d.causal ? g.causal(s_centred, ss) : s_centred;
  const Desc& p = g.virt(ss);
  g.pointwise(CUDNN_POINTWISE_EXP, s_masked, nullptr, nullptr, p);
  // dV = P^T dO
  const Desc& p_t = g.virt(d.scores_t(), g.io());
  g.reshape(p, p_t);
  if (dv_full != nullptr) {
    g.matmul(p_t, dout, *dv_full);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, *dv_full, dv);
  } else {
    g.matmul(p_t, dout, dv);
  }
  // dS = P * (dO V^T - softmax_sum) * scale
  const Desc& dp = g.virt(ss);
  g.matmul(dout, vt, dp);
  const Desc& dp_centred = g.virt(ss);
  g.pointwise(CUDNN_POINTWISE_SUB, dp, &softmax_sum, nullptr, dp_centred);
  const Desc& ds_unscaled = g.virt(ss);
  g.pointwise(CUDNN_POINTWISE_MUL, dp_centred, &p, nullptr, ds_unscaled);
  const Desc& ds = g.virt(ss);
  g.pointwise(CUDNN_POINTWISE_MUL, ds_unscaled, &scale, nullptr, ds);
  // dK = dS^T Q
  const Desc& ds_t = g.virt(d.scores_t(), g.io());
  g.reshape(ds, ds_t);
  if (dk_full != nullptr) {
    g.matmul(ds_t, q, *dk_full);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, *dk_full, dk);
  } else {
    g.matmul(ds_t, q, dk);
  }
  const Desc& k = g.virt(d.kv_bhsd(), g.io());
  g.reshape(kt, k);
  if (deterministic) {
    // dQ = dS K, written by the matmul itself over the stored dP (cuDNN's dP workspace)
    g.matmul(ds, k, dq);
  } else {
    // dQ accumulated in f32 with atomics (cuDNN's default on Hopper: no (T, T) workspace)
    const Desc& dq_accum = g.real_f32(
        kDQAccum, Shape4{{d.B, d.NH, d.T, d.HS}, {d.NH * d.T * d.HS, d.T * d.HS, d.HS, 1}});
    g.matmul(ds, k, dq_accum);
    g.pointwise(CUDNN_POINTWISE_IDENTITY, dq_accum, nullptr, nullptr, dq);
  }
}

enum class Pass : int { kForward, kBackward, kBackwardAtomic };

const char* pass_name(Pass p) {
  return p == Pass::kForward ? "forward" : p == Pass::kBackward ? "backward" : "atomic backward";
}

// The execution plan of the first engine cuDNN's heuristics rank for the graph (for the
// deterministic backward: the first whose numerical notes do not say nondeterministic). Throws
// cudnn::Error when none can run it.
std::unique_ptr<Plan> make_plan(Pass pass, const Dims& d, DType dt) {
  Graph g(cudnn::data_type(dt));
  if (pass == Pass::kForward) {
    build_forward(g, d);
  } else {
    build_backward(g, d, pass == Pass::kBackward);
  }
  const std::vector<const Desc*> ops = g.ops();
  return cudnn::make_plan(ops, g.take(), [&](const Desc& engine) -> const char* {
    return pass == Pass::kBackward && cudnn::has_note(engine, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)
               ? "only nondeterministic engines"
               : nullptr;
  });
}

using Key = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int>;

// The plan for a shape on the current device, or nullptr when cuDNN cannot run it (said once).
Plan* plan_for(Pass pass, const Dims& d, DType dt) {
  int dev = 0;
  ZT_CUDA_CHECK(cudaGetDevice(&dev));
  thread_local std::map<Key, std::unique_ptr<Plan>> plans;
  const Key key{
      static_cast<int>(pass), static_cast<int>(dt), d.B, d.NH, d.KV, d.T, d.HS, d.causal, dev};
  auto it = plans.find(key);
  if (it != plans.end()) return it->second.get();
  std::unique_ptr<Plan> p;
  try {
    p = make_plan(pass, d, dt);
    ZT_LOG_DEBUG(
        "cuDNN attention {} ({}): B {} heads {} kv heads {} T {} head size {}: engine {}, "
        "workspace {} B",
        pass_name(pass), d.kind(), d.B, d.NH, d.KV, d.T, d.HS, p->engine, p->workspace);
  } catch (const cudnn::Error& e) {
    ZT_LOG_INFO(
        "cuDNN's fused attention cannot run the {} ({}) of B {} heads {} kv heads {} T {} head "
        "size {} ({}); ZeroTrain's own attention kernels run it",
        pass_name(pass), d.kind(), d.B, d.NH, d.KV, d.T, d.HS, e.what());
  }
  Plan* raw = p.get();
  plans.emplace(key, std::move(p));
  return raw;
}

// Whether to try cuDNN at all; throws (through ZT_ASSERT) when it is required and missing.
bool try_cudnn() {
  const AttentionBackend b = attention_backend();
  if (b == AttentionBackend::kOwn) return false;
  if (cudnn::api() == nullptr) {
    ZT_ASSERT(b != AttentionBackend::kCudnn,
              "ZT_ATTENTION_BACKEND=cudnn, but cuDNN cannot be loaded: {}", cudnn::load_error());
    static const bool said = (ZT_LOG_INFO("cuDNN is not available ({}); attention runs on "
                                          "ZeroTrain's own kernels",
                                          cudnn::load_error()),
                              true);
    (void)said;
    return false;
  }
  return true;
}

Plan* required(Plan* p, const char* what) {
  ZT_ASSERT(p != nullptr || attention_backend() != AttentionBackend::kCudnn,
            "ZT_ATTENTION_BACKEND=cudnn, but cuDNN cannot run this attention {} (see the log "
            "line above)",
            what);
  return p;
}

// q, k and v inside a packed (B,T,(NH+2KV)HS) tensor (qkv or dqkv), and the graph's scalars: the
// values the variant pack points at while the call runs.
struct Operands {
  // first: the first sequence of a chunk of d.B sequences (0: the whole batch).
  Operands(const Tensor& packed, const Dims& d, int64_t first = 0) : causal(d.causal) {
    auto* base = static_cast<char*>(packed.data()) +
                 first * d.T * d.W() * static_cast<int64_t>(dtype_size(packed.dtype()));
    const int64_t head = d.HS * dtype_size(packed.dtype());
    q = base;
    k = base + d.NH * head;
    v = base + (d.NH + d.KV) * head;
    scale = 1.0f / std::sqrt(static_cast<float>(d.HS));
  }
  // -inf for the causal mask; none (left out of the variant pack) when bidirectional.
  void* neg_inf() { return causal ? &minus_inf : nullptr; }

  void* q;
  void* k;
  void* v;
  float scale;
  bool causal;
  float minus_inf = -std::numeric_limits<float>::infinity();
};

}  // namespace

bool cudnn_loaded() {
  return cudnn::api() != nullptr;
}

bool cudnn_attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int64_t B, int64_t NH,
                             int64_t KV, int64_t T, int64_t HS, bool causal, const Stream& s) {
  if (!try_cudnn()) return false;
  const Dims d{B, NH, KV, T, HS, causal};
  Plan* p = required(plan_for(Pass::kForward, d, qkv.dtype()), "forward");
  if (p == nullptr) return false;
  Operands x(qkv, d);
  execute(*p,
          {{kQ, x.q},
           {kK, x.k},
           {kV, x.v},
           {kO, out.data()},
           {kStats, lse.data()},
           {kScale, &x.scale},
           {kNegInf, x.neg_inf()}},
          qkv.device(), s);
  return true;
}

namespace {

// The deterministic backward's dP workspace grows with the batch: the largest divisor of B whose
// chunk of sequences stays under the workspace limit, with its plan (chunk 0: none does, or cuDNN
// cannot run it). The sequences of a batch are independent, so running them chunk by chunk gives
// every gradient exactly as one call over the batch would.
std::pair<int64_t, Plan*> backward_chunk(const Dims& d, Plan* whole, DType dt) {
  const int64_t limit = attention_workspace_limit();
  if (whole->workspace <= limit) return {d.B, whole};
  const int64_t per_seq = std::max<int64_t>(1, whole->workspace / d.B);
  for (int64_t bc = std::min(d.B - 1, std::max<int64_t>(1, limit / per_seq)); bc >= 1; --bc) {
    if (d.B % bc != 0) continue;
    Dims c = d;
    c.B = bc;
    Plan* p = plan_for(Pass::kBackward, c, dt);
    if (p == nullptr) return {0, nullptr};
    if (p->workspace <= limit) return {bc, p};
  }
  return {0, nullptr};
}

}  // namespace

bool cudnn_attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, int64_t B, int64_t NH,
                              int64_t KV, int64_t T, int64_t HS, bool causal, const Stream& s) {
  if (!try_cudnn()) return false;
  const Dims d{B, NH, KV, T, HS, causal};
  const bool deterministic = attention_deterministic();
  Plan* p =
      required(plan_for(deterministic ? Pass::kBackward : Pass::kBackwardAtomic, d, qkv.dtype()),
               "backward");
  if (p == nullptr) return false;
  // The deterministic backward keeps dP, (B, heads, T, T) 16-bit values, in its workspace: past
  // the limit it runs over chunks of the batch, and where even one sequence is past it,
  // ZeroTrain's own (deterministic, workspace-free) kernels run it, unless cuDNN was required.
  int64_t chunk = B;
  if (deterministic && p->workspace > attention_workspace_limit()) {
    const int64_t whole = p->workspace;
    auto [bc, pc] = backward_chunk(d, p, qkv.dtype());
    thread_local std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, bool> said;
    const bool first = !said[{B, NH, T, HS}];
    said[{B, NH, T, HS}] = true;
    if (bc > 0) {
      chunk = bc;
      p = pc;
      if (first) {
        ZT_LOG_INFO(
            "cuDNN's deterministic attention backward would need {} MiB of workspace for B {} "
            "heads {} T {} (above ZT_ATTENTION_WORKSPACE_MB={}): it runs over {} chunks of {} "
            "sequences, {} MiB each",
            whole >> 20, B, NH, T, attention_workspace_limit() >> 20, B / bc, bc,
            p->workspace >> 20);
      }
    } else if (attention_backend() == AttentionBackend::kAuto) {
      if (first) {
        ZT_LOG_INFO(
            "cuDNN's deterministic attention backward would need {} MiB of workspace for B {} "
            "heads {} T {}, {} MiB for one sequence (above ZT_ATTENTION_WORKSPACE_MB={}); "
            "ZeroTrain's own kernels run it (ZT_ATTENTION_DETERMINISTIC=0 runs cuDNN's atomic "
            "backward without the workspace)",
            whole >> 20, B, NH, T, (whole / B) >> 20, attention_workspace_limit() >> 20);
      }
      return false;
    }
  }
  Tensor dq_accum;
  if (!deterministic) {
    dq_accum = Tensor::empty({B, NH, T, HS}, DType::f32, qkv.device(), s);
    // cuDNN zeroes its accumulator itself from 9.6 on.
    if (cudnn::api()->GetVersion() < 90600) {
      ZT_CUDA_CHECK(cudaMemsetAsync(dq_accum.data(), 0, dq_accum.nbytes(),
                                    static_cast<cudaStream_t>(s.handle())));
    }
  }
  float one = 1.0f;
  Tensor softmax_sum = Tensor::empty({chunk, NH, T}, DType::f32, qkv.device(), s);
  Dims dc = d;
  dc.B = chunk;
  const int64_t io = dtype_size(qkv.dtype());
  for (int64_t b0 = 0; b0 < B; b0 += chunk) {
    Operands x(qkv, dc, b0);
    Operands dx(dqkv, dc, b0);
    const int64_t o_off = b0 * T * d.C() * io;
    execute(*p,
            {{kQ, x.q},
             {kK, x.k},
             {kV, x.v},
             {kO, static_cast<char*>(out.data()) + o_off},
             {kStats, static_cast<float*>(lse.data()) + b0 * NH * T},
             {kDO, static_cast<char*>(dout.data()) + o_off},
             {kDQ, dx.q},
             {kDK, dx.k},
             {kDV, dx.v},
             {kScale, &x.scale},
             {kNegInf, x.neg_inf()},
             {kOne, &one},
             {kSoftmaxSum, softmax_sum.data()},
             {kDQAccum, deterministic ? nullptr : dq_accum.data()}},
            qkv.device(), s);
  }
  return true;
}

}  // namespace zt::kernels::cuda
