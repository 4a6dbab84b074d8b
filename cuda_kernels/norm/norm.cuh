// The face of the CUDA normalization family: device-side building blocks of the batch-norm
// (batch_norm_stats.cu, batch_norm_apply.cu, batch_norm_backward.cu, batch_norm_single_read.cu)
// and layer-norm (layer_norm.cu) kernels: the three CUDA normalization dtypes, 16-byte vector
// loads and stores converted to float, Welford updates and Chan merges of (mean, M2, count),
// block-wide reductions in a fixed order (so results are the same run to run), parameters in
// float32 or the input's dtype (NormParam: weight, bias and the running statistics), the contract
// check of the float32 statistics tensors, and launch-shape helpers.
// Include only from .cu files.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "ember/cuda_kernels/common/common.cuh"
#include "ember/kernel_interface/norm.h"

namespace ember::cuda::norm {

// Threads per block of every normalization kernel (a multiple of 32 and a power of two).
inline constexpr int kThreads = 256;
// Resident blocks per SM the grids are sized for (2048 threads per SM on sm_80 / sm_90).
inline constexpr int kBlocksPerSm = 2048 / kThreads;
// The dtypes the CUDA normalization kernels are built for (float64 is a CPU-only dtype here:
// keeping it out halves the template instantiations).
inline constexpr std::initializer_list<DType> kCudaNormTypes = {DType::f32, DType::f16,
                                                                DType::bf16};
// The same set for dispatch_floating.
inline constexpr FloatingTypes kNormFloatingTypes = FloatingTypes::no_f64;

// Elements of T in one 16-byte access.
template <typename T>
inline constexpr int kVec = int(16 / sizeof(T));

// ---- vector access --------------------------------------------------------------------------

// v[k] = p[k] for k < valid (0 beyond), as float. `vector_ok`: p is 16-byte aligned and all VEC
// elements exist, so one 16-byte load does it.
template <typename T, int VEC>
__device__ __forceinline__ void load_floats(const T* p, bool vector_ok, int valid,
                                            float (&v)[VEC]) {
  if (vector_ok) {
    const AlignedVec<T, VEC> a = *reinterpret_cast<const AlignedVec<T, VEC>*>(p);
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = convert<float>(a.v[k]);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = k < valid ? convert<float>(p[k]) : 0.f;
  }
}

template <typename T, int VEC>
__device__ __forceinline__ void store_floats(T* p, bool vector_ok, int valid,
                                             const float (&v)[VEC]) {
  if (vector_ok) {
    AlignedVec<T, VEC> a;
#pragma unroll
    for (int k = 0; k < VEC; ++k) a.v[k] = convert<T>(v[k]);
    *reinterpret_cast<AlignedVec<T, VEC>*>(p) = a;
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      if (k < valid) p[k] = convert<T>(v[k]);
  }
}

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// max(v, 0) that keeps NaN (as PyTorch's relu; fmaxf(NaN, 0) would give 0).
__device__ __forceinline__ float relu(float v) { return v < 0.f ? 0.f : v; }

// ---- Welford and Chan -----------------------------------------------------------------------

// One Welford step with the count already advanced to n and inv_n = 1 / n.
__device__ __forceinline__ void welford_step(float& mean, float& m2, float v, float inv_n) {
  const float delta = v - mean;
  mean += delta * inv_n;
  m2 += delta * (v - mean);
}

// Chan et al.'s merge of (mean_b, m2_b, n_b) into (mean, m2, n); either count may be 0.
template <typename Count>
__device__ __forceinline__ void chan_merge(float& mean, float& m2, Count& n, float mean_b,
                                           float m2_b, Count n_b) {
  if (n_b == 0) return;
  const Count total = n + n_b;
  const float w = float(n_b) / float(total);
  const float delta = mean_b - mean;
  mean += delta * w;
  m2 += m2_b + delta * delta * float(n) * w;
  n = total;
}

// VEC lanes that share one count (a thread's channels, or its vector positions), merged with
// lanes of another thread holding the same number of values per lane.
template <int VEC>
__device__ __forceinline__ void chan_merge_lanes(float (&mean)[VEC], float (&m2)[VEC], int& n,
                                                 const float* mean_b, const float* m2_b, int n_b) {
  if (n_b == 0) return;
  const int total = n + n_b;
  const float w = float(n_b) / float(total);
  const float nw = float(n) * w;
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const float delta = mean_b[k] - mean[k];
    mean[k] += delta * w;
    m2[k] += m2_b[k] + delta * delta * nw;
  }
  n = total;
}

// Merges the Welford states of a whole block (a multiple of 32 threads, at most kThreads, in
// warps of consecutive thread ids); the result is valid in thread 0. Fixed order: deterministic.
__device__ __forceinline__ void block_merge_welford(float& mean, float& m2, int& n) {
  __shared__ float sh_mean[kThreads / 32], sh_m2[kThreads / 32];
  __shared__ int sh_n[kThreads / 32];
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  const int lane = tid % 32, warp = tid / 32;
  const int warps = int(blockDim.x * blockDim.y) / 32;
#pragma unroll
  for (int m = 16; m > 0; m /= 2) {
    const float mean_b = __shfl_down_sync(0xffffffffu, mean, m);
    const float m2_b = __shfl_down_sync(0xffffffffu, m2, m);
    const int n_b = __shfl_down_sync(0xffffffffu, n, m);
    chan_merge(mean, m2, n, mean_b, m2_b, n_b);
  }
  if (lane == 0) {
    sh_mean[warp] = mean;
    sh_m2[warp] = m2;
    sh_n[warp] = n;
  }
  __syncthreads();
  if (tid == 0)
    for (int w = 1; w < warps; ++w) chan_merge(mean, m2, n, sh_mean[w], sh_m2[w], sh_n[w]);
  __syncthreads();  // the shared arrays may be reused by the caller's next call
}

// Sums two values over a whole block (as block_merge_welford); the result is valid in thread 0.
__device__ __forceinline__ void block_sum2(float& a, float& b) {
  __shared__ float sh_a[kThreads / 32], sh_b[kThreads / 32];
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  const int lane = tid % 32, warp = tid / 32;
  const int warps = int(blockDim.x * blockDim.y) / 32;
#pragma unroll
  for (int m = 16; m > 0; m /= 2) {
    a += __shfl_down_sync(0xffffffffu, a, m);
    b += __shfl_down_sync(0xffffffffu, b, m);
  }
  if (lane == 0) {
    sh_a[warp] = a;
    sh_b[warp] = b;
  }
  __syncthreads();
  if (tid == 0)
    for (int w = 1; w < warps; ++w) {
      a += sh_a[w];
      b += sh_b[w];
    }
  __syncthreads();
}

// ---- parameters (weight, bias, running statistics) ---------------------------------------------

// A parameter vector (weight, bias or a running statistic, one value per channel) as the kernels
// read it: float32, or the input's dtype T (a float16 / bfloat16 model's own parameters, read
// without a conversion kernel first). Null when absent.
template <typename T>
struct NormParam {
  void* ptr = nullptr;          // written only for the running statistics (store)
  bool in_input_dtype = false;  // T rather than float (uniform over the grid)

  __device__ __forceinline__ bool absent() const { return ptr == nullptr; }
  __device__ __forceinline__ float at(int64_t i) const {
    return in_input_dtype ? convert<float>(static_cast<const T*>(ptr)[i])
                          : static_cast<const float*>(ptr)[i];
  }
  // Values i .. i + 3 from one 16-byte (float) or 8-byte (16-bit T) load; 16-byte aligned at i.
  __device__ __forceinline__ void at4(int64_t i, float* out) const {
    if (in_input_dtype) {
      const auto q = *reinterpret_cast<const AlignedVec<T, 4>*>(static_cast<const T*>(ptr) + i);
#pragma unroll
      for (int k = 0; k < 4; ++k) out[k] = convert<float>(q.v[k]);
    } else {
      const float4 q = *reinterpret_cast<const float4*>(static_cast<const float*>(ptr) + i);
      out[0] = q.x;
      out[1] = q.y;
      out[2] = q.z;
      out[3] = q.w;
    }
  }
  // Writes value i (rounded to nearest for a 16-bit T): the running statistics' update in place.
  __device__ __forceinline__ void store(int64_t i, float v) const {
    if (in_input_dtype)
      static_cast<T*>(ptr)[i] = convert<T>(v);
    else
      static_cast<float*>(ptr)[i] = v;
  }
};

// The kernels' view of parameter tensor t ([C], contiguous; undefined: absent) of an input of
// dtype x_dtype.
template <typename T>
NormParam<T> norm_param(const Tensor& t, DType x_dtype) {
  if (!t.defined()) return {};
  EMBER_INTERNAL_ASSERT(t.dtype() == DType::f32 || t.dtype() == x_dtype, "norm parameter of dtype ",
                        dtype_name(t.dtype()), " for input of dtype ", dtype_name(x_dtype));
  return {t.data_ptr(), t.dtype() != DType::f32};
}

// ---- the affine tail of batch norm (apply kernels, single-read forward) ----------------------

// y = (x - mean) * invstd * weight + bias + residual (relu), on VEC values of one row; `res` is
// all zeros without a residual (an array, never a pointer, so it stays in registers).
template <int VEC>
__device__ __forceinline__ void apply_affine(float (&v)[VEC], const float (&mean)[VEC],
                                             const float (&scale)[VEC], const float (&shift)[VEC],
                                             const float (&res)[VEC], bool relu_on) {
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const float o = (v[k] - mean[k]) * scale[k] + shift[k] + res[k];
    v[k] = relu_on ? relu(o) : o;
  }
}

// Loads the residual's VEC values, or zeros without a residual.
template <typename T, int VEC>
__device__ __forceinline__ void load_residual(const T* residual, int64_t off, bool vector_ok,
                                              int valid, float (&res)[VEC]) {
  if (residual != nullptr) {
    load_floats<T, VEC>(residual + off, vector_ok, valid, res);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) res[k] = 0.f;
  }
}

// ---- batch statistics outputs ------------------------------------------------------------------

// Where a kernel writes the batch statistics of its channels: save_mean, save_invstd and, when
// running_mean is not absent, the momentum update of the running statistics (float32 or T, as
// weight and bias). The statistics finalize kernel and the single-read forward both carry one
// (filled by channel_stats_out).
template <typename T>
struct ChannelStatsOut {
  float eps = 0.f, momentum = 0.f;
  float* save_mean = nullptr;
  float* save_invstd = nullptr;
  NormParam<T> running_mean;  // absent: no update
  NormParam<T> running_var;

  // 1 / sqrt(M2 / count + eps): the inverse standard deviation `store` saves.
  __device__ __forceinline__ float invstd(float m2, int64_t count) const {
    return rsqrtf(m2 / float(count) + eps);
  }
  // Channel c's statistics from (mean, M2) over `count` values: save_invstd[c] = invstd(M2,
  // count); running_var takes the unbiased variance M2 / (count - 1).
  __device__ __forceinline__ void store(int64_t c, float mean, float m2, int64_t count) const {
    save_mean[c] = mean;
    save_invstd[c] = invstd(m2, count);
    if (!running_mean.absent()) {
      const float unbiased_var = m2 / float(count - 1);
      const float rm = running_mean.at(c);
      const float rv = running_var.at(c);
      running_mean.store(c, (1.f - momentum) * rm + momentum * mean);
      running_var.store(c, (1.f - momentum) * rv + momentum * unbiased_var);
    }
  }
};

// The statistics outputs of a training forward's arguments (BatchNormStatsArgs or
// BatchNormForwardProblem: x, eps, momentum, save_mean, save_invstd, optional running statistics).
template <typename T, typename Args>
inline ChannelStatsOut<T> channel_stats_out(const Args& a) {
  ChannelStatsOut<T> o;
  o.eps = float(a.eps);
  o.momentum = float(a.momentum);
  o.save_mean = static_cast<float*>(a.save_mean.data_ptr());
  o.save_invstd = static_cast<float*>(a.save_invstd.data_ptr());
  o.running_mean = norm_param<T>(a.running_mean, a.x.dtype());
  o.running_var = norm_param<T>(a.running_var, a.x.dtype());
  return o;
}

// ---- host helpers -----------------------------------------------------------------------------

inline int next_pow2(int64_t v) {
  int p = 1;
  while (p < v && p < (1 << 30)) p *= 2;
  return p;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A typed pointer to a tensor's first element, or null for an undefined tensor.
template <typename T>
inline T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// True when every defined tensor's first element is 16-byte aligned.
inline bool all_aligned16(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t->defined() && !is_aligned(t->data_ptr(), 16)) return false;
  return true;
}

// Contract check of a float32 statistics tensor of n values (one per channel or per row) passed to
// a normalization kernel: a broken one is a bug in ops/norm.cpp, not a user error.
inline void check_stats_tensor(const Tensor& t, int64_t n, Device device, const char* what) {
  EMBER_INTERNAL_ASSERT(t.defined() && t.dtype() == DType::f32 && t.is_contiguous() &&
                            t.numel() == n && t.device() == device,
                        "norm CUDA kernel: ", what, " must be a contiguous float32 [", n, "] on ",
                        device.str());
}

// FastDivmod handles dividends below 2^31; larger problems divide in 64 bits.
inline bool fits_fast_divmod(int64_t max_dividend) {
  return max_dividend < int64_t(std::numeric_limits<int32_t>::max());
}

// Sums the [splits, C] partials part_dy / part_dy_xhat of each channel over the splits, in one
// fixed order, into sum_dy / sum_dy_xhat [C] (channel_grad_sums' last step; also the layer-norm
// backward's parameter gradients). Launched dependent on `stream`
// (cuda_kernels/norm/batch_norm_backward.cu).
void launch_grad_sums_finalize(const float* part_dy, const float* part_dy_xhat, int64_t splits,
                               int64_t C, float* sum_dy, float* sum_dy_xhat, cudaStream_t stream);

}  // namespace ember::cuda::norm
