// Image transforms as torchvision.transforms, in the batch style of nn/transforms.h: each takes a
// batch of images [N, C, H, W] (or [N, H, W]) on the CPU, draws each image's random choices from
// Philox (seed, image index), and returns a new tensor.
//   - ToTensor: uint8 [N, H, W, C] (or one image [H, W, C]) -> float32 [N, C, H, W] (or
//     [C, H, W]) divided by 255;
//   - Resize: bilinear (align_corners false, as F.interpolate; no antialiasing) to (h, w), or the
//     shorter side to `size` keeping the aspect ratio (the longer side truncated, as torchvision);
//   - CenterCrop: the centered window, top = round((H - h) / 2) with ties to even (Python's round),
//     zero padding where the window is larger than the image (as torchvision);
//   - RandomResizedCrop: torchvision's area/aspect draw (scale, log-uniform ratio, 10 attempts,
//   then
//     the central crop clamped to the ratio range), resized bilinearly to the output size;
//   - ColorJitter: brightness, contrast, saturation and hue factors drawn uniformly and applied in
//   a
//     random order, with torchvision's formulas (float images in [0, 1]; saturation and hue leave
//     images of other than 3 channels unchanged, as torchvision does for grey images).
#pragma once
#include <cstdint>
#include <utility>

#include "ember/nn/data.h"

namespace ember::data {

// uint8 channels-last images to float32 channels-first in [0, 1], as torchvision's ToTensor.
class ToTensor {
 public:
  // images uint8 [N, H, W, C] (or [H, W, C]) -> float32 [N, C, H, W] (or [C, H, W]) / 255; the
  // seed is unused.
  Tensor operator()(const Tensor& images, uint64_t seed = 0) const;
};

// Floating or uint8 images (uint8 results are rounded and clamped).
class Resize {
 public:
  // Resize(size) scales the shorter side to `size` keeping the aspect ratio, as torchvision's
  // Resize(int); Resize(height, width) gives exactly that size. Sizes > 0.
  explicit Resize(int64_t shorter_side);
  Resize(int64_t height, int64_t width);
  // images [N, C, H, W] (or [N, H, W]) -> [N, C, h, w] by bilinear interpolation; the seed is
  // unused.
  Tensor operator()(const Tensor& images, uint64_t seed = 0) const;
  // The output size for an input of height x width.
  std::pair<int64_t, int64_t> output_size(int64_t height, int64_t width) const;

 private:
  int64_t height_, width_;
  bool shorter_side_;
};

// Any dtype.
class CenterCrop {
 public:
  // A size x size, or height x width, window (sizes > 0), as torchvision's CenterCrop.
  explicit CenterCrop(int64_t size) : CenterCrop(size, size) {}
  CenterCrop(int64_t height, int64_t width);
  // images [N, C, H, W] (or [N, H, W]) -> [N, C, height, width]; the seed is unused.
  Tensor operator()(const Tensor& images, uint64_t seed = 0) const;

 private:
  int64_t height_, width_;
};

// Floating or uint8 images.
class RandomResizedCrop {
 public:
  // A random window of area fraction in `scale` and aspect ratio (width / height) in `ratio`,
  // resized to size x size (or height x width); defaults as torchvision's RandomResizedCrop.
  explicit RandomResizedCrop(int64_t size, std::pair<double, double> scale = {0.08, 1.0},
                             std::pair<double, double> ratio = {3.0 / 4.0, 4.0 / 3.0})
      : RandomResizedCrop(size, size, scale, ratio) {}
  RandomResizedCrop(int64_t height, int64_t width, std::pair<double, double> scale,
                    std::pair<double, double> ratio);
  // images [N, C, H, W] (or [N, H, W]) -> [N, C, height, width], each image its own window.
  Tensor operator()(const Tensor& images, uint64_t seed) const;
  // The window (top, left, height, width) drawn for an image of height x width from `seed` and
  // the image's index in its batch.
  struct Window {
    // The crop, in pixels of the input image:
    int64_t top;     // first row
    int64_t left;    // first column
    int64_t height;  // rows
    int64_t width;   // columns
  };
  Window window(int64_t height, int64_t width, uint64_t seed, int64_t image) const;

 private:
  int64_t height_, width_;
  std::pair<double, double> scale_, ratio_;
};

// Floating images in [0, 1]. Factors: brightness and contrast and saturation in
// [max(0, 1 - x), 1 + x], hue in [-hue, hue] (hue <= 0.5); 0 leaves that property alone.
class ColorJitter {
 public:
  // The jitter strengths (all >= 0, hue <= 0.5); 0 (the default, as torchvision) disables one.
  explicit ColorJitter(double brightness = 0, double contrast = 0, double saturation = 0,
                       double hue = 0);
  // images float [N, C, H, W] in [0, 1] -> the same shape, each image jittered with its own
  // factors and order.
  Tensor operator()(const Tensor& images, uint64_t seed) const;

 private:
  double brightness_, contrast_, saturation_, hue_;
};

}  // namespace ember::data
