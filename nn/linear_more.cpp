// Bilinear, Unflatten and the functional bilinear (see linear_more.h).
#include "ember/nn/linear_more.h"

#include <cmath>
#include <ostream>

#include "ember/nn/init.h"

namespace ember::nn {

Tensor bilinear(const Tensor& x1, const Tensor& x2, const Tensor& weight, const Tensor& bias) {
  EMBER_CHECK(x1.defined() && x2.defined() && weight.defined() && weight.dim() == 3,
              "bilinear: expected x1 [..., in1], x2 [..., in2] and weight [out, in1, in2], got ",
              x1.defined() ? x1.shape_str() : "undefined", ", ",
              x2.defined() ? x2.shape_str() : "undefined", " and ",
              weight.defined() ? weight.shape_str() : "undefined");
  const int64_t out = weight.size(0), in1 = weight.size(1), in2 = weight.size(2);
  EMBER_CHECK(x1.dim() >= 1 && x1.dim() == x2.dim() && x1.size(-1) == in1 && x2.size(-1) == in2,
              "bilinear: x1 ", x1.shape_str(), " and x2 ", x2.shape_str(),
              " must have the same number of dims and last dims ", in1, " and ", in2, " (weight ",
              weight.shape_str(), ")");
  for (int64_t d = 0; d + 1 < x1.dim(); ++d)
    EMBER_CHECK(x1.size(d) == x2.size(d), "bilinear: x1 ", x1.shape_str(), " and x2 ",
                x2.shape_str(), " differ at dim ", d, "; the leading dims must match");
  EMBER_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == out), "bilinear: bias ",
              bias.defined() ? bias.shape_str() : "", " must be [", out, "]");
  Shape lead(x1.sizes().begin(), x1.sizes().end() - 1);
  const Tensor a = x1.reshape({-1, in1}), b = x2.reshape({-1, in2});
  // (x1 W_o) for every o at once: [rows, out * in2], then the dot with x2 per o.
  const Tensor xw = matmul(a, weight.permute({1, 0, 2}).reshape({in1, out * in2}));
  Tensor y = (xw.reshape({-1, out, in2}) * b.unsqueeze(1)).sum({2});
  if (bias.defined()) y = y + bias;
  lead.push_back(out);
  return y.reshape(lead);
}

BilinearImpl::BilinearImpl(const BilinearOptions& o) : Module("Bilinear"), options(o) {
  EMBER_CHECK(o.in1_features() > 0 && o.in2_features() > 0 && o.out_features() > 0,
              "Bilinear: in1_features, in2_features and out_features must be positive, got ",
              o.in1_features(), ", ", o.in2_features(), " and ", o.out_features());
  weight =
      register_parameter("weight", empty({o.out_features(), o.in1_features(), o.in2_features()}));
  if (o.bias()) bias = register_parameter("bias", empty({o.out_features()}));
  reset_parameters();
}

void BilinearImpl::reset_parameters() {
  const double bound = 1.0 / std::sqrt(double(options.in1_features()));
  init::uniform_(weight, -bound, bound);
  if (bias.defined()) init::uniform_(bias, -bound, bound);
}

Tensor BilinearImpl::forward(const Tensor& x1, const Tensor& x2) {
  return bilinear(x1, x2, weight, bias);
}

void BilinearImpl::pretty_print(std::ostream& os) const {
  os << "Bilinear(in1_features=" << options.in1_features()
     << ", in2_features=" << options.in2_features() << ", out_features=" << options.out_features()
     << ", bias=" << detail::bool_str(options.bias()) << ")";
}

UnflattenImpl::UnflattenImpl(const UnflattenOptions& o) : Module("Unflatten"), options(o) {
  EMBER_CHECK(!o.sizes().empty(), "Unflatten: sizes must not be empty");
}

Tensor UnflattenImpl::forward(const Tensor& x) {
  return x.unflatten(options.dim(), Shape(options.sizes().begin(), options.sizes().end()));
}

void UnflattenImpl::pretty_print(std::ostream& os) const {
  os << "Unflatten(dim=" << options.dim() << ", unflattened_size={";
  for (size_t i = 0; i < options.sizes().size(); ++i) os << (i ? ", " : "") << options.sizes()[i];
  os << "})";
}

}  // namespace ember::nn
