// Parameter initialization, as torch.nn.init: fan computation, nonlinearity gains, and the in-place
// initializers (uniform_, normal_, constant_, zeros_, ones_, xavier_*, kaiming_*). Every random
// initializer draws from a Philox generator (the tensor's device default unless one is given), so a
// fixed ember::manual_seed gives the same weights on every run. All run without recording autograd,
// so they may be applied to parameters that require grad.
#pragma once
#include <optional>

#include "ember/ops/ops.h"

namespace ember::nn::init {

// Which fan kaiming_* scale by: fan_in keeps the forward's variance, fan_out the backward's (as
// PyTorch's mode='fan_in' / 'fan_out').
enum class FanMode { fan_in, fan_out };
// The nonlinearity names calculate_gain takes, as PyTorch's strings ('linear', 'conv2d', 'relu',
// ...).
enum class Nonlinearity {
  linear,
  conv1d,
  conv2d,
  conv3d,
  conv_transpose1d,
  conv_transpose2d,
  conv_transpose3d,
  sigmoid,
  tanh,
  relu,
  leaky_relu,
  selu
};

// torch.nn.init.calculate_gain: 1 for linear/conv/sigmoid, 5/3 for tanh, sqrt(2) for relu,
// sqrt(2 / (1 + slope^2)) for leaky_relu (slope = `param`, 0.01 when not given), 3/4 for selu.
double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param = std::nullopt);

// A weight's fans: the inputs and the outputs each unit connects to.
struct Fans {
  // fan_in = in * prod(kernel).
  int64_t fan_in = 0, fan_out = 0;  // fan_out: out * prod(kernel)
};
// torch.nn.init._calculate_fan_in_and_fan_out: for a weight [out, in, *kernel],
// fan_in = in * prod(kernel), fan_out = out * prod(kernel). Needs at least 2 dims.
Fans calculate_fans(const Tensor& weight);

// Fills t in place with draws from U(low, high) (defaults as PyTorch: U(0, 1)); returns t.
Tensor& uniform_(Tensor& t, double low = 0, double high = 1, Generator* gen = nullptr);
// Fills t in place with draws from N(mean, std^2) (defaults as PyTorch: N(0, 1)); returns t.
Tensor& normal_(Tensor& t, double mean = 0, double std = 1, Generator* gen = nullptr);
// Fills t in place with `value`, 0 or 1; returns t.
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);

// U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)).
Tensor& xavier_uniform_(Tensor& t, double gain = 1, Generator* gen = nullptr);
// N(0, s) with s = gain * sqrt(2 / (fan_in + fan_out)).
Tensor& xavier_normal_(Tensor& t, double gain = 1, Generator* gen = nullptr);
// U(-b, b) with b = gain(nonlinearity, a) * sqrt(3 / fan), fan chosen by `mode`. PyTorch's Linear
// and Conv defaults are kaiming_uniform_(w, sqrt(5)), i.e. b = 1 / sqrt(fan_in).
Tensor& kaiming_uniform_(Tensor& t, double a = 0, FanMode mode = FanMode::fan_in,
                         Nonlinearity nonlinearity = Nonlinearity::leaky_relu,
                         Generator* gen = nullptr);
// N(0, s) with s = gain(nonlinearity, a) / sqrt(fan).
Tensor& kaiming_normal_(Tensor& t, double a = 0, FanMode mode = FanMode::fan_in,
                        Nonlinearity nonlinearity = Nonlinearity::leaky_relu,
                        Generator* gen = nullptr);

}  // namespace ember::nn::init
