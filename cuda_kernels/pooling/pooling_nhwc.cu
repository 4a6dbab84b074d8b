// Fast paths of CUDA pooling (declared in cuda_kernels/pooling/pooling_nhwc.h), for float32 and bfloat16:
//  - 2-D max / average pooling of dense channels_last (NHWC) tensors: a thread per output pixel
//    and group of V channels (V = 16 bytes of elements when C % V == 0 and the pointers are
//    16-byte aligned, else 1), 16-byte loads and stores, 32-bit index math, float accumulation.
//    Backward: a thread per INPUT pixel and channel group gathering from the output windows that
//    contain it (deterministic, no atomics), max pooling comparing the saved indices; or, when a
//    2x2 tile of input pixels meets at most 2x2 windows (3x3 stride 2, ...), by tiles: for max
//    pooling a thread per tile (per two tiles stacked where the row stride is 2: they share a
//    window row) loading each of its windows once for its pixels, for average pooling a block
//    per patch of tiles dividing each of its windows once into shared memory and a thread per
//    tile summing them; or, when the windows tile the input without overlap (2x2 stride 2, ...),
//    a thread per window. The max tiles hold their windows as loaded 32-bit words (bfloat16 two
//    a word), test four uint8 taps at once, and sum bfloat16 pixels in at most two windows as
//    packed pairs rounded once (what the float sum rounds to).
//    Max and average pooling over 3x3 windows (max: uint8 taps or none) have their own forward
//    with the nine 16-byte loads unrolled (bfloat16 max compared two channels per instruction).
//    Max indices are a template parameter: int64 flat positions or uint8 window taps
//    (ops/pooling.h), V of them moved per access; a null uint8 pointer means the forward writes
//    none. The forwards on whole vectors write uint8 taps packed two a byte where windows have at
//    most 16 taps (pool_fast_packs_taps; ResNet's 3x3 stride-2 pool fwd+bwd 256x64x112x112 on the
//    H200: bf16 325.6-327.0 -> 321.0 us, f32 553.1-554.8 -> 545.7-546.0), and every backward
//    reads them (the tiles kernel tests eight nibbles at once, as it tests four bytes).
//  - global average pooling of dense NHWC input: a thread per (n, channel group) summing over
//    the H*W rows, rows split over the block's y threads (reduced in shared memory) when there are
//    too few (n, group) items to fill the GPU. Backward writes grad_out[n, c] / (H*W) into a dense
//    NHWC or NCHW gradient with 16-byte stores; NHWC reads grad_out as one 16-byte vector per
//    (n, channel group) where it is dense and aligned, element by element otherwise.
// Every kernel here is launched dependent (cuda_kernels/common/dependent_launch.cuh): max pooling
// forward+backward bf16 256x64x112x112 327.0 -> 324.8 us, 2x2 average 278.5 -> 274.6 (H200).
// These reproduce cuda_kernels/pooling/pooling.cu's generic kernels: the same windows, divisors, index
// encodings, first maximum kept, NaN wins (the last NaN), and, for the window kernels, the same
// float summation order (so bit-identical results). Gradients are written, not accumulated.
#include "ember/cuda_kernels/pooling/pooling_nhwc.h"

#include <cstring>
#include <limits>
#include <type_traits>

#include "ember/cuda_kernels/common/dependent_launch.cuh"
#include "ember/cuda_kernels/common/reduce.cuh"

namespace ember::cuda {
namespace {

constexpr int kVectorBytes = 16;
template <typename T>
constexpr int kVectorOf = kVectorBytes / int(sizeof(T));
// Threads the global-average kernels aim for before they stop splitting rows over threadIdx.y.
constexpr int64_t kGlobalThreadsPerSm = 2048;

// Geometry of a 2-D NHWC pooling problem in 32-bit ints (the plan checks that every offset fits).
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
// check) costs a few more instructions:
// 3x3 stride-2 average pool fwd+bwd 256x64x112x112 bf16 458.7-459.3 -> 440.4-440.7 us, f32
// 640.2-642.1 -> 635.2-635.3 (H200, session 15 run 4).
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

// Idx: the max indices' type (uint8 taps or int64 cells; `indices` may be null: none written).
// Average pooling is instantiated with Idx = uint8_t and null indices.
template <typename T, int V, bool kMax, typename Idx>
__global__ void __launch_bounds__(kBlockThreads)
pool2d_nhwc_forward_kernel(Pool2dGeometry g, const T* __restrict__ in, T* __restrict__ out,
                           Idx* __restrict__ indices, int64_t total, bool packed_taps) {
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
  using Vec = AlignedVec<T, V>;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= total) return;
  const PixelOf o = pixel_of<V>(g, t);
  const T* image = in + o.n * g.in_image + o.c0;  // [H, W, C] from channel c0
  const int at = o.n * g.out_image + (o.y * g.out_w + o.x) * g.channels + o.c0;
  Vec result;
  if constexpr (kMax) {
    // Taps in the padding are skipped: (h0, w0) is tap (tap_h0, tap_w0) of the window.
    int h0 = o.y * g.stride_h - g.pad_h;
    const int h1 = ::min(h0 + (g.kernel_h - 1) * g.dilation_h + 1, g.in_h);
    int tap_h0 = 0;
    if (h0 < 0) {
      tap_h0 = int(g.by_dilation_h.div(uint32_t(g.dilation_h - 1 - h0)));
      h0 += tap_h0 * g.dilation_h;
    }
    int w0 = o.x * g.stride_w - g.pad_w;
    const int w1 = ::min(w0 + (g.kernel_w - 1) * g.dilation_w + 1, g.in_w);
    int tap_w0 = 0;
    if (w0 < 0) {
      tap_w0 = int(g.by_dilation_w.div(uint32_t(g.dilation_w - 1 - w0)));
      w0 += tap_w0 * g.dilation_w;
    }
    float best[V];
    int best_at[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      best[j] = neg_infinity<float>();
      best_at[j] = kTapIndices<Idx> ? tap_h0 * g.kernel_w + tap_w0 : h0 * g.in_w + w0;
    }
    for (int h = h0, tap_h = tap_h0; h < h1; h += g.dilation_h, ++tap_h)
      for (int w = w0, tap_w = tap_w0; w < w1; w += g.dilation_w, ++tap_w) {
        const int cell = h * g.in_w + w;
        const int key = kTapIndices<Idx> ? tap_h * g.kernel_w + tap_w : cell;
        const Vec v = *reinterpret_cast<const Vec*>(image + cell * g.channels);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float x = convert<float>(v.v[j]);
          if (x > best[j] || x != x) {  // first maximum wins; every NaN wins
            best[j] = x;
            best_at[j] = key;
          }
        }
      }
#pragma unroll
    for (int j = 0; j < V; ++j) result.v[j] = convert<T>(best[j]);
    if (indices != nullptr) {
      if constexpr (kTapIndices<Idx> && V > 1) {
        if (packed_taps) {
          store_packed_taps<V>(indices, at, best_at);
        } else {
          store_indices<V>(indices + at, best_at);
        }
      } else {
        store_indices<V>(indices + at, best_at);  // the host packs no taps for V == 1
      }
    }
  } else {
    const int h0 = ::max(o.y * g.stride_h - g.pad_h, 0);
    const int h1 = ::min(o.y * g.stride_h - g.pad_h + g.kernel_h, g.in_h);
    const int w0 = ::max(o.x * g.stride_w - g.pad_w, 0);
    const int w1 = ::min(o.x * g.stride_w - g.pad_w + g.kernel_w, g.in_w);
    const CountDivisor divisor = count_divisor(
        avg_divisor(o.y, g.stride_h, g.pad_h, g.kernel_h, g.in_h, g.count_include_pad) *
        avg_divisor(o.x, g.stride_w, g.pad_w, g.kernel_w, g.in_w, g.count_include_pad));
    float sum[V];
#pragma unroll
    for (int j = 0; j < V; ++j) sum[j] = 0.f;
    for (int h = h0; h < h1; ++h)
      for (int w = w0; w < w1; ++w) {
        const Vec v = *reinterpret_cast<const Vec*>(image + (h * g.in_w + w) * g.channels);
#pragma unroll
        for (int j = 0; j < V; ++j) sum[j] += convert<float>(v.v[j]);
      }
#pragma unroll
    for (int j = 0; j < V; ++j) result.v[j] = convert<T>(divisor.divide(sum[j]));
  }
  *reinterpret_cast<Vec*>(out + at) = result;
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

// Per 16-bit half of two packed bfloat16 pairs: 0xffff where x > best or x is NaN (the window
// scan's "first maximum wins, every NaN wins" test), else 0. The comparisons are float's (bf16 to
// float is exact): unordered when either is NaN, -0 == +0.
__device__ __forceinline__ uint32_t bf16x2_greater_or_nan(uint32_t x, uint32_t best) {
  __nv_bfloat162 a, b;
  memcpy(&a, &x, sizeof a);
  memcpy(&b, &best, sizeof b);
  return __hgt2_mask(a, b) | __hneu2_mask(a, a);
}

// Max or average pooling forward over 3x3 windows (any stride and padding, and dilation for max:
// ResNet's stem pool), max with uint8 taps or none (null `taps`): the window's nine vector loads
// are unrolled and issued together before the scan, where the general kernel's run-time window
// loops keep about one load in flight per thread and so wait on latency rather than bandwidth.
// The scan is the general kernel's (taps in row-major order, those in the padding or past the
// input skipped; max: first maximum kept, every NaN wins; average: float sums in that order, the
// same divisor), so values and taps are bit-identical to it. A thread owns one 16-byte
// vector of channels in either type: 4 float32 scanned as floats, or 8 bfloat16 scanned two per
// instruction (packed compares and bit selects on 32-bit words), so both types hold the same nine
// loaded vectors, four words of best values and four of taps: the same registers and bytes in
// flight per thread. Measured on the H200 (256x64x112x112, stride 2): float32 3917 GB/s (the loop
// kernel: 2926); bfloat16 3495 (82% of copy) this way, against 2635 with 4 channels a thread
// (8-byte vectors, packed, 39 registers, 6 blocks per SM: twice float32's threads per byte, each
// living about as long) and 1281 with 8 channels and a float scan (84 registers). bfloat16's best
// values go out through float like the general kernel's (NaN as that conversion makes it); its
// taps as one 8-byte store, or 4 bytes packed. Five resident blocks asked for (48 registers, 4
// bytes spilled; 54 and 4 blocks unasked): bf16 forward 148.7 -> 143.1 us, fwd+bwd 323.5 -> 317.7
// (H200, session 14 run 8; f32 within 0.3%). Average pooling sums each bfloat16 word's halves as
// floats, at 4 resident blocks (56 registers; at 5 it spilled 20 bytes): 3x3 stride-2 padding-1
// forward 256x64x112x112 bf16 196.4 -> 137.5-138.5 us (3737 GB/s), f32 318.4 -> 253.1-254.1
// (4056) against the loop kernel (H200, session 15 runs 2-4).
template <typename T, bool kMax>
__global__ void __launch_bounds__(kBlockThreads, kMax ? 5 : 4)
pool2d_3x3_nhwc_forward_kernel(Pool2dGeometry g, const T* __restrict__ in, T* __restrict__ out,
                               uint8_t* __restrict__ taps, int64_t total, bool packed_taps) {
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
  constexpr int V = kVectorOf<T>;
  using Vec = AlignedVec<T, V>;
  constexpr bool kPacked = std::is_same_v<T, __nv_bfloat16>;
  static_assert(kPacked || std::is_same_v<T, float>, "float32 or bfloat16");
  // A loaded vector: V floats, or V / 2 words of two bfloat16 (channel 2k in the low half).
  using Loaded = std::conditional_t<kPacked, uint4, Vec>;
  static_assert(sizeof(Loaded) == sizeof(Vec), "a bfloat16 vector is one uint4");
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= total) return;
  const PixelOf o = pixel_of<V>(g, t);
  const T* image = in + o.n * g.in_image + o.c0;  // [H, W, C] from channel c0
  const int at = o.n * g.out_image + (o.y * g.out_w + o.x) * g.channels + o.c0;
  // Row / column k of the window and whether it lies inside the input.
  bool row_in[3], col_in[3];
  int row_at[3], col_at[3];
#pragma unroll
  for (int k = 0; k < 3; ++k) {
    const int h = o.y * g.stride_h - g.pad_h + k * g.dilation_h;
    const int w = o.x * g.stride_w - g.pad_w + k * g.dilation_w;
    row_in[k] = h >= 0 && h < g.in_h;
    col_in[k] = w >= 0 && w < g.in_w;
    row_at[k] = h * g.in_w;
    col_at[k] = w;
  }
  Loaded v[3][3];
#pragma unroll
  for (int kh = 0; kh < 3; ++kh)
#pragma unroll
    for (int kw = 0; kw < 3; ++kw) {
      v[kh][kw] = Loaded{};
      if (row_in[kh] && col_in[kw])
        v[kh][kw] =
            *reinterpret_cast<const Loaded*>(image + (row_at[kh] + col_at[kw]) * g.channels);
    }
  Vec result;
  if constexpr (!kMax) {
    // The general kernel's divisor: the window clipped to the padded input, or to the input.
    const CountDivisor divisor = count_divisor(
        avg_divisor(o.y, g.stride_h, g.pad_h, 3, g.in_h, g.count_include_pad) *
        avg_divisor(o.x, g.stride_w, g.pad_w, 3, g.in_w, g.count_include_pad));
    float sum[V];
#pragma unroll
    for (int j = 0; j < V; ++j) sum[j] = 0.f;
#pragma unroll
    for (int kh = 0; kh < 3; ++kh)
#pragma unroll
      for (int kw = 0; kw < 3; ++kw) {
        if (!row_in[kh] || !col_in[kw]) continue;
        if constexpr (kPacked) {
          const uint32_t words[4] = {v[kh][kw].x, v[kh][kw].y, v[kh][kw].z, v[kh][kw].w};
#pragma unroll
          for (int j = 0; j < V; ++j) sum[j] += channel_of<T>(words, j);
        } else {
#pragma unroll
          for (int j = 0; j < V; ++j) sum[j] += v[kh][kw].v[j];
        }
      }
#pragma unroll
    for (int j = 0; j < V; ++j) result.v[j] = convert<T>(divisor.divide(sum[j]));
    *reinterpret_cast<Vec*>(out + at) = result;
  } else {
    // A window starts inside the input or in its left / top padding, so its first tap inside the
    // input is the first whose row and column are inside (the general kernel's starting index).
    const int first_tap =
        (row_in[0] ? 0 : row_in[1] ? 1 : 2) * 3 + (col_in[0] ? 0 : col_in[1] ? 1 : 2);
    if constexpr (kPacked) {
      // Per word: two best values (-inf to start) and their taps, each in its 16-bit half.
      uint32_t best[V / 2], best_tap[V / 2];
#pragma unroll
      for (int k = 0; k < V / 2; ++k) {
        best[k] = 0xff80ff80u;
        best_tap[k] = uint32_t(first_tap) * 0x00010001u;
      }
#pragma unroll
      for (int kh = 0; kh < 3; ++kh)
#pragma unroll
        for (int kw = 0; kw < 3; ++kw) {
          if (!row_in[kh] || !col_in[kw]) continue;
          const uint32_t tap = uint32_t(kh * 3 + kw) * 0x00010001u;
          const uint32_t words[V / 2] = {v[kh][kw].x, v[kh][kw].y, v[kh][kw].z, v[kh][kw].w};
#pragma unroll
          for (int k = 0; k < V / 2; ++k) {
            const uint32_t take = bf16x2_greater_or_nan(words[k], best[k]);
            best[k] = (words[k] & take) | (best[k] & ~take);
            best_tap[k] = (tap & take) | (best_tap[k] & ~take);
          }
        }
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const auto half = static_cast<unsigned short>(best[j / 2] >> (16 * (j % 2)));
        result.v[j] = convert<T>(convert<float>(__ushort_as_bfloat16(half)));
      }
      *reinterpret_cast<Vec*>(out + at) = result;
      // Channel j's tap (< 9) is the low byte of its 16-bit half: bytes 0 and 2 of each word.
      if (taps != nullptr && packed_taps) {
        // Word k's two taps as one byte (channel 2k low), the four bytes into one 32-bit store.
        uint32_t pairs[V / 2];
#pragma unroll
        for (int k = 0; k < V / 2; ++k) pairs[k] = best_tap[k] | (best_tap[k] >> 12);
        *reinterpret_cast<uint32_t*>(taps + at / 2) =
            __byte_perm(__byte_perm(pairs[0], pairs[1], 0x0040),
                        __byte_perm(pairs[2], pairs[3], 0x0040), 0x5410);
      } else if (taps != nullptr) {
        *reinterpret_cast<uint2*>(taps + at) =
            make_uint2(__byte_perm(best_tap[0], best_tap[1], 0x6420),
                       __byte_perm(best_tap[2], best_tap[3], 0x6420));
      }
    } else {
      float best[V];
      int best_at[V];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        best[j] = neg_infinity<float>();
        best_at[j] = first_tap;
      }
#pragma unroll
      for (int kh = 0; kh < 3; ++kh)
#pragma unroll
        for (int kw = 0; kw < 3; ++kw) {
          if (!row_in[kh] || !col_in[kw]) continue;
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const float x = v[kh][kw].v[j];
            if (x > best[j] || x != x) {  // first maximum wins; every NaN wins
              best[j] = x;
              best_at[j] = kh * 3 + kw;
            }
          }
        }
#pragma unroll
      for (int j = 0; j < V; ++j) result.v[j] = best[j];
      *reinterpret_cast<Vec*>(out + at) = result;
      if (taps != nullptr) {
        if (packed_taps)
          store_packed_taps<V>(taps, at, best_at);
        else
          store_indices<V>(taps + at, best_at);
      }
    }
  }
}

// Idx as in the forward (average pooling: uint8_t, null indices).
template <typename T, int V, bool kMax, typename Idx>
__global__ void __launch_bounds__(kBlockThreads)
pool2d_nhwc_backward_kernel(Pool2dGeometry g, T* __restrict__ grad_in,
                            const T* __restrict__ grad_out, const Idx* __restrict__ indices,
                            int64_t total, bool packed_taps) {
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
  using Vec = AlignedVec<T, V>;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= total) return;
  const PixelOf i = pixel_of<V>(g, t);
  const int cell = i.y * g.in_w + i.x;  // int64 indices: what max pooling saved for this cell
  // Output rows whose window holds row i.y: o * stride <= i.y + pad <= o * stride +
  // (kernel - 1) * dilation, on a tap (a multiple of the dilation); likewise for columns.
  const int reach_h = i.y + g.pad_h;
  const int low_h = reach_h - (g.kernel_h - 1) * g.dilation_h;
  const int oh_first = low_h <= 0 ? 0 : int(g.by_stride_h.div(uint32_t(low_h + g.stride_h - 1)));
  const int oh_last = ::min(int(g.by_stride_h.div(uint32_t(reach_h))), g.out_h - 1);
  const int reach_w = i.x + g.pad_w;
  const int low_w = reach_w - (g.kernel_w - 1) * g.dilation_w;
  const int ow_first = low_w <= 0 ? 0 : int(g.by_stride_w.div(uint32_t(low_w + g.stride_w - 1)));
  const int ow_last = ::min(int(g.by_stride_w.div(uint32_t(reach_w))), g.out_w - 1);
  const int image = i.n * g.out_image + i.c0;
  float acc[V];
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = 0.f;
  // Descending, like pooling.cu's tap loops (tap j ascending): the same sums in the same order.
  for (int oh = oh_last; oh >= oh_first; --oh) {
    // Row i.y is tap tap_h of window row oh (none when it falls between dilated taps).
    const int tap_h = tap_at(g.by_dilation_h, reach_h - oh * g.stride_h);
    if (tap_h < 0) continue;
    const int div_h =
        kMax ? 1 : avg_divisor(oh, g.stride_h, g.pad_h, g.kernel_h, g.in_h, g.count_include_pad);
    for (int ow = ow_last; ow >= ow_first; --ow) {
      const int tap_w = tap_at(g.by_dilation_w, reach_w - ow * g.stride_w);
      if (tap_w < 0) continue;
      const int at = image + (oh * g.out_w + ow) * g.channels;
      const Vec go = *reinterpret_cast<const Vec*>(grad_out + at);
      if constexpr (kMax) {
        const int key = kTapIndices<Idx> ? tap_h * g.kernel_w + tap_w : cell;
        SavedIndex<Idx> saved[V];
        if constexpr (kTapIndices<Idx>) {
          if (packed_taps) {
            if constexpr (V == 1) {
              saved[0] = (indices[at / 2] >> (4 * (at % 2))) & 0xf;
            } else {
              uint32_t words[V / 4];
              load_tap_bytes<V>(indices, at, true, words);
#pragma unroll
              for (int j = 0; j < V; ++j) saved[j] = int(tap_in<V>(words, j));
            }
          } else {
            load_indices<V>(indices + at, saved);
          }
        } else {
          load_indices<V>(indices + at, saved);
        }
#pragma unroll
        for (int j = 0; j < V; ++j)
          if (saved[j] == key) acc[j] += convert<float>(go.v[j]);
      } else {
        const CountDivisor divisor = count_divisor(
            div_h * avg_divisor(ow, g.stride_w, g.pad_w, g.kernel_w, g.in_w, g.count_include_pad));
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += divisor.divide(convert<float>(go.v[j]));
      }
    }
  }
  Vec result;
#pragma unroll
  for (int j = 0; j < V; ++j) result.v[j] = convert<T>(acc[j]);
  *reinterpret_cast<Vec*>(grad_in + i.n * g.in_image + cell * g.channels + i.c0) = result;
}

// Four uint8 window taps against one key: bit 7 of byte j is set where tap j differs from `key`
// (< 256); the other bits are garbage. (b | 0x80) - 1 keeps bit 7 where b's low seven bits are not
// all zero (no borrow crosses bytes); or-ing b adds its own bit 7. Three instructions for four
// channels, against three per channel (shift, mask, compare) testing the taps one by one.
__device__ __forceinline__ uint32_t tap_mismatch_flags(uint32_t taps, uint32_t key) {
  const uint32_t differ = taps ^ (key * 0x01010101u);
  return ((differ | 0x80808080u) - 0x01010101u) | differ;
}
// 0xffff over the low / high half of the result where bit 7 of byte 2 * pair / 2 * pair + 1 of
// `flags` is set (prmt's sign-replicating selectors): a mask for two bfloat16 channels of a word.
__device__ __forceinline__ uint32_t pair_mask(uint32_t flags, int pair) {
  uint32_t mask;
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(mask) : "r"(flags), "r"(pair == 0 ? 0x9988u : 0xbbaau));
  return mask;
}
// The tile kernel's view of a window's V taps, loaded as stored: uint8 taps as V / 4 tap words,
// or packed taps as one word of V nibbles (16 bits for V = 4). Mismatch flags against a key come
// out in the same shape: bit 7 of byte j % 4 of word j / 4, or bit 3 of nibble j, set where
// channel j's tap differs. Testing packed taps costs what testing bytes does, per word, with
// twice the channels a word: the nibble form of tap_mismatch_flags, 0x8 and 0x1 per nibble.
template <int V, bool kPacked>
struct WindowTaps {
  static constexpr int kWords = kPacked ? 1 : V / 4;
  uint32_t w[kWords];

  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int k = 0; k < kWords; ++k) w[k] = 0;
  }
  __device__ __forceinline__ void load(const uint8_t* taps, int at) {
    if constexpr (kPacked)
      w[0] = load_packed_taps<V>(taps, at);
    else
      load_tap_words<V>(taps + at, w);
  }
  __device__ __forceinline__ WindowTaps mismatch(uint32_t key) const {
    WindowTaps f;
#pragma unroll
    for (int k = 0; k < kWords; ++k) {
      if constexpr (kPacked) {
        const uint32_t differ = w[k] ^ (key * 0x11111111u);
        f.w[k] = ((differ | 0x88888888u) - 0x11111111u) | differ;
      } else {
        f.w[k] = tap_mismatch_flags(w[k], key);
      }
    }
    return f;
  }
  // On mismatch flags: whether channel j's tap differs.
  __device__ __forceinline__ bool differs(int j) const {
    if constexpr (kPacked)
      return (w[0] & (0x8u << (4 * j))) != 0;
    else
      return (w[j / 4] & (0x80u << (8 * (j % 4)))) != 0;
  }
  // On mismatch flags (bfloat16, V = 8): 0xffff over each half of word k of the loaded vector
  // (channels 2k, 2k + 1) whose channel's tap differs. Nibbles: channel 2k + 1's flag is bit 7 of
  // byte k, channel 2k's is bit 7 of byte k of the flags shifted left by 4; prmt replicates them.
  __device__ __forceinline__ uint32_t pair_differs(int k) const {
    if constexpr (kPacked) {
      const uint32_t select = (8u + k) * 0x11u | (12u + k) * 0x1100u;
      uint32_t mask;
      asm("prmt.b32 %0, %1, %2, %3;" : "=r"(mask) : "r"(w[0] << 4), "r"(w[0]), "r"(select));
      return mask;
    } else {
      return pair_mask(w[k / 2], k % 2);
    }
  }
};

// Two bfloat16 sums of a word each, rounded once (add.bf16x2).
__device__ __forceinline__ uint32_t bf16x2_add(uint32_t a, uint32_t b) {
  __nv_bfloat162 x, y;
  memcpy(&x, &a, sizeof x);
  memcpy(&y, &b, sizeof y);
  const __nv_bfloat162 s = __hadd2(x, y);
  uint32_t r;
  memcpy(&r, &s, sizeof r);
  return r;
}

// Channels 4 k .. 4 k + 3 of a 16-byte vector of T from their float sums, each rounded once to T:
// words 2 k and 2 k + 1 in bfloat16, words 0 .. 3 in float32 (k = 0).
template <typename T>
__device__ __forceinline__ void store_sums(const float (&acc)[4], uint32_t (&result)[4], int k) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __nv_bfloat162 pair = __floats2bfloat162_rn(acc[2 * h], acc[2 * h + 1]);
      memcpy(&result[2 * k + h], &pair, sizeof pair);
    }
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) result[4 * k + j] = __float_as_uint(acc[j]);
  }
}

// Backward of 2-D NHWC max pooling with uint8 taps over 2x2 tiles of input pixels: a thread per
// band of kRows tiles stacked down the rows (pixel rows 2 kRows by .. 2 kRows by + 2 kRows - 1,
// columns 2 tx and 2 tx + 1) and 16-byte vector of channels. The plan admits only windows of which
// a tile meets at most two rows and two columns ((kernel - 1) * dilation + 2 <= 2 * stride per
// dim: ResNet's 3x3 stride-2 max pool), so a tile's (up to) four windows are loaded once, all
// loads in flight together, for its four pixels: the per-pixel kernel loads 2.25 windows per pixel
// for 3x3 stride 2. With stride 2 down the rows, tile i + 1's upper window row is tile i's lower
// one, so a band of two tiles (kRows = 2, see tile_band_rows) loads three window rows for its
// eight pixels instead of four: ResNet's 3x3 stride-2 max pool fwd+bwd 256x64x112x112 bf16
// 313.5-315.4 -> 301.9-304.2 us, f32 546.0-547.5 -> 531.4-534.4 (H200, session 15 runs 1-2), its
// backward then as fast as a kernel that only reads 5 and writes 16 vectors (bench/bandwidth.cu).
// Each pixel sums its windows in the per-pixel kernel's order (rows descending, then columns
// descending) from 0, in float, so results are bit-identical to it; pixels in no window get zeros.
// A window's channel is added where its tap is the pixel's (WindowTaps tests a word of taps at
// once: four uint8 taps or eight packed ones, kPackedTaps); bfloat16 pixels in at most two
// windows (three of a 3x3 stride-2 tile's four) sum packed pairs instead: +0 + a + b rounded once
// to bfloat16 (add.bf16x2) is what the float sum rounds to, as a + b of two bfloat16 is exact in
// float or within 2^-15 of the larger (so both round it alike), and the leading +0 turns -0 into
// +0 as the float sum does; unmatched channels add +0 (and so do the float sums: from +0 they never
// hold -0, so adding +0 changes nothing).
// The loads in flight per SM bound its speed: on the H200, bfloat16 at 2 resident blocks (88-90
// registers with all four pixels' sums live, ~48 KB of loads) ran at 1740 GB/s and float32 at 4
// (54-59 registers, ~80 KB) at 2980, both about 36 GB/s per KB. Hence one pixel's sums at a time,
// windows held as loaded words, and resident blocks asked for: 5 for single tiles (48 registers),
// 4 for bands of two (64 registers). Before the packed words and flags, bfloat16 held each element
// in a register of its own (64 registers at 4 blocks, 12 bytes spilled) and spent five
// instructions per channel and window (shift, mask, compare, widen, add): 3x3 stride-2 fwd+bwd at
// 2838 GB/s against float32's 3620; with them 3147 (H200, session 9 run 3; float32 3704).
template <int kRows>
constexpr int kTileBlocksPerSm = kRows > 1 ? 4 : 5;
template <typename T, int V, bool kPackedTaps, int kRows>
__global__ void __launch_bounds__(kBlockThreads, kTileBlocksPerSm<kRows>)
max_pool2d_nhwc_backward_tiles_kernel(Pool2dGeometry g, T* __restrict__ grad_in,
                                      const T* __restrict__ grad_out,
                                      const uint8_t* __restrict__ taps, int64_t total) {
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
  static_assert(V == kVectorOf<T> && (V == 4 || V == 8),
                "tiles move 16-byte vectors and their taps in 32-bit words");
  static_assert(kRows == 1 || kRows == 2, "bands of one or two tiles");
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  static_assert(kBf16 || std::is_same_v<T, float>, "float32 or bfloat16");
  constexpr int kPixelRows = 2 * kRows;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= total) return;
  const PixelOf band = pixel_of<V>(g, t);  // by_y counts bands of kRows tiles, by_x tiles
  const int y0 = kPixelRows * band.y, x0 = 2 * band.x;
  const int rows = ::min(kPixelRows, g.in_h - y0), cols = ::min(2, g.in_w - x0);
  // The last window row starting at or before the band's last row, oh_hi, and before it
  // oh_hi - 1 ... oh_hi - kRows: every window row meeting the band (a tile's two rows meet at
  // most two window rows; with stride 2, tile i's are oh_hi - (kRows - 1 - i) and the row
  // before). Likewise columns ow_hi and ow_hi - 1. Rows or columns outside the output, or
  // offsets outside a window, get tap -1.
  const int extent_h = (g.kernel_h - 1) * g.dilation_h;
  const int extent_w = (g.kernel_w - 1) * g.dilation_w;
  const int oh_hi = int(g.by_stride_h.div(uint32_t(y0 + kPixelRows - 1 + g.pad_h)));
  const int ow_hi = int(g.by_stride_w.div(uint32_t(x0 + 1 + g.pad_w)));
  // tap_h[k][p]: the tap of pixel row y0 + p in window row oh_hi - k (-1: none); tap_w[b][c].
  int tap_h[kRows + 1][kPixelRows], tap_w[2][2];
#pragma unroll
  for (int k = 0; k <= kRows; ++k)
#pragma unroll
    for (int p = 0; p < kPixelRows; ++p) {
      const int offset = window_offset(y0 + p, oh_hi - k, g.stride_h, g.pad_h, g.out_h, extent_h);
      tap_h[k][p] = p < rows && offset >= 0 ? tap_at(g.by_dilation_h, offset) : -1;
    }
#pragma unroll
  for (int b = 0; b < 2; ++b)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int offset = window_offset(x0 + c, ow_hi - b, g.stride_w, g.pad_w, g.out_w, extent_w);
      tap_w[b][c] = c < cols && offset >= 0 ? tap_at(g.by_dilation_w, offset) : -1;
    }
  // The band's windows, every load issued before any is used.
  const int image = band.n * g.out_image + band.c0;
  uint32_t go[kRows + 1][2][4];
  WindowTaps<V, kPackedTaps> window_taps[kRows + 1][2];
#pragma unroll
  for (int k = 0; k <= kRows; ++k)
#pragma unroll
    for (int b = 0; b < 2; ++b) {
#pragma unroll
      for (int q = 0; q < 4; ++q) go[k][b][q] = 0;
      window_taps[k][b].clear();
      const int oh = oh_hi - k, ow = ow_hi - b;
      if (oh < 0 || oh >= g.out_h || ow < 0 || ow >= g.out_w) continue;
      const int at = image + (oh * g.out_w + ow) * g.channels;
      load_words(grad_out + at, go[k][b]);
      window_taps[k][b].load(taps, at);
    }
  // Pixel by pixel, so only one pixel's V sums are live next to the loaded windows.
  // The band's first pixel as a 32-bit offset: one register live across the pixels, not two.
  const int dst = band.n * g.in_image + (y0 * g.in_w + x0) * g.channels + band.c0;
#pragma unroll
  for (int r = 0; r < kPixelRows; ++r)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      if (r >= rows || c >= cols) continue;
      // Pixel row r lies in tile r / 2, whose window rows are k0 and k0 + 1 (rows descending).
      const int k0 = kRows - 1 - r / 2;
      // tap_h / tap_w are -1 for windows that do not exist, so `meets` skips them too.
      auto meets = [&](int a, int b) { return tap_h[k0 + a][r] >= 0 && tap_w[b][c] >= 0; };
      // Flags set where a channel's tap in window (a, b) is not this pixel's.
      auto mismatch = [&](int a, int b) {
        const int key = tap_h[k0 + a][r] * g.kernel_w + tap_w[b][c];
        return window_taps[k0 + a][b].mismatch(uint32_t(key));
      };
      uint32_t result[4];
      const bool packed =
          kBf16 && !(meets(0, 0) && meets(0, 1) && meets(1, 0) && meets(1, 1));
      if (packed) {
        // At most two windows (a pixel meets one or two rows times one or two columns of them,
        // so not all four means at most two): bfloat16 pairs summed from +0 (see above).
#pragma unroll
        for (int q = 0; q < 4; ++q) result[q] = 0;
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
          for (int b = 0; b < 2; ++b) {
            if (!meets(a, b)) continue;
            const auto flags = mismatch(a, b);
#pragma unroll
            for (int q = 0; q < 4; ++q)
              result[q] = bf16x2_add(result[q], go[k0 + a][b][q] & ~flags.pair_differs(q));
          }
      } else {
        // Four channels (a tap word's) at a time: fewer sums live next to the windows.
#pragma unroll
        for (int q = 0; q < V / 4; ++q) {
          float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
          for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int b = 0; b < 2; ++b) {
              if (!meets(a, b)) continue;
              const auto flags = mismatch(a, b);
#pragma unroll
              for (int j = 0; j < 4; ++j)
                if (!flags.differs(4 * q + j)) acc[j] += channel_of<T>(go[k0 + a][b], 4 * q + j);
            }
          store_sums<T>(acc, result, q);
        }
      }
      *reinterpret_cast<uint4*>(grad_in + dst + (r * g.in_w + c) * g.channels) =
          make_uint4(result[0], result[1], result[2], result[3]);
    }
}

// Backward of 2-D NHWC average pooling where a 2x2 tile of input pixels meets at most 2x2 windows
// (the max tiles kernel's condition: ResNet-style 3x3 stride-2 windows, 2x2 stride 2 with
// padding), in two phases. A block covers a patch of tiles (blockDim.z rows by blockDim.y
// columns of tiles, the image's channel groups chunk * blockDim.x on, one 16-byte vector each).
// First its threads load, together, every window meeting the patch (blockDim.z + 1 rows by
// blockDim.y + 1 columns: tile i's window rows are the patch's i and i + 1 with stride 2, fewer
// rows are used with larger strides), divide each by its count once (CountDivisor) and keep the
// quotients as floats in shared memory; then a thread per tile and vector sums its four pixels'
// quotients in the per-pixel kernel's order (rows descending, then columns descending, from 0, in
// float), so results are bit-identical to it; pixels in no window get zeros. A window meets four
// tiles, and a tile per thread dividing its own four windows divided each four times: that kernel
// (59 registers at 4 blocks in bfloat16) spent its time on the divisions, 3x3 stride-2 fwd+bwd
// 256x64x112x112 bf16 420-423 us, f32 617-628 (H200, session 15 runs 5-7); this one 310.1-311.4
// and 540.3-540.6 (session 16 runs 3-4). Its shape, measured there: blocks of 128 threads at 10
// per SM (48 registers in bfloat16, 38 in float32), against 256 at 5: bf16 311.3-311.9, f32
// 545.5-546.0; 256 threads at 4 (53 registers) 328-330; 6 or 12 blocks asked for spill and run at
// 349-387 in bf16; each thread's pixels reading the quotients from shared memory as it sums them
// (32 registers, 8 blocks) 321, f32 537-538; a block's loads issued before any quotient is stored
// 314-319; and at 256 threads (runs 1-2), 4 tile rows per block, not 2 (343) or 8 (339), and up
// to 16 vectors of a pixel's channels per block, not 8 (f32 544-546 against 554-556; bf16's 64
// channels are 8).
// Shared memory holds [patch row][patch column][V / 4][blockDim.x] float4: a warp's threads of one
// tile read (and the loading threads write) one float4 each from consecutive addresses.
constexpr int kAvgTilesThreads = 128;
template <typename T, int V>
__global__ void __launch_bounds__(kAvgTilesThreads, 10)
avg_pool2d_nhwc_backward_shared_kernel(Pool2dGeometry g, T* __restrict__ grad_in,
                                       const T* __restrict__ grad_out, int tiles_h, int tiles_w,
                                       int chunks, FastDivmod by_patch_w) {
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
  static_assert(V == kVectorOf<T> && (V == 4 || V == 8), "16-byte vectors of float32 or bfloat16");
  extern __shared__ float4 quotients[];
  const int vectors = blockDim.x, patch_w = blockDim.y + 1, patch_h = blockDim.z + 1;
  const int vector_shift = __ffs(vectors) - 1;  // blockDim.x is a power of two
  const int n = blockIdx.z / chunks, chunk = blockIdx.z - n * chunks;
  const int c0 = chunk * vectors * V;
  const int ty0 = blockIdx.y * blockDim.z, tx0 = blockIdx.x * blockDim.y;
  // The patch's first window row: the upper one of its first tile row (as in the tiles kernel,
  // the last window row starting at or before the tile's last pixel row, and the one before).
  const int oh0 = int(g.by_stride_h.div(uint32_t(2 * ty0 + 1 + g.pad_h))) - 1;
  const int ow0 = int(g.by_stride_w.div(uint32_t(2 * tx0 + 1 + g.pad_w))) - 1;
  const int thread = threadIdx.x + vectors * (threadIdx.y + blockDim.y * threadIdx.z);
  const int threads = vectors * blockDim.y * blockDim.z;
  const int image_out = n * g.out_image + c0;
  for (int i = thread; i < patch_h * patch_w * vectors; i += threads) {
    const int vector = i & (vectors - 1);
    const uint32_t cell = uint32_t(i >> vector_shift);
    const int pr = int(by_patch_w.div(cell)), pc = int(cell) - pr * patch_w;
    const int oh = oh0 + pr, ow = ow0 + pc;
    float q[V];
#pragma unroll
    for (int j = 0; j < V; ++j) q[j] = 0.f;
    if (oh >= 0 && oh < g.out_h && ow >= 0 && ow < g.out_w) {
      uint32_t words[4];
      load_words(grad_out + image_out + (oh * g.out_w + ow) * g.channels + vector * V, words);
      const CountDivisor divisor = count_divisor(
          avg_divisor(oh, g.stride_h, g.pad_h, g.kernel_h, g.in_h, g.count_include_pad) *
          avg_divisor(ow, g.stride_w, g.pad_w, g.kernel_w, g.in_w, g.count_include_pad));
#pragma unroll
      for (int j = 0; j < V; ++j) q[j] = divisor.divide(channel_of<T>(words, j));
    }
#pragma unroll
    for (int h = 0; h < V / 4; ++h)
      quotients[(int(cell) * (V / 4) + h) * vectors + vector] =
          make_float4(q[4 * h], q[4 * h + 1], q[4 * h + 2], q[4 * h + 3]);
  }
  __syncthreads();
  const int ty = ty0 + int(threadIdx.z), tx = tx0 + int(threadIdx.y);
  if (ty >= tiles_h || tx >= tiles_w) return;
  const int y0 = 2 * ty, x0 = 2 * tx;
  const int rows = ::min(2, g.in_h - y0), cols = ::min(2, g.in_w - x0);
  // The tile's window rows oh_hi (a = 0) and oh_hi - 1 (a = 1), columns ow_hi (b = 0) and
  // ow_hi - 1 (b = 1), as the max tiles kernel finds them; row_in[a][r]: window row a exists and
  // holds pixel row y0 + r; col_in[b][c] likewise for column x0 + c.
  const int oh_hi = int(g.by_stride_h.div(uint32_t(y0 + 1 + g.pad_h)));
  const int ow_hi = int(g.by_stride_w.div(uint32_t(x0 + 1 + g.pad_w)));
  bool row_in[2][2], col_in[2][2];
#pragma unroll
  for (int k = 0; k < 2; ++k)
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      int offset;  // average pooling has no dilation: every offset reached is a tap
      row_in[k][p] =
          window_reaches(y0 + p, oh_hi - k, g.stride_h, g.pad_h, g.out_h, g.kernel_h - 1, offset);
      col_in[k][p] =
          window_reaches(x0 + p, ow_hi - k, g.stride_w, g.pad_w, g.out_w, g.kernel_w - 1, offset);
    }
  // The tile's four windows' quotients, read once for its pixels.
  float q[2][2][V];
#pragma unroll
  for (int a = 0; a < 2; ++a)
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const int cell = (oh_hi - a - oh0) * patch_w + (ow_hi - b - ow0);
#pragma unroll
      for (int h = 0; h < V / 4; ++h) {
        const float4 f = quotients[(cell * (V / 4) + h) * vectors + int(threadIdx.x)];
        q[a][b][4 * h] = f.x;
        q[a][b][4 * h + 1] = f.y;
        q[a][b][4 * h + 2] = f.z;
        q[a][b][4 * h + 3] = f.w;
      }
    }
  const int dst = n * g.in_image + (y0 * g.in_w + x0) * g.channels + c0 + int(threadIdx.x) * V;
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      if (r >= rows || c >= cols) continue;
      uint32_t result[4];
#pragma unroll
      for (int k = 0; k < V / 4; ++k) {
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
          for (int b = 0; b < 2; ++b) {
            if (!(row_in[a][r] && col_in[b][c])) continue;
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[j] += q[a][b][4 * k + j];
          }
        store_sums<T>(acc, result, k);
      }
      *reinterpret_cast<uint4*>(grad_in + dst + (r * g.in_w + c) * g.channels) =
          make_uint4(result[0], result[1], result[2], result[3]);
    }
}

// Backward of 2-D NHWC average pooling, or max pooling with uint8 taps, where the windows tile the
// input without overlapping (kernel == stride, no padding, no dilation: ResNet's 2x2 stride-2
// average pool): a thread per window-sized cell of the input (cell (y, x) holds rows y * stride_h
// on, columns x * stride_w on) and channel group reads its window's gradient (and taps) once and
// writes the cell's pixels; cells past the last window (input rows or columns that no window
// reaches) get zeros. An input pixel lies in at most one window, so its gradient is 0 + that
// window's share, as the per-pixel kernel sums it: bit-identical results. The tiles kernel reads
// this case's one window per tile too, but holds four windows' registers (3 blocks per SM in
// bfloat16), so its few loads per thread leave the stores waiting; this kernel's threads carry one
// vector and its stores.
template <typename T, int V, bool kMax>
__global__ void __launch_bounds__(kBlockThreads)
pool2d_nhwc_backward_disjoint_kernel(Pool2dGeometry g, T* __restrict__ grad_in,
                                     const T* __restrict__ grad_out,
                                     const uint8_t* __restrict__ taps, int64_t total,
                                     bool packed_taps) {
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
  static_assert(V == 4 || V == 8, "cells move 16-byte vectors and their taps in 32-bit words");
  using Vec = AlignedVec<T, V>;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= total) return;
  const PixelOf cell = pixel_of<V>(g, t);  // by_y, by_x count cells
  const int y0 = cell.y * g.stride_h, x0 = cell.x * g.stride_w;
  const int rows = ::min(g.kernel_h, g.in_h - y0), cols = ::min(g.kernel_w, g.in_w - x0);
  const bool window = cell.y < g.out_h && cell.x < g.out_w;
  Vec go;
  uint32_t words[V / 4];
#pragma unroll
  for (int j = 0; j < V; ++j) go.v[j] = convert<T>(0.f);
  // Outside a window the gradient is zero, so whichever tap matches adds 0.
#pragma unroll
  for (int k = 0; k < V / 4; ++k) words[k] = 0xffffffffu;
  if (window) {
    const int at = cell.n * g.out_image + (cell.y * g.out_w + cell.x) * g.channels + cell.c0;
    go = *reinterpret_cast<const Vec*>(grad_out + at);
    if constexpr (kMax) {
      load_tap_bytes<V>(taps, at, packed_taps, words);
    }
  }
  T* dst = grad_in + cell.n * g.in_image + (y0 * g.in_w + x0) * g.channels + cell.c0;
  if constexpr (kMax) {
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        const uint32_t key = uint32_t(r * g.kernel_w + c);
        Vec result;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          float acc = 0.f;
          if (tap_in<V>(words, j) == key) acc += convert<float>(go.v[j]);
          result.v[j] = convert<T>(acc);
        }
        *reinterpret_cast<Vec*>(dst + (r * g.in_w + c) * g.channels) = result;
      }
  } else {
    // Every pixel of the window gets the same share.
    Vec result;
    const CountDivisor divisor = count_divisor(
        window ? avg_divisor(cell.y, g.stride_h, 0, g.kernel_h, g.in_h, g.count_include_pad) *
                     avg_divisor(cell.x, g.stride_w, 0, g.kernel_w, g.in_w, g.count_include_pad)
               : 1);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float acc = 0.f;
      acc += divisor.divide(convert<float>(go.v[j]));
      result.v[j] = convert<T>(acc);
    }
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c)
        *reinterpret_cast<Vec*>(dst + (r * g.in_w + c) * g.channels) = result;
  }
}

// Global average of dense NHWC input [N, plane, C] into dense [N, C]. Block (bx, by): x runs over
// (n, channel group) items, y splits the plane's rows; partial sums meet in shared memory.
template <typename T, int V>
__global__ void __launch_bounds__(kBlockThreads)
global_avg_pool_nhwc_forward_kernel(const T* __restrict__ in, T* __restrict__ out, int items,
                                    int groups, int channels, int plane) {
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
  using Vec = AlignedVec<T, V>;
  __shared__ float partial[V * kBlockThreads];  // [V][by][bx]: conflict-free along x
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
  const int item = blockIdx.x * bx + tx;
  const int n = item / groups, c0 = (item - n * groups) * V;
  float sum[V];
#pragma unroll
  for (int j = 0; j < V; ++j) sum[j] = 0.f;
  if (item < items) {
    const T* src = in + n * plane * channels + c0;
    // Unrolled by 4: four rows' loads in flight (batches of 8 rows measured slower: bf16
    // 256x2048x7x7 forward 16.2 -> 17.0 us on the H200, session 12 run 4).
#pragma unroll 4
    for (int p = ty; p < plane; p += by) {
      const Vec v = *reinterpret_cast<const Vec*>(src + p * channels);
#pragma unroll
      for (int j = 0; j < V; ++j) sum[j] += convert<float>(v.v[j]);
    }
  }
  if (by > 1) {  // uniform over the block
#pragma unroll
    for (int j = 0; j < V; ++j) partial[(j * by + ty) * bx + tx] = sum[j];
    __syncthreads();
    if (ty == 0) {
      // k outer, channels inner: V independent chains whose loads overlap (each channel still
      // sums k = 0, 1, ... in order).
#pragma unroll
      for (int j = 0; j < V; ++j) sum[j] = 0.f;
      for (int k = 0; k < by; ++k)
#pragma unroll
        for (int j = 0; j < V; ++j) sum[j] += partial[(j * by + k) * bx + tx];
    }
  }
  if (ty == 0 && item < items) {
    Vec result;
#pragma unroll
    for (int j = 0; j < V; ++j) result.v[j] = convert<T>(sum[j] / float(plane));
    *reinterpret_cast<Vec*>(out + n * channels + c0) = result;
  }
}

// grad_in[n, p, c] = grad_out[n, c] / plane for a dense NHWC grad_in [N, plane, C]; grad_out is
// read through its strides: one 16-byte load per thread where its channels are contiguous and
// aligned (`vector_grad_out`, uniform: the [N, C] gradient of a dense output), else V scalar loads
// (broadcast gradients, stride 0). The block shape is the forward's; the rows' stores are unrolled
// so that a thread's stores issue back to back once its value is known.
template <typename T, int V>
__global__ void __launch_bounds__(kBlockThreads)
global_avg_pool_nhwc_backward_kernel(T* __restrict__ grad_in, const T* __restrict__ grad_out,
                                     int items, int groups, int channels, int plane,
                                     int64_t grad_out_stride_n, int64_t grad_out_stride_c,
                                     bool vector_grad_out) {
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
  using Vec = AlignedVec<T, V>;
  const int item = blockIdx.x * blockDim.x + threadIdx.x;
  if (item >= items) return;
  const int n = item / groups, c0 = (item - n * groups) * V;
  const T* src = grad_out + n * grad_out_stride_n;
  Vec value;
  if (vector_grad_out) {
    value = *reinterpret_cast<const Vec*>(src + c0);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) value.v[j] = src[(c0 + j) * grad_out_stride_c];
  }
#pragma unroll
  for (int j = 0; j < V; ++j) value.v[j] = convert<T>(convert<float>(value.v[j]) / float(plane));
  T* dst = grad_in + n * plane * channels + c0;
#pragma unroll 4
  for (int p = threadIdx.y; p < plane; p += blockDim.y)
    *reinterpret_cast<Vec*>(dst + p * channels) = value;
}

// grad_in[n, c, p] = grad_out[n, c] / plane for a dense NCHW grad_in of `total` elements (planes
// of `plane` elements): V consecutive elements per thread (they may span planes), the last
// vector stored element by element when total % V != 0.
template <typename T, int V>
__global__ void __launch_bounds__(kBlockThreads)
global_avg_pool_nchw_backward_kernel(T* __restrict__ grad_in, const T* __restrict__ grad_out,
                                     int total, FastDivmod by_plane, FastDivmod by_channels,
                                     int plane, int64_t grad_out_stride_n,
                                     int64_t grad_out_stride_c) {
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
  using Vec = AlignedVec<T, V>;
  auto plane_value = [&](uint32_t p) {
    const uint32_t n = by_channels.div(p);
    const uint32_t c = p - n * by_channels.divisor;
    return convert<T>(
        convert<float>(grad_out[int64_t(n) * grad_out_stride_n + int64_t(c) * grad_out_stride_c]) /
        float(plane));
  };
  const int64_t vectors = (int64_t(total) + V - 1) / V;
  const int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= vectors) return;
  const int first = int(v * V);
  const int count = ::min(V, total - first);
  uint32_t p = by_plane.div(uint32_t(first));
  int within = first - int(p) * plane;
  T current = plane_value(p);
  Vec out;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    if (j < count) {
      if (within == plane) {
        ++p;
        within = 0;
        current = plane_value(p);
      }
      out.v[j] = current;
      ++within;
    }
  }
  if (count == V) {
    *reinterpret_cast<Vec*>(grad_in + first) = out;
  } else {
    for (int j = 0; j < count; ++j) grad_in[first + j] = out.v[j];
  }
}

// ---- selection ----------------------------------------------------------------------------------

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// True when `strides` (n, c, d, h, w) are those of a dense tensor of these sizes with memory
// order n, d, h, w, c (channels_last) or n, c, d, h, w. Size-1 dims may have any stride.
bool is_dense(bool channels_last, int64_t batch, int64_t channels, const int64_t (&spatial)[3],
              const int64_t (&strides)[5]) {
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

int64_t volume(const PoolArgs& a, const int64_t (&spatial)[3]) {
  return a.batch * a.channels * spatial[0] * spatial[1] * spatial[2];
}

// True when a and b (of equal sizes) place every element at the same element offset.
bool same_offsets(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (a.size(d) != 1 && a.stride(d) != b.stride(d)) return false;
  return true;
}

bool aligned16(const Tensor& t) { return is_aligned(t.data_ptr(), kVectorBytes); }

// Every offset the window kernels form along one spatial dim fits in an int.
bool window_dim_fits(const PoolArgs& a, int dim) {
  const int64_t limit = int64_t(1) << 30;
  const int64_t values[6] = {a.in_size[dim], a.out_size[dim], a.kernel[dim],
                             a.stride[dim],  a.padding[dim],  a.dilation[dim]};
  for (int64_t v : values)
    if (v > limit) return false;
  const int64_t extent = (a.out_size[dim] + 1) * a.stride[dim] + a.kernel[dim] * a.dilation[dim] +
                         a.padding[dim] + a.in_size[dim];
  return extent <= kInt32Max;
}

PoolFastPlan plan_global(const PoolArgs& a, dispatch::Direction direction, int vector) {
  if (volume(a, a.in_size) > kInt32Max) return {};
  const bool vector_channels = a.channels % vector == 0;
  const bool input_nhwc = is_dense(true, a.batch, a.channels, a.in_size, a.in_strides);
  if (direction == dispatch::Direction::forward) {
    if (input_nhwc && vector_channels && aligned16(a.input) && aligned16(a.output) &&
        is_dense(true, a.batch, a.channels, a.out_size, a.out_strides))
      return {PoolFastKernel::global_nhwc, vector};
    return {};
  }
  // The gradient of the output is read through its strides (broadcast ones included).
  if (a.out_strides[0] < 0 || a.out_strides[1] < 0 || !aligned16(a.input)) return {};
  if (input_nhwc && vector_channels) return {PoolFastKernel::global_nhwc, vector};
  if (is_dense(false, a.batch, a.channels, a.in_size, a.in_strides))
    return {PoolFastKernel::global_nchw, vector};
  return {};
}

// A 2-input-pixel tile along `dim` meets at most two windows: (kernel - 1) * dilation + 2 <=
// 2 * stride (the spans of two adjacent pixels' windows' starts cover fewer than two strides).
bool tile_meets_two_windows(const PoolArgs& a, int dim) {
  return (a.kernel[dim] - 1) * a.dilation[dim] + 2 <= 2 * a.stride[dim];
}

// The windows along `dim` tile the input without overlap: kernel == stride, no padding or dilation.
bool windows_disjoint(const PoolArgs& a, int dim) {
  return a.kernel[dim] == a.stride[dim] && a.padding[dim] == 0 && a.dilation[dim] == 1;
}

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
AvgTilesLaunch avg_tiles_launch(const PoolArgs& a, int vector) {
  AvgTilesLaunch l{};
  const int64_t groups = a.channels / vector;
  int vectors = 16;
  while (groups % vectors != 0) vectors /= 2;
  const int64_t tiles_h = (a.in_size[1] + 1) / 2, tiles_w = (a.in_size[2] + 1) / 2;
  int columns = kAvgTilesThreads / (vectors * 4);
  while (columns > 1 && columns / 2 >= tiles_w) columns /= 2;
  const int rows = kAvgTilesThreads / (vectors * columns);
  const int64_t grid_y = (tiles_h + rows - 1) / rows, chunks = groups / vectors;
  l.fits = grid_y < 65536 && a.batch * chunks < 65536;
  if (!l.fits) return l;
  l.block = dim3(unsigned(vectors), unsigned(columns), unsigned(rows));
  l.grid = dim3(unsigned((tiles_w + columns - 1) / columns), unsigned(grid_y),
                unsigned(a.batch * chunks));
  l.tiles_h = int(tiles_h);
  l.tiles_w = int(tiles_w);
  l.chunks = int(chunks);
  l.shared_bytes = size_t(rows + 1) * size_t(columns + 1) * size_t(vectors * vector) * sizeof(float);
  return l;
}

PoolFastPlan plan_window(const PoolArgs& a, dispatch::Direction direction, int vector) {
  if (a.in_size[0] != 1 || a.out_size[0] != 1 || a.kernel[0] != 1 || a.padding[0] != 0) return {};
  if (volume(a, a.in_size) > kInt32Max || volume(a, a.out_size) > kInt32Max ||
      !window_dim_fits(a, 1) || !window_dim_fits(a, 2))
    return {};
  if (!is_dense(true, a.batch, a.channels, a.in_size, a.in_strides) ||
      !is_dense(true, a.batch, a.channels, a.out_size, a.out_strides))
    return {};
  const bool max_indices = a.mode == PoolMode::max && a.indices.defined();
  // The kernels read and write indices at the output's offsets (as pooling.cu does); packed taps
  // at half of them (the output is dense, so its offsets are its memory order).
  if (max_indices && !a.packed_taps && !same_offsets(a.indices, a.output)) return {};
  const bool aligned =
      aligned16(a.input) && aligned16(a.output) && (!max_indices || aligned16(a.indices));
  const int v = a.channels % vector == 0 && aligned ? vector : 1;
  // Max or average pooling forward over 3x3 windows: one 16-byte vector of channels per thread,
  // max with uint8 taps or none (channels not filling vectors take the general kernel, one
  // element per access).
  if (direction == dispatch::Direction::forward && v == vector && a.kernel[1] == 3 &&
      a.kernel[2] == 3 && !(max_indices && a.indices.dtype() != DType::u8))
    return {PoolFastKernel::window_3x3_nhwc, vector};
  // Backward by disjoint windows or by tiles: whole vectors, average pooling or uint8 taps (int64
  // positions, only for users' indices, keep the per-pixel kernel).
  const bool tile_indices =
      a.mode != PoolMode::max || (a.indices.defined() && a.indices.dtype() == DType::u8);
  if (direction == dispatch::Direction::backward && v > 1 && tile_indices) {
    if (windows_disjoint(a, 1) && windows_disjoint(a, 2))
      return {PoolFastKernel::window_disjoint_nhwc, v};
    if (tile_meets_two_windows(a, 1) && tile_meets_two_windows(a, 2)) {
      if (a.mode == PoolMode::max) return {PoolFastKernel::window_tiles_nhwc, v};
      if (avg_tiles_launch(a, v).fits) return {PoolFastKernel::window_avg_tiles_nhwc, v};
    }
  }
  return {PoolFastKernel::window_nhwc, v};
}

// ---- launch -------------------------------------------------------------------------------------

// The max tiles kernel's band: two tiles per thread down the rows where the stride there is 2
// (the lower tile's upper window row is the upper tile's lower one), else one.
int tile_band_rows(const PoolArgs& a) { return a.stride[1] == 2 ? 2 : 1; }

// The flat loop runs over output pixels (forward), input pixels (per-pixel backward), bands of
// 2x2 tiles of input pixels (backward by tiles) or window-sized cells of the input (disjoint
// windows).
Pool2dGeometry make_geometry(const PoolArgs& a, int vector, PoolFastKernel kernel,
                             dispatch::Direction direction) {
  Pool2dGeometry g{};
  g.channels = int(a.channels);
  g.in_h = int(a.in_size[1]);
  g.in_w = int(a.in_size[2]);
  g.out_h = int(a.out_size[1]);
  g.out_w = int(a.out_size[2]);
  g.kernel_h = int(a.kernel[1]);
  g.kernel_w = int(a.kernel[2]);
  g.stride_h = int(a.stride[1]);
  g.stride_w = int(a.stride[2]);
  g.pad_h = int(a.padding[1]);
  g.pad_w = int(a.padding[2]);
  g.dilation_h = int(a.dilation[1]);
  g.dilation_w = int(a.dilation[2]);
  g.groups = g.channels / vector;
  g.in_image = g.in_h * g.in_w * g.channels;
  g.out_image = g.out_h * g.out_w * g.channels;
  g.count_include_pad = a.count_include_pad;
  g.by_groups = FastDivmod(uint32_t(g.groups));
  if (direction == dispatch::Direction::forward) {
    g.by_x = FastDivmod(uint32_t(g.out_w));
    g.by_y = FastDivmod(uint32_t(g.out_h));
  } else if (kernel == PoolFastKernel::window_tiles_nhwc) {
    const int band = 2 * tile_band_rows(a);
    g.by_x = FastDivmod(uint32_t((g.in_w + 1) / 2));
    g.by_y = FastDivmod(uint32_t((g.in_h + band - 1) / band));
  } else if (kernel == PoolFastKernel::window_disjoint_nhwc) {
    g.by_x = FastDivmod(uint32_t((g.in_w + g.stride_w - 1) / g.stride_w));
    g.by_y = FastDivmod(uint32_t((g.in_h + g.stride_h - 1) / g.stride_h));
  } else {
    g.by_x = FastDivmod(uint32_t(g.in_w));
    g.by_y = FastDivmod(uint32_t(g.in_h));
  }
  g.by_stride_h = FastDivmod(uint32_t(g.stride_h));
  g.by_stride_w = FastDivmod(uint32_t(g.stride_w));
  g.by_dilation_h = FastDivmod(uint32_t(g.dilation_h));
  g.by_dilation_w = FastDivmod(uint32_t(g.dilation_w));
  return g;
}

// Rows of the plane split over threadIdx.y for `items` (n, channel group) items: doubled while the
// doubled grid still fits kGlobalThreadsPerSm threads per SM (the kernels use <= 32 registers, so
// it is one resident wave: no second, partly filled wave of blocks, and fewer partial sums to
// reduce) and each y thread keeps at least one row. ResNet's head (256 x 2048 x 7 x 7): 4 rows
// per (n, group) in bf16, 2 in f32, about 12 loads of 16 bytes per thread.
dim3 global_block(int64_t items, int64_t plane, int device) {
  const int64_t target =
      int64_t(std::max(device_properties(device).sm_count, 1)) * kGlobalThreadsPerSm;
  int by = 1;
  while (by < kBlockThreads && 2 * by <= plane && items * by * 2 <= target) by *= 2;
  return dim3(unsigned(kBlockThreads / by), unsigned(by));
}

// A window kernel over `grid` blocks of kBlockThreads, launched dependent (its launch and block
// placement overlap the tail of the kernel before it; the kernels wait for it first).
template <typename... Params, typename... Args>
void launch_window_kernel(void (*kernel)(Params...), unsigned grid, cudaStream_t stream,
                          Args&&... args) {
  launch_dependent(kernel, dim3(grid), dim3(kBlockThreads), 0, stream, std::forward<Args>(args)...);
}

// Max or average pooling forward over 3x3 windows, one 16-byte vector per thread (max: uint8
// taps or none).
template <typename T>
void launch_window_3x3(const PoolArgs& a, cudaStream_t stream) {
  const Pool2dGeometry g = make_geometry(a, kVectorOf<T>, PoolFastKernel::window_3x3_nhwc,
                                         dispatch::Direction::forward);
  const int64_t total = a.batch * g.groups * int64_t(g.out_h) * g.out_w;
  uint8_t* taps = a.indices.defined() ? a.indices.data<uint8_t>() : nullptr;
  launch_window_kernel(a.mode == PoolMode::max ? pool2d_3x3_nhwc_forward_kernel<T, true>
                                               : pool2d_3x3_nhwc_forward_kernel<T, false>,
                       blocks_for(total), stream, g, static_cast<const T*>(a.input.data_ptr()),
                       static_cast<T*>(a.output.data_ptr()), taps, total, a.packed_taps);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T, int V>
void launch_window(const PoolArgs& a, PoolFastKernel kernel, dispatch::Direction direction,
                   cudaStream_t stream) {
  const Pool2dGeometry g = make_geometry(a, V, kernel, direction);
  const bool forward = direction == dispatch::Direction::forward;
  const int64_t total = a.batch * g.groups * int64_t(g.by_y.divisor) * g.by_x.divisor;
  const unsigned grid = blocks_for(total);
  const bool max = a.mode == PoolMode::max;
  // int64 flat indices, else uint8 taps (null: max pooling without indices, or average pooling).
  const bool flat_indices = max && a.indices.defined() && a.indices.dtype() == DType::i64;
  uint8_t* taps = max && a.indices.defined() && !flat_indices ? a.indices.data<uint8_t>() : nullptr;
  // Packed taps are written only on whole vectors (a thread's taps are then whole bytes); the
  // per-pixel backward reads them a nibble at a time too.
  EMBER_INTERNAL_ASSERT(!forward || !a.packed_taps || V > 1,
                        "max pooling: packed uint8 taps are written only on 16-byte vectors of "
                        "channels (pool_fast_packs_taps promised them)");
  const bool packed = a.packed_taps;
  if (forward) {
    const T* in = static_cast<const T*>(a.input.data_ptr());
    T* out = static_cast<T*>(a.output.data_ptr());
    if (flat_indices)
      launch_window_kernel(pool2d_nhwc_forward_kernel<T, V, true, int64_t>, grid, stream, g, in, out,
                           a.indices.data<int64_t>(), total, false);
    else if (max)
      launch_window_kernel(pool2d_nhwc_forward_kernel<T, V, true, uint8_t>, grid, stream, g, in, out,
                           taps, total, packed);
    else
      launch_window_kernel(pool2d_nhwc_forward_kernel<T, V, false, uint8_t>, grid, stream, g, in,
                           out, static_cast<uint8_t*>(nullptr), total, false);
  } else {
    T* grad_in = static_cast<T*>(a.input.data_ptr());
    const T* grad_out = static_cast<const T*>(a.output.data_ptr());
    if constexpr (V > 1) {
      if (kernel == PoolFastKernel::window_avg_tiles_nhwc) {
        const AvgTilesLaunch l = avg_tiles_launch(a, V);
        launch_dependent(avg_pool2d_nhwc_backward_shared_kernel<T, V>, l.grid, l.block,
                         l.shared_bytes, stream, g, grad_in, grad_out, l.tiles_h, l.tiles_w,
                         l.chunks, FastDivmod(l.block.y + 1));
        EMBER_CUDA_LAUNCH_CHECK();
        return;
      }
      // By whole windows (max or average: taps null) or by 2x2 tiles (max): the same arguments.
      const bool disjoint = kernel == PoolFastKernel::window_disjoint_nhwc;
      if (disjoint || kernel == PoolFastKernel::window_tiles_nhwc) {
        if (disjoint)
          launch_window_kernel(max ? pool2d_nhwc_backward_disjoint_kernel<T, V, true>
                                   : pool2d_nhwc_backward_disjoint_kernel<T, V, false>,
                               grid, stream, g, grad_in, grad_out,
                               static_cast<const uint8_t*>(taps), total, packed);
        else if (tile_band_rows(a) == 2)
          launch_window_kernel(packed ? max_pool2d_nhwc_backward_tiles_kernel<T, V, true, 2>
                                      : max_pool2d_nhwc_backward_tiles_kernel<T, V, false, 2>,
                               grid, stream, g, grad_in, grad_out,
                               static_cast<const uint8_t*>(taps), total);
        else
          launch_window_kernel(packed ? max_pool2d_nhwc_backward_tiles_kernel<T, V, true, 1>
                                      : max_pool2d_nhwc_backward_tiles_kernel<T, V, false, 1>,
                               grid, stream, g, grad_in, grad_out,
                               static_cast<const uint8_t*>(taps), total);
        EMBER_CUDA_LAUNCH_CHECK();
        return;
      }
    }
    if (flat_indices)
      launch_window_kernel(pool2d_nhwc_backward_kernel<T, V, true, int64_t>, grid, stream, g,
                           grad_in, grad_out, static_cast<const int64_t*>(a.indices.data<int64_t>()),
                           total, false);
    else if (max)
      launch_window_kernel(pool2d_nhwc_backward_kernel<T, V, true, uint8_t>, grid, stream, g,
                           grad_in, grad_out, static_cast<const uint8_t*>(taps), total, packed);
    else
      launch_window_kernel(pool2d_nhwc_backward_kernel<T, V, false, uint8_t>, grid, stream, g,
                           grad_in, grad_out, static_cast<const uint8_t*>(nullptr), total, false);
  }
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void launch_global(const PoolArgs& a, PoolFastKernel kernel, dispatch::Direction direction,
                   cudaStream_t stream) {
  constexpr int V = kVectorOf<T>;
  const int device = a.input.device().index;
  const int channels = int(a.channels);
  const int plane = int(a.in_size[0] * a.in_size[1] * a.in_size[2]);
  if (kernel == PoolFastKernel::global_nchw) {
    const int total = int(volume(a, a.in_size));
    launch_dependent(global_avg_pool_nchw_backward_kernel<T, V>, dim3(blocks_for((int64_t(total) + V - 1) / V)),
                     dim3(kBlockThreads), 0, stream, static_cast<T*>(a.input.data_ptr()),
                     static_cast<const T*>(a.output.data_ptr()), total, FastDivmod(uint32_t(plane)),
                     FastDivmod(uint32_t(channels)), plane, a.out_strides[0], a.out_strides[1]);
    EMBER_CUDA_LAUNCH_CHECK();
    return;
  }
  const int groups = channels / V;
  const int items = int(a.batch) * groups;
  const dim3 block = global_block(items, plane, device);
  const unsigned grid = unsigned((items + int64_t(block.x) - 1) / block.x);
  if (direction == dispatch::Direction::forward)
    launch_dependent(global_avg_pool_nhwc_forward_kernel<T, V>, dim3(grid), block, 0, stream,
                     static_cast<const T*>(a.input.data_ptr()), static_cast<T*>(a.output.data_ptr()), items,
                     groups, channels, plane);
  else
    launch_dependent(global_avg_pool_nhwc_backward_kernel<T, V>, dim3(grid), block, 0, stream,
                     static_cast<T*>(a.input.data_ptr()), static_cast<const T*>(a.output.data_ptr()), items,
                     groups, channels, plane, a.out_strides[0], a.out_strides[1],
                     a.out_strides[1] == 1 && (a.batch == 1 || a.out_strides[0] % V == 0) &&
                         aligned16(a.output));
}

bool run_fast(const PoolArgs& a, dispatch::Direction direction, cudaStream_t stream) {
  const PoolFastPlan plan = pool_fast_plan(a, direction);
  if (plan.kernel == PoolFastKernel::none) return false;
  dispatch_floating<FloatingTypes::f32_bf16>(
      a.input.dtype(), "pooling", "fast path", [&](auto tag) {
        using T = decltype(tag);
        const bool global = plan.kernel == PoolFastKernel::global_nhwc ||
                            plan.kernel == PoolFastKernel::global_nchw;
        if (global)
          launch_global<T>(a, plan.kernel, direction, stream);
        else if (plan.kernel == PoolFastKernel::window_3x3_nhwc)
          launch_window_3x3<T>(a, stream);
        else if (plan.vector == kVectorOf<T>)
          launch_window<T, kVectorOf<T>>(a, plan.kernel, direction, stream);
        else
          launch_window<T, 1>(a, plan.kernel, direction, stream);
      });
  return true;
}

}  // namespace

PoolFastPlan pool_fast_plan(const PoolArgs& a, dispatch::Direction direction) {
  const DType dtype = a.input.dtype();
  if (dtype != DType::f32 && dtype != DType::bf16) return {};
  const int vector = kVectorBytes / int(element_size(dtype));
  if (a.mode == PoolMode::adaptive_avg) {
    const bool global = a.out_size[0] == 1 && a.out_size[1] == 1 && a.out_size[2] == 1;
    return global ? plan_global(a, direction, vector) : PoolFastPlan{};
  }
  return plan_window(a, direction, vector);
}

bool pool_fast_packs_taps(const PoolArgs& a) {
  if (a.mode != PoolMode::max || a.kernel[0] * a.kernel[1] * a.kernel[2] > kPoolMaxTapsU4 ||
      a.channels % 2 != 0)
    return false;
  const PoolFastPlan plan = pool_fast_plan(a, dispatch::Direction::forward);
  return plan.vector > 1 && (plan.kernel == PoolFastKernel::window_3x3_nhwc ||
                             plan.kernel == PoolFastKernel::window_nhwc);
}

bool pool_fast_forward(const PoolArgs& a, cudaStream_t stream) {
  return run_fast(a, dispatch::Direction::forward, stream);
}

bool pool_fast_backward(const PoolArgs& a, cudaStream_t stream) {
  return run_fast(a, dispatch::Direction::backward, stream);
}

}  // namespace ember::cuda
