// The CUDA batch-norm apply kernel (batch_norm_apply of kernel_interface/norm.h):
// y = (x - mean) * invstd * weight + bias (+ residual, then ReLU) in one pass (1 read, 1 write),
// and the registration of CUDA's "two_pass" training forward (statistics, then this kernel).
// float32, float16 and bfloat16 inputs, float32 statistics, weight and bias in float32 or the
// input's dtype (NormParam: a 16-bit model's parameters need no conversion). Channels-inner
// layouts: a thread owns a vector of 16 bytes of consecutive channels and walks rows;
// channels-outer: flat over the tensor in 16-byte vectors when S allows.
#include "ember/cuda_kernels/common/dependent_launch.cuh"
#include "ember/cuda_kernels/norm/batch_norm_plan.cuh"
#include "ember/cuda_kernels/norm/norm.cuh"
#include "ember/dispatch/algorithm.h"

namespace ember::cuda::norm {
namespace {

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
  FlatChannel flat;  // channels-outer
};

template <typename T>
__global__ void __launch_bounds__(kThreads) bn_apply_inner_kernel(ApplyParams<T> p) {
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
__global__ void __launch_bounds__(kThreads) bn_apply_outer_kernel(ApplyParams<T> p) {
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

// ---- launcher and table entry -------------------------------------------------------------------

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
  if (l.channels_inner)
    launch_dependent(bn_apply_inner_kernel<T>, e.grid, e.block, 0, stream, p);
  else
    launch_dependent(bn_apply_outer_kernel<T>, e.grid, e.block, 0, stream, p);
  EMBER_CUDA_LAUNCH_CHECK();
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

}  // namespace
}  // namespace ember::cuda::norm

namespace ember {
EMBER_REGISTER_KERNEL(batch_norm_apply_kernel, CUDA, cuda::norm::kCudaNormTypes,
                      &cuda::norm::batch_norm_apply_cuda);
// "two_pass" (kernel_interface/norm.cpp): batch_norm_stats_kernel, then batch_norm_apply_kernel.
// "single_read" registers in cuda_kernels/norm/batch_norm_single_read.cu.
EMBER_REGISTER_ALGORITHM(BatchNormForwardProblem, "batch_norm", forward, CUDA,
                         batch_norm_two_pass_algorithm());
}  // namespace ember
