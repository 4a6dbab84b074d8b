// Pooling: max (with the argmax indices saved for backward), average (count_include_pad,
// ceil_mode) and adaptive average over 1, 2 or 3 spatial dims, with global average pooling as the
// fast path of adaptive pooling to size 1. NCHW and channels_last (NHWC / NDHWC) inputs; the
// output keeps the input's memory format. All of them are one 3-D problem (1-D and 2-D problems
// are 3-D problems with unit dims), described as PoolArgs in kernel_interface/pooling.h; the
// algorithm cache chooses its algorithm: the CPU one (cpu_kernels/pooling.cpp) or a CUDA one
// (cuda_kernels/pooling/: channels_last fast kernels, generic 5-D kernels).
//
// Sizes follow PyTorch: for each spatial dim, with effective kernel e = dilation * (k - 1) + 1,
//   out = floor((in + 2 * padding - e) / stride) + 1       (ceil instead of floor with ceil_mode,
//   then one less if the last window would start in the right padding),
// padding at most half the kernel, stride defaulting to the kernel size. Integer-list arguments
// take one value for every dim or one per dim.
#pragma once
#include <cstdint>
#include <vector>

#include "ember/dispatch/algo_cache.h"
#include "ember/kernel_interface/pooling.h"
#include "ember/ops/ops.h"
#include "ember/tensor/tensor.h"

namespace ember {

// A per-axis size list (kernel_size, stride, padding, dilation): one value applies to every
// spatial axis, or one per axis; an empty stride means stride = kernel_size, as in PyTorch.
using IntList = std::vector<int64_t>;

// input [N, C, L] or [C, L]; output [N, C, L_out]. Indices (int64) count positions along L.
Tensor max_pool1d(const Tensor& x, const IntList& kernel_size, const IntList& stride = {},
                  const IntList& padding = {0}, const IntList& dilation = {1},
                  bool ceil_mode = false);
ValuesIndices max_pool1d_with_indices(const Tensor& x, const IntList& kernel_size,
                                      const IntList& stride = {}, const IntList& padding = {0},
                                      const IntList& dilation = {1}, bool ceil_mode = false);
// input [N, C, H, W] or [C, H, W]. Indices are flat positions h * W + w within each plane, as in
// PyTorch (so max_unpool-style consumers work).
Tensor max_pool2d(const Tensor& x, const IntList& kernel_size, const IntList& stride = {},
                  const IntList& padding = {0}, const IntList& dilation = {1},
                  bool ceil_mode = false);
ValuesIndices max_pool2d_with_indices(const Tensor& x, const IntList& kernel_size,
                                      const IntList& stride = {}, const IntList& padding = {0},
                                      const IntList& dilation = {1}, bool ceil_mode = false);
// input [N, C, D, H, W] or [C, D, H, W]; indices d * H * W + h * W + w.
Tensor max_pool3d(const Tensor& x, const IntList& kernel_size, const IntList& stride = {},
                  const IntList& padding = {0}, const IntList& dilation = {1},
                  bool ceil_mode = false);
ValuesIndices max_pool3d_with_indices(const Tensor& x, const IntList& kernel_size,
                                      const IntList& stride = {}, const IntList& padding = {0},
                                      const IntList& dilation = {1}, bool ceil_mode = false);

// Mean over each window. Windows in the padding count it (count_include_pad) or not; a ceil_mode
// window hanging past the right padding never counts the part beyond it (PyTorch's rule).
Tensor avg_pool1d(const Tensor& x, const IntList& kernel_size, const IntList& stride = {},
                  const IntList& padding = {0}, bool ceil_mode = false,
                  bool count_include_pad = true);
Tensor avg_pool2d(const Tensor& x, const IntList& kernel_size, const IntList& stride = {},
                  const IntList& padding = {0}, bool ceil_mode = false,
                  bool count_include_pad = true);
Tensor avg_pool3d(const Tensor& x, const IntList& kernel_size, const IntList& stride = {},
                  const IntList& padding = {0}, bool ceil_mode = false,
                  bool count_include_pad = true);

// Output cell o of a dim of input size I and output size O averages [floor(o I / O),
// ceil((o + 1) I / O)). Output size 1 everywhere is global average pooling (a fast path).
Tensor adaptive_avg_pool1d(const Tensor& x, const IntList& output_size);
Tensor adaptive_avg_pool2d(const Tensor& x, const IntList& output_size);
Tensor adaptive_avg_pool3d(const Tensor& x, const IntList& output_size);
// Mean over all spatial dims, keeping them as size 1: [N, C, H, W] -> [N, C, 1, 1].
Tensor global_avg_pool2d(const Tensor& x);

// ---- algorithm cache glue ----------------------------------------------------------------------
// Every pooling call is a PoolProblem (kernel_interface/pooling.h) whose algorithm the algorithm
// cache chooses in the slot "pooling.forward" or "pooling.backward" of its device type. These are
// for tests, benchmarks and introspection; the ops above use them too.

dispatch::OpId pool_op();
dispatch::AlgoSlot& pool_slot(dispatch::Direction direction, DeviceType device_type);
// Sizes, dtypes, dense layouts, window, mode, the indices' encoding and the operands' alignment:
// everything the pooling algorithms' applies() reads.
dispatch::AlgoKey pool_key(const PoolProblem& problem);
// The algorithm the cache picks for `problem` under the current settings.
const dispatch::Algorithm<PoolProblem>& pool_choose(const PoolProblem& problem);
// Chooses through algo_cache() and runs (the indices allocated in problem.indices' encoding).
void pool_run(const PoolProblem& problem);
// For a max pooling forward with uint8 taps not yet allocated (problem.indices == taps_u8):
// whether the algorithm the cache chooses for it writes them packed (the encoding fits and that
// algorithm applies to the packed problem), which is what the op allocates and the backward reads.
bool pool_forward_packs_taps(const PoolProblem& problem);

}  // namespace ember
