// Conv1d, Conv2d, Conv3d and ConvTranspose2d (see conv.h).
#include "nn/conv.h"

#include <cmath>
#include <ostream>

#include "nn/amp.h"
#include "nn/init.h"
#include "ops/conv.h"
#include "ops/conv_variants.h"

namespace ember::nn {

template <size_t D, typename Options>
ConvNdImpl<D, Options>::ConvNdImpl(const char* name, const Options& options_) : Module(name), options(options_) {
  const auto& o = options;
  EMBER_CHECK(o.in_channels() > 0 && o.out_channels() > 0, name, ": in_channels and out_channels must be positive, "
              "got ", o.in_channels(), " and ", o.out_channels());
  EMBER_CHECK(o.groups() > 0 && o.in_channels() % o.groups() == 0 && o.out_channels() % o.groups() == 0, name,
              ": in_channels (", o.in_channels(), ") and out_channels (", o.out_channels(),
              ") must both be divisible by groups (", o.groups(), ")");
  for (size_t i = 0; i < D; ++i)
    EMBER_CHECK(o.kernel_size()[i] > 0 && o.stride()[i] > 0 && o.dilation()[i] > 0 && o.padding()[i] >= 0, name,
                ": kernel_size ", o.kernel_size(), ", stride ", o.stride(), " and dilation ", o.dilation(),
                " must be positive and padding ", o.padding(), " non-negative");
  if constexpr (!kTransposed) {
    if (o.padding().mode() == ConvPaddingMode::same)
      for (size_t i = 0; i < D; ++i)
        EMBER_CHECK(o.stride()[i] == 1, name, ": padding=\"same\" needs stride 1 (the output keeps "
                    "the input's size), got stride ", o.stride(), "; give explicit padding sizes");
  }
  if constexpr (kTransposed) {
    for (size_t i = 0; i < D; ++i)
      EMBER_CHECK(o.output_padding()[i] >= 0 && (o.output_padding()[i] < o.stride()[i] ||
                                                 o.output_padding()[i] < o.dilation()[i]),
                  name, ": output_padding ", o.output_padding(), " must be smaller than stride ", o.stride(),
                  " or dilation ", o.dilation());
  }
  Shape wshape = kTransposed ? Shape{o.in_channels(), o.out_channels() / o.groups()}
                             : Shape{o.out_channels(), o.in_channels() / o.groups()};
  for (size_t i = 0; i < D; ++i) wshape.push_back(o.kernel_size()[i]);
  weight = this->register_parameter("weight", empty(wshape));
  if (o.bias()) bias = this->register_parameter("bias", empty({o.out_channels()}));
  reset_parameters();
}

template <size_t D, typename Options>
void ConvNdImpl<D, Options>::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(double(init::calculate_fans(weight).fan_in));
    init::uniform_(bias, -bound, bound);
  }
}

template <size_t D, typename Options>
void ConvNdImpl<D, Options>::pretty_print(std::ostream& os) const {
  const auto& o = options;
  os << this->type_name() << "(" << o.in_channels() << ", " << o.out_channels() << ", kernel_size=" << o.kernel_size()
     << ", stride=" << o.stride();
  if (!o.padding().all_equal(0)) os << ", padding=" << o.padding();
  if (!o.dilation().all_equal(1)) os << ", dilation=" << o.dilation();
  if constexpr (kTransposed) {
    if (!o.output_padding().all_equal(0)) os << ", output_padding=" << o.output_padding();
  }
  if (o.groups() != 1) os << ", groups=" << o.groups();
  if (!o.bias()) os << ", bias=false";
  os << ")";
}

template class ConvNdImpl<1, Conv1dOptions>;
template class ConvNdImpl<2, Conv2dOptions>;
template class ConvNdImpl<3, Conv3dOptions>;
template class ConvNdImpl<2, ConvTranspose2dOptions>;

namespace {
// Checks the rank of x for a layer taking `spatial` spatial dims and returns x with a batch dim.
Tensor batched_input(const char* layer, const Tensor& x, int64_t spatial, bool* was_batched) {
  EMBER_CHECK(x.defined() && (x.dim() == spatial + 2 || x.dim() == spatial + 1), layer, ": expected a ",
              spatial + 2, "-D [N, C, ...] or ", spatial + 1, "-D unbatched [C, ...] input, got ",
              x.defined() ? x.shape_str() : std::string("undefined"));
  *was_batched = x.dim() == spatial + 2;
  return *was_batched ? x : x.unsqueeze(0);
}
}  // namespace

Tensor Conv1dImpl::forward(const Tensor& x) {
  bool batched = true;
  Tensor xb = batched_input("Conv1d", x, 1, &batched);
  const auto& o = options;
  auto in = autocast_inputs({xb, weight, bias}, OpClass::low_precision);
  Tensor y = conv1d(in[0], in[1], in[2],
                    Conv1dParams{o.stride()[0], o.padding()[0], o.dilation()[0], o.groups(), o.padding().mode()});
  return batched ? y : y.squeeze(0);
}

Tensor Conv2dImpl::forward(const Tensor& x) {
  bool batched = true;
  Tensor xb = batched_input("Conv2d", x, 2, &batched);
  const auto& o = options;
  Conv2dParams p;
  p.stride = o.stride().values();
  p.padding = o.padding().values();
  p.padding_mode = o.padding().mode();
  p.dilation = o.dilation().values();
  p.groups = o.groups();
  auto in = autocast_inputs({xb, weight, bias}, OpClass::low_precision);
  Tensor y = conv2d(in[0], in[1], in[2], p);
  return batched ? y : y.squeeze(0);
}

Tensor Conv3dImpl::forward(const Tensor& x) {
  bool batched = true;
  Tensor xb = batched_input("Conv3d", x, 3, &batched);
  const auto& o = options;
  Conv3dParams p;
  p.stride = o.stride().values();
  p.padding = o.padding().values();
  p.padding_mode = o.padding().mode();
  p.dilation = o.dilation().values();
  p.groups = o.groups();
  auto in = autocast_inputs({xb, weight, bias}, OpClass::low_precision);
  Tensor y = conv3d(in[0], in[1], in[2], p);
  return batched ? y : y.squeeze(0);
}

Tensor ConvTranspose2dImpl::forward(const Tensor& x) {
  bool batched = true;
  Tensor xb = batched_input("ConvTranspose2d", x, 2, &batched);
  const auto& o = options;
  ConvTranspose2dParams p;
  p.stride = o.stride().values();
  p.padding = o.padding().values();
  p.output_padding = o.output_padding().values();
  p.dilation = o.dilation().values();
  p.groups = o.groups();
  auto in = autocast_inputs({xb, weight, bias}, OpClass::low_precision);
  Tensor y = conv_transpose2d(in[0], in[1], in[2], p);
  return batched ? y : y.squeeze(0);
}

}  // namespace ember::nn
