// softmax and log_softmax over any dim, the fused softmax cross-entropy and nll_loss, and below them
// the kernel interfaces: SoftmaxProblem (chosen among by the algorithm cache: warp per row, block
// per row with the row in shared memory, block per row re-reading global memory, several blocks
// per row for very long rows, a cluster of blocks per row sharing statistics through distributed
// shared memory, a persistent block per SM streaming rows through a TMA-fed ring (forward), and a
// thread per column when the reduced dim is not innermost) and
// the cross-entropy kernel tables. CPU kernels live in cpu_kernels/softmax.cpp, CUDA kernels in
// cuda_kernels/softmax.cu.
#pragma once
#include <cstdint>

#include "ember/dispatch/algo_cache.h"
#include "ember/dispatch/registry.h"
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

enum class LossReduction : uint8_t { none, mean, sum };

struct CrossEntropyOptions {
  Tensor weight;               // [C] class weights (floating), or undefined for all ones
  int64_t ignore_index = -100; // targets equal to it contribute no loss and no gradient
  double label_smoothing = 0;  // in [0, 1]
  LossReduction reduction = LossReduction::mean;
  CrossEntropyOptions& with_weight(Tensor w) { weight = std::move(w); return *this; }
  CrossEntropyOptions& with_ignore_index(int64_t i) { ignore_index = i; return *this; }
  CrossEntropyOptions& with_label_smoothing(double s) { label_smoothing = s; return *this; }
  CrossEntropyOptions& with_reduction(LossReduction r) { reduction = r; return *this; }
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

struct NllLossOptions {
  Tensor weight;
  int64_t ignore_index = -100;
  LossReduction reduction = LossReduction::mean;
  NllLossOptions& with_weight(Tensor w) { weight = std::move(w); return *this; }
  NllLossOptions& with_ignore_index(int64_t i) { ignore_index = i; return *this; }
  NllLossOptions& with_reduction(LossReduction r) { reduction = r; return *this; }
};
// torch.nn.functional.nll_loss: loss = -w[t] * input[t] for log-probabilities `input` (shapes as
// cross_entropy), with the same reductions, ignore_index and error reporting.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options = {});

// The device error code of an out-of-range class index (details: the index, the class count).
inline constexpr int kDeviceErrorClassIndexOutOfRange = 1010;

// ---- softmax kernel interface (algorithm cache) -----------------------------------------------

// One softmax computation over memory viewed as [outer, dim_size, inner] (inner = the element
// stride of the reduced dim): every tensor has the same dense layout and dtype.
//   forward:  reads input = x,                        writes output = y
//   backward: reads input = y (the forward output) and grad_output = dL/dy, writes output = dL/dx
//             (softmax: y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g))
// The written tensor is overwritten, never accumulated into.
struct SoftmaxProblem {
  dispatch::Direction direction = dispatch::Direction::forward;  // forward or backward
  bool log = false;
  Tensor input;
  Tensor grad_output;  // backward only
  Tensor output;
  int64_t outer = 1, dim_size = 1, inner = 1;

  Device device() const { return input.device(); }
  SoftmaxProblem with_scratch_outputs() const;
};

dispatch::OpId softmax_op();
dispatch::AlgoSlot& softmax_slot(dispatch::Direction direction, DeviceType device_type);
dispatch::AlgoKey softmax_key(const SoftmaxProblem& problem);
// The algorithm the cache picks for `problem` under the current settings (tests, introspection).
const dispatch::Algorithm<SoftmaxProblem>& softmax_choose(const SoftmaxProblem& problem);
// Chooses through algo_cache() and runs.
void softmax_run(const SoftmaxProblem& problem);

// ---- cross-entropy kernel interface -----------------------------------------------------------

// Logits (or log-probabilities) viewed as [outer, classes, inner]: element (n, c, s) at
// (n * classes + c) * inner + s of a dense buffer; row r = n * inner + s is one prediction and
// target / per-row tensors are indexed by r (that is target's logical order for both the
// contiguous [N, C, d...] layout, inner = d1*..., and class-innermost layouts such as a 2-D
// [N, C] or channels_last input, where inner = 1 and outer = N * d1 * ...).
struct CrossEntropyArgs {
  Tensor input;          // logits (input_is_log_probs false) or log-probabilities (nll_loss)
  Tensor target;         // int64 [rows], dense
  // Per-row tensors and weights are of the accumulation dtype: float32, or float64 for float64
  // input (so that fp64 gradient checks see fp64 losses).
  Tensor weight;         // [classes], dense, or undefined (all ones)
  int64_t outer = 0, classes = 0, inner = 1;
  int64_t ignore_index = -100;
  double label_smoothing = 0;
  bool input_is_log_probs = false;  // nll_loss: no log-sum-exp, no smoothing
  // Forward outputs, [rows] dense: the unreduced loss, the log-sum-exp (0 for nll_loss)
  // and w[t] (0 for ignored rows; the mean's divisor is their sum).
  Tensor loss, lse, target_weight;
  // Backward: d(total)/d(loss[r]) at row_scale[r * row_scale_stride] (stride 0 for the mean and
  // sum reductions), sum of the weights (0-d; undefined without weights or smoothing), and
  // the written gradient (the input's dtype and layout).
  Tensor row_scale;
  int64_t row_scale_stride = 0;
  Tensor weight_sum;
  Tensor grad_input;
};
// Reads input, target, weight; writes loss, lse, target_weight. Throws (CPU) or reports
// kDeviceErrorClassIndexOutOfRange (CUDA) for a target outside [0, classes) that is not
// ignore_index; such rows are then treated as ignored. Selected by the input's dtype.
using CrossEntropyForwardKernel = void (*)(const CrossEntropyArgs& args);
EMBER_DECLARE_KERNEL(cross_entropy_forward_kernel, CrossEntropyForwardKernel)
// Reads input, target, weight, weight_sum, lse, row_scale; writes grad_input.
using CrossEntropyBackwardKernel = void (*)(const CrossEntropyArgs& args);
EMBER_DECLARE_KERNEL(cross_entropy_backward_kernel, CrossEntropyBackwardKernel)

}  // namespace ember
