// Image transforms of nn/transforms_image.h: ToTensor, bilinear Resize, CenterCrop,
// RandomResizedCrop and ColorJitter on CPU batches, with torchvision's parameter rules.
#include "ember/nn/transforms_image.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ember/ops/ops.h"
#include "ember/tensor/philox.h"

namespace ember::data {

namespace {

// The images as a contiguous CPU tensor seen as [n, planes, h, w] (planes = 1 for [N, H, W]).
struct Images {
  Tensor dense;
  int64_t n, planes, h, w;
};

Images as_images(const Tensor& images, const char* op) {
  EMBER_CHECK(images.defined() && (images.dim() == 3 || images.dim() == 4), op,
              ": expected images [N, C, H, W] or [N, H, W], got ",
              images.defined() ? images.shape_str() : "undefined");
  EMBER_CHECK(images.device().is_cpu(), op, ": images must be on the CPU, got ",
              images.device().str());
  Images b;
  b.dense = images.is_contiguous() ? images : images.contiguous();
  b.n = images.size(0);
  b.planes = images.dim() == 4 ? images.size(1) : 1;
  b.h = images.size(-2);
  b.w = images.size(-1);
  return b;
}

Shape with_hw(const Tensor& images, int64_t h, int64_t w) {
  Shape s = images.sizes();
  s[s.size() - 2] = h;
  s[s.size() - 1] = w;
  return s;
}

// A uniform double in (0, 1) from 32 random bits.
double unit(uint32_t bits) { return (double(bits) + 0.5) * 0x1.0p-32; }

template <typename T>
T store(double v) {
  if constexpr (std::is_same_v<T, uint8_t>)
    return uint8_t(std::clamp(std::nearbyint(v), 0.0, 255.0));
  else
    return T(v);
}

// Bilinear resampling (align_corners false, as F.interpolate) of the window (top, left, wh, ww) of
// one plane to out_h x out_w. The interpolation is written as lerps so a constant stays exact.
template <typename T>
void resample(const T* src, int64_t in_w, int64_t top, int64_t left, int64_t wh, int64_t ww, T* dst,
              int64_t out_h, int64_t out_w) {
  const double sy = double(wh) / double(out_h), sx = double(ww) / double(out_w);
  for (int64_t y = 0; y < out_h; ++y) {
    const double fy = std::max(0.0, (double(y) + 0.5) * sy - 0.5);
    const int64_t y0 = std::min(int64_t(fy), wh - 1), y1 = std::min(y0 + 1, wh - 1);
    const double ly = fy - double(y0);
    const T* r0 = src + (top + y0) * in_w + left;
    const T* r1 = src + (top + y1) * in_w + left;
    for (int64_t x = 0; x < out_w; ++x) {
      const double fx = std::max(0.0, (double(x) + 0.5) * sx - 0.5);
      const int64_t x0 = std::min(int64_t(fx), ww - 1), x1 = std::min(x0 + 1, ww - 1);
      const double lx = fx - double(x0);
      const double a = double(r0[x0]), b = double(r0[x1]), c = double(r1[x0]), d = double(r1[x1]);
      const double t = a + lx * (b - a), u = c + lx * (d - c);
      dst[y * out_w + x] = store<T>(t + ly * (u - t));
    }
  }
}

// Calls f(T{}) for float, double and uint8 images.
template <typename F>
void dispatch_image(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::f32:
      f(float{});
      break;
    case DType::f64:
      f(double{});
      break;
    case DType::u8:
      f(uint8_t{});
      break;
    default:
      EMBER_THROW(bad_param, op, ": images of dtype ", dtype_name(dtype),
                  " are not supported; use float32, float64 or uint8");
  }
}

}  // namespace

// ---- ToTensor --------------------------------------------------------------------------------

Tensor ToTensor::operator()(const Tensor& images, uint64_t) const {
  EMBER_CHECK(
      images.defined() && images.dtype() == DType::u8 && (images.dim() == 3 || images.dim() == 4),
      "ToTensor: expected uint8 images [N, H, W, C] or one image [H, W, C], got ",
      images.defined() ? images.shape_str() + " " + dtype_name(images.dtype()) : "undefined");
  const Tensor in = images.device().is_cpu() ? images.contiguous() : images.cpu().contiguous();
  const bool batched = in.dim() == 4;
  const int64_t n = batched ? in.size(0) : 1, h = in.size(-3), w = in.size(-2), c = in.size(-1);
  Tensor out = batched ? empty({n, c, h, w}, DType::f32, Device::cpu())
                       : empty({c, h, w}, DType::f32, Device::cpu());
  const uint8_t* src = static_cast<const uint8_t*>(in.data_ptr());
  float* dst = out.data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < h * w; ++p)
      for (int64_t k = 0; k < c; ++k)
        dst[(i * c + k) * h * w + p] = float(src[(i * h * w + p) * c + k]) / 255.0f;
  return out;
}

// ---- Resize ----------------------------------------------------------------------------------

Resize::Resize(int64_t shorter_side)
    : height_(shorter_side), width_(shorter_side), shorter_side_(true) {
  EMBER_CHECK(shorter_side > 0, "Resize: size ", shorter_side, " must be positive");
}

Resize::Resize(int64_t height, int64_t width)
    : height_(height), width_(width), shorter_side_(false) {
  EMBER_CHECK(height > 0 && width > 0, "Resize: size ", height, "x", width, " must be positive");
}

std::pair<int64_t, int64_t> Resize::output_size(int64_t height, int64_t width) const {
  if (!shorter_side_) return {height_, width_};
  // torchvision: the shorter side becomes `size`, the longer int(size * long / short).
  if (height <= width) return {height_, int64_t(double(height_) * double(width) / double(height))};
  return {int64_t(double(height_) * double(height) / double(width)), height_};
}

Tensor Resize::operator()(const Tensor& images, uint64_t) const {
  const Images in = as_images(images, "Resize");
  EMBER_CHECK(in.h > 0 && in.w > 0, "Resize: images ", images.shape_str(), " are empty");
  // Plain variables, not a structured binding: the lambda below captures them.
  const std::pair<int64_t, int64_t> size = output_size(in.h, in.w);
  const int64_t oh = size.first, ow = size.second;
  Tensor out = empty(with_hw(images, oh, ow), images.dtype(), Device::cpu());
  dispatch_image(images.dtype(), "Resize", [&](auto t) {
    using T = decltype(t);
    const T* src = static_cast<const T*>(in.dense.data_ptr());
    T* dst = static_cast<T*>(out.data_ptr());
    for (int64_t p = 0; p < in.n * in.planes; ++p)
      resample(src + p * in.h * in.w, in.w, 0, 0, in.h, in.w, dst + p * oh * ow, oh, ow);
  });
  return out;
}

// ---- CenterCrop ------------------------------------------------------------------------------

CenterCrop::CenterCrop(int64_t height, int64_t width) : height_(height), width_(width) {
  EMBER_CHECK(height > 0 && width > 0, "CenterCrop: size ", height, "x", width,
              " must be positive");
}

Tensor CenterCrop::operator()(const Tensor& images, uint64_t) const {
  const Images in = as_images(images, "CenterCrop");
  // Source offset of output (0, 0): round-half-even of the centered start, or minus the zero
  // padding torchvision adds before cropping when the window is larger.
  auto offset = [](int64_t in_size, int64_t crop) {
    return crop <= in_size ? int64_t(std::nearbyint(double(in_size - crop) / 2.0))
                           : -((crop - in_size) / 2);
  };
  const int64_t top = offset(in.h, height_), left = offset(in.w, width_);
  Tensor out = zeros(with_hw(images, height_, width_), TensorOptions(images.dtype()));
  const size_t elem = images.element_size();
  const char* src = static_cast<const char*>(in.dense.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  const int64_t x0 = std::max<int64_t>(0, -left), x1 = std::min<int64_t>(width_, in.w - left);
  if (x1 <= x0) return out;
  for (int64_t p = 0; p < in.n * in.planes; ++p)
    for (int64_t y = 0; y < height_; ++y) {
      const int64_t sy = top + y;
      if (sy < 0 || sy >= in.h) continue;
      std::memcpy(dst + size_t((p * height_ + y) * width_ + x0) * elem,
                  src + size_t((p * in.h + sy) * in.w + left + x0) * elem, size_t(x1 - x0) * elem);
    }
  return out;
}

// ---- RandomResizedCrop -----------------------------------------------------------------------

RandomResizedCrop::RandomResizedCrop(int64_t height, int64_t width, std::pair<double, double> scale,
                                     std::pair<double, double> ratio)
    : height_(height), width_(width), scale_(scale), ratio_(ratio) {
  EMBER_CHECK(height > 0 && width > 0, "RandomResizedCrop: size ", height, "x", width,
              " must be positive");
  EMBER_CHECK(scale.first > 0 && scale.first <= scale.second, "RandomResizedCrop: scale (",
              scale.first, ", ", scale.second, ") must satisfy 0 < min <= max");
  EMBER_CHECK(ratio.first > 0 && ratio.first <= ratio.second, "RandomResizedCrop: ratio (",
              ratio.first, ", ", ratio.second, ") must satisfy 0 < min <= max");
}

RandomResizedCrop::Window RandomResizedCrop::window(int64_t height, int64_t width, uint64_t seed,
                                                    int64_t image) const {
  const double area = double(height) * double(width);
  const double log_lo = std::log(ratio_.first), log_hi = std::log(ratio_.second);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const philox::U32x4 bits = philox::draw4(seed, uint64_t(image), 4 * uint64_t(attempt));
    const double target = area * (scale_.first + unit(bits.x) * (scale_.second - scale_.first));
    const double aspect = std::exp(log_lo + unit(bits.y) * (log_hi - log_lo));
    const int64_t w = int64_t(std::nearbyint(std::sqrt(target * aspect)));
    const int64_t h = int64_t(std::nearbyint(std::sqrt(target / aspect)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int64_t top = int64_t(philox::randint_from_bits(bits.z, uint64_t(height - h + 1)));
      const int64_t left = int64_t(philox::randint_from_bits(bits.w, uint64_t(width - w + 1)));
      return {top, left, h, w};
    }
  }
  // Fallback: the central crop, clamped to the ratio range.
  const double in_ratio = double(width) / double(height);
  int64_t w = width, h = height;
  if (in_ratio < ratio_.first) {
    h = int64_t(std::nearbyint(double(w) / ratio_.first));
  } else if (in_ratio > ratio_.second) {
    w = int64_t(std::nearbyint(double(h) * ratio_.second));
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

Tensor RandomResizedCrop::operator()(const Tensor& images, uint64_t seed) const {
  const Images in = as_images(images, "RandomResizedCrop");
  EMBER_CHECK(in.h > 0 && in.w > 0, "RandomResizedCrop: images ", images.shape_str(), " are empty");
  Tensor out = empty(with_hw(images, height_, width_), images.dtype(), Device::cpu());
  dispatch_image(images.dtype(), "RandomResizedCrop", [&](auto t) {
    using T = decltype(t);
    const T* src = static_cast<const T*>(in.dense.data_ptr());
    T* dst = static_cast<T*>(out.data_ptr());
    for (int64_t i = 0; i < in.n; ++i) {
      const Window win = window(in.h, in.w, seed, i);
      for (int64_t c = 0; c < in.planes; ++c) {
        const int64_t p = i * in.planes + c;
        resample(src + p * in.h * in.w, in.w, win.top, win.left, win.height, win.width,
                 dst + p * height_ * width_, height_, width_);
      }
    }
  });
  return out;
}

// ---- ColorJitter -----------------------------------------------------------------------------

ColorJitter::ColorJitter(double brightness, double contrast, double saturation, double hue)
    : brightness_(brightness), contrast_(contrast), saturation_(saturation), hue_(hue) {
  EMBER_CHECK(brightness >= 0 && contrast >= 0 && saturation >= 0, "ColorJitter: brightness ",
              brightness, ", contrast ", contrast, " and saturation ", saturation,
              " must be non-negative");
  EMBER_CHECK(hue >= 0 && hue <= 0.5, "ColorJitter: hue ", hue, " must be in [0, 0.5]");
}

namespace {

// torchvision's _rgb2hsv / _hsv2rgb on one pixel.
void rgb_to_hsv(double r, double g, double b, double& h, double& s, double& v) {
  const double maxc = std::max({r, g, b}), minc = std::min({r, g, b});
  const bool eq = maxc == minc;
  const double cr = maxc - minc;
  s = cr / (eq ? 1.0 : maxc);
  const double div = eq ? 1.0 : cr;
  const double rc = (maxc - r) / div, gc = (maxc - g) / div, bc = (maxc - b) / div;
  double hh;
  if (maxc == r)
    hh = bc - gc;
  else if (maxc == g)
    hh = 2.0 + rc - bc;
  else
    hh = 4.0 + gc - rc;
  h = std::fmod(hh / 6.0 + 1.0, 1.0);
  v = maxc;
}

void hsv_to_rgb(double h, double s, double v, double& r, double& g, double& b) {
  const double fi = std::floor(h * 6.0), f = h * 6.0 - fi;
  const int i = int(std::fmod(fi, 6.0) + 6) % 6;
  const double p = std::clamp(v * (1 - s), 0.0, 1.0), q = std::clamp(v * (1 - s * f), 0.0, 1.0),
               t = std::clamp(v * (1 - s * (1 - f)), 0.0, 1.0);
  const double table[6][3] = {{v, t, p}, {q, v, p}, {p, v, t}, {p, q, v}, {t, p, v}, {v, p, q}};
  r = table[i][0];
  g = table[i][1];
  b = table[i][2];
}

}  // namespace

Tensor ColorJitter::operator()(const Tensor& images, uint64_t seed) const {
  const Images in = as_images(images, "ColorJitter");
  EMBER_CHECK(images.dtype() == DType::f32 || images.dtype() == DType::f64,
              "ColorJitter: images have dtype ", dtype_name(images.dtype()),
              "; convert them to float (ToTensor) first");
  const int64_t plane = in.h * in.w, c = in.planes;
  Tensor out = empty(images.sizes(), images.dtype(), Device::cpu());
  std::vector<double> px(size_t(c * plane));
  auto gray = [&](int64_t p) {
    return c == 3 ? 0.2989 * px[size_t(p)] + 0.587 * px[size_t(plane + p)] +
                        0.114 * px[size_t(2 * plane + p)]
                  : px[size_t(p)];
  };
  auto blend = [](double a, double b, double f) {
    return std::clamp(f * a + (1 - f) * b, 0.0, 1.0);
  };
  dispatch_image(images.dtype(), "ColorJitter", [&](auto t) {
    using T = decltype(t);
    const T* src = static_cast<const T*>(in.dense.data_ptr());
    T* dst = static_cast<T*>(out.data_ptr());
    for (int64_t i = 0; i < in.n; ++i) {
      for (int64_t k = 0; k < c * plane; ++k) px[size_t(k)] = double(src[i * c * plane + k]);
      const philox::U32x4 f = philox::draw4(seed, uint64_t(i), 0);
      const philox::U32x4 o = philox::draw4(seed, uint64_t(i), 4);
      // A random order of the four adjustments (Fisher-Yates), as torchvision's randperm(4).
      int order[4] = {0, 1, 2, 3};
      for (int k = 3; k > 0; --k)
        std::swap(order[k], order[philox::randint_from_bits(philox::lane(o, k), uint64_t(k + 1))]);
      for (int step : order) {
        if (step == 0 && brightness_ > 0) {
          const double b = std::max(0.0, 1 - brightness_) +
                           unit(f.x) * (1 + brightness_ - std::max(0.0, 1 - brightness_));
          for (double& v : px) v = std::clamp(b * v, 0.0, 1.0);
        } else if (step == 1 && contrast_ > 0) {
          const double lo = std::max(0.0, 1 - contrast_);
          const double factor = lo + unit(f.y) * (1 + contrast_ - lo);
          double mean = 0;
          for (int64_t p = 0; p < plane; ++p) mean += gray(p);
          mean /= double(std::max<int64_t>(plane, 1));
          for (double& v : px) v = blend(v, mean, factor);
        } else if (step == 2 && saturation_ > 0 && c == 3) {
          const double lo = std::max(0.0, 1 - saturation_);
          const double factor = lo + unit(f.z) * (1 + saturation_ - lo);
          for (int64_t p = 0; p < plane; ++p) {
            const double g = gray(p);
            for (int64_t k = 0; k < 3; ++k)
              px[size_t(k * plane + p)] = blend(px[size_t(k * plane + p)], g, factor);
          }
        } else if (step == 3 && hue_ > 0 && c == 3) {
          const double shift = -hue_ + unit(f.w) * 2 * hue_;
          for (int64_t p = 0; p < plane; ++p) {
            double h, s, v, r, g, b;
            rgb_to_hsv(px[size_t(p)], px[size_t(plane + p)], px[size_t(2 * plane + p)], h, s, v);
            h = std::fmod(h + shift + 1.0, 1.0);
            hsv_to_rgb(h, s, v, r, g, b);
            px[size_t(p)] = r;
            px[size_t(plane + p)] = g;
            px[size_t(2 * plane + p)] = b;
          }
        }
      }
      for (int64_t k = 0; k < c * plane; ++k) dst[i * c * plane + k] = T(px[size_t(k)]);
    }
  });
  return out;
}

}  // namespace ember::data
