// CUDA batch-norm kernels behind the tables of ops/norm.h: batch_norm_stats (batch statistics and
// the running-statistics update), batch_norm_apply (normalize, optionally + residual and ReLU),
// channel_grad_sums (the per-channel sums of backward, shared with layer / group norm) and
// batch_norm_backward_elemt. float32, float16 and bfloat16 inputs, float32 statistics.
//
// Two layouts (ChannelLayout):
//  - channels-inner ([N*S, C], NHWC and 2-D): a thread owns a vector of 16 bytes of consecutive
//    channels and walks rows; blockDim = (channel vectors, rows), so a warp reads whole rows.
//    Reductions merge the row walkers over threadIdx.y, and split the rows over grid.y.
//  - channels-outer ([N, C, S], NCHW): reductions run a block per (channel, slice of its N*S
//    values), elementwise kernels walk the tensor flat (16-byte vectors when S allows).
// Reductions write one partial per (split, channel) to a workspace and a second kernel merges the
// partials of each channel in a fixed order: no atomics, so results are the same run to run.
// Statistics: Welford within a thread (lanes of a thread share one count, so one reciprocal per
// row serves all its channels), Chan merges across threads and splits; never a sum and a sum of
// squares. Passes over memory: forward = statistics (1 read) + apply (1 read, 1 write); backward =
// sums (2 reads, 3 with the ReLU gate) + elementwise (2-3 reads, 1-2 writes).
// Every output is overwritten (never accumulated into).
//
// The training forward is the "batch_norm.forward" algorithm slot (ops/norm.h): "two_pass" runs the
// statistics and apply kernels above; "persistent" (at the end of this file) is one cooperative
// kernel that keeps x on chip and reads it once, where the tiles fit and the grid is resident.
#include "cuda_kernels/batch_norm.cuh"

#include <cooperative_groups.h>

#include <map>
#include <mutex>
#include <utility>

namespace ember::cuda::norm {
namespace {

// ---- indexing ---------------------------------------------------------------------------------

// Element j (in [0, N*S)) of channel c's values in [N, C, S] memory, and the sample n it belongs
// to. 32-bit fast division when N*S < 2^31.
struct OuterIndex {
  int64_t C = 1, S = 1;
  bool use32 = true;
  FastDivmod div_s;

  __device__ __forceinline__ int64_t sample(int64_t j) const {
    return use32 ? int64_t(div_s.div(uint32_t(j))) : j / S;
  }
  __device__ __forceinline__ int64_t offset(int64_t c, int64_t j, int64_t n) const {
    return (n * C + c) * S + (j - n * S);
  }
};

OuterIndex make_outer_index(const ChannelLayout& l) {
  OuterIndex ix;
  ix.C = l.C;
  ix.S = l.S;
  ix.use32 = fits_fast_divmod(l.per_channel());
  if (ix.use32) ix.div_s = FastDivmod(uint32_t(l.S));
  return ix;
}

// The channel of flat element i of [N, C, S] memory: (i / S) % C.
struct FlatChannel {
  int64_t C = 1, S = 1;
  bool use32 = true;
  FastDivmod div_s, div_c;

  __device__ __forceinline__ int64_t of(int64_t i) const {
    if (use32) {
      const uint32_t plane = div_s.div(uint32_t(i));
      return int64_t(plane - div_c.div(plane) * uint32_t(C));
    }
    return (i / S) % C;
  }
};

FlatChannel make_flat_channel(const ChannelLayout& l) {
  FlatChannel f;
  f.C = l.C;
  f.S = l.S;
  f.use32 = fits_fast_divmod(l.numel());
  if (f.use32) {
    f.div_s = FastDivmod(uint32_t(l.S));
    f.div_c = FastDivmod(uint32_t(l.C));
  }
  return f;
}

// ---- batch statistics ---------------------------------------------------------------------------

template <typename T>
struct StatsParams {
  const T* x;
  int64_t C, rows;       // rows = N * S (the values per channel)
  int64_t chunk;         // values per split (rows for channels-inner)
  bool vector_ok;
  OuterIndex outer;
  float* part_mean;      // [splits, C]
  float* part_m2;        // [splits, C]
};

// Channels-inner statistics. blockDim = (channel vectors, row walkers), grid = (channel-vector
// blocks, row splits). Each thread keeps VEC Welford lanes (its channels) with one shared count.
template <typename T>
__global__ void __launch_bounds__(kThreads)
bn_stats_inner_kernel(StatsParams<T> p) {
  constexpr int VEC = kVec<T>;
  __shared__ float sh_mean[kThreads * VEC], sh_m2[kThreads * VEC];
  __shared__ int sh_n[kThreads];
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
  const int t = ty * bx + tx;
  const int64_t c0 = (int64_t(blockIdx.x) * bx + tx) * VEC;
  const int valid = c0 < p.C ? int(min64(VEC, p.C - c0)) : 0;
  const int64_t r_begin = int64_t(blockIdx.y) * p.chunk;
  const int64_t r_end = min64(r_begin + p.chunk, p.rows);
  float mean[VEC], m2[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) mean[k] = m2[k] = 0.f;
  int n = 0;
  if (valid > 0) {
    const T* base = p.x + c0;
    int64_t r = r_begin + ty;
    // Four rows' loads in flight before the first is used.
    for (; r + 3 * by < r_end; r += 4 * by) {
      float v[4][VEC];
#pragma unroll
      for (int u = 0; u < 4; ++u) load_floats<T, VEC>(base + (r + u * by) * p.C, p.vector_ok, valid, v[u]);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        ++n;
        const float inv_n = __frcp_rn(float(n));
#pragma unroll
        for (int k = 0; k < VEC; ++k) welford_step(mean[k], m2[k], v[u][k], inv_n);
      }
    }
    for (; r < r_end; r += by) {
      float v[VEC];
      load_floats<T, VEC>(base + r * p.C, p.vector_ok, valid, v);
      ++n;
      const float inv_n = __frcp_rn(float(n));
#pragma unroll
      for (int k = 0; k < VEC; ++k) welford_step(mean[k], m2[k], v[k], inv_n);
    }
  }
  // Merge the row walkers of each channel vector: a tree over threadIdx.y (by is a power of 2).
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    sh_mean[t * VEC + k] = mean[k];
    sh_m2[t * VEC + k] = m2[k];
  }
  sh_n[t] = n;
  __syncthreads();
  for (int half = by / 2; half > 0; half /= 2) {
    if (ty < half) {
      const int o = t + half * bx;
      chan_merge_lanes<VEC>(mean, m2, n, &sh_mean[o * VEC], &sh_m2[o * VEC], sh_n[o]);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        sh_mean[t * VEC + k] = mean[k];
        sh_m2[t * VEC + k] = m2[k];
      }
      sh_n[t] = n;
    }
    __syncthreads();
  }
  if (ty == 0 && valid > 0) {
    const int64_t at = int64_t(blockIdx.y) * p.C + c0;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      if (k < valid) {  // a constant index per unrolled step keeps the arrays in registers
        p.part_mean[at + k] = mean[k];
        p.part_m2[at + k] = m2[k];
      }
    }
  }
}

// Channels-outer statistics: a block per (channel, slice of its N*S values). On the vector path
// (S a multiple of VEC, aligned) a thread keeps VEC lanes with one count; else one lane.
template <typename T>
__global__ void __launch_bounds__(kThreads)
bn_stats_outer_kernel(StatsParams<T> p) {
  constexpr int VEC = kVec<T>;
  const int64_t c = blockIdx.x;
  const int64_t j_begin = int64_t(blockIdx.y) * p.chunk;
  const int64_t j_end = min64(j_begin + p.chunk, p.rows);
  float mean[VEC], m2[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) mean[k] = m2[k] = 0.f;
  int n = 0;
  if (p.vector_ok) {
    const int64_t step = int64_t(kThreads) * VEC;
    int64_t j = j_begin + int64_t(threadIdx.x) * VEC;
    for (; j + 3 * step < j_end; j += 4 * step) {
      float v[4][VEC];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t ju = j + u * step;
        load_floats<T, VEC>(p.x + p.outer.offset(c, ju, p.outer.sample(ju)), true, VEC, v[u]);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        ++n;
        const float inv_n = __frcp_rn(float(n));
#pragma unroll
        for (int k = 0; k < VEC; ++k) welford_step(mean[k], m2[k], v[u][k], inv_n);
      }
    }
    for (; j < j_end; j += step) {
      float v[VEC];
      load_floats<T, VEC>(p.x + p.outer.offset(c, j, p.outer.sample(j)), true, VEC, v);
      ++n;
      const float inv_n = __frcp_rn(float(n));
#pragma unroll
      for (int k = 0; k < VEC; ++k) welford_step(mean[k], m2[k], v[k], inv_n);
    }
  } else {
    for (int64_t j = j_begin + threadIdx.x; j < j_end; j += kThreads) {
      const float v = convert<float>(p.x[p.outer.offset(c, j, p.outer.sample(j))]);
      ++n;
      welford_step(mean[0], m2[0], v, __frcp_rn(float(n)));
    }
  }
  float s_mean = mean[0], s_m2 = m2[0];
  int s_n = n;
  if (p.vector_ok) {
#pragma unroll
    for (int k = 1; k < VEC; ++k) chan_merge(s_mean, s_m2, s_n, mean[k], m2[k], n);
  }
  block_merge_welford(s_mean, s_m2, s_n);
  if (threadIdx.x == 0) {
    p.part_mean[int64_t(blockIdx.y) * p.C + c] = s_mean;
    p.part_m2[int64_t(blockIdx.y) * p.C + c] = s_m2;
  }
}

struct StatsFinalizeParams {
  const float* part_mean;
  const float* part_m2;
  int64_t splits, C, rows, chunk;  // split i holds min(chunk, rows - i * chunk) values
  float eps, momentum;
  float* save_mean;
  float* save_invstd;
  void* running_mean;  // null: no update
  void* running_var;
  DType running_dtype;
};

// A warp per channel merges the channel's partials (lane l takes splits l, l + 32, ...), then a
// butterfly; lane 0 writes the statistics and updates the running statistics.
__global__ void __launch_bounds__(kThreads)
bn_stats_finalize_kernel(StatsFinalizeParams p) {
  const int64_t c = (int64_t(blockIdx.x) * kThreads + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (c >= p.C) return;  // uniform per warp
  float mean = 0.f, m2 = 0.f;
  int64_t n = 0;
  for (int64_t i = lane; i < p.splits; i += 32)
    chan_merge(mean, m2, n, p.part_mean[i * p.C + c], p.part_m2[i * p.C + c],
               min64(p.chunk, p.rows - i * p.chunk));
#pragma unroll
  for (int m = 16; m > 0; m /= 2) {
    const float mean_b = __shfl_down_sync(0xffffffffu, mean, m);
    const float m2_b = __shfl_down_sync(0xffffffffu, m2, m);
    const int64_t n_b = __shfl_down_sync(0xffffffffu, n, m);
    chan_merge(mean, m2, n, mean_b, m2_b, n_b);
  }
  if (lane != 0) return;
  p.save_mean[c] = mean;
  p.save_invstd[c] = rsqrtf(m2 / float(p.rows) + p.eps);
  if (p.running_mean != nullptr) {
    const float unbiased_var = m2 / float(p.rows - 1);
    const float rm = load_param(p.running_mean, p.running_dtype, c);
    const float rv = load_param(p.running_var, p.running_dtype, c);
    store_param(p.running_mean, p.running_dtype, c, (1.f - p.momentum) * rm + p.momentum * mean);
    store_param(p.running_var, p.running_dtype, c, (1.f - p.momentum) * rv + p.momentum * unbiased_var);
  }
}

// ---- apply ------------------------------------------------------------------------------------

template <typename T>
struct ApplyParams {
  T* y;
  const T* x;
  const T* residual;  // may be null
  const float* mean;
  const float* invstd;
  const float* weight;  // may be null (1)
  const float* bias;    // may be null (0)
  int64_t C, rows;      // channels-inner: rows = N * S
  int64_t numel;
  bool vector_ok, relu;
  FlatChannel flat;     // channels-outer
};

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

template <typename T>
__global__ void __launch_bounds__(kThreads)
bn_apply_inner_kernel(ApplyParams<T> p) {
  constexpr int VEC = kVec<T>;
  const int64_t c0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
  if (c0 >= p.C) return;
  const int valid = int(min64(VEC, p.C - c0));
  float mean[VEC], scale[VEC], shift[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const int64_t c = k < valid ? c0 + k : c0;
    mean[k] = p.mean[c];
    scale[k] = p.invstd[c] * (p.weight != nullptr ? p.weight[c] : 1.f);
    shift[k] = p.bias != nullptr ? p.bias[c] : 0.f;
  }
  const int64_t step = int64_t(gridDim.y) * blockDim.y;
  int64_t r = int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
  for (; r + 3 * step < p.rows; r += 4 * step) {
    float v[4][VEC], res[4][VEC];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int64_t off = (r + u * step) * p.C + c0;
      load_floats<T, VEC>(p.x + off, p.vector_ok, valid, v[u]);
      load_residual<T, VEC>(p.residual, off, p.vector_ok, valid, res[u]);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      apply_affine<VEC>(v[u], mean, scale, shift, res[u], p.relu);
      store_floats<T, VEC>(p.y + (r + u * step) * p.C + c0, p.vector_ok, valid, v[u]);
    }
  }
  for (; r < p.rows; r += step) {
    const int64_t off = r * p.C + c0;
    float v[VEC], res[VEC];
    load_floats<T, VEC>(p.x + off, p.vector_ok, valid, v);
    load_residual<T, VEC>(p.residual, off, p.vector_ok, valid, res);
    apply_affine<VEC>(v, mean, scale, shift, res, p.relu);
    store_floats<T, VEC>(p.y + off, p.vector_ok, valid, v);
  }
}

// Channels-outer apply: flat over the tensor; on the vector path (S a multiple of VEC) the VEC
// values of a vector share one channel.
template <typename T>
__global__ void __launch_bounds__(kThreads)
bn_apply_outer_kernel(ApplyParams<T> p) {
  constexpr int VEC = kVec<T>;
  const int64_t step = int64_t(gridDim.x) * kThreads;
  const int64_t first = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t per_item = p.vector_ok ? VEC : 1;
  const int64_t items = p.numel / per_item;
  for (int64_t item = first; item < items; item += step) {
    const int64_t i = item * per_item;
    const int64_t c = p.flat.of(i);
    const float m = p.mean[c];
    const float scale = p.invstd[c] * (p.weight != nullptr ? p.weight[c] : 1.f);
    const float shift = p.bias != nullptr ? p.bias[c] : 0.f;
    float v[VEC], res[VEC];
    const int valid = int(per_item);
    load_floats<T, VEC>(p.x + i, p.vector_ok, valid, v);
    load_residual<T, VEC>(p.residual, i, p.vector_ok, valid, res);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float o = (v[k] - m) * scale + shift + res[k];
      v[k] = p.relu ? relu(o) : o;
    }
    store_floats<T, VEC>(p.y + i, p.vector_ok, valid, v);
  }
}

// ---- backward: per-channel sums -----------------------------------------------------------------

template <typename T>
struct GradSumsParams {
  const T* dy;
  const T* x;
  const T* gate;  // may be null
  const float* mean;
  const float* rstd;
  int64_t C, S, rows;       // rows = N * S
  int64_t n_stride, group_size;
  int64_t chunk;
  bool vector_ok;
  OuterIndex outer;         // channels-outer (also gives the sample of a channels-inner row)
  float* part_dy;           // [splits, C]
  float* part_dy_xhat;      // [splits, C]
};

// g = dy, zeroed where the gate (the saved ReLU output) is not > 0.
template <typename T, int VEC>
__device__ __forceinline__ void load_gated(const T* dy, const T* gate, bool vector_ok, int valid,
                                           float (&g)[VEC]) {
  load_floats<T, VEC>(dy, vector_ok, valid, g);
  if (gate != nullptr) {
    float keep[VEC];
    load_floats<T, VEC>(gate, vector_ok, valid, keep);
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      if (!(keep[k] > 0.f)) g[k] = 0.f;
  }
}

// Channels-inner sums: the layout of bn_stats_inner_kernel, sums instead of Welford states.
template <typename T>
__global__ void __launch_bounds__(kThreads)
grad_sums_inner_kernel(GradSumsParams<T> p) {
  constexpr int VEC = kVec<T>;
  __shared__ float sh_a[kThreads * VEC], sh_b[kThreads * VEC];
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
  const int t = ty * bx + tx;
  const int64_t c0 = (int64_t(blockIdx.x) * bx + tx) * VEC;
  const int valid = c0 < p.C ? int(min64(VEC, p.C - c0)) : 0;
  const int64_t r_begin = int64_t(blockIdx.y) * p.chunk;
  const int64_t r_end = min64(r_begin + p.chunk, p.rows);
  float sum_g[VEC], sum_gx[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) sum_g[k] = sum_gx[k] = 0.f;
  if (valid > 0) {
    int group[VEC];  // < C, which the launcher keeps below 2^31
    float m[VEC], rs[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      group[k] = int((k < valid ? c0 + k : c0) / p.group_size);
      m[k] = p.mean[group[k]];  // per-channel statistics (n_stride == 0) stay in registers
      rs[k] = p.rstd[group[k]];
    }
    for (int64_t r = r_begin + ty; r < r_end; r += by) {
      if (p.n_stride != 0) {
        const int64_t base = (p.S == 1 ? r : p.outer.sample(r)) * p.n_stride;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          m[k] = p.mean[base + group[k]];
          rs[k] = p.rstd[base + group[k]];
        }
      }
      const int64_t off = r * p.C + c0;
      float g[VEC], xv[VEC];
      load_gated<T, VEC>(p.dy + off, p.gate != nullptr ? p.gate + off : nullptr, p.vector_ok, valid, g);
      load_floats<T, VEC>(p.x + off, p.vector_ok, valid, xv);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        sum_g[k] += g[k];
        sum_gx[k] += g[k] * (xv[k] - m[k]) * rs[k];
      }
    }
  }
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    sh_a[t * VEC + k] = sum_g[k];
    sh_b[t * VEC + k] = sum_gx[k];
  }
  __syncthreads();
  for (int half = by / 2; half > 0; half /= 2) {
    if (ty < half) {
      const int o = t + half * bx;
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        sum_g[k] += sh_a[o * VEC + k];
        sum_gx[k] += sh_b[o * VEC + k];
        sh_a[t * VEC + k] = sum_g[k];
        sh_b[t * VEC + k] = sum_gx[k];
      }
    }
    __syncthreads();
  }
  if (ty == 0 && valid > 0) {
    const int64_t at = int64_t(blockIdx.y) * p.C + c0;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      if (k < valid) {
        p.part_dy[at + k] = sum_g[k];
        p.part_dy_xhat[at + k] = sum_gx[k];
      }
    }
  }
}

// Channels-outer sums: a block per (channel, slice of its N*S values).
template <typename T>
__global__ void __launch_bounds__(kThreads)
grad_sums_outer_kernel(GradSumsParams<T> p) {
  constexpr int VEC = kVec<T>;
  const int64_t c = blockIdx.x;
  const int64_t group = c / p.group_size;
  const int64_t j_begin = int64_t(blockIdx.y) * p.chunk;
  const int64_t j_end = min64(j_begin + p.chunk, p.rows);
  float m = 0.f, rs = 0.f;
  if (p.n_stride == 0) {
    m = p.mean[group];
    rs = p.rstd[group];
  }
  float sum_g = 0.f, sum_gx = 0.f;
  const int64_t per_item = p.vector_ok ? VEC : 1;
  const int valid = int(per_item);
  for (int64_t j = j_begin + int64_t(threadIdx.x) * per_item; j < j_end; j += kThreads * per_item) {
    const int64_t n = p.outer.sample(j);
    if (p.n_stride != 0) {
      m = p.mean[n * p.n_stride + group];
      rs = p.rstd[n * p.n_stride + group];
    }
    const int64_t off = p.outer.offset(c, j, n);
    float g[VEC], xv[VEC];
    load_gated<T, VEC>(p.dy + off, p.gate != nullptr ? p.gate + off : nullptr, p.vector_ok, valid, g);
    load_floats<T, VEC>(p.x + off, p.vector_ok, valid, xv);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      sum_g += g[k];
      sum_gx += g[k] * (xv[k] - m) * rs;
    }
  }
  block_sum2(sum_g, sum_gx);
  if (threadIdx.x == 0) {
    p.part_dy[int64_t(blockIdx.y) * p.C + c] = sum_g;
    p.part_dy_xhat[int64_t(blockIdx.y) * p.C + c] = sum_gx;
  }
}

// A warp per channel adds the channel's partials in a fixed order.
__global__ void __launch_bounds__(kThreads)
grad_sums_finalize_kernel(const float* part_dy, const float* part_dy_xhat, int64_t splits,
                          int64_t C, float* sum_dy, float* sum_dy_xhat) {
  const int64_t c = (int64_t(blockIdx.x) * kThreads + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (c >= C) return;  // uniform per warp
  float a = 0.f, b = 0.f;
  for (int64_t i = lane; i < splits; i += 32) {
    a += part_dy[i * C + c];
    b += part_dy_xhat[i * C + c];
  }
#pragma unroll
  for (int m = 16; m > 0; m /= 2) {
    a += __shfl_down_sync(0xffffffffu, a, m);
    b += __shfl_down_sync(0xffffffffu, b, m);
  }
  if (lane == 0) {
    sum_dy[c] = a;
    sum_dy_xhat[c] = b;
  }
}

// ---- backward: elementwise ----------------------------------------------------------------------

template <typename T>
struct BackwardParams {
  T* dx;    // may be null
  T* dres;  // may be null
  const T* dy;
  const T* x;
  const T* gate;  // may be null
  const float* mean;
  const float* invstd;
  const float* weight;       // may be null (1)
  const float* sum_dy;       // training only
  const float* sum_dy_xhat;  // training only
  int64_t C, rows, numel;
  float inv_count;
  bool training, vector_ok;
  FlatChannel flat;
};

// dx = (g - k_mean_dy - (x - mean) * k_xmu) * k_out (see batch_norm_backward_elemt in ops/norm.h:
// k_mean_dy = sum_dy / M, k_xmu = invstd * sum_dy_xhat / M, k_out = invstd * weight).
struct BackwardCoefficients {
  float mean, k_mean_dy, k_xmu, k_out;
};

template <typename T>
__device__ __forceinline__ BackwardCoefficients backward_coefficients(const BackwardParams<T>& p, int64_t c) {
  BackwardCoefficients k;
  const float invstd = p.invstd[c];
  k.mean = p.mean[c];
  k.k_out = invstd * (p.weight != nullptr ? p.weight[c] : 1.f);
  k.k_mean_dy = p.training ? p.sum_dy[c] * p.inv_count : 0.f;
  k.k_xmu = p.training ? invstd * p.sum_dy_xhat[c] * p.inv_count : 0.f;
  return k;
}

// One vector of VEC values: reads dy (gated) and, in training, x; writes dres and dx. `coef` holds
// VEC per-lane coefficients (channels-inner) or one shared by the vector (channels-outer).
template <typename T, int VEC>
__device__ __forceinline__ void backward_vector(const BackwardParams<T>& p, int64_t off, int valid,
                                                const BackwardCoefficients* coef, bool per_lane) {
  float g[VEC];
  load_gated<T, VEC>(p.dy + off, p.gate != nullptr ? p.gate + off : nullptr, p.vector_ok, valid, g);
  if (p.dres != nullptr) store_floats<T, VEC>(p.dres + off, p.vector_ok, valid, g);
  if (p.dx == nullptr) return;
  float xv[VEC];
  if (p.training) load_floats<T, VEC>(p.x + off, p.vector_ok, valid, xv);
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const BackwardCoefficients& kc = coef[per_lane ? k : 0];
    const float centered = p.training ? g[k] - kc.k_mean_dy - (xv[k] - kc.mean) * kc.k_xmu : g[k];
    g[k] = centered * kc.k_out;
  }
  store_floats<T, VEC>(p.dx + off, p.vector_ok, valid, g);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
bn_backward_inner_kernel(BackwardParams<T> p) {
  constexpr int VEC = kVec<T>;
  const int64_t c0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
  if (c0 >= p.C) return;
  const int valid = int(min64(VEC, p.C - c0));
  BackwardCoefficients coef[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) coef[k] = backward_coefficients(p, k < valid ? c0 + k : c0);
  const int64_t step = int64_t(gridDim.y) * blockDim.y;
  for (int64_t r = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; r < p.rows; r += step)
    backward_vector<T, VEC>(p, r * p.C + c0, valid, coef, true);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
bn_backward_outer_kernel(BackwardParams<T> p) {
  constexpr int VEC = kVec<T>;
  const int64_t step = int64_t(gridDim.x) * kThreads;
  const int64_t per_item = p.vector_ok ? VEC : 1;
  const int64_t items = p.numel / per_item;
  for (int64_t item = int64_t(blockIdx.x) * kThreads + threadIdx.x; item < items; item += step) {
    const int64_t i = item * per_item;
    const BackwardCoefficients coef = backward_coefficients(p, p.flat.of(i));
    backward_vector<T, VEC>(p, i, int(per_item), &coef, false);
  }
}

// ---- launch plans -------------------------------------------------------------------------------

// Blocks of `kernel` (kThreads threads each) resident on the whole device at once.
template <typename Kernel>
int64_t device_fill_blocks(Kernel kernel, Device device) {
  int per_sm = 0;
  EMBER_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0));
  return int64_t(std::max(per_sm, 1)) * std::max(device_properties(device.index).sm_count, 1);
}

// Channels-inner grid: bx channel vectors x by row walkers (by a power of 2), grid.x covering the
// channel vectors, grid.y = row splits (reductions: `chunk` rows each) or a grid stride.
struct InnerPlan {
  int bx = 1, by = kThreads;
  int64_t grid_x = 1, grid_y = 1;
  int64_t chunk = 1;
};

InnerPlan plan_inner(int64_t rows, int64_t C, int vec, int64_t fill_blocks, bool reduction) {
  InnerPlan p;
  const int64_t cvecs = ceil_div(C, vec);
  p.bx = int(std::min<int64_t>(next_pow2(cvecs), 32));
  p.by = kThreads / p.bx;
  p.grid_x = ceil_div(cvecs, p.bx);
  const int64_t want = std::max<int64_t>(1, fill_blocks / p.grid_x);
  if (reduction) {
    // At least 8 rows per thread, so that merging the partials stays a small part of the work.
    const int64_t max_splits = std::max<int64_t>(1, ceil_div(rows, int64_t(p.by) * 8));
    const int64_t splits = std::min({want, max_splits, int64_t(65535)});
    p.chunk = std::max<int64_t>(1, ceil_div(rows, splits));
    p.grid_y = std::max<int64_t>(1, ceil_div(rows, p.chunk));
  } else {
    p.grid_y = std::min({want, std::max<int64_t>(1, ceil_div(rows, p.by)), int64_t(65535)});
  }
  return p;
}

// Channels-outer reductions: grid (C, splits); each split takes `chunk` values (a multiple of vec).
struct OuterPlan {
  int64_t splits = 1, chunk = 1;
};

OuterPlan plan_outer_reduce(int64_t per_channel, int64_t C, int vec, int64_t fill_blocks) {
  OuterPlan p;
  const int64_t want = std::max<int64_t>(1, fill_blocks / C);
  const int64_t max_splits = std::max<int64_t>(1, ceil_div(per_channel, int64_t(kThreads) * vec * 4));
  const int64_t splits = std::min({want, max_splits, int64_t(65535)});
  p.chunk = ceil_div(std::max<int64_t>(1, ceil_div(per_channel, splits)), vec) * vec;
  p.splits = std::max<int64_t>(1, ceil_div(per_channel, p.chunk));
  return p;
}

unsigned finalize_blocks(int64_t C) { return unsigned(ceil_div(C * 32, kThreads)); }

void check_launch_limits(const char* op, int64_t grid_x) {
  EMBER_CHECK_STATUS(grid_x <= int64_t(std::numeric_limits<int32_t>::max()), not_supported, op,
                     ": too many channels for one CUDA grid (", grid_x, " blocks)");
}

// ---- launchers ----------------------------------------------------------------------------------

template <typename T>
void launch_stats(const BatchNormStatsArgs& a, cudaStream_t stream) {
  constexpr int VEC = kVec<T>;
  const ChannelLayout& l = a.layout;
  const Device device = a.x.device();
  StatsParams<T> p{};
  p.x = static_cast<const T*>(a.x.data_ptr());
  p.C = l.C;
  p.rows = l.per_channel();
  dim3 grid, block;
  int64_t splits = 1;
  if (l.channels_inner) {
    static const int64_t fill = device_fill_blocks(bn_stats_inner_kernel<T>, device);
    const InnerPlan plan = plan_inner(p.rows, l.C, VEC, fill, true);
    p.vector_ok = l.C % VEC == 0 && all_aligned16({&a.x});
    p.chunk = plan.chunk;
    splits = plan.grid_y;
    check_launch_limits("batch_norm", plan.grid_x);
    grid = dim3(unsigned(plan.grid_x), unsigned(splits));
    block = dim3(unsigned(plan.bx), unsigned(plan.by));
  } else {
    static const int64_t fill = device_fill_blocks(bn_stats_outer_kernel<T>, device);
    const OuterPlan plan = plan_outer_reduce(p.rows, l.C, VEC, fill);
    p.vector_ok = l.S % VEC == 0 && all_aligned16({&a.x});
    p.outer = make_outer_index(l);
    p.chunk = plan.chunk;
    splits = plan.splits;
    check_launch_limits("batch_norm", l.C);
    grid = dim3(unsigned(l.C), unsigned(splits));
    block = dim3(kThreads);
  }
  // Partials: workspace from the caching allocator, released (stream-ordered) on return.
  Tensor workspace = empty({2 * splits * l.C}, DType::f32, device);
  p.part_mean = static_cast<float*>(workspace.data_ptr());
  p.part_m2 = p.part_mean + splits * l.C;
  if (l.channels_inner) bn_stats_inner_kernel<T><<<grid, block, 0, stream>>>(p);
  else bn_stats_outer_kernel<T><<<grid, block, 0, stream>>>(p);
  EMBER_CUDA_LAUNCH_CHECK();

  StatsFinalizeParams f{};
  f.part_mean = p.part_mean;
  f.part_m2 = p.part_m2;
  f.splits = splits;
  f.C = l.C;
  f.rows = p.rows;
  f.chunk = p.chunk;
  f.eps = float(a.eps);
  f.momentum = float(a.momentum);
  f.save_mean = static_cast<float*>(a.save_mean.data_ptr());
  f.save_invstd = static_cast<float*>(a.save_invstd.data_ptr());
  if (a.running_mean.defined()) {
    f.running_mean = a.running_mean.data_ptr();
    f.running_var = a.running_var.data_ptr();
    f.running_dtype = a.running_mean.dtype();
  }
  bn_stats_finalize_kernel<<<finalize_blocks(l.C), kThreads, 0, stream>>>(f);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void launch_apply(const BatchNormApplyArgs& a, cudaStream_t stream) {
  constexpr int VEC = kVec<T>;
  const ChannelLayout& l = a.layout;
  const Device device = a.x.device();
  ApplyParams<T> p{};
  p.y = static_cast<T*>(a.y.data_ptr());
  p.x = static_cast<const T*>(a.x.data_ptr());
  p.residual = ptr_or_null<const T>(a.residual);
  p.mean = static_cast<const float*>(a.mean.data_ptr());
  p.invstd = static_cast<const float*>(a.invstd.data_ptr());
  p.weight = ptr_or_null<const float>(a.weight);
  p.bias = ptr_or_null<const float>(a.bias);
  p.C = l.C;
  p.rows = l.per_channel();
  p.numel = l.numel();
  p.relu = a.relu;
  const bool aligned = all_aligned16({&a.y, &a.x, &a.residual});
  if (l.channels_inner) {
    static const int64_t fill = device_fill_blocks(bn_apply_inner_kernel<T>, device);
    const InnerPlan plan = plan_inner(p.rows, l.C, VEC, fill, false);
    p.vector_ok = l.C % VEC == 0 && aligned;
    check_launch_limits("batch_norm", plan.grid_x);
    bn_apply_inner_kernel<T><<<dim3(unsigned(plan.grid_x), unsigned(plan.grid_y)),
                               dim3(unsigned(plan.bx), unsigned(plan.by)), 0, stream>>>(p);
  } else {
    static const int64_t fill = device_fill_blocks(bn_apply_outer_kernel<T>, device);
    p.vector_ok = l.S % VEC == 0 && aligned;
    p.flat = make_flat_channel(l);
    const int64_t items = p.numel / (p.vector_ok ? VEC : 1);
    const int64_t blocks = std::max<int64_t>(1, std::min(ceil_div(items, kThreads), fill));
    bn_apply_outer_kernel<T><<<unsigned(blocks), kThreads, 0, stream>>>(p);
  }
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void launch_grad_sums(const ChannelGradSumsArgs& a, cudaStream_t stream) {
  constexpr int VEC = kVec<T>;
  const ChannelLayout& l = a.layout;
  const Device device = a.x.device();
  GradSumsParams<T> p{};
  p.dy = static_cast<const T*>(a.dy.data_ptr());
  p.x = static_cast<const T*>(a.x.data_ptr());
  p.gate = ptr_or_null<const T>(a.gate);
  p.mean = static_cast<const float*>(a.mean.data_ptr());
  p.rstd = static_cast<const float*>(a.rstd.data_ptr());
  p.C = l.C;
  p.S = l.S;
  p.rows = l.per_channel();
  p.n_stride = a.stats.n_stride;
  p.group_size = a.stats.group_size;
  p.outer = make_outer_index(l);
  const bool aligned = all_aligned16({&a.dy, &a.x, &a.gate});
  dim3 grid, block;
  int64_t splits = 1;
  if (l.channels_inner) {
    static const int64_t fill = device_fill_blocks(grad_sums_inner_kernel<T>, device);
    const InnerPlan plan = plan_inner(p.rows, l.C, VEC, fill, true);
    p.vector_ok = l.C % VEC == 0 && aligned;
    p.chunk = plan.chunk;
    splits = plan.grid_y;
    check_launch_limits("norm backward", plan.grid_x);
    grid = dim3(unsigned(plan.grid_x), unsigned(splits));
    block = dim3(unsigned(plan.bx), unsigned(plan.by));
  } else {
    static const int64_t fill = device_fill_blocks(grad_sums_outer_kernel<T>, device);
    const OuterPlan plan = plan_outer_reduce(p.rows, l.C, VEC, fill);
    p.vector_ok = l.S % VEC == 0 && aligned;
    p.chunk = plan.chunk;
    splits = plan.splits;
    check_launch_limits("norm backward", l.C);
    grid = dim3(unsigned(l.C), unsigned(splits));
    block = dim3(kThreads);
  }
  Tensor workspace = empty({2 * splits * l.C}, DType::f32, device);
  p.part_dy = static_cast<float*>(workspace.data_ptr());
  p.part_dy_xhat = p.part_dy + splits * l.C;
  if (l.channels_inner) grad_sums_inner_kernel<T><<<grid, block, 0, stream>>>(p);
  else grad_sums_outer_kernel<T><<<grid, block, 0, stream>>>(p);
  EMBER_CUDA_LAUNCH_CHECK();
  grad_sums_finalize_kernel<<<finalize_blocks(l.C), kThreads, 0, stream>>>(
      p.part_dy, p.part_dy_xhat, splits, l.C, static_cast<float*>(a.sum_dy.data_ptr()),
      static_cast<float*>(a.sum_dy_xhat.data_ptr()));
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void launch_backward_elemt(const BatchNormBackwardArgs& a, cudaStream_t stream) {
  constexpr int VEC = kVec<T>;
  const ChannelLayout& l = a.layout;
  const Device device = a.dy.device();
  BackwardParams<T> p{};
  p.dx = ptr_or_null<T>(a.dx);
  p.dres = ptr_or_null<T>(a.d_residual);
  p.dy = static_cast<const T*>(a.dy.data_ptr());
  p.x = static_cast<const T*>(a.x.data_ptr());
  p.gate = ptr_or_null<const T>(a.gate);
  p.mean = static_cast<const float*>(a.mean.data_ptr());
  p.invstd = static_cast<const float*>(a.invstd.data_ptr());
  p.weight = ptr_or_null<const float>(a.weight);
  p.training = a.training;
  if (a.training) {
    p.sum_dy = static_cast<const float*>(a.sum_dy.data_ptr());
    p.sum_dy_xhat = static_cast<const float*>(a.sum_dy_xhat.data_ptr());
  }
  p.C = l.C;
  p.rows = l.per_channel();
  p.numel = l.numel();
  p.inv_count = 1.f / float(p.rows);
  const bool aligned = all_aligned16({&a.dx, &a.d_residual, &a.dy, &a.x, &a.gate});
  if (l.channels_inner) {
    static const int64_t fill = device_fill_blocks(bn_backward_inner_kernel<T>, device);
    const InnerPlan plan = plan_inner(p.rows, l.C, VEC, fill, false);
    p.vector_ok = l.C % VEC == 0 && aligned;
    check_launch_limits("batch_norm backward", plan.grid_x);
    bn_backward_inner_kernel<T><<<dim3(unsigned(plan.grid_x), unsigned(plan.grid_y)),
                                  dim3(unsigned(plan.bx), unsigned(plan.by)), 0, stream>>>(p);
  } else {
    static const int64_t fill = device_fill_blocks(bn_backward_outer_kernel<T>, device);
    p.vector_ok = l.S % VEC == 0 && aligned;
    p.flat = make_flat_channel(l);
    const int64_t items = p.numel / (p.vector_ok ? VEC : 1);
    const int64_t blocks = std::max<int64_t>(1, std::min(ceil_div(items, kThreads), fill));
    bn_backward_outer_kernel<T><<<unsigned(blocks), kThreads, 0, stream>>>(p);
  }
  EMBER_CUDA_LAUNCH_CHECK();
}

// ---- table entries ------------------------------------------------------------------------------

// Contract checks shared by the entries: a broken one is a bug in ops/norm.cpp, not a user error.
void check_stats_tensor(const Tensor& t, int64_t n, Device device, const char* what) {
  EMBER_INTERNAL_ASSERT(t.defined() && t.dtype() == DType::f32 && t.is_contiguous() &&
                            t.numel() == n && t.device() == device,
                        "norm CUDA kernel: ", what, " must be a contiguous float32 [", n, "] on ",
                        device.str());
}

void batch_norm_stats_cuda(const BatchNormStatsArgs& a) {
  const Device device = a.x.device();
  check_stats_tensor(a.save_mean, a.layout.C, device, "save_mean");
  check_stats_tensor(a.save_invstd, a.layout.C, device, "save_invstd");
  EMBER_INTERNAL_ASSERT(a.layout.per_channel() >= 2, "batch_norm_stats: ", a.layout.per_channel(),
                        " values per channel");
  EMBER_INTERNAL_ASSERT(!a.running_mean.defined() ||
                            (a.running_mean.is_contiguous() && a.running_var.is_contiguous() &&
                             a.running_mean.dtype() == a.running_var.dtype()),
                        "batch_norm_stats: running statistics must be contiguous and of one dtype");
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  EMBER_CUDA_NORM_DISPATCH(a.x.dtype(), "batch_norm", [&] { launch_stats<scalar_t>(a, stream); });
}

void batch_norm_apply_cuda(const BatchNormApplyArgs& a) {
  const Device device = a.x.device();
  check_stats_tensor(a.mean, a.layout.C, device, "mean");
  check_stats_tensor(a.invstd, a.layout.C, device, "invstd");
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  EMBER_CUDA_NORM_DISPATCH(a.x.dtype(), "batch_norm", [&] { launch_apply<scalar_t>(a, stream); });
}

void channel_grad_sums_cuda(const ChannelGradSumsArgs& a) {
  const Device device = a.x.device();
  check_stats_tensor(a.sum_dy, a.layout.C, device, "sum_dy");
  check_stats_tensor(a.sum_dy_xhat, a.layout.C, device, "sum_dy_xhat");
  EMBER_INTERNAL_ASSERT(a.stats.group_size >= 1, "channel_grad_sums: group_size ", a.stats.group_size);
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  EMBER_CUDA_NORM_DISPATCH(a.x.dtype(), "norm backward", [&] { launch_grad_sums<scalar_t>(a, stream); });
}

void batch_norm_backward_elemt_cuda(const BatchNormBackwardArgs& a) {
  const Device device = a.dy.device();
  check_stats_tensor(a.mean, a.layout.C, device, "mean");
  check_stats_tensor(a.invstd, a.layout.C, device, "invstd");
  if (a.training && a.dx.defined()) {
    check_stats_tensor(a.sum_dy, a.layout.C, device, "sum_dy");
    check_stats_tensor(a.sum_dy_xhat, a.layout.C, device, "sum_dy_xhat");
  }
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  EMBER_CUDA_NORM_DISPATCH(a.dy.dtype(), "batch_norm backward",
                           [&] { launch_backward_elemt<scalar_t>(a, stream); });
}

// ---- persistent training forward (the "persistent" algorithm) --------------------------------------
//
// One cooperative kernel reads x once. Block (bx, split) owns a tile: channels-inner, the channel
// vectors [bx * blockDim.x, ...) of rows [split * chunk, ...); channels-outer, the values
// [split * chunk, ...) of channel bx. Each thread keeps its part of the tile, 16-byte vectors of
// raw x, kPersistRegItems in registers and the rest in dynamic shared memory. Per-block statistics
// are computed two-pass on chip (the block mean, then the sum of squared deviations from it: no
// sum of squares), written as (mean, M2) partials, and after a grid-wide barrier every block
// merges all partials of its channels with Chan's formula, in split order (each block repeats the
// same merge, so all agree bitwise and no second barrier is needed). Split 0 publishes save_mean /
// save_invstd and updates the running statistics. y (with the residual add and ReLU tails) is
// then written from the on-chip copy.

inline constexpr int kPersistThreads = 1024;  // one block per SM (launch bounds: <= 64 registers)
inline constexpr int kPersistRegItems = 4;    // 16-byte vectors of the tile each thread keeps in registers
inline constexpr int kPersistLoadGroup = 4;   // shared-memory items loaded together (loads in flight)

template <typename T>
struct PersistentParams {
  const T* x;
  const T* residual;  // may be null
  T* y;
  const float* weight;  // may be null (1)
  const float* bias;    // may be null (0)
  float* part_mean;     // [splits, C]: written before the grid barrier, read after it
  float* part_m2;
  float* save_mean;
  float* save_invstd;
  void* running_mean;   // null: no update
  void* running_var;
  DType running_dtype;
  int64_t C, rows;      // rows = N * S, the values of one channel
  int64_t chunk;        // values per split
  int64_t splits;
  int smem_items;       // tile vectors per thread in shared memory
  float eps, momentum;
  bool relu;
  OuterIndex outer;     // channels-outer addressing
};

// Where item i of the calling thread lies: `pos` is the row (channels-inner) or the first of VEC
// values of the channel (channels-outer); `valid` how many of its VEC lanes exist (0: no item).
struct PersistItem {
  int pos;  // 32-bit: the persistent kernel applies only to tensors of fewer than 2^31 elements
  int valid;
};

template <typename T, bool INNER>
__device__ __forceinline__ PersistItem persist_item(int begin, int end, int channel_valid, int i) {
  constexpr int VEC = kVec<T>;
  PersistItem it;
  if constexpr (INNER) {
    it.pos = begin + int(threadIdx.y) + i * int(blockDim.y);
    it.valid = it.pos < end ? channel_valid : 0;
  } else {
    it.pos = begin + (int(threadIdx.x) + i * kPersistThreads) * VEC;
    it.valid = it.pos < end ? VEC : 0;  // chunk and rows are multiples of VEC on the vector path
  }
  return it;
}

// The VEC raw values of item `it` of src (x or the residual) as one 16-byte load (the persistent
// kernel runs only on the vector path: see vector_path_ok). `c` is the first channel of the
// thread's vector (channels-inner) or the block's channel.
template <typename T, bool INNER>
__device__ __forceinline__ int persist_offset(const PersistentParams<T>& p, int c, PersistItem it) {
  if constexpr (INNER) {
    return it.pos * int(p.C) + c;
  } else {
    const int n = int(p.outer.div_s.div(uint32_t(it.pos)));
    return (n * int(p.C) + c) * int(p.outer.S) + (it.pos - n * int(p.outer.S));
  }
}

template <typename T, bool INNER>
__device__ __forceinline__ AlignedVec<T, kVec<T>> persist_load(const T* src,
                                                                const PersistentParams<T>& p,
                                                                int c, PersistItem it) {
  return *reinterpret_cast<const AlignedVec<T, kVec<T>>*>(src + persist_offset<T, INNER>(p, c, it));
}

// Block totals of v[k] per channel lane, times `scale`, into out[lanes] (lanes = blockDim.x * VEC
// channels-inner, where lane tx * VEC + k sums over threadIdx.y; 1 channels-outer, summing
// everything). `red` holds (threads / 32) * lanes floats. Fixed order: deterministic.
template <int VEC, bool INNER>
__device__ __forceinline__ void persist_block_sums(float (&v)[VEC], float scale, float* red,
                                                   float* out) {
  const int bx = blockDim.x;
  const int t = threadIdx.y * bx + threadIdx.x;
  const int lane = t % 32, warp = t / 32, warps = kPersistThreads / 32;
  if constexpr (INNER) {
    // A warp holds 32 / bx rows of bx threads (bx a power of 2 <= 32): fold the rows together.
    for (int m = 16; m >= bx; m /= 2) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[k] += __shfl_xor_sync(0xffffffffu, v[k], m);
    }
    const int lanes = bx * VEC;
    if (lane < bx) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) red[warp * lanes + lane * VEC + k] = v[k];
    }
    __syncthreads();
    if (t < lanes) {
      float s = 0.f;
      for (int w = 0; w < warps; ++w) s += red[w * lanes + t];
      out[t] = s * scale;
    }
  } else {
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < VEC; ++k) s += v[k];
#pragma unroll
    for (int m = 16; m > 0; m /= 2) s += __shfl_xor_sync(0xffffffffu, s, m);
    if (lane == 0) red[warp] = s;
    __syncthreads();
    if (t == 0) {
      float total = 0.f;
      for (int w = 0; w < warps; ++w) total += red[w];
      out[0] = total * scale;
    }
  }
  __syncthreads();
}

template <typename T, bool INNER>
__global__ void __launch_bounds__(kPersistThreads, 1)
bn_persistent_forward_kernel(PersistentParams<T> p) {
  constexpr int VEC = kVec<T>;
  using Vec = AlignedVec<T, VEC>;
  extern __shared__ __align__(16) unsigned char persist_smem[];
  const int bx = blockDim.x;
  const int t = threadIdx.y * bx + threadIdx.x;
  const int lanes = INNER ? bx * VEC : 1;
  Vec* tile = reinterpret_cast<Vec*>(persist_smem);  // [smem_items][kPersistThreads]
  float* red = reinterpret_cast<float*>(tile + int64_t(p.smem_items) * kPersistThreads);
  float* lane_mean = red + (kPersistThreads / 32) * lanes;  // per channel lane of the block
  float* lane_scale = lane_mean + lanes;
  float* lane_shift = lane_scale + lanes;

  const int64_t split = blockIdx.y;
  const int begin = int(split * p.chunk);
  const int end = int(min64(begin + p.chunk, p.rows));
  // The thread's first channel (channels-inner) or the block's channel, and its existing lanes.
  const int c = INNER ? (int(blockIdx.x) * bx + int(threadIdx.x)) * VEC : int(blockIdx.x);
  const int channel_valid = INNER ? (c < p.C ? VEC : 0) : VEC;  // C % VEC == 0 (vector path)

  // Pass 1: load the tile once, keep it on chip, and sum it. The shared-memory part first, in
  // groups whose loads are all in flight together, while no register item is live yet.
  float acc[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) acc[k] = 0.f;
  for (int s0 = 0; s0 < p.smem_items; s0 += kPersistLoadGroup) {
    Vec group[kPersistLoadGroup];
#pragma unroll
    for (int g = 0; g < kPersistLoadGroup; ++g) {
      const PersistItem it =
          persist_item<T, INNER>(begin, end, channel_valid, kPersistRegItems + s0 + g);
      if (s0 + g < p.smem_items && it.valid > 0) group[g] = persist_load<T, INNER>(p.x, p, c, it);
    }
#pragma unroll
    for (int g = 0; g < kPersistLoadGroup; ++g) {
      const PersistItem it =
          persist_item<T, INNER>(begin, end, channel_valid, kPersistRegItems + s0 + g);
      if (s0 + g < p.smem_items && it.valid > 0) {
        tile[int64_t(s0 + g) * kPersistThreads + t] = group[g];
#pragma unroll
        for (int k = 0; k < VEC; ++k) acc[k] += convert<float>(group[g].v[k]);
      }
    }
  }
  Vec reg[kPersistRegItems];
#pragma unroll
  for (int i = 0; i < kPersistRegItems; ++i) {
    const PersistItem it = persist_item<T, INNER>(begin, end, channel_valid, i);
    if (it.valid > 0) reg[i] = persist_load<T, INNER>(p.x, p, c, it);
  }
#pragma unroll
  for (int i = 0; i < kPersistRegItems; ++i) {
    const PersistItem it = persist_item<T, INNER>(begin, end, channel_valid, i);
    if (it.valid > 0) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) acc[k] += convert<float>(reg[i].v[k]);
    }
  }
  const int64_t count = end - begin;  // values of each of the block's channels (>= 1)
  persist_block_sums<VEC, INNER>(acc, 1.f / float(count), red, lane_mean);

  // Pass 2 (on chip): the sum of squared deviations from the block mean, existing lanes only.
  // The thread's lanes' statistics live in shared memory (lane_* + lane0): read where used, which
  // keeps registers for the tile.
  const int lane0 = INNER ? int(threadIdx.x) * VEC : 0;
  constexpr int kLaneStep = INNER ? 1 : 0;
#pragma unroll
  for (int k = 0; k < VEC; ++k) acc[k] = 0.f;
  auto add_squares = [&](const Vec& raw, int valid) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float d = convert<float>(raw.v[k]) - lane_mean[lane0 + k * kLaneStep];
      if (k < valid) acc[k] += d * d;
    }
  };
#pragma unroll
  for (int i = 0; i < kPersistRegItems; ++i) {
    const PersistItem it = persist_item<T, INNER>(begin, end, channel_valid, i);
    if (it.valid > 0) add_squares(reg[i], it.valid);
  }
  for (int s = 0; s < p.smem_items; ++s) {
    const PersistItem it = persist_item<T, INNER>(begin, end, channel_valid, kPersistRegItems + s);
    if (it.valid > 0) add_squares(tile[int64_t(s) * kPersistThreads + t], it.valid);
  }
  persist_block_sums<VEC, INNER>(acc, 1.f, red, lane_scale);  // lane_scale holds M2 for now

  // Publish this block's partials, then wait for every block's.
  const int64_t block_c0 = INNER ? int64_t(blockIdx.x) * lanes : int64_t(blockIdx.x);
  if (t < lanes && block_c0 + t < p.C) {
    p.part_mean[split * p.C + block_c0 + t] = lane_mean[t];
    p.part_m2[split * p.C + block_c0 + t] = lane_scale[t];
  }
  cooperative_groups::this_grid().sync();

  // Merge: a warp per channel lane (lane l of the warp takes splits l, l + 32, ...), then a fixed
  // butterfly. The partials were written by other blocks in this launch: read them through L2.
  {
    const int lane = t % 32, warp = t / 32;
    for (int l = warp; l < lanes; l += kPersistThreads / 32) {
      const int64_t ch = block_c0 + l;
      if (ch >= p.C) break;  // uniform per warp; later lanes are further out
      float m = 0.f, m2 = 0.f;
      int64_t n = 0;
      for (int64_t i = lane; i < p.splits; i += 32)
        chan_merge(m, m2, n, __ldcg(p.part_mean + i * p.C + ch), __ldcg(p.part_m2 + i * p.C + ch),
                   min64(p.chunk, p.rows - i * p.chunk));
#pragma unroll
      for (int o = 16; o > 0; o /= 2) {
        const float mean_b = __shfl_down_sync(0xffffffffu, m, o);
        const float m2_b = __shfl_down_sync(0xffffffffu, m2, o);
        const int64_t n_b = __shfl_down_sync(0xffffffffu, n, o);
        chan_merge(m, m2, n, mean_b, m2_b, n_b);
      }
      if (lane == 0) {
        const float invstd = rsqrtf(m2 / float(p.rows) + p.eps);
        const float scale = invstd * (p.weight != nullptr ? p.weight[ch] : 1.f);
        lane_mean[l] = m;
        lane_scale[l] = scale;
        lane_shift[l] = p.bias != nullptr ? p.bias[ch] : 0.f;
        if (split == 0) {
          p.save_mean[ch] = m;
          p.save_invstd[ch] = invstd;
          if (p.running_mean != nullptr) {
            const float unbiased_var = m2 / float(p.rows - 1);
            const float rm = load_param(p.running_mean, p.running_dtype, ch);
            const float rv = load_param(p.running_var, p.running_dtype, ch);
            store_param(p.running_mean, p.running_dtype, ch, (1.f - p.momentum) * rm + p.momentum * m);
            store_param(p.running_var, p.running_dtype, ch,
                        (1.f - p.momentum) * rv + p.momentum * unbiased_var);
          }
        }
      }
    }
  }
  __syncthreads();

  // Write y from the on-chip tile (lanes of channels >= C are computed but never stored).
  auto write_item = [&](const Vec& raw, PersistItem it) {
    float v[VEC];
    Vec r;
    if (p.residual != nullptr) r = persist_load<T, INNER>(p.residual, p, c, it);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const int l = lane0 + k * kLaneStep;
      float o = (convert<float>(raw.v[k]) - lane_mean[l]) * lane_scale[l] + lane_shift[l];
      if (p.residual != nullptr) o += convert<float>(r.v[k]);
      v[k] = p.relu ? relu(o) : o;
    }
    store_floats<T, VEC>(p.y + persist_offset<T, INNER>(p, c, it), true, VEC, v);
  };
#pragma unroll
  for (int i = 0; i < kPersistRegItems; ++i) {
    const PersistItem it = persist_item<T, INNER>(begin, end, channel_valid, i);
    if (it.valid > 0) write_item(reg[i], it);
  }
  for (int s = 0; s < p.smem_items; ++s) {
    const PersistItem it = persist_item<T, INNER>(begin, end, channel_valid, kPersistRegItems + s);
    if (it.valid > 0) write_item(tile[int64_t(s) * kPersistThreads + t], it);
  }
}

// How the persistent kernel covers a problem; ok = false when it does not apply (the tiles do not
// fit on chip, the grid cannot be resident at once, or the device cannot launch cooperatively).
struct PersistentPlan {
  bool ok = false;
  int bx = 1, by = 1;
  int64_t grid_x = 1, splits = 1, chunk = 1;
  int smem_items = 0;
  size_t smem_bytes = 0;
};

template <typename T>
auto persistent_kernel(bool channels_inner) {
  return channels_inner ? bn_persistent_forward_kernel<T, true> : bn_persistent_forward_kernel<T, false>;
}

// What a device allows one instantiation of the kernel, queried once per (kernel, device): the
// dynamic shared memory it may request (the opt-in maximum less its static shared memory; the
// attribute is raised to it once) and the blocks per SM it gets when requesting all of it. One
// block per SM at the maximum means one at any smaller request, so a grid of at most
// sm_count * resident_blocks blocks is co-resident whatever the plan's shared memory.
struct PersistentKernelLimits {
  bool cooperative = false;
  int64_t max_dynamic_smem = 0;
  int64_t resident_blocks = 0;  // on the whole device
};

template <typename T>
PersistentKernelLimits persistent_kernel_limits(bool channels_inner, Device device) {
  static std::mutex mutex;
  static std::map<std::pair<int, bool>, PersistentKernelLimits> known;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(int(device.index), channels_inner);
  if (auto it = known.find(key); it != known.end()) return it->second;
  PersistentKernelLimits limits;
  const DeviceProperties& props = device_properties(device.index);
  int cooperative = 0;
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device.index));
  if (cooperative != 0 && props.sm_count > 0) {
    const auto kernel = persistent_kernel<T>(channels_inner);
    DeviceGuard guard(device);
    cudaFuncAttributes attributes{};
    EMBER_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    const int64_t dynamic = int64_t(props.shared_memory_per_block_optin) - int64_t(attributes.sharedSizeBytes);
    if (dynamic > 0) {
      EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dynamic)));
      int per_sm = 0;
      EMBER_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kPersistThreads,
                                                                     size_t(dynamic)));
      limits.cooperative = true;
      limits.max_dynamic_smem = dynamic;
      limits.resident_blocks = int64_t(per_sm) * props.sm_count;
    }
  }
  known.emplace(key, limits);
  return limits;
}

// Depends only on the layout, the dtype and the device (what the algorithm key holds).
template <typename T>
PersistentPlan plan_persistent(const ChannelLayout& l, Device device) {
  constexpr int VEC = kVec<T>;
  PersistentPlan plan;
  if (!fits_fast_divmod(l.numel())) return plan;  // 32-bit indexing (and a tile this large never fits)
  const PersistentKernelLimits limits = persistent_kernel_limits<T>(l.channels_inner, device);
  // Blocks that can run at once: the grid never needs more than one per SM's worth.
  const int64_t blocks = limits.resident_blocks;
  if (!limits.cooperative || blocks <= 0) return plan;
  const int64_t rows = l.per_channel();
  int64_t items = 0;
  int lanes = 1;
  if (l.channels_inner) {
    const int64_t cvecs = ceil_div(l.C, VEC);
    plan.bx = std::min(next_pow2(cvecs), 32);
    plan.by = kPersistThreads / plan.bx;
    plan.grid_x = ceil_div(cvecs, plan.bx);
    if (plan.grid_x > blocks) return plan;
    // As many row splits as the channel blocks leave room for, each at least one row per walker.
    const int64_t splits = std::clamp<int64_t>(blocks / plan.grid_x, 1, ceil_div(rows, plan.by));
    plan.chunk = ceil_div(rows, splits);
    items = ceil_div(plan.chunk, plan.by);
    lanes = plan.bx * VEC;
  } else {
    plan.bx = kPersistThreads;
    plan.by = 1;
    plan.grid_x = l.C;
    if (l.C > blocks) return plan;
    const int64_t splits =
        std::clamp<int64_t>(blocks / l.C, 1, ceil_div(rows, int64_t(kPersistThreads) * VEC));
    // A multiple of VEC, so that on the vector path no vector straddles two splits.
    plan.chunk = ceil_div(ceil_div(rows, splits), VEC) * VEC;
    items = ceil_div(plan.chunk, int64_t(kPersistThreads) * VEC);
  }
  plan.splits = ceil_div(rows, plan.chunk);
  const int64_t smem_items = std::max<int64_t>(0, items - kPersistRegItems);
  const int64_t smem = smem_items * kPersistThreads * int64_t(sizeof(AlignedVec<T, VEC>)) +
                       int64_t(kPersistThreads / 32 * lanes + 3 * lanes) * int64_t(sizeof(float));
  if (smem > limits.max_dynamic_smem) return plan;
  plan.smem_items = int(smem_items);
  plan.smem_bytes = size_t(smem);
  plan.ok = plan.grid_x * plan.splits <= blocks;
  return plan;
}

template <typename T>
void launch_persistent(const BatchNormForwardProblem& a, cudaStream_t stream) {
  const ChannelLayout& l = a.layout;
  const Device device = a.x.device();
  const PersistentPlan plan = plan_persistent<T>(l, device);
  EMBER_INTERNAL_ASSERT(plan.ok, "batch_norm: the persistent kernel was chosen for a problem it "
                                 "does not apply to");
  PersistentParams<T> p{};
  p.x = static_cast<const T*>(a.x.data_ptr());
  p.residual = ptr_or_null<const T>(a.residual);
  p.y = static_cast<T*>(a.y.data_ptr());
  p.weight = ptr_or_null<const float>(a.weight);
  p.bias = ptr_or_null<const float>(a.bias);
  p.save_mean = static_cast<float*>(a.save_mean.data_ptr());
  p.save_invstd = static_cast<float*>(a.save_invstd.data_ptr());
  if (a.running_mean.defined()) {
    p.running_mean = a.running_mean.data_ptr();
    p.running_var = a.running_var.data_ptr();
    p.running_dtype = a.running_mean.dtype();
  }
  p.C = l.C;
  p.rows = l.per_channel();
  p.chunk = plan.chunk;
  p.splits = plan.splits;
  p.smem_items = plan.smem_items;
  p.eps = float(a.eps);
  p.momentum = float(a.momentum);
  p.relu = a.relu;
  p.outer = make_outer_index(l);
  // Partials: workspace from the caching allocator, released (stream-ordered) on return.
  Tensor workspace = empty({2 * plan.splits * l.C}, DType::f32, device);
  p.part_mean = static_cast<float*>(workspace.data_ptr());
  p.part_m2 = p.part_mean + plan.splits * l.C;
  void* args[] = {&p};
  EMBER_CUDA_CHECK(cudaLaunchCooperativeKernel(
      reinterpret_cast<const void*>(persistent_kernel<T>(l.channels_inner)),
      dim3(unsigned(plan.grid_x), unsigned(plan.splits)), dim3(unsigned(plan.bx), unsigned(plan.by)),
      args, plan.smem_bytes, stream));
  EMBER_CUDA_LAUNCH_CHECK();
}

bool is_cuda_norm_dtype(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

// The persistent kernel moves whole 16-byte vectors only (scalar fallbacks would cost it the
// registers that hold the tile): x, y and the residual 16-byte aligned, and the vectors inside one
// channel row (channels-inner: C a multiple of the vector width) or one sample's plane
// (channels-outer: S a multiple of it). Alignment and sizes are in the algorithm key.
bool vector_path_ok(const BatchNormForwardProblem& p) {
  const int64_t vec = 16 / int64_t(element_size(p.x.dtype()));
  const int64_t along = p.layout.channels_inner ? p.layout.C : p.layout.S;
  return along % vec == 0 && all_aligned16({&p.x, &p.y, &p.residual});
}

dispatch::Algorithm<BatchNormForwardProblem> persistent_algorithm() {
  dispatch::Algorithm<BatchNormForwardProblem> a;
  a.name = "persistent";
  a.deterministic = true;
  a.applies = [](const BatchNormForwardProblem& p) {
    if (!is_cuda_norm_dtype(p.x.dtype()) || !vector_path_ok(p)) return false;
    bool ok = false;
    EMBER_CUDA_NORM_DISPATCH(p.x.dtype(), "batch_norm",
                             [&] { ok = plan_persistent<scalar_t>(p.layout, p.device()).ok; });
    return ok;
  };
  // The units of two_pass's estimate: bytes moved (x read once, y written, the residual read),
  // plus one launch and the grid barrier counted as 2 MB each.
  a.heuristic_cost = [](const BatchNormForwardProblem& p) {
    const double bytes = double(p.layout.numel()) * double(element_size(p.x.dtype()));
    return bytes * (p.residual.defined() ? 3.0 : 2.0) + 2 * 2e6;
  };
  a.run = [](const BatchNormForwardProblem& p, void*) {
    check_stats_tensor(p.save_mean, p.layout.C, p.device(), "save_mean");
    check_stats_tensor(p.save_invstd, p.layout.C, p.device(), "save_invstd");
    EMBER_INTERNAL_ASSERT(p.layout.per_channel() >= 2, "batch_norm persistent: ",
                          p.layout.per_channel(), " values per channel");
    DeviceGuard guard(p.device());
    cudaStream_t stream = stream_of(p.device());
    EMBER_CUDA_NORM_DISPATCH(p.x.dtype(), "batch_norm",
                             [&] { launch_persistent<scalar_t>(p, stream); });
  };
  return a;
}

}  // namespace
}  // namespace ember::cuda::norm

namespace ember {
EMBER_REGISTER_KERNEL(batch_norm_stats_kernel, CUDA, cuda::norm::kCudaNormTypes,
                      &cuda::norm::batch_norm_stats_cuda);
EMBER_REGISTER_KERNEL(batch_norm_apply_kernel, CUDA, cuda::norm::kCudaNormTypes,
                      &cuda::norm::batch_norm_apply_cuda);
EMBER_REGISTER_KERNEL(channel_grad_sums_kernel, CUDA, cuda::norm::kCudaNormTypes,
                      &cuda::norm::channel_grad_sums_cuda);
EMBER_REGISTER_KERNEL(batch_norm_backward_elemt_kernel, CUDA, cuda::norm::kCudaNormTypes,
                      &cuda::norm::batch_norm_backward_elemt_cuda);
EMBER_REGISTER_ALGORITHM(BatchNormForwardProblem, "batch_norm", forward, CUDA,
                         batch_norm_two_pass_algorithm());
EMBER_REGISTER_ALGORITHM(BatchNormForwardProblem, "batch_norm", forward, CUDA,
                         cuda::norm::persistent_algorithm());
}  // namespace ember
