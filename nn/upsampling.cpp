// Upsample, PixelShuffle, PixelUnshuffle, Fold and Unfold, and the options forms of
// F::interpolate / F::fold / F::unfold (see upsampling.h).
#include "ember/nn/upsampling.h"

#include <ostream>

#include "ember/ops/interpolate.h"
#include "ember/ops/pooling_more.h"
#include "ember/ops/shape_more.h"

namespace ember::nn {

namespace functional {

Tensor interpolate(const Tensor& x, const InterpolateFuncOptions& o) {
  return ::ember::interpolate(x, o.size(), o.scale_factor(), o.mode(), o.align_corners(),
                              o.recompute_scale_factor());
}

Tensor fold(const Tensor& x, const FoldFuncOptions& o) {
  return ::ember::fold(x, o.output_size().vec(), o.kernel_size().vec(), o.dilation().vec(),
                       o.padding().vec(), o.stride().vec());
}

Tensor unfold(const Tensor& x, const UnfoldFuncOptions& o) {
  return ::ember::unfold(x, o.kernel_size().vec(), o.dilation().vec(), o.padding().vec(),
                         o.stride().vec());
}

}  // namespace functional

Tensor UpsampleImpl::forward(const Tensor& x) {
  EMBER_CHECK(options.mode() != "area",
              "Upsample: mode \"area\" is interpolate's only; use "
              "nearest, nearest-exact, linear, bilinear, bicubic or "
              "trilinear");
  return functional::interpolate(x, options);
}

void UpsampleImpl::pretty_print(std::ostream& os) const {
  os << "Upsample(";
  if (options.size()) os << "size=" << shape_str(*options.size());
  if (options.scale_factor()) {
    os << "scale_factor=[";
    const auto& s = *options.scale_factor();
    for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << detail::float_str(s[i]);
    os << "]";
  }
  os << ", mode=" << options.mode();
  if (options.align_corners())
    os << ", align_corners=" << detail::bool_str(*options.align_corners());
  os << ")";
}

Tensor PixelShuffleImpl::forward(const Tensor& x) {
  return pixel_shuffle(x, options.upscale_factor());
}

void PixelShuffleImpl::pretty_print(std::ostream& os) const {
  os << "PixelShuffle(upscale_factor=" << options.upscale_factor() << ")";
}

Tensor PixelUnshuffleImpl::forward(const Tensor& x) {
  return pixel_unshuffle(x, options.downscale_factor());
}

void PixelUnshuffleImpl::pretty_print(std::ostream& os) const {
  os << "PixelUnshuffle(downscale_factor=" << options.downscale_factor() << ")";
}

Tensor FoldImpl::forward(const Tensor& x) { return functional::fold(x, options); }

void FoldImpl::pretty_print(std::ostream& os) const {
  const auto& o = options;
  os << "Fold(output_size=" << o.output_size() << ", kernel_size=" << o.kernel_size()
     << ", dilation=" << o.dilation() << ", padding=" << o.padding() << ", stride=" << o.stride()
     << ")";
}

Tensor UnfoldImpl::forward(const Tensor& x) { return functional::unfold(x, options); }

void UnfoldImpl::pretty_print(std::ostream& os) const {
  const auto& o = options;
  os << "Unfold(kernel_size=" << o.kernel_size() << ", dilation=" << o.dilation()
     << ", padding=" << o.padding() << ", stride=" << o.stride() << ")";
}

}  // namespace ember::nn
