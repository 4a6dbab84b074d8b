// Losses, as torch.nn.functional's and torch.nn's: cross_entropy and nll_loss (the fused ops of
// ops/softmax.h), mse_loss, l1_loss and binary_cross_entropy_with_logits, each with reduction
// none / mean / sum, and their module forms (CrossEntropyLoss, NLLLoss, MSELoss, L1Loss,
// BCEWithLogitsLoss). Under autocast every floating input is cast to float32 first (nn/amp.h), so
// the loss is float32.
#pragma once
#include "ember/nn/module.h"
#include "ember/nn/options.h"
#include "ember/ops/softmax.h"

namespace ember::nn {

using ember::CrossEntropyOptions;
using ember::LossReduction;
using ember::NllLossOptions;

// The reduction's PyTorch name: "none", "mean" or "sum" (modules print it).
const char* reduction_name(LossReduction reduction);
// A per-element loss reduced as asked: itself (none), its mean, or its sum.
Tensor apply_reduction(const Tensor& loss, LossReduction reduction);

// logits [N, C] or [N, C, d1, ...] (or [C]), target int64 class indices shaped like logits without
// dim 1; options: weight [C], ignore_index, label_smoothing, reduction (see ops/softmax.h).
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const CrossEntropyOptions& options = {});
// log_probs shaped as cross_entropy's logits; loss = -weight[t] * log_probs[t].
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options = {});
// (input - target)^2; input and target of one shape (PyTorch would broadcast a different target
// shape with a warning that the result is likely wrong; Ember refuses it).
Tensor mse_loss(const Tensor& input, const Tensor& target,
                LossReduction reduction = LossReduction::mean);
// |input - target|; the gradient at input == target is 0 (sign(0)), as in PyTorch.
Tensor l1_loss(const Tensor& input, const Tensor& target,
               LossReduction reduction = LossReduction::mean);

// The options of binary_cross_entropy_with_logits, as its PyTorch keyword arguments; set them
// with the with_* builders: `BCEWithLogitsOptions().with_pos_weight(pw)`.
struct BCEWithLogitsOptions {
  Tensor weight;      // broadcast to the input's shape (per element rescaling), or undefined
  Tensor pos_weight;  // broadcast along the last dim (per class weight of the positive term)
  LossReduction reduction = LossReduction::mean;  // none, mean (PyTorch's default) or sum
  // Builders: set weight, pos_weight or reduction and return *this for chaining.
  BCEWithLogitsOptions& with_weight(Tensor w) {
    weight = std::move(w);
    return *this;
  }
  BCEWithLogitsOptions& with_pos_weight(Tensor w) {
    pos_weight = std::move(w);
    return *this;
  }
  BCEWithLogitsOptions& with_reduction(LossReduction r) {
    reduction = r;
    return *this;
  }
};
// loss = -weight * (pos_weight * y * log(sigmoid(x)) + (1 - y) * log(1 - sigmoid(x))), computed
// stably as weight * ((1 - y) * x + (1 + (pos_weight - 1) * y) * softplus(-x)) with
// softplus(-x) = max(-x, 0) + log(1 + exp(-|x|)). input and target of one shape; target may be
// soft (any value in [0, 1]). Differentiable in input and target (not in weight or pos_weight),
// with closed-form gradients: d/dx = weight * (sigmoid(x) * (1 + (pos_weight - 1) * y) -
// pos_weight * y), exact at x = 0 too.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BCEWithLogitsOptions& options = {});

// ---- module forms
// --------------------------------------------------------------------------------- Weight tensors
// are registered as buffers ("weight", "pos_weight"), as in PyTorch, so they follow Module::to and
// appear in the state dict when given.

// The options of CrossEntropyLoss, as torch.nn.CrossEntropyLoss's arguments.
struct CrossEntropyLossOptions {
  EMBER_ARG(Tensor, weight);  // a rescaling weight per class [C], or undefined (all 1)
  // Targets equal to it add no loss and no count to the mean.
  EMBER_ARG(int64_t, ignore_index) = -100;
  // In [0, 1]: the target becomes (1 - label_smoothing) one-hot + label_smoothing / C uniform.
  EMBER_ARG(double, label_smoothing) = 0.0;
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;  // none, mean or sum of the losses
};
// cross_entropy as a module, as torch.nn.CrossEntropyLoss.
class CrossEntropyLossImpl : public Module {
 public:
  // clone() builds a fresh CrossEntropyLossImpl from options.
  EMBER_CLONEABLE(CrossEntropyLossImpl);
  // weight (when given) is registered as the buffer "weight".
  explicit CrossEntropyLossImpl(const CrossEntropyLossOptions& options = {});
  // logits [N, C] (or [N, C, d1, ...], or [C]), target int64 [N] (or [N, d1, ...], or []) ->
  // the loss: a scalar for mean / sum, shaped like target for none.
  Tensor forward(const Tensor& logits, const Tensor& target);
  void pretty_print(std::ostream& os) const override;
  CrossEntropyLossOptions options;  // the options it was built with
  Tensor weight;                    // the "weight" buffer [C], or undefined
};
EMBER_MODULE(CrossEntropyLoss);

// The options of NLLLoss, as torch.nn.NLLLoss's arguments.
struct NLLLossOptions {
  EMBER_ARG(Tensor, weight);  // a rescaling weight per class [C], or undefined (all 1)
  EMBER_ARG(int64_t, ignore_index) = -100;  // targets equal to it add no loss and no count
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;  // none, mean or sum of the losses
};
// nll_loss as a module, as torch.nn.NLLLoss.
class NLLLossImpl : public Module {
 public:
  // clone() builds a fresh NLLLossImpl from options.
  EMBER_CLONEABLE(NLLLossImpl);
  // weight (when given) is registered as the buffer "weight".
  explicit NLLLossImpl(const NLLLossOptions& options = {});
  // log_probs [N, C] (or [N, C, d1, ...], or [C]), target int64 [N] (or [N, d1, ...]) -> a
  // scalar for mean / sum, shaped like target for none.
  Tensor forward(const Tensor& log_probs, const Tensor& target);
  void pretty_print(std::ostream& os) const override;
  NLLLossOptions options;  // the options it was built with
  Tensor weight;           // the "weight" buffer [C], or undefined
};
EMBER_MODULE(NLLLoss);

// The options of MSELoss, as torch.nn.MSELoss's arguments.
struct MSELossOptions {
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;  // none, mean or sum of the losses
};
// mse_loss as a module, as torch.nn.MSELoss.
class MSELossImpl : public Module {
 public:
  // clone() builds a fresh MSELossImpl from options.
  EMBER_CLONEABLE(MSELossImpl);
  // Default as PyTorch: reduction mean.
  explicit MSELossImpl(const MSELossOptions& options = {}) : Module("MSELoss"), options(options) {}
  // input and target of one shape -> a scalar (mean / sum) or that shape (none).
  Tensor forward(const Tensor& input, const Tensor& target) {
    return mse_loss(input, target, options.reduction());
  }
  void pretty_print(std::ostream& os) const override;
  MSELossOptions options;  // the options it was built with
};
EMBER_MODULE(MSELoss);

// The options of L1Loss, as torch.nn.L1Loss's arguments.
struct L1LossOptions {
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;  // none, mean or sum of the losses
};
// l1_loss as a module, as torch.nn.L1Loss.
class L1LossImpl : public Module {
 public:
  // clone() builds a fresh L1LossImpl from options.
  EMBER_CLONEABLE(L1LossImpl);
  // Default as PyTorch: reduction mean.
  explicit L1LossImpl(const L1LossOptions& options = {}) : Module("L1Loss"), options(options) {}
  // input and target of one shape -> a scalar (mean / sum) or that shape (none).
  Tensor forward(const Tensor& input, const Tensor& target) {
    return l1_loss(input, target, options.reduction());
  }
  void pretty_print(std::ostream& os) const override;
  L1LossOptions options;  // the options it was built with
};
EMBER_MODULE(L1Loss);

// The options of BCEWithLogitsLoss, as torch.nn.BCEWithLogitsLoss's arguments.
struct BCEWithLogitsLossOptions {
  EMBER_ARG(Tensor, weight);      // per-element rescaling, broadcast to the input, or undefined
  EMBER_ARG(Tensor, pos_weight);  // per-class weight of the positive term (last dim), or undefined
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;  // none, mean or sum of the losses
};
// binary_cross_entropy_with_logits as a module, as torch.nn.BCEWithLogitsLoss.
class BCEWithLogitsLossImpl : public Module {
 public:
  // clone() builds a fresh BCEWithLogitsLossImpl from options.
  EMBER_CLONEABLE(BCEWithLogitsLossImpl);
  // weight and pos_weight (when given) are registered as buffers of those names.
  explicit BCEWithLogitsLossImpl(const BCEWithLogitsLossOptions& options = {});
  // input (logits) and target (probabilities in [0, 1]) of one shape -> a scalar (mean /
  // sum) or that shape (none).
  Tensor forward(const Tensor& input, const Tensor& target);
  void pretty_print(std::ostream& os) const override;
  BCEWithLogitsLossOptions options;  // the options it was built with
  // The "weight" and "pos_weight" buffers, or undefined when not given.
  Tensor weight, pos_weight;  // pos_weight: the "pos_weight" buffer, or undefined
};
EMBER_MODULE(BCEWithLogitsLoss);

}  // namespace ember::nn
