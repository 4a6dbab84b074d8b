// torch.nn.init for Ember: gains, fans and the in-place initializers (see init.h).
#include "ember/nn/init.h"

#include <cmath>

#include "ember/autograd/graph/grad_mode.h"

namespace ember::nn::init {

namespace {
void check_floating(const char* op, const Tensor& t) {
  EMBER_CHECK(t.defined(), "nn::init::", op, ": the tensor is undefined");
  EMBER_CHECK(is_floating(t.dtype()), "nn::init::", op, ": needs a floating tensor, got ",
              dtype_name(t.dtype()));
}

int64_t pick_fan(const char* op, const Tensor& t, FanMode mode) {
  Fans f = calculate_fans(t);
  int64_t fan = mode == FanMode::fan_in ? f.fan_in : f.fan_out;
  EMBER_CHECK(fan > 0, "nn::init::", op, ": the tensor of shape ", t.shape_str(),
              " has a zero fan; nothing to initialize from");
  return fan;
}
}  // namespace

double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param) {
  switch (nonlinearity) {
    case Nonlinearity::linear:
    case Nonlinearity::conv1d:
    case Nonlinearity::conv2d:
    case Nonlinearity::conv3d:
    case Nonlinearity::conv_transpose1d:
    case Nonlinearity::conv_transpose2d:
    case Nonlinearity::conv_transpose3d:
    case Nonlinearity::sigmoid:
      return 1.0;
    case Nonlinearity::tanh:
      return 5.0 / 3.0;
    case Nonlinearity::relu:
      return std::sqrt(2.0);
    case Nonlinearity::leaky_relu: {
      const double slope = param.value_or(0.01);
      return std::sqrt(2.0 / (1.0 + slope * slope));
    }
    case Nonlinearity::selu:
      return 3.0 / 4.0;
  }
  EMBER_INTERNAL_ASSERT(false, "unknown nonlinearity");
  return 1.0;
}

Fans calculate_fans(const Tensor& weight) {
  EMBER_CHECK(weight.defined() && weight.dim() >= 2,
              "nn::init: fan in and fan out need a tensor of at least 2 dims, got ",
              weight.defined() ? weight.shape_str() : std::string("undefined"));
  int64_t receptive_field = 1;
  for (int64_t d = 2; d < weight.dim(); ++d) receptive_field *= weight.size(d);
  return Fans{weight.size(1) * receptive_field, weight.size(0) * receptive_field};
}

Tensor& uniform_(Tensor& t, double low, double high, Generator* gen) {
  check_floating("uniform_", t);
  EMBER_CHECK(low <= high, "nn::init::uniform_: low (", low, ") must not exceed high (", high, ")");
  return ::ember::uniform_(t, low, high, gen);
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  check_floating("normal_", t);
  EMBER_CHECK(std >= 0, "nn::init::normal_: std must be non-negative, got ", std);
  return ::ember::normal_(t, mean, std, gen);
}

Tensor& constant_(Tensor& t, double value) {
  EMBER_CHECK(t.defined(), "nn::init::constant_: the tensor is undefined");
  autograd::NoGradGuard no_grad;
  return t.fill_(value);
}

Tensor& zeros_(Tensor& t) { return constant_(t, 0.0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1.0); }

Tensor& xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  check_floating("xavier_uniform_", t);
  Fans f = calculate_fans(t);
  const double std = gain * std::sqrt(2.0 / double(f.fan_in + f.fan_out));
  const double bound = std::sqrt(3.0) * std;
  return ::ember::uniform_(t, -bound, bound, gen);
}

Tensor& xavier_normal_(Tensor& t, double gain, Generator* gen) {
  check_floating("xavier_normal_", t);
  Fans f = calculate_fans(t);
  return ::ember::normal_(t, 0.0, gain * std::sqrt(2.0 / double(f.fan_in + f.fan_out)), gen);
}

Tensor& kaiming_uniform_(Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity,
                         Generator* gen) {
  check_floating("kaiming_uniform_", t);
  const double std =
      calculate_gain(nonlinearity, a) / std::sqrt(double(pick_fan("kaiming_uniform_", t, mode)));
  const double bound = std::sqrt(3.0) * std;
  return ::ember::uniform_(t, -bound, bound, gen);
}

Tensor& kaiming_normal_(Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity,
                        Generator* gen) {
  check_floating("kaiming_normal_", t);
  const double std =
      calculate_gain(nonlinearity, a) / std::sqrt(double(pick_fan("kaiming_normal_", t, mode)));
  return ::ember::normal_(t, 0.0, std, gen);
}

}  // namespace ember::nn::init
