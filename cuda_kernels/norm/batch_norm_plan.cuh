// Host-side launch plans and indexing shared by the CUDA batch-norm kernels (batch_norm_stats.cu,
// batch_norm_apply.cu, batch_norm_backward.cu): channel indexing of [N, C, S] memory with fast
// division, the shape of the finalize kernels that merge [splits, C] partials in a fixed order,
// and the grids of the per-channel reductions and elementwise passes (sized to fill the device
// once, measured per kernel and device). Include only from cuda_kernels/norm/*.cu.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>

#include "ember/cuda_kernels/norm/norm.cuh"

namespace ember::cuda::norm {

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

inline OuterIndex make_outer_index(const ChannelLayout& l) {
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

inline FlatChannel make_flat_channel(const ChannelLayout& l) {
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

// ---- finalize kernels ---------------------------------------------------------------------------

// Finalize kernels (statistics and gradient sums) merge the [splits, C] partials of each channel:
// block (kFinalizeChannels channels, by split walkers; by a power of 2), so that consecutive
// threads read consecutive channels of a split row (coalesced) and the splits' loads are spread
// over many threads (a handful each, issued together) instead of a chain per warp lane. Walker w
// merges splits w, w + by, ... in order, then a tree over threadIdx.y: a fixed order, so results
// are the same run to run.
inline constexpr int kFinalizeChannels = 8;
inline constexpr int kFinalizeMaxWalkers = 128;

inline dim3 finalize_block(int64_t splits) {
  return dim3(kFinalizeChannels, unsigned(std::min<int64_t>(next_pow2(std::max<int64_t>(splits, 1)),
                                                            kFinalizeMaxWalkers)));
}
inline unsigned finalize_grid(int64_t C) { return unsigned(ceil_div(C, kFinalizeChannels)); }

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

inline InnerPlan plan_inner(int64_t rows, int64_t C, int vec, int64_t fill_blocks, bool reduction) {
  InnerPlan p;
  const int64_t cvecs = ceil_div(C, vec);
  p.bx = int(std::min<int64_t>(next_pow2(cvecs), 32));
  p.by = kThreads / p.bx;
  p.grid_x = ceil_div(cvecs, p.bx);
  const int64_t want = std::max<int64_t>(1, fill_blocks / p.grid_x);
  if (reduction) {
    // At least 2 rows per thread: small layers need the blocks (at more rows per thread the
    // small late layers of a ResNet ran fewer blocks than SMs, latency-bound), and more partials
    // cost the finalize kernels little.
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

inline OuterPlan plan_outer_reduce(int64_t per_channel, int64_t C, int vec, int64_t fill_blocks) {
  OuterPlan p;
  const int64_t want = std::max<int64_t>(1, fill_blocks / C);
  const int64_t max_splits =
      std::max<int64_t>(1, ceil_div(per_channel, int64_t(kThreads) * vec * 4));
  const int64_t splits = std::min({want, max_splits, int64_t(65535)});
  p.chunk = ceil_div(std::max<int64_t>(1, ceil_div(per_channel, splits)), vec) * vec;
  p.splits = std::max<int64_t>(1, ceil_div(per_channel, p.chunk));
  return p;
}

inline void check_launch_limits(const char* op, int64_t grid_x) {
  EMBER_CHECK_STATUS(grid_x <= int64_t(std::numeric_limits<int32_t>::max()), not_supported, op,
                     ": too many channels for one CUDA grid (", grid_x, " blocks)");
}

// True when every thread's VEC values can be one 16-byte access: the dim a vector runs along (C
// channels-inner, S channels-outer) is a multiple of VEC and the tensors are 16-byte aligned.
inline bool vectorizable(const ChannelLayout& l, int vec, bool aligned) {
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

}  // namespace ember::cuda::norm
