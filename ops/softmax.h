// softmax and log_softmax over any dim, the fused softmax cross-entropy and nll_loss. Their kernel
// interface (SoftmaxProblem and its algorithm slots, the cross-entropy kernel tables) is
// kernel_interface/softmax.h; CPU kernels live in cpu_kernels/softmax.cpp, CUDA kernels in
// cuda_kernels/softmax/.
#pragma once
#include <cstdint>

#include "ember/kernel_interface/softmax.h"
#include "ember/tensor/tensor.h"

namespace ember {

// ---- softmax ----------------------------------------------------------------------------------

// y = exp(x - max) / sum(exp(x - max)) along `dim` (negative counts from the end). Any floating
// dtype; f16/bf16/f32 accumulate in f32. The output has the input's shape, dtype and, when the
// input is dense (contiguous, channels_last, or any permutation of a contiguous tensor), its
// strides: no transpose copy is made for a non-last dim. A row of -inf gives NaN, as in PyTorch.
Tensor softmax(const Tensor& x, int64_t dim);
// y = x - max - log(sum(exp(x - max))) along `dim`.
Tensor log_softmax(const Tensor& x, int64_t dim);

// ---- losses -----------------------------------------------------------------------------------

// How a loss reduces its per-element values, as PyTorch's reduction= string: none keeps them
// (shaped like the target), mean averages them (weighted losses divide by the summed weights),
// sum adds them.
enum class LossReduction : uint8_t { none, mean, sum };

// The options of cross_entropy, with PyTorch's defaults; set them in a chain:
// CrossEntropyOptions().with_label_smoothing(0.1).with_reduction(LossReduction::sum).
struct CrossEntropyOptions {
  Tensor weight;                // [C] class weights (floating), or undefined for all ones
  int64_t ignore_index = -100;  // targets equal to it contribute no loss and no gradient
  double label_smoothing = 0;   // in [0, 1]
  LossReduction reduction = LossReduction::mean;  // none, mean (the default) or sum
  // Sets weight (a [C] floating tensor, or undefined for all ones) and returns *this.
  CrossEntropyOptions& with_weight(Tensor w) {
    weight = std::move(w);
    return *this;
  }
  // Sets ignore_index (default -100) and returns *this.
  CrossEntropyOptions& with_ignore_index(int64_t i) {
    ignore_index = i;
    return *this;
  }
  // Sets label_smoothing (in [0, 1], default 0) and returns *this.
  CrossEntropyOptions& with_label_smoothing(double s) {
    label_smoothing = s;
    return *this;
  }
  // Sets reduction (default mean) and returns *this.
  CrossEntropyOptions& with_reduction(LossReduction r) {
    reduction = r;
    return *this;
  }
};

// torch.nn.functional.cross_entropy with class-index targets, fused: one read of the logits in the
// forward (log-sum-exp, the target logit and, with label smoothing, the weighted sum of logits;
// the per-row log-sum-exp is saved), one read and one write in the backward (the gradient
// (softmax - smoothed one-hot) * weight * upstream, recomputed from the saved log-sum-exp).
//   logits [N, C] or [N, C, d1, ...] (or [C] with a 0-d target), floating
//   target int64 [N] or [N, d1, ...] (or 0-d), class indices in [0, C) or ignore_index
// Per element: loss = (1 - s) * w[t] * (lse - x[t]) + (s / C) * sum_c w[c] * (lse - x[c]), 0
// where t == ignore_index. reduction none: that loss, shaped like target; sum: the sum; mean: the
// sum divided by the sum of w[t] over non-ignored elements (the count without weights), so NaN
// when every target is ignored, as in PyTorch. An out-of-range target throws bad_param; on CUDA
// it is reported through the device error flag at the next sync point (no host sync here).
// Differentiable in logits only.
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const CrossEntropyOptions& options = {});

// The options of nll_loss, with PyTorch's defaults, set in a chain as CrossEntropyOptions.
struct NllLossOptions {
  Tensor weight;                                  // [C] class weights, or undefined for all ones
  int64_t ignore_index = -100;                    // targets equal to it contribute nothing
  LossReduction reduction = LossReduction::mean;  // none, mean (the default) or sum
  // Sets weight (a [C] floating tensor, or undefined for all ones) and returns *this.
  NllLossOptions& with_weight(Tensor w) {
    weight = std::move(w);
    return *this;
  }
  // Sets ignore_index (default -100) and returns *this.
  NllLossOptions& with_ignore_index(int64_t i) {
    ignore_index = i;
    return *this;
  }
  // Sets reduction (default mean) and returns *this.
  NllLossOptions& with_reduction(LossReduction r) {
    reduction = r;
    return *this;
  }
};
// torch.nn.functional.nll_loss: loss = -w[t] * input[t] for log-probabilities `input` (shapes as
// cross_entropy), with the same reductions, ignore_index and error reporting.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options = {});

}  // namespace ember
