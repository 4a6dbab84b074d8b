// Activation layers, as torch.nn.ReLU / LeakyReLU / ELU / GELU / SiLU / Sigmoid / Tanh, and the
// softmax layers Softmax / LogSoftmax. Activations run in the dtype they are given (also under
// autocast); Softmax and LogSoftmax cast a float16/bfloat16 input to float32 under autocast.
#pragma once
#include <string>

#include "ember/nn/module.h"
#include "ember/nn/options.h"
#include "ember/ops/activation.h"

namespace ember::nn {

// max(0, x) elementwise, as torch.nn.ReLU.
class ReLUImpl : public Module {
 public:
  // clone() builds a fresh ReLUImpl.
  EMBER_CLONEABLE(ReLUImpl);
  // No options, no parameters.
  ReLUImpl() : Module("ReLU") {}
  // x (any shape) -> max(0, x), the same shape and dtype.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
};
EMBER_MODULE(ReLU);

// The options of LeakyReLU, as torch.nn.LeakyReLU's arguments.
struct LeakyReLUOptions {
  EMBER_ARG(double, negative_slope) = 0.01;  // the slope for x < 0
};
// x for x >= 0, negative_slope * x below, as torch.nn.LeakyReLU.
class LeakyReLUImpl : public Module {
 public:
  // clone() builds a fresh LeakyReLUImpl from options.
  EMBER_CLONEABLE(LeakyReLUImpl);
  // Default as PyTorch: negative_slope 0.01.
  explicit LeakyReLUImpl(const LeakyReLUOptions& options = {})
      : Module("LeakyReLU"), options(options) {}
  // x (any shape) -> the same shape and dtype.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  LeakyReLUOptions options;  // the options it was built with
};
EMBER_MODULE(LeakyReLU);

// The options of ELU, as torch.nn.ELU's arguments.
struct ELUOptions {
  EMBER_ARG(double, alpha) = 1.0;  // the value the output tends to as x -> -inf is -alpha
};
// x for x > 0, alpha * (exp(x) - 1) below, as torch.nn.ELU.
class ELUImpl : public Module {
 public:
  // clone() builds a fresh ELUImpl from options.
  EMBER_CLONEABLE(ELUImpl);
  // Default as PyTorch: alpha 1.
  explicit ELUImpl(const ELUOptions& options = {}) : Module("ELU"), options(options) {}
  // x (any shape) -> the same shape and dtype.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  ELUOptions options;  // the options it was built with
};
EMBER_MODULE(ELU);

// The options of GELU, as torch.nn.GELU's arguments.
struct GELUOptions {
  // none: the exact erf form; tanh: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), as
  // approximate='tanh'.
  EMBER_ARG(GeluApproximation, approximate) = GeluApproximation::none;
};
// x * Phi(x) (Phi the standard normal CDF), or its tanh approximation, as torch.nn.GELU.
class GELUImpl : public Module {
 public:
  // clone() builds a fresh GELUImpl from options.
  EMBER_CLONEABLE(GELUImpl);
  // Default as PyTorch: the exact form (approximate='none').
  explicit GELUImpl(const GELUOptions& options = {}) : Module("GELU"), options(options) {}
  // x (any shape) -> the same shape and dtype.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  GELUOptions options;  // the options it was built with
};
EMBER_MODULE(GELU);

// x * sigmoid(x) (swish), as torch.nn.SiLU.
class SiLUImpl : public Module {
 public:
  // clone() builds a fresh SiLUImpl.
  EMBER_CLONEABLE(SiLUImpl);
  // No options, no parameters.
  SiLUImpl() : Module("SiLU") {}
  // x (any shape) -> x * sigmoid(x), the same shape and dtype.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
};
EMBER_MODULE(SiLU);

// 1 / (1 + exp(-x)) elementwise, as torch.nn.Sigmoid.
class SigmoidImpl : public Module {
 public:
  // clone() builds a fresh SigmoidImpl.
  EMBER_CLONEABLE(SigmoidImpl);
  // No options, no parameters.
  SigmoidImpl() : Module("Sigmoid") {}
  // x (any shape) -> sigmoid(x), the same shape and dtype.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
};
EMBER_MODULE(Sigmoid);

// tanh(x) elementwise, as torch.nn.Tanh.
class TanhImpl : public Module {
 public:
  // clone() builds a fresh TanhImpl.
  EMBER_CLONEABLE(TanhImpl);
  // No options, no parameters.
  TanhImpl() : Module("Tanh") {}
  // x (any shape) -> tanh(x), the same shape and dtype.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
};
EMBER_MODULE(Tanh);

// The options of Softmax and LogSoftmax: the dim to normalize along (as PyTorch, no default).
struct SoftmaxOptions {
  // Implicit from dim, so `Softmax(1)` works.
  /* implicit */ SoftmaxOptions(int64_t dim) : dim_(dim) {}  // NOLINT
  EMBER_ARG(int64_t, dim);  // the dim whose slices are normalized (negative counts from the end)
};
// exp(x) / sum(exp(x)) along options.dim, as torch.nn.Softmax(dim).
class SoftmaxImpl : public Module {
 public:
  // clone() builds a fresh SoftmaxImpl from options.
  EMBER_CLONEABLE(SoftmaxImpl);
  // Normalizes along options.dim().
  explicit SoftmaxImpl(const SoftmaxOptions& options) : Module("Softmax"), options(options) {}
  // x (any shape) -> the same shape, each slice along dim non-negative and summing to 1.
  // Errors when dim is out of range.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  SoftmaxOptions options;  // the options it was built with
};
EMBER_MODULE(Softmax);

// log(softmax(x)) along options.dim, computed stably, as torch.nn.LogSoftmax(dim).
class LogSoftmaxImpl : public Module {
 public:
  // clone() builds a fresh LogSoftmaxImpl from options.
  EMBER_CLONEABLE(LogSoftmaxImpl);
  // Normalizes along options.dim().
  explicit LogSoftmaxImpl(const SoftmaxOptions& options) : Module("LogSoftmax"), options(options) {}
  // x (any shape) -> the same shape. Errors when dim is out of range.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  SoftmaxOptions options;  // the options it was built with
};
EMBER_MODULE(LogSoftmax);

}  // namespace ember::nn
