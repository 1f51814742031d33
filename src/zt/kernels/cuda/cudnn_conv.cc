// conv2d_forward / conv2d_backward on CUDA (contracts in kernels/op_table.inc): the convolution
// itself on cuDNN's engines, through its graph (backend) API - forward, data gradient and filter
// gradient, each a graph of one operation - and the bias on ZeroTrain's own kernels
// (kernels/cuda/pool.cu: conv_bias_add, conv_bias_grad).
//
// Numerics, as the rest of ZeroTrain's CUDA ops:
// - f32 convolutions run in f32 (engines whose numerical notes say "tensor core" - TF32 for f32
//   inputs - are skipped, as the GEMMs use CUBLAS_COMPUTE_32F); bf16/f16 ones accumulate in f32.
// - Engines that say "nondeterministic" (atomics in the filter gradient) are skipped: the same
//   step gives the same weights; so are FFT and Winograd engines (their transforms round far
//   more than a direct sum).
// - The filter gradient is written into an f32 scratch and added (+=) to the accum-dtype buffer;
//   for 16-bit inputs it reads f32 copies of the input and output gradient when cuDNN has no
//   engine that writes an f32 filter gradient from 16-bit operands.
// Plans are built once per shape, dtype, alignment and device and cached per thread; cuDNN must
// be loadable (libcudnn_graph.so.9): without it a GPU convolution stops with that reason.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "zt/core/assert.h"
#include "zt/core/cuda/cuda_check.h"
#include "zt/core/log.h"
#include "zt/kernels/cuda/cuda_ops.h"
#include "zt/kernels/cuda/cudnn_api.h"

namespace zt::kernels::cuda {

namespace {

using cudnn::Desc;
using cudnn::Plan;

enum Uid : int64_t { kX = 1, kW = 2, kY = 3 };
enum class Pass : int { kForward, kData, kFilter };

const char* pass_name(Pass p) {
  return p == Pass::kForward ? "forward" : p == Pass::kData ? "data gradient" : "filter gradient";
}

struct ConvShape {
  int64_t N, C, H, W, K, R, S, P, Q;
  Conv2dArgs a;
};

// The largest power of two up to 16 dividing every address (cuDNN's byte alignment attribute).
int64_t alignment_of(std::initializer_list<const void*> ptrs) {
  int64_t align = 16;
  for (const void* p : ptrs) {
    const auto v = reinterpret_cast<uintptr_t>(p);
    while (align > 1 && v % static_cast<uintptr_t>(align) != 0) align /= 2;
  }
  return align;
}

std::vector<int64_t> nchw_strides(int64_t C, int64_t H, int64_t W) {
  return {C * H * W, H * W, W, 1};
}

// ZT_CUDNN_CONV_REJECT_ENGINES: cuDNN's global engine indices to leave out (comma-separated; an
// index may be prefixed with "forward:", "data:" or "filter:" to leave it out of that pass
// only), and ZT_CUDNN_CONV_HEURISTICS=fallback: ask cuDNN's fallback list only. Escape hatches
// for an engine that misbehaves on a shape (one is left out already: see below).
std::vector<int64_t> rejected_engines(Pass pass) {
  std::vector<int64_t> out;
  // Engine 17's f32 filter gradient is wrong on AlexNet's second layer at batch 2 (x (2,64,4,4),
  // w (192,64,5,5), padding 2: off by up to 8% at the filter's corners; cuDNN 9.19 on an H200,
  // tests/gpu/conv2d_test.cc); engine 67, which heuristics rank next, is right.
  if (pass == Pass::kFilter) out.push_back(17);
  const char* v = std::getenv("ZT_CUDNN_CONV_REJECT_ENGINES");
  if (v == nullptr) return out;
  std::string list(v);
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t end = std::min(list.find(',', pos), list.size());
    std::string item = list.substr(pos, end - pos);
    pos = end + 1;
    const size_t colon = item.find(':');
    if (colon != std::string::npos) {
      const std::string which = item.substr(0, colon);
      item = item.substr(colon + 1);
      if ((which == "forward") != (pass == Pass::kForward) ||
          (which == "data") != (pass == Pass::kData) ||
          (which == "filter") != (pass == Pass::kFilter)) {
        continue;
      }
    }
    if (!item.empty()) out.push_back(std::strtoll(item.c_str(), nullptr, 10));
  }
  return out;
}

bool heuristics_fallback_only() {
  const char* v = std::getenv("ZT_CUDNN_CONV_HEURISTICS");
  return v != nullptr && std::string(v) == "fallback";
}

// The one-operation graph of `pass`: x (N,C,H,W) io, w (K,C,R,S) io (or the gradient's dtype for
// the filter pass), y (N,K,P,Q) io.
std::unique_ptr<Plan> make_plan(Pass pass, const ConvShape& c, cudnnDataType_t io,
                                cudnnDataType_t filter_grad, int64_t align) {
  std::vector<std::unique_ptr<Desc>> descs;
  auto keep = [&](Desc d) -> const Desc& {
    descs.push_back(std::make_unique<Desc>(std::move(d)));
    return *descs.back();
  };
  auto tensor = [&](int64_t uid, cudnnDataType_t t, std::vector<int64_t> dims) -> const Desc& {
    Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    d.set_dtype(CUDNN_ATTR_TENSOR_DATA_TYPE, t)
        .set_i64(CUDNN_ATTR_TENSOR_DIMENSIONS, dims)
        .set_i64(CUDNN_ATTR_TENSOR_STRIDES, nchw_strides(dims[1], dims[2], dims[3]))
        .set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, {uid})
        .set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, {align})
        .finalize("tensor descriptor");
    return keep(std::move(d));
  };
  const Desc& x = tensor(kX, io, {c.N, c.C, c.H, c.W});
  const Desc& w = tensor(kW, pass == Pass::kFilter ? filter_grad : io, {c.K, c.C, c.R, c.S});
  const Desc& y = tensor(kY, io, {c.N, c.K, c.P, c.Q});

  Desc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  conv.set_dtype(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_DATA_FLOAT)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode)
      .set_i64(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, {2})
      .set_i64(CUDNN_ATTR_CONVOLUTION_DILATIONS, {1, 1})
      .set_i64(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, {c.a.stride_h, c.a.stride_w})
      .set_i64(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, {c.a.pad_h, c.a.pad_w})
      .set_i64(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, {c.a.pad_h, c.a.pad_w})
      .finalize("convolution descriptor");
  const Desc& cd = keep(std::move(conv));

  // alpha 1, beta 0: every pass writes its output.
  const float alpha = 1.0f, beta = 0.0f;
  Desc op;
  if (pass == Pass::kForward) {
    op = Desc(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha)
        .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta)
        .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, cd)
        .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x)
        .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w)
        .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, y);
  } else if (pass == Pass::kData) {
    op = Desc(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha)
        .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &beta)
        .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, cd)
        .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, x)
        .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, w)
        .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, y);
  } else {
    op = Desc(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha)
        .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &beta)
        .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, cd)
        .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, x)
        .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, w)
        .set_desc(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, y);
  }
  op.finalize("convolution operation");
  const Desc& od = keep(std::move(op));
  const bool f32 = io == CUDNN_DATA_FLOAT;
  auto reject = [f32, pass](const Desc& engine) -> const char* {
    if (cudnn::has_note(engine, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)) {
      return "only nondeterministic engines";
    }
    // FFT and Winograd transforms round in their transformed domain (not the direct sum the
    // CPU reference computes; their error is far above f32's).
    for (cudnnBackendNumericalNote_t note :
         {CUDNN_NUMERICAL_NOTE_FFT, CUDNN_NUMERICAL_NOTE_WINOGRAD,
          CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4, CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6,
          CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13}) {
      if (cudnn::has_note(engine, note)) return "only FFT or Winograd engines";
    }
    if (f32 && (cudnn::has_note(engine, CUDNN_NUMERICAL_NOTE_TENSOR_CORE) ||
                cudnn::has_note(engine, CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) ||
                cudnn::has_note(engine, CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION))) {
      return "only engines below f32 precision (TF32, down-converted inputs) for f32";
    }
    for (int64_t e : rejected_engines(pass)) {
      if (cudnn::engine_index(engine) == e) return "only engines ZeroTrain leaves out";
    }
    return nullptr;
  };
  if (heuristics_fallback_only()) {
    return cudnn::make_plan({&od}, std::move(descs), reject, {CUDNN_HEUR_MODE_FALLBACK});
  }
  return cudnn::make_plan({&od}, std::move(descs), reject);
}

using Key = std::tuple<int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, int64_t, int64_t, int64_t, int64_t, int>;

// The cached plan, or nullptr when cuDNN cannot run it (the reason in `why`).
Plan* plan_for(Pass pass, const ConvShape& c, DType io, DType filter_grad, int64_t align,
               std::string* why) {
  int dev = 0;
  ZT_CUDA_CHECK(cudaGetDevice(&dev));
  thread_local std::map<Key, std::pair<std::unique_ptr<Plan>, std::string>> plans;
  const Key key{static_cast<int>(pass), static_cast<int>(io), static_cast<int>(filter_grad),
                c.N, c.C, c.H, c.W, c.K, c.R, c.S, c.a.stride_h, c.a.stride_w, c.a.pad_h,
                c.a.pad_w, align, dev};
  auto it = plans.find(key);
  if (it == plans.end()) {
    std::unique_ptr<Plan> p;
    std::string error;
    try {
      p = make_plan(pass, c, cudnn::data_type(io), cudnn::data_type(filter_grad), align);
      ZT_LOG_DEBUG("cuDNN convolution {} ({}): x ({},{},{},{}) w ({},{},{},{}): engine {}, "
                   "workspace {} B",
                   pass_name(pass), dtype_name(io), c.N, c.C, c.H, c.W, c.K, c.C, c.R, c.S,
                   p->engine, p->workspace);
    } catch (const cudnn::Error& e) {
      error = e.what();
    }
    it = plans.emplace(key, std::make_pair(std::move(p), std::move(error))).first;
  }
  if (why != nullptr) *why = it->second.second;
  return it->second.first.get();
}

void check_cuda(const Tensor& t, const char* op, const char* name) {
  ZT_ASSERT(t.defined() && t.device().is_cuda(), "{}: {} must be a defined CUDA tensor", op, name);
}

void require_cudnn(const char* op) {
  ZT_ASSERT(cudnn::api() != nullptr,
            "{}: convolutions on a GPU run on cuDNN 9, which cannot be loaded: {}", op,
            cudnn::load_error());
}

ConvShape shape_of(const Tensor& in, const Tensor& weight, const Tensor& out,
                   const Conv2dArgs& a, const char* op) {
  ZT_ASSERT(in.ndim() == 4 && weight.ndim() == 4 && out.ndim() == 4,
            "{}: in {}, weight {} and out {} must be 4-D (NCHW)", op, in.shape().str(),
            weight.shape().str(), out.shape().str());
  Result<Shape> expected = conv2d_out_shape(in.shape(), weight.shape(), a);
  ZT_ASSERT(expected.is_ok(), "{}: {}", op, expected.status().message());
  ZT_ASSERT(out.shape() == *expected, "{}: output {} must be {}", op, out.shape().str(),
            expected->str());
  return {in.size(0),     in.size(1),     in.size(2),  in.size(3), weight.size(0),
          weight.size(2), weight.size(3), out.size(2), out.size(3), a};
}

Plan& required_plan(Pass pass, const ConvShape& c, DType io, DType filter_grad, int64_t align,
                    const char* op) {
  std::string why;
  Plan* p = plan_for(pass, c, io, filter_grad, align, &why);
  ZT_ASSERT(p != nullptr,
            "{}: cuDNN has no deterministic engine for the {} of input ({},{},{},{}) and "
            "weight ({},{},{},{}) stride ({},{}) padding ({},{}) in {}: {}",
            op, pass_name(pass), c.N, c.C, c.H, c.W, c.K, c.C, c.R, c.S, c.a.stride_h,
            c.a.stride_w, c.a.pad_h, c.a.pad_w, dtype_name(io), why);
  return *p;
}

}  // namespace

void conv2d_forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias,
                    const Conv2dArgs& args, const Stream& s) {
  const char* op = "conv2d_forward";
  check_cuda(out, op, "out");
  check_cuda(in, op, "in");
  check_cuda(weight, op, "weight");
  require_cudnn(op);
  const ConvShape c = shape_of(in, weight, out, args, op);
  const DType dt = in.dtype();
  ZT_ASSERT(out.dtype() == dt && weight.dtype() == dt && (!bias || bias->dtype() == dt),
            "{}: out {}, in {}, weight {} (and bias) must share the compute dtype", op,
            dtype_name(out.dtype()), dtype_name(dt), dtype_name(weight.dtype()));
  if (c.N > 0) {
    const int64_t align = alignment_of({in.data(), weight.data(), out.data()});
    Plan& p = required_plan(Pass::kForward, c, dt, dt, align, op);
    cudnn::execute(p, {{kX, const_cast<void*>(in.data())},
                       {kW, const_cast<void*>(weight.data())},
                       {kY, out.data()}},
                   in.device(), s);
  }
  if (bias != nullptr) conv_bias_add(out, *bias, s);
}

void conv2d_backward(Tensor* din, Tensor& dweight, Tensor* dbias, const Tensor& dout,
                     const Tensor& in, const Tensor& weight, const Conv2dArgs& args,
                     const Stream& s) {
  const char* op = "conv2d_backward";
  check_cuda(dout, op, "dout");
  check_cuda(in, op, "in");
  check_cuda(weight, op, "weight");
  require_cudnn(op);
  const ConvShape c = shape_of(in, weight, dout, args, op);
  const DType dt = in.dtype();
  const DType acc = accum_dtype(dt);
  ZT_ASSERT(dout.dtype() == dt && weight.dtype() == dt && (!din || din->dtype() == dt),
            "{}: dout {}, weight {} (and din) must be the compute dtype {}", op,
            dtype_name(dout.dtype()), dtype_name(weight.dtype()), dtype_name(dt));
  ZT_ASSERT((!dweight.defined() || (dweight.dtype() == acc && dweight.shape() == weight.shape())) &&
                (!dbias || (dbias->dtype() == acc && dbias->ndim() == 1 && dbias->size(0) == c.K)),
            "{}: dweight {} must be the weight's shape {} and dbias ({}) in the accum dtype {}",
            op, dweight.defined() ? dweight.shape().str() : "-", weight.shape().str(), c.K,
            dtype_name(acc));
  if (dbias != nullptr) conv_bias_grad(*dbias, dout, s);
  if (c.N == 0) {
    if (din != nullptr) ZT_ASSERT(din->numel() == 0, "{}: din of an empty batch", op);
    return;
  }
  if (din != nullptr) {
    ZT_ASSERT(din->shape() == in.shape(), "{}: din {} differs from in {}", op, din->shape().str(),
              in.shape().str());
    check_cuda(*din, op, "din");
    const int64_t align = alignment_of({din->data(), weight.data(), dout.data()});
    Plan& p = required_plan(Pass::kData, c, dt, dt, align, op);
    cudnn::execute(p, {{kX, din->data()},
                       {kW, const_cast<void*>(weight.data())},
                       {kY, const_cast<void*>(dout.data())}},
                   in.device(), s);
  }
  if (!dweight.defined()) return;
  check_cuda(dweight, op, "dweight");
  // The filter gradient is written into a scratch (beta 0) and added to the accumulator: some of
  // cuDNN's filter-gradient engines mishandle beta = 1 (a split reduction that does not keep
  // what the output held), which tests/gpu/conv2d_test.cc caught on AlexNet's second layer.
  Tensor grad = Tensor::empty(dweight.shape(), acc, dweight.device(), s);
  int64_t align = alignment_of({in.data(), grad.data(), dout.data()});
  if (dt != acc && plan_for(Pass::kFilter, c, dt, acc, align, nullptr) == nullptr) {
    // 16-bit operands into an f32 gradient: directly when an engine takes the mixed graph, else
    // from f32 copies of both operands.
    Tensor in32 = Tensor::empty(in.shape(), acc, in.device(), s);
    Tensor dout32 = Tensor::empty(dout.shape(), acc, dout.device(), s);
    cast(in32, in, s);
    cast(dout32, dout, s);
    align = alignment_of({in32.data(), grad.data(), dout32.data()});
    Plan& p = required_plan(Pass::kFilter, c, acc, acc, align, op);
    cudnn::execute(p, {{kX, in32.data()}, {kW, grad.data()}, {kY, dout32.data()}}, in.device(), s);
  } else {
    Plan& p = required_plan(Pass::kFilter, c, dt, acc, align, op);
    cudnn::execute(p, {{kX, const_cast<void*>(in.data())},
                       {kW, grad.data()},
                       {kY, const_cast<void*>(dout.data())}},
                   in.device(), s);
  }
  add_inplace(dweight, grad, s);
}

}  // namespace zt::kernels::cuda
