// Conv1d and Conv2d (see conv.h).
#include "nn/conv.h"

#include <cmath>
#include <ostream>

#include "nn/amp.h"
#include "nn/init.h"
#include "ops/conv.h"

namespace ember::nn {

template <size_t D>
ConvNdImpl<D>::ConvNdImpl(const char* name, const ConvOptions<D>& options_) : Module(name), options(options_) {
  const auto& o = options;
  EMBER_CHECK(o.in_channels() > 0 && o.out_channels() > 0, name, ": in_channels and out_channels must be positive, "
              "got ", o.in_channels(), " and ", o.out_channels());
  EMBER_CHECK(o.groups() > 0 && o.in_channels() % o.groups() == 0 && o.out_channels() % o.groups() == 0, name,
              ": in_channels (", o.in_channels(), ") and out_channels (", o.out_channels(),
              ") must both be divisible by groups (", o.groups(), ")");
  for (size_t i = 0; i < D; ++i) {
    EMBER_CHECK(o.kernel_size()[i] > 0 && o.stride()[i] > 0 && o.dilation()[i] > 0 && o.padding()[i] >= 0, name,
                ": kernel_size ", o.kernel_size(), ", stride ", o.stride(), " and dilation ", o.dilation(),
                " must be positive and padding ", o.padding(), " non-negative");
  }
  Shape wshape{o.out_channels(), o.in_channels() / o.groups()};
  for (size_t i = 0; i < D; ++i) wshape.push_back(o.kernel_size()[i]);
  weight = this->register_parameter("weight", empty(wshape));
  if (o.bias()) bias = this->register_parameter("bias", empty({o.out_channels()}));
  reset_parameters();
}

template <size_t D>
void ConvNdImpl<D>::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(double(init::calculate_fans(weight).fan_in));
    init::uniform_(bias, -bound, bound);
  }
}

template <size_t D>
void ConvNdImpl<D>::pretty_print(std::ostream& os) const {
  const auto& o = options;
  os << this->type_name() << "(" << o.in_channels() << ", " << o.out_channels() << ", kernel_size=" << o.kernel_size()
     << ", stride=" << o.stride();
  if (!o.padding().all_equal(0)) os << ", padding=" << o.padding();
  if (!o.dilation().all_equal(1)) os << ", dilation=" << o.dilation();
  if (o.groups() != 1) os << ", groups=" << o.groups();
  if (!o.bias()) os << ", bias=false";
  os << ")";
}

template class ConvNdImpl<1>;
template class ConvNdImpl<2>;

namespace {
// conv2d with this module's options; x [N, C, H, W].
Tensor run_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const std::array<int64_t, 2>& stride,
                  const std::array<int64_t, 2>& padding, const std::array<int64_t, 2>& dilation, int64_t groups) {
  Conv2dParams p;
  p.stride = stride;
  p.padding = padding;
  p.dilation = dilation;
  p.groups = groups;
  auto in = autocast_inputs({x, w, b}, OpClass::low_precision);
  return conv2d(in[0], in[1], in[2], p);
}
}  // namespace

Tensor Conv1dImpl::forward(const Tensor& x) {
  EMBER_CHECK(x.defined() && (x.dim() == 2 || x.dim() == 3), "Conv1d: expected a 3-D [N, C, L] or 2-D [C, L] input, "
              "got ", x.defined() ? x.shape_str() : std::string("undefined"));
  const bool batched = x.dim() == 3;
  Tensor x4 = (batched ? x : x.unsqueeze(0)).unsqueeze(2);  // [N, C, 1, L]
  const auto& o = options;
  Tensor y = run_conv2d(x4, weight.unsqueeze(2), bias, {1, o.stride()[0]}, {0, o.padding()[0]},
                        {1, o.dilation()[0]}, o.groups());
  y = y.squeeze(2);
  return batched ? y : y.squeeze(0);
}

Tensor Conv2dImpl::forward(const Tensor& x) {
  EMBER_CHECK(x.defined() && (x.dim() == 3 || x.dim() == 4), "Conv2d: expected a 4-D [N, C, H, W] or 3-D [C, H, W] "
              "input, got ", x.defined() ? x.shape_str() : std::string("undefined"));
  const bool batched = x.dim() == 4;
  const auto& o = options;
  Tensor y = run_conv2d(batched ? x : x.unsqueeze(0), weight, bias, o.stride().values(), o.padding().values(),
                        o.dilation().values(), o.groups());
  return batched ? y : y.squeeze(0);
}

}  // namespace ember::nn
