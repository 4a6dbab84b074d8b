// interpolate (F.interpolate / nn.Upsample's op): resampling of the spatial dims of x [N, C, *]
// (1, 2 or 3 spatial dims) to a size or by a scale factor. Each mode is separable, so every
// spatial dim is resampled in turn as a weighted sum of 1 (nearest), 2 (linear) or 4 (cubic)
// index_selects along it, with source positions and weights computed on the host as PyTorch's
// kernels compute them; the backward is index_select's (a scatter-add into the input), on every
// device. Definitions in ops/interpolate.cpp.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "ember/tensor/tensor.h"

namespace ember {

// x [N, C, L], [N, C, H, W] or [N, C, D, H, W] -> [N, C, *out]. Exactly one of `size` (the output
// spatial sizes) and `scale_factor` (out = floor(in * scale)) is given, each as one value for
// every spatial dim or one per dim.
// mode: "nearest" (source floor(dst * in / out), PyTorch's legacy rule), "nearest-exact"
// (floor((dst + 0.5) * in / out)), "linear" (3-d input), "bilinear" / "bicubic" (4-d),
// "trilinear" (5-d), or "area" (adaptive average pooling to the output size).
// align_corners (interpolating modes only; default false): the corner pixels' centres align, so
// src = dst * (in - 1) / (out - 1); otherwise src = (dst + 0.5) * scale - 0.5 (clamped at 0 for
// the linear modes), bicubic's A = -0.75 with border-clamped taps, as PyTorch.
// recompute_scale_factor: with a scale factor, true computes the sampling from the output size
// (scale = in / out) instead of the given factor (the default, false/unset).
Tensor interpolate(const Tensor& x, const std::optional<std::vector<int64_t>>& size,
                   const std::optional<std::vector<double>>& scale_factor = std::nullopt,
                   const std::string& mode = "nearest",
                   std::optional<bool> align_corners = std::nullopt,
                   std::optional<bool> recompute_scale_factor = std::nullopt);

}  // namespace ember
