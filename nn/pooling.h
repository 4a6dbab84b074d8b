// Pooling layers, as torch.nn.MaxPool2d / AvgPool2d / AdaptiveAvgPool2d, on the ops of
// ops/pooling.h. Inputs [N, C, H, W] (NCHW or channels_last) or unbatched [C, H, W]; they run in
// the dtype they are given (autocast leaves them alone).
#pragma once
#include "ember/nn/module.h"
#include "ember/nn/options.h"

namespace ember::nn {

// The options of MaxPool2d, as torch.nn.MaxPool2d's arguments (with their defaults).
struct MaxPool2dOptions {
  // Implicit from the window size, so `MaxPool2d(2)` works; stride defaults to it.
  /* implicit */ MaxPool2dOptions(ExpandingArray<2> kernel_size)  // NOLINT
      : kernel_size_(kernel_size), stride_(kernel_size) {}
  EMBER_ARG(ExpandingArray<2>, kernel_size);  // the window (kH, kW)
  EMBER_ARG(ExpandingArray<2>, stride);       // defaults to kernel_size
  // Implicit -inf padding on both sides; at most half the window.
  EMBER_ARG(ExpandingArray<2>, padding) = 0;
  EMBER_ARG(ExpandingArray<2>, dilation) = 1;  // spacing between window elements
  // Round the output size up instead of down (windows starting in the right padding are dropped).
  EMBER_ARG(bool, ceil_mode) = false;
};
// The maximum over each window, as torch.nn.MaxPool2d.
class MaxPool2dImpl : public Module {
 public:
  // clone() builds a fresh MaxPool2dImpl from options.
  EMBER_CLONEABLE(MaxPool2dImpl);
  // From options, or from kernel_size alone (stride = kernel_size, as PyTorch).
  explicit MaxPool2dImpl(const MaxPool2dOptions& options) : Module("MaxPool2d"), options(options) {}
  explicit MaxPool2dImpl(ExpandingArray<2> kernel_size)
      : MaxPool2dImpl(MaxPool2dOptions(kernel_size)) {}
  // x [N, C, H, W] (or [C, H, W]) -> [N, C, H_out, W_out], H_out =
  // floor_or_ceil((H + 2 * padding - dilation * (kernel_size - 1) - 1) / stride) + 1 (W alike).
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  MaxPool2dOptions options;  // the options it was built with
};
EMBER_MODULE(MaxPool2d);

// The options of AvgPool2d, as torch.nn.AvgPool2d's arguments (with their defaults).
struct AvgPool2dOptions {
  // Implicit from the window size, so `AvgPool2d(2)` works; stride defaults to it.
  /* implicit */ AvgPool2dOptions(ExpandingArray<2> kernel_size)  // NOLINT
      : kernel_size_(kernel_size), stride_(kernel_size) {}
  EMBER_ARG(ExpandingArray<2>, kernel_size);  // the window (kH, kW)
  EMBER_ARG(ExpandingArray<2>, stride);       // defaults to kernel_size
  // Zero padding on both sides; at most half the window.
  EMBER_ARG(ExpandingArray<2>, padding) = 0;
  EMBER_ARG(bool, ceil_mode) = false;  // round the output size up instead of down
  // Whether the zero padding counts in the divisor of each average.
  EMBER_ARG(bool, count_include_pad) = true;
};
// The mean over each window, as torch.nn.AvgPool2d.
class AvgPool2dImpl : public Module {
 public:
  // clone() builds a fresh AvgPool2dImpl from options.
  EMBER_CLONEABLE(AvgPool2dImpl);
  // From options, or from kernel_size alone (stride = kernel_size, as PyTorch).
  explicit AvgPool2dImpl(const AvgPool2dOptions& options) : Module("AvgPool2d"), options(options) {}
  explicit AvgPool2dImpl(ExpandingArray<2> kernel_size)
      : AvgPool2dImpl(AvgPool2dOptions(kernel_size)) {}
  // x [N, C, H, W] (or [C, H, W]) -> [N, C, H_out, W_out], H_out =
  // floor_or_ceil((H + 2 * padding - kernel_size) / stride) + 1 (W alike).
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  AvgPool2dOptions options;  // the options it was built with
};
EMBER_MODULE(AvgPool2d);

// The options of AdaptiveAvgPool2d: the output size, as torch.nn.AdaptiveAvgPool2d's argument.
struct AdaptiveAvgPool2dOptions {
  // Implicit from the output size, so `AdaptiveAvgPool2d(1)` works.
  /* implicit */ AdaptiveAvgPool2dOptions(ExpandingArray<2> output_size)
      : output_size_(output_size) {}          // NOLINT
  EMBER_ARG(ExpandingArray<2>, output_size);  // (H_out, W_out), each > 0
};
// Output size 1x1 is global average pooling (ResNet's head).
class AdaptiveAvgPool2dImpl : public Module {
 public:
  // clone() builds a fresh AdaptiveAvgPool2dImpl from options.
  EMBER_CLONEABLE(AdaptiveAvgPool2dImpl);
  // From options or from the output size.
  explicit AdaptiveAvgPool2dImpl(const AdaptiveAvgPool2dOptions& options)
      : Module("AdaptiveAvgPool2d"), options(options) {}
  explicit AdaptiveAvgPool2dImpl(ExpandingArray<2> output_size)
      : AdaptiveAvgPool2dImpl(AdaptiveAvgPool2dOptions(output_size)) {}
  // x [N, C, H, W] (or [C, H, W]) -> [N, C, *output_size]: output cell i averages rows
  // floor(i * H / H_out) .. ceil((i + 1) * H / H_out) - 1 (columns alike), as PyTorch.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  AdaptiveAvgPool2dOptions options;  // the options it was built with
};
EMBER_MODULE(AdaptiveAvgPool2d);

}  // namespace ember::nn
