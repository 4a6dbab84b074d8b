// Pooling: max (with the argmax indices saved for backward), average (count_include_pad,
// ceil_mode) and adaptive average over 1, 2 or 3 spatial dims, with global average pooling as the
// fast path of adaptive pooling to size 1. NCHW and channels_last (NHWC / NDHWC) inputs; the
// output keeps the input's memory format. All of them run one 3-D kernel (1-D and 2-D problems are
// 3-D problems with unit dims), described below as PoolArgs; CPU kernels live in
// cpu_kernels/pooling.cpp, CUDA kernels in cuda_kernels/pooling.cu.
//
// Sizes follow PyTorch: for each spatial dim, with effective kernel e = dilation * (k - 1) + 1,
//   out = floor((in + 2 * padding - e) / stride) + 1       (ceil instead of floor with ceil_mode,
//   then one less if the last window would start in the right padding),
// padding at most half the kernel, stride defaulting to the kernel size. Integer-list arguments
// take one value for every dim or one per dim.
#pragma once
#include <cstdint>
#include <vector>

#include "ember/dispatch/registry.h"
#include "ember/ops/ops.h"
#include "ember/tensor/tensor.h"

namespace ember {

using IntList = std::vector<int64_t>;

// input [N, C, L] or [C, L]; output [N, C, L_out]. Indices (int64) count positions along L.
Tensor max_pool1d(const Tensor& x, const IntList& kernel_size, const IntList& stride = {},
                  const IntList& padding = {0}, const IntList& dilation = {1}, bool ceil_mode = false);
// input [N, C, H, W] or [C, H, W]. Indices are flat positions h * W + w within each plane, as in
// PyTorch (so max_unpool-style consumers work).
Tensor max_pool2d(const Tensor& x, const IntList& kernel_size, const IntList& stride = {},
                  const IntList& padding = {0}, const IntList& dilation = {1}, bool ceil_mode = false);
ValuesIndices max_pool2d_with_indices(const Tensor& x, const IntList& kernel_size,
                                      const IntList& stride = {}, const IntList& padding = {0},
                                      const IntList& dilation = {1}, bool ceil_mode = false);
// input [N, C, D, H, W] or [C, D, H, W]; indices d * H * W + h * W + w.
Tensor max_pool3d(const Tensor& x, const IntList& kernel_size, const IntList& stride = {},
                  const IntList& padding = {0}, const IntList& dilation = {1}, bool ceil_mode = false);

// Mean over each window. Windows in the padding count it (count_include_pad) or not; a ceil_mode
// window hanging past the right padding never counts the part beyond it (PyTorch's rule).
Tensor avg_pool1d(const Tensor& x, const IntList& kernel_size, const IntList& stride = {},
                  const IntList& padding = {0}, bool ceil_mode = false, bool count_include_pad = true);
Tensor avg_pool2d(const Tensor& x, const IntList& kernel_size, const IntList& stride = {},
                  const IntList& padding = {0}, bool ceil_mode = false, bool count_include_pad = true);
Tensor avg_pool3d(const Tensor& x, const IntList& kernel_size, const IntList& stride = {},
                  const IntList& padding = {0}, bool ceil_mode = false, bool count_include_pad = true);

// Output cell o of a dim of input size I and output size O averages [floor(o I / O),
// ceil((o + 1) I / O)). Output size 1 everywhere is global average pooling (a fast path).
Tensor adaptive_avg_pool1d(const Tensor& x, const IntList& output_size);
Tensor adaptive_avg_pool2d(const Tensor& x, const IntList& output_size);
Tensor adaptive_avg_pool3d(const Tensor& x, const IntList& output_size);
// Mean over all spatial dims, keeping them as size 1: [N, C, H, W] -> [N, C, 1, 1].
Tensor global_avg_pool2d(const Tensor& x);

// ---- kernel interface -------------------------------------------------------------------------

enum class PoolMode : uint8_t { max, avg, adaptive_avg };

// One pooling computation over 5-D [N, C, D, H, W] views (unit dims for 1-D and 2-D pooling):
//   forward:  reads input, writes output (and, for max, indices at the output's offsets, in one
//             of two encodings chosen by their dtype, see below);
//   backward: reads output (= dL/doutput) and, for max, indices; writes input (= dL/dinput,
//             overwritten, not accumulated), each input element gathering from the windows that
//             contain it (no atomics: deterministic).
// Max pooling's indices say which input element each output took:
//   int64: its flat position d * H * W + h * W + w in the input plane (PyTorch's convention, for
//          users who ask for the indices);
//   uint8: its tap inside the window, (kd * kernel_h + kh) * kernel_w + kw, the element at
//          (od * stride - padding + kd * dilation, ...) per dim: autograd's private record, an
//          eighth of the bytes, usable when the window has at most kPoolMaxTapsU8 taps;
//   uint8, packed (packed_taps): the same taps, two a byte, where the window has at most
//          kPoolMaxTapsU4 taps, the output is dense channels_last with an even channel count and
//          the device's forward writes them so (pool_packs_taps_kernel says): the tap of the output
//          element at memory offset o is bits 4 * (o % 2) .. +3 of byte o / 2, so the indices are a
//          [N, C / 2, ...] channels_last tensor. Autograd's record for ResNet's 3x3 stem pool on
//          the GPU: a sixteenth of int64's bytes, half of uint8's;
//   undefined (max pooling only when nobody needs them): the forward writes no indices.
// Strides are in elements, n c d h w order, and may be anything (the tensors' own strides);
// channels_last says that C is the innermost dim in memory, so kernels walk channels fastest.
struct PoolArgs {
  PoolMode mode = PoolMode::max;
  int64_t batch = 0, channels = 0;
  int64_t in_size[3] = {1, 1, 1}, out_size[3] = {1, 1, 1};
  int64_t kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, padding[3] = {0, 0, 0},
          dilation[3] = {1, 1, 1};
  bool count_include_pad = true;
  bool channels_last = false;
  bool packed_taps = false;  // uint8 taps two a byte (above)
  Tensor input, output, indices;
  int64_t in_strides[5] = {}, out_strides[5] = {};
};
// The most taps (kernel_d * kernel_h * kernel_w) a window may have for uint8 tap indices.
inline constexpr int64_t kPoolMaxTapsU8 = 256;
// The most taps a window may have for packed taps (4 bits each).
inline constexpr int64_t kPoolMaxTapsU4 = 16;
using PoolKernel = void (*)(const PoolArgs& args);
EMBER_DECLARE_KERNEL(pool_forward_kernel, PoolKernel)   // selected by the input's dtype
EMBER_DECLARE_KERNEL(pool_backward_kernel, PoolKernel)  // selected by the gradients' dtype
// Whether the forward kernel writes the uint8 taps of max pooling `args` (input and output set,
// indices not yet allocated) packed: false outside the packed encoding's limits (above); registered
// where a device's kernels can pack (CUDA), absent elsewhere (no packing).
using PoolPacksTaps = bool (*)(const PoolArgs& args);
EMBER_DECLARE_KERNEL(pool_packs_taps_kernel, PoolPacksTaps)

}  // namespace ember
