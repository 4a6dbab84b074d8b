// Normalization: the public ops batch_norm (with the fused ResNet tails batch_norm_relu and
// batch_norm_add_relu), layer_norm, group_norm and instance_norm. Their kernel tables and the
// algorithm slot "batch_norm.forward" are in kernel_interface/norm.h (included here, so the
// statistics dtype, ChannelLayout and the rest stay visible to users of this header). The ops and
// their backward formulas live in ops/norm.cpp.
#pragma once
#include <cstdint>

#include "ember/kernel_interface/norm.h"
#include "ember/tensor/tensor.h"

namespace ember {

// ---- ops ---------------------------------------------------------------------------------------

// Batch normalization over dim 1 (channels) of x [N, C], [N, C, L], [N, C, H, W] or
// [N, C, D, H, W]; any strides (NCHW and channels_last run without a copy; other layouts are
// copied once), output in x's layout:
//   y = (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c]
// weight, bias, running_mean, running_var: [C] or undefined (weight = 1, bias = 0).
// training: mean and var are the batch statistics over every dim but 1 (var biased), and the
//   running statistics, when given, are updated in place as PyTorch does:
//   running = (1 - momentum) * running + momentum * batch_stat, with the UNBIASED batch variance.
//   Needs more than one value per channel.
// eval (training = false): mean and var are running_mean and running_var (both required).
// Differentiable in x, weight and bias (not in the running statistics).
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum = 0.1, double eps = 1e-5);

// relu(batch_norm(x, ...)) in one pass over memory, forward and backward.
Tensor batch_norm_relu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       const Tensor& running_mean, const Tensor& running_var, bool training,
                       double momentum = 0.1, double eps = 1e-5);

// relu(batch_norm(x, ...) + residual), the tail of a ResNet block; residual has x's shape, dtype
// and device. Differentiable in x, residual, weight and bias.
// Backward of both fused ops gates the gradient with the saved OUTPUT (y > 0, which holds exactly
// where the pre-activation is > 0): the output is kept alive by the next layer anyway, so this
// costs no extra memory and no extra write in the forward, unlike a separate mask.
Tensor batch_norm_add_relu(const Tensor& x, const Tensor& residual, const Tensor& weight,
                           const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, bool training, double momentum = 0.1,
                           double eps = 1e-5);

// Layer normalization over the trailing dims `normalized_shape` of x [..., *normalized_shape]:
//   y = (x - mean) / sqrt(var + eps) * weight + bias, statistics per leading index (var biased).
// weight, bias: of shape normalized_shape, or undefined. Output contiguous.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

// Group normalization of x [N, C, *] (2-D and up): channels split into `groups` groups of C /
// groups; statistics per (sample, group) over its channels and spatial positions; weight, bias [C]
// (per channel) or undefined. Output contiguous (a channels_last input is computed on a contiguous
// copy).
Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

// Instance normalization of x [N, C, *] (3-D and up): statistics per (sample, channel) over the
// spatial dims. Implemented as group_norm with groups == C when use_input_stats (the running
// statistics, when given, are then updated in place with the batch mean of the per-instance mean
// and unbiased variance, as PyTorch does), and as eval-mode batch_norm with the running statistics
// otherwise. weight, bias, running_mean, running_var: [C] or undefined.
Tensor instance_norm(const Tensor& x, const Tensor& weight = {}, const Tensor& bias = {},
                     const Tensor& running_mean = {}, const Tensor& running_var = {},
                     bool use_input_stats = true, double momentum = 0.1, double eps = 1e-5);

// A weight, bias or running statistic ([C] or normalized_shape) as the normalization kernels take
// it: contiguous and 1-D, in its own dtype, which the ops limit to the statistics dtype or the
// input's; the kernels read either, so a float16 / bfloat16 model's parameters need no conversion
// kernel per call. May alias p; undefined for an undefined p. Also used by SyncBatchNorm.
Tensor norm_param_for_kernel(const Tensor& p);

}  // namespace ember
