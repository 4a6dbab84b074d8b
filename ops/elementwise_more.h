// Issue 34's elementwise ops beside the core ones of ops/ops.h: the remaining transcendental,
// error-function and rounding ops, atan2 / hypot, lerp, addcmul / addcdiv, nan_to_num, clamp with
// tensor bounds, isinf and isclose (ops/elementwise_more.cpp), and the random ops on the Philox
// generators: multinomial, normal with tensor parameters, poisson and the in-place distribution
// fills (ops/random_more.cpp). Names and defaults follow PyTorch's. Included at the end of
// ops/ops.h.
#pragma once
#include <optional>

#include "ember/ops/ops.h"

namespace ember {

// ---- unary (integral inputs compute in float32, as PyTorch) ----
Tensor log2(const Tensor& a);
Tensor log10(const Tensor& a);
Tensor tan(const Tensor& a);
Tensor asin(const Tensor& a);
Tensor acos(const Tensor& a);
Tensor atan(const Tensor& a);
Tensor sinh(const Tensor& a);
Tensor cosh(const Tensor& a);
Tensor asinh(const Tensor& a);
Tensor acosh(const Tensor& a);
Tensor atanh(const Tensor& a);
Tensor erf(const Tensor& a);
Tensor erfc(const Tensor& a);
Tensor erfinv(const Tensor& a);
Tensor trunc(const Tensor& a);  // toward zero; integral tensors are returned as a copy
Tensor fix(const Tensor& a);    // trunc
Tensor frac(const Tensor& a);   // a - trunc(a); floating tensors only
Tensor sgn(const Tensor& a);    // sign (Ember has no complex dtypes)
// Half to even at `decimals` digits (negative: left of the point), as torch.round(x, decimals).
Tensor round(const Tensor& a, int64_t decimals);
// NaN -> nan, +inf -> posinf (default: the dtype's largest finite value), -inf -> neginf
// (default: the lowest finite value). Integral tensors are returned as a copy.
Tensor nan_to_num(const Tensor& a, std::optional<double> nan = 0.0,
                  std::optional<double> posinf = std::nullopt,
                  std::optional<double> neginf = std::nullopt);
Tensor isinf(const Tensor& a);  // bool

// ---- binary and ternary (broadcasting; integral inputs compute in float32) ----
Tensor atan2(const Tensor& a, const Tensor& b);
Tensor arctan2(const Tensor& a, const Tensor& b);
Tensor hypot(const Tensor& a, const Tensor& b);
// start + weight * (end - start); floating tensors only.
Tensor lerp(const Tensor& start, const Tensor& end, double weight);
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight);
// self + value * t1 * t2 and self + value * t1 / t2 (addcdiv: floating tensors only).
Tensor addcmul(const Tensor& self, const Tensor& tensor1, const Tensor& tensor2, double value = 1);
Tensor addcdiv(const Tensor& self, const Tensor& tensor1, const Tensor& tensor2, double value = 1);
// min(max(a, min), max) with broadcast tensor bounds (either may be absent, not both). The
// gradient goes to `a` where it lies inside the bounds, else to the bound that was taken.
Tensor clamp(const Tensor& a, const std::optional<Tensor>& min, const std::optional<Tensor>& max);
// |a - b| <= atol + rtol * |b| elementwise (bool); equal infinities are close; NaNs only with
// equal_nan.
Tensor isclose(const Tensor& a, const Tensor& b, double rtol = 1e-05, double atol = 1e-08,
               bool equal_nan = false);

// ---- random (ops/random_more.cpp; the device's default generator unless one is given) ----
// In-place fills of a floating tensor: Exponential(lambd) (lambd > 0), Geometric(p) (0 < p < 1;
// counts from 1), Cauchy(median, sigma) (sigma > 0) and LogNormal(mean, std) (std > 0; the log of
// a value is Normal(mean, std)).
Tensor& exponential_(Tensor& t, double lambd = 1, Generator* gen = nullptr);
Tensor& geometric_(Tensor& t, double p, Generator* gen = nullptr);
Tensor& cauchy_(Tensor& t, double median = 0, double sigma = 1, Generator* gen = nullptr);
Tensor& log_normal_(Tensor& t, double mean = 1, double std = 2, Generator* gen = nullptr);
// mean + std * N(0, 1) over the broadcast shape (std >= 0); differentiable in mean and std, as
// PyTorch's normal with tensor arguments.
Tensor normal(const Tensor& mean, const Tensor& std, Generator* gen = nullptr);
Tensor normal(const Tensor& mean, double std = 1, Generator* gen = nullptr);
Tensor normal(double mean, const Tensor& std, Generator* gen = nullptr);
// Poisson(rates) counts in rates' dtype (floating; rates >= 0); not differentiable.
Tensor poisson(const Tensor& rates, Generator* gen = nullptr);
// num_samples category indices (int64) per row of the 1-D or 2-D non-negative weights `probs`
// (rows need not sum to 1). Without replacement the indices of a row are distinct (at most the
// number of nonzero weights); with replacement they are independent draws.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false,
                   Generator* gen = nullptr);

}  // namespace ember
