// Linear, Identity and Flatten (see linear.h).
#include "ember/nn/linear.h"

#include <cmath>
#include <ostream>

#include "ember/nn/amp.h"
#include "ember/nn/init.h"

namespace ember::nn {

LinearImpl::LinearImpl(const LinearOptions& options_) : Module("Linear"), options(options_) {
  EMBER_CHECK(options.in_features() >= 0 && options.out_features() >= 0,
              "Linear: in_features and out_features must be non-negative, got ",
              options.in_features(), " and ", options.out_features());
  weight = register_parameter("weight", empty({options.out_features(), options.in_features()}));
  if (options.bias()) bias = register_parameter("bias", empty({options.out_features()}));
  reset_parameters();
}

void LinearImpl::reset_parameters() {
  const int64_t fan_in = options.in_features();
  if (weight.numel() > 0)
    init::kaiming_uniform_(weight, std::sqrt(5.0));
  else
    init::zeros_(weight);
  if (bias.defined()) {
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(double(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor LinearImpl::forward(const Tensor& x) {
  auto in = autocast_inputs({x, weight, bias}, OpClass::low_precision);
  return linear(in[0], in[1], in[2]);
}

void LinearImpl::pretty_print(std::ostream& os) const {
  os << "Linear(in_features=" << options.in_features()
     << ", out_features=" << options.out_features() << ", bias=" << detail::bool_str(options.bias())
     << ")";
}

void FlattenImpl::pretty_print(std::ostream& os) const {
  os << "Flatten(start_dim=" << options.start_dim() << ", end_dim=" << options.end_dim() << ")";
}

}  // namespace ember::nn
