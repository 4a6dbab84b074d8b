// The kernel interfaces behind the optimizers, the gradient scaler and gradient clipping
// (nn/optim.h, nn/grad_scaler.h, nn/clip_grad.h). Every kernel takes LISTS of tensors and updates
// them in one pass per element: the CPU kernels (cpu_kernels/optim.cpp) loop tensor by tensor, the
// CUDA kernels (cuda_kernels/optim/optim.cu) pack many tensors' pointers and sizes into one launch
// ("multi-tensor apply": chunks of kMultiTensorChunk elements, one per block, 16-byte vectors when
// the pointers allow).
//
// Capture-safe contract: no kernel here synchronizes the host, allocates outside the caching
// allocator, or branches on the host on a device value. Everything that changes between steps
// (the learning rate, the momentum that one-cycle schedules cycle, the Adam step counts, the
// GradScaler's scale and its inf/NaN flag) is READ FROM DEVICE MEMORY by the kernels, so a step
// captured in a CUDA graph stays right when those values change between replays.
//
// Common rules for every list argument: all tensors of one call live on one device and have one
// dtype (the optimizer groups them; the dtype selects the table entry), each is dense (its
// elements fill [data_ptr, data_ptr + numel) in some order), and tensors that are updated together
// (a parameter, its gradient and its state) share one layout (equal strides), so element i of one
// is element i of the others. Device scalars: `lr` and `momentum` are float64 one-element tensors;
// `found_inf`, `scale`, `total_norm` and the step counts are float32 one-element tensors;
// `growth_tracker` is int32. `found_inf` may be undefined; when it is defined and nonzero the
// optimizer kernels write nothing at all (a skipped step, as GradScaler wants).
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "ember/dispatch/registry.h"
#include "ember/tensor/tensor.h"

namespace ember {

// Elements per chunk of the CUDA multi-tensor kernels (one chunk per thread block).
inline constexpr int64_t kMultiTensorChunk = 65536;

// Every list argument below must be dense (is_dense_layout, tensor/tensor.h).

// The gradients of `parameters` (those that have one) as the lists the GradScaler and clipping
// kernels below take: grouped by dtype (in DType order, so reductions over the groups run in a
// fixed order), each dense (a gradient that is not is replaced on its parameter by a contiguous
// copy). Throws, naming `op`, on an undefined parameter, a gradient that is not floating, or
// gradients on two devices (`mixed_devices_hint` says what to do instead).
struct GradsByDtype {
  Device device;  // of every gradient; meaningless when `lists` is empty
  std::map<DType, std::vector<Tensor>> lists;
};
GradsByDtype group_grads_by_dtype(const std::vector<Tensor>& parameters, const char* op,
                                  const char* mixed_devices_hint);

// ---- SGD ----------------------------------------------------------------------------------------
// For each i (PyTorch's torch.optim.SGD, one fused pass):
//   d = (maximize ? -grad : grad) + weight_decay * param
//   with momentum buffers:  step += 1
//                           buf = step == 1 ? d : momentum * buf + (1 - dampening) * d
//                           d = nesterov ? d + momentum * buf : buf
//   param -= lr * d
// `momentum_buffers` and `steps` are empty when momentum is off (the host's momentum is 0), else
// one per parameter. The step count makes PyTorch's "first step copies the gradient" rule hold on
// the device, also when an earlier step was skipped by found_inf.
struct SgdKernelArgs {
  std::vector<Tensor> params, grads, momentum_buffers, steps;
  Tensor lr, momentum, found_inf;
  double dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;  // ascend: the gradient is negated first
};
using SgdKernel = void (*)(const SgdKernelArgs& args);
EMBER_DECLARE_KERNEL(sgd_kernel, SgdKernel)

// ---- Adam / AdamW -------------------------------------------------------------------------------
// For each i (torch.optim.Adam / AdamW, one fused pass; `beta1` is a device scalar so that
// one-cycle schedules can cycle it):
//   step += 1;  g = maximize ? -grad : grad
//   decoupled (AdamW): param *= 1 - lr * weight_decay      else: g = grad + weight_decay * param
//   exp_avg    = beta1 * exp_avg + (1 - beta1) * g
//   exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g * g
//   amsgrad:   max_exp_avg_sq = max(max_exp_avg_sq, exp_avg_sq), used below instead of exp_avg_sq
//   denom = sqrt(exp_avg_sq) / sqrt(1 - beta2^step) + eps
//   param -= lr / (1 - beta1^step) * exp_avg / denom
// The per-tensor factors are computed in float64, the per-element math in float (float64 for f64).
struct AdamKernelArgs {
  std::vector<Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps;
  Tensor lr, beta1, found_inf;
  double beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled_weight_decay = false;  // AdamW
  bool amsgrad = false;                 // max_exp_avg_sqs is one per parameter when set, else empty
  bool maximize = false;                // ascend: the gradient is negated first
};
using AdamKernel = void (*)(const AdamKernelArgs& args);
EMBER_DECLARE_KERNEL(adam_kernel, AdamKernel)

// ---- GradScaler ---------------------------------------------------------------------------------
// PyTorch's _amp_foreach_non_finite_check_and_unscale_: every element of every tensor is multiplied
// by inv_scale = float(1 / double(scale[0])) (left alone when that is 1), and found_inf[0] is set
// to 1 when any element was inf or NaN before the multiply (it is never cleared here).
using UnscaleKernel = void (*)(const std::vector<Tensor>& grads, const Tensor& scale,
                               const Tensor& found_inf);
EMBER_DECLARE_KERNEL(unscale_kernel, UnscaleKernel)

// PyTorch's _amp_update_scale_ (selected by float32, the scale's dtype):
//   found_inf[0] != 0:  scale *= backoff_factor, growth_tracker = 0
//   else:               growth_tracker += 1; when it reaches growth_interval,
//                       scale *= growth_factor (kept only if finite) and growth_tracker = 0
using UpdateScaleKernel = void (*)(const Tensor& scale, const Tensor& growth_tracker,
                                   const Tensor& found_inf, double growth_factor,
                                   double backoff_factor, int64_t growth_interval);
EMBER_DECLARE_KERNEL(update_scale_kernel, UpdateScaleKernel)

// ---- gradient clipping
// ---------------------------------------------------------------------------- Accumulates the
// p-norm of all the tensors taken as one vector into `accumulator` (float64, one element): += sum
// |x|^p for finite p > 0, or = max(accumulator, max |x|) for p = inf. The sum is deterministic
// (fixed per-block partials reduced in a fixed order). NaN propagates.
using GradNormKernel = void (*)(const std::vector<Tensor>& tensors, double norm_type,
                                const Tensor& accumulator);
EMBER_DECLARE_KERNEL(grad_norm_kernel, GradNormKernel)

// Multiplies every element by coef = min(float(max_norm) / (total_norm[0] + 1e-6f), 1), computed on
// the device from `total_norm` (float32, one element), as torch.nn.utils.clip_grad_norm_ does.
using ClipByNormKernel = void (*)(const std::vector<Tensor>& tensors, const Tensor& total_norm,
                                  double max_norm);
EMBER_DECLARE_KERNEL(clip_by_norm_kernel, ClipByNormKernel)

}  // namespace ember
