// The CTC loss kernel interface: CtcLossArgs and the forward / backward tables. The op
// (ops/ctc_loss.cpp) validates the lengths on the host and lays the targets out concatenated, so
// the kernels see one layout. CPU kernels in cpu_kernels/ctc_loss.cpp (the reference), CUDA ones
// in cuda_kernels/softmax/ctc_loss.cu. float32 and float64 only, as PyTorch.
#pragma once
#include <cstdint>

#include "ember/dispatch/registry.h"
#include "ember/tensor/tensor.h"

namespace ember {

// Sample b reads log_probs[0 .. input_lengths[b] - 1, b, :] and the labels
// targets[target_offsets[b] .. target_offsets[b] + target_lengths[b] - 1]. The extended label
// sequence l' of a sample is blank, l1, blank, l2, ..., lS, blank (2S + 1 entries); log_alpha
// [N, T, 2 * max_target_length + 1] holds the forward variables in log space (entries past a
// sample's lengths are unspecified).
struct CtcLossArgs {
  Tensor log_probs;       // [T, N, C], dense, float32 or float64
  Tensor targets;         // [total], int64, dense, labels in [0, C) other than blank
  Tensor input_lengths;   // [N], int64, on log_probs' device, each in [0, T]
  Tensor target_lengths;  // [N], int64, on log_probs' device, each in [0, max_target_length]
  Tensor target_offsets;  // [N], int64, on log_probs' device
  int64_t max_target_length = 0;
  int64_t blank = 0;
  // Backward only: a sample whose loss is infinite gets a zero gradient (the op zeroes the loss
  // itself; the forward kernel writes the infinite value).
  bool zero_infinity = false;
  // Forward outputs (overwritten): the loss -log p(target | input) per sample [N] (infinite when
  // no alignment exists; 0 for an empty input with an empty target) and log_alpha.
  Tensor neg_log_likelihood, log_alpha;
  // Backward: grad_output [N] dense, the gradient of each sample's loss; grad_log_probs [T, N, C]
  // dense, overwritten with PyTorch's gradient exp(lp) - exp(log(sum over s with l'_s = c of
  // alpha_t(s) beta_t(s)) + nll - lp), scaled by grad_output, zero for t >= input_length. It is
  // the gradient with respect to the logits of a log_softmax whose output is log_probs (the
  // exp(lp) term is what log_softmax's backward would add), as PyTorch's.
  Tensor grad_output, grad_log_probs;
};

// A label outside [0, C) throws (CPU) or is reported through the device error flag (CUDA).
using CtcLossForwardKernel = void (*)(const CtcLossArgs& args);
EMBER_DECLARE_KERNEL(ctc_loss_forward_kernel, CtcLossForwardKernel)
using CtcLossBackwardKernel = void (*)(const CtcLossArgs& args);
EMBER_DECLARE_KERNEL(ctc_loss_backward_kernel, CtcLossBackwardKernel)

}  // namespace ember
