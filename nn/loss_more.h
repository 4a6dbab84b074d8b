// More losses, as torch.nn.functional's and torch.nn's: smooth_l1_loss, huber_loss,
// binary_cross_entropy, kl_div, poisson_nll_loss, gaussian_nll_loss, margin_ranking_loss,
// hinge_embedding_loss, multilabel_soft_margin_loss, multi_margin_loss, cosine_embedding_loss and
// triplet_margin_loss (ember::nn::functional, taking libtorch's *FuncOptions), and their modules
// (SmoothL1Loss, ..., TripletMarginLoss, taking *Options). Reductions none / mean / sum (kl_div
// also batchmean). Composed from differentiable ops; under autocast floating inputs are cast to
// float32 first, as the losses of nn/loss.h.
#pragma once
#include <cstdint>

#include "ember/nn/module.h"
#include "ember/nn/options.h"
#include "ember/ops/softmax.h"

namespace ember::nn {

using ember::LossReduction;

// kl_div's reductions: batchmean divides the sum by the batch size (dim 0), which is the KL
// divergence's value; mean divides by the number of elements (PyTorch's default, kept).
enum class KLDivReduction : uint8_t { none, batchmean, sum, mean };

// The options of smooth_l1_loss / SmoothL1Loss, as torch.nn.SmoothL1Loss's arguments (with their
// defaults).
struct SmoothL1LossOptions {
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;  // none, mean or sum
  EMBER_ARG(double, beta) = 1.0;                              // >= 0; 0 gives l1_loss
};
// The options of huber_loss / HuberLoss, as torch.nn.HuberLoss's arguments (with their defaults).
struct HuberLossOptions {
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;  // none, mean or sum
  EMBER_ARG(double, delta) = 1.0;                             // > 0
};
// The options of binary_cross_entropy / BCELoss, as torch.nn.BCELoss's arguments (with their
// defaults).
struct BCELossOptions {
  EMBER_ARG(Tensor, weight);  // broadcast to the input's shape, or undefined
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;  // none, mean or sum
};
// The options of kl_div / KLDivLoss, as torch.nn.KLDivLoss's arguments (with their defaults).
struct KLDivLossOptions {
  EMBER_ARG(KLDivReduction, reduction) = KLDivReduction::mean;  // see KLDivReduction
  EMBER_ARG(bool, log_target) = false;  // whether the target is given as log-probabilities
};
// The options of poisson_nll_loss / PoissonNLLLoss, as torch.nn.PoissonNLLLoss's arguments (with
// their defaults).
struct PoissonNLLLossOptions {
  EMBER_ARG(bool, log_input) = true;  // the input is log(rate) (loss exp(x) - y x), else the rate
  EMBER_ARG(bool, full) = false;      // add the Stirling term of log(y!)
  EMBER_ARG(double, eps) = 1e-8;      // added inside log(x) when log_input is false
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;  // none, mean or sum
};
// The options of gaussian_nll_loss / GaussianNLLLoss, as torch.nn.GaussianNLLLoss's arguments (with
// their defaults).
struct GaussianNLLLossOptions {
  EMBER_ARG(bool, full) = false;  // add the constant 0.5 log(2 pi)
  EMBER_ARG(double, eps) = 1e-6;  // the variance is clamped to at least eps
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;  // none, mean or sum
};
// The options of margin_ranking_loss / MarginRankingLoss, as PyTorch's arguments (with their
// defaults).
struct MarginRankingLossOptions {
  EMBER_ARG(double, margin) = 0.0;                            // loss max(0, -y (x1 - x2) + margin)
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;  // none, mean or sum
};
// The options of hinge_embedding_loss / HingeEmbeddingLoss, as PyTorch's arguments (with their
// defaults).
struct HingeEmbeddingLossOptions {
  EMBER_ARG(double, margin) = 1.0;  // for y = -1 the loss is max(0, margin - x)
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;  // none, mean or sum
};
// The options of multilabel_soft_margin_loss / MultiLabelSoftMarginLoss, as PyTorch's (with their
// defaults).
struct MultiLabelSoftMarginLossOptions {
  EMBER_ARG(Tensor, weight);                                  // [C], or undefined
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;  // none, mean or sum
};
// The options of multi_margin_loss / MultiMarginLoss, as torch.nn.MultiMarginLoss's arguments (with
// their defaults).
struct MultiMarginLossOptions {
  EMBER_ARG(int64_t, p) = 1;        // 1 or 2
  EMBER_ARG(double, margin) = 1.0;  // the wanted gap between the target's score and the others'
  EMBER_ARG(Tensor, weight);        // [C], or undefined
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;  // none, mean or sum
};
// The options of cosine_embedding_loss / CosineEmbeddingLoss, as PyTorch's arguments (with their
// defaults).
struct CosineEmbeddingLossOptions {
  EMBER_ARG(double, margin) = 0.0;  // for y = -1 the loss is max(0, cos(x1, x2) - margin); [-1, 1]
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;  // none, mean or sum
};
// The options of triplet_margin_loss / TripletMarginLoss, as PyTorch's arguments (with their
// defaults).
struct TripletMarginLossOptions {
  EMBER_ARG(double, margin) = 1.0;  // loss max(d(a, p) - d(a, n) + margin, 0)
  EMBER_ARG(double, p) = 2.0;       // the norm of the pairwise distance d
  EMBER_ARG(double, eps) = 1e-6;    // added to the difference, as pairwise_distance
  EMBER_ARG(bool, swap) = false;    // use min(d(a, n), d(p, n)) (the distance swap)
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;  // none, mean or sum
};

namespace functional {

// libtorch's names for the functionals' options (F::SmoothL1LossFuncOptions, ...): the modules'.
using SmoothL1LossFuncOptions = SmoothL1LossOptions;
using HuberLossFuncOptions = HuberLossOptions;
using BinaryCrossEntropyFuncOptions = BCELossOptions;
using KLDivFuncOptions = KLDivLossOptions;
using PoissonNLLLossFuncOptions = PoissonNLLLossOptions;
using GaussianNLLLossFuncOptions = GaussianNLLLossOptions;
using MarginRankingLossFuncOptions = MarginRankingLossOptions;
using HingeEmbeddingLossFuncOptions = HingeEmbeddingLossOptions;
using MultilabelSoftMarginLossFuncOptions = MultiLabelSoftMarginLossOptions;
using MultiMarginLossFuncOptions = MultiMarginLossOptions;
using CosineEmbeddingLossFuncOptions = CosineEmbeddingLossOptions;
using TripletMarginLossFuncOptions = TripletMarginLossOptions;

// Unless said otherwise, input and target have one shape (Ember refuses a different target shape
// where PyTorch would broadcast it with a warning) and the loss is elementwise before reduction.

// d = |input - target|: 0.5 d^2 / beta where d < beta, d - 0.5 beta elsewhere.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target,
                      const SmoothL1LossFuncOptions& options = {});
// 0.5 d^2 where d < delta, delta (d - 0.5 delta) elsewhere.
Tensor huber_loss(const Tensor& input, const Tensor& target,
                  const HuberLossFuncOptions& options = {});
// -weight (t log(x) + (1 - t) log(1 - x)), each log clamped at -100 as PyTorch (a clamped log
// passes no gradient, so x = 0 or 1 gives finite gradients); input in [0, 1] (checked on the CPU).
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                            const BinaryCrossEntropyFuncOptions& options = {});
// input holds log-probabilities; target probabilities (log-probabilities with log_target):
// t (log t - input), 0 where t == 0.
Tensor kl_div(const Tensor& input, const Tensor& target, const KLDivFuncOptions& options = {});
// log_input: exp(input) - t input; else input - t log(input + eps); full adds Stirling's term
// t log t - t + 0.5 log(2 pi t) where t > 1.
Tensor poisson_nll_loss(const Tensor& input, const Tensor& target,
                        const PoissonNLLLossFuncOptions& options = {});
// 0.5 (log(max(var, eps)) + (input - target)^2 / max(var, eps)) (+ 0.5 log(2 pi) with full); var
// has the input's shape, or it with the last dim 1 or dropped; var must be >= 0. The clamp at eps
// passes the gradient through unchanged, as PyTorch's (which clamps without grad).
Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var,
                         const GaussianNLLLossFuncOptions& options = {});
// max(0, -target (input1 - input2) + margin); target of +-1, all three of one shape.
Tensor margin_ranking_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                           const MarginRankingLossFuncOptions& options = {});
// input where target == 1, max(0, margin - input) where target == -1.
Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target,
                            const HingeEmbeddingLossFuncOptions& options = {});
// input and target [N, C]: -mean over C of weight (t logsigmoid(x) + (1 - t) logsigmoid(-x)),
// a loss per sample [N] before reduction.
Tensor multilabel_soft_margin_loss(const Tensor& input, const Tensor& target,
                                   const MultilabelSoftMarginLossFuncOptions& options = {});
// input [N, C] (or [C]), target int64 class indices [N] (or []): per sample
// sum over i != y of weight[y] max(0, margin - x[y] + x[i])^p / C.
Tensor multi_margin_loss(const Tensor& input, const Tensor& target,
                         const MultiMarginLossFuncOptions& options = {});
// input1, input2 [N, D] (or [D]), target [N] (or []) of +-1: 1 - cos where target == 1,
// max(0, cos - margin) where target == -1; cos over the last dim with 1e-12 added to each squared
// norm, as PyTorch.
Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                             const CosineEmbeddingLossFuncOptions& options = {});
// max(0, margin + d(a, p) - d(a, n)) with d pairwise_distance(p, eps); swap uses
// min(d(a, n), d(p, n)). anchor, positive and negative [N, D] (or [D]).
Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           const TripletMarginLossFuncOptions& options = {});

}  // namespace functional

// ---- modules: forward(input, target) with the options above ----
// Declares loss module Name: options (defaults as PyTorch) and forward(input, target), which
// calls the functional of the same name with them.
#define EMBER_LOSS_MODULE(Name, Options)                                                  \
  class Name##Impl : public Module {                                                      \
   public:                                                                                \
    EMBER_CLONEABLE(Name##Impl);                                                          \
    explicit Name##Impl(const Options& options = {}) : Module(#Name), options(options) {} \
    Tensor forward(const Tensor& input, const Tensor& target);                            \
    void pretty_print(std::ostream& os) const override;                                   \
    Options options;                                                                      \
  };                                                                                      \
  EMBER_MODULE(Name)

// smooth_l1_loss as a module.
EMBER_LOSS_MODULE(SmoothL1Loss, SmoothL1LossOptions);
// huber_loss as a module.
EMBER_LOSS_MODULE(HuberLoss, HuberLossOptions);
// kl_div (input log-probs) as a module.
EMBER_LOSS_MODULE(KLDivLoss, KLDivLossOptions);
// poisson_nll_loss as a module.
EMBER_LOSS_MODULE(PoissonNLLLoss, PoissonNLLLossOptions);
// hinge_embedding_loss as a module.
EMBER_LOSS_MODULE(HingeEmbeddingLoss, HingeEmbeddingLossOptions);

// The weighted losses register their weight as the buffer "weight" (when given), as PyTorch.
#define EMBER_WEIGHTED_LOSS_MODULE(Name, Options)              \
  class Name##Impl : public Module {                           \
   public:                                                     \
    EMBER_CLONEABLE(Name##Impl);                               \
    explicit Name##Impl(const Options& options = {});          \
    Tensor forward(const Tensor& input, const Tensor& target); \
    void pretty_print(std::ostream& os) const override;        \
    Options options;                                           \
    Tensor weight;                                             \
  };                                                           \
  EMBER_MODULE(Name)

// binary_cross_entropy as a module.
EMBER_WEIGHTED_LOSS_MODULE(BCELoss, BCELossOptions);
// multilabel_soft_margin_loss as a module.
EMBER_WEIGHTED_LOSS_MODULE(MultiLabelSoftMarginLoss, MultiLabelSoftMarginLossOptions);
// multi_margin_loss as a module.
EMBER_WEIGHTED_LOSS_MODULE(MultiMarginLoss, MultiMarginLossOptions);

// gaussian_nll_loss as a module, as torch.nn.GaussianNLLLoss.
class GaussianNLLLossImpl : public Module {
 public:
  // clone() builds a fresh GaussianNLLLossImpl from options.
  EMBER_CLONEABLE(GaussianNLLLossImpl);
  // Defaults as PyTorch: full false, eps 1e-6, reduction mean.
  explicit GaussianNLLLossImpl(const GaussianNLLLossOptions& options = {})
      : Module("GaussianNLLLoss"), options(options) {}
  // input (the predicted means), target and var (the predicted variances, broadcast as
  // gaussian_nll_loss says) -> the loss, reduced as options.reduction().
  Tensor forward(const Tensor& input, const Tensor& target, const Tensor& var);
  void pretty_print(std::ostream& os) const override;
  GaussianNLLLossOptions options;  // the options it was built with
};
EMBER_MODULE(GaussianNLLLoss);

// forward(input1, input2, target).
#define EMBER_PAIR_LOSS_MODULE(Name, Options)                                             \
  class Name##Impl : public Module {                                                      \
   public:                                                                                \
    EMBER_CLONEABLE(Name##Impl);                                                          \
    explicit Name##Impl(const Options& options = {}) : Module(#Name), options(options) {} \
    Tensor forward(const Tensor& input1, const Tensor& input2, const Tensor& target);     \
    void pretty_print(std::ostream& os) const override;                                   \
    Options options;                                                                      \
  };                                                                                      \
  EMBER_MODULE(Name)

// margin_ranking_loss as a module.
EMBER_PAIR_LOSS_MODULE(MarginRankingLoss, MarginRankingLossOptions);
// cosine_embedding_loss as a module.
EMBER_PAIR_LOSS_MODULE(CosineEmbeddingLoss, CosineEmbeddingLossOptions);

// triplet_margin_loss as a module, as torch.nn.TripletMarginLoss.
class TripletMarginLossImpl : public Module {
 public:
  // clone() builds a fresh TripletMarginLossImpl from options.
  EMBER_CLONEABLE(TripletMarginLossImpl);
  // Defaults as PyTorch: margin 1, p 2, eps 1e-6, no swap, reduction mean.
  explicit TripletMarginLossImpl(const TripletMarginLossOptions& options = {})
      : Module("TripletMarginLoss"), options(options) {}
  // anchor, positive, negative [N, D] (or [D]) -> the loss, reduced as options.reduction().
  Tensor forward(const Tensor& anchor, const Tensor& positive, const Tensor& negative);
  void pretty_print(std::ostream& os) const override;
  TripletMarginLossOptions options;  // the options it was built with
};
EMBER_MODULE(TripletMarginLoss);

}  // namespace ember::nn
