// Convolution layers, as torch.nn.Conv1d / Conv2d: options builders
// (`Conv2dOptions(3, 64, 3).stride(2).bias(false)`), PyTorch's default initialization and printing,
// on the conv2d op of ops/conv.h (Conv1d runs as a conv2d over a height-1 image, as PyTorch once
// did). Under autocast the input, weight and bias are cast to the low precision (nn/amp.h).
#pragma once
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

template <size_t D>
struct ConvOptions {
  ConvOptions(int64_t in_channels, int64_t out_channels, ExpandingArray<D> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  EMBER_ARG(int64_t, in_channels);
  EMBER_ARG(int64_t, out_channels);
  EMBER_ARG(ExpandingArray<D>, kernel_size);
  EMBER_ARG(ExpandingArray<D>, stride) = 1;
  EMBER_ARG(ExpandingArray<D>, padding) = 0;  // zeros on both sides of each spatial dim
  EMBER_ARG(ExpandingArray<D>, dilation) = 1;
  EMBER_ARG(int64_t, groups) = 1;
  EMBER_ARG(bool, bias) = true;
};
using Conv1dOptions = ConvOptions<1>;
using Conv2dOptions = ConvOptions<2>;

// Parameters: weight [out, in / groups, *kernel_size], bias [out] (when options.bias()), both
// ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in / groups * prod(kernel_size), as PyTorch's
// kaiming_uniform_(a = sqrt(5)) default.
template <size_t D>
class ConvNdImpl : public Module {
 public:
  ConvNdImpl(const char* name, const ConvOptions<D>& options);
  void reset_parameters();
  void pretty_print(std::ostream& os) const override;

  ConvOptions<D> options;
  Tensor weight, bias;
};

// x [N, C, L] (or unbatched [C, L]) -> [N, out, L'].
class Conv1dImpl : public ConvNdImpl<1> {
 public:
  explicit Conv1dImpl(const Conv1dOptions& options) : ConvNdImpl<1>("Conv1d", options) {}
  Conv1dImpl(int64_t in, int64_t out, ExpandingArray<1> kernel_size) : Conv1dImpl(Conv1dOptions(in, out, kernel_size)) {}
  Tensor forward(const Tensor& x);
};
EMBER_MODULE(Conv1d);

// x [N, C, H, W] (NCHW or channels_last; or unbatched [C, H, W]) -> [N, out, H', W'].
class Conv2dImpl : public ConvNdImpl<2> {
 public:
  explicit Conv2dImpl(const Conv2dOptions& options) : ConvNdImpl<2>("Conv2d", options) {}
  Conv2dImpl(int64_t in, int64_t out, ExpandingArray<2> kernel_size) : Conv2dImpl(Conv2dOptions(in, out, kernel_size)) {}
  Tensor forward(const Tensor& x);
};
EMBER_MODULE(Conv2d);

extern template class ConvNdImpl<1>;
extern template class ConvNdImpl<2>;

}  // namespace ember::nn
