// ctc_loss, as torch.nn.functional.ctc_loss: the Connectionist Temporal Classification loss of
// Graves et al., computed by the alpha-beta recursion in log space (kernels in
// cpu_kernels/ctc_loss.cpp and cuda_kernels/softmax/ctc_loss.cu, interface in
// kernel_interface/ctc_loss.h).
#pragma once
#include <cstdint>
#include <vector>

#include "ember/ops/softmax.h"
#include "ember/tensor/tensor.h"

namespace ember {

// ctc_loss's options, with PyTorch's defaults.
struct CtcLossParams {
  int64_t blank = 0;  // the blank label, a class index in [0, C)
  // none: the loss per sample [N]; mean: each loss divided by its target length (at least 1),
  // then averaged over the batch; sum: their sum.
  LossReduction reduction = LossReduction::mean;
  // Infinite losses (inputs too short for their targets) and their gradients become zero.
  bool zero_infinity = false;
};

// log_probs [T, N, C] float32/float64 (log-softmaxed over C; [T, C] for one unbatched sample);
// targets int32/int64, padded [N, S] or the N targets concatenated [sum(target_lengths)] (an
// unbatched sample: [S]); input_lengths and target_lengths int32/int64 [N] (0-d or [1] unbatched),
// on any device (they are read on the host, as PyTorch does). input_lengths[b] <= T; target
// labels are class indices other than blank. The gradient with respect to log_probs is
// PyTorch's: the gradient with respect to the logits of the log_softmax that produced log_probs
// (so autograd through log_softmax gives the exact derivative). No double backward, as PyTorch.
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, const CtcLossParams& p = {});
// The same with the lengths given as host lists.
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets,
                const std::vector<int64_t>& input_lengths,
                const std::vector<int64_t>& target_lengths, const CtcLossParams& p = {});

}  // namespace ember
