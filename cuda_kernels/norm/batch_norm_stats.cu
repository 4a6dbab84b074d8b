// The CUDA batch-norm statistics kernel (batch_norm_stats of kernel_interface/norm.h): per-channel
// mean and invstd of x and the running-statistics update. float32, float16 and bfloat16 inputs,
// float32 statistics; running statistics in float32 or the input's dtype.
//
// Channels-inner layouts ([N*S, C], NHWC and 2-D): a thread owns a vector of 16 bytes of
// consecutive channels and walks rows (blockDim = (channel vectors, rows), so a warp reads whole
// rows); the row walkers merge over threadIdx.y and the rows split over grid.y. Channels-outer
// ([N, C, S], NCHW): a block per (channel, slice of its N*S values). Each split writes one
// partial per channel to a workspace and a finalize kernel merges the partials of each channel in
// a fixed order: no atomics, so results are the same run to run. Welford within a thread (lanes
// of a thread share one count, so one reciprocal per row serves all its channels), Chan merges
// across threads and splits; never a sum and a sum of squares.
#include "ember/cuda_kernels/common/dependent_launch.cuh"
#include "ember/cuda_kernels/norm/batch_norm_plan.cuh"
#include "ember/cuda_kernels/norm/norm.cuh"

namespace ember::cuda::norm {
namespace {

// ---- batch statistics ---------------------------------------------------------------------------

template <typename T>
struct StatsParams {
  const T* x;
  int64_t C, rows;  // rows = N * S (the values per channel)
  int64_t chunk;    // values per split (rows for channels-inner)
  bool vector_ok;
  OuterIndex outer;
  float* part_mean;  // [splits, C]
  float* part_m2;    // [splits, C]
};

// Channels-inner statistics. blockDim = (channel vectors, row walkers), grid = (channel-vector
// blocks, row splits). Each thread keeps VEC Welford lanes (its channels) with one shared count.
template <typename T>
__global__ void __launch_bounds__(kThreads) bn_stats_inner_kernel(StatsParams<T> p) {
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
      for (int u = 0; u < 4; ++u)
        load_floats<T, VEC>(base + (r + u * by) * p.C, p.vector_ok, valid, v[u]);
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
__global__ void __launch_bounds__(kThreads) bn_stats_outer_kernel(StatsParams<T> p) {
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

template <typename T>
struct StatsFinalizeParams {
  const float* part_mean;
  const float* part_m2;
  int64_t splits, C, rows, chunk;  // split i holds min(chunk, rows - i * chunk) values
  ChannelStatsOut<T> out;          // running statistics in float32 or T
};

// The statistics finalize (see finalize_block for the block's shape); templated on the input dtype
// T only for the running statistics, which are float32 or T.
template <typename T>
__global__ void __launch_bounds__(kFinalizeChannels* kFinalizeMaxWalkers)
    bn_stats_finalize_kernel(StatsFinalizeParams<T> p) {
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

// ---- launcher and table entry -------------------------------------------------------------------

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
  if (l.channels_inner)
    launch_dependent(bn_stats_inner_kernel<T>, r.grid, r.block, 0, stream, p);
  else
    launch_dependent(bn_stats_outer_kernel<T>, r.grid, r.block, 0, stream, p);
  EMBER_CUDA_LAUNCH_CHECK();

  StatsFinalizeParams<T> f{};
  f.part_mean = p.part_mean;
  f.part_m2 = p.part_m2;
  f.splits = splits;
  f.C = l.C;
  f.rows = p.rows;
  f.chunk = p.chunk;
  f.out = channel_stats_out<T>(a);
  launch_dependent(bn_stats_finalize_kernel<T>, dim3(finalize_grid(l.C)), finalize_block(splits), 0,
                   stream, f);
  EMBER_CUDA_LAUNCH_CHECK();
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
  dispatch_floating<kNormFloatingTypes>(a.x.dtype(), "batch_norm",
                                        [&](auto tag) { launch_stats<decltype(tag)>(a, stream); });
}

}  // namespace
}  // namespace ember::cuda::norm

namespace ember {
EMBER_REGISTER_KERNEL(batch_norm_stats_kernel, CUDA, cuda::norm::kCudaNormTypes,
                      &cuda::norm::batch_norm_stats_cuda);
}  // namespace ember
