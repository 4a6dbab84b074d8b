// Linear (y = x W^T + b), Identity and Flatten, as torch.nn.Linear / Identity / Flatten.
#pragma once
#include "ember/nn/module.h"
#include "ember/nn/options.h"

namespace ember::nn {

struct LinearOptions {
  LinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  EMBER_ARG(int64_t, in_features);
  EMBER_ARG(int64_t, out_features);
  EMBER_ARG(bool, bias) = true;
};

// x [..., in_features] -> [..., out_features]. Parameters: weight [out, in], bias [out] (when
// options.bias()). Initialized as PyTorch: weight ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform_
// with a = sqrt(5)), bias ~ U(-1/sqrt(in), 1/sqrt(in)). Under autocast x, weight and bias are cast
// to the low precision (see nn/amp.h).
class LinearImpl : public Module {
 public:
  EMBER_CLONEABLE(LinearImpl);
  explicit LinearImpl(const LinearOptions& options);
  LinearImpl(int64_t in_features, int64_t out_features)
      : LinearImpl(LinearOptions(in_features, out_features)) {}
  void reset_parameters();
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  LinearOptions options;
  Tensor weight, bias;
};
EMBER_MODULE(Linear);

// Returns its input.
class IdentityImpl : public Module {
 public:
  EMBER_CLONEABLE(IdentityImpl);
  IdentityImpl() : Module("Identity") {}
  Tensor forward(const Tensor& x) { return x; }
  void pretty_print(std::ostream& os) const override { os << "Identity()"; }
};
EMBER_MODULE(Identity);

struct FlattenOptions {
  EMBER_ARG(int64_t, start_dim) = 1;
  EMBER_ARG(int64_t, end_dim) = -1;
};

// Flattens dims [start_dim, end_dim] into one (a view when the strides allow).
class FlattenImpl : public Module {
 public:
  EMBER_CLONEABLE(FlattenImpl);
  explicit FlattenImpl(const FlattenOptions& options = {}) : Module("Flatten"), options(options) {}
  Tensor forward(const Tensor& x) { return x.flatten(options.start_dim(), options.end_dim()); }
  void pretty_print(std::ostream& os) const override;

  FlattenOptions options;
};
EMBER_MODULE(Flatten);

}  // namespace ember::nn
