// Conv1d, Conv2d, Conv3d and ConvTranspose1d / 2d / 3d (see conv.h).
#include "ember/nn/conv.h"

#include <cmath>
#include <ostream>

#include "ember/nn/amp.h"
#include "ember/nn/init.h"
#include "ember/ops/conv.h"
#include "ember/ops/conv_variants.h"

namespace ember::nn {

template <size_t D, typename Options>
ConvNdImpl<D, Options>::ConvNdImpl(const char* name, const Options& options_)
    : Module(name), options(options_) {
  const auto& o = options;
  EMBER_CHECK(o.in_channels() > 0 && o.out_channels() > 0, name,
              ": in_channels and out_channels must be positive, "
              "got ",
              o.in_channels(), " and ", o.out_channels());
  EMBER_CHECK(
      o.groups() > 0 && o.in_channels() % o.groups() == 0 && o.out_channels() % o.groups() == 0,
      name, ": in_channels (", o.in_channels(), ") and out_channels (", o.out_channels(),
      ") must both be divisible by groups (", o.groups(), ")");
  for (size_t i = 0; i < D; ++i)
    EMBER_CHECK(
        o.kernel_size()[i] > 0 && o.stride()[i] > 0 && o.dilation()[i] > 0 && o.padding()[i] >= 0,
        name, ": kernel_size ", o.kernel_size(), ", stride ", o.stride(), " and dilation ",
        o.dilation(), " must be positive and padding ", o.padding(), " non-negative");
  if constexpr (!kTransposed) {
    if (o.padding().mode() == ConvPaddingMode::same)
      for (size_t i = 0; i < D; ++i)
        EMBER_CHECK(o.stride()[i] == 1, name,
                    ": padding=\"same\" needs stride 1 (the output keeps "
                    "the input's size), got stride ",
                    o.stride(), "; give explicit padding sizes");
  }
  if constexpr (kTransposed) {
    for (size_t i = 0; i < D; ++i)
      EMBER_CHECK(o.output_padding()[i] >= 0 && (o.output_padding()[i] < o.stride()[i] ||
                                                 o.output_padding()[i] < o.dilation()[i]),
                  name, ": output_padding ", o.output_padding(), " must be smaller than stride ",
                  o.stride(), " or dilation ", o.dilation());
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
  os << this->type_name() << "(" << o.in_channels() << ", " << o.out_channels()
     << ", kernel_size=" << o.kernel_size() << ", stride=" << o.stride();
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
template class ConvNdImpl<1, ConvTranspose1dOptions>;
template class ConvNdImpl<3, ConvTranspose3dOptions>;

namespace {
// The shared part of every conv layer's forward: checks the rank of x for `spatial` spatial dims,
// adds a batch dim to an unbatched [C, ...] input, casts x, weight and bias under autocast, runs
// `conv` on them and drops the added batch dim again.
template <typename Layer, typename Conv>
Tensor run_conv_layer(const char* name, const Layer& layer, int64_t spatial, const Tensor& x,
                      Conv&& conv) {
  EMBER_CHECK(x.defined() && (x.dim() == spatial + 2 || x.dim() == spatial + 1), name,
              ": expected a ", spatial + 2, "-D [N, C, ...] or ", spatial + 1,
              "-D unbatched [C, ...] input, got ",
              x.defined() ? x.shape_str() : std::string("undefined"));
  const bool batched = x.dim() == spatial + 2;
  auto in = autocast_inputs({batched ? x : x.unsqueeze(0), layer.weight, layer.bias},
                            OpClass::low_precision);
  Tensor y = conv(in[0], in[1], in[2]);
  return batched ? y : y.squeeze(0);
}

// Conv2dParams / Conv3dParams (the same fields, per-axis arrays) from the layer's options.
template <typename Params, typename Options>
Params conv_params_from(const Options& o) {
  Params p;
  p.stride = o.stride().values();
  p.padding = o.padding().values();
  p.padding_mode = o.padding().mode();
  p.dilation = o.dilation().values();
  p.groups = o.groups();
  return p;
}
}  // namespace

Tensor Conv1dImpl::forward(const Tensor& x) {
  const auto& o = options;
  const Conv1dParams p{o.stride()[0], o.padding()[0], o.dilation()[0], o.groups(),
                       o.padding().mode()};
  return run_conv_layer(
      "Conv1d", *this, 1, x,
      [&](const Tensor& xb, const Tensor& w, const Tensor& b) { return conv1d(xb, w, b, p); });
}

Tensor Conv2dImpl::forward(const Tensor& x) {
  const auto p = conv_params_from<Conv2dParams>(options);
  return run_conv_layer(
      "Conv2d", *this, 2, x,
      [&](const Tensor& xb, const Tensor& w, const Tensor& b) { return conv2d(xb, w, b, p); });
}

Tensor Conv3dImpl::forward(const Tensor& x) {
  const auto p = conv_params_from<Conv3dParams>(options);
  return run_conv_layer(
      "Conv3d", *this, 3, x,
      [&](const Tensor& xb, const Tensor& w, const Tensor& b) { return conv3d(xb, w, b, p); });
}

Tensor ConvTranspose2dImpl::forward(const Tensor& x) {
  const auto& o = options;
  ConvTranspose2dParams p;
  p.stride = o.stride().values();
  p.padding = o.padding().values();
  p.output_padding = o.output_padding().values();
  p.dilation = o.dilation().values();
  p.groups = o.groups();
  return run_conv_layer("ConvTranspose2d", *this, 2, x,
                        [&](const Tensor& xb, const Tensor& w, const Tensor& b) {
                          return conv_transpose2d(xb, w, b, p);
                        });
}

Tensor ConvTranspose1dImpl::forward(const Tensor& x) {
  const auto& o = options;
  ConvTranspose1dParams p;
  p.stride = o.stride()[0];
  p.padding = o.padding()[0];
  p.output_padding = o.output_padding()[0];
  p.dilation = o.dilation()[0];
  p.groups = o.groups();
  return run_conv_layer("ConvTranspose1d", *this, 1, x,
                        [&](const Tensor& xb, const Tensor& w, const Tensor& b) {
                          return conv_transpose1d(xb, w, b, p);
                        });
}

Tensor ConvTranspose3dImpl::forward(const Tensor& x) {
  const auto& o = options;
  ConvTranspose3dParams p;
  p.stride = o.stride().values();
  p.padding = o.padding().values();
  p.output_padding = o.output_padding().values();
  p.dilation = o.dilation().values();
  p.groups = o.groups();
  return run_conv_layer("ConvTranspose3d", *this, 3, x,
                        [&](const Tensor& xb, const Tensor& w, const Tensor& b) {
                          return conv_transpose3d(xb, w, b, p);
                        });
}

}  // namespace ember::nn
