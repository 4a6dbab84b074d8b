// The softmax and cross-entropy kernel interface: SoftmaxProblem, the problem of the "softmax"
// algorithm slots (forward and backward; the algorithm cache picks among warp per row, block per
// row with the row in shared memory, block per row re-reading global memory, several blocks per
// row for very long rows, a cluster of blocks per row sharing statistics through distributed
// shared memory, a persistent block per SM streaming rows through a TMA-fed ring (forward), and a
// thread per column when the reduced dim is not innermost), and CrossEntropyArgs with the
// cross-entropy / nll_loss kernel tables. The ops are in ops/softmax.h; CPU kernels in
// cpu_kernels/softmax.cpp, CUDA kernels in cuda_kernels/softmax/.
#pragma once
#include <cstdint>

#include "ember/dispatch/algo_cache.h"
#include "ember/dispatch/registry.h"
#include "ember/tensor/tensor.h"

namespace ember {

// The device error code of an out-of-range class index (details: the index, the class count).
inline constexpr int kDeviceErrorClassIndexOutOfRange = 1010;

// ---- softmax (algorithm cache) ----------------------------------------------------------------

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

// ---- cross-entropy ----------------------------------------------------------------------------

// Logits (or log-probabilities) viewed as [outer, classes, inner]: element (n, c, s) at
// (n * classes + c) * inner + s of a dense buffer; row r = n * inner + s is one prediction and
// target / per-row tensors are indexed by r (that is target's logical order for both the
// contiguous [N, C, d...] layout, inner = d1*..., and class-innermost layouts such as a 2-D
// [N, C] or channels_last input, where inner = 1 and outer = N * d1 * ...).
struct CrossEntropyArgs {
  Tensor input;   // logits (input_is_log_probs false) or log-probabilities (nll_loss)
  Tensor target;  // int64 [rows], dense
  // Per-row tensors and weights are of the accumulation dtype: float32, or float64 for float64
  // input (so that fp64 gradient checks see fp64 losses).
  Tensor weight;  // [classes], dense, or undefined (all ones)
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
