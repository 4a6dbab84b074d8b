// More activations and their modules (see activation_more.h), composed from differentiable ops.
#include "ember/nn/activation_more.h"

#include <ostream>

#include "ember/nn/init.h"
#include "ember/ops/activation.h"
#include "ember/ops/ops.h"
#include "ember/ops/softmax.h"

namespace ember::nn {

namespace functional {

namespace {

void check_input(const char* op, const Tensor& x) {
  EMBER_CHECK(x.defined(), op, ": input must be a defined tensor");
  EMBER_CHECK(is_floating(x.dtype()), op, ": input must be a floating tensor, got ",
              dtype_name(x.dtype()), " of shape ", x.shape_str());
}

// log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|)).
Tensor softplus_stable(const Tensor& x) { return add(relu(x), log1p(exp(neg(abs(x))))); }

}  // namespace

Tensor softplus(const Tensor& x, const SoftplusFuncOptions& options) {
  check_input("softplus", x);
  const double beta = options.beta(), thr = options.threshold();
  EMBER_CHECK(beta != 0, "softplus: beta must be nonzero, got 0");
  // Clamped before exp so the branch that where() discards stays finite (and so its gradient).
  Tensor bx = mul(x, beta);
  Tensor soft = div(log1p(exp(clamp_max(bx, thr))), beta);
  return where(gt(bx, Scalar(thr)), x, soft);
}

Tensor softsign(const Tensor& x) {
  check_input("softsign", x);
  return div(x, add(abs(x), 1.0));
}

Tensor hardtanh(const Tensor& x, const HardtanhFuncOptions& options) {
  check_input("hardtanh", x);
  EMBER_CHECK(options.min_val() <= options.max_val(), "hardtanh: min_val (", options.min_val(),
              ") must not exceed max_val (", options.max_val(), ")");
  return clamp(x, options.min_val(), options.max_val());
}

Tensor relu6(const Tensor& x) {
  check_input("relu6", x);
  return clamp(x, 0.0, 6.0);
}

Tensor hardsigmoid(const Tensor& x) {
  check_input("hardsigmoid", x);
  return div(clamp(add(x, 3.0), 0.0, 6.0), 6.0);
}

Tensor hardswish(const Tensor& x) {
  check_input("hardswish", x);
  return mul(x, div(clamp(add(x, 3.0), 0.0, 6.0), 6.0));
}

Tensor mish(const Tensor& x) {
  check_input("mish", x);
  return mul(x, tanh(softplus_stable(x)));
}

Tensor celu(const Tensor& x, const CELUFuncOptions& options) {
  check_input("celu", x);
  const double alpha = options.alpha();
  EMBER_CHECK(alpha != 0, "celu: alpha must be nonzero (it divides x), got 0");
  return mul(elu(div(x, alpha), 1.0), alpha);
}

Tensor selu(const Tensor& x) {
  check_input("selu", x);
  constexpr double kAlpha = 1.6732632423543772848170429916717;
  constexpr double kScale = 1.0507009873554804934193349852946;
  return mul(elu(x, kAlpha), kScale);
}

Tensor glu(const Tensor& x, const GLUFuncOptions& options) {
  check_input("glu", x);
  EMBER_CHECK(x.dim() > 0, "glu: input must have at least one dim, got a 0-dim tensor");
  const int64_t d = options.dim() < 0 ? options.dim() + x.dim() : options.dim();
  EMBER_CHECK(d >= 0 && d < x.dim(), "glu: dim ", options.dim(), " is out of range for input of ",
              "shape ", x.shape_str());
  const int64_t n = x.size(d);
  EMBER_CHECK(n % 2 == 0, "glu: halving dimension must be even, but dim ", d, " of input ",
              x.shape_str(), " has size ", n);
  return mul(x.narrow(d, 0, n / 2), sigmoid(x.narrow(d, n / 2, n / 2)));
}

Tensor prelu(const Tensor& x, const Tensor& weight) {
  check_input("prelu", x);
  EMBER_CHECK(weight.defined() && is_floating(weight.dtype()),
              "prelu: weight must be a defined floating tensor");
  EMBER_CHECK(weight.device() == x.device(), "prelu: input is on ", x.device().str(),
              " but weight on ", weight.device().str());
  const int64_t channels = x.dim() >= 2 ? x.size(1) : 1;
  const int64_t n = weight.numel();
  EMBER_CHECK(weight.dim() <= 1 && (n == 1 || n == channels), "prelu: weight of shape ",
              weight.shape_str(), " must have 1 element or one per ", "channel (", channels,
              ", dim 1 of input ", x.shape_str(), ")");
  Tensor w = weight.reshape({n});
  if (n > 1) {
    Shape s(size_t(x.dim()), 1);
    s[1] = n;
    w = w.reshape(s);
  } else if (x.dim() == 0) {
    w = w.reshape({});
  }
  // relu(x) - w * relu(-x): x for x >= 0, w x below; differentiable in x and w.
  return sub(relu(x), mul(w, relu(neg(x))));
}

Tensor rrelu(const Tensor& x, const RReLUFuncOptions& options) {
  check_input("rrelu", x);
  const double lo = options.lower(), hi = options.upper();
  EMBER_CHECK(lo <= hi, "rrelu: lower bound (", lo, ") must not exceed the upper bound (", hi, ")");
  if (!options.training()) return leaky_relu(x, (lo + hi) / 2);
  // Drawn in float32 on every device, so a seeded generator gives one slope per element whatever
  // the input's dtype and device.
  Tensor slope =
      rand(x.sizes(), TensorOptions(DType::f32).with_device(x.device()), options.generator())
          .to(x.dtype());
  slope = add(mul(slope, hi - lo), lo);
  return sub(relu(x), mul(slope, relu(neg(x))));
}

Tensor logsigmoid(const Tensor& x) {
  check_input("logsigmoid", x);
  return neg(softplus_stable(neg(x)));
}

Tensor softmin(const Tensor& x, const SoftminFuncOptions& options) {
  check_input("softmin", x);
  return softmax(neg(x), options.dim());
}

Tensor gumbel_softmax(const Tensor& logits, const GumbelSoftmaxFuncOptions& options) {
  check_input("gumbel_softmax", logits);
  EMBER_CHECK(options.tau() > 0, "gumbel_softmax: tau must be positive, got ", options.tau());
  EMBER_CHECK(logits.dim() > 0, "gumbel_softmax: logits must have at least one dim");
  // g = -log(E), E ~ Exponential(1) = -log(U), U kept off 0 so g stays finite.
  // Drawn and transformed in float32 on every device (as rrelu's slopes), then rounded once.
  Tensor u = rand(logits.sizes(), TensorOptions(DType::f32).with_device(logits.device()),
                  options.generator());
  Tensor gumbels = neg(log(neg(log(clamp(u, 1e-20, 1.0 - 1e-7))))).to(logits.dtype());
  Tensor y_soft = softmax(div(add(logits, gumbels), options.tau()), options.dim());
  if (!options.hard()) return y_soft;
  const int64_t d = options.dim() < 0 ? options.dim() + logits.dim() : options.dim();
  Tensor index = argmax(y_soft.detach(), d, /*keepdim=*/true);
  Tensor y_hard = scatter(zeros_like(y_soft.detach()), d, index, 1.0);
  return add(sub(y_hard, y_soft.detach()), y_soft);
}

Tensor threshold(const Tensor& x, const ThresholdFuncOptions& options) {
  check_input("threshold", x);
  return where(gt(x, Scalar(options.threshold())), x, options.value());
}

Tensor tanhshrink(const Tensor& x) {
  check_input("tanhshrink", x);
  return sub(x, tanh(x));
}

Tensor softshrink(const Tensor& x, const SoftshrinkFuncOptions& options) {
  check_input("softshrink", x);
  const double l = options.lambda();
  EMBER_CHECK(l >= 0, "softshrink: lambda must be >= 0, got ", l);
  return sub(x, clamp(x, -l, l));
}

Tensor hardshrink(const Tensor& x, const HardshrinkFuncOptions& options) {
  check_input("hardshrink", x);
  return where(gt(abs(x), Scalar(options.lambda())), x, 0.0);
}

}  // namespace functional

namespace F = functional;

Tensor SoftsignImpl::forward(const Tensor& x) { return F::softsign(x); }
void SoftsignImpl::pretty_print(std::ostream& os) const { os << "Softsign()"; }
Tensor ReLU6Impl::forward(const Tensor& x) { return F::relu6(x); }
void ReLU6Impl::pretty_print(std::ostream& os) const { os << "ReLU6()"; }
Tensor HardsigmoidImpl::forward(const Tensor& x) { return F::hardsigmoid(x); }
void HardsigmoidImpl::pretty_print(std::ostream& os) const { os << "Hardsigmoid()"; }
Tensor HardswishImpl::forward(const Tensor& x) { return F::hardswish(x); }
void HardswishImpl::pretty_print(std::ostream& os) const { os << "Hardswish()"; }
Tensor MishImpl::forward(const Tensor& x) { return F::mish(x); }
void MishImpl::pretty_print(std::ostream& os) const { os << "Mish()"; }
Tensor SELUImpl::forward(const Tensor& x) { return F::selu(x); }
void SELUImpl::pretty_print(std::ostream& os) const { os << "SELU()"; }
Tensor LogSigmoidImpl::forward(const Tensor& x) { return F::logsigmoid(x); }
void LogSigmoidImpl::pretty_print(std::ostream& os) const { os << "LogSigmoid()"; }
Tensor TanhshrinkImpl::forward(const Tensor& x) { return F::tanhshrink(x); }
void TanhshrinkImpl::pretty_print(std::ostream& os) const { os << "Tanhshrink()"; }

Tensor SoftplusImpl::forward(const Tensor& x) { return F::softplus(x, options); }
void SoftplusImpl::pretty_print(std::ostream& os) const {
  os << "Softplus(beta=" << detail::float_str(options.beta())
     << ", threshold=" << detail::float_str(options.threshold()) << ")";
}
Tensor HardtanhImpl::forward(const Tensor& x) { return F::hardtanh(x, options); }
void HardtanhImpl::pretty_print(std::ostream& os) const {
  os << "Hardtanh(min_val=" << detail::float_str(options.min_val())
     << ", max_val=" << detail::float_str(options.max_val()) << ")";
}
Tensor CELUImpl::forward(const Tensor& x) { return F::celu(x, options); }
void CELUImpl::pretty_print(std::ostream& os) const {
  os << "CELU(alpha=" << detail::float_str(options.alpha()) << ")";
}
Tensor GLUImpl::forward(const Tensor& x) { return F::glu(x, options); }
void GLUImpl::pretty_print(std::ostream& os) const { os << "GLU(dim=" << options.dim() << ")"; }
Tensor SoftshrinkImpl::forward(const Tensor& x) { return F::softshrink(x, options); }
void SoftshrinkImpl::pretty_print(std::ostream& os) const {
  os << "Softshrink(" << detail::float_str(options.lambda()) << ")";
}
Tensor HardshrinkImpl::forward(const Tensor& x) { return F::hardshrink(x, options); }
void HardshrinkImpl::pretty_print(std::ostream& os) const {
  os << "Hardshrink(" << detail::float_str(options.lambda()) << ")";
}
Tensor SoftminImpl::forward(const Tensor& x) { return F::softmin(x, options); }
void SoftminImpl::pretty_print(std::ostream& os) const {
  os << "Softmin(dim=" << options.dim() << ")";
}
Tensor ThresholdImpl::forward(const Tensor& x) { return F::threshold(x, options); }
void ThresholdImpl::pretty_print(std::ostream& os) const {
  os << "Threshold(threshold=" << detail::float_str(options.threshold())
     << ", value=" << detail::float_str(options.value()) << ")";
}

PReLUImpl::PReLUImpl(const PReLUOptions& options_) : Module("PReLU"), options(options_) {
  EMBER_CHECK(options.num_parameters() >= 1, "PReLU: num_parameters must be >= 1, got ",
              options.num_parameters());
  weight = register_parameter("weight", empty({options.num_parameters()}, TensorOptions()));
  reset_parameters();
}
void PReLUImpl::reset_parameters() { init::constant_(weight, options.init()); }
Tensor PReLUImpl::forward(const Tensor& x) { return F::prelu(x, weight); }
void PReLUImpl::pretty_print(std::ostream& os) const {
  os << "PReLU(num_parameters=" << options.num_parameters() << ")";
}

RReLUImpl::RReLUImpl(const RReLUOptions& options_) : Module("RReLU"), options(options_) {
  EMBER_CHECK(options.lower() <= options.upper(), "RReLU: lower bound (", options.lower(),
              ") must not exceed the upper bound (", options.upper(), ")");
}
Tensor RReLUImpl::forward(const Tensor& x) {
  return F::rrelu(
      x, RReLUFuncOptions().lower(options.lower()).upper(options.upper()).training(is_training()));
}
void RReLUImpl::pretty_print(std::ostream& os) const {
  os << "RReLU(lower=" << detail::float_str(options.lower())
     << ", upper=" << detail::float_str(options.upper()) << ")";
}

}  // namespace ember::nn
