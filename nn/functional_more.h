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

// The options of cosine_similarity, as F.cosine_similarity's arguments (with their defaults).
struct CosineSimilarityOptions {
  EMBER_ARG(int64_t, dim) = 1;    // the dim reduced (the vectors' dim)
  EMBER_ARG(double, eps) = 1e-8;  // a floor on the norms' product, against division by zero
};
// The options of pairwise_distance, as F.pairwise_distance's arguments (with their defaults).
struct PairwiseDistanceOptions {
  EMBER_ARG(double, p) = 2.0;        // the norm's order
  EMBER_ARG(double, eps) = 1e-6;     // added to the difference, against a zero norm's gradient
  EMBER_ARG(bool, keepdim) = false;  // keep the reduced last dim as size 1
};
// The options of normalize, as F.normalize's arguments (with their defaults).
struct NormalizeFuncOptions {
  EMBER_ARG(double, p) = 2.0;      // the norm's order
  EMBER_ARG(int64_t, dim) = 1;     // the dim normalized along
  EMBER_ARG(double, eps) = 1e-12;  // a floor on the norm, against division by zero
};
// The options of local_response_norm and LocalResponseNorm, as PyTorch's arguments.
struct LocalResponseNormOptions {
  // Implicit from size, so `LocalResponseNorm(5)` works; the rest default as PyTorch's.
  /* implicit */ LocalResponseNormOptions(int64_t size) : size_(size) {}  // NOLINT
  EMBER_ARG(int64_t, size);         // channels in each window, > 0
  EMBER_ARG(double, alpha) = 1e-4;  // the multiplicative factor
  EMBER_ARG(double, beta) = 0.75;   // the exponent
  EMBER_ARG(double, k) = 1.0;       // the additive constant
};

namespace functional {

// libtorch's names for the functionals' options (F::CosineSimilarityFuncOptions, ...).
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

// local_response_norm as a module, as torch.nn.LocalResponseNorm (AlexNet's normalization).
class LocalResponseNormImpl : public Module {
 public:
  // clone() builds a fresh LocalResponseNormImpl from options.
  EMBER_CLONEABLE(LocalResponseNormImpl);
  // From options or from size alone (`LocalResponseNorm(5)`).
  explicit LocalResponseNormImpl(const LocalResponseNormOptions& options)
      : Module("LocalResponseNorm"), options(options) {}
  // x [N, C, *] (at least 3 dims) -> the same shape.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  LocalResponseNormOptions options;  // the options it was built with
};
EMBER_MODULE(LocalResponseNorm);

}  // namespace ember::nn
