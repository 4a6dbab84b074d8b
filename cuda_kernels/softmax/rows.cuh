// Device building blocks shared by the softmax-family kernels of cuda_kernels/softmax/: the
// vector width and block shapes, visitors of a row's elements (16-byte vectors when the row
// allows), the online statistics of several values at once, and the sm_90 guard of the cluster
// and ring kernels. Private to this family; include only from its .cu files.
#pragma once
#include <cstdint>
#include <type_traits>

#include "ember/cuda_kernels/common/common.cuh"
#include "ember/cuda_kernels/common/reduce.cuh"

namespace ember::cuda::softmax_impl {

template <typename T>
inline constexpr int kVec = 16 / int(sizeof(T));

constexpr int kWarpRowsPerBlock = 4;
constexpr int kMaxBlockThreads = 1024;

template <typename T>
__device__ __forceinline__ bool aligned16(const T* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

// ---- row visitors: every element of [begin, end) of a row, 16-byte vectors when `vec` ---------
// (vec requires begin, end and the row start to be multiples of the vector width; the callers
// check that on the host.)

// The values of one vector converted to the accumulation type.
template <typename A, typename T, int V>
__device__ __forceinline__ void to_acc(const AlignedVec<T, V>& c, A (&v)[V]) {
#pragma unroll
  for (int j = 0; j < V; ++j) v[j] = convert<A>(c.v[j]);
}

// f(values, index of values[0]) on one vector: all V values at once (an array), or for f64 (a
// correctness path) one value at a time, whose inlined double math spills otherwise.
template <typename A, typename T, typename F>
__device__ __forceinline__ void visit_vector(const AlignedVec<T, kVec<T>>& c, int64_t first,
                                             F&& f) {
  constexpr int V = kVec<T>;
  if constexpr (std::is_same_v<T, double>) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const A one[1] = {c.v[j]};
      f(one, first + j);
    }
  } else {
    A v[V];
    to_acc(c, v);
    f(v, first);
  }
}

// visit_vector's f for each vector of [begin, end) of a row, or for each element as an array of
// one on the scalar path; thread `rank` of `group` threads takes every group-th vector (or
// element), with kInFlight vector loads in flight per thread (softmax_block_forward_kernel keeps
// 2 in f64, which spills with 4). Handing over whole vectors lets the online statistics rescale
// once per vector instead of once per element.
template <typename A, int kInFlight = 4, typename T, typename F>
__device__ __forceinline__ void visit_row(const T* row, int64_t begin, int64_t end, bool vec,
                                          int rank, int group, F&& f) {
  constexpr int V = kVec<T>;
  using Vec = AlignedVec<T, V>;
  if (vec) {
    const Vec* rv = reinterpret_cast<const Vec*>(row);
    const int64_t vb = begin / V, ve = end / V;
    int64_t i = vb + rank;
    for (; i + (kInFlight - 1) * int64_t(group) < ve; i += kInFlight * int64_t(group)) {
      Vec c[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) c[u] = rv[i + u * group];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) visit_vector<A>(c[u], (i + u * group) * V, f);
    }
    for (; i < ve; i += group) visit_vector<A>(rv[i], i * V, f);
  } else {
    for (int64_t i = begin + rank; i < end; i += group) {
      const A v[1] = {convert<A>(row[i])};
      f(v, i);
    }
  }
}

// Adds N values to online statistics: one rescale for the group (when its max is a new maximum)
// and one exponential per value, instead of a compare, branch and possible rescale per value.
// -inf values add exp(-inf) = 0 (while every value so far is -inf the sum is taken against 0, so
// it stays 0), and a NaN makes the sum NaN (it never wins the max, but its exponential is NaN).
// A single value takes maxsum_add (one exponential on either branch).
template <typename A, int N>
__device__ __forceinline__ void maxsum_add_n(MaxSum<A>& s, const A (&v)[N]) {
  if constexpr (N == 1) {
    maxsum_add(s, v[0]);
    return;
  }
  A m = v[0];
#pragma unroll
  for (int j = 1; j < N; ++j) m = v[j] > m ? v[j] : m;
  if (m > s.max) {
    s.sum *= exp_acc(s.max - m);  // exp(-inf) = 0 for empty statistics
    s.max = m;
  }
  const A base = s.max == neg_infinity<A>() ? A(0) : s.max;
  A add = 0;
#pragma unroll
  for (int j = 0; j < N; ++j) add += exp_acc(v[j] - base);
  s.sum += add;
}

// f(a, b) for each element pair of two rows.
template <typename A, typename T, typename F>
__device__ __forceinline__ void visit_rows2(const T* ra, const T* rb, int64_t begin, int64_t end,
                                            bool vec, F&& f) {
  constexpr int V = kVec<T>;
  using Vec = AlignedVec<T, V>;
  if (vec) {
    const Vec* va = reinterpret_cast<const Vec*>(ra);
    const Vec* vb = reinterpret_cast<const Vec*>(rb);
    const int64_t b0 = begin / V, e0 = end / V;
    int64_t i = b0 + threadIdx.x;
    for (; i + int64_t(blockDim.x) < e0; i += 2 * int64_t(blockDim.x)) {
      const Vec a0 = va[i], a1 = va[i + blockDim.x], c0 = vb[i], c1 = vb[i + blockDim.x];
#pragma unroll
      for (int j = 0; j < V; ++j) f(convert<A>(a0.v[j]), convert<A>(c0.v[j]));
#pragma unroll
      for (int j = 0; j < V; ++j) f(convert<A>(a1.v[j]), convert<A>(c1.v[j]));
    }
    for (; i < e0; i += blockDim.x) {
      const Vec a0 = va[i], c0 = vb[i];
#pragma unroll
      for (int j = 0; j < V; ++j) f(convert<A>(a0.v[j]), convert<A>(c0.v[j]));
    }
  } else {
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      f(convert<A>(ra[i]), convert<A>(rb[i]));
  }
}

// out[i] = f(a[i]) (b == nullptr) or f(a[i], b[i]) over [begin, end).
template <typename A, typename T, typename F>
__device__ __forceinline__ void transform_row(const T* a, const T* b, T* out, int64_t begin,
                                              int64_t end, bool vec, F&& f) {
  constexpr int V = kVec<T>;
  using Vec = AlignedVec<T, V>;
  if (vec) {
    const Vec* va = reinterpret_cast<const Vec*>(a);
    const Vec* vb = reinterpret_cast<const Vec*>(b);
    Vec* vo = reinterpret_cast<Vec*>(out);
    for (int64_t i = begin / V + threadIdx.x; i < end / V; i += blockDim.x) {
      const Vec x = va[i];
      Vec y;
      if (b != nullptr) {
        const Vec g = vb[i];
#pragma unroll
        for (int j = 0; j < V; ++j) y.v[j] = convert<T>(f(convert<A>(x.v[j]), convert<A>(g.v[j])));
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) y.v[j] = convert<T>(f(convert<A>(x.v[j]), A(0)));
      }
      vo[i] = y;
    }
  } else {
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      out[i] = convert<T>(f(convert<A>(a[i]), b != nullptr ? convert<A>(b[i]) : A(0)));
  }
}

// The cluster and ring kernels use sm_90 instructions; applies() keeps older devices out, and a
// build for an older architecture compiles them to a trap.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define EMBER_SOFTMAX_SM90 1
#else
#define EMBER_SOFTMAX_SM90 0
#endif

}  // namespace ember::cuda::softmax_impl
