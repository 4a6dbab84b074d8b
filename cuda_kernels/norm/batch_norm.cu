// CUDA batch-norm kernels behind the tables of ops/norm.h: batch_norm_stats (batch statistics and
// the running-statistics update), batch_norm_apply (normalize, optionally + residual and ReLU),
// channel_grad_sums (the per-channel sums of backward, shared with layer / group norm) and
// batch_norm_backward_elemt. float32, float16 and bfloat16 inputs, float32 statistics, weight and
// bias in float32 or the input's dtype (NormParam: a 16-bit model's parameters need no conversion).
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
// The training forward runs through the "batch_norm.forward" algorithm slot (ops/norm.h), where
// CUDA registers "two_pass": the statistics and apply kernels above (and "single_read", in
// cuda_kernels/norm/batch_norm_single_read.cu).
#include "ember/cuda_kernels/norm/batch_norm.cuh"
#include "ember/cuda_kernels/common/dependent_launch.cuh"

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
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
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
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
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
  ChannelStatsOut out;
};

// Finalize kernels (statistics and gradient sums) merge the [splits, C] partials of each channel:
// block (kFinalizeChannels channels, by split walkers; by a power of 2), so that consecutive
// threads read consecutive channels of a split row (coalesced) and the splits' loads are spread
// over many threads (a handful each, issued together) instead of a chain per warp lane. Walker w
// merges splits w, w + by, ... in order, then a tree over threadIdx.y: a fixed order, so results
// are the same run to run.
constexpr int kFinalizeChannels = 8;
constexpr int kFinalizeMaxWalkers = 128;

dim3 finalize_block(int64_t splits) {
  return dim3(kFinalizeChannels,
              unsigned(std::min<int64_t>(next_pow2(std::max<int64_t>(splits, 1)), kFinalizeMaxWalkers)));
}
unsigned finalize_grid(int64_t C) { return unsigned(ceil_div(C, kFinalizeChannels)); }

// The tree over threadIdx.y of the walkers' entries in shared memory ([y][x], one per thread):
// `merge(t, o)` folds thread o's entry into thread t's. Every thread of the block calls it.
template <typename Merge>
__device__ __forceinline__ void finalize_tree(Merge merge) {
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  __syncthreads();
  for (int half = blockDim.y / 2; half > 0; half /= 2) {
    if (int(threadIdx.y) < half) merge(t, t + half * int(blockDim.x));
    __syncthreads();
  }
}

__global__ void __launch_bounds__(kFinalizeChannels * kFinalizeMaxWalkers)
bn_stats_finalize_kernel(StatsFinalizeParams p) {
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
  __shared__ float sh_mean[kFinalizeChannels * kFinalizeMaxWalkers];
  __shared__ float sh_m2[kFinalizeChannels * kFinalizeMaxWalkers];
  __shared__ int64_t sh_n[kFinalizeChannels * kFinalizeMaxWalkers];
  const int64_t c = int64_t(blockIdx.x) * kFinalizeChannels + threadIdx.x;
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  float mean = 0.f, m2 = 0.f;
  int64_t n = 0;
  if (c < p.C) {
#pragma unroll 4
    for (int64_t i = threadIdx.y; i < p.splits; i += blockDim.y)
      chan_merge(mean, m2, n, p.part_mean[i * p.C + c], p.part_m2[i * p.C + c],
                 min64(p.chunk, p.rows - i * p.chunk));
  }
  sh_mean[t] = mean;
  sh_m2[t] = m2;
  sh_n[t] = n;
  finalize_tree([&](int a, int b) {
    float ma = sh_mean[a], m2a = sh_m2[a];
    int64_t na = sh_n[a];
    chan_merge(ma, m2a, na, sh_mean[b], sh_m2[b], sh_n[b]);
    sh_mean[a] = ma;
    sh_m2[a] = m2a;
    sh_n[a] = na;
  });
  if (threadIdx.y != 0 || c >= p.C) return;
  mean = sh_mean[t];
  m2 = sh_m2[t];
  p.out.store(c, mean, m2, p.rows);
}

// ---- apply ------------------------------------------------------------------------------------

template <typename T>
struct ApplyParams {
  T* y;
  const T* x;
  const T* residual;  // may be null
  const float* mean;
  const float* invstd;
  NormParam<T> weight;  // may be absent (1)
  NormParam<T> bias;    // may be absent (0)
  int64_t C, rows;      // channels-inner: rows = N * S
  int64_t numel;
  bool vector_ok, relu;
  FlatChannel flat;     // channels-outer
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
bn_apply_inner_kernel(ApplyParams<T> p) {
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
  constexpr int VEC = kVec<T>;
  const int64_t c0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
  if (c0 >= p.C) return;
  const int valid = int(min64(VEC, p.C - c0));
  float mean[VEC], scale[VEC], shift[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const int64_t c = k < valid ? c0 + k : c0;
    mean[k] = p.mean[c];
    scale[k] = p.invstd[c] * (p.weight.absent() ? 1.f : p.weight.at(c));
    shift[k] = p.bias.absent() ? 0.f : p.bias.at(c);
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
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
  constexpr int VEC = kVec<T>;
  const int64_t step = int64_t(gridDim.x) * kThreads;
  const int64_t first = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t per_item = p.vector_ok ? VEC : 1;
  const int64_t items = p.numel / per_item;
  for (int64_t item = first; item < items; item += step) {
    const int64_t i = item * per_item;
    const int64_t c = p.flat.of(i);
    const float m = p.mean[c];
    const float scale = p.invstd[c] * (p.weight.absent() ? 1.f : p.weight.at(c));
    const float shift = p.bias.absent() ? 0.f : p.bias.at(c);
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
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
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
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
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

// The sums' finalize (see bn_stats_finalize_kernel for the block's shape).
__global__ void __launch_bounds__(kFinalizeChannels * kFinalizeMaxWalkers)
grad_sums_finalize_kernel(const float* part_dy, const float* part_dy_xhat, int64_t splits,
                          int64_t C, float* sum_dy, float* sum_dy_xhat) {
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
  __shared__ float sh_a[kFinalizeChannels * kFinalizeMaxWalkers];
  __shared__ float sh_b[kFinalizeChannels * kFinalizeMaxWalkers];
  const int64_t c = int64_t(blockIdx.x) * kFinalizeChannels + threadIdx.x;
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  float a = 0.f, b = 0.f;
  if (c < C) {
#pragma unroll 4
    for (int64_t i = threadIdx.y; i < splits; i += blockDim.y) {
      a += part_dy[i * C + c];
      b += part_dy_xhat[i * C + c];
    }
  }
  sh_a[t] = a;
  sh_b[t] = b;
  finalize_tree([&](int x, int y) {
    sh_a[x] += sh_a[y];
    sh_b[x] += sh_b[y];
  });
  if (threadIdx.y == 0 && c < C) {
    sum_dy[c] = sh_a[t];
    sum_dy_xhat[c] = sh_b[t];
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
  NormParam<T> weight;       // may be absent (1)
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
  k.k_out = invstd * (p.weight.absent() ? 1.f : p.weight.at(c));
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
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
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
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
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

// Blocks of `kernel` (kThreads threads each) resident on the whole of `device` at once, measured
// once per (kernel, device): a second GPU of another kind gets its own count. `device` must be
// the current device (the occupancy query reads the current one).
template <auto kernel>
int64_t device_fill_blocks(Device device) {
  static PerDevice<int64_t> fill;
  return fill.get(device.index, [](int d) {
    int per_sm = 0;
    EMBER_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0));
    return int64_t(std::max(per_sm, 1)) * std::max(device_properties(d).sm_count, 1);
  });
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
    // At least 2 rows per thread: small layers need the blocks. CIFAR ResNet-18's 8x8x256 and
    // 4x4x512 backward sums at 8 rows per thread ran 128 and 64 blocks on 132 SMs, latency-bound
    // (14-17 and 11-17 us for 13 and 6 MB, H200); more partials cost the finalize kernels little
    // (bn_stats_finalize: 3.7 us for 32 splits, 5.3 for 396).
    const int64_t max_splits = std::max<int64_t>(1, ceil_div(rows, int64_t(p.by) * 2));
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

void check_launch_limits(const char* op, int64_t grid_x) {
  EMBER_CHECK_STATUS(grid_x <= int64_t(std::numeric_limits<int32_t>::max()), not_supported, op,
                     ": too many channels for one CUDA grid (", grid_x, " blocks)");
}

// True when every thread's VEC values can be one 16-byte access: the dim a vector runs along (C
// channels-inner, S channels-outer) is a multiple of VEC and the tensors are 16-byte aligned.
bool vectorizable(const ChannelLayout& l, int vec, bool aligned) {
  return aligned && (l.channels_inner ? l.C : l.S) % vec == 0;
}

// Launch of a per-channel reduction (batch statistics, gradient sums): channels-inner, grid
// (channel-vector blocks, row splits) of (bx, by) threads; channels-outer, grid (C, splits) of
// kThreads. Each split takes `chunk` values of its channel and writes one partial per channel.
struct ReductionLaunch {
  dim3 grid, block;
  int64_t splits = 1, chunk = 1;
};

template <auto inner_kernel, auto outer_kernel>
ReductionLaunch plan_reduction(const ChannelLayout& l, int vec, Device device, const char* op) {
  ReductionLaunch r;
  if (l.channels_inner) {
    const InnerPlan plan =
        plan_inner(l.per_channel(), l.C, vec, device_fill_blocks<inner_kernel>(device), true);
    check_launch_limits(op, plan.grid_x);
    r.chunk = plan.chunk;
    r.splits = plan.grid_y;
    r.grid = dim3(unsigned(plan.grid_x), unsigned(r.splits));
    r.block = dim3(unsigned(plan.bx), unsigned(plan.by));
  } else {
    const OuterPlan plan =
        plan_outer_reduce(l.per_channel(), l.C, vec, device_fill_blocks<outer_kernel>(device));
    check_launch_limits(op, l.C);
    r.chunk = plan.chunk;
    r.splits = plan.splits;
    r.grid = dim3(unsigned(l.C), unsigned(r.splits));
    r.block = dim3(kThreads);
  }
  return r;
}

// Launch of an elementwise pass (apply, backward_elemt): channels-inner, plan_inner's grid stride
// over rows; channels-outer, flat over the tensor in items of `vec` values (1 off the vector
// path), one wave of the device at most.
struct ElementwiseLaunch {
  dim3 grid, block;
};

template <auto inner_kernel, auto outer_kernel>
ElementwiseLaunch plan_elementwise(const ChannelLayout& l, int vec, bool vector_ok, Device device,
                                   const char* op) {
  ElementwiseLaunch e;
  if (l.channels_inner) {
    const InnerPlan plan =
        plan_inner(l.per_channel(), l.C, vec, device_fill_blocks<inner_kernel>(device), false);
    check_launch_limits(op, plan.grid_x);
    e.grid = dim3(unsigned(plan.grid_x), unsigned(plan.grid_y));
    e.block = dim3(unsigned(plan.bx), unsigned(plan.by));
  } else {
    const int64_t items = l.numel() / (vector_ok ? vec : 1);
    const int64_t blocks = std::max<int64_t>(
        1, std::min(ceil_div(items, kThreads), device_fill_blocks<outer_kernel>(device)));
    e.grid = dim3(unsigned(blocks));
    e.block = dim3(kThreads);
  }
  return e;
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
  p.vector_ok = vectorizable(l, VEC, all_aligned16({&a.x}));
  if (!l.channels_inner) p.outer = make_outer_index(l);
  const ReductionLaunch r = plan_reduction<bn_stats_inner_kernel<T>, bn_stats_outer_kernel<T>>(
      l, VEC, device, "batch_norm");
  p.chunk = r.chunk;
  const int64_t splits = r.splits;
  // Partials: workspace from the caching allocator, released (stream-ordered) on return.
  Tensor workspace = empty({2 * splits * l.C}, DType::f32, device);
  p.part_mean = static_cast<float*>(workspace.data_ptr());
  p.part_m2 = p.part_mean + splits * l.C;
  if (l.channels_inner) launch_dependent(bn_stats_inner_kernel<T>, r.grid, r.block, 0, stream, p);
  else launch_dependent(bn_stats_outer_kernel<T>, r.grid, r.block, 0, stream, p);
  EMBER_CUDA_LAUNCH_CHECK();

  StatsFinalizeParams f{};
  f.part_mean = p.part_mean;
  f.part_m2 = p.part_m2;
  f.splits = splits;
  f.C = l.C;
  f.rows = p.rows;
  f.chunk = p.chunk;
  f.out = channel_stats_out(a);
  launch_dependent(bn_stats_finalize_kernel, dim3(finalize_grid(l.C)), finalize_block(splits), 0, stream, f);
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
  p.weight = norm_param<T>(a.weight, a.x.dtype());
  p.bias = norm_param<T>(a.bias, a.x.dtype());
  p.C = l.C;
  p.rows = l.per_channel();
  p.numel = l.numel();
  p.relu = a.relu;
  p.vector_ok = vectorizable(l, VEC, all_aligned16({&a.y, &a.x, &a.residual}));
  if (!l.channels_inner) p.flat = make_flat_channel(l);
  const ElementwiseLaunch e = plan_elementwise<bn_apply_inner_kernel<T>, bn_apply_outer_kernel<T>>(
      l, VEC, p.vector_ok, device, "batch_norm");
  if (l.channels_inner) launch_dependent(bn_apply_inner_kernel<T>, e.grid, e.block, 0, stream, p);
  else launch_dependent(bn_apply_outer_kernel<T>, e.grid, e.block, 0, stream, p);
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
  p.vector_ok = vectorizable(l, VEC, all_aligned16({&a.dy, &a.x, &a.gate}));
  const ReductionLaunch r = plan_reduction<grad_sums_inner_kernel<T>, grad_sums_outer_kernel<T>>(
      l, VEC, device, "norm backward");
  p.chunk = r.chunk;
  const int64_t splits = r.splits;
  Tensor workspace = empty({2 * splits * l.C}, DType::f32, device);
  p.part_dy = static_cast<float*>(workspace.data_ptr());
  p.part_dy_xhat = p.part_dy + splits * l.C;
  if (l.channels_inner) launch_dependent(grad_sums_inner_kernel<T>, r.grid, r.block, 0, stream, p);
  else launch_dependent(grad_sums_outer_kernel<T>, r.grid, r.block, 0, stream, p);
  EMBER_CUDA_LAUNCH_CHECK();
  launch_grad_sums_finalize(p.part_dy, p.part_dy_xhat, splits, l.C, static_cast<float*>(a.sum_dy.data_ptr()),
                            static_cast<float*>(a.sum_dy_xhat.data_ptr()), stream);
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
  p.weight = norm_param<T>(a.weight, a.dy.dtype());
  p.training = a.training;
  if (a.training) {
    p.sum_dy = static_cast<const float*>(a.sum_dy.data_ptr());
    p.sum_dy_xhat = static_cast<const float*>(a.sum_dy_xhat.data_ptr());
  }
  p.C = l.C;
  p.rows = l.per_channel();
  p.numel = l.numel();
  p.inv_count = 1.f / float(p.rows);
  p.vector_ok = vectorizable(l, VEC, all_aligned16({&a.dx, &a.d_residual, &a.dy, &a.x, &a.gate}));
  if (!l.channels_inner) p.flat = make_flat_channel(l);
  const ElementwiseLaunch e =
      plan_elementwise<bn_backward_inner_kernel<T>, bn_backward_outer_kernel<T>>(
          l, VEC, p.vector_ok, device, "batch_norm backward");
  if (l.channels_inner) launch_dependent(bn_backward_inner_kernel<T>, e.grid, e.block, 0, stream, p);
  else launch_dependent(bn_backward_outer_kernel<T>, e.grid, e.block, 0, stream, p);
  EMBER_CUDA_LAUNCH_CHECK();
}

// ---- table entries ------------------------------------------------------------------------------

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
  dispatch_floating<kNormFloatingTypes>(a.x.dtype(), "batch_norm",
                                        [&](auto tag) { launch_stats<decltype(tag)>(a, stream); });
}

void batch_norm_apply_cuda(const BatchNormApplyArgs& a) {
  const Device device = a.x.device();
  check_stats_tensor(a.mean, a.layout.C, device, "mean");
  check_stats_tensor(a.invstd, a.layout.C, device, "invstd");
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  dispatch_floating<kNormFloatingTypes>(a.x.dtype(), "batch_norm",
                                        [&](auto tag) { launch_apply<decltype(tag)>(a, stream); });
}

void channel_grad_sums_cuda(const ChannelGradSumsArgs& a) {
  const Device device = a.x.device();
  check_stats_tensor(a.sum_dy, a.layout.C, device, "sum_dy");
  check_stats_tensor(a.sum_dy_xhat, a.layout.C, device, "sum_dy_xhat");
  EMBER_INTERNAL_ASSERT(a.stats.group_size >= 1, "channel_grad_sums: group_size ", a.stats.group_size);
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  dispatch_floating<kNormFloatingTypes>(a.x.dtype(), "norm backward", [&](auto tag) {
    launch_grad_sums<decltype(tag)>(a, stream);
  });
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
  dispatch_floating<kNormFloatingTypes>(a.dy.dtype(), "batch_norm backward", [&](auto tag) {
    launch_backward_elemt<decltype(tag)>(a, stream);
  });
}

}  // namespace

void launch_grad_sums_finalize(const float* part_dy, const float* part_dy_xhat, int64_t splits,
                               int64_t C, float* sum_dy, float* sum_dy_xhat, cudaStream_t stream) {
  launch_dependent(grad_sums_finalize_kernel, dim3(finalize_grid(C)), finalize_block(splits), 0, stream,
                   part_dy, part_dy_xhat, splits, C, sum_dy, sum_dy_xhat);
  EMBER_CUDA_LAUNCH_CHECK();
}

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
}  // namespace ember
