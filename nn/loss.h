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

struct BCEWithLogitsOptions {
  Tensor weight;      // broadcast to the input's shape (per element rescaling), or undefined
  Tensor pos_weight;  // broadcast along the last dim (per class weight of the positive term)
  LossReduction reduction = LossReduction::mean;
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

struct CrossEntropyLossOptions {
  EMBER_ARG(Tensor, weight);
  EMBER_ARG(int64_t, ignore_index) = -100;
  EMBER_ARG(double, label_smoothing) = 0.0;
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;
};
class CrossEntropyLossImpl : public Module {
 public:
  EMBER_CLONEABLE(CrossEntropyLossImpl);
  explicit CrossEntropyLossImpl(const CrossEntropyLossOptions& options = {});
  Tensor forward(const Tensor& logits, const Tensor& target);
  void pretty_print(std::ostream& os) const override;
  CrossEntropyLossOptions options;
  Tensor weight;
};
EMBER_MODULE(CrossEntropyLoss);

struct NLLLossOptions {
  EMBER_ARG(Tensor, weight);
  EMBER_ARG(int64_t, ignore_index) = -100;
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;
};
class NLLLossImpl : public Module {
 public:
  EMBER_CLONEABLE(NLLLossImpl);
  explicit NLLLossImpl(const NLLLossOptions& options = {});
  Tensor forward(const Tensor& log_probs, const Tensor& target);
  void pretty_print(std::ostream& os) const override;
  NLLLossOptions options;
  Tensor weight;
};
EMBER_MODULE(NLLLoss);

struct MSELossOptions {
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;
};
class MSELossImpl : public Module {
 public:
  EMBER_CLONEABLE(MSELossImpl);
  explicit MSELossImpl(const MSELossOptions& options = {}) : Module("MSELoss"), options(options) {}
  Tensor forward(const Tensor& input, const Tensor& target) {
    return mse_loss(input, target, options.reduction());
  }
  void pretty_print(std::ostream& os) const override;
  MSELossOptions options;
};
EMBER_MODULE(MSELoss);

struct L1LossOptions {
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;
};
class L1LossImpl : public Module {
 public:
  EMBER_CLONEABLE(L1LossImpl);
  explicit L1LossImpl(const L1LossOptions& options = {}) : Module("L1Loss"), options(options) {}
  Tensor forward(const Tensor& input, const Tensor& target) {
    return l1_loss(input, target, options.reduction());
  }
  void pretty_print(std::ostream& os) const override;
  L1LossOptions options;
};
EMBER_MODULE(L1Loss);

struct BCEWithLogitsLossOptions {
  EMBER_ARG(Tensor, weight);
  EMBER_ARG(Tensor, pos_weight);
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;
};
class BCEWithLogitsLossImpl : public Module {
 public:
  EMBER_CLONEABLE(BCEWithLogitsLossImpl);
  explicit BCEWithLogitsLossImpl(const BCEWithLogitsLossOptions& options = {});
  Tensor forward(const Tensor& input, const Tensor& target);
  void pretty_print(std::ostream& os) const override;
  BCEWithLogitsLossOptions options;
  Tensor weight, pos_weight;
};
EMBER_MODULE(BCEWithLogitsLoss);

}  // namespace ember::nn
