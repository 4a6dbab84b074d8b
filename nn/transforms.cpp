// Batch augmentations of nn/transforms.h: byte-level crops and flips (any dtype) and a per-channel
// normalization, each image's random choice drawn from Philox (seed, image index).
#include "ember/nn/transforms.h"

#include <cstring>

#include "ember/ops/ops.h"
#include "ember/tensor/philox.h"

namespace ember::data {

namespace {

// The images as a contiguous CPU tensor viewed as [images, planes, H, W] (planes = C, or 1 for
// [N, H, W] input), for byte-level loops.
struct ImageBatch {
  Tensor dense;
  int64_t n, planes, h, w;
};

ImageBatch as_image_batch(const Tensor& images, const char* op) {
  EMBER_CHECK(images.defined() && (images.dim() == 3 || images.dim() == 4), op,
              ": expected images "
              "[N, C, H, W] or [N, H, W], got ",
              images.defined() ? images.shape_str() : "undefined");
  EMBER_CHECK(images.device().is_cpu(), op,
              ": images must be on the CPU (transforms run in the "
              "loader's workers before the copy to the device), got ",
              images.device().str());
  ImageBatch b;
  b.dense = images.is_contiguous() ? images : images.contiguous();
  b.n = images.size(0);
  b.planes = images.dim() == 4 ? images.size(1) : 1;
  b.h = images.size(-2);
  b.w = images.size(-1);
  return b;
}

philox::U32x4 image_bits(uint64_t seed, int64_t image) {
  return philox::draw4(seed, uint64_t(image), 0);
}

}  // namespace

RandomCrop::RandomCrop(int64_t height, int64_t width, int64_t padding)
    : height_(height), width_(width), padding_(padding) {
  EMBER_CHECK(height > 0 && width > 0 && padding >= 0,
              "RandomCrop: need a positive size and a "
              "non-negative padding, got ",
              height, "x", width, " padding ", padding);
}

Tensor RandomCrop::operator()(const Tensor& images, uint64_t seed) const {
  const ImageBatch in = as_image_batch(images, "RandomCrop");
  const int64_t padded_h = in.h + 2 * padding_, padded_w = in.w + 2 * padding_;
  EMBER_CHECK(height_ <= padded_h && width_ <= padded_w, "RandomCrop: a ", height_, "x", width_,
              " crop does not fit images of ", in.h, "x", in.w, " padded by ", padding_);
  Shape out_shape = images.sizes();
  out_shape[out_shape.size() - 2] = height_;
  out_shape[out_shape.size() - 1] = width_;
  Tensor out = zeros(out_shape, TensorOptions(images.dtype()));
  const size_t elem = images.element_size();
  const char* src = static_cast<const char*>(in.dense.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  for (int64_t i = 0; i < in.n; ++i) {
    const philox::U32x4 bits = image_bits(seed, i);
    // The window's top-left corner in padded coordinates, uniform over every position that fits.
    const int64_t top =
        int64_t(philox::randint_from_bits(bits.x, uint64_t(padded_h - height_ + 1)));
    const int64_t left =
        int64_t(philox::randint_from_bits(bits.y, uint64_t(padded_w - width_ + 1)));
    // Output columns [x0, x1) come from input columns starting at left + x0 - padding.
    const int64_t x0 = std::max<int64_t>(0, padding_ - left);
    const int64_t x1 = std::min<int64_t>(width_, in.w + padding_ - left);
    if (x1 <= x0) continue;
    for (int64_t c = 0; c < in.planes; ++c) {
      const int64_t plane = i * in.planes + c;
      for (int64_t y = 0; y < height_; ++y) {
        const int64_t sy = top + y - padding_;
        if (sy < 0 || sy >= in.h) continue;
        std::memcpy(dst + size_t((plane * height_ + y) * width_ + x0) * elem,
                    src + size_t((plane * in.h + sy) * in.w + left + x0 - padding_) * elem,
                    size_t(x1 - x0) * elem);
      }
    }
  }
  return out;
}

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  EMBER_CHECK(p >= 0 && p <= 1, "RandomHorizontalFlip: p ", p, " must be in [0, 1]");
}

Tensor RandomHorizontalFlip::operator()(const Tensor& images, uint64_t seed) const {
  const ImageBatch in = as_image_batch(images, "RandomHorizontalFlip");
  Tensor out = in.dense.clone(MemoryFormat::contiguous).detach();
  const size_t elem = images.element_size();
  char* data = static_cast<char*>(out.data_ptr());
  for (int64_t i = 0; i < in.n; ++i) {
    const float u = philox::uniform_from_bits(image_bits(seed, i).x);
    if (!philox::bernoulli_from_uniform(u, p_)) continue;
    for (int64_t row = 0; row < in.planes * in.h; ++row) {
      char* r = data + size_t((i * in.planes * in.h + row) * in.w) * elem;
      for (int64_t a = 0, b = in.w - 1; a < b; ++a, --b) {
        char tmp[16];
        std::memcpy(tmp, r + size_t(a) * elem, elem);
        std::memcpy(r + size_t(a) * elem, r + size_t(b) * elem, elem);
        std::memcpy(r + size_t(b) * elem, tmp, elem);
      }
    }
  }
  return out;
}

Normalize::Normalize(std::vector<double> mean, std::vector<double> std)
    : mean_(std::move(mean)), std_(std::move(std)) {
  EMBER_CHECK(!mean_.empty() && mean_.size() == std_.size(),
              "Normalize: give as many means as "
              "standard deviations (one, or one per channel), got ",
              mean_.size(), " and ", std_.size());
  for (double s : std_)
    EMBER_CHECK(s > 0, "Normalize: standard deviation ", s, " must be positive");
}

Tensor Normalize::operator()(const Tensor& images, uint64_t) const {
  EMBER_CHECK(images.defined() && images.dim() >= 2, "Normalize: expected images [N, C, ...], got ",
              images.defined() ? images.shape_str() : "undefined");
  EMBER_CHECK(images.dtype() == DType::f32 || images.dtype() == DType::f64,
              "Normalize: images have "
              "dtype ",
              dtype_name(images.dtype()), "; convert them to float32 or float64 first");
  EMBER_CHECK(images.device().is_cpu(), "Normalize: images must be on the CPU, got ",
              images.device().str());
  const int64_t channels = images.size(1);
  EMBER_CHECK(mean_.size() == 1 || int64_t(mean_.size()) == channels, "Normalize: ", mean_.size(),
              " means for images of ", channels, " channels");
  const Tensor in = images.is_contiguous() ? images : images.contiguous();
  Tensor out = empty(images.sizes(), images.dtype(), Device::cpu());
  const int64_t n = images.size(0), inner = images.numel() / std::max<int64_t>(1, n * channels);
  auto run = [&](auto* dst, const auto* src) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < channels; ++c) {
        const size_t k = mean_.size() == 1 ? 0 : size_t(c);
        const double mean = mean_[k], inv_std = 1.0 / std_[k];
        const int64_t base = (i * channels + c) * inner;
        for (int64_t e = 0; e < inner; ++e)
          dst[base + e] = decltype(+dst[0])((src[base + e] - mean) * inv_std);
      }
  };
  if (images.dtype() == DType::f32)
    run(out.data<float>(), in.data<float>());
  else
    run(out.data<double>(), in.data<double>());
  return out;
}

Transform compose(std::vector<Transform> transforms) {
  for (size_t k = 0; k < transforms.size(); ++k)
    EMBER_CHECK(bool(transforms[k]), "compose: transform ", k, " is empty");
  return [transforms = std::move(transforms)](const Tensor& input, uint64_t seed) {
    Tensor x = input;
    for (size_t k = 0; k < transforms.size(); ++k) {
      const philox::U32x4 bits = philox::draw4(seed, uint64_t(k), 0);
      x = transforms[k](x, (uint64_t(bits.z) << 32) | bits.w);
    }
    return x;
  };
}

}  // namespace ember::data
