// The arithmetic sugar on Tensor (operators and methods), forwarding to the ops in ops/ops.h.
#include "ember/ops/ops.h"

namespace ember {

Tensor Tensor::operator-() const { return ::ember::neg(*this); }
Tensor& Tensor::operator+=(const Tensor& o) { return ::ember::add_(*this, o); }
Tensor& Tensor::operator-=(const Tensor& o) { return ::ember::sub_(*this, o); }
Tensor& Tensor::operator*=(const Tensor& o) { return ::ember::mul_(*this, o); }
Tensor& Tensor::operator/=(const Tensor& o) { return ::ember::div_(*this, o); }
Tensor& Tensor::operator+=(double o) { return ::ember::add_(*this, o); }
Tensor& Tensor::operator*=(double o) { return ::ember::mul_(*this, o); }
Tensor Tensor::sum() const { return ::ember::sum(*this); }
Tensor Tensor::mean() const { return ::ember::mean(*this); }
Tensor Tensor::sum(const Shape& dims, bool keepdim) const {
  return ::ember::sum(*this, dims, keepdim);
}
Tensor Tensor::mean(const Shape& dims, bool keepdim) const {
  return ::ember::mean(*this, dims, keepdim);
}
Tensor Tensor::matmul(const Tensor& o) const { return ::ember::matmul(*this, o); }
Tensor Tensor::relu() const { return ::ember::relu(*this); }
Tensor Tensor::exp() const { return ::ember::exp(*this); }
Tensor Tensor::log() const { return ::ember::log(*this); }
Tensor Tensor::pow(double e) const { return ::ember::pow(*this, e); }
Tensor Tensor::abs() const { return ::ember::abs(*this); }
Tensor Tensor::sqrt() const { return ::ember::sqrt(*this); }

}  // namespace ember
