// The CUDA batch-norm backward kernels (kernel_interface/norm.h): channel_grad_sums (the
// per-channel sums sum(g) and sum(g * xhat), shared with layer / group norm through StatIndex) and
// batch_norm_backward_elemt (dx and the residual's gradient), and launch_grad_sums_finalize (also
// used by cuda_kernels/norm/layer_norm.cu). float32, float16 and bfloat16 inputs, float32
// statistics, weight in float32 or the input's dtype. The sums are reductions laid out as the
// statistics kernel's (cuda_kernels/norm/batch_norm_stats.cu): one partial per (split, channel),
// merged by a finalize kernel in a fixed order. Passes over memory: sums (2 reads, 3 with the
// ReLU gate) + elementwise (2-3 reads, 1-2 writes). Every output is overwritten.
#include "ember/cuda_kernels/common/dependent_launch.cuh"
#include "ember/cuda_kernels/norm/batch_norm_plan.cuh"
#include "ember/cuda_kernels/norm/norm.cuh"

namespace ember::cuda::norm {
namespace {

template <typename T>
struct GradSumsParams {
  const T* dy;
  const T* x;
  const T* gate;  // may be null
  const float* mean;
  const float* rstd;
  int64_t C, S, rows;  // rows = N * S
  int64_t n_stride, group_size;
  int64_t chunk;
  bool vector_ok;
  OuterIndex outer;     // channels-outer (also gives the sample of a channels-inner row)
  float* part_dy;       // [splits, C]
  float* part_dy_xhat;  // [splits, C]
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
__global__ void __launch_bounds__(kThreads) grad_sums_inner_kernel(GradSumsParams<T> p) {
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
      load_gated<T, VEC>(p.dy + off, p.gate != nullptr ? p.gate + off : nullptr, p.vector_ok, valid,
                         g);
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
__global__ void __launch_bounds__(kThreads) grad_sums_outer_kernel(GradSumsParams<T> p) {
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
    load_gated<T, VEC>(p.dy + off, p.gate != nullptr ? p.gate + off : nullptr, p.vector_ok, valid,
                       g);
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
__global__ void __launch_bounds__(kFinalizeChannels* kFinalizeMaxWalkers)
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

// dx = (g - k_mean_dy - (x - mean) * k_xmu) * k_out (see batch_norm_backward_elemt in
// kernel_interface/norm.h: k_mean_dy = sum_dy / M, k_xmu = invstd * sum_dy_xhat / M,
// k_out = invstd * weight).
struct BackwardCoefficients {
  float mean, k_mean_dy, k_xmu, k_out;
};

template <typename T>
__device__ __forceinline__ BackwardCoefficients backward_coefficients(const BackwardParams<T>& p,
                                                                      int64_t c) {
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
__global__ void __launch_bounds__(kThreads) bn_backward_inner_kernel(BackwardParams<T> p) {
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
__global__ void __launch_bounds__(kThreads) bn_backward_outer_kernel(BackwardParams<T> p) {
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

// ---- launchers and table entries ----------------------------------------------------------------

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
  if (l.channels_inner)
    launch_dependent(grad_sums_inner_kernel<T>, r.grid, r.block, 0, stream, p);
  else
    launch_dependent(grad_sums_outer_kernel<T>, r.grid, r.block, 0, stream, p);
  EMBER_CUDA_LAUNCH_CHECK();
  launch_grad_sums_finalize(p.part_dy, p.part_dy_xhat, splits, l.C,
                            static_cast<float*>(a.sum_dy.data_ptr()),
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
  if (l.channels_inner)
    launch_dependent(bn_backward_inner_kernel<T>, e.grid, e.block, 0, stream, p);
  else
    launch_dependent(bn_backward_outer_kernel<T>, e.grid, e.block, 0, stream, p);
  EMBER_CUDA_LAUNCH_CHECK();
}

void channel_grad_sums_cuda(const ChannelGradSumsArgs& a) {
  const Device device = a.x.device();
  check_stats_tensor(a.sum_dy, a.layout.C, device, "sum_dy");
  check_stats_tensor(a.sum_dy_xhat, a.layout.C, device, "sum_dy_xhat");
  EMBER_INTERNAL_ASSERT(a.stats.group_size >= 1, "channel_grad_sums: group_size ",
                        a.stats.group_size);
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  dispatch_floating<kNormFloatingTypes>(
      a.x.dtype(), "norm backward", [&](auto tag) { launch_grad_sums<decltype(tag)>(a, stream); });
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
  launch_dependent(grad_sums_finalize_kernel, dim3(finalize_grid(C)), finalize_block(splits), 0,
                   stream, part_dy, part_dy_xhat, splits, C, sum_dy, sum_dy_xhat);
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace ember::cuda::norm

namespace ember {
EMBER_REGISTER_KERNEL(channel_grad_sums_kernel, CUDA, cuda::norm::kCudaNormTypes,
                      &cuda::norm::channel_grad_sums_cuda);
EMBER_REGISTER_KERNEL(batch_norm_backward_elemt_kernel, CUDA, cuda::norm::kCudaNormTypes,
                      &cuda::norm::batch_norm_backward_elemt_cuda);
}  // namespace ember
