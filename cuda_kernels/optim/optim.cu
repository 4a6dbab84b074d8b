// CUDA kernels behind the optimizer, GradScaler and gradient-clipping tables
// (kernel_interface/optim.h), as fused multi-tensor kernels (the "multi-tensor apply" of Apex and
// PyTorch's _foreach/fused optimizers): the host packs the pointers and sizes of many tensors into
// the kernel argument (MultiTensorMeta, under the classic 4 KB parameter limit), every block takes
// one chunk of kMultiTensorChunk elements of one tensor (block_to_tensor / block_to_chunk), and
// each launch covers up to kMaxBlocksPerLaunch chunks of up to MultiTensorMeta<Depth>::kMaxTensors
// tensors; a tensor that does not fit continues in the next launch. Inside a chunk the threads walk
// 16-byte vectors of every list when all of the chunk's pointers are 16-byte aligned, else
// elements.
//
// Device scalars (learning rate, momentum/beta1, the GradScaler scale, found_inf, the total norm,
// the step counts) are read by the kernels, never by the host, so every launch here can be
// captured in a CUDA graph. Launches per call: SGD and Adam one per pack (+ one per 480
// parameters for the step counts); unscale one per pack; the norm one per pack plus one finishing
// block; clipping one per pack. Writes: parameters and states are updated in place, gradients
// only by unscale and clipping.
// Instantiations: one per floating dtype (float, double, __half, __nv_bfloat16) and kernel kind.
#include <array>
#include <cmath>

#include "ember/cuda_kernels/common/common.cuh"
#include "ember/cuda_kernels/optim/multi_tensor.cuh"
#include "ember/kernel_interface/optim.h"

namespace ember::cuda {
namespace {

// ---- SGD
// ------------------------------------------------------------------------------------------

struct SgdScalars {
  double dampening, weight_decay;
  bool nesterov, maximize;
};

// Lists: 0 param, 1 grad, 2 momentum buffer (Depth 3 only).
template <typename T, int Depth>
__global__ void __launch_bounds__(kMultiTensorThreads)
    sgd_multi_tensor_kernel(MultiTensorMeta<Depth> meta, const double* lr, const double* momentum,
                            const float* found_inf, SgdScalars s) {
  using A = OpMath<T>;
  if (step_skipped(found_inf)) return;
  const Chunk<T, Depth> c = this_chunk<T, Depth>(meta);
  const A neg_lr = A(-*lr);
  const A weight_decay = A(s.weight_decay);
  const bool decay = s.weight_decay != 0;
  if constexpr (Depth == 2) {
    auto op = [&](A(&v)[2]) {
      A d = s.maximize ? -v[1] : v[1];
      if (decay) d += weight_decay * v[0];
      v[0] = v[0] + neg_lr * d;
    };
    apply_to_chunk<T, 2, 0b01u>(c, op);
  } else {
    const A mom = A(*momentum);
    const A one_minus_dampening = A(1.0 - s.dampening);
    const bool first_step = *meta.steps[c.tensor] == 1.0f;
    const bool nesterov = s.nesterov;
    auto op = [&](A(&v)[3]) {
      A d = s.maximize ? -v[1] : v[1];
      if (decay) d += weight_decay * v[0];
      const A buf = first_step ? d : mom * v[2] + one_minus_dampening * d;
      v[2] = buf;
      d = nesterov ? d + mom * buf : buf;
      v[0] = v[0] + neg_lr * d;
    };
    apply_to_chunk<T, 3, 0b101u>(c, op);
  }
}

template <typename T>
void launch_sgd(const SgdKernelArgs& a, cudaStream_t stream) {
  const SgdScalars s{a.dampening, a.weight_decay, a.nesterov, a.maximize};
  const double* lr = device_ptr<double>(a.lr);
  const float* found_inf = device_ptr<float>(a.found_inf);
  if (a.momentum_buffers.empty()) {
    for_each_pack<2>(
        {&a.params, &a.grads}, nullptr, [&](const MultiTensorMeta<2>& meta, int blocks) {
          sgd_multi_tensor_kernel<T, 2>
              <<<blocks, kMultiTensorThreads, 0, stream>>>(meta, lr, nullptr, found_inf, s);
          EMBER_CUDA_LAUNCH_CHECK();
        });
    return;
  }
  increment_steps(a.steps, found_inf, stream);
  const double* momentum = device_ptr<double>(a.momentum);
  for_each_pack<3>({&a.params, &a.grads, &a.momentum_buffers}, &a.steps,
                   [&](const MultiTensorMeta<3>& meta, int blocks) {
                     sgd_multi_tensor_kernel<T, 3><<<blocks, kMultiTensorThreads, 0, stream>>>(
                         meta, lr, momentum, found_inf, s);
                     EMBER_CUDA_LAUNCH_CHECK();
                   });
}

void sgd_cuda(const SgdKernelArgs& a) {
  if (a.params.empty()) return;
  const Device device = a.params[0].device();
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  dispatch_floating(a.params[0].dtype(), "SGD",
                    [&](auto tag) { launch_sgd<decltype(tag)>(a, stream); });
}

// ---- Adam / AdamW
// -----------------------------------------------------------------------------------

struct AdamScalars {
  double beta2, eps, weight_decay;
  bool decoupled, maximize;
};

// Lists: 0 param, 1 grad, 2 exp_avg, 3 exp_avg_sq, 4 max_exp_avg_sq (Depth 5: amsgrad).
template <typename T, int Depth>
__global__ void __launch_bounds__(kMultiTensorThreads)
    adam_multi_tensor_kernel(MultiTensorMeta<Depth> meta, const double* lr, const double* beta1,
                             const float* found_inf, AdamScalars s) {
  using A = OpMath<T>;
  if (step_skipped(found_inf)) return;
  const Chunk<T, Depth> c = this_chunk<T, Depth>(meta);
  const double lr_d = *lr, beta1_d = *beta1;
  const double step = double(*meta.steps[c.tensor]);
  const double bias_correction1 = 1.0 - pow(beta1_d, step);
  const double bias_correction2 = 1.0 - pow(s.beta2, step);
  const A step_size = A(lr_d / bias_correction1);
  const A bias_correction2_sqrt = A(sqrt(bias_correction2));
  const A b1 = A(beta1_d), one_minus_b1 = A(1.0 - beta1_d);
  const A b2 = A(s.beta2), one_minus_b2 = A(1.0 - s.beta2);
  const A eps = A(s.eps);
  const A weight_decay = A(s.weight_decay);
  const A decay_factor = A(1.0 - lr_d * s.weight_decay);
  const bool decay = s.weight_decay != 0;
  const bool decoupled = s.decoupled;
  auto op = [&](A(&v)[Depth]) {
    A param = v[0];
    A grad = s.maximize ? -v[1] : v[1];
    if (decay) {
      if (decoupled)
        param *= decay_factor;
      else
        grad += weight_decay * param;
    }
    const A exp_avg = b1 * v[2] + one_minus_b1 * grad;
    const A exp_avg_sq = b2 * v[3] + one_minus_b2 * grad * grad;
    v[2] = exp_avg;
    v[3] = exp_avg_sq;
    A second_moment = exp_avg_sq;
    if constexpr (Depth == 5) {
      second_moment = v[4] > exp_avg_sq ? v[4] : exp_avg_sq;
      v[4] = second_moment;
    }
    const A denom = sqrt(second_moment) / bias_correction2_sqrt + eps;
    v[0] = param - step_size * exp_avg / denom;
  };
  apply_to_chunk<T, Depth, Depth == 5 ? 0b11101u : 0b1101u>(c, op);
}

template <typename T>
void launch_adam(const AdamKernelArgs& a, cudaStream_t stream) {
  const AdamScalars s{a.beta2, a.eps, a.weight_decay, a.decoupled_weight_decay, a.maximize};
  const double* lr = device_ptr<double>(a.lr);
  const double* beta1 = device_ptr<double>(a.beta1);
  const float* found_inf = device_ptr<float>(a.found_inf);
  increment_steps(a.steps, found_inf, stream);
  if (a.amsgrad) {
    for_each_pack<5>({&a.params, &a.grads, &a.exp_avgs, &a.exp_avg_sqs, &a.max_exp_avg_sqs},
                     &a.steps, [&](const MultiTensorMeta<5>& meta, int blocks) {
                       adam_multi_tensor_kernel<T, 5><<<blocks, kMultiTensorThreads, 0, stream>>>(
                           meta, lr, beta1, found_inf, s);
                       EMBER_CUDA_LAUNCH_CHECK();
                     });
  } else {
    for_each_pack<4>({&a.params, &a.grads, &a.exp_avgs, &a.exp_avg_sqs}, &a.steps,
                     [&](const MultiTensorMeta<4>& meta, int blocks) {
                       adam_multi_tensor_kernel<T, 4><<<blocks, kMultiTensorThreads, 0, stream>>>(
                           meta, lr, beta1, found_inf, s);
                       EMBER_CUDA_LAUNCH_CHECK();
                     });
  }
}

void adam_cuda(const AdamKernelArgs& a) {
  if (a.params.empty()) return;
  const Device device = a.params[0].device();
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  dispatch_floating(a.params[0].dtype(), "Adam",
                    [&](auto tag) { launch_adam<decltype(tag)>(a, stream); });
}

// ---- GradScaler
// ---------------------------------------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(kMultiTensorThreads)
    unscale_multi_tensor_kernel(MultiTensorMeta<1> meta, const float* scale, float* found_inf) {
  using A = OpMath<T>;
  const Chunk<T, 1> c = this_chunk<T, 1>(meta);
  const float inv_scale = float(1.0 / double(*scale));
  const A inv = A(inv_scale);
  const bool scaling = inv_scale != 1.0f;
  bool non_finite = false;
  auto op = [&](A(&v)[1]) {
    if (!isfinite(v[0])) non_finite = true;
    if (scaling) v[0] = v[0] * inv;
  };
  apply_to_chunk<T, 1, 0b1u>(c, op);
  if (non_finite) *found_inf = 1.0f;  // every writer writes the same value
}

void unscale_cuda(const std::vector<Tensor>& grads, const Tensor& scale, const Tensor& found_inf) {
  if (grads.empty()) return;
  const Device device = grads[0].device();
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  const float* scale_ptr = device_ptr<float>(scale);
  float* found_ptr = device_ptr<float>(found_inf);
  dispatch_floating(grads[0].dtype(), "GradScaler.unscale_", [&](auto tag) {
    using T = decltype(tag);
    for_each_pack<1>({&grads}, nullptr, [&](const MultiTensorMeta<1>& meta, int blocks) {
      unscale_multi_tensor_kernel<T>
          <<<blocks, kMultiTensorThreads, 0, stream>>>(meta, scale_ptr, found_ptr);
      EMBER_CUDA_LAUNCH_CHECK();
    });
  });
}

__global__ void update_scale_kernel_impl(float* scale, int32_t* growth_tracker,
                                         const float* found_inf, double growth_factor,
                                         double backoff_factor, int64_t growth_interval) {
  if (*found_inf != 0.0f) {
    *scale = float(double(*scale) * backoff_factor);
    *growth_tracker = 0;
    return;
  }
  const int64_t successful = int64_t(*growth_tracker) + 1;
  if (successful == growth_interval) {
    const float grown = float(double(*scale) * growth_factor);
    if (isfinite(grown)) *scale = grown;
    *growth_tracker = 0;
  } else {
    *growth_tracker = int32_t(successful);
  }
}

void update_scale_cuda(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                       double growth_factor, double backoff_factor, int64_t growth_interval) {
  DeviceGuard guard(scale.device());
  update_scale_kernel_impl<<<1, 1, 0, stream_of(scale.device())>>>(
      device_ptr<float>(scale), device_ptr<int32_t>(growth_tracker), device_ptr<float>(found_inf),
      growth_factor, backoff_factor, growth_interval);
  EMBER_CUDA_LAUNCH_CHECK();
}

// ---- gradient norm and clipping
// -------------------------------------------------------------------

enum class NormKind : int { two, one, inf, general };

// NaN-propagating max (fmaxf would drop a NaN).
template <typename A>
__device__ __forceinline__ A nan_max(A a, A b) {
  return (a != a || a > b) ? a : b;
}

template <typename A>
__device__ __forceinline__ A combine(NormKind kind, A a, A b) {
  return kind == NormKind::inf ? nan_max(a, b) : a + b;
}

// Reduces one value per thread over the block (sum, or NaN-propagating max for the inf norm);
// the result is valid in thread 0. Fixed order, so deterministic.
template <typename A>
__device__ A block_reduce(A value, NormKind kind) {
  __shared__ A warp_results[kMultiTensorThreads / 32];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    value = combine(kind, value, __shfl_down_sync(0xffffffffu, value, offset));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_results[warp] = value;
  __syncthreads();
  if (warp == 0) {
    const int num_warps = blockDim.x / 32;
    value = lane < num_warps ? warp_results[lane] : A(0);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
      value = combine(kind, value, __shfl_down_sync(0xffffffffu, value, offset));
  }
  return value;
}

// One partial per block: sum |x|^p (or max |x|) over its chunk, into partials[first_block + block].
template <typename T>
__global__ void __launch_bounds__(kMultiTensorThreads)
    grad_norm_partials_kernel(MultiTensorMeta<1> meta, NormKind kind, float p, double* partials,
                              int64_t first_block) {
  using A = OpMath<T>;
  const Chunk<T, 1> c = this_chunk<T, 1>(meta);
  A local = A(0);
  auto op = [&](A(&v)[1]) {
    const A a = v[0] < A(0) ? -v[0] : v[0];
    switch (kind) {
      case NormKind::two:
        local += a * a;
        break;
      case NormKind::one:
        local += a;
        break;
      case NormKind::inf:
        local = nan_max(local, a);
        break;
      case NormKind::general:
        local += A(pow(a, A(p)));
        break;
    }
  };
  apply_to_chunk<T, 1, 0u>(c, op);
  const A block_total = block_reduce(local, kind);
  if (threadIdx.x == 0) partials[first_block + blockIdx.x] = double(block_total);
}

// accumulator = accumulator + sum(partials) (or the max), by one block in a fixed order.
__global__ void __launch_bounds__(kMultiTensorThreads)
    grad_norm_finish_kernel(const double* partials, int64_t count, NormKind kind,
                            double* accumulator) {
  double local = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x)
    local = combine(kind, local, partials[i]);
  const double total = block_reduce(local, kind);
  if (threadIdx.x == 0) *accumulator = combine(kind, *accumulator, total);
}

void grad_norm_cuda(const std::vector<Tensor>& tensors, double norm_type,
                    const Tensor& accumulator) {
  if (tensors.empty()) return;
  const Device device = tensors[0].device();
  const int64_t chunks = total_chunks(tensors);
  if (chunks == 0) return;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  const NormKind kind = std::isinf(norm_type) ? NormKind::inf
                        : norm_type == 2      ? NormKind::two
                        : norm_type == 1      ? NormKind::one
                                              : NormKind::general;
  // One partial per chunk; allocated from the caching allocator on this stream (capture-safe).
  Tensor partials = empty({chunks}, DType::f64, device);
  double* partials_ptr = partials.data<double>();
  dispatch_floating(tensors[0].dtype(), "clip_grad_norm_", [&](auto tag) {
    using T = decltype(tag);
    int64_t first_block = 0;
    for_each_pack<1>({&tensors}, nullptr, [&](const MultiTensorMeta<1>& meta, int blocks) {
      grad_norm_partials_kernel<T><<<blocks, kMultiTensorThreads, 0, stream>>>(
          meta, kind, float(norm_type), partials_ptr, first_block);
      EMBER_CUDA_LAUNCH_CHECK();
      first_block += blocks;
    });
  });
  grad_norm_finish_kernel<<<1, kMultiTensorThreads, 0, stream>>>(partials_ptr, chunks, kind,
                                                                 accumulator.data<double>());
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
__global__ void __launch_bounds__(kMultiTensorThreads)
    clip_by_norm_multi_tensor_kernel(MultiTensorMeta<1> meta, const float* total_norm,
                                     double max_norm) {
  using A = OpMath<T>;
  const Chunk<T, 1> c = this_chunk<T, 1>(meta);
  float coef = float(max_norm) / (*total_norm + 1e-6f);
  if (coef > 1.0f) coef = 1.0f;  // a NaN norm keeps a NaN coefficient, as in PyTorch
  const A scale = A(coef);
  auto op = [&](A(&v)[1]) { v[0] = v[0] * scale; };
  apply_to_chunk<T, 1, 0b1u>(c, op);
}

void clip_by_norm_cuda(const std::vector<Tensor>& tensors, const Tensor& total_norm,
                       double max_norm) {
  if (tensors.empty()) return;
  const Device device = tensors[0].device();
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  const float* norm_ptr = device_ptr<float>(total_norm);
  dispatch_floating(tensors[0].dtype(), "clip_grad_norm_", [&](auto tag) {
    using T = decltype(tag);
    for_each_pack<1>({&tensors}, nullptr, [&](const MultiTensorMeta<1>& meta, int blocks) {
      clip_by_norm_multi_tensor_kernel<T>
          <<<blocks, kMultiTensorThreads, 0, stream>>>(meta, norm_ptr, max_norm);
      EMBER_CUDA_LAUNCH_CHECK();
    });
  });
}

}  // namespace
}  // namespace ember::cuda

namespace ember {
EMBER_REGISTER_KERNEL(sgd_kernel, CUDA, dispatch::kFloatingTypes, &cuda::sgd_cuda);
EMBER_REGISTER_KERNEL(adam_kernel, CUDA, dispatch::kFloatingTypes, &cuda::adam_cuda);
EMBER_REGISTER_KERNEL(unscale_kernel, CUDA, dispatch::kFloatingTypes, &cuda::unscale_cuda);
EMBER_REGISTER_KERNEL(update_scale_kernel, CUDA, {DType::f32}, &cuda::update_scale_cuda);
EMBER_REGISTER_KERNEL(grad_norm_kernel, CUDA, dispatch::kFloatingTypes, &cuda::grad_norm_cuda);
EMBER_REGISTER_KERNEL(clip_by_norm_kernel, CUDA, dispatch::kFloatingTypes,
                      &cuda::clip_by_norm_cuda);
}  // namespace ember
