// More of torch.nn.functional: the distance and normalization functionals cosine_similarity,
// pairwise_distance, cdist, normalize and local_response_norm (with the module LocalResponseNorm),
// and, through the includes below, the activations of nn/activation_more.h and the losses of
// nn/loss_more.h: one include brings all of them. Composed from differentiable ops.
#pragma once
#include <cstdint>

#include "ember/nn/activation_more.h"
#include "ember/nn/loss_more.h"
#include "ember/nn/module.h"
#include "ember/nn/options.h"

namespace ember::nn {

struct CosineSimilarityOptions {
  EMBER_ARG(int64_t, dim) = 1;
  EMBER_ARG(double, eps) = 1e-8;
};
struct PairwiseDistanceOptions {
  EMBER_ARG(double, p) = 2.0;
  EMBER_ARG(double, eps) = 1e-6;
  EMBER_ARG(bool, keepdim) = false;
};
struct NormalizeFuncOptions {
  EMBER_ARG(double, p) = 2.0;
  EMBER_ARG(int64_t, dim) = 1;
  EMBER_ARG(double, eps) = 1e-12;
};
struct LocalResponseNormOptions {
  /* implicit */ LocalResponseNormOptions(int64_t size) : size_(size) {}  // NOLINT
  EMBER_ARG(int64_t, size);
  EMBER_ARG(double, alpha) = 1e-4;
  EMBER_ARG(double, beta) = 0.75;
  EMBER_ARG(double, k) = 1.0;
};

namespace functional {

using CosineSimilarityFuncOptions = CosineSimilarityOptions;
using PairwiseDistanceFuncOptions = PairwiseDistanceOptions;
using NormalizeFuncOptions = ::ember::nn::NormalizeFuncOptions;
using LocalResponseNormFuncOptions = LocalResponseNormOptions;

// sum(x1 x2) / sqrt(max(sum(x1^2) sum(x2^2), eps^2)) along dim; x1 and x2 broadcast.
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2,
                         const CosineSimilarityFuncOptions& options = {});
// ||x1 - x2 + eps||_p over the last dim; x1 and x2 broadcast.
Tensor pairwise_distance(const Tensor& x1, const Tensor& x2,
                         const PairwiseDistanceFuncOptions& options = {});
// x1 [..., P, M], x2 [..., R, M] -> [..., P, R]: the p-norm distances (p >= 0) between rows;
// batch dims broadcast (torch::cdist).
Tensor cdist(const Tensor& x1, const Tensor& x2, double p = 2.0);
// x / max(||x||_p along dim, eps).
Tensor normalize(const Tensor& x, const NormalizeFuncOptions& options = {});
// x / (k + alpha / size * sum of x^2 over `size` neighbouring channels)^beta; x [N, C, ...] of at
// least 3 dims; the window of channel c covers c - size/2 .. c + (size-1)/2, zero padded.
Tensor local_response_norm(const Tensor& x, const LocalResponseNormFuncOptions& options);

}  // namespace functional

class LocalResponseNormImpl : public Module {
 public:
  EMBER_CLONEABLE(LocalResponseNormImpl);
  explicit LocalResponseNormImpl(const LocalResponseNormOptions& options)
      : Module("LocalResponseNorm"), options(options) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  LocalResponseNormOptions options;
};
EMBER_MODULE(LocalResponseNorm);

}  // namespace ember::nn
