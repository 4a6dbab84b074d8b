// More activations, as torch.nn.functional's and torch.nn's: softplus, softsign, hardtanh, relu6,
// hardsigmoid, hardswish, mish, celu, selu, glu, prelu, rrelu, logsigmoid, softmin,
// gumbel_softmax, threshold, tanhshrink, softshrink, hardshrink (ember::nn::functional, with
// libtorch's *FuncOptions) and their modules (ember::nn, with libtorch's *Options). Each is
// composed from differentiable ops (ops/ops.h), so autograd, every device and every floating dtype
// come from those ops; inputs away from a function's kinks get exact gradients.
#pragma once
#include <cstdint>

#include "ember/nn/module.h"
#include "ember/nn/options.h"
#include "ember/tensor/runtime/generator.h"
#include "ember/tensor/tensor.h"

namespace ember::nn {

// ---- options (the module's options double as the functional's, as libtorch's aliases do) ----
struct SoftplusOptions {
  EMBER_ARG(double, beta) = 1.0;
  EMBER_ARG(double, threshold) = 20.0;  // beta * x above it: the identity
};
struct HardtanhOptions {
  EMBER_ARG(double, min_val) = -1.0;
  EMBER_ARG(double, max_val) = 1.0;
};
struct CELUOptions {
  EMBER_ARG(double, alpha) = 1.0;
};
struct GLUOptions {
  /* implicit */ GLUOptions(int64_t dim = -1) : dim_(dim) {}  // NOLINT
  EMBER_ARG(int64_t, dim);
};
struct PReLUOptions {
  EMBER_ARG(int64_t, num_parameters) = 1;  // 1, or the number of channels (dim 1 of the input)
  EMBER_ARG(double, init) = 0.25;
};
struct RReLUOptions {
  EMBER_ARG(double, lower) = 1.0 / 8.0;
  EMBER_ARG(double, upper) = 1.0 / 3.0;
};
struct RReLUFuncOptions {
  EMBER_ARG(double, lower) = 1.0 / 8.0;
  EMBER_ARG(double, upper) = 1.0 / 3.0;
  EMBER_ARG(bool, training) = false;
  EMBER_ARG(Generator*, generator) = nullptr;  // the device's default generator when null
};
struct SoftminOptions {
  /* implicit */ SoftminOptions(int64_t dim) : dim_(dim) {}  // NOLINT
  EMBER_ARG(int64_t, dim);
};
struct GumbelSoftmaxFuncOptions {
  EMBER_ARG(double, tau) = 1.0;
  EMBER_ARG(bool, hard) = false;
  EMBER_ARG(int64_t, dim) = -1;
  EMBER_ARG(Generator*, generator) = nullptr;
};
struct ThresholdOptions {
  ThresholdOptions(double threshold, double value) : threshold_(threshold), value_(value) {}
  EMBER_ARG(double, threshold);
  EMBER_ARG(double, value);
};
struct SoftshrinkOptions {
  /* implicit */ SoftshrinkOptions(double lambda = 0.5) : lambda_(lambda) {}  // NOLINT
  EMBER_ARG(double, lambda);
};
struct HardshrinkOptions {
  /* implicit */ HardshrinkOptions(double lambda = 0.5) : lambda_(lambda) {}  // NOLINT
  EMBER_ARG(double, lambda);
};

namespace functional {

using SoftplusFuncOptions = SoftplusOptions;
using HardtanhFuncOptions = HardtanhOptions;
using CELUFuncOptions = CELUOptions;
using GLUFuncOptions = GLUOptions;
using RReLUFuncOptions = ::ember::nn::RReLUFuncOptions;
using SoftminFuncOptions = SoftminOptions;
using GumbelSoftmaxFuncOptions = ::ember::nn::GumbelSoftmaxFuncOptions;
using ThresholdFuncOptions = ThresholdOptions;
using SoftshrinkFuncOptions = SoftshrinkOptions;
using HardshrinkFuncOptions = HardshrinkOptions;

// log(1 + exp(beta x)) / beta; x where beta x > threshold.
Tensor softplus(const Tensor& x, const SoftplusFuncOptions& options = {});
// x / (1 + |x|).
Tensor softsign(const Tensor& x);
// x clamped to [min_val, max_val] (gradient 0 outside the open interval).
Tensor hardtanh(const Tensor& x, const HardtanhFuncOptions& options = {});
// min(max(x, 0), 6).
Tensor relu6(const Tensor& x);
// relu6(x + 3) / 6.
Tensor hardsigmoid(const Tensor& x);
// x * relu6(x + 3) / 6.
Tensor hardswish(const Tensor& x);
// x * tanh(softplus(x)).
Tensor mish(const Tensor& x);
// max(0, x) + min(0, alpha (exp(x / alpha) - 1)); alpha != 0.
Tensor celu(const Tensor& x, const CELUFuncOptions& options = {});
// scale * elu(x, alpha) with PyTorch's constants (alpha 1.6732632..., scale 1.0507009...).
Tensor selu(const Tensor& x);
// a * sigmoid(b), where a and b are the halves of x along dim (whose size must be even).
Tensor glu(const Tensor& x, const GLUFuncOptions& options = {});
// x for x >= 0, weight * x otherwise; weight has 1 element or one per channel (dim 1 of x).
Tensor prelu(const Tensor& x, const Tensor& weight);
// training: x for x >= 0, a * x otherwise with a ~ U(lower, upper) per element; eval: the slope
// (lower + upper) / 2 (leaky_relu).
Tensor rrelu(const Tensor& x, const RReLUFuncOptions& options = {});
// log(sigmoid(x)) = -softplus(-x), computed without overflow.
Tensor logsigmoid(const Tensor& x);
// softmax(-x, dim).
Tensor softmin(const Tensor& x, const SoftminFuncOptions& options);
// softmax((logits + g) / tau, dim) with g Gumbel(0, 1) noise; hard: the one-hot of its argmax in
// the forward pass with the soft sample's gradient (straight-through).
Tensor gumbel_softmax(const Tensor& logits, const GumbelSoftmaxFuncOptions& options = {});
// x where x > threshold, value elsewhere.
Tensor threshold(const Tensor& x, const ThresholdFuncOptions& options);
// x - tanh(x).
Tensor tanhshrink(const Tensor& x);
// x - lambda for x > lambda, x + lambda for x < -lambda, 0 between; lambda >= 0.
Tensor softshrink(const Tensor& x, const SoftshrinkFuncOptions& options = {});
// x where |x| > lambda, 0 elsewhere.
Tensor hardshrink(const Tensor& x, const HardshrinkFuncOptions& options = {});

}  // namespace functional

// ---- modules ----
// The modules without options and state; `Name` is also the module's printed form.
#define EMBER_STATELESS_ACTIVATION(Name)                \
  class Name##Impl : public Module {                    \
   public:                                              \
    EMBER_CLONEABLE(Name##Impl);                        \
    Name##Impl() : Module(#Name) {}                     \
    Tensor forward(const Tensor& x);                    \
    void pretty_print(std::ostream& os) const override; \
  };                                                    \
  EMBER_MODULE(Name)

// The modules whose only state is their options.
#define EMBER_OPTIONS_ACTIVATION(Name, Options)                                           \
  class Name##Impl : public Module {                                                      \
   public:                                                                                \
    EMBER_CLONEABLE(Name##Impl);                                                          \
    explicit Name##Impl(const Options& options = {}) : Module(#Name), options(options) {} \
    Tensor forward(const Tensor& x);                                                      \
    void pretty_print(std::ostream& os) const override;                                   \
    Options options;                                                                      \
  };                                                                                      \
  EMBER_MODULE(Name)

EMBER_STATELESS_ACTIVATION(Softsign);
EMBER_STATELESS_ACTIVATION(ReLU6);
EMBER_STATELESS_ACTIVATION(Hardsigmoid);
EMBER_STATELESS_ACTIVATION(Hardswish);
EMBER_STATELESS_ACTIVATION(Mish);
EMBER_STATELESS_ACTIVATION(SELU);
EMBER_STATELESS_ACTIVATION(LogSigmoid);
EMBER_STATELESS_ACTIVATION(Tanhshrink);
EMBER_OPTIONS_ACTIVATION(Softplus, SoftplusOptions);
EMBER_OPTIONS_ACTIVATION(Hardtanh, HardtanhOptions);
EMBER_OPTIONS_ACTIVATION(CELU, CELUOptions);
EMBER_OPTIONS_ACTIVATION(GLU, GLUOptions);
EMBER_OPTIONS_ACTIVATION(Softshrink, SoftshrinkOptions);
EMBER_OPTIONS_ACTIVATION(Hardshrink, HardshrinkOptions);

// softmin along options.dim (no default dim, as libtorch).
class SoftminImpl : public Module {
 public:
  EMBER_CLONEABLE(SoftminImpl);
  explicit SoftminImpl(const SoftminOptions& options) : Module("Softmin"), options(options) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  SoftminOptions options;
};
EMBER_MODULE(Softmin);

class ThresholdImpl : public Module {
 public:
  EMBER_CLONEABLE(ThresholdImpl);
  explicit ThresholdImpl(const ThresholdOptions& options) : Module("Threshold"), options(options) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  ThresholdOptions options;
};
EMBER_MODULE(Threshold);

// Learnable slopes: parameter "weight" [num_parameters], filled with options.init.
class PReLUImpl : public Module {
 public:
  EMBER_CLONEABLE(PReLUImpl);
  explicit PReLUImpl(const PReLUOptions& options = {});
  void reset_parameters();
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  PReLUOptions options;
  Tensor weight;
};
EMBER_MODULE(PReLU);

// Random slopes in training mode (Module::train()), the mean slope in eval mode.
class RReLUImpl : public Module {
 public:
  EMBER_CLONEABLE(RReLUImpl);
  explicit RReLUImpl(const RReLUOptions& options = {});
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  RReLUOptions options;
};
EMBER_MODULE(RReLU);

}  // namespace ember::nn
