// conv2d_bias_relu: y = relu(conv2d(x, w) + b) as one op, for the conv + bias + ReLU blocks that
// layers without normalisation build. On CUDA the bias and ReLU are applied in the epilogue of the
// implicit-GEMM kernel when the algorithm cache picks that algorithm for the convolution, and in
// one fused pass over the output otherwise; on the CPU it is the composite of conv2d and relu.
// Differentiable in input, weight and bias (the backward masks the gradient with y > 0, then runs
// conv2d's backward-data and backward-filter algorithms through the algorithm cache).
#pragma once
#include "ember/dispatch/registry.h"
#include "ember/ops/conv.h"

namespace ember {

// input [N, C, H, W], weight [K, C / groups, R, S], bias [K] or undefined; output [N, K, P, Q] as
// for conv2d, allocated like its gradients in conv_result_memory_format(input, weight) (as
// conv2d's). Errors are conv2d's.
Tensor conv2d_bias_relu(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                        const Conv2dParams& p = {});

// ---- kernel interface -------------------------------------------------------------------------

// Computes problem.output = convolution + bias, then ReLU when `relu`, for a forward ConvProblem
// whose output is dense (NCHW or channels_last); bias is [K] of the problem's dtype, or undefined
// for none. (conv2d's own bias add can use it with relu = false: one pass fewer.)
using ConvEpilogueKernel = void (*)(const ConvProblem& problem, const Tensor& bias, bool relu);
EMBER_DECLARE_KERNEL(conv2d_epilogue_kernel, ConvEpilogueKernel)

}  // namespace ember
