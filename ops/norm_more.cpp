// rms_norm (ops/norm_more.h): PyTorch 2.4's composite rms_norm, op for op.
#include "ember/ops/norm_more.h"

#include <limits>

#include "ember/ops/ops.h"

namespace ember {

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                std::optional<double> eps) {
  const char* op = "rms_norm";
  EMBER_CHECK(x.defined(), op, ": the input is undefined");
  EMBER_CHECK(is_floating(x.dtype()), op, ": expected a floating input, got ",
              dtype_name(x.dtype()));
  const int64_t k = int64_t(normalized_shape.size());
  bool fits = k >= 1 && k <= x.dim();
  for (int64_t i = 0; fits && i < k; ++i)
    fits = x.size(x.dim() - k + i) == normalized_shape[size_t(i)];
  EMBER_CHECK(fits, op, ": normalized_shape ", shape_str(normalized_shape),
              " must be non-empty and match the trailing dims of the input ", x.shape_str());
  EMBER_CHECK(!weight.defined() || weight.sizes() == normalized_shape, op, ": weight ",
              weight.defined() ? weight.shape_str() : std::string(), " must have normalized_shape ",
              shape_str(normalized_shape));
  const bool reduced = x.dtype() == DType::f16 || x.dtype() == DType::bf16;
  const double e = eps.value_or(x.dtype() == DType::f64 ? std::numeric_limits<double>::epsilon()
                                                        : std::numeric_limits<float>::epsilon());
  Shape dims;
  for (int64_t i = 0; i < k; ++i) dims.push_back(x.dim() - k + i);
  const Tensor xs = reduced ? x.to(DType::f32) : x;
  Tensor y = mul(xs, rsqrt(add(mean(square(xs), dims, true), e)));
  if (reduced) y = y.to(x.dtype());
  if (weight.defined()) {
    y = mul(y, weight);
    if (y.dtype() != x.dtype()) y = y.to(x.dtype());
  }
  return y;
}

}  // namespace ember
