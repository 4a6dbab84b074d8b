// Distance and normalization functionals and LocalResponseNorm (see functional_more.h).
#include "ember/nn/functional_more.h"

#include <ostream>

#include "ember/ops/ops.h"

namespace ember::nn {

namespace functional {

namespace {

void check_floating(const char* op, const char* arg, const Tensor& t) {
  EMBER_CHECK(t.defined(), op, ": ", arg, " must be a defined tensor");
  EMBER_CHECK(is_floating(t.dtype()), op, ": ", arg, " must be a floating tensor, got ",
              dtype_name(t.dtype()), " of shape ", t.shape_str());
}

void check_pair(const char* op, const Tensor& x1, const Tensor& x2) {
  check_floating(op, "x1", x1);
  check_floating(op, "x2", x2);
  EMBER_CHECK(x1.device() == x2.device(), op, ": x1 is on ", x1.device().str(), " but x2 on ",
              x2.device().str());
}

}  // namespace

Tensor cosine_similarity(const Tensor& x1, const Tensor& x2,
                         const CosineSimilarityFuncOptions& options) {
  check_pair("cosine_similarity", x1, x2);
  Tensor prod = mul(x1, x2);  // broadcasts (and says so when the shapes do not)
  EMBER_CHECK(prod.dim() > 0, "cosine_similarity: inputs must have at least one dim");
  const int64_t d = options.dim();
  EMBER_CHECK(d >= -prod.dim() && d < prod.dim(), "cosine_similarity: dim ", d,
              " is out of range for inputs of shapes ", x1.shape_str(), " and ", x2.shape_str());
  Tensor w12 = sum(prod, {d});
  Tensor w1 = sum(square(x1.expand(prod.sizes())), {d});
  Tensor w2 = sum(square(x2.expand(prod.sizes())), {d});
  const double eps = options.eps();
  return div(w12, sqrt(clamp_min(mul(w1, w2), eps * eps)));
}

Tensor pairwise_distance(const Tensor& x1, const Tensor& x2,
                         const PairwiseDistanceFuncOptions& options) {
  check_pair("pairwise_distance", x1, x2);
  EMBER_CHECK(options.p() >= 0, "pairwise_distance: p must be >= 0, got ", options.p());
  Tensor diff = add(sub(x1, x2), options.eps());
  if (diff.dim() == 0) diff = diff.reshape({1});
  return linalg_vector_norm(diff, options.p(), {-1}, options.keepdim());
}

Tensor cdist(const Tensor& x1, const Tensor& x2, double p) {
  check_pair("cdist", x1, x2);
  EMBER_CHECK(x1.dim() >= 2 && x2.dim() >= 2, "cdist: x1 and x2 must have at least 2 dims, got ",
              x1.shape_str(), " and ", x2.shape_str());
  EMBER_CHECK(x1.size(-1) == x2.size(-1), "cdist: x1 ", x1.shape_str(), " and x2 ", x2.shape_str(),
              " must have the same number of columns (last dim)");
  EMBER_CHECK(p >= 0, "cdist: p must be >= 0, got ", p);
  // [..., P, 1, M] - [..., 1, R, M] -> [..., P, R, M], normed over M.
  Tensor diff = sub(x1.unsqueeze(-2), x2.unsqueeze(-3));
  return linalg_vector_norm(diff, p, {-1}, false);
}

Tensor normalize(const Tensor& x, const NormalizeFuncOptions& options) {
  check_floating("normalize", "input", x);
  const int64_t d = options.dim();
  const int64_t nd = std::max<int64_t>(x.dim(), 1);
  EMBER_CHECK(d >= -nd && d < nd, "normalize: dim ", d, " is out of range for input of shape ",
              x.shape_str());
  Tensor norm = linalg_vector_norm(x, options.p(), {d}, /*keepdim=*/true);
  return div(x, clamp_min(norm, options.eps()));
}

Tensor local_response_norm(const Tensor& x, const LocalResponseNormFuncOptions& options) {
  check_floating("local_response_norm", "input", x);
  EMBER_CHECK(x.dim() >= 3, "local_response_norm: expected an input of 3 or more dims [N, C, ...],",
              " got shape ", x.shape_str());
  const int64_t size = options.size();
  EMBER_CHECK(size >= 1, "local_response_norm: size must be >= 1, got ", size);
  const int64_t channels = x.size(1);
  if (x.numel() == 0) return mul(x, 1.0);
  Tensor sq = square(x);
  Shape pad_shape = x.sizes();
  const int64_t before = size / 2, after = (size - 1) / 2;
  std::vector<Tensor> parts;
  if (before > 0) {
    pad_shape[1] = before;
    parts.push_back(zeros(pad_shape, TensorOptions(x.dtype()).with_device(x.device())));
  }
  parts.push_back(sq);
  if (after > 0) {
    pad_shape[1] = after;
    parts.push_back(zeros(pad_shape, TensorOptions(x.dtype()).with_device(x.device())));
  }
  Tensor padded = parts.size() == 1 ? sq : cat(parts, 1);
  Tensor window = padded.narrow(1, 0, channels);
  for (int64_t j = 1; j < size; ++j) window = add(window, padded.narrow(1, j, channels));
  Tensor div_term =
      pow(add(mul(window, options.alpha() / double(size)), options.k()), options.beta());
  return div(x, div_term);
}

}  // namespace functional

Tensor LocalResponseNormImpl::forward(const Tensor& x) {
  return functional::local_response_norm(x, options);
}
void LocalResponseNormImpl::pretty_print(std::ostream& os) const {
  os << "LocalResponseNorm(" << options.size() << ", alpha=" << detail::float_str(options.alpha())
     << ", beta=" << detail::float_str(options.beta()) << ", k=" << detail::float_str(options.k())
     << ")";
}

}  // namespace ember::nn
