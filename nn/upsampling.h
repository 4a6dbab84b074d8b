// Resampling and rearranging layers, as torch.nn's Upsample, PixelShuffle, PixelUnshuffle, Fold
// and Unfold, with the options of their functionals (F::interpolate, F::fold, F::unfold), on the
// ops of ops/interpolate.h, ops/shape_more.h and ops/pooling_more.h. None holds parameters.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "ember/nn/module.h"
#include "ember/nn/options.h"

namespace ember::nn {

// ---- Upsample / interpolate --------------------------------------------------------------------

// torch.nn.Upsample's arguments (with their defaults): exactly one of size and scale_factor.
struct UpsampleOptions {
  // The output spatial sizes (one value for every spatial dim, or one per dim).
  EMBER_ARG(std::optional<std::vector<int64_t>>, size) = std::nullopt;
  // The multiplier of the spatial sizes (one value or one per dim); out = floor(in * scale).
  EMBER_ARG(std::optional<std::vector<double>>, scale_factor) = std::nullopt;
  // "nearest", "nearest-exact", "linear", "bilinear", "bicubic" or "trilinear" (see interpolate).
  EMBER_ARG(std::string, mode) = "nearest";
  // The interpolating modes only; unset means false.
  EMBER_ARG(std::optional<bool>, align_corners) = std::nullopt;
  // With scale_factor: true samples with in / out instead of the given factor.
  EMBER_ARG(std::optional<bool>, recompute_scale_factor) = std::nullopt;
};

// interpolate(x, ...) with the options, as torch.nn.Upsample.
class UpsampleImpl : public Module {
 public:
  // clone() builds a fresh UpsampleImpl from options.
  EMBER_CLONEABLE(UpsampleImpl);
  explicit UpsampleImpl(const UpsampleOptions& options = {})
      : Module("Upsample"), options(options) {}
  // x [N, C, *spatial] (1 to 3 spatial dims, as the mode allows) -> [N, C, *out].
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  UpsampleOptions options;  // the options it was built with
};
EMBER_MODULE(Upsample);

// ---- PixelShuffle / PixelUnshuffle -------------------------------------------------------------

// torch.nn.PixelShuffle's argument.
struct PixelShuffleOptions {
  /* implicit */ PixelShuffleOptions(int64_t upscale_factor)  // NOLINT
      : upscale_factor_(upscale_factor) {}
  EMBER_ARG(int64_t, upscale_factor);  // r: [*, C r^2, H, W] -> [*, C, H r, W r]
};
// torch.nn.PixelUnshuffle's argument.
struct PixelUnshuffleOptions {
  /* implicit */ PixelUnshuffleOptions(int64_t downscale_factor)  // NOLINT
      : downscale_factor_(downscale_factor) {}
  EMBER_ARG(int64_t, downscale_factor);  // r: [*, C, H r, W r] -> [*, C r^2, H, W]
};

// pixel_shuffle(x, upscale_factor), as torch.nn.PixelShuffle.
class PixelShuffleImpl : public Module {
 public:
  // clone() builds a fresh PixelShuffleImpl from options.
  EMBER_CLONEABLE(PixelShuffleImpl);
  explicit PixelShuffleImpl(const PixelShuffleOptions& options)
      : Module("PixelShuffle"), options(options) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  PixelShuffleOptions options;  // the options it was built with
};
EMBER_MODULE(PixelShuffle);

// pixel_unshuffle(x, downscale_factor), as torch.nn.PixelUnshuffle.
class PixelUnshuffleImpl : public Module {
 public:
  // clone() builds a fresh PixelUnshuffleImpl from options.
  EMBER_CLONEABLE(PixelUnshuffleImpl);
  explicit PixelUnshuffleImpl(const PixelUnshuffleOptions& options)
      : Module("PixelUnshuffle"), options(options) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  PixelUnshuffleOptions options;  // the options it was built with
};
EMBER_MODULE(PixelUnshuffle);

// ---- Fold / Unfold -----------------------------------------------------------------------------

// torch.nn.Fold's arguments (with their defaults).
struct FoldOptions {
  FoldOptions(ExpandingArray<2> output_size, ExpandingArray<2> kernel_size)
      : output_size_(output_size), kernel_size_(kernel_size) {}
  EMBER_ARG(ExpandingArray<2>, output_size);  // (H, W) of the folded output
  EMBER_ARG(ExpandingArray<2>, kernel_size);  // the sliding window
  EMBER_ARG(ExpandingArray<2>, dilation) = 1;
  EMBER_ARG(ExpandingArray<2>, padding) = 0;  // implicit zero padding on both sides
  EMBER_ARG(ExpandingArray<2>, stride) = 1;
};
// torch.nn.Unfold's arguments (with their defaults).
struct UnfoldOptions {
  /* implicit */ UnfoldOptions(ExpandingArray<2> kernel_size)  // NOLINT
      : kernel_size_(kernel_size) {}
  EMBER_ARG(ExpandingArray<2>, kernel_size);  // the sliding window
  EMBER_ARG(ExpandingArray<2>, dilation) = 1;
  EMBER_ARG(ExpandingArray<2>, padding) = 0;  // implicit zero padding on both sides
  EMBER_ARG(ExpandingArray<2>, stride) = 1;
};

// fold (col2im) with the options, as torch.nn.Fold: [N, C kH kW, L] -> [N, C, H, W].
class FoldImpl : public Module {
 public:
  // clone() builds a fresh FoldImpl from options.
  EMBER_CLONEABLE(FoldImpl);
  explicit FoldImpl(const FoldOptions& options) : Module("Fold"), options(options) {}
  FoldImpl(ExpandingArray<2> output_size, ExpandingArray<2> kernel_size)
      : FoldImpl(FoldOptions(output_size, kernel_size)) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  FoldOptions options;  // the options it was built with
};
EMBER_MODULE(Fold);

// unfold (im2col) with the options, as torch.nn.Unfold: [N, C, H, W] -> [N, C kH kW, L].
class UnfoldImpl : public Module {
 public:
  // clone() builds a fresh UnfoldImpl from options.
  EMBER_CLONEABLE(UnfoldImpl);
  explicit UnfoldImpl(const UnfoldOptions& options) : Module("Unfold"), options(options) {}
  explicit UnfoldImpl(ExpandingArray<2> kernel_size) : UnfoldImpl(UnfoldOptions(kernel_size)) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  UnfoldOptions options;  // the options it was built with
};
EMBER_MODULE(Unfold);

namespace functional {
// F::interpolate's arguments: Upsample's, and mode "area" too.
using InterpolateFuncOptions = UpsampleOptions;
using FoldFuncOptions = FoldOptions;
using UnfoldFuncOptions = UnfoldOptions;
// F::interpolate, F::fold and F::unfold with libtorch's options objects (the positional forms
// are ember::interpolate, ember::fold and ember::unfold).
Tensor interpolate(const Tensor& x, const InterpolateFuncOptions& options = {});
Tensor fold(const Tensor& x, const FoldFuncOptions& options);
Tensor unfold(const Tensor& x, const UnfoldFuncOptions& options);
}  // namespace functional

}  // namespace ember::nn
