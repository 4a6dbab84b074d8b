// Backward kernels of 2-D max / average pooling over dense channels_last (NHWC) tensors, float32
// and bfloat16 (algorithms window_nhwc, window_tiles_nhwc, window_avg_tiles_nhwc and
// window_disjoint_nhwc, pooling_nhwc_algorithms.cu), every one deterministic (no atomics):
//  - per pixel: a thread per INPUT pixel and channel group gathering from the output windows that
//    contain it, max pooling comparing the saved indices (int64, uint8 taps, packed taps);
//  - by tiles, where a 2x2 tile of input pixels meets at most 2x2 windows (3x3 stride 2, ...): for
//    max pooling a thread per tile (per two tiles stacked where the row stride is 2: they share a
//    window row) loading each of its windows once for its pixels, for average pooling a block per
//    patch of tiles dividing each of its windows once into shared memory and a thread per tile
//    summing them. The max tiles hold their windows as loaded 32-bit words (bfloat16 two a word),
//    test four uint8 taps (or eight packed ones) at once, and sum bfloat16 pixels in at most two
//    windows as packed pairs rounded once (what the float sum rounds to);
//  - by disjoint windows, where the windows tile the input without overlap (2x2 stride 2, ...):
//    a thread per window.
// Results are bit-identical to the generic kernels' (pooling.cu): the same windows, divisors and
// float summation order. Gradients are written, not accumulated.
#include "ember/cuda_kernels/pooling/pooling_nhwc.cuh"

namespace ember::cuda {
namespace {

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
// columns 2 tx and 2 tx + 1) and 16-byte vector of channels. It applies only to windows of which
// a tile meets at most two rows and two columns ((kernel - 1) * dilation + 2 <= 2 * stride per
// dim: ResNet's 3x3 stride-2 max pool), so a tile's (up to) four windows are loaded once, all
// loads in flight together, for its four pixels: the per-pixel kernel loads 2.25 windows per pixel
// for 3x3 stride 2. With stride 2 down the rows, tile i + 1's upper window row is tile i's lower
// one, so a band of two tiles (kRows = 2, see tile_band_rows) loads three window rows for its
// eight pixels instead of four, which makes the backward as fast as a kernel that only reads 5 and
// writes 16 vectors (bench/bandwidth.cu).
// Each pixel sums its windows in the per-pixel kernel's order (rows descending, then columns
// descending) from 0, in float, so results are bit-identical to it; pixels in no window get zeros.
// A window's channel is added where its tap is the pixel's (WindowTaps tests a word of taps at
// once: four uint8 taps or eight packed ones, kPackedTaps); bfloat16 pixels in at most two
// windows (three of a 3x3 stride-2 tile's four) sum packed pairs instead: +0 + a + b rounded once
// to bfloat16 (add.bf16x2) is what the float sum rounds to, as a + b of two bfloat16 is exact in
// float or within 2^-15 of the larger (so both round it alike), and the leading +0 turns -0 into
// +0 as the float sum does; unmatched channels add +0 (and so do the float sums: from +0 they never
// hold -0, so adding +0 changes nothing).
// The loads in flight per SM bound its speed (bandwidth grows in proportion to them), so registers
// are spent on loads: one pixel's sums at a time, windows held as loaded words, and resident
// blocks asked for: 5 for single tiles (48 registers), 4 for bands of two (64 registers). The
// packed words and flags are why bfloat16 keeps up: held an element per register it spilled and
// spent five instructions per channel and window (shift, mask, compare, widen, add).
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
      const bool packed = kBf16 && !(meets(0, 0) && meets(0, 1) && meets(1, 0) && meets(1, 1));
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
// tiles, so a tile per thread dividing its own four windows would divide each four times and
// spend its time on the divisions. The shape is the fastest found: blocks of 128 threads at 10 per
// SM (48 registers in bfloat16, 38 in float32) rather than 256 at 4 or 5 (more blocks asked for
// spill); each thread loading its pixels' quotients before summing rather than reading them as it
// sums (faster in bfloat16, even in float32); a block's quotients stored as its loads arrive;
// 4 tile rows per block rather than 2 or 8; up to 16 vectors of a pixel's channels per block
// rather than 8.
// Shared memory holds [patch row][patch column][V / 4][blockDim.x] float4: a warp's threads of one
// tile read (and the loading threads write) one float4 each from consecutive addresses.
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

template <typename T, int V>
void launch_window_backward_typed(const PoolArgs& a, PoolFastKernel kernel, cudaStream_t stream) {
  const Pool2dGeometry g = make_geometry(a, V, kernel, dispatch::Direction::backward);
  const int64_t total = a.batch * g.groups * int64_t(g.by_y.divisor) * g.by_x.divisor;
  const unsigned grid = blocks_for(total);
  const bool max = a.mode == PoolMode::max;
  // int64 flat indices, else uint8 taps (null: max pooling without indices, or average pooling).
  const bool flat_indices = max && a.indices.defined() && a.indices.dtype() == DType::i64;
  uint8_t* taps = max && a.indices.defined() && !flat_indices ? a.indices.data<uint8_t>() : nullptr;
  // The per-pixel backward reads packed taps a nibble at a time too.
  const bool packed = a.packed_taps;
  T* grad_in = static_cast<T*>(a.input.data_ptr());
  const T* grad_out = static_cast<const T*>(a.output.data_ptr());
  if constexpr (V > 1) {
    if (kernel == PoolFastKernel::window_avg_tiles_nhwc) {
      const AvgTilesLaunch l = avg_tiles_launch(a, V);
      launch_dependent(avg_pool2d_nhwc_backward_shared_kernel<T, V>, l.grid, l.block,
                       l.shared_bytes, stream, g, grad_in, grad_out, l.tiles_h, l.tiles_w, l.chunks,
                       FastDivmod(l.block.y + 1));
      EMBER_CUDA_LAUNCH_CHECK();
      return;
    }
    // By whole windows (max or average: taps null) or by 2x2 tiles (max): the same arguments.
    const bool disjoint = kernel == PoolFastKernel::window_disjoint_nhwc;
    if (disjoint || kernel == PoolFastKernel::window_tiles_nhwc) {
      if (disjoint)
        launch_window_kernel(max ? pool2d_nhwc_backward_disjoint_kernel<T, V, true>
                                 : pool2d_nhwc_backward_disjoint_kernel<T, V, false>,
                             grid, stream, g, grad_in, grad_out, static_cast<const uint8_t*>(taps),
                             total, packed);
      else if (tile_band_rows(a) == 2)
        launch_window_kernel(packed ? max_pool2d_nhwc_backward_tiles_kernel<T, V, true, 2>
                                    : max_pool2d_nhwc_backward_tiles_kernel<T, V, false, 2>,
                             grid, stream, g, grad_in, grad_out, static_cast<const uint8_t*>(taps),
                             total);
      else
        launch_window_kernel(packed ? max_pool2d_nhwc_backward_tiles_kernel<T, V, true, 1>
                                    : max_pool2d_nhwc_backward_tiles_kernel<T, V, false, 1>,
                             grid, stream, g, grad_in, grad_out, static_cast<const uint8_t*>(taps),
                             total);
      EMBER_CUDA_LAUNCH_CHECK();
      return;
    }
  }
  if (flat_indices)
    launch_window_kernel(pool2d_nhwc_backward_kernel<T, V, true, int64_t>, grid, stream, g, grad_in,
                         grad_out, static_cast<const int64_t*>(a.indices.data<int64_t>()), total,
                         false);
  else if (max)
    launch_window_kernel(pool2d_nhwc_backward_kernel<T, V, true, uint8_t>, grid, stream, g, grad_in,
                         grad_out, static_cast<const uint8_t*>(taps), total, packed);
  else
    launch_window_kernel(pool2d_nhwc_backward_kernel<T, V, false, uint8_t>, grid, stream, g,
                         grad_in, grad_out, static_cast<const uint8_t*>(nullptr), total, false);
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace

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
  l.shared_bytes =
      size_t(rows + 1) * size_t(columns + 1) * size_t(vectors * vector) * sizeof(float);
  return l;
}

void launch_window_backward(const PoolArgs& a, PoolFastKernel kernel, int vector,
                            cudaStream_t stream) {
  const auto launch = [&](auto tag) {
    using T = decltype(tag);
    if (vector == kVectorOf<T>)
      launch_window_backward_typed<T, kVectorOf<T>>(a, kernel, stream);
    else
      launch_window_backward_typed<T, 1>(a, kernel, stream);
  };
  dispatch_floating<FloatingTypes::f32_bf16>(a.input.dtype(), "pooling", "window backward", launch);
}

}  // namespace ember::cuda
