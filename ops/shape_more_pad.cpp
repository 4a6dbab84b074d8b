// pad (F.pad): constant padding writes the input into a filled tensor and its backward narrows
// the gradient; reflect, replicate and circular padding gather each padded dim through
// index_select with the mode's source index for every output position, so their backward is
// index_select's (a scatter-add into the input).
#include <algorithm>
#include <cstdlib>

#include "ember/autograd/graph/graph.h"
#include "ember/ops/ops.h"

namespace ember {

namespace {

Tensor pad_constant(const Tensor& a, const Shape& p, double value) {
  const int64_t k = int64_t(p.size()) / 2;
  // Negative pads crop first (a narrow, differentiable); then the rest only grows.
  Tensor x = a;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t d = a.dim() - 1 - i, n = x.size(d);
    const int64_t lc = std::max<int64_t>(-p[size_t(2 * i)], 0);
    const int64_t rc = std::max<int64_t>(-p[size_t(2 * i + 1)], 0);
    EMBER_CHECK(lc + rc <= n, "pad: the padding ", shape_str(p), " crops dim ", d, " of size ", n,
                " of ", a.shape_str(), " below zero");
    if (lc + rc > 0) x = x.narrow(d, lc, n - lc - rc);
  }
  Shape shape = x.sizes();
  Shape starts(size_t(a.dim()), 0);
  for (int64_t i = 0; i < k; ++i) {
    const int64_t d = a.dim() - 1 - i;
    starts[size_t(d)] = std::max<int64_t>(p[size_t(2 * i)], 0);
    shape[size_t(d)] += starts[size_t(d)] + std::max<int64_t>(p[size_t(2 * i + 1)], 0);
  }
  checked_numel(shape, "pad");
  Tensor out = full(shape, value, TensorOptions(a.dtype()).with_device(a.device()));
  const Shape inner = x.sizes();
  auto region = [starts, inner](const Tensor& t) {
    Tensor r = t;
    for (size_t d = 0; d < inner.size(); ++d)
      if (r.size(int64_t(d)) != inner[d]) r = r.narrow(int64_t(d), starts[d], inner[d]);
    return r;
  };
  {
    autograd::NoGradGuard ng;
    region(out).copy_(x);
  }
  if (autograd::needs_grad({&x}))
    autograd::record_backward("pad", {x}, {&out}, [region](const auto& g, const auto&) {
      return std::vector<Tensor>{region(g[0])};
    });
  return out;
}

// The source position along a dim of size n for output position i (i counts from -left).
int64_t source_index(const std::string& mode, int64_t i, int64_t n) {
  if (mode == "reflect") {
    int64_t j = std::abs(i);
    return j >= n ? 2 * (n - 1) - j : j;
  }
  if (mode == "replicate") return std::clamp<int64_t>(i, 0, n - 1);
  return ((i % n) + n) % n;  // circular
}

}  // namespace

Tensor pad(const Tensor& a, const Shape& p, const std::string& mode, double value) {
  EMBER_CHECK(p.size() % 2 == 0, "pad: the padding ", shape_str(p),
              " must hold (left, right) pairs, got an odd length ", p.size());
  const int64_t k = int64_t(p.size()) / 2;
  EMBER_CHECK(k <= a.dim(), "pad: the padding ", shape_str(p), " pads ", k, " dims but the input ",
              a.shape_str(), " has only ", a.dim());
  if (mode == "constant") return pad_constant(a, p, value);
  EMBER_CHECK(mode == "reflect" || mode == "replicate" || mode == "circular",
              "pad: unknown mode \"", mode, "\"; use constant, reflect, replicate or circular");
  EMBER_CHECK(k >= 1 && k <= 3 && (a.dim() == k + 1 || a.dim() == k + 2), "pad: ", mode,
              " padding of ", k, " dims (padding ", shape_str(p), ") expects a ", k + 1, "-d or ",
              k + 2, "-d input, got ", a.shape_str());
  Tensor x = a;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t d = a.dim() - 1 - i, n = a.size(d);
    const int64_t left = p[size_t(2 * i)], right = p[size_t(2 * i + 1)];
    EMBER_CHECK(left >= 0 && right >= 0, "pad: ", mode, " padding ", shape_str(p),
                " must be non-negative (input ", a.shape_str(), ")");
    if (mode == "reflect")
      EMBER_CHECK(left < n && right < n, "pad: reflect padding (", left, ", ", right, ") of dim ",
                  d, " must be less than its size ", n, " (input ", a.shape_str(), ")");
    else if (mode == "circular")
      EMBER_CHECK(left <= n && right <= n, "pad: circular padding (", left, ", ", right,
                  ") of dim ", d, " must not exceed its size ", n, " (input ", a.shape_str(), ")");
    else
      EMBER_CHECK(n > 0 || left + right == 0, "pad: replicate padding of dim ", d,
                  " needs a non-empty dim (input ", a.shape_str(), ")");
    if (left == 0 && right == 0) continue;
    std::vector<double> idx;
    idx.reserve(size_t(n + left + right));
    for (int64_t j = -left; j < n + right; ++j) idx.push_back(double(source_index(mode, j, n)));
    x = index_select(
        x, d,
        from_vector(idx, {int64_t(idx.size())}, TensorOptions(DType::i64).with_device(a.device())));
  }
  return x.is_same(a) ? a.clone() : x;
}

}  // namespace ember
