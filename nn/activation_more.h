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
// Softplus / softplus: log(1 + exp(beta x)) / beta (PyTorch's defaults).
struct SoftplusOptions {
  EMBER_ARG(double, beta) = 1.0;        // the sharpness; larger approaches relu
  EMBER_ARG(double, threshold) = 20.0;  // beta * x above it: the identity
};
// Hardtanh / hardtanh: the clamp range (PyTorch's defaults [-1, 1]).
struct HardtanhOptions {
  EMBER_ARG(double, min_val) = -1.0;  // the lower end, <= max_val
  EMBER_ARG(double, max_val) = 1.0;   // the upper end
};
// CELU / celu (PyTorch's default alpha 1).
struct CELUOptions {
  EMBER_ARG(double, alpha) = 1.0;  // the negative part's scale, != 0
};
// GLU / glu: the dim split in halves.
struct GLUOptions {
  // Implicit from dim (PyTorch's default -1), so `GLU(1)` works.
  /* implicit */ GLUOptions(int64_t dim = -1) : dim_(dim) {}  // NOLINT
  EMBER_ARG(int64_t, dim);  // the dim split into a and b; its size must be even
};
// PReLU's options (PyTorch's defaults).
struct PReLUOptions {
  EMBER_ARG(int64_t, num_parameters) = 1;  // 1, or the number of channels (dim 1 of the input)
  EMBER_ARG(double, init) = 0.25;          // the slopes' initial value
};
// RReLU's options: the range of the random negative slope (PyTorch's defaults 1/8, 1/3).
struct RReLUOptions {
  EMBER_ARG(double, lower) = 1.0 / 8.0;  // the slope range's lower end
  EMBER_ARG(double, upper) = 1.0 / 3.0;  // the slope range's upper end, >= lower
};
// rrelu's options: RReLU's, whether to draw (training) and the generator.
struct RReLUFuncOptions {
  EMBER_ARG(double, lower) = 1.0 / 8.0;        // the slope range's lower end
  EMBER_ARG(double, upper) = 1.0 / 3.0;        // the slope range's upper end, >= lower
  EMBER_ARG(bool, training) = false;           // draw slopes (true) or use their mean (false)
  EMBER_ARG(Generator*, generator) = nullptr;  // the device's default generator when null
};
// Softmin / softmin: the dim normalized along (no default, as libtorch).
struct SoftminOptions {
  // Implicit from dim, so `Softmin(1)` works.
  /* implicit */ SoftminOptions(int64_t dim) : dim_(dim) {}  // NOLINT
  EMBER_ARG(int64_t, dim);                                   // negative counts from the end
};
// gumbel_softmax's options, as F.gumbel_softmax's arguments (with their defaults).
struct GumbelSoftmaxFuncOptions {
  EMBER_ARG(double, tau) = 1.0;                // the temperature, > 0 (lower: closer to one-hot)
  EMBER_ARG(bool, hard) = false;               // return one-hot samples with the soft gradient
  EMBER_ARG(int64_t, dim) = -1;                // the class dim
  EMBER_ARG(Generator*, generator) = nullptr;  // the device's default generator when null
};
// Threshold / threshold: both required, as PyTorch.
struct ThresholdOptions {
  ThresholdOptions(double threshold, double value) : threshold_(threshold), value_(value) {}
  EMBER_ARG(double, threshold);  // x is kept where x > threshold
  EMBER_ARG(double, value);      // what replaces x elsewhere
};
// Softshrink / softshrink (PyTorch's default lambda 0.5).
struct SoftshrinkOptions {
  // Implicit from lambda, so `Softshrink(0.3)` works.
  /* implicit */ SoftshrinkOptions(double lambda = 0.5) : lambda_(lambda) {}  // NOLINT
  EMBER_ARG(double, lambda);  // the half-width of the zeroed band, >= 0
};
// Hardshrink / hardshrink (PyTorch's default lambda 0.5).
struct HardshrinkOptions {
  // Implicit from lambda, so `Hardshrink(0.3)` works.
  /* implicit */ HardshrinkOptions(double lambda = 0.5) : lambda_(lambda) {}  // NOLINT
  EMBER_ARG(double, lambda);  // the half-width of the zeroed band
};

namespace functional {

// libtorch's names for the functionals' options (F::SoftplusFuncOptions, ...): the modules'.
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

// The functionals above as modules (Softsign is softsign's, ...): x (any shape) -> the same
// shape; the Options ones take the functional's options (defaults as PyTorch).
EMBER_STATELESS_ACTIVATION(Softsign);                 // x / (1 + |x|)
EMBER_STATELESS_ACTIVATION(ReLU6);                    // min(max(x, 0), 6)
EMBER_STATELESS_ACTIVATION(Hardsigmoid);              // relu6(x + 3) / 6
EMBER_STATELESS_ACTIVATION(Hardswish);                // x * relu6(x + 3) / 6
EMBER_STATELESS_ACTIVATION(Mish);                     // x * tanh(softplus(x))
EMBER_STATELESS_ACTIVATION(SELU);                     // scale * elu(x, alpha), PyTorch's constants
EMBER_STATELESS_ACTIVATION(LogSigmoid);               // log(sigmoid(x))
EMBER_STATELESS_ACTIVATION(Tanhshrink);               // x - tanh(x)
EMBER_OPTIONS_ACTIVATION(Softplus, SoftplusOptions);  // softplus; options beta, threshold
EMBER_OPTIONS_ACTIVATION(Hardtanh, HardtanhOptions);  // hardtanh; options min_val, max_val
EMBER_OPTIONS_ACTIVATION(CELU, CELUOptions);          // celu; option alpha
EMBER_OPTIONS_ACTIVATION(GLU, GLUOptions);            // glu: [.., 2n, ..] -> [.., n, ..] along dim
EMBER_OPTIONS_ACTIVATION(Softshrink, SoftshrinkOptions);  // softshrink; option lambda
EMBER_OPTIONS_ACTIVATION(Hardshrink, HardshrinkOptions);  // hardshrink; option lambda

// softmin along options.dim (no default dim, as libtorch).
class SoftminImpl : public Module {
 public:
  // clone() builds a fresh SoftminImpl from options.
  EMBER_CLONEABLE(SoftminImpl);
  // From options or from dim alone (`Softmin(1)`).
  explicit SoftminImpl(const SoftminOptions& options) : Module("Softmin"), options(options) {}
  // x (any shape) -> the same shape, each slice along dim summing to 1.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  SoftminOptions options;  // the options it was built with
};
EMBER_MODULE(Softmin);

// threshold as a module, as torch.nn.Threshold(threshold, value).
class ThresholdImpl : public Module {
 public:
  // clone() builds a fresh ThresholdImpl from options.
  EMBER_CLONEABLE(ThresholdImpl);
  // From options (threshold and value).
  explicit ThresholdImpl(const ThresholdOptions& options) : Module("Threshold"), options(options) {}
  // x (any shape) -> the same shape: x where x > threshold, value elsewhere.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  ThresholdOptions options;  // the options it was built with
};
EMBER_MODULE(Threshold);

// Learnable slopes: parameter "weight" [num_parameters], filled with options.init.
class PReLUImpl : public Module {
 public:
  // clone() builds a fresh PReLUImpl from options, then copies the weight.
  EMBER_CLONEABLE(PReLUImpl);
  // Registers weight [num_parameters] (num_parameters > 0) and fills it; defaults as PyTorch.
  explicit PReLUImpl(const PReLUOptions& options = {});
  // weight = options.init, as PyTorch.
  void reset_parameters();
  // x [N, C, *] (or any shape with num_parameters 1) -> the same shape.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  PReLUOptions options;  // the options it was built with
  Tensor weight;         // the slopes [num_parameters]
};
EMBER_MODULE(PReLU);

// Random slopes in training mode (Module::train()), the mean slope in eval mode.
class RReLUImpl : public Module {
 public:
  // clone() builds a fresh RReLUImpl from options.
  EMBER_CLONEABLE(RReLUImpl);
  // Checks lower <= upper; defaults as PyTorch.
  explicit RReLUImpl(const RReLUOptions& options = {});
  // x (any shape) -> the same shape (slopes drawn from the device's default generator).
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  RReLUOptions options;  // the options it was built with
};
EMBER_MODULE(RReLU);

}  // namespace ember::nn
