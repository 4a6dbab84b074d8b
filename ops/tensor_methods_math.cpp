// libtorch's arithmetic, comparison, logical and bitwise Tensor methods and the in-place forms
// (x.add_(y, alpha), x.exp_(), x.clamp_(lo, hi), ...), each forwarding to the free op.
#include "ember/autograd/graph/graph.h"
#include "ember/ops/ops.h"

namespace ember {

namespace {

// The in-place form of an out-of-place op: computes f(self) (on a clone when autograd records,
// so values saved for backward stay intact) and copies it back, which bumps the version and,
// under autograd, records the copy (copy_) so gradients flow to the result's inputs.
template <typename F>
Tensor& apply_inplace(const char* op, Tensor& self, const Tensor& other, F f) {
  EMBER_CHECK(self.defined(), op, ": argument 'self' is an undefined tensor");
  EMBER_CHECK(!(autograd::grad_enabled() && self.requires_grad() && self.is_leaf()), op,
              ": a leaf tensor that requires grad (shape ", self.shape_str(),
              ") cannot be modified in place; wrap parameter updates in NoGradGuard or use the "
              "out-of-place op");
  const bool records =
      autograd::needs_grad({&self}) || (other.defined() && autograd::needs_grad({&other}));
  Tensor result = records ? f(self.clone()) : f(self);
  EMBER_CHECK(result.sizes() == self.sizes(), op, ": the result of shape ", result.shape_str(),
              " does not fit the in-place destination of shape ", self.shape_str());
  EMBER_CHECK(is_floating(self.dtype()) || !is_floating(result.dtype()), op,
              ": the result has "
              "dtype ",
              dtype_name(result.dtype()), ", which cannot be written into the ",
              dtype_name(self.dtype()), " tensor of shape ", self.shape_str(),
              " in place; use the out-of-place op or convert the tensor first");
  self.copy_(result);
  return self;
}

template <typename F>
Tensor& apply_inplace(const char* op, Tensor& self, F f) {
  return apply_inplace(op, self, Tensor(), f);
}

}  // namespace

// ---- arithmetic ----
Tensor Tensor::add(const Tensor& other, double alpha) const {
  return ::ember::add(*this, other, alpha);
}
Tensor Tensor::add(double other, double alpha) const { return ::ember::add(*this, other * alpha); }
Tensor Tensor::sub(const Tensor& other, double alpha) const {
  return ::ember::sub(*this, other, alpha);
}
Tensor Tensor::sub(double other, double alpha) const { return ::ember::sub(*this, other * alpha); }
Tensor Tensor::mul(const Tensor& other) const { return ::ember::mul(*this, other); }
Tensor Tensor::mul(double other) const { return ::ember::mul(*this, other); }
Tensor Tensor::div(const Tensor& other) const { return ::ember::div(*this, other); }
Tensor Tensor::div(double other) const { return ::ember::div(*this, other); }
Tensor Tensor::remainder(const Tensor& other) const { return ::ember::remainder(*this, other); }
Tensor Tensor::remainder(const Scalar& other) const { return ::ember::remainder(*this, other); }
Tensor Tensor::fmod(const Tensor& other) const { return ::ember::fmod(*this, other); }
Tensor Tensor::fmod(const Scalar& other) const { return ::ember::fmod(*this, other); }
Tensor Tensor::pow(const Tensor& exponent) const { return ::ember::pow(*this, exponent); }
Tensor& Tensor::add_(const Tensor& other, double alpha) {
  return ::ember::add_(*this, other, alpha);
}
Tensor& Tensor::add_(double other, double alpha) { return ::ember::add_(*this, other * alpha); }
Tensor& Tensor::sub_(const Tensor& other, double alpha) {
  return ::ember::sub_(*this, other, alpha);
}
Tensor& Tensor::sub_(double other, double alpha) { return ::ember::sub_(*this, other * alpha); }
Tensor& Tensor::mul_(const Tensor& other) { return ::ember::mul_(*this, other); }
Tensor& Tensor::mul_(double other) { return ::ember::mul_(*this, other); }
Tensor& Tensor::div_(const Tensor& other) { return ::ember::div_(*this, other); }
Tensor& Tensor::div_(double other) { return ::ember::div_(*this, other); }
Tensor& Tensor::pow_(double exponent) {
  return apply_inplace("pow_", *this,
                       [exponent](const Tensor& s) { return ::ember::pow(s, exponent); });
}
Tensor& Tensor::operator-=(double o) { return ::ember::sub_(*this, o); }
Tensor& Tensor::operator/=(double o) { return ::ember::div_(*this, o); }

Tensor Tensor::neg() const { return ::ember::neg(*this); }
Tensor Tensor::sigmoid() const { return ::ember::sigmoid(*this); }
Tensor Tensor::tanh() const { return ::ember::tanh(*this); }
Tensor Tensor::sin() const { return ::ember::sin(*this); }
Tensor Tensor::cos() const { return ::ember::cos(*this); }
Tensor Tensor::square() const { return ::ember::square(*this); }
Tensor Tensor::rsqrt() const { return ::ember::rsqrt(*this); }
Tensor Tensor::reciprocal() const { return ::ember::reciprocal(*this); }
Tensor Tensor::sign() const { return ::ember::sign(*this); }
Tensor Tensor::floor() const { return ::ember::floor(*this); }
Tensor Tensor::ceil() const { return ::ember::ceil(*this); }
Tensor Tensor::round() const { return ::ember::round(*this); }
Tensor Tensor::log1p() const { return ::ember::log1p(*this); }
Tensor Tensor::expm1() const { return ::ember::expm1(*this); }
Tensor Tensor::clamp(std::optional<double> min, std::optional<double> max) const {
  return ::ember::clamp(*this, min, max);
}
Tensor Tensor::clamp_min(double min) const { return ::ember::clamp_min(*this, min); }
Tensor Tensor::clamp_max(double max) const { return ::ember::clamp_max(*this, max); }

// ---- in place ----
#define EMBER_UNARY_INPLACE_METHOD(name)                                                      \
  Tensor& Tensor::name##_() {                                                                 \
    return apply_inplace(#name "_", *this, [](const Tensor& s) { return ::ember::name(s); }); \
  }
EMBER_UNARY_INPLACE_METHOD(neg)
EMBER_UNARY_INPLACE_METHOD(exp)
EMBER_UNARY_INPLACE_METHOD(log)
EMBER_UNARY_INPLACE_METHOD(sqrt)
EMBER_UNARY_INPLACE_METHOD(rsqrt)
EMBER_UNARY_INPLACE_METHOD(abs)
EMBER_UNARY_INPLACE_METHOD(sigmoid)
EMBER_UNARY_INPLACE_METHOD(tanh)
EMBER_UNARY_INPLACE_METHOD(sin)
EMBER_UNARY_INPLACE_METHOD(cos)
EMBER_UNARY_INPLACE_METHOD(square)
EMBER_UNARY_INPLACE_METHOD(reciprocal)
#undef EMBER_UNARY_INPLACE_METHOD
Tensor& Tensor::relu_() { return ::ember::relu_(*this); }
Tensor& Tensor::clamp_(std::optional<double> min, std::optional<double> max) {
  return ::ember::clamp_(*this, min, max);
}
Tensor& Tensor::clamp_min_(double min) { return ::ember::clamp_(*this, min, std::nullopt); }
Tensor& Tensor::clamp_max_(double max) { return ::ember::clamp_(*this, std::nullopt, max); }
Tensor& Tensor::uniform_(double from, double to, Generator* generator) {
  return ::ember::uniform_(*this, from, to, generator);
}
Tensor& Tensor::normal_(double mean, double std, Generator* generator) {
  return ::ember::normal_(*this, mean, std, generator);
}

// ---- comparisons, logical and bitwise ----
Tensor Tensor::eq(const Tensor& other) const { return ::ember::eq(*this, other); }
Tensor Tensor::ne(const Tensor& other) const { return ::ember::ne(*this, other); }
Tensor Tensor::lt(const Tensor& other) const { return ::ember::lt(*this, other); }
Tensor Tensor::le(const Tensor& other) const { return ::ember::le(*this, other); }
Tensor Tensor::gt(const Tensor& other) const { return ::ember::gt(*this, other); }
Tensor Tensor::ge(const Tensor& other) const { return ::ember::ge(*this, other); }
Tensor Tensor::eq(const Scalar& other) const { return ::ember::eq(*this, other); }
Tensor Tensor::ne(const Scalar& other) const { return ::ember::ne(*this, other); }
Tensor Tensor::lt(const Scalar& other) const { return ::ember::lt(*this, other); }
Tensor Tensor::le(const Scalar& other) const { return ::ember::le(*this, other); }
Tensor Tensor::gt(const Scalar& other) const { return ::ember::gt(*this, other); }
Tensor Tensor::ge(const Scalar& other) const { return ::ember::ge(*this, other); }
bool Tensor::equal(const Tensor& other) const { return ::ember::equal(*this, other); }
bool Tensor::allclose(const Tensor& other, double rtol, double atol) const {
  return ::ember::allclose(*this, other, rtol, atol);
}
Tensor Tensor::isnan() const { return ::ember::isnan(*this); }
Tensor Tensor::isfinite() const { return ::ember::isfinite(*this); }
Tensor Tensor::logical_not() const { return ::ember::logical_not(*this); }
Tensor Tensor::logical_and(const Tensor& other) const { return ::ember::logical_and(*this, other); }
Tensor Tensor::logical_or(const Tensor& other) const { return ::ember::logical_or(*this, other); }
Tensor Tensor::logical_xor(const Tensor& other) const { return ::ember::logical_xor(*this, other); }
Tensor Tensor::bitwise_and(const Tensor& other) const { return ::ember::bitwise_and(*this, other); }
Tensor Tensor::bitwise_or(const Tensor& other) const { return ::ember::bitwise_or(*this, other); }
Tensor Tensor::bitwise_xor(const Tensor& other) const { return ::ember::bitwise_xor(*this, other); }
Tensor Tensor::bitwise_not() const { return ::ember::bitwise_not(*this); }
Tensor Tensor::where(const Tensor& condition, const Tensor& other) const {
  return ::ember::where(condition, *this, other);
}

}  // namespace ember
