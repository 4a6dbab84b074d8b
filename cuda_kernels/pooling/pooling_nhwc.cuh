// Shared by the channels_last (NHWC) pooling kernels of this family (pooling_nhwc_forward.cu,
// pooling_nhwc_backward.cu, pooling_global.cu, pooling_nhwc_algorithms.cu): the 2-D window
// geometry, the device helpers the window kernels share (index encodings, window arithmetic,
// exact average divisors), and the host-side launchers and plan helpers each file defines.
// Internal to cuda_kernels/pooling/; other code includes the face header pooling.h.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "ember/cuda_kernels/common/dependent_launch.cuh"
#include "ember/cuda_kernels/common/reduce.cuh"
#include "ember/cuda_kernels/pooling/pooling.h"

namespace ember::cuda {

// The channels_last kernels (each an algorithm of the pooling slots, pooling_nhwc_algorithms.cu).
enum class PoolFastKernel : uint8_t {
  window_nhwc,        // 2-D max / avg pooling, dense channels_last input, output (and gradients)
  window_tiles_nhwc,  // backward of window_nhwc max pooling with uint8 taps by 2x2 input
                      // tiles, two to a thread where the row stride is 2 (16-byte vectors; a
                      // tile meets at most 2x2 windows)
  window_avg_tiles_nhwc,  // backward of window_nhwc average pooling by 2x2 input tiles, a block's
                          // windows divided once into shared memory (16-byte vectors; a tile
                          // meets at most 2x2 windows)
  window_disjoint_nhwc,   // backward of window_nhwc where the windows tile the input (kernel ==
                          // stride, no padding or dilation): a thread per window; 16-byte
                          // vectors, average pooling or uint8 taps
  window_3x3_nhwc,        // forward of window_nhwc over 3x3 windows, max (uint8 taps or none) or
                          // average pooling (16-byte vectors only)
  global_nhwc,  // global average pooling of dense channels_last input (forward and backward)
  global_nchw,  // backward of global average pooling into a dense NCHW gradient
};

constexpr int kVectorBytes = 16;
template <typename T>
constexpr int kVectorOf = kVectorBytes / int(sizeof(T));

// Geometry of a 2-D NHWC pooling problem in 32-bit ints (the algorithms apply only where every
// offset fits: window_plan in pooling_nhwc_algorithms.cu).
// The flat loop runs over (n, y, x, group), group fastest: output pixels forward, input pixels
// backward.
struct Pool2dGeometry {
  int channels, in_h, in_w, out_h, out_w;
  int kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  int groups;               // channels / V
  int in_image, out_image;  // elements per image: in_h * in_w * channels, out_h * out_w * channels
  bool count_include_pad;
  FastDivmod by_groups, by_x, by_y;     // the flat loop's dims, fastest first
  FastDivmod by_stride_h, by_stride_w;  // backward: output rows / columns reaching an input cell
  FastDivmod by_dilation_h, by_dilation_w;  // windows' taps (no integer division in the kernels)
};

// Threads of a block of the average tiles kernel (pooling_nhwc_backward.cu).
constexpr int kAvgTilesThreads = 128;

// ---- host side --------------------------------------------------------------------------------

inline bool aligned16(const Tensor& t) { return is_aligned(t.data_ptr(), kVectorBytes); }

// The max tiles kernel's band: two tiles per thread down the rows where the stride there is 2
// (the lower tile's upper window row is the upper tile's lower one), else one.
inline int tile_band_rows(const PoolArgs& a) { return a.stride[1] == 2 ? 2 : 1; }

// The flat loop runs over output pixels (forward), input pixels (per-pixel backward), bands of
// 2x2 tiles of input pixels (backward by tiles) or window-sized cells of the input (disjoint
// windows). Defined in pooling_nhwc_algorithms.cu.
Pool2dGeometry make_geometry(const PoolArgs& a, int vector, PoolFastKernel kernel,
                             dispatch::Direction direction);

// The launch of avg_pool2d_nhwc_backward_shared_kernel: blocks of kAvgTilesThreads threads,
// blockDim.x vectors of a pixel's channels (the largest power of two up to 16 dividing the
// channel groups; the rest of them in further blocks, `chunks` per image) by blockDim.y tile
// columns (the fewest, a power of two, covering the image's where it is narrow; else 2 / 4 / 8
// ... for 16 / 8 / 4 ... vectors) by blockDim.z tile rows (4 on wide images); the grid's z runs
// over (image, chunk), y over the patches' rows, x over their columns. `fits`: within CUDA's grid
// limits (y and z below 2^16).
struct AvgTilesLaunch {
  dim3 grid, block;
  int tiles_h, tiles_w, chunks;
  size_t shared_bytes;
  bool fits;
};
AvgTilesLaunch avg_tiles_launch(const PoolArgs& a, int vector);  // pooling_nhwc_backward.cu

// The launchers, each for float32 and bfloat16 on `vector` elements per access (16 bytes' worth
// or 1, as window_plan chose), on `stream` of the current device. The window kernels' forward
// (window_nhwc; pooling_nhwc_forward.cu):
void launch_window_forward(const PoolArgs& a, int vector, cudaStream_t stream);
// Max or average pooling forward over 3x3 windows, one 16-byte vector per thread (max: uint8
// taps or none; pooling_nhwc_forward.cu).
void launch_window_3x3(const PoolArgs& a, cudaStream_t stream);
// The window kernels' backward: window_nhwc, window_tiles_nhwc, window_avg_tiles_nhwc or
// window_disjoint_nhwc (pooling_nhwc_backward.cu).
void launch_window_backward(const PoolArgs& a, PoolFastKernel kernel, int vector,
                            cudaStream_t stream);
// Global average pooling: global_nhwc forward or backward, global_nchw backward
// (pooling_global.cu).
void launch_global(const PoolArgs& a, PoolFastKernel kernel, dispatch::Direction direction,
                   cudaStream_t stream);

// A window kernel over `grid` blocks of kBlockThreads, launched dependent (its launch and block
// placement overlap the tail of the kernel before it; the kernels wait for it first).
template <typename... Params, typename... Args>
void launch_window_kernel(void (*kernel)(Params...), unsigned grid, cudaStream_t stream,
                          Args&&... args) {
  launch_dependent(kernel, dim3(grid), dim3(kBlockThreads), 0, stream, std::forward<Args>(args)...);
}

// ---- device helpers of the window kernels -----------------------------------------------------
namespace {

// V int64 indices at p (16-byte aligned when V > 1; V is then even).
template <int V>
__device__ __forceinline__ void load_indices(const int64_t* p, int64_t (&v)[V]) {
  if constexpr (V == 1) {
    v[0] = *p;
  } else {
#pragma unroll
    for (int k = 0; k < V / 2; ++k) {
      const longlong2 pair = reinterpret_cast<const longlong2*>(p)[k];
      v[2 * k] = pair.x;
      v[2 * k + 1] = pair.y;
    }
  }
}
template <int V>
__device__ __forceinline__ void store_indices(int64_t* p, const int (&v)[V]) {
  if constexpr (V == 1) {
    *p = v[0];
  } else {
#pragma unroll
    for (int k = 0; k < V / 2; ++k)
      reinterpret_cast<longlong2*>(p)[k] = make_longlong2(v[2 * k], v[2 * k + 1]);
  }
}

// V = 4 or 8 uint8 window taps at p (V-byte aligned: 4 for float32, 8 for bfloat16) as 32-bit
// words of four; tap j is byte j % 4 of word j / 4 (tap_in).
template <int V>
__device__ __forceinline__ void load_tap_words(const uint8_t* p, uint32_t (&words)[V / 4]) {
  static_assert(V == 4 || V == 8, "uint8 taps move in one or two 32-bit words");
  if constexpr (V == 4) {
    words[0] = *reinterpret_cast<const uint32_t*>(p);
  } else {
    const uint2 pair = *reinterpret_cast<const uint2*>(p);
    words[0] = pair.x;
    words[1] = pair.y;
  }
}
template <int V>
__device__ __forceinline__ uint32_t tap_in(const uint32_t (&words)[V / 4], int j) {
  return (words[j / 4] >> (8 * (j % 4))) & 0xffu;
}

// V uint8 window taps at p (V-byte aligned when V > 1), moved as 32-bit words of four.
template <int V>
__device__ __forceinline__ void load_indices(const uint8_t* p, int (&v)[V]) {
  if constexpr (V == 1) {
    v[0] = *p;
  } else {
    uint32_t words[V / 4];
    load_tap_words<V>(p, words);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = int(tap_in<V>(words, j));
  }
}
template <int V>
__device__ __forceinline__ void store_indices(uint8_t* p, const int (&v)[V]) {
  if constexpr (V == 1) {
    *p = uint8_t(v[0]);
  } else {
    static_assert(V == 4 || V == 8, "uint8 taps move in one or two 32-bit words");
    uint32_t words[V / 4];
#pragma unroll
    for (int k = 0; k < V / 4; ++k)
      words[k] = uint32_t(v[4 * k]) | uint32_t(v[4 * k + 1]) << 8 | uint32_t(v[4 * k + 2]) << 16 |
                 uint32_t(v[4 * k + 3]) << 24;
    if constexpr (V == 4)
      *reinterpret_cast<uint32_t*>(p) = words[0];
    else
      *reinterpret_cast<uint2*>(p) = make_uint2(words[0], words[1]);
  }
}

// Packed taps (PoolArgs::packed_taps): the tap of the output element at offset `at` is the low
// (at even) or high nibble of byte at / 2. A thread's V = 4 or 8 channels start at an offset
// divisible by V, so their taps are one 16- or 32-bit word, channel j in bits 4j .. 4j + 3.
// Four nibbles (bits 0..15 of n) spread to the four bytes of a uint8 tap word.
__device__ __forceinline__ uint32_t nibbles_to_bytes(uint32_t n) {
  n = (n | (n << 8)) & 0x00ff00ffu;
  return (n | (n << 4)) & 0x0f0f0f0fu;
}
// V = 4 or 8 taps of the outputs from offset `at`, packed: one word as stored (16 bits for V = 4);
// or, by load_tap_bytes, as uint8 tap words (tap_in reads them) whether stored as bytes or packed
// (the nibbles spread to bytes).
template <int V>
__device__ __forceinline__ uint32_t load_packed_taps(const uint8_t* taps, int at) {
  if constexpr (V == 4)
    return *reinterpret_cast<const uint16_t*>(taps + at / 2);
  else
    return *reinterpret_cast<const uint32_t*>(taps + at / 2);
}
template <int V>
__device__ __forceinline__ void load_tap_bytes(const uint8_t* taps, int at, bool packed,
                                               uint32_t (&words)[V / 4]) {
  if (packed) {
    const uint32_t nibbles = load_packed_taps<V>(taps, at);
    if constexpr (V == 8) words[1] = nibbles_to_bytes(nibbles >> 16);
    words[0] = nibbles_to_bytes(nibbles & 0xffffu);
  } else {
    load_tap_words<V>(taps + at, words);
  }
}
// V taps (each < 16) of the outputs from offset `at`, packed: one 16- or 32-bit store.
template <int V>
__device__ __forceinline__ void store_packed_taps(uint8_t* taps, int at, const int (&v)[V]) {
  static_assert(V == 4 || V == 8, "packed taps move in 16- or 32-bit words");
  uint32_t n = 0;
#pragma unroll
  for (int j = 0; j < V; ++j) n |= uint32_t(v[j]) << (4 * j);
  if constexpr (V == 4)
    *reinterpret_cast<uint16_t*>(taps + at / 2) = uint16_t(n);
  else
    *reinterpret_cast<uint32_t*>(taps + at / 2) = n;
}

// What a max-pooling kernel compares and stores per output: the window tap (uint8 indices) or the
// input cell h * W + w (int64 indices); saved indices are read back as SavedIndex.
template <typename Idx>
constexpr bool kTapIndices = std::is_same_v<Idx, uint8_t>;
template <typename Idx>
using SavedIndex = std::conditional_t<kTapIndices<Idx>, int, int64_t>;

// Splits flat index t of the window kernels into (n, y, x, first channel).
struct PixelOf {
  int n, y, x, c0;
};
template <int V>
__device__ __forceinline__ PixelOf pixel_of(const Pool2dGeometry& g, int64_t t) {
  const uint32_t flat = uint32_t(t);
  const uint32_t pixel = g.by_groups.div(flat);
  const uint32_t row = g.by_x.div(pixel);
  const uint32_t n = g.by_y.div(row);
  return {int(n), int(row - n * g.by_y.divisor), int(pixel - row * g.by_x.divisor),
          int(flat - pixel * g.by_groups.divisor) * V};
}

// The tap of a window at `offset` (>= 0) from its first cell, or -1 when the offset falls between
// taps (dilation > 1).
__device__ __forceinline__ int tap_at(const FastDivmod& by_dilation, int offset) {
  if (by_dilation.divisor == 1) return offset;
  const int tap = int(by_dilation.div(uint32_t(offset)));
  return tap * int(by_dilation.divisor) == offset ? tap : -1;
}
// Along one dim: whether window `o` (of `out` windows, each spanning `extent` = (kernel - 1) *
// dilation cells from o * stride - pad) exists and reaches input row / column `pixel`, whose
// offset from the window's first cell goes to `offset`. The backward tiles' test of which of the
// (up to) two windows per dim meeting a tile reach each of its pixels (tap_at(offset) then tells
// whether a dilated window holds it).
__device__ __forceinline__ bool window_reaches(int pixel, int o, int stride, int pad, int out,
                                               int extent, int& offset) {
  offset = pixel + pad - o * stride;
  return o >= 0 && o < out && offset >= 0 && offset <= extent;
}
// That offset where window o reaches the pixel, else -1.
__device__ __forceinline__ int window_offset(int pixel, int o, int stride, int pad, int out,
                                             int extent) {
  int offset;
  return window_reaches(pixel, o, stride, pad, out, extent, offset) ? offset : -1;
}

// x / count for a window's element count (> 0), correctly rounded as the IEEE division of
// pooling.cu's kernels (so results stay bit-identical to theirs) without dividing per element: a
// multiplication by the reciprocal when count is a power of two (exact); else, for counts up to
// 2^16 and 2^-64 <= |x| <= 2^100, from the correctly rounded reciprocal r: q = x r is within 1.5
// ulps of x / count, its residual x - q count is exact (fma: a multiple of q's ulp, well within 24
// bits), and q + residual r lies within 2^-22 ulp of x / count, which is never closer than 2^-17
// ulp to a rounding midpoint (count <= 2^16), so it rounds to the correctly rounded quotient
// (Markstein's correction; checked against IEEE division on the CPU for every float mantissa,
// i.e. every normal x, and every count 1..8192: no difference). Elsewhere (larger counts, tiny or
// huge x, inf, NaN) the IEEE division, whose inline fast path (reciprocal, refinements, a range
// check) costs a few more instructions per element.
struct CountDivisor {
  float count, reciprocal;
  float corrected_from;  // the least |x| divided by the correction (inf: none)
  bool power_of_two;
  __device__ __forceinline__ float divide(float x) const {
    if (power_of_two) return x * reciprocal;
    const float magnitude = fabsf(x);
    if (!(magnitude >= corrected_from && magnitude <= 0x1p100f)) return x / count;
    const float q = x * reciprocal;
    return fmaf(fmaf(-q, count, x), reciprocal, q);
  }
};
__device__ __forceinline__ CountDivisor count_divisor(int n) {
  CountDivisor d;
  d.count = float(n);
  d.power_of_two = (n & (n - 1)) == 0;
  // 2^-k from its exponent bits (n = 2^k, k <= 30), else the division, once per window.
  d.reciprocal = d.power_of_two ? __int_as_float((127 - (__ffs(n) - 1)) << 23) : 1.f / d.count;
  d.corrected_from = n <= (1 << 16) ? 0x1p-64f : __int_as_float(0x7f800000);
  return d;
}

// The average-pooling divisor of output cell o along one dim (pooling.cu's window()).
__device__ __forceinline__ int avg_divisor(int o, int stride, int pad, int kernel, int in,
                                           bool count_include_pad) {
  int begin = o * stride - pad;
  int end = ::min(begin + kernel, in + pad);
  const int padded = end - begin;
  begin = ::max(begin, 0);
  end = ::min(end, in);
  return count_include_pad ? padded : end - begin;
}

// A 16-byte vector of T held as four 32-bit words, as loaded: float32 channel j is word j,
// bfloat16 channel j the low (j even) or high (j odd) half of word j / 2. Keeping bfloat16 packed
// halves the registers the backward tiles' windows hold (the compiler splits an AlignedVec of
// bfloat16 into a register per element); channels are widened to float (exactly) where used.
__device__ __forceinline__ void load_words(const void* p, uint32_t (&w)[4]) {
  const uint4 q = *reinterpret_cast<const uint4*>(p);
  w[0] = q.x;
  w[1] = q.y;
  w[2] = q.z;
  w[3] = q.w;
}
template <typename T>
__device__ __forceinline__ float channel_of(const uint32_t (&w)[4], int j) {
  if constexpr (std::is_same_v<T, float>)
    return __uint_as_float(w[j]);
  else
    return j % 2 == 0 ? bf16_low_as_float(w[j / 2]) : bf16_high_as_float(w[j / 2]);
}

}  // namespace
}  // namespace ember::cuda
