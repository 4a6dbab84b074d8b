// The activation kernel interface: ActivationOp (leaky_relu, elu, gelu in its erf and tanh forms,
// silu) and the forward and backward elementwise kernel tables of ops/activation.h. CPU kernels in
// cpu_kernels/activation.cpp, CUDA kernels in cuda_kernels/elementwise/activation.cu.
#pragma once
#include <cstdint>

#include "ember/dispatch/registry.h"
#include "ember/kernel_interface/elementwise.h"

namespace ember {

enum class ActivationOp : uint8_t { leaky_relu, elu, gelu, gelu_tanh, silu };
const char* activation_op_name(ActivationOp op);

// Forward: iter operands (out, x); out = f(x). `param` is leaky_relu's negative_slope or elu's
// alpha (ignored by the others). Selected by x's dtype; all operands share it.
using ActivationKernel = void (*)(const ElementwiseIter& iter, ActivationOp op, double param);
EMBER_DECLARE_KERNEL(activation_kernel, ActivationKernel)
// Backward: iter operands (grad_x, grad_y, x); grad_x = grad_y * f'(x), written (not accumulated).
// At x == 0 leaky_relu takes the negative side's slope and elu alpha, as PyTorch does.
EMBER_DECLARE_KERNEL(activation_backward_kernel, ActivationKernel)

}  // namespace ember
