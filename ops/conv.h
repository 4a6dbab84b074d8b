// Convolution: the public conv2d op (argument checks, output shape, autograd) and the entry points
// that choose one of its algorithms through the AlgoCache and run it. What the algorithms see
// (ConvProblem, Conv2dParams, the slots and the key) is kernel_interface/conv.h.
#pragma once
#include <array>
#include <cstdint>

#include "ember/dispatch/algo_cache.h"
#include "ember/kernel_interface/conv.h"
#include "ember/tensor/tensor.h"

namespace ember {

// 2-D convolution (cross-correlation, as torch.nn.functional.conv2d).
//   input  [N, C, H, W]          (channels_last accepted; the CPU computes on an NCHW copy)
//   weight [K, C / groups, R, S]
//   bias   [K] or undefined
//   output [N, K, P, Q] with P = (H + 2 * padding[0] - dilation[0] * (R - 1) - 1) / stride[0] + 1,
//          and Q likewise along W ('same': P = H, Q = W; 'valid': padding 0).
// The output and the gradients are allocated in conv_result_memory_format(input, weight).
// float32 and float64; float16 and bfloat16 compute in float32 on the CPU. Differentiable in
// input, weight and bias; the backward runs the backward-data and backward-filter algorithms
// through the algorithm cache.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
              const Conv2dParams& p = {});

// conv2d's backward as differentiable functions (used by create_graph backwards): the input
// gradient from (grad_output, weight) and the weight gradient from (input, grad_output), params
// with explicit padding. Each runs the backward kernels and, when its arguments require grad,
// records its own backward (through conv2d and these two), so conv2d has derivatives of any order.
Tensor conv2d_backward_input(const Tensor& grad_output, const Tensor& weight,
                             const Shape& input_shape, const Conv2dParams& p);
Tensor conv2d_backward_weight(const Tensor& input, const Tensor& grad_output,
                              const Shape& weight_shape, const Conv2dParams& p);

// The memory format of the tensors a 2-D convolution allocates (its output and the gradients of
// its input and weight), one rule for conv2d, conv_transpose2d and conv2d_bias_relu. On CUDA it is
// PyTorch's (cudnn_conv_suggest_memory_format): channels_last when the input and the weight are
// 4-D and either suggests channels_last, else contiguous; so channels_last networks stay
// channels_last and no operand is staged through a workspace. On the CPU, whose algorithms
// compute in NCHW, contiguous.
MemoryFormat conv_result_memory_format(const Tensor& input, const Tensor& weight);

// The explicit form of a valid/same convolution: the params with padding_mode explicit and the
// padding it stands for, and the input to convolve, which for an odd 'same' total is `input` with
// one zero row/column appended on the bottom/right (differentiably), as PyTorch does. Explicit
// params come back unchanged with `input`. `op` names the caller in error messages (stride != 1
// with 'same').
struct ResolvedConv2dPadding {
  Tensor input;
  Conv2dParams params;
};
ResolvedConv2dPadding resolve_conv2d_padding(const char* op, const Tensor& input,
                                             const Tensor& weight, const Conv2dParams& p);

// conv2d's argument checks (explicit padding): throws conv2d's error for anything a user can get
// wrong, else returns the output shape [N, K, P, Q]. For ops built on conv2d's algorithms.
Shape check_conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                   const Conv2dParams& p);

// Whether float32 convolutions may use TF32 tensor cores (on by default, as PyTorch's
// torch.backends.cudnn.allow_tf32). Part of every conv algorithm key.
bool conv_allow_tf32();
void set_conv_allow_tf32(bool allow);

// ---- running its algorithms ------------------------------------------------------------------

// The algorithm the cache picks for `problem` under the current settings (tests, introspection).
const dispatch::Algorithm<ConvProblem>& conv2d_choose(const ConvProblem& problem);
// Chooses through algo_cache() and runs the choice with the workspace the cache allocates for it;
// the op's forward and backward call this. A forward problem's epilogue is applied by the
// algorithm that runs (see ConvProblem::epilogue).
void conv2d_run(const ConvProblem& problem);
// conv2d_run, or zeros in the written tensor when the reduction is empty (no channels or no
// images): algorithms are never handed empty problems. The problem has no epilogue.
void conv2d_run_or_zero(const ConvProblem& problem);

}  // namespace ember
