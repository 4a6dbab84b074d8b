// The normalization kernel interface: what the batch-norm, layer-norm and group-norm kernels of
// cpu_kernels/norm.cpp and cuda_kernels/norm/ see. Channel layouts and statistic indexing, the
// argument structs and kernel tables (batch_norm_stats, batch_norm_apply, channel_grad_sums,
// batch_norm_backward_elemt, row_norm_forward, row_norm_backward_data), and the training forward
// of batch norm as an algorithm-cache problem (slot "batch_norm.forward": "two_pass" on every
// device, "single_read" on CUDA). The tables and the slot's glue are defined in
// kernel_interface/norm.cpp; the public ops are in ops/norm.h.
//
// Precision: statistics (mean, variance, the saved mean and 1/std) are float32 for float32,
// float16 and bfloat16 inputs and float64 for float64 inputs ("the accumulation dtype"); the CPU
// kernels accumulate in double, the CUDA kernels in float with Welford updates and Chan merges.
// Parameters (weight, bias, running statistics) share one dtype: the input's, or float32 for a
// float16/bfloat16 input (mixed precision, as PyTorch allows).
#pragma once
#include <cstdint>

#include "ember/dispatch/algo_cache.h"
#include "ember/dispatch/registry.h"
#include "ember/tensor/tensor.h"

namespace ember {

// The dtype normalization statistics are kept in for input dtype `t`: float64 for float64, else
// float32.
DType norm_stats_dtype(DType t);

// ---- kernels ----------------------------------------------------------------------------------
// Kernels are selected by the dtype of x and run on x's device. Every tensor handed to a kernel is
// dense (no gaps) in the layout described; [C]-sized tensors and statistics are contiguous and of
// the accumulation dtype (norm_stats_dtype of x), except the parameters (weight, bias and the
// running statistics), which are of the accumulation dtype or x's (as the ops allow). Outputs are
// OVERWRITTEN, never accumulated into.

// A dense tensor of logical shape [N, C, spatial...] seen by the channel kernels as N x C x S
// (S = product of the spatial sizes, 1 for 2-D input):
//   channels_inner = false: memory order [N, C, S]  (NCHW: element (n, c, s) at (n * C + c) * S +
//   s) channels_inner = true:  memory order [N, S, C]  (NHWC: element (n, c, s) at (n * S + s) * C
//   + c)
struct ChannelLayout {
  int64_t N = 1, C = 1, S = 1;
  bool channels_inner = false;
  int64_t numel() const { return N * C * S; }
  int64_t per_channel() const { return N * S; }  // values reduced into one channel's statistics
};

// Which statistic an element (n, c, s) is normalized with: index n * n_stride + c / group_size into
// the mean / rstd arrays. Batch norm: {0, 1} (one per channel). Layer norm seen as a ChannelLayout
// with rows as N and features as C: {1, C} (one per row). Group norm: {G, C / G}.
struct StatIndex {
  int64_t n_stride = 0;
  int64_t group_size = 1;
};

// batch_norm_stats: per-channel mean and invstd = 1 / sqrt(biased var + eps) of x, written to
// save_mean and save_invstd ([C]). When running_mean / running_var are defined ([C]) they are
// updated in place with `momentum` (running_var with the unbiased variance). Needs
// layout.per_channel() >= 2. running_mean and running_var are contiguous and of one dtype.
struct BatchNormStatsArgs {
  Tensor x;
  ChannelLayout layout;
  double eps = 1e-5;
  double momentum = 0.1;
  Tensor save_mean, save_invstd;     // outputs
  Tensor running_mean, running_var;  // updated in place, or undefined
};
using BatchNormStatsKernel = void (*)(const BatchNormStatsArgs& args);
EMBER_DECLARE_KERNEL(batch_norm_stats_kernel, BatchNormStatsKernel)

// batch_norm_apply: y = (x - mean[c]) * invstd[c] * weight[c] + bias[c] (+ residual), then
// max(0, .) when relu. y, x and residual share x's layout; weight / bias / residual may be
// undefined; weight and bias are contiguous [C] in the statistics dtype or x's.
struct BatchNormApplyArgs {
  Tensor y;  // output
  Tensor x, residual;
  Tensor mean, invstd, weight, bias;
  ChannelLayout layout;
  bool relu = false;
};
using BatchNormApplyKernel = void (*)(const BatchNormApplyArgs& args);
EMBER_DECLARE_KERNEL(batch_norm_apply_kernel, BatchNormApplyKernel)

// channel_grad_sums: for every channel c, with g = dy gated by `gate` (g = gate > 0 ? dy : 0 when
// gate is defined, else dy) and xhat = (x - mean[i]) * rstd[i], i = the StatIndex of (n, c):
//   sum_dy[c] = sum over (n, s) of g,    sum_dy_xhat[c] = sum over (n, s) of g * xhat
// i.e. the bias and weight gradients of batch norm, and of layer / group norm with the right
// StatIndex. dy, x, gate share one layout.
struct ChannelGradSumsArgs {
  Tensor dy, x, gate;
  Tensor mean, rstd;
  ChannelLayout layout;
  StatIndex stats;
  Tensor sum_dy, sum_dy_xhat;  // outputs, [C]
};
using ChannelGradSumsKernel = void (*)(const ChannelGradSumsArgs& args);
EMBER_DECLARE_KERNEL(channel_grad_sums_kernel, ChannelGradSumsKernel)

// batch_norm_backward_elemt: with g = dy gated as above, xhat = (x - mean[c]) * invstd[c] and
// M = layout.per_channel():
//   training: dx = (g - sum_dy[c] / M - xhat * sum_dy_xhat[c] / M) * invstd[c] * weight[c]
//   eval:     dx = g * invstd[c] * weight[c]              (sum_dy, sum_dy_xhat unused)
//   d_residual = g
// dx and d_residual are each written when defined; weight may be undefined (1), else contiguous
// [C] in the statistics dtype or dy's.
struct BatchNormBackwardArgs {
  Tensor dx, d_residual;  // outputs
  Tensor dy, x, gate;
  Tensor mean, invstd, weight;
  Tensor sum_dy, sum_dy_xhat;
  ChannelLayout layout;
  bool training = true;
};
using BatchNormBackwardKernel = void (*)(const BatchNormBackwardArgs& args);
EMBER_DECLARE_KERNEL(batch_norm_backward_elemt_kernel, BatchNormBackwardKernel)

// ---- the training forward as an algorithm-cache problem ----------------------------------------

// One training-mode batch-norm forward: batch statistics of x, the running-statistics update and
//   y = (x - mean[c]) * invstd[c] * weight[c] + bias[c] (+ residual), then max(0, .) when relu.
// Chosen among by the AlgoCache from the slot "batch_norm.forward" of x's device type:
//   "two_pass"    (CPU and CUDA) batch_norm_stats_kernel then batch_norm_apply_kernel: x read
//   twice. "single_read" (CUDA, channels-inner layouts with rows of whole 16-byte vectors,
//   activation
//                 band fitting in shared memory) one cooperative kernel holding x on chip in
//                 waves of channels: x read once (cuda_kernels/norm/batch_norm_single_read.cu).
// Both are deterministic. Tensors are as for the kernels above (x, residual and y dense in
// `layout`, [C] tensors contiguous in the statistics dtype, running statistics contiguous or
// undefined); layout.per_channel() >= 2 and x is not empty (the op handles those cases itself).
struct BatchNormForwardProblem {
  Tensor x, residual;   // residual: add_relu tail only, else undefined
  Tensor weight, bias;  // [C] contiguous (statistics dtype or x's) or undefined (1, 0)
  ChannelLayout layout;
  double eps = 1e-5, momentum = 0.1;
  bool relu = false;
  Tensor y, save_mean, save_invstd;  // outputs
  Tensor running_mean, running_var;  // updated in place, or undefined

  Device device() const { return x.device(); }
  // Fresh y, save_mean and save_invstd, and COPIES of the running statistics: a benchmarked
  // candidate never touches the caller's outputs and never updates the real running statistics.
  BatchNormForwardProblem with_scratch_outputs() const;
};

// The op id of "batch_norm" and its forward slot on a device type.
dispatch::OpId batch_norm_op();
dispatch::AlgoSlot& batch_norm_forward_slot(DeviceType device_type);
// The key: x's sizes, dtype and layout, y's (and the residual's) alignment, the channel layout
// (channels-inner or not), the tail, which optional tensors are given and the running-statistics
// dtype, and the device's architecture.
dispatch::AlgoKey batch_norm_forward_key(const BatchNormForwardProblem& problem);
// The algorithm the cache picks for `problem` under the current settings (tests, introspection).
const dispatch::Algorithm<BatchNormForwardProblem>& batch_norm_forward_choose(
    const BatchNormForwardProblem& problem);
// Chooses through algo_cache() and runs; batch_norm, batch_norm_relu and batch_norm_add_relu call
// this in training mode.
void batch_norm_forward_run(const BatchNormForwardProblem& problem);
// "two_pass": the statistics and apply kernels of the problem's device, in turn. Registered for the
// CPU in cpu_kernels/norm.cpp and for CUDA in cuda_kernels/norm/batch_norm_apply.cu.
dispatch::Algorithm<BatchNormForwardProblem> batch_norm_two_pass_algorithm();

// Rows normalized independently: x dense [rows, D]. Element j of row r takes the affine parameter
// of channel (r % groups) * (D / S) + j / S. Layer norm: groups = 1, S = 1 (parameter j). Group
// norm of NCHW x: rows = N * G, D = (C / G) * S, groups = G, S = spatial size.
struct RowNormLayout {
  int64_t rows = 1, D = 1;
  int64_t groups = 1, S = 1;
};

// row_norm_forward: per row mean[r] and rstd[r] = 1 / sqrt(biased var + eps) (Welford), and
// y = (x - mean[r]) * rstd[r] * weight[ch] + bias[ch]. weight / bias may be undefined.
struct RowNormForwardArgs {
  Tensor y, mean, rstd;    // outputs: y like x, mean / rstd [rows]
  Tensor x, weight, bias;  // weight, bias: contiguous [channels] in the statistics dtype or x's
  RowNormLayout layout;
  double eps = 1e-5;
};
using RowNormForwardKernel = void (*)(const RowNormForwardArgs& args);
EMBER_DECLARE_KERNEL(row_norm_forward_kernel, RowNormForwardKernel)

// row_norm_backward_data: with w_j = weight[ch(j)] (1 when undefined), xhat_j = (x_j - mean[r]) *
// rstd[r], a = mean over j of dy_j * w_j and b = mean over j of dy_j * w_j * xhat_j:
//   dx_j = rstd[r] * (dy_j * w_j - a - xhat_j * b)
// Layer norm (groups == 1, S == 1) may also ask for the parameter-gradient sums from the same pass
// over dy and x: sum_dy[j] = sum over rows of dy_j, sum_dy_xhat[j] = sum over rows of dy_j * xhat_j
// (channel_grad_sums' values, without reading dy and x a second time).
struct RowNormBackwardArgs {
  Tensor dx;                         // output
  Tensor dy, x, mean, rstd, weight;  // weight: as in RowNormForwardArgs
  RowNormLayout layout;
  Tensor sum_dy, sum_dy_xhat;  // optional outputs, statistics dtype [D]: both or neither
};
using RowNormBackwardKernel = void (*)(const RowNormBackwardArgs& args);
EMBER_DECLARE_KERNEL(row_norm_backward_data_kernel, RowNormBackwardKernel)

}  // namespace ember
