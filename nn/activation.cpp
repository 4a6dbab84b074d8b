// Activation and softmax layers (see activation.h).
#include "ember/nn/activation.h"

#include <ostream>

#include "ember/nn/amp.h"
#include "ember/ops/softmax.h"

namespace ember::nn {

Tensor ReLUImpl::forward(const Tensor& x) { return relu(x); }
void ReLUImpl::pretty_print(std::ostream& os) const { os << "ReLU()"; }

Tensor LeakyReLUImpl::forward(const Tensor& x) { return leaky_relu(x, options.negative_slope()); }
void LeakyReLUImpl::pretty_print(std::ostream& os) const {
  os << "LeakyReLU(negative_slope=" << detail::float_str(options.negative_slope()) << ")";
}

Tensor ELUImpl::forward(const Tensor& x) { return elu(x, options.alpha()); }
void ELUImpl::pretty_print(std::ostream& os) const {
  os << "ELU(alpha=" << detail::float_str(options.alpha()) << ")";
}

Tensor GELUImpl::forward(const Tensor& x) { return gelu(x, options.approximate()); }
void GELUImpl::pretty_print(std::ostream& os) const {
  os << "GELU(approximate='" << (options.approximate() == GeluApproximation::tanh ? "tanh" : "none")
     << "')";
}

Tensor SiLUImpl::forward(const Tensor& x) { return silu(x); }
void SiLUImpl::pretty_print(std::ostream& os) const { os << "SiLU()"; }

Tensor SigmoidImpl::forward(const Tensor& x) { return sigmoid(x); }
void SigmoidImpl::pretty_print(std::ostream& os) const { os << "Sigmoid()"; }

Tensor TanhImpl::forward(const Tensor& x) { return tanh(x); }
void TanhImpl::pretty_print(std::ostream& os) const { os << "Tanh()"; }

Tensor SoftmaxImpl::forward(const Tensor& x) {
  return softmax(autocast_input(x, OpClass::fp32), options.dim());
}
void SoftmaxImpl::pretty_print(std::ostream& os) const {
  os << "Softmax(dim=" << options.dim() << ")";
}

Tensor LogSoftmaxImpl::forward(const Tensor& x) {
  return log_softmax(autocast_input(x, OpClass::fp32), options.dim());
}
void LogSoftmaxImpl::pretty_print(std::ostream& os) const {
  os << "LogSoftmax(dim=" << options.dim() << ")";
}

}  // namespace ember::nn
