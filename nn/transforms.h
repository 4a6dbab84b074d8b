// Batch augmentations, as torchvision's RandomCrop(size, padding), RandomHorizontalFlip and
// Normalize, applied to a whole batch of images [N, C, H, W] (or [N, H, W]) on the CPU (the
// DataLoader's workers run them before the copy to the GPU). Each image draws its own random
// choices from Philox counters (seed, image index), so a transform is a pure function of its input
// and seed: the DataLoader passes a seed derived from (loader seed, epoch, batch), making
// augmentation reproducible and independent of the number of workers. Transforms return new
// tensors and never modify their input.
//
//   loader options: .transform(data::compose({data::RandomCrop(32, 4),
//   data::RandomHorizontalFlip(),
//                                             data::Normalize({0.4914, 0.4822, 0.4465},
//                                                             {0.2470, 0.2435, 0.2616})}))
#pragma once
#include <cstdint>
#include <vector>

#include "ember/nn/data.h"
#include "ember/nn/transforms_image.h"  // Resize, CenterCrop, ColorJitter, ...

namespace ember::data {

// Pads every image by `padding` pixels of zeros on each side, then cuts a height x width window
// at a uniformly random position (per image). Any dtype.
class RandomCrop {
 public:
  // A size x size (or height x width) window after `padding` zeros on each side, as
  // torchvision's RandomCrop(size, padding). Sizes > 0, padding >= 0.
  explicit RandomCrop(int64_t size, int64_t padding = 0) : RandomCrop(size, size, padding) {}
  RandomCrop(int64_t height, int64_t width, int64_t padding);
  // images [N, C, H, W] or [N, H, W] (CPU) -> [N, C, height, width] (or [N, height, width]).
  // Errors when the window is larger than the padded image.
  Tensor operator()(const Tensor& images, uint64_t seed) const;

 private:
  int64_t height_, width_, padding_;
};

// Mirrors each image left-right with probability p. Any dtype.
class RandomHorizontalFlip {
 public:
  // p in [0, 1]: the probability of flipping each image (torchvision's default 0.5).
  explicit RandomHorizontalFlip(double p = 0.5);
  // images [N, C, H, W] or [N, H, W] (CPU) -> the same shape, some images mirrored.
  Tensor operator()(const Tensor& images, uint64_t seed) const;

 private:
  double p_;
};

// (x - mean[c]) / std[c] per channel (dim 1 of [N, C, ...]); one value applies to every channel.
// Floating images only (convert integer images first); the seed is unused.
class Normalize {
 public:
  // mean and std: one value per channel, or one for all; same length, std > 0.
  Normalize(std::vector<double> mean, std::vector<double> std);
  // images [N, C, ...] (float32 / float64, CPU) -> the same shape and dtype. Errors when the
  // number of values is neither 1 nor C.
  Tensor operator()(const Tensor& images, uint64_t seed = 0) const;

 private:
  std::vector<double> mean_, std_;
};

// Runs the transforms in order, each with its own seed drawn from `seed` and its position.
Transform compose(std::vector<Transform> transforms);

}  // namespace ember::data
