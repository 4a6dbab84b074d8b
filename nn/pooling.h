// Pooling layers, as torch.nn.MaxPool2d / AvgPool2d / AdaptiveAvgPool2d, on the ops of
// ops/pooling.h. Inputs [N, C, H, W] (NCHW or channels_last) or unbatched [C, H, W]; they run in
// the dtype they are given (autocast leaves them alone).
#pragma once
#include "ember/nn/module.h"
#include "ember/nn/options.h"

namespace ember::nn {

struct MaxPool2dOptions {
  /* implicit */ MaxPool2dOptions(ExpandingArray<2> kernel_size)  // NOLINT
      : kernel_size_(kernel_size), stride_(kernel_size) {}
  EMBER_ARG(ExpandingArray<2>, kernel_size);
  EMBER_ARG(ExpandingArray<2>, stride);  // defaults to kernel_size
  EMBER_ARG(ExpandingArray<2>, padding) = 0;
  EMBER_ARG(ExpandingArray<2>, dilation) = 1;
  EMBER_ARG(bool, ceil_mode) = false;
};
class MaxPool2dImpl : public Module {
 public:
  EMBER_CLONEABLE(MaxPool2dImpl);
  explicit MaxPool2dImpl(const MaxPool2dOptions& options) : Module("MaxPool2d"), options(options) {}
  explicit MaxPool2dImpl(ExpandingArray<2> kernel_size)
      : MaxPool2dImpl(MaxPool2dOptions(kernel_size)) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  MaxPool2dOptions options;
};
EMBER_MODULE(MaxPool2d);

struct AvgPool2dOptions {
  /* implicit */ AvgPool2dOptions(ExpandingArray<2> kernel_size)  // NOLINT
      : kernel_size_(kernel_size), stride_(kernel_size) {}
  EMBER_ARG(ExpandingArray<2>, kernel_size);
  EMBER_ARG(ExpandingArray<2>, stride);  // defaults to kernel_size
  EMBER_ARG(ExpandingArray<2>, padding) = 0;
  EMBER_ARG(bool, ceil_mode) = false;
  EMBER_ARG(bool, count_include_pad) = true;
};
class AvgPool2dImpl : public Module {
 public:
  EMBER_CLONEABLE(AvgPool2dImpl);
  explicit AvgPool2dImpl(const AvgPool2dOptions& options) : Module("AvgPool2d"), options(options) {}
  explicit AvgPool2dImpl(ExpandingArray<2> kernel_size)
      : AvgPool2dImpl(AvgPool2dOptions(kernel_size)) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  AvgPool2dOptions options;
};
EMBER_MODULE(AvgPool2d);

struct AdaptiveAvgPool2dOptions {
  /* implicit */ AdaptiveAvgPool2dOptions(ExpandingArray<2> output_size)
      : output_size_(output_size) {}  // NOLINT
  EMBER_ARG(ExpandingArray<2>, output_size);
};
// Output size 1x1 is global average pooling (ResNet's head).
class AdaptiveAvgPool2dImpl : public Module {
 public:
  EMBER_CLONEABLE(AdaptiveAvgPool2dImpl);
  explicit AdaptiveAvgPool2dImpl(const AdaptiveAvgPool2dOptions& options)
      : Module("AdaptiveAvgPool2d"), options(options) {}
  explicit AdaptiveAvgPool2dImpl(ExpandingArray<2> output_size)
      : AdaptiveAvgPool2dImpl(AdaptiveAvgPool2dOptions(output_size)) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  AdaptiveAvgPool2dOptions options;
};
EMBER_MODULE(AdaptiveAvgPool2d);

}  // namespace ember::nn
