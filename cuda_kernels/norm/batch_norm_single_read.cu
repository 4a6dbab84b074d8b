// "single_read": the CUDA training forward of batch norm that reads x once (the slot
// "batch_norm.forward" of kernel_interface/norm.h, beside two_pass's statistics + apply, which read
// it twice). Channels-inner layouts (NHWC, [N, C]) whose rows are whole 16-byte vectors.
//
// One cooperative launch, a block of kSingleThreads per SM, walks the channels in waves: a wave is
// a column band of `wave_vecs` 16-byte vectors of every row (32 bytes or more: whole DRAM
// sectors), as wide as lets the whole band of the tensor fit in the blocks' shared memory (block
// b holds rows [b * rows_per_block, ...)). Per wave:
//   1. the band arrives in shared memory by cp.async (issued while the previous wave's output was
//      being written),
//   2. each thread folds its slots into Welford states, the block merges them (warp shuffles, then
//      the holders in order) and writes one partial per channel,
//   3. a grid barrier; the blocks' partials of each channel are merged in one fixed order (so
//      results are the same run to run): for bands of up to 64 channels every block merges all of
//      them (block 0 writes save_mean, save_invstd and the running statistics); wider bands have
//      each channel merged by one block, which writes its statistics, and a second barrier
//      publishes them,
//   4. each thread normalizes its slots from shared memory (+ residual, ReLU) and stores y, then
//      issues the next wave's loads into the same slots.
// Bytes moved: x read once, y written once (two_pass: x twice); the price is one grid barrier and
// one partial merge per wave, and the next wave's loads wait for them. The heuristic takes it when
// the whole activation fits in one wave (every batch-norm layer of CIFAR ResNet-18 at batch 128),
// where it beats two_pass (one launch instead of three). Activations several times the shared
// memory need narrow bands (a 256x64x56x56 float32 activation runs 8 waves of 32 bytes per row),
// and since the L2 fetches 64 bytes per miss such a band reads the bytes of two passes and is
// several times slower than two_pass, so two_pass keeps those.
#include <cooperative_groups.h>

#include <algorithm>

#include "ember/cuda_kernels/common/cp_async.cuh"
#include "ember/cuda_kernels/norm/norm.cuh"
#include "ember/dispatch/algorithm.h"

namespace ember::cuda::norm {
namespace {

namespace cg = cooperative_groups;

constexpr int kSingleThreads = 512;
constexpr int kSingleWarps = kSingleThreads / 32;
// Widest wave, in 16-byte vectors per row (1024 bytes: 256 float32 or 512 16-bit channels).
constexpr int kMaxWaveVecs = 64;
// Waves of at most this many channels merge the blocks' partials in every block (one grid
// barrier); wider waves have each channel merged by one block, then a second barrier.
constexpr int kWalkChannels = 64;

// Threads holding a vector's Welford partial after the in-warp fold: one per warp while a warp
// holds several rows (S < 32 vectors per row), else every thread of the vector's column.
__host__ __device__ constexpr int holders_per_vector(int S) {
  return S < 32 ? kSingleWarps : kSingleThreads / S;
}
// Float entries of each Welford array in the shared scratch: the holders' partials [holder][vector]
// [lane of V], then (reused) the cross-block walkers [walker][channel], one per thread.
__host__ __device__ constexpr int walk_entries(int S, int V) {
  return holders_per_vector(S) * S * V > kSingleThreads ? holders_per_vector(S) * S * V
                                                        : kSingleThreads;
}
// Shared scratch ahead of the data: means and M2s (walk_entries each), counts (one per thread),
// and the wave's per-channel mean, scale and shift; 128-byte aligned.
__host__ __device__ constexpr int scratch_bytes(int S, int V) {
  return ((2 * walk_entries(S, V) + kSingleThreads + 3 * S * V) * 4 + 127) / 128 * 128;
}

template <typename T>
struct SingleReadParams {
  const T* x;
  const T* residual;  // may be null
  T* y;
  NormParam<T> weight;  // may be absent (1)
  NormParam<T> bias;    // may be absent (0)
  ChannelStatsOut<T> out;
  int rows;       // values per channel (N * S)
  int C;          // channels; C * sizeof(T) is a multiple of 16
  int row_vecs;   // 16-byte vectors per row: C / kVec<T>
  int wave_vecs;  // vectors per row in one wave: a power of 2, <= kMaxWaveVecs
  int waves;      // ceil(row_vecs / wave_vecs)
  int rows_per_block;
  bool relu;
  float* part_mean;  // [gridDim.x, C]: one Welford partial per (block, channel)
  float* part_m2;
};

template <typename T>
__device__ __forceinline__ int block_rows(const SingleReadParams<T>& p, int b) {
  return ::max(0, ::min(p.rows_per_block, p.rows - b * p.rows_per_block));
}

template <typename T>
__global__ void __launch_bounds__(kSingleThreads, 1) bn_single_read_kernel(SingleReadParams<T> p) {
  constexpr int V = kVec<T>;
  using Vec = AlignedVec<T, V>;
  const int S = p.wave_vecs;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  float* walk_mean = reinterpret_cast<float*>(smem_raw);
  float* walk_m2 = walk_mean + walk_entries(S, V);
  int* walk_n = reinterpret_cast<int*>(walk_m2 + walk_entries(S, V));
  float* ch_mean = reinterpret_cast<float*>(walk_n + kSingleThreads);
  float* ch_scale = ch_mean + S * V;
  float* ch_shift = ch_scale + S * V;
  Vec* data = reinterpret_cast<Vec*>(smem_raw + scratch_bytes(S, V));

  cg::grid_group grid = cg::this_grid();
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  // A thread's slots: vector `my_vec` of the band in rows first_row, first_row + row_step, ...
  // (the same slots every wave: no thread reads another's).
  const int my_vec = t & (S - 1);
  const int row_step = kSingleThreads / S, first_row = t / S;
  const int64_t row0 = int64_t(blockIdx.x) * p.rows_per_block;
  const int rows_here = block_rows(p, int(blockIdx.x));
  const int wave_channels = S * V;

  auto load_wave = [&](int wave) {
    const int v = wave * S + my_vec;
    if (v < p.row_vecs) {
      const T* src = p.x + row0 * p.C + int64_t(v) * V;
      for (int r = first_row; r < rows_here; r += row_step)
        cp_async_16(smem_u32(data + r * S + my_vec), src + int64_t(r) * p.C, true);
    }
    cp_async_commit();
  };

  load_wave(0);
  for (int wave = 0; wave < p.waves; ++wave) {
    const int v = wave * S + my_vec;
    const bool active = v < p.row_vecs;
    cp_async_wait<0>();
    __syncthreads();

    // 2. Welford over the thread's slots, lanes of one vector sharing the count.
    float mean[V], m2[V];
#pragma unroll
    for (int k = 0; k < V; ++k) mean[k] = m2[k] = 0.f;
    int n = 0;
    if (active) {
      for (int r = first_row; r < rows_here; r += row_step) {
        const Vec a = data[r * S + my_vec];
        ++n;
        const float inv_n = 1.f / float(n);
#pragma unroll
        for (int k = 0; k < V; ++k) welford_step(mean[k], m2[k], convert<float>(a.v[k]), inv_n);
      }
    }
    // Lanes m apart hold the same vector when m is a multiple of S: fold down to lanes < S (no
    // fold when a warp's lanes are all different vectors, S >= 32).
    for (int m = 16; m >= S; m /= 2) {
      float mean_b[V], m2_b[V];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        mean_b[k] = __shfl_down_sync(0xffffffffu, mean[k], m);
        m2_b[k] = __shfl_down_sync(0xffffffffu, m2[k], m);
      }
      const int n_b = __shfl_down_sync(0xffffffffu, n, m);
      if (lane < m) chan_merge_lanes<V>(mean, m2, n, mean_b, m2_b, n_b);
    }
    const int holders = holders_per_vector(S);
    if (S >= 32 || lane < S) {
      const int holder = S < 32 ? warp : t / S;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        walk_mean[(holder * S + my_vec) * V + k] = mean[k];
        walk_m2[(holder * S + my_vec) * V + k] = m2[k];
      }
      walk_n[holder * S + my_vec] = n;
    }
    __syncthreads();
    if (t < wave_channels) {  // the block's partial of channel t of the wave, holders in order
      const int vv = t / V, k = t % V;
      const int c = wave * wave_channels + t;
      float bm = 0.f, bm2 = 0.f;
      int bn = 0;
      for (int h = 0; h < holders; ++h)
        chan_merge(bm, bm2, bn, walk_mean[(h * S + vv) * V + k], walk_m2[(h * S + vv) * V + k],
                   walk_n[h * S + vv]);
      if (c < p.C) {
        p.part_mean[int64_t(blockIdx.x) * p.C + c] = bm;
        p.part_m2[int64_t(blockIdx.x) * p.C + c] = bm2;
      }
    }

    // 3. Every block's partials are written. The merge over blocks runs in one fixed order, so
    // every block that computes a channel's statistics gets the same bits.
    grid.sync();
    const int j = t;  // the wave channel this thread sets up for the block (t < wave_channels)
    const int c = wave * wave_channels + j;
    // Channel c's Welford state (mean, M2, count), then its mean and 1 / sqrt(var + eps).
    float mean_c = 0.f, m2_c = 0.f, invstd_c = 0.f;
    if (wave_channels <= kWalkChannels) {
      // Every block merges the band: thread t walks channel t % wave_channels over blocks
      // t / wave_channels, + walkers, ... (loads issued four at a time); then a thread per channel
      // merges the walkers in order. Block 0 writes the statistics.
      const int walkers = kSingleThreads / wave_channels;
      const int wj = t % wave_channels, walker = t / wave_channels;
      const int wc = wave * wave_channels + wj;
      int cn = 0;
      if (wc < p.C) {
#pragma unroll 4
        for (int b = walker; b < int(gridDim.x); b += walkers)
          chan_merge(mean_c, m2_c, cn, __ldcg(p.part_mean + int64_t(b) * p.C + wc),
                     __ldcg(p.part_m2 + int64_t(b) * p.C + wc), block_rows(p, b));
      }
      walk_mean[t] = mean_c;
      walk_m2[t] = m2_c;
      walk_n[t] = cn;
      __syncthreads();
      if (j < wave_channels && c < p.C) {
        for (int w = 1; w < walkers; ++w)
          chan_merge(mean_c, m2_c, cn, walk_mean[w * wave_channels + j],
                     walk_m2[w * wave_channels + j], walk_n[w * wave_channels + j]);
        if (blockIdx.x == 0) p.out.store(c, mean_c, m2_c, p.rows);
        invstd_c = p.out.invstd(m2_c, p.rows);
      }
    } else {
      // Channel j is merged by block j % gridDim.x (a warp: lanes over the blocks, then a fixed
      // tree), which writes its statistics; a second barrier publishes them to every block.
      for (int jj = int(blockIdx.x) + warp * int(gridDim.x); jj < wave_channels;
           jj += kSingleWarps * int(gridDim.x)) {
        const int cc = wave * wave_channels + jj;
        if (cc >= p.C) break;  // warp-uniform; later jj are further out
        float m = 0.f, q = 0.f;
        int cn = 0;
#pragma unroll 4
        for (int b = lane; b < int(gridDim.x); b += 32)
          chan_merge(m, q, cn, __ldcg(p.part_mean + int64_t(b) * p.C + cc),
                     __ldcg(p.part_m2 + int64_t(b) * p.C + cc), block_rows(p, b));
#pragma unroll
        for (int o = 16; o > 0; o /= 2) {
          const float m_b = __shfl_down_sync(0xffffffffu, m, o);
          const float q_b = __shfl_down_sync(0xffffffffu, q, o);
          const int n_b = __shfl_down_sync(0xffffffffu, cn, o);
          if (lane < o) chan_merge(m, q, cn, m_b, q_b, n_b);
        }
        if (lane == 0) p.out.store(cc, m, q, p.rows);
      }
      grid.sync();
      if (j < wave_channels && c < p.C) {
        mean_c = __ldcg(p.out.save_mean + c);
        invstd_c = __ldcg(p.out.save_invstd + c);
      }
    }
    if (j < wave_channels && c < p.C) {
      ch_mean[j] = mean_c;
      ch_scale[j] = invstd_c * (p.weight.absent() ? 1.f : p.weight.at(c));
      ch_shift[j] = p.bias.absent() ? 0.f : p.bias.at(c);
    }
    __syncthreads();

    // 4. Normalize the slots, store y; then the next wave's loads into the same slots.
    if (active) {
      float cmean[V], scale[V], shift[V];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        cmean[k] = ch_mean[my_vec * V + k];
        scale[k] = ch_scale[my_vec * V + k];
        shift[k] = ch_shift[my_vec * V + k];
      }
      const int64_t col = int64_t(v) * V;
      for (int r = first_row; r < rows_here; r += row_step) {
        const Vec a = data[r * S + my_vec];
        float f[V], res[V];
#pragma unroll
        for (int k = 0; k < V; ++k) f[k] = convert<float>(a.v[k]);
        const int64_t off = (row0 + r) * p.C + col;
        load_residual<T, V>(p.residual, off, true, V, res);
        apply_affine<V>(f, cmean, scale, shift, res, p.relu);
        store_floats<T, V>(p.y + off, true, V, f);
      }
    }
    // The slots are read (their values are in the stores above) before they are refilled.
    __syncthreads();
    if (wave + 1 < p.waves) load_wave(wave + 1);
  }
}

// ---- plan ---------------------------------------------------------------------------------------

// The wave layout of a problem, or wave_vecs == 0 when single_read does not apply.
struct SingleReadPlan {
  int wave_vecs = 0, waves = 0, rows_per_block = 0, blocks = 0;
  size_t smem = 0;
};

// Per device: the kernel's dynamic shared-memory limit, or 0 when it cannot run there (no
// cooperative launches, or no block resident at that size).
template <typename T>
int single_read_smem_limit(int device) {
  static PerDevice<int> limit;
  return limit.get(device, [](int d) {
    if (!device_properties(d).cooperative_launch) return 0;
    const int bytes = opt_in_max_dynamic_shared_memory<bn_single_read_kernel<T>>(d);
    // One block per SM must fit at that size (registers included), or the grid cannot be resident.
    DeviceGuard guard(Device::cuda(d));
    int per_sm = 0;
    EMBER_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, bn_single_read_kernel<T>, kSingleThreads, size_t(bytes)));
    return per_sm >= 1 ? bytes : 0;
  });
}

template <typename T>
SingleReadPlan plan_single_read(const BatchNormForwardProblem& p) {
  constexpr int V = kVec<T>;
  SingleReadPlan plan;
  const ChannelLayout& l = p.layout;
  if (p.device().type != DeviceType::CUDA || !l.channels_inner || l.C % V != 0) return plan;
  if (!all_aligned16({&p.x, &p.y, &p.residual})) return plan;
  const int device = p.device().index;
  const int64_t rows = l.per_channel();
  const int blocks = device_properties(device).sm_count;
  const int limit = single_read_smem_limit<T>(device);
  if (blocks <= 0 || limit <= 0 || rows >= (int64_t(1) << 30)) return plan;
  const int64_t rows_per_block = ceil_div(rows, blocks);
  const int row_vecs = int(std::min<int64_t>(l.C / V, 1 << 20));
  // The widest band that fits (fewest waves), 32 bytes at least unless a row is one vector.
  for (int s = std::min(next_pow2(row_vecs), kMaxWaveVecs); s >= 1; s /= 2) {
    if (s == 1 && row_vecs > 1) break;
    const int64_t smem = scratch_bytes(s, V) + rows_per_block * s * 16;
    if (smem > limit) continue;
    plan.wave_vecs = s;
    plan.waves = int(ceil_div(row_vecs, s));
    plan.rows_per_block = int(rows_per_block);
    plan.blocks = blocks;
    plan.smem = size_t(smem);
    break;
  }
  return plan;
}

SingleReadPlan plan_for(const BatchNormForwardProblem& p) {
  SingleReadPlan plan;
  dispatch_floating<kNormFloatingTypes>(p.x.dtype(), "batch_norm single_read", [&](auto tag) {
    plan = plan_single_read<decltype(tag)>(p);
  });
  return plan;
}

template <typename T>
void launch_single_read(const BatchNormForwardProblem& a, const SingleReadPlan& plan,
                        void* workspace) {
  SingleReadParams<T> p{};
  p.x = static_cast<const T*>(a.x.data_ptr());
  p.residual = ptr_or_null<const T>(a.residual);
  p.y = static_cast<T*>(a.y.data_ptr());
  p.weight = norm_param<T>(a.weight, a.x.dtype());
  p.bias = norm_param<T>(a.bias, a.x.dtype());
  p.out = channel_stats_out<T>(a);
  p.rows = int(a.layout.per_channel());
  p.C = int(a.layout.C);
  p.row_vecs = p.C / kVec<T>;
  p.wave_vecs = plan.wave_vecs;
  p.waves = plan.waves;
  p.rows_per_block = plan.rows_per_block;
  p.relu = a.relu;
  p.part_mean = static_cast<float*>(workspace);
  p.part_m2 = p.part_mean + int64_t(plan.blocks) * p.C;
  void* args[] = {&p};
  EMBER_CUDA_CHECK(cudaLaunchCooperativeKernel(
      reinterpret_cast<const void*>(bn_single_read_kernel<T>), dim3(unsigned(plan.blocks)),
      dim3(kSingleThreads), args, plan.smem, stream_of(a.device())));
}

dispatch::Algorithm<BatchNormForwardProblem> single_read_algorithm() {
  dispatch::Algorithm<BatchNormForwardProblem> a;
  a.name = "single_read";
  a.deterministic = true;
  a.applies = [](const BatchNormForwardProblem& p) { return plan_for(p).wave_vecs > 0; };
  a.workspace_bytes = [](const BatchNormForwardProblem& p) {
    return size_t(2) * size_t(plan_for(p).blocks) * size_t(p.layout.C) * sizeof(float);
  };
  // two_pass's units (kernel_interface/norm.cpp, bytes moved; a launch counts as 2 MB): x read
  // once, y written, the residual read; one launch and one grid barrier (4 MB), one more barrier
  // per wave for bands wider than kWalkChannels (2 MB); every wave after the first as 40 MB (its
  // loads start only after the barrier and merge of the wave before, so a wave costs about as
  // much as moving 40 MB; the L2 fetches 64 bytes per miss, so a 32-byte band moves the bytes of
  // two passes).
  a.heuristic_cost = [](const BatchNormForwardProblem& p) {
    const double bytes = double(p.layout.numel()) * double(element_size(p.x.dtype()));
    const SingleReadPlan plan = plan_for(p);
    const bool wide = plan.wave_vecs * 16 / int(element_size(p.x.dtype())) > kWalkChannels;
    return bytes * (p.residual.defined() ? 3.0 : 2.0) + 6e6 + (wide ? 2e6 * plan.waves : 0.0) +
           40e6 * (plan.waves - 1);
  };
  a.run = [](const BatchNormForwardProblem& p, void* workspace) {
    const SingleReadPlan plan = plan_for(p);
    DeviceGuard guard(p.device());
    dispatch_floating<kNormFloatingTypes>(p.x.dtype(), "batch_norm single_read", [&](auto tag) {
      launch_single_read<decltype(tag)>(p, plan, workspace);
    });
  };
  return a;
}

}  // namespace
}  // namespace ember::cuda::norm

namespace ember {
EMBER_REGISTER_ALGORITHM(BatchNormForwardProblem, "batch_norm", forward, CUDA,
                         cuda::norm::single_read_algorithm());
}  // namespace ember
