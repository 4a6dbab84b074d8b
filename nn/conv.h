// Convolution layers, as torch.nn.Conv1d / Conv2d / Conv3d / ConvTranspose1d / 2d / 3d: options
// builders
// (`Conv2dOptions(3, 64, 3).stride(2).bias(false)`), PyTorch's default initialization and printing,
// on the ops of ops/conv.h and ops/conv_variants.h. Under autocast the input, weight and bias are
// cast to the low precision (nn/amp.h). Padding is zeros: sizes, or "same" / "valid" as in PyTorch.
#pragma once
#include <array>
#include <initializer_list>
#include <ostream>
#include <string_view>
#include <vector>

#include "ember/nn/module.h"
#include "ember/nn/options.h"
#include "ember/ops/conv.h"

namespace ember::nn {

// A convolution layer's padding, as PyTorch's `padding` argument: sizes (one for every spatial
// dim, or one per dim) or a mode: `Conv2dOptions(3, 8, 5).padding("same")`, `.padding("valid")`
// or `.padding(ConvPaddingMode::same)`. 'same' needs stride 1 (the layer checks at construction).
template <size_t D>
class ConvPadding {
 public:
  // Implicit, so an option takes any of: one size for every spatial dim, D sizes (a list, vector,
  // array or ExpandingArray), a ConvPaddingMode, or the name "same" / "valid" (other names throw).
  ConvPadding(int64_t value) : sizes_(value) {}  // NOLINT
  ConvPadding(std::initializer_list<int64_t> list) : sizes_(list) {}
  ConvPadding(const std::vector<int64_t>& list) : sizes_(list) {}        // NOLINT
  ConvPadding(const std::array<int64_t, D>& values) : sizes_(values) {}  // NOLINT
  ConvPadding(const ExpandingArray<D>& sizes) : sizes_(sizes) {}         // NOLINT
  ConvPadding(ConvPaddingMode mode) : sizes_(0), mode_(mode) {}          // NOLINT
  template <size_t N>
  ConvPadding(const char (&mode)[N]) : ConvPadding(mode_from_name(mode)) {}  // NOLINT

  // explicit_sizes, or the 'same' / 'valid' mode it was given.
  ConvPaddingMode mode() const { return mode_; }
  // The explicit sizes (zeros for 'valid' and 'same', whose sizes the op derives).
  int64_t operator[](size_t i) const { return sizes_[i]; }
  const std::array<int64_t, D>& values() const { return sizes_.values(); }
  bool all_equal(int64_t v) const {
    return mode_ == ConvPaddingMode::explicit_sizes && sizes_.all_equal(v);
  }
  bool operator==(const ConvPadding& o) const { return mode_ == o.mode_ && sizes_ == o.sizes_; }

 private:
  static ConvPaddingMode mode_from_name(std::string_view name) {
    if (name == "same") return ConvPaddingMode::same;
    EMBER_CHECK(name == "valid", "convolution padding must be \"same\", \"valid\" or sizes, got \"",
                name, "\"");
    return ConvPaddingMode::valid;
  }

  ExpandingArray<D> sizes_;
  ConvPaddingMode mode_ = ConvPaddingMode::explicit_sizes;
};

// "[1, 1]" for sizes, "same" / "valid" for a mode (as PyTorch prints padding=same).
template <size_t D>
std::ostream& operator<<(std::ostream& os, const ConvPadding<D>& p) {
  if (p.mode() != ConvPaddingMode::explicit_sizes) return os << conv_padding_mode_name(p.mode());
  return os << ExpandingArray<D>(p.values());
}

// The options of a D-dimensional convolution (Conv1d/2d/3d), as torch.nn.ConvNd's arguments.
// Sizes given as one number apply to every spatial dim.
template <size_t D>
struct ConvOptions {
  // The required arguments; the others default as PyTorch's.
  ConvOptions(int64_t in_channels, int64_t out_channels, ExpandingArray<D> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  EMBER_ARG(int64_t, in_channels);             // C of the input
  EMBER_ARG(int64_t, out_channels);            // channels of the output (number of filters)
  EMBER_ARG(ExpandingArray<D>, kernel_size);   // the filter's spatial size
  EMBER_ARG(ExpandingArray<D>, stride) = 1;    // step between filter positions, >= 1
  EMBER_ARG(ConvPadding<D>, padding) = 0;      // zeros on both sides of each spatial dim, or a mode
  EMBER_ARG(ExpandingArray<D>, dilation) = 1;  // spacing between filter taps, >= 1
  // in_channels and out_channels must both divide by groups; each group of in_channels / groups
  // input channels makes out_channels / groups outputs (groups = in_channels: depthwise).
  EMBER_ARG(int64_t, groups) = 1;
  EMBER_ARG(bool, bias) = true;  // whether to learn a bias per output channel
};
// The options of Conv1d, Conv2d and Conv3d.
using Conv1dOptions = ConvOptions<1>;
using Conv2dOptions = ConvOptions<2>;
using Conv3dOptions = ConvOptions<3>;

// The options of a D-dimensional transposed convolution, as torch.nn.ConvTransposeNd's arguments.
template <size_t D>
struct ConvTransposeOptions {
  // The required arguments; the others default as PyTorch's.
  ConvTransposeOptions(int64_t in_channels, int64_t out_channels, ExpandingArray<D> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  EMBER_ARG(int64_t, in_channels);                   // C of the input
  EMBER_ARG(int64_t, out_channels);                  // channels of the output
  EMBER_ARG(ExpandingArray<D>, kernel_size);         // the filter's spatial size
  EMBER_ARG(ExpandingArray<D>, stride) = 1;          // upsampling factor of each spatial dim, >= 1
  EMBER_ARG(ExpandingArray<D>, padding) = 0;         // removed from both sides of the output
  EMBER_ARG(ExpandingArray<D>, output_padding) = 0;  // added on one side; less than stride
  EMBER_ARG(ExpandingArray<D>, dilation) = 1;        // spacing between filter taps, >= 1
  EMBER_ARG(int64_t, groups) = 1;                    // blocked connections, as ConvOptions::groups
  EMBER_ARG(bool, bias) = true;                      // whether to learn a bias per output channel
};
// The options of ConvTranspose1d, ConvTranspose2d and ConvTranspose3d.
using ConvTranspose1dOptions = ConvTransposeOptions<1>;
using ConvTranspose2dOptions = ConvTransposeOptions<2>;
using ConvTranspose3dOptions = ConvTransposeOptions<3>;

// What Conv{1,2,3}d and ConvTranspose2d share: parameters weight [out, in / groups, *kernel_size]
// (transposed: [in, out / groups, *kernel_size]) and bias [out] (when options.bias()), both
// ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = weight.size(1) * prod(kernel_size), as
// PyTorch's kaiming_uniform_(a = sqrt(5)) default; and the printing.
template <size_t D, typename Options>
class ConvNdImpl : public Module {
 public:
  // Whether this is a transposed convolution (its options have output_padding).
  static constexpr bool kTransposed = requires(const Options& o) { o.output_padding(); };
  // Checks the options (positive sizes, channels divisible by groups, 'same' only with stride 1),
  // registers weight and bias and initializes them by reset_parameters(); name is the type name.
  ConvNdImpl(const char* name, const Options& options);
  // Re-initializes as PyTorch: weight by kaiming_uniform_ with a = sqrt(5), bias ~
  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  void reset_parameters();
  // Prints as PyTorch, e.g. "Conv2d(3, 64, kernel_size=[3, 3], stride=[2, 2], bias=false)".
  void pretty_print(std::ostream& os) const override;

  Options options;  // the options it was built with
  // weight [out, in / groups, *kernel_size] (transposed: [in, out / groups, *kernel_size]); bias
  // [out], or undefined without options.bias().
  Tensor weight, bias;  // bias: [out], undefined without options.bias()
};

// x [N, C, L] (or unbatched [C, L]) -> [N, out, L'].
class Conv1dImpl : public ConvNdImpl<1, Conv1dOptions> {
 public:
  // clone() builds a fresh Conv1dImpl from options, then copies the parameters.
  EMBER_CLONEABLE(Conv1dImpl);
  // From options, or from (in_channels, out_channels, kernel_size) with PyTorch's other defaults:
  // stride 1, padding 0, dilation 1, groups 1, bias.
  explicit Conv1dImpl(const Conv1dOptions& options) : ConvNdImpl("Conv1d", options) {}
  Conv1dImpl(int64_t in, int64_t out, ExpandingArray<1> kernel_size)
      : Conv1dImpl(Conv1dOptions(in, out, kernel_size)) {}
  // x [N, in_channels, L] -> [N, out_channels, L_out] (unbatched: without N), with
  // L_out = floor((L + 2 * padding - dilation * (kernel_size - 1) - 1) / stride) + 1.
  Tensor forward(const Tensor& x);
};
EMBER_MODULE(Conv1d);

// x [N, C, H, W] (NCHW or channels_last; or unbatched [C, H, W]) -> [N, out, H', W'].
class Conv2dImpl : public ConvNdImpl<2, Conv2dOptions> {
 public:
  // clone() builds a fresh Conv2dImpl from options, then copies the parameters.
  EMBER_CLONEABLE(Conv2dImpl);
  // From options, or from (in_channels, out_channels, kernel_size) with PyTorch's other defaults:
  // stride 1, padding 0, dilation 1, groups 1, bias.
  explicit Conv2dImpl(const Conv2dOptions& options) : ConvNdImpl("Conv2d", options) {}
  Conv2dImpl(int64_t in, int64_t out, ExpandingArray<2> kernel_size)
      : Conv2dImpl(Conv2dOptions(in, out, kernel_size)) {}
  // x [N, in_channels, H, W] -> [N, out_channels, H_out, W_out] (unbatched: without N),
  // each out = floor((in + 2 * padding - dilation * (kernel_size - 1) - 1) / stride) + 1.
  Tensor forward(const Tensor& x);
};
EMBER_MODULE(Conv2d);

// x [N, C, D, H, W] (or unbatched [C, D, H, W]) -> [N, out, D', H', W'].
class Conv3dImpl : public ConvNdImpl<3, Conv3dOptions> {
 public:
  // clone() builds a fresh Conv3dImpl from options, then copies the parameters.
  EMBER_CLONEABLE(Conv3dImpl);
  // From options, or from (in_channels, out_channels, kernel_size) with PyTorch's other defaults:
  // stride 1, padding 0, dilation 1, groups 1, bias.
  explicit Conv3dImpl(const Conv3dOptions& options) : ConvNdImpl("Conv3d", options) {}
  Conv3dImpl(int64_t in, int64_t out, ExpandingArray<3> kernel_size)
      : Conv3dImpl(Conv3dOptions(in, out, kernel_size)) {}
  // x [N, in_channels, D, H, W] -> [N, out_channels, D_out, H_out, W_out] (unbatched:
  // without N), each out = floor((in + 2 * padding - dilation * (kernel_size - 1) - 1) / stride)
  // + 1.
  Tensor forward(const Tensor& x);
};
EMBER_MODULE(Conv3d);

// x [N, in, H, W] (or unbatched [in, H, W]) -> [N, out, H', W'] with
// H' = (H - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1.
class ConvTranspose2dImpl : public ConvNdImpl<2, ConvTranspose2dOptions> {
 public:
  // clone() builds a fresh ConvTranspose2dImpl from options, then copies the parameters.
  EMBER_CLONEABLE(ConvTranspose2dImpl);
  // From options, or from (in_channels, out_channels, kernel_size) with PyTorch's other defaults:
  // stride 1, padding 0, output_padding 0, dilation 1, groups 1, bias.
  explicit ConvTranspose2dImpl(const ConvTranspose2dOptions& options)
      : ConvNdImpl("ConvTranspose2d", options) {}
  ConvTranspose2dImpl(int64_t in, int64_t out, ExpandingArray<2> kernel_size)
      : ConvTranspose2dImpl(ConvTranspose2dOptions(in, out, kernel_size)) {}
  // x [N, in_channels, H, W] -> [N, out_channels, H_out, W_out], sizes as the class comment says.
  Tensor forward(const Tensor& x);
};
EMBER_MODULE(ConvTranspose2d);

// x [N, in, L] (or unbatched [in, L]) -> [N, out, L'] with
// L' = (L - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1.
class ConvTranspose1dImpl : public ConvNdImpl<1, ConvTranspose1dOptions> {
 public:
  // clone() builds a fresh ConvTranspose1dImpl from options, then copies the parameters.
  EMBER_CLONEABLE(ConvTranspose1dImpl);
  // From options, or from (in_channels, out_channels, kernel_size) with PyTorch's other defaults.
  explicit ConvTranspose1dImpl(const ConvTranspose1dOptions& options)
      : ConvNdImpl("ConvTranspose1d", options) {}
  ConvTranspose1dImpl(int64_t in, int64_t out, ExpandingArray<1> kernel_size)
      : ConvTranspose1dImpl(ConvTranspose1dOptions(in, out, kernel_size)) {}
  // x [N, in_channels, L] -> [N, out_channels, L_out], sizes as the class comment says.
  Tensor forward(const Tensor& x);
};
EMBER_MODULE(ConvTranspose1d);

// x [N, in, D, H, W] (or unbatched [in, D, H, W]) -> [N, out, D', H', W'], each size as
// ConvTranspose2d's along its axis.
class ConvTranspose3dImpl : public ConvNdImpl<3, ConvTranspose3dOptions> {
 public:
  // clone() builds a fresh ConvTranspose3dImpl from options, then copies the parameters.
  EMBER_CLONEABLE(ConvTranspose3dImpl);
  // From options, or from (in_channels, out_channels, kernel_size) with PyTorch's other defaults.
  explicit ConvTranspose3dImpl(const ConvTranspose3dOptions& options)
      : ConvNdImpl("ConvTranspose3d", options) {}
  ConvTranspose3dImpl(int64_t in, int64_t out, ExpandingArray<3> kernel_size)
      : ConvTranspose3dImpl(ConvTranspose3dOptions(in, out, kernel_size)) {}
  // x [N, in_channels, D, H, W] -> [N, out_channels, D_out, H_out, W_out].
  Tensor forward(const Tensor& x);
};
EMBER_MODULE(ConvTranspose3d);

extern template class ConvNdImpl<1, Conv1dOptions>;
extern template class ConvNdImpl<2, Conv2dOptions>;
extern template class ConvNdImpl<3, Conv3dOptions>;
extern template class ConvNdImpl<2, ConvTranspose2dOptions>;
extern template class ConvNdImpl<1, ConvTranspose1dOptions>;
extern template class ConvNdImpl<3, ConvTranspose3dOptions>;

}  // namespace ember::nn
