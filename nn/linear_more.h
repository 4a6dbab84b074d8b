// Bilinear (y = x1^T A x2 + b) and Unflatten, as torch.nn.Bilinear / Unflatten, and the
// functional bilinear, as torch.nn.functional.bilinear.
#pragma once
#include <vector>

#include "ember/nn/module.h"
#include "ember/nn/options.h"

namespace ember::nn {

// x1 [..., in1], x2 [..., in2] (the same leading dims), weight [out, in1, in2], bias [out] or
// undefined -> [..., out] with y[..., o] = sum_ij x1[..., i] weight[o, i, j] x2[..., j] + bias[o].
// Composed of matmul and reductions (differentiable, every device).
Tensor bilinear(const Tensor& x1, const Tensor& x2, const Tensor& weight, const Tensor& bias = {});

// The options of Bilinear, as torch.nn.Bilinear's arguments.
struct BilinearOptions {
  BilinearOptions(int64_t in1_features, int64_t in2_features, int64_t out_features)
      : in1_features_(in1_features), in2_features_(in2_features), out_features_(out_features) {}
  EMBER_ARG(int64_t, in1_features);  // size of the first input's last dim
  EMBER_ARG(int64_t, in2_features);  // size of the second input's last dim
  EMBER_ARG(int64_t, out_features);  // size of the output's last dim
  EMBER_ARG(bool, bias) = true;      // whether to learn an additive bias
};

// Parameters weight [out, in1, in2] and bias [out] (when options.bias()), both ~
// U(-1/sqrt(in1), 1/sqrt(in1)), PyTorch's initialization.
class BilinearImpl : public Module {
 public:
  // clone() builds a fresh BilinearImpl from options, then copies the parameters.
  EMBER_CLONEABLE(BilinearImpl);
  explicit BilinearImpl(const BilinearOptions& options);
  BilinearImpl(int64_t in1, int64_t in2, int64_t out)
      : BilinearImpl(BilinearOptions(in1, in2, out)) {}
  void reset_parameters();
  // x1 [..., in1], x2 [..., in2] -> [..., out].
  Tensor forward(const Tensor& x1, const Tensor& x2);
  void pretty_print(std::ostream& os) const override;

  BilinearOptions options;  // the options it was built with
  Tensor weight;            // [out, in1, in2]
  Tensor bias;              // [out], or undefined without options.bias()
};
EMBER_MODULE(Bilinear);

// The options of Unflatten, as torch.nn.Unflatten's arguments.
struct UnflattenOptions {
  UnflattenOptions(int64_t dim, std::vector<int64_t> sizes) : dim_(dim), sizes_(std::move(sizes)) {}
  EMBER_ARG(int64_t, dim);                 // the dim to expand (negative counts from the end)
  EMBER_ARG(std::vector<int64_t>, sizes);  // its new sizes (one may be -1), product = its size
};

// Expands dim into sizes: [N, 12] with (1, {3, 4}) -> [N, 3, 4] (a view when strides allow).
class UnflattenImpl : public Module {
 public:
  // clone() builds a fresh UnflattenImpl from options.
  EMBER_CLONEABLE(UnflattenImpl);
  explicit UnflattenImpl(const UnflattenOptions& options);
  UnflattenImpl(int64_t dim, std::vector<int64_t> sizes)
      : UnflattenImpl(UnflattenOptions(dim, std::move(sizes))) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  UnflattenOptions options;  // the options it was built with
};
EMBER_MODULE(Unflatten);

}  // namespace ember::nn
