// RMS normalization (F.rms_norm, PyTorch 2.4): x scaled by the reciprocal root mean square over
// its trailing dims, then by an optional elementwise weight. Composed from differentiable ops
// (square, mean, rsqrt, mul), so its backward is theirs on every device. Definition in
// ops/norm_more.cpp.
#pragma once
#include <optional>

#include "ember/tensor/tensor.h"

namespace ember {

// x [*, *normalized_shape] -> the same shape:
//   y = x / sqrt(mean(x^2 over the trailing dims normalized_shape) + eps) * weight
// weight: of shape normalized_shape, or undefined (no scale). eps unset: the machine epsilon of
// the computation dtype, as PyTorch (float32's for float16 / bfloat16 / float32 inputs, float64's
// for float64). float16 and bfloat16 inputs are computed in float32 and returned in their dtype.
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                std::optional<double> eps = std::nullopt);

}  // namespace ember
