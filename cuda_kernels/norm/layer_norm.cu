// CUDA kernels of the row normalizations (kernel_interface/norm.h: row_norm_forward,
// row_norm_backward_data): layer norm ([rows, D], parameters per feature) and group norm of NCHW
// input (rows = N * groups, D = channels per group * S, parameters per channel). The parameter
// gradients of both run through channel_grad_sums (cuda_kernels/norm/batch_norm_backward.cu).
// float32, float16 and bfloat16 inputs, float32 statistics, parameters in float32 or the input's
// dtype (NormParam). Outputs are overwritten.
//
// Forward, two kernels:
//  - warp per row (rows of at most 1024 values, on the 16-byte vector path): the row is loaded
//    once into registers, the mean and the centered sum of squares are warp reductions over
//    those registers (exact two-pass statistics without a second read, never a sum and a sum of
//    squares), and y is written from registers: one read and one write, no block barrier, 4 rows
//    per 128-thread block, a block per 4 rows;
//  - block per row (longer or unaligned rows; one block per row), 32 to 256 threads by the
//    row length: Welford over the row (16-byte vectors when D allows; a thread's vector lanes
//    share one count), a fixed-order block merge, then a second pass that normalizes; the second
//    read of the row mostly hits L1/L2, so HBM sees about one read and one write.
// Backward: a row per row group of threads (a block per row; for layer norm's parameter gradients,
// several rows at once), the two row sums, then dx; layer norm also sums the parameter gradients
// in the same pass over dy and x (per-block partials, then channel_grad_sums' finalize).
#include "ember/cuda_kernels/norm/norm.cuh"

namespace ember::cuda::norm {
namespace {

template <typename T>
struct RowForwardParams {
  T* y;
  float* mean;  // [rows]
  float* rstd;  // [rows]
  const T* x;
  NormParam<T> weight;                         // may be absent (1)
  NormParam<T> bias;                           // may be absent (0)
  int64_t rows, D, groups, S, group_channels;  // group_channels = D / S
  float eps;
  bool vector_ok;
  FastDivmod div_s;  // j / S within a row
};

template <typename T>
struct RowBackwardParams {
  T* dx;
  const T* dy;
  const T* x;
  const float* mean;
  const float* rstd;
  NormParam<T> weight;  // may be absent (1)
  int64_t rows, D, groups, S, group_channels;
  bool vector_ok;
  FastDivmod div_s;
  // Layer norm's parameter sums from the same pass (null: not asked): each block sums dy and
  // dy * xhat per feature over its rows (row_norm_backward_data_rows) into its row of these
  // [gridDim.x, D] partials.
  float* part_dy;
  float* part_dy_xhat;
};

// The parameter index of element j of a row whose group's first channel is `base`.
template <typename P>
__device__ __forceinline__ int64_t param_index(const P& p, int64_t base, int64_t j) {
  return base + (p.S == 1 ? j : int64_t(p.div_s.div(uint32_t(j))));
}

// VEC parameters for the vector starting at j: per lane when S == 1 (layer norm), else one value
// for the whole vector (the vector path needs S % VEC == 0, so a vector never spans channels).
template <int VEC, typename P, typename T>
__device__ __forceinline__ void load_params(const P& p, const NormParam<T>& param, float fallback,
                                            int64_t base, int64_t j, float (&out)[VEC]) {
  if (param.absent()) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) out[k] = fallback;
  } else if (p.S == 1) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) out[k] = param.at(base + j + k);
  } else {
    const float v = param.at(param_index(p, base, j));
#pragma unroll
    for (int k = 0; k < VEC; ++k) out[k] = v;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) row_norm_forward_block_per_row(RowForwardParams<T> p) {
  constexpr int VEC = kVec<T>;
  __shared__ float sh_stats[2];
  const int tid = threadIdx.x;
  const int64_t threads = blockDim.x;
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const T* xr = p.x + r * p.D;
    float mean[VEC], m2[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) mean[k] = m2[k] = 0.f;
    int n = 0;
    if (p.vector_ok) {
      for (int64_t j = tid * int64_t(VEC); j < p.D; j += threads * VEC) {
        float v[VEC];
        load_floats<T, VEC>(xr + j, true, VEC, v);
        ++n;
        const float inv_n = __frcp_rn(float(n));
#pragma unroll
        for (int k = 0; k < VEC; ++k) welford_step(mean[k], m2[k], v[k], inv_n);
      }
    } else {
      for (int64_t j = tid; j < p.D; j += threads) {
        ++n;
        welford_step(mean[0], m2[0], convert<float>(xr[j]), __frcp_rn(float(n)));
      }
    }
    float s_mean = mean[0], s_m2 = m2[0];
    int s_n = n;
    if (p.vector_ok) {
#pragma unroll
      for (int k = 1; k < VEC; ++k) chan_merge(s_mean, s_m2, s_n, mean[k], m2[k], n);
    }
    block_merge_welford(s_mean, s_m2, s_n);
    if (tid == 0) {
      const float rs = rsqrtf(s_m2 / float(p.D) + p.eps);
      sh_stats[0] = s_mean;
      sh_stats[1] = rs;
      p.mean[r] = s_mean;
      p.rstd[r] = rs;
    }
    __syncthreads();
    const float mu = sh_stats[0], rs = sh_stats[1];
    const int64_t base = (r % p.groups) * p.group_channels;
    T* yr = p.y + r * p.D;
    if (p.vector_ok) {
      for (int64_t j = tid * int64_t(VEC); j < p.D; j += threads * VEC) {
        float v[VEC], w[VEC], b[VEC];
        load_floats<T, VEC>(xr + j, true, VEC, v);
        load_params<VEC>(p, p.weight, 1.f, base, j, w);
        load_params<VEC>(p, p.bias, 0.f, base, j, b);
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[k] = (v[k] - mu) * rs * w[k] + b[k];
        store_floats<T, VEC>(yr + j, true, VEC, v);
      }
    } else {
      for (int64_t j = tid; j < p.D; j += threads) {
        const int64_t ch = param_index(p, base, j);
        const float w = p.weight.absent() ? 1.f : p.weight.at(ch);
        const float b = p.bias.absent() ? 0.f : p.bias.at(ch);
        yr[j] = convert<T>((convert<float>(xr[j]) - mu) * rs * w + b);
      }
    }
    __syncthreads();  // sh_stats is rewritten for the next row
  }
}

// ---- forward, warp per row -------------------------------------------------------------------

constexpr int kRowsPerWarpBlock = 4;  // warps (rows in flight) per block of the warp-per-row kernel
// Vectors of 16 bytes per lane at most: rows of up to 1024 values in every dtype (16-bit rows of
// 2048 would hold 64 floats per thread once converted, and spill).
template <typename T>
inline constexpr int kMaxVecsPerLane = sizeof(T) == 2 ? 4 : 8;
// Blocks per SM it is compiled for: 1024 threads (32 rows in flight per SM), at most 64
// registers; the longest rows (32 values per lane, held as floats once converted) need more:
// 768 threads, 80 registers.
template <typename T, int kVecsPerLane>
inline constexpr int kWarpBlocksPerSm = kVecsPerLane == kMaxVecsPerLane<T> ? 6 : 8;

// VEC parameters of the vector starting at column j, four per load (16 bytes of floats, 8 of a
// 16-bit dtype) when `aligned` (layer norm, S == 1, parameter pointers 16-byte aligned: base + j
// is a multiple of VEC >= 4), else as load_params does.
template <int VEC, typename P, typename T>
__device__ __forceinline__ void load_params_fast(const P& p, const NormParam<T>& param,
                                                 float fallback, int64_t base, int64_t j,
                                                 bool aligned, float (&out)[VEC]) {
  if (aligned && !param.absent()) {
#pragma unroll
    for (int k = 0; k < VEC; k += 4) param.at4(base + j + k, out + k);
  } else {
    load_params<VEC>(p, param, fallback, base, j, out);
  }
}

// A 16-byte vector loaded with the streaming hint (ld.global.cs: evict first; a row is read once):
// faster for the warp-per-row forward's rows than a plain load.
template <typename Vec>
__device__ __forceinline__ Vec load_streaming(const Vec* p) {
  static_assert(sizeof(Vec) == 16, "load_streaming: 16-byte vectors");
  const int4 q = __ldcs(reinterpret_cast<const int4*>(p));
  Vec v;
  memcpy(&v, &q, sizeof(v));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// A warp per row, the row in registers: lane l holds vectors k * 32 + l (k < kVecsPerLane) of the
// row, so every load instruction of the warp reads 512 consecutive bytes. Needs the vector path
// (D % VEC == 0, S % VEC == 0, x and y 16-byte aligned) and D <= 32 * kVecsPerLane * VEC.
template <typename T, int kVecsPerLane>
__global__ void __launch_bounds__(kRowsPerWarpBlock * 32, (kWarpBlocksPerSm<T, kVecsPerLane>))
    row_norm_forward_warp_per_row(RowForwardParams<T> p, bool params_aligned) {
  constexpr int VEC = kVec<T>;
  using Vec = AlignedVec<T, VEC>;
  const int lane = threadIdx.x % 32;
  const int64_t nvec = p.D / VEC;
  const float inv_d = 1.f / float(p.D);
  const int64_t step = int64_t(gridDim.x) * kRowsPerWarpBlock;
  // r is uniform over the warp, so every lane takes part in each shuffle.
  const int64_t first = int64_t(blockIdx.x) * kRowsPerWarpBlock + threadIdx.x / 32;
  for (int64_t r = first; r < p.rows; r += step) {
    const Vec* xr = reinterpret_cast<const Vec*>(p.x + r * p.D);
    Vec v[kVecsPerLane];
#pragma unroll
    for (int k = 0; k < kVecsPerLane; ++k)
      if (k * 32 + lane < nvec) v[k] = load_streaming(xr + k * 32 + lane);
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < kVecsPerLane; ++k) {
      if (k * 32 + lane < nvec) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) sum += convert<float>(v[k].v[e]);
      }
    }
    const float mu = warp_sum(sum) * inv_d;
    float m2 = 0.f;
#pragma unroll
    for (int k = 0; k < kVecsPerLane; ++k) {
      if (k * 32 + lane < nvec) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const float d = convert<float>(v[k].v[e]) - mu;
          m2 += d * d;
        }
      }
    }
    const float rs = rsqrtf(warp_sum(m2) * inv_d + p.eps);
    if (lane == 0) {
      p.mean[r] = mu;
      p.rstd[r] = rs;
    }
    const int64_t base = (r % p.groups) * p.group_channels;
    Vec* yr = reinterpret_cast<Vec*>(p.y + r * p.D);
#pragma unroll
    for (int k = 0; k < kVecsPerLane; ++k) {
      const int64_t i = k * 32 + lane;
      if (i < nvec) {
        float w[VEC], b[VEC];
        load_params_fast<VEC>(p, p.weight, 1.f, base, i * VEC, params_aligned, w);
        load_params_fast<VEC>(p, p.bias, 0.f, base, i * VEC, params_aligned, b);
        Vec out;
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          out.v[e] = convert<T>((convert<float>(v[k].v[e]) - mu) * rs * w[e] + b[e]);
        yr[i] = out;
      }
    }
  }
}

// Threads of a backward block at most: blockDim.x per row (plan_rows) times blockDim.y rows at
// once.
constexpr int kMaxBackwardBlock = 1024;

// Row groups in a block at most: each synchronizes on its own named barrier (ids 1 .. 8; 0 is
// __syncthreads'), so the groups of a block run their rows independently.
constexpr int kMaxRowGroups = 8;

__device__ __forceinline__ void row_group_barrier() {
  asm volatile("bar.sync %0, %1;" ::"r"(int(threadIdx.y) + 1), "r"(int(blockDim.x)) : "memory");
}

// Sums a and b over the threads of one row group (threadIdx.y; blockDim.x a multiple of 32); every
// thread of the group gets the totals. `scratch`: 2 * kMaxBackwardBlock / 32 floats. Every thread
// of the group calls it.
__device__ __forceinline__ void row_group_sum2(float& a, float& b, float* scratch) {
#pragma unroll
  for (int m = 16; m > 0; m /= 2) {
    a += __shfl_xor_sync(0xffffffffu, a, m);
    b += __shfl_xor_sync(0xffffffffu, b, m);
  }
  const int warps_per_row = int(blockDim.x) / 32;
  const int warp = int(threadIdx.y) * warps_per_row + int(threadIdx.x) / 32;
  if (threadIdx.x % 32 == 0) {
    scratch[2 * warp] = a;
    scratch[2 * warp + 1] = b;
  }
  row_group_barrier();
  const int first = int(threadIdx.y) * warps_per_row;
  a = scratch[2 * first];
  b = scratch[2 * first + 1];
  for (int w = 1; w < warps_per_row; ++w) {
    a += scratch[2 * (first + w)];
    b += scratch[2 * (first + w) + 1];
  }
  row_group_barrier();  // the group's scratch is rewritten by its next call
}

// Backward of the row norms: blockDim.x threads per row, blockDim.y rows at once (row groups);
// per row the two sums over the row, then dx. With p.part_dy (layer norm's parameter sums) each
// row group accumulates sum dy and sum dy * xhat per feature over its rows in its own slice of
// shared memory ([2][D] floats, on the vector path laid out [lane][vector] so a warp's updates hit
// consecutive banks), and the block writes the slices' sum, in group order, as its partial row.
template <typename T>
__global__ void __launch_bounds__(kMaxBackwardBlock)
    row_norm_backward_data_rows(RowBackwardParams<T> p) {
  constexpr int VEC = kVec<T>;
  __shared__ float sh_scratch[2 * kMaxBackwardBlock / 32];
  extern __shared__ float sh_param_sums[];  // [blockDim.y][2][D] when p.part_dy
  const int tid = threadIdx.x, groups = blockDim.y;
  const int64_t threads = blockDim.x;
  const int flat = threadIdx.y * blockDim.x + threadIdx.x, block_threads = blockDim.x * blockDim.y;
  const float inv_d = 1.f / float(p.D);
  const int64_t nvec = p.D / VEC;
  const bool param_sums = p.part_dy != nullptr;
  float* acc_dy = sh_param_sums + int64_t(threadIdx.y) * 2 * p.D;
  float* acc_dy_xhat = acc_dy + p.D;
  if (param_sums) {
    for (int64_t j = flat; j < int64_t(groups) * 2 * p.D; j += block_threads)
      sh_param_sums[j] = 0.f;
    __syncthreads();
  }
  for (int64_t r = int64_t(blockIdx.x) * groups + threadIdx.y; r < p.rows;
       r += int64_t(gridDim.x) * groups) {
    const T* xr = p.x + r * p.D;
    const T* dyr = p.dy + r * p.D;
    const float mu = p.mean[r], rs = p.rstd[r];
    const int64_t base = (r % p.groups) * p.group_channels;
    float sum_gw = 0.f, sum_gw_xhat = 0.f;
    if (p.vector_ok) {
      for (int64_t jv = tid; jv < nvec; jv += threads) {
        const int64_t j = jv * VEC;
        float g[VEC], v[VEC], w[VEC];
        load_floats<T, VEC>(dyr + j, true, VEC, g);
        load_floats<T, VEC>(xr + j, true, VEC, v);
        load_params<VEC>(p, p.weight, 1.f, base, j, w);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float gw = g[k] * w[k], xhat = (v[k] - mu) * rs;
          sum_gw += gw;
          sum_gw_xhat += gw * xhat;
          if (param_sums) {
            acc_dy[k * nvec + jv] += g[k];
            acc_dy_xhat[k * nvec + jv] += g[k] * xhat;
          }
        }
      }
    } else {
      for (int64_t j = tid; j < p.D; j += threads) {
        const float w = p.weight.absent() ? 1.f : p.weight.at(param_index(p, base, j));
        const float g = convert<float>(dyr[j]), xhat = (convert<float>(xr[j]) - mu) * rs;
        const float gw = g * w;
        sum_gw += gw;
        sum_gw_xhat += gw * xhat;
        if (param_sums) {
          acc_dy[j] += g;
          acc_dy_xhat[j] += g * xhat;
        }
      }
    }
    row_group_sum2(sum_gw, sum_gw_xhat, sh_scratch);
    const float mean_gw = sum_gw * inv_d, mean_gw_xhat = sum_gw_xhat * inv_d;
    T* dxr = p.dx + r * p.D;
    if (p.vector_ok) {
      for (int64_t j = tid * int64_t(VEC); j < p.D; j += threads * VEC) {
        float g[VEC], v[VEC], w[VEC];
        load_floats<T, VEC>(dyr + j, true, VEC, g);
        load_floats<T, VEC>(xr + j, true, VEC, v);
        load_params<VEC>(p, p.weight, 1.f, base, j, w);
#pragma unroll
        for (int k = 0; k < VEC; ++k)
          g[k] = rs * (g[k] * w[k] - mean_gw - (v[k] - mu) * rs * mean_gw_xhat);
        store_floats<T, VEC>(dxr + j, true, VEC, g);
      }
    } else {
      for (int64_t j = tid; j < p.D; j += threads) {
        const float w = p.weight.absent() ? 1.f : p.weight.at(param_index(p, base, j));
        const float xhat = (convert<float>(xr[j]) - mu) * rs;
        dxr[j] = convert<T>(rs * (convert<float>(dyr[j]) * w - mean_gw - xhat * mean_gw_xhat));
      }
    }
  }
  if (param_sums) {
    __syncthreads();
    float* out_dy = p.part_dy + int64_t(blockIdx.x) * p.D;
    float* out_dy_xhat = p.part_dy_xhat + int64_t(blockIdx.x) * p.D;
    for (int64_t j = flat; j < p.D; j += block_threads) {
      const int64_t at = p.vector_ok ? (j % VEC) * nvec + j / VEC : j;
      float a = 0.f, b = 0.f;
      for (int g = 0; g < groups; ++g) {
        a += sh_param_sums[int64_t(g) * 2 * p.D + at];
        b += sh_param_sums[int64_t(g) * 2 * p.D + p.D + at];
      }
      out_dy[j] = a;
      out_dy_xhat[j] = b;
    }
  }
}

// ---- launch shape -------------------------------------------------------------------------------

// The layer-norm backward with parameter sums: shared-memory accumulators of at most this many
// bytes per block (2 * D floats per row group; with the kernel's static scratch within the 48 KB a
// launch gets without opting in; rows longer than 5632 floats sum the parameter gradients in
// channel_grad_sums), and at least this many rows per row group.
constexpr size_t kMaxParamSumsSmem = 44 * 1024;
constexpr int64_t kMinRowsPerGroup = 8;

struct RowPlan {
  int threads = 32;
  int64_t blocks = 1;
  bool vector_ok = false;
};

// Threads: enough for one vector each (a power of 2 in [32, kThreads]); blocks: one per row, as
// many as the grid allows (kMaxGridX; the kernels loop over rows past it).
RowPlan plan_rows(const RowNormLayout& l, int vec, bool aligned) {
  RowPlan plan;
  plan.vector_ok = aligned && l.D % vec == 0 && (l.S == 1 || l.S % vec == 0);
  const int64_t items = plan.vector_ok ? l.D / vec : l.D;
  plan.threads = int(std::clamp<int64_t>(next_pow2(items), 32, kThreads));
  plan.blocks = std::clamp<int64_t>(l.rows, 1, kMaxGridX);
  return plan;
}

void check_row_layout(const RowNormLayout& l) {
  EMBER_CHECK_STATUS(fits_fast_divmod(l.D), not_supported, "layer_norm / group_norm: rows of ", l.D,
                     " elements are not supported on CUDA (at most 2^31 - 1)");
  EMBER_INTERNAL_ASSERT(l.S >= 1 && l.groups >= 1 && l.D % l.S == 0, "row norm layout: D ", l.D,
                        ", S ", l.S, ", groups ", l.groups);
}

template <typename T>
void launch_row_forward(const RowNormForwardArgs& a, cudaStream_t stream) {
  constexpr int VEC = kVec<T>;
  const RowNormLayout& l = a.layout;
  RowForwardParams<T> p{};
  p.y = static_cast<T*>(a.y.data_ptr());
  p.mean = static_cast<float*>(a.mean.data_ptr());
  p.rstd = static_cast<float*>(a.rstd.data_ptr());
  p.x = static_cast<const T*>(a.x.data_ptr());
  p.weight = norm_param<T>(a.weight, a.x.dtype());
  p.bias = norm_param<T>(a.bias, a.x.dtype());
  p.rows = l.rows;
  p.D = l.D;
  p.groups = l.groups;
  p.S = l.S;
  p.group_channels = l.D / l.S;
  p.eps = float(a.eps);
  p.div_s = FastDivmod(uint32_t(l.S));
  const RowPlan plan = plan_rows(l, VEC, all_aligned16({&a.y, &a.x}));
  p.vector_ok = plan.vector_ok;
  const int64_t nvec = l.D / VEC;
  constexpr int kMaxVecs = kMaxVecsPerLane<T>;
  if (plan.vector_ok && nvec <= 32 * kMaxVecs) {
    // A block per 4 rows (a grid capped at one wave, warps looping over rows, timed the same).
    const bool params_aligned = l.S == 1 && all_aligned16({&a.weight, &a.bias});
    const unsigned grid =
        unsigned(std::clamp<int64_t>(ceil_div(l.rows, kRowsPerWarpBlock), 1, kMaxGridX));
    if (nvec <= 32 * 2)
      row_norm_forward_warp_per_row<T, 2>
          <<<grid, kRowsPerWarpBlock * 32, 0, stream>>>(p, params_aligned);
    else
      row_norm_forward_warp_per_row<T, kMaxVecs>
          <<<grid, kRowsPerWarpBlock * 32, 0, stream>>>(p, params_aligned);
  } else {
    row_norm_forward_block_per_row<T><<<unsigned(plan.blocks), plan.threads, 0, stream>>>(p);
  }
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void launch_row_backward(const RowNormBackwardArgs& a, cudaStream_t stream) {
  constexpr int VEC = kVec<T>;
  const RowNormLayout& l = a.layout;
  RowBackwardParams<T> p{};
  p.dx = static_cast<T*>(a.dx.data_ptr());
  p.dy = static_cast<const T*>(a.dy.data_ptr());
  p.x = static_cast<const T*>(a.x.data_ptr());
  p.mean = static_cast<const float*>(a.mean.data_ptr());
  p.rstd = static_cast<const float*>(a.rstd.data_ptr());
  p.weight = norm_param<T>(a.weight, a.x.dtype());
  p.rows = l.rows;
  p.D = l.D;
  p.groups = l.groups;
  p.S = l.S;
  p.group_channels = l.D / l.S;
  p.div_s = FastDivmod(uint32_t(l.S));
  const RowPlan plan = plan_rows(l, VEC, all_aligned16({&a.dx, &a.dy, &a.x}));
  p.vector_ok = plan.vector_ok;
  if (!a.sum_dy.defined()) {
    row_norm_backward_data_rows<T><<<unsigned(plan.blocks), plan.threads, 0, stream>>>(p);
    EMBER_CUDA_LAUNCH_CHECK();
    return;
  }
  EMBER_INTERNAL_ASSERT(l.groups == 1 && l.S == 1, "layer-norm parameter sums: groups ", l.groups,
                        ", S ", l.S);
  check_stats_tensor(a.sum_dy, l.D, a.x.device(), "sum_dy");
  check_stats_tensor(a.sum_dy_xhat, l.D, a.x.device(), "sum_dy_xhat");
  const size_t slice = size_t(2 * l.D) * sizeof(float);  // one row group's accumulators
  if (slice > kMaxParamSumsSmem) {
    // Rows too long for the accumulators: the data pass, then the column sums.
    row_norm_backward_data_rows<T><<<unsigned(plan.blocks), plan.threads, 0, stream>>>(p);
    EMBER_CUDA_LAUNCH_CHECK();
    channel_grad_sums_kernel().get(DeviceType::CUDA, a.x.dtype())(ChannelGradSumsArgs{
        a.dy, a.x, Tensor(), a.mean, a.rstd, ChannelLayout{l.rows, l.D, 1, true}, StatIndex{1, l.D},
        a.sum_dy, a.sum_dy_xhat});
    return;
  }
  // Row groups filling the block (up to kMaxBackwardBlock threads, as the accumulators fit), as
  // many blocks as are resident but at least kMinRowsPerGroup rows per group, so that the partials
  // ([blocks, D] twice, written and read back) stay a small part of the bytes moved.
  const int groups = int(std::clamp<int64_t>(
      std::min<int64_t>(kMaxBackwardBlock / plan.threads, int64_t(kMaxParamSumsSmem / slice)), 1,
      kMaxRowGroups));
  const size_t smem = size_t(groups) * slice;
  int per_sm = 0;
  EMBER_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, row_norm_backward_data_rows<T>, plan.threads * groups, smem));
  const int64_t resident =
      int64_t(std::max(per_sm, 1)) * device_properties(a.x.device().index).sm_count;
  const int64_t blocks =
      std::clamp<int64_t>(ceil_div(l.rows, int64_t(groups) * kMinRowsPerGroup), 1, resident);
  Tensor workspace = empty({2 * blocks * l.D}, DType::f32, a.x.device());
  p.part_dy = static_cast<float*>(workspace.data_ptr());
  p.part_dy_xhat = p.part_dy + blocks * l.D;
  row_norm_backward_data_rows<T>
      <<<unsigned(blocks), dim3(unsigned(plan.threads), unsigned(groups)), smem, stream>>>(p);
  EMBER_CUDA_LAUNCH_CHECK();
  launch_grad_sums_finalize(p.part_dy, p.part_dy_xhat, blocks, l.D,
                            static_cast<float*>(a.sum_dy.data_ptr()),
                            static_cast<float*>(a.sum_dy_xhat.data_ptr()), stream);
}

void row_norm_forward_cuda(const RowNormForwardArgs& a) {
  const Device device = a.x.device();
  check_row_layout(a.layout);
  check_stats_tensor(a.mean, a.layout.rows, device, "mean");
  check_stats_tensor(a.rstd, a.layout.rows, device, "rstd");
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  dispatch_floating<kNormFloatingTypes>(a.x.dtype(), "layer_norm / group_norm", [&](auto tag) {
    launch_row_forward<decltype(tag)>(a, stream);
  });
}

void row_norm_backward_data_cuda(const RowNormBackwardArgs& a) {
  const Device device = a.x.device();
  check_row_layout(a.layout);
  check_stats_tensor(a.mean, a.layout.rows, device, "mean");
  check_stats_tensor(a.rstd, a.layout.rows, device, "rstd");
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  dispatch_floating<kNormFloatingTypes>(
      a.x.dtype(), "layer_norm / group_norm backward",
      [&](auto tag) { launch_row_backward<decltype(tag)>(a, stream); });
}

}  // namespace
}  // namespace ember::cuda::norm

namespace ember {
EMBER_REGISTER_KERNEL(row_norm_forward_kernel, CUDA, cuda::norm::kCudaNormTypes,
                      &cuda::norm::row_norm_forward_cuda);
EMBER_REGISTER_KERNEL(row_norm_backward_data_kernel, CUDA, cuda::norm::kCudaNormTypes,
                      &cuda::norm::row_norm_backward_data_cuda);
}  // namespace ember
