// The dropout kernel interface: DropoutArgs and the forward and backward kernel tables of
// ops/dropout.h (the keep mask drawn from Philox as kernel_interface/random.h's bernoulli draws
// it). CPU kernels in cpu_kernels/dropout.cpp, CUDA kernels in cuda_kernels/elementwise/dropout.cu.
#pragma once

#include "ember/dispatch/registry.h"
#include "ember/kernel_interface/random.h"
#include "ember/tensor/tensor.h"

namespace ember {

// Forward: input, output (input's dtype) and mask (bool) are dense contiguous tensors of one
// shape; writes mask[i] = keep(i) and output[i] = keep(i) ? input[i] * scale : 0, with
// scale = 1 / (1 - p) (0 when p == 1), computed in float (double for f64). `random` holds the
// generator's seed and offset (and device offset inside a graph capture).
struct DropoutArgs {
  Tensor input, output, mask;
  double p = 0.5;
  RandomParams random;
};
using DropoutKernel = void (*)(const DropoutArgs& args);
EMBER_DECLARE_KERNEL(dropout_kernel, DropoutKernel)  // selected by the input's dtype

// Backward: grad_input[i] = mask[i] ? grad_output[i] * scale : 0; all dense contiguous, the
// gradients of one dtype (which selects the kernel). grad_input is written, not accumulated.
using DropoutBackwardKernel = void (*)(const Tensor& grad_input, const Tensor& grad_output,
                                       const Tensor& mask, double scale);
EMBER_DECLARE_KERNEL(dropout_backward_kernel, DropoutBackwardKernel)

}  // namespace ember
