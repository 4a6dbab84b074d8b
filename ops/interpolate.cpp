// interpolate (ops/interpolate.h): argument rules and output sizes as F.interpolate, then one
// separable pass per spatial dim. Source indices follow PyTorch's CPU kernels, including their
// float arithmetic for the nearest modes (a double would pick a different pixel at some exact
// halves), so outputs match PyTorch's sample for sample.
#include "ember/ops/interpolate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <sstream>
#include <string>

#include "ember/ops/ops.h"
#include "ember/ops/pooling.h"

namespace ember {

namespace {

constexpr const char* kOp = "interpolate";

template <typename T>
std::string list_str(const std::vector<T>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return os.str() + "]";
}

// 1/scale when a scale is given, else in/out (PyTorch's compute_scales_value).
double scale_value(std::optional<double> scale, int64_t in, int64_t out) {
  return scale && *scale > 0 ? 1.0 / *scale : double(in) / double(out);
}

// The taps of one output position: input indices and their weights.
struct Taps {
  int64_t n = 0;
  std::array<int64_t, 4> index{};
  std::array<double, 4> weight{};
};

Taps nearest_taps(const std::string& mode, int64_t dst, int64_t in, int64_t out,
                  std::optional<double> scale) {
  Taps t;
  t.n = 1;
  t.weight[0] = 1;
  // In float, as PyTorch's nearest kernels compute it (in / out divided in float, not rounded
  // from a double quotient).
  const float s = scale && *scale > 0 ? float(1.0 / *scale) : float(in) / float(out);
  if (mode == "nearest") {
    if (out == in)
      t.index[0] = dst;
    else if (out == 2 * in)
      t.index[0] = dst >> 1;
    else
      t.index[0] = std::min(int64_t(std::floor(float(dst) * s)), in - 1);
  } else {  // nearest-exact
    t.index[0] = std::min(int64_t(std::floor(float((double(dst) + 0.5) * double(s)))), in - 1);
  }
  return t;
}

// PyTorch's cubic convolution coefficients (A = -0.75) for fractional offset x.
void cubic_weights(double x, std::array<double, 4>& w) {
  constexpr double A = -0.75;
  auto near = [](double v) { return ((A + 2) * v - (A + 3)) * v * v + 1; };
  auto far = [](double v) { return ((A * v - 5 * A) * v + 8 * A) * v - 4 * A; };
  w = {far(x + 1), near(x), near(1 - x), far(2 - x)};
}

Taps interpolating_taps(bool cubic, int64_t dst, int64_t in, int64_t out, bool align_corners,
                        std::optional<double> scale) {
  const double s = align_corners ? (out > 1 ? double(in - 1) / double(out - 1) : 0.0)
                                 : scale_value(scale, in, out);
  double src = align_corners ? s * double(dst) : s * (double(dst) + 0.5) - 0.5;
  Taps t;
  if (!cubic) {
    if (src < 0) src = 0;
    const auto i0 = int64_t(src);
    const double l1 = std::clamp(src - double(i0), 0.0, 1.0);
    t.n = 2;
    t.index = {i0, i0 + (i0 < in - 1 ? 1 : 0), 0, 0};
    t.weight = {1 - l1, l1, 0, 0};
    return t;
  }
  const auto i0 = int64_t(std::floor(src));
  t.n = 4;
  cubic_weights(src - double(i0), t.weight);
  for (int64_t j = 0; j < 4; ++j) t.index[size_t(j)] = std::clamp<int64_t>(i0 - 1 + j, 0, in - 1);
  return t;
}

// Resamples dim d of x to `out` positions: sum over taps j of index_select(x, d, index_j) *
// weight_j (weights broadcast along d).
Tensor resample_dim(const Tensor& x, int64_t d, const std::vector<Taps>& taps) {
  const int64_t out = int64_t(taps.size()), n = taps.empty() ? 1 : taps[0].n;
  const TensorOptions index_opts = TensorOptions(DType::i64).with_device(x.device());
  Shape wshape(size_t(x.dim()), 1);
  wshape[size_t(d)] = out;
  Tensor y;
  for (int64_t j = 0; j < n; ++j) {
    std::vector<double> index(static_cast<size_t>(out)), weight(static_cast<size_t>(out));
    for (int64_t o = 0; o < out; ++o) {
      index[size_t(o)] = double(taps[size_t(o)].index[size_t(j)]);
      weight[size_t(o)] = taps[size_t(o)].weight[size_t(j)];
    }
    Tensor term = index_select(x, d, from_vector(index, {out}, index_opts));
    if (n > 1)
      term =
          mul(term, from_vector(weight, wshape, TensorOptions(x.dtype()).with_device(x.device())));
    y = y.defined() ? add(y, term) : term;
  }
  return y;
}

}  // namespace

Tensor interpolate(const Tensor& x, const std::optional<std::vector<int64_t>>& size,
                   const std::optional<std::vector<double>>& scale_factor, const std::string& mode,
                   std::optional<bool> align_corners, std::optional<bool> recompute_scale_factor) {
  EMBER_CHECK(x.defined(), kOp, ": the input is undefined");
  const bool nearest = mode == "nearest" || mode == "nearest-exact";
  const bool cubic = mode == "bicubic";
  const bool linear = mode == "linear" || mode == "bilinear" || mode == "trilinear";
  EMBER_CHECK(nearest || cubic || linear || mode == "area", kOp, ": unknown mode \"", mode,
              "\"; use nearest, nearest-exact, linear, bilinear, bicubic, trilinear or area");
  EMBER_CHECK(x.dim() >= 3 && x.dim() <= 5, kOp,
              ": expected a 3-d, 4-d or 5-d input [N, C, *spatial], got ", x.shape_str(),
              "; add a batch dim with unsqueeze(0)");
  EMBER_CHECK(!align_corners || !(nearest || mode == "area"), kOp,
              ": align_corners can only be set with the interpolating modes linear, bilinear, "
              "bicubic and trilinear, not with mode \"",
              mode, "\"");
  EMBER_CHECK(nearest || is_floating(x.dtype()), kOp, ": mode \"", mode,
              "\" needs a floating input, got ", dtype_name(x.dtype()), " ", x.shape_str(),
              "; convert it with .to(float32) first");
  const int64_t k = x.dim() - 2;
  const int64_t want = mode == "linear" ? 1 : (mode == "bilinear" || cubic) ? 2 : 3;
  EMBER_CHECK(!(linear || cubic) || want == k, kOp, ": mode \"", mode, "\" needs a ", want + 2,
              "-d input, got ", x.shape_str());
  EMBER_CHECK(size.has_value() != scale_factor.has_value(), kOp,
              size ? ": only one of size and scale_factor may be given"
                   : ": either size or scale_factor must be given");
  EMBER_CHECK(!(size && recompute_scale_factor.value_or(false)), kOp,
              ": recompute_scale_factor is not meaningful with an explicit size");
  std::vector<int64_t> out(static_cast<size_t>(k));
  std::vector<std::optional<double>> scales(static_cast<size_t>(k));
  if (size) {
    EMBER_CHECK(size->size() == 1 || int64_t(size->size()) == k, kOp, ": size ", list_str(*size),
                " must hold one value or ", k, " for input ", x.shape_str());
    for (int64_t i = 0; i < k; ++i) out[size_t(i)] = (*size)[size->size() == 1 ? 0 : size_t(i)];
  } else {
    const auto& sf = *scale_factor;
    EMBER_CHECK(sf.size() == 1 || int64_t(sf.size()) == k, kOp, ": scale_factor ", list_str(sf),
                " must hold one value or ", k, " for input ", x.shape_str());
    for (int64_t i = 0; i < k; ++i) {
      const double s = sf[sf.size() == 1 ? 0 : size_t(i)];
      EMBER_CHECK(s > 0 && std::isfinite(s), kOp, ": scale_factor ", list_str(sf),
                  " must be positive");
      out[size_t(i)] = int64_t(std::floor(double(x.size(2 + i)) * s));
      if (!recompute_scale_factor.value_or(false)) scales[size_t(i)] = s;
    }
  }
  for (int64_t i = 0; i < k; ++i)
    EMBER_CHECK(out[size_t(i)] > 0 && x.size(2 + i) > 0, kOp, ": input ", x.shape_str(),
                " and output sizes ", list_str(out), " must be non-empty in the spatial dims");
  if (mode == "area") {
    return k == 1   ? adaptive_avg_pool1d(x, out)
           : k == 2 ? adaptive_avg_pool2d(x, out)
                    : adaptive_avg_pool3d(x, out);
  }
  Tensor y = x;
  bool resampled = false;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t in = x.size(2 + i), o_n = out[size_t(i)];
    if (nearest && in == o_n && (mode == "nearest" || !scales[size_t(i)])) continue;
    std::vector<Taps> taps(static_cast<size_t>(o_n));
    for (int64_t o = 0; o < o_n; ++o)
      taps[size_t(o)] = nearest
                            ? nearest_taps(mode, o, in, o_n, scales[size_t(i)])
                            : interpolating_taps(cubic, o, in, o_n, align_corners.value_or(false),
                                                 scales[size_t(i)]);
    y = resample_dim(y, 2 + i, taps);
    resampled = true;
  }
  // A no-op resample still returns a new tensor, as PyTorch does.
  return resampled ? y : x.clone();
}

}  // namespace ember
