// Activation layers, as torch.nn.ReLU / LeakyReLU / ELU / GELU / SiLU / Sigmoid / Tanh, and the
// softmax layers Softmax / LogSoftmax. Activations run in the dtype they are given (also under
// autocast); Softmax and LogSoftmax cast a float16/bfloat16 input to float32 under autocast.
#pragma once
#include <string>

#include "ember/nn/module.h"
#include "ember/nn/options.h"
#include "ember/ops/activation.h"

namespace ember::nn {

class ReLUImpl : public Module {
 public:
  EMBER_CLONEABLE(ReLUImpl);
  ReLUImpl() : Module("ReLU") {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
};
EMBER_MODULE(ReLU);

struct LeakyReLUOptions {
  EMBER_ARG(double, negative_slope) = 0.01;
};
class LeakyReLUImpl : public Module {
 public:
  EMBER_CLONEABLE(LeakyReLUImpl);
  explicit LeakyReLUImpl(const LeakyReLUOptions& options = {})
      : Module("LeakyReLU"), options(options) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  LeakyReLUOptions options;
};
EMBER_MODULE(LeakyReLU);

struct ELUOptions {
  EMBER_ARG(double, alpha) = 1.0;
};
class ELUImpl : public Module {
 public:
  EMBER_CLONEABLE(ELUImpl);
  explicit ELUImpl(const ELUOptions& options = {}) : Module("ELU"), options(options) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  ELUOptions options;
};
EMBER_MODULE(ELU);

struct GELUOptions {
  EMBER_ARG(GeluApproximation, approximate) = GeluApproximation::none;
};
class GELUImpl : public Module {
 public:
  EMBER_CLONEABLE(GELUImpl);
  explicit GELUImpl(const GELUOptions& options = {}) : Module("GELU"), options(options) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  GELUOptions options;
};
EMBER_MODULE(GELU);

class SiLUImpl : public Module {
 public:
  EMBER_CLONEABLE(SiLUImpl);
  SiLUImpl() : Module("SiLU") {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
};
EMBER_MODULE(SiLU);

class SigmoidImpl : public Module {
 public:
  EMBER_CLONEABLE(SigmoidImpl);
  SigmoidImpl() : Module("Sigmoid") {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
};
EMBER_MODULE(Sigmoid);

class TanhImpl : public Module {
 public:
  EMBER_CLONEABLE(TanhImpl);
  TanhImpl() : Module("Tanh") {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
};
EMBER_MODULE(Tanh);

struct SoftmaxOptions {
  /* implicit */ SoftmaxOptions(int64_t dim) : dim_(dim) {}  // NOLINT
  EMBER_ARG(int64_t, dim);
};
class SoftmaxImpl : public Module {
 public:
  EMBER_CLONEABLE(SoftmaxImpl);
  explicit SoftmaxImpl(const SoftmaxOptions& options) : Module("Softmax"), options(options) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  SoftmaxOptions options;
};
EMBER_MODULE(Softmax);

class LogSoftmaxImpl : public Module {
 public:
  EMBER_CLONEABLE(LogSoftmaxImpl);
  explicit LogSoftmaxImpl(const SoftmaxOptions& options) : Module("LogSoftmax"), options(options) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  SoftmaxOptions options;
};
EMBER_MODULE(LogSoftmax);

}  // namespace ember::nn
