// Activations beyond the ones in ops/elementwise.cpp (relu, sigmoid, tanh live there): leaky_relu,
// elu, gelu (exact erf form and tanh approximation) and silu, each with its backward formula, plus
// the kernel tables they dispatch to (CPU kernels in cpu_kernels/activation.cpp, CUDA kernels in
// cuda_kernels/elementwise/activation.cu). Shapes: the output has the input's shape, dtype and memory format
// (channels_last stays channels_last); any strides are accepted. Floating dtypes only.
#pragma once
#include <cstdint>

#include "ember/kernel_interface/elementwise.h"
#include "ember/tensor/tensor.h"

namespace ember {

enum class GeluApproximation : uint8_t { none, tanh };

// y = x for x > 0, negative_slope * x otherwise (torch.nn.functional.leaky_relu).
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
// y = x for x > 0, alpha * (exp(x) - 1) otherwise (torch.nn.functional.elu).
Tensor elu(const Tensor& x, double alpha = 1.0);
// none: y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2)));
// tanh: y = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))  (torch.nn.functional.gelu).
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::none);
// y = x * sigmoid(x) (torch.nn.functional.silu).
Tensor silu(const Tensor& x);

// ---- kernel interface -------------------------------------------------------------------------

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
