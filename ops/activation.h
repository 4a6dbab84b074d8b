// Activations beyond the ones in ops/elementwise.cpp (relu, sigmoid, tanh live there): leaky_relu,
// elu, gelu (exact erf form and tanh approximation) and silu, each with its backward formula. Their
// kernel tables are kernel_interface/activation.h (CPU kernels in cpu_kernels/activation.cpp, CUDA
// kernels in cuda_kernels/elementwise/activation.cu). Shapes: the output has the input's shape,
// dtype and memory format (channels_last stays channels_last); any strides are accepted. Floating
// dtypes only.
#pragma once
#include <cstdint>

#include "ember/kernel_interface/activation.h"
#include "ember/tensor/tensor.h"

namespace ember {

// gelu's form, as torch.nn.functional.gelu's approximate= string: none (the exact erf form, the
// default) or tanh (the tanh approximation).
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

}  // namespace ember
