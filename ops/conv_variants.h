// The convolutions beside conv2d, built on conv2d's kernel interface (ops/conv.h), so every CPU
// and CUDA algorithm of the algorithm cache serves them too:
//   conv1d            conv2d over a height-1 image (views, so autograd flows through conv2d)
//   conv3d            one conv2d per kernel-depth tap over the (depth-subsampled) input slices,
//                     summed (composite: differentiable through its pieces)
//   conv_transpose2d  the adjoint of conv2d: its forward is conv2d's backward-data, its input
//                     gradient conv2d's forward and its weight gradient conv2d's backward-filter
//   conv_transpose1d  conv_transpose2d over a height-1 image (views)
//   conv_transpose3d  one conv_transpose2d over the depth slices with every depth tap's filters
//                     side by side, each tap's outputs added at its output depths (composite:
//                     differentiable through its pieces)
// All accept float32/float64 on the CPU (float16/bfloat16 compute in float32 there) and float32,
// float16, bfloat16 (and float64) on CUDA, like conv2d.
#pragma once
#include <array>
#include <cstdint>

#include "ember/ops/conv.h"

namespace ember {

// conv1d's hyper-parameters, with torch.nn.functional.conv1d's defaults.
struct Conv1dParams {
  int64_t stride = 1,  // step of the kernel along L (>= 1)
      padding = 0,     // zeros added at both ends of L (explicit_sizes only)
      dilation = 1,    // spacing of the kernel taps (>= 1)
      groups = 1;      // C and K split into this many independent groups; both divisible by it
  ConvPaddingMode padding_mode = ConvPaddingMode::explicit_sizes;  // valid/same as for conv2d
};
// input [N, C, L], weight [K, C / groups, S], bias [K] or undefined -> [N, K, Lout] with
// Lout = (L + 2 * padding - dilation * (S - 1) - 1) / stride + 1 (L for 'same').
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
              const Conv1dParams& p = {});

// conv3d's hyper-parameters, per axis (D, H, W), with torch.nn.functional.conv3d's defaults.
struct Conv3dParams {
  std::array<int64_t, 3> stride{1, 1, 1},  // step of the kernel along D, H, W (>= 1)
      padding{0, 0, 0},                    // zeros added at both sides (explicit_sizes only)
      dilation{1, 1, 1};                   // spacing of the kernel taps (>= 1)
  int64_t groups = 1;  // C and K split into this many independent groups; both divisible by it
  ConvPaddingMode padding_mode = ConvPaddingMode::explicit_sizes;  // valid/same as for conv2d
};
// input [N, C, D, H, W], weight [K, C / groups, T, R, S], bias [K] or undefined ->
// [N, K, Dout, Hout, Wout], each size as for conv2d along its axis (with 'same', an odd total
// padding puts the extra zero at the back/bottom/right, as PyTorch).
Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
              const Conv3dParams& p = {});

// conv_transpose2d's hyper-parameters, per axis (H, W), with PyTorch's defaults.
struct ConvTranspose2dParams {
  std::array<int64_t, 2> stride{1, 1},  // the stride of the convolution this transposes (>= 1)
      padding{0, 0},                    // rows/columns removed from each side of the output
      output_padding{0, 0},  // extra rows/columns on the bottom/right of the output (< stride)
      dilation{1, 1};        // spacing of the kernel taps (>= 1)
  int64_t groups = 1;        // Cin and Cout split into independent groups (divides both)
};
// As torch.nn.functional.conv_transpose2d: input [N, Cin, H, W], weight [Cin, Cout / groups, R, S],
// bias [Cout] or undefined -> [N, Cout, Hout, Wout] with
// Hout = (H - 1) * stride - 2 * padding + dilation * (R - 1) + output_padding + 1.
// output_padding must be smaller than the stride (it picks among the input sizes a strided
// convolution maps to the same output size). The output and the gradients are allocated in
// conv_result_memory_format(input, weight), as conv2d's.
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                        const ConvTranspose2dParams& p = {});

// conv_transpose1d's hyper-parameters, with PyTorch's defaults (as ConvTranspose2dParams, one
// axis).
struct ConvTranspose1dParams {
  int64_t stride = 1,      // the stride of the convolution this transposes (>= 1)
      padding = 0,         // elements removed from each end of the output
      output_padding = 0,  // extra elements at the end of the output (< stride)
      dilation = 1,        // spacing of the kernel taps (>= 1)
      groups = 1;          // Cin and Cout split into independent groups (divides both)
};
// input [N, Cin, L], weight [Cin, Cout / groups, K], bias [Cout] or undefined -> [N, Cout, Lout]
// with Lout = (L - 1) * stride - 2 * padding + dilation * (K - 1) + output_padding + 1.
Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                        const ConvTranspose1dParams& p = {});

// conv_transpose3d's hyper-parameters, per axis (D, H, W), with PyTorch's defaults.
struct ConvTranspose3dParams {
  std::array<int64_t, 3> stride{1, 1, 1},  // the stride of the convolution this transposes
      padding{0, 0, 0},                    // removed from both sides of each output axis
      output_padding{0, 0, 0},             // added at the end of each axis (< stride or dilation)
      dilation{1, 1, 1};                   // spacing of the kernel taps (>= 1)
  int64_t groups = 1;  // Cin and Cout split into independent groups (divides both)
};
// input [N, Cin, D, H, W], weight [Cin, Cout / groups, T, R, S], bias [Cout] or undefined ->
// [N, Cout, Dout, Hout, Wout], each size as conv_transpose2d's along its axis.
Tensor conv_transpose3d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                        const ConvTranspose3dParams& p = {});

}  // namespace ember
