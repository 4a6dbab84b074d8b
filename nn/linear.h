// Linear (y = x W^T + b), Identity and Flatten, as torch.nn.Linear / Identity / Flatten.
#pragma once
#include "ember/nn/module.h"
#include "ember/nn/options.h"

namespace ember::nn {

// The options of Linear, as torch.nn.Linear's arguments.
struct LinearOptions {
  // Sizes of each input sample's last dim and of each output sample's last dim.
  LinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  EMBER_ARG(int64_t, in_features);   // size of the input's last dim
  EMBER_ARG(int64_t, out_features);  // size of the output's last dim
  EMBER_ARG(bool, bias) = true;      // whether to learn an additive bias
};

// x [..., in_features] -> [..., out_features]. Parameters: weight [out, in], bias [out] (when
// options.bias()). Initialized as PyTorch: weight ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform_
// with a = sqrt(5)), bias ~ U(-1/sqrt(in), 1/sqrt(in)). Under autocast x, weight and bias are cast
// to the low precision (see nn/amp.h).
class LinearImpl : public Module {
 public:
  // clone() builds a fresh LinearImpl from options, then copies the parameters.
  EMBER_CLONEABLE(LinearImpl);
  // Registers weight [out_features, in_features] and (with options.bias()) bias [out_features],
  // then initializes them by reset_parameters().
  explicit LinearImpl(const LinearOptions& options);
  LinearImpl(int64_t in_features, int64_t out_features)
      : LinearImpl(LinearOptions(in_features, out_features)) {}
  // Re-initializes as PyTorch: weight by kaiming_uniform_ with a = sqrt(5), i.e. ~ U(-1/sqrt(in),
  // 1/sqrt(in)); bias ~ U(-1/sqrt(in), 1/sqrt(in)) (zeros when in_features is 0).
  void reset_parameters();
  // x [..., in_features] -> [..., out_features]: x W^T + b. Errors when x's last dim is not
  // in_features.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  LinearOptions options;  // the options it was built with
  // weight [out_features, in_features]; bias [out_features], or undefined without options.bias().
  Tensor weight, bias;  // bias: [out_features], undefined without options.bias()
};
EMBER_MODULE(Linear);

// Returns its input.
class IdentityImpl : public Module {
 public:
  // clone() gives a fresh IdentityImpl.
  EMBER_CLONEABLE(IdentityImpl);
  // Takes no options; has no parameters.
  IdentityImpl() : Module("Identity") {}
  // x (any shape) -> x, the same tensor.
  Tensor forward(const Tensor& x) { return x; }
  void pretty_print(std::ostream& os) const override { os << "Identity()"; }
};
EMBER_MODULE(Identity);

// The options of Flatten, as torch.nn.Flatten's arguments.
struct FlattenOptions {
  EMBER_ARG(int64_t, start_dim) = 1;  // first dim to flatten (negative counts from the end)
  EMBER_ARG(int64_t, end_dim) = -1;   // last dim to flatten, inclusive (negative from the end)
};

// Flattens dims [start_dim, end_dim] into one (a view when the strides allow).
class FlattenImpl : public Module {
 public:
  // clone() builds a fresh FlattenImpl from options.
  EMBER_CLONEABLE(FlattenImpl);
  // Defaults as PyTorch: start_dim 1, end_dim -1 (keeps the batch dim).
  explicit FlattenImpl(const FlattenOptions& options = {}) : Module("Flatten"), options(options) {}
  // x [N, d1, ..., dk] -> [N, d1 * ... * dk] with the defaults; in general the dims
  // start_dim..end_dim become one whose size is their product.
  Tensor forward(const Tensor& x) { return x.flatten(options.start_dim(), options.end_dim()); }
  void pretty_print(std::ostream& os) const override;

  FlattenOptions options;  // the options it was built with
};
EMBER_MODULE(Flatten);

}  // namespace ember::nn
