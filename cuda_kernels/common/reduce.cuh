// Device building blocks of kernels that reduce rows (the softmax family, pooling, convolution
// epilogues): fast exp/log in the accumulation type, warp and block reductions whose result
// reaches every thread, and the online-softmax statistics (MaxSum: a running max and a sum
// rescaled whenever the max grows, so a row's max and sum of exponentials come out of one read).
// Include only from .cu files.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "ember/cuda_kernels/common/common.cuh"

namespace ember::cuda {

inline constexpr unsigned kFullWarpMask = 0xffffffffu;
inline constexpr int kWarpSize = 32;

// exp in the accumulation type. float: ex2.approx.ftz(x * log2(e)), one FMUL and one MUFU.EX2
// (relative error about 2^-22 + |x| 2^-24; -inf -> 0, NaN -> NaN; results below 2^-126 flush to
// 0). __expf is the same approximation without ftz, which costs a compare and two predicated
// multiplies more per call (for subnormal results): 5 instructions instead of 2, most of the
// arithmetic of a long-row softmax forward, which then falls well short of memory speed.
inline constexpr float kLog2e = 1.4426950408889634f;
// 2^x, one MUFU.EX2 (ftz: results below 2^-126 flush to 0).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
template <typename A>
__device__ __forceinline__ A exp_acc(A x) {
  if constexpr (std::is_same_v<A, float>) {
    return exp2_approx(x * kLog2e);
  } else {
    return exp(x);
  }
}
template <typename A>
__device__ __forceinline__ A log_acc(A x) {
  if constexpr (std::is_same_v<A, float>)
    return logf(x);
  else
    return log(x);
}
template <typename A>
__device__ __forceinline__ A neg_infinity() {
  return -std::numeric_limits<A>::infinity();
}

// ---- plain reductions ---------------------------------------------------------------------------

struct SumOp {
  template <typename A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    return a + b;
  }
};
// NaN-propagating max: a NaN anywhere makes the row's max NaN (then every output is NaN, as in
// PyTorch, instead of NaN being silently skipped).
struct MaxOp {
  template <typename A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    return (a != a || a > b) ? a : b;
  }
};

template <typename A, typename Op>
__device__ __forceinline__ A warp_reduce(A v, Op op) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v = op(v, __shfl_xor_sync(kFullWarpMask, v, offset));
  return v;
}

// Reduces over the whole block (blockDim.x a multiple of 32, at most 1024) and returns the result
// to every thread. `scratch` holds 32 values of shared memory; the call synchronizes the block and
// may be repeated with the same scratch.
template <typename A, typename Op>
__device__ __forceinline__ A block_reduce(A v, Op op, A identity, A* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  v = warp_reduce(v, op);
  __syncthreads();  // a previous call may still be reading scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  // Every warp reduces the partials itself, so no broadcast round is needed.
  v = lane < warps ? scratch[lane] : identity;
  return warp_reduce(v, op);
}

// ---- online softmax statistics ------------------------------------------------------------------

// max and sum(exp(x - max)) of the values seen so far.
template <typename A>
struct MaxSum {
  A max;
  A sum;
};

template <typename A>
__device__ __forceinline__ MaxSum<A> maxsum_identity() {
  return {neg_infinity<A>(), A(0)};
}

// Adds one value. -inf adds nothing (exp(-inf - max) = 0, and -inf - -inf would be NaN); NaN
// poisons the sum.
template <typename A>
__device__ __forceinline__ void maxsum_add(MaxSum<A>& s, A x) {
  if (x > s.max) {
    s.sum = s.sum * exp_acc(s.max - x) + A(1);
    s.max = x;
  } else if (x != neg_infinity<A>()) {
    s.sum += exp_acc(x - s.max);
  }
}

template <typename A>
__device__ __forceinline__ MaxSum<A> maxsum_merge(const MaxSum<A>& a, const MaxSum<A>& b) {
  const A m = a.max > b.max ? a.max : b.max;
  if (m == neg_infinity<A>()) return {m, a.sum + b.sum};  // both empty (or all -inf)
  const A sa = a.max == neg_infinity<A>() ? A(0) : a.sum * exp_acc(a.max - m);
  const A sb = b.max == neg_infinity<A>() ? A(0) : b.sum * exp_acc(b.max - m);
  return {m, sa + sb};
}

template <typename A>
__device__ __forceinline__ MaxSum<A> warp_maxsum(MaxSum<A> s) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    MaxSum<A> o{__shfl_xor_sync(kFullWarpMask, s.max, offset),
                __shfl_xor_sync(kFullWarpMask, s.sum, offset)};
    s = maxsum_merge(s, o);
  }
  return s;
}

// Block-wide merge, result in every thread; `scratch` holds 32 entries of shared memory.
template <typename A>
__device__ __forceinline__ MaxSum<A> block_maxsum(MaxSum<A> s, MaxSum<A>* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  s = warp_maxsum(s);
  __syncthreads();
  if (lane == 0) scratch[warp] = s;
  __syncthreads();
  s = lane < warps ? scratch[lane] : maxsum_identity<A>();
  return warp_maxsum(s);
}

}  // namespace ember::cuda
