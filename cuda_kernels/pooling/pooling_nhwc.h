// Fast paths of the CUDA pooling kernels, tried by cuda_kernels/pooling/pooling.cu before its generic 5-D
// kernels: 2-D max / average pooling of dense channels_last tensors (any kernel, stride, padding,
// dilation, ceil_mode) and global average pooling (adaptive to size 1) of dense channels_last
// input, plus its backward into dense NCHW; max pooling with int64, uint8 or no indices
// (ops/pooling.h); window backward by whole windows where they do not overlap, by 2x2 input tiles
// where a tile meets at most two windows per dim, and the forward over 3x3 windows unrolled;
// uint8 taps packed two a byte where a forward here writes them. float32 and bfloat16 only. Each
// entry point returns false, launching nothing, when its conditions (dtype, layout, 32-bit sizes)
// do not hold; the results then come from the generic kernels, whose semantics these paths
// reproduce exactly.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ember/dispatch/algo_key.h"
#include "ember/ops/pooling.h"

namespace ember::cuda {

enum class PoolFastKernel : uint8_t {
  none,         // no fast path applies: the generic kernel runs
  window_nhwc,  // 2-D max / avg pooling, dense channels_last input, output (and gradients)
  window_tiles_nhwc,  // backward of window_nhwc max pooling with uint8 taps by 2x2 input
                      // tiles, two to a thread where the row stride is 2 (16-byte vectors; a
                      // tile meets at most 2x2 windows)
  window_avg_tiles_nhwc,  // backward of window_nhwc average pooling by 2x2 input tiles, a block's
                          // windows divided once into shared memory (16-byte vectors; a tile
                          // meets at most 2x2 windows)
  window_disjoint_nhwc,  // backward of window_nhwc where the windows tile the input (kernel ==
                         // stride, no padding or dilation): a thread per window; 16-byte
                         // vectors, average pooling or uint8 taps
  window_3x3_nhwc,    // forward of window_nhwc over 3x3 windows, max (uint8 taps or none) or
                      // average pooling (16-byte vectors only)
  global_nhwc,  // global average pooling of dense channels_last input (forward and backward)
  global_nchw,  // backward of global average pooling into a dense NCHW gradient
};

// The fast kernel chosen for `a` in `direction` (forward or backward) and its vector width in
// elements (16 bytes' worth when the channels and pointers allow, else 1). pool_fast_forward /
// pool_fast_backward run exactly this choice; the tests read it to check what applies.
struct PoolFastPlan {
  PoolFastKernel kernel = PoolFastKernel::none;
  int vector = 1;
};
PoolFastPlan pool_fast_plan(const PoolArgs& a, dispatch::Direction direction);

// Forward / backward of `a` (ops/pooling.h) on `stream` through a fast path, returning true, or
// false without launching anything. The caller has set the device. Gradients are written, not
// accumulated, as by the generic kernels.
bool pool_fast_forward(const PoolArgs& a, cudaStream_t stream);
bool pool_fast_backward(const PoolArgs& a, cudaStream_t stream);

// pool_packs_taps_kernel for CUDA: true when max pooling `a` (indices not yet allocated) has
// windows of at most kPoolMaxTapsU4 taps and runs forward through a fast kernel on 16-byte
// vectors (window_3x3_nhwc, or window_nhwc with whole vectors), which then writes its taps packed;
// the backward of the same problem always runs through a fast kernel too, which reads them.
bool pool_fast_packs_taps(const PoolArgs& a);

}  // namespace ember::cuda
