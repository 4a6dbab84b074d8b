// The pooling kernel interface: PoolArgs (one pooling computation over 5-D views, what every
// kernel reads), the encodings of max pooling's indices, and PoolProblem, the descriptor the
// algorithm cache chooses among the pooling algorithms by (slots "pooling.forward" and
// "pooling.backward" of each device type; the op's key and glue live in ops/pooling.cpp). The CPU
// algorithm is in cpu_kernels/pooling.cpp, the CUDA ones (the channels_last fast kernels and the
// generic 5-D kernels) in cuda_kernels/pooling/.
#pragma once
#include <cstdint>

#include "ember/dispatch/algo_key.h"
#include "ember/tensor/tensor.h"

namespace ember {

enum class PoolMode : uint8_t { max, avg, adaptive_avg };

// One pooling computation over 5-D [N, C, D, H, W] views (unit dims for 1-D and 2-D pooling):
//   forward:  reads input, writes output (and, for max, indices at the output's offsets, in one
//             of the encodings below);
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
//          the forward algorithm the cache chose can write them so (pool_packed_taps_fit, and
//          ops/pooling.h's pool_forward_packs_taps): the tap of the output element at memory
//          offset o is bits 4 * (o % 2) .. +3 of byte o / 2, so the indices are a [N, C / 2, ...]
//          channels_last tensor. Autograd's record for ResNet's 3x3 stem pool on the GPU: a
//          sixteenth of int64's bytes, half of uint8's;
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

// True when `strides` (n, c, d, h, w) are those of a dense tensor of these sizes with memory
// order n, d, h, w, c (channels_last) or n, c, d, h, w. Size-1 dims may have any stride.
inline bool pool_is_dense(bool channels_last, int64_t batch, int64_t channels,
                          const int64_t (&spatial)[3], const int64_t (&strides)[5]) {
  const int64_t sizes[5] = {batch, channels, spatial[0], spatial[1], spatial[2]};
  const int order_cl[5] = {1, 4, 3, 2, 0};  // dims innermost first
  const int order_nchw[5] = {4, 3, 2, 1, 0};
  int64_t expect = 1;
  for (int k = 0; k < 5; ++k) {
    const int dim = channels_last ? order_cl[k] : order_nchw[k];
    if (sizes[dim] != 1 && strides[dim] != expect) return false;
    expect *= sizes[dim];
  }
  return true;
}

// The encoding of max pooling's indices (above).
enum class PoolIndices : uint8_t { none, flat_i64, taps_u8, taps_packed };

// Whether max pooling `a` is within the packed encoding's own limits: windows of at most
// kPoolMaxTapsU4 taps and an even channel count (the output's layout is the algorithms' concern).
inline bool pool_packed_taps_fit(const PoolArgs& a) {
  return a.mode == PoolMode::max && a.kernel[0] * a.kernel[1] * a.kernel[2] <= kPoolMaxTapsU4 &&
         a.channels % 2 == 0;
}

// What the algorithm cache chooses by: one direction (forward or backward) of `args`, whose
// indices have the encoding `indices`. The forward is chosen before its indices are allocated
// (args.indices undefined: the packed encoding's shape depends on the choice, see ops/pooling.h);
// an algorithm then treats them as fresh (16-byte aligned, at the output's offsets). Once they
// are allocated, `indices` and args' (indices dtype, packed_taps) agree.
struct PoolProblem {
  dispatch::Direction direction = dispatch::Direction::forward;
  PoolArgs args;
  PoolIndices indices = PoolIndices::none;

  Device device() const { return args.input.device(); }
  // The same problem writing into fresh tensors of the written operands' layouts: output and
  // indices (allocated in `indices`' encoding, even where args.indices is undefined) forward,
  // input backward.
  PoolProblem with_scratch_outputs() const;
};

// The problem of `direction` for `args`, the encoding read off args (indices dtype, packed_taps).
PoolProblem pool_problem(dispatch::Direction direction, const PoolArgs& args);

}  // namespace ember
