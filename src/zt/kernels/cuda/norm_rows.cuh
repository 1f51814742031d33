// Shared pieces of the row-normalisation kernels (layernorm.cu, rmsnorm.cu) on their 16-byte
// path: rows held in registers, and the backward's parameter gradients summed in the backward
// kernel itself.
//
// RowRegs<T, kN, kSplit>: a row is split over a group of kSplit warps; lane `lane` of warp h of
// the group holds chunks j = 0..kN-1 of kVec<T> elements at columns
// ((j kSplit + h) 32 + lane) kVec<T>; a chunk at or past C is not loaded. Every load of a row is
// issued before the first is used, so the whole row is in flight, and it is read from memory once
// (the loop kernels read it two or three times, the later reads from cache).
//  - The forwards use one warp a row (by_row_chunks: kN in {1, 2, 4, 8, 16}, the fewest that
//    cover C).
//  - The backwards (one kernel, norm_backward_rows_kernel, with each norm's terms as an Op) keep at
//    most 4 chunks a lane (by_row_split: kSplit 1, 2 or 4 warps a row), so that a lane holds few
//    registers and an SM runs 16 warps; the group's row sums meet in shared memory behind a
//    barrier of the group's warps (group_sum).
// Wider rows take the loop kernels.
//
// Fused parameter gradients (norm_grad_plan, warp_grad_slice, block_grad_partials, then
// column_finish): each warp adds its rows' terms into its own slice of shared memory (kOut x
// its columns, floats; a lane touches only its own columns, so no atomics and no barrier until
// the end), the block adds the slices of its groups in order into partial[o][block][c], and
// column_finish (column_reduce.cuh) adds the blocks onto the gradient in order. Rows go to
// groups in a fixed pattern for a given grid, so the sums are the same bits on every run on the
// same GPU.
#pragma once

#include "zt/kernels/cuda/column_reduce.cuh"
#include "zt/kernels/cuda/cuda_common.cuh"

namespace zt::kernels::cuda {

constexpr int kMaxRowChunks = 16;  // chunks of a row per lane, summed over its group's warps
constexpr int kNormWarps = 8;      // warps of a backward block

template <typename T, int kN, int kSplit = 1>
struct RowRegs {
  static constexpr int kV = kVec<T>;
  static constexpr int kQuads = kV / 4;  // float4s of a chunk's f32 sums (kV is 4 or 8)
  // Floats of one warp's share of one gradient: its chunks' columns, whole chunk rounds.
  static __host__ __device__ int64_t slice_floats(int64_t C) {
    const int64_t round = int64_t{kWarpSize} * kV * kSplit;
    return (C + round - 1) / round * (kWarpSize * kV);
  }
  Vec16<T> v[kN];

  static __device__ __forceinline__ int col(int j, int h, int lane) {
    return ((j * kSplit + h) * kWarpSize + lane) * kV;
  }

  __device__ __forceinline__ void load(const T* row, int h, int lane, int C) {
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      if (col(j, h, lane) < C) v[j] = load16(row + col(j, h, lane));
    }
  }
  // This lane's sum of f(element) over its chunks, in chunk order (warp h of the group).
  template <typename F>
  __device__ __forceinline__ float lane_sum(int h, int lane, int C, F f) const {
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      if (col(j, h, lane) >= C) continue;
      float e[kV];
      get(j, e);
#pragma unroll
      for (int k = 0; k < kV; ++k) sum += f(e[k]);
    }
    return sum;
  }
  // Makes the compiler treat the held words as changed here, so that a second pass converts
  // them again (one instruction each) instead of keeping the first pass's floats alive: the
  // floats would take kV registers a chunk where the packed chunk takes 4.
  __device__ __forceinline__ void launder() {
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      uint32_t* w = reinterpret_cast<uint32_t*>(&v[j]);
#pragma unroll
      for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(w[i]));
    }
  }
  // Chunk j as floats.
  __device__ __forceinline__ void get(int j, float (&out)[kV]) const {
#pragma unroll
    for (int k = 0; k < kV; ++k) out[k] = to_f32(v[j].v[k]);
  }

  // Shared-memory sums: quad q of chunk j of lane `lane` lives at float4 (j kQuads + q) 32 + lane
  // of the warp's slice, so a warp's float4 accesses are consecutive (no bank conflicts).
  static __device__ __forceinline__ void add_to_slice(float* slice, int j, int lane,
                                                      const float (&t)[kV]) {
#pragma unroll
    for (int q = 0; q < kQuads; ++q) {
      float4* p = reinterpret_cast<float4*>(slice) + (j * kQuads + q) * kWarpSize + lane;
      float4 a = *p;
      a.x += t[4 * q];
      a.y += t[4 * q + 1];
      a.z += t[4 * q + 2];
      a.w += t[4 * q + 3];
      *p = a;
    }
  }
  // The column of float `i` of the slice of warp h of a group (add_to_slice's placement).
  static __device__ __forceinline__ int64_t slice_column(int64_t i, int h) {
    const int64_t e = i % 4, lane = (i / 4) % kWarpSize, jq = i / (4 * kWarpSize);
    return (((jq / kQuads) * kSplit + h) * kWarpSize + lane) * kV + (jq % kQuads) * 4 + e;
  }
};

// Calls f.template operator()<kN>() with the fewest chunks per lane (1, 2, 4, 8 or 16) that cover
// C columns of kVec<T>-element chunks with one warp a row; false (nothing called) when C needs
// more.
template <typename T, typename F>
bool by_row_chunks(int64_t C, F&& f) {
  const int64_t need = ceil_div(C, int64_t{kWarpSize} * kVec<T>);
  if (need <= 1) return f.template operator()<1>(), true;
  if (need <= 2) return f.template operator()<2>(), true;
  if (need <= 4) return f.template operator()<4>(), true;
  if (need <= 8) return f.template operator()<8>(), true;
  if (need <= kMaxRowChunks) return f.template operator()<kMaxRowChunks>(), true;
  return false;
}

// Calls f.template operator()<kN, kSplit>() with at most 4 chunks per lane and the fewest warps a
// row (1, 2 or 4) that cover C; false (nothing called) when C needs more.
template <typename T, typename F>
bool by_row_split(int64_t C, F&& f) {
  const int64_t need = ceil_div(C, int64_t{kWarpSize} * kVec<T>);
  if (need <= 1) return f.template operator()<1, 1>(), true;
  if (need <= 2) return f.template operator()<2, 1>(), true;
  if (need <= 4) return f.template operator()<4, 1>(), true;
  if (need <= 8) return f.template operator()<4, 2>(), true;
  if (need <= kMaxRowChunks) return f.template operator()<4, 4>(), true;
  return false;
}

// The sums v[0..kVals) of a row over the kSplit warps of its group: each warp's (already summed
// over its lanes) go to shared memory, the group waits on its own barrier (id 1 + group), and
// every warp adds the kSplit values in the same order. `xch` holds 2 x kSplit x kVals floats per
// group, used by alternate rows (`parity`), so a warp may write the next row's values while the
// others still read this row's.
template <int kSplit, int kVals>
__device__ __forceinline__ void group_sum(float (&v)[kVals], float* xch, int group, int h, int lane,
                                          int& parity) {
  if constexpr (kSplit > 1) {
    float* slot = xch + (group * 2 + parity) * kSplit * kVals;
    if (lane == 0) {
#pragma unroll
      for (int k = 0; k < kVals; ++k) slot[h * kVals + k] = v[k];
    }
    asm volatile("bar.sync %0, %1;" ::"r"(1 + group), "r"(kSplit * kWarpSize) : "memory");
#pragma unroll
    for (int k = 0; k < kVals; ++k) {
      float s = 0.0f;
#pragma unroll
      for (int w = 0; w < kSplit; ++w) s += slot[w * kVals + k];
      v[k] = s;
    }
    parity ^= 1;
  }
}

// Grid and shared memory of a fused backward over `rows` rows with kOut parameter gradients:
// blocks of kNormWarps warps, kNormWarps / kSplit rows at a time; each warp's slice kOut x
// slice_floats floats, plus the groups' exchange slots. Blocks per SM as many as shared memory
// holds, up to 2 (16 warps an SM); never more blocks than rows need. `partial` is the
// kOut x blocks x C scratch (none when no gradient is wanted).
struct NormGradPlan {
  unsigned blocks = 1;
  size_t smem = 0;  // dynamic shared memory per block, bytes
  Tensor partial;
};

// The floats of exchange slots a block needs (group_sum), placed after the warps' slices.
inline int64_t norm_xch_floats(int split, int vals) {
  return split > 1 ? int64_t{kNormWarps} / split * 2 * split * vals : 0;
}

// slice_floats: R::slice_floats(C). blocks == 0 means the slices do not fit in shared memory (the
// caller takes the loop kernels).
NormGradPlan norm_grad_plan(int64_t rows, int64_t C, int64_t slice_floats, int split, int kOut,
                            int vals, bool with_grads, Device device, const Stream& s);

// Whether the 16-byte path takes the row kernels (the default) or the loop kernels: the
// environment's ZT_NORM_PATH=loops picks the loops, to measure one against the other on the same
// GPU (bench/norm_bench.cc, the speed plans of scripts/gpu_check.sh). Read on each call.
bool norm_rows_path();

// Lets `kernel` use up to the device's per-block maximum of dynamic shared memory (set once per
// kernel and device; needed above 48 KiB).
void allow_dynamic_smem(const void* kernel);

// The warp's slice of the block's shared memory (kOut x slice_floats), zeroed.
template <typename R, int kOut>
__device__ __forceinline__ float* warp_grad_slice(float* smem, int warp, int lane, int64_t C) {
  const int64_t n = kOut * R::slice_floats(C);
  float* slice = smem + warp * n;
  for (int64_t i = lane; i < n; i += kWarpSize) slice[i] = 0.0f;
  __syncwarp();
  return slice;
}

// After the block's rows: for each column, the slices of the warps that own it (warp h of every
// group) added in group order into partial[o][blockIdx.x][c].
template <typename R, int kSplit, int kOut>
__device__ __forceinline__ void block_grad_partials(float* partial, const float* smem, int64_t C) {
  __syncthreads();
  constexpr int kGroups = kNormWarps / kSplit;
  const int64_t P = R::slice_floats(C);
  const int64_t blocks = gridDim.x;
  for (int64_t t = threadIdx.x; t < kSplit * kOut * P; t += blockDim.x) {
    const int h = static_cast<int>(t / (kOut * P));
    const int64_t i = t % (kOut * P);  // float of the warp's slice: gradient o, float i % P
    const int64_t o = i / P, c = R::slice_column(i % P, h);
    if (c >= C) continue;
    float v = 0.0f;
    for (int g = 0; g < kGroups; ++g) v += smem[(g * kSplit + h) * kOut * P + i];
    partial[(o * blocks + blockIdx.x) * C + c] = v;
  }
}

// The backward of rows held in registers, for a normalisation Op (layernorm.cu's LnRowsOp,
// rmsnorm.cu's RmsRowsOp), a group of kSplit warps per row at a time over the grid of a
// NormGradPlan. The Op gives, for a row's statistics `st = op.row(row)`:
//   kSums row sums: add_sums(sums, g, x, w, st) adds one element's terms;
//   din = op.din(g, x, w, st, means) + the residual gradient, means = sums / C;
//   kOut parameter gradients' terms: grad_terms(t, g, x, st) (t[o] for gradient o).
// With `partial`, each warp adds the gradients' terms into its shared-memory slices and the block
// writes partial[o][block][c]; column_finish adds them onto the gradients.
template <typename T, int kN, int kSplit, typename Op>
__global__ void __launch_bounds__(kNormWarps* kWarpSize, 2)
    norm_backward_rows_kernel(T* din, const T* dout, const T* in, const T* weight,
                              const T* dresidual, int64_t rows, int C, float* partial, Op op) {
  using R = RowRegs<T, kN, kSplit>;
  constexpr int kV = R::kV;
  constexpr int kGroups = kNormWarps / kSplit;
  constexpr int kSums = Op::kSums, kOut = Op::kOut;
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int group = warp / kSplit, h = warp % kSplit;
  const int64_t P = R::slice_floats(C);
  float* acc = partial != nullptr ? warp_grad_slice<R, kOut>(smem, warp, lane, C) : nullptr;
  float* xch = smem + (partial != nullptr ? kNormWarps * kOut * P : 0);
  int parity = 0;
  for (int64_t row = blockIdx.x * static_cast<int64_t>(kGroups) + group; row < rows;
       row += static_cast<int64_t>(gridDim.x) * kGroups) {
    R g, x, dr;
    g.load(dout + row * C, h, lane, C);
    x.load(in + row * C, h, lane, C);
    if (dresidual != nullptr) dr.load(dresidual + row * C, h, lane, C);  // all loads up front
    const typename Op::Row st = op.row(row);
    float sums[kSums];
#pragma unroll
    for (int i = 0; i < kSums; ++i) sums[i] = 0.0f;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const int c = R::col(j, h, lane);
      if (c >= C) continue;
      float gv[kV], xv[kV], wv[kV];
      g.get(j, gv);
      x.get(j, xv);
      load_f32<T, kV>(wv, weight + c);
#pragma unroll
      for (int k = 0; k < kV; ++k) op.add_sums(sums, gv[k], xv[k], wv[k], st);
    }
#pragma unroll
    for (int i = 0; i < kSums; ++i) sums[i] = warp_sum(sums[i]);
    group_sum<kSplit, kSums>(sums, xch, group, h, lane, parity);
    g.launder();
    x.launder();
    dr.launder();
    float means[kSums];
#pragma unroll
    for (int i = 0; i < kSums; ++i) means[i] = sums[i] / static_cast<float>(C);
    T* d = din + row * C;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const int c = R::col(j, h, lane);
      if (c >= C) continue;
      float gv[kV], xv[kV], wv[kV], rv[kV];
      g.get(j, gv);
      x.get(j, xv);
      load_f32<T, kV>(wv, weight + c);
      if (dresidual != nullptr) {
        dr.get(j, rv);
      } else {
#pragma unroll
        for (int k = 0; k < kV; ++k) rv[k] = 0.0f;
      }
      if (acc != nullptr) {
        float t[kOut][kV];
#pragma unroll
        for (int k = 0; k < kV; ++k) {
          float tk[kOut];
          op.grad_terms(tk, gv[k], xv[k], st);
#pragma unroll
          for (int o = 0; o < kOut; ++o) t[o][k] = tk[o];
        }
#pragma unroll
        for (int o = 0; o < kOut; ++o) R::add_to_slice(acc + o * P, j, lane, t[o]);
      }
#pragma unroll
      for (int k = 0; k < kV; ++k) gv[k] = op.din(gv[k], xv[k], wv[k], st, means) + rv[k];
      store_from_f32<T, kV>(d + c, gv);
    }
  }
  if (partial != nullptr) block_grad_partials<R, kSplit, kOut>(partial, smem, C);
}

// Runs the backward rows kernel for C columns (one to four warps a row, by_row_split) and, when
// any gradient of `dst` is wanted, column_finish. False, having launched nothing, when C needs
// more than 16 chunks a lane or the shared-memory slices do not fit: the caller takes the loops.
template <typename T, typename Op>
bool norm_backward_rows(T* din, const T* dout, const T* in, const T* weight, const T* dresidual,
                        int64_t rows, int C, const Op& op, const ColumnDst<Op::kOut>& dst,
                        Device device, const Stream& s) {
  bool with_grads = false;
  for (const float* p : dst.p) with_grads = with_grads || p != nullptr;
  bool done = false;
  by_row_split<T>(C, [&]<int kN, int kSplit>() {
    using R = RowRegs<T, kN, kSplit>;
    const NormGradPlan plan = norm_grad_plan(rows, C, R::slice_floats(C), kSplit, Op::kOut,
                                             Op::kSums, with_grads, device, s);
    if (plan.blocks == 0) return;
    const auto kernel = norm_backward_rows_kernel<T, kN, kSplit, Op>;
    if (plan.smem > 0) allow_dynamic_smem(reinterpret_cast<const void*>(kernel));
    float* partial = plan.partial.defined() ? static_cast<float*>(plan.partial.data()) : nullptr;
    kernel<<<plan.blocks, kNormWarps * kWarpSize, plan.smem, stream_of(s)>>>(
        din, dout, in, weight, dresidual, rows, C, partial, op);
    ZT_CUDA_CHECK_LAUNCH();
    if (partial != nullptr) column_finish<Op::kOut>(dst, partial, plan.blocks, C, s);
    done = true;
  });
  return done;
}

}  // namespace zt::kernels::cuda
