// conv2d_bias_relu: y = relu(conv2d(x, w) + b) as one op, for the conv + bias + ReLU blocks that
// layers without normalisation build. Where the device's conv algorithms take an epilogue (CUDA),
// the bias and ReLU are the convolution's epilogue (ConvProblem::epilogue): applied in the kernel
// of the algorithm the cache picks when that algorithm can, else in one pass over the output;
// elsewhere (the CPU) it is the composite of conv2d and relu. Differentiable in input, weight and
// bias (the backward masks the gradient with y > 0, then runs conv2d's backward-data and
// backward-filter algorithms through the algorithm cache).
#pragma once
#include "ember/ops/conv.h"

namespace ember {

// input [N, C, H, W], weight [K, C / groups, R, S], bias [K] or undefined; output [N, K, P, Q] as
// for conv2d, allocated like its gradients in conv_result_memory_format(input, weight) (as
// conv2d's). Errors are conv2d's.
Tensor conv2d_bias_relu(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                        const Conv2dParams& p = {});

}  // namespace ember
