// Forward kernels of 2-D max / average pooling over dense channels_last (NHWC) tensors, float32
// and bfloat16 (algorithms window_nhwc and window_3x3_nhwc, pooling_nhwc_algorithms.cu): a thread
// per output pixel and group of V channels (V = 16 bytes of elements when C % V == 0 and the
// pointers are 16-byte aligned, else 1), 16-byte loads and stores, 32-bit index math, float
// accumulation; and over 3x3 windows (max: uint8 taps or none) the nine 16-byte loads unrolled
// (bfloat16 max compared two channels per instruction). Max indices are a template parameter:
// int64 flat positions or uint8 window taps (kernel_interface/pooling.h), V of them moved per
// access; a null uint8 pointer means the forward writes none. On whole vectors uint8 taps may be
// written packed two a byte (PoolArgs::packed_taps), which every backward kernel reads.
// Values, taps and sums are bit-identical to the generic kernels' (pooling.cu): the same windows,
// divisors, first maximum kept, NaN wins (the last NaN), the same float summation order.
#include "ember/cuda_kernels/pooling/pooling_nhwc.cuh"

namespace ember::cuda {
namespace {

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
// flight per thread. Faster than the loop kernel in both types; for bfloat16, 8 channels a thread
// scanned packed beat 4 channels a thread (twice float32's threads per byte, each living about as
// long) and 8 channels scanned as floats (twice the registers). bfloat16's best values go out
// through float like the general kernel's (NaN as that conversion makes it); its taps as one
// 8-byte store, or 4 bytes packed. Max pooling asks for five resident blocks (48 registers, a few
// bytes spilled: faster than the four blocks of 54 registers unasked). Average pooling sums each
// bfloat16 word's halves as floats, at 4 resident blocks (at 5 it spills).
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
    const CountDivisor divisor =
        count_divisor(avg_divisor(o.y, g.stride_h, g.pad_h, 3, g.in_h, g.count_include_pad) *
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
    const int first_tap = (row_in[0]   ? 0
                           : row_in[1] ? 1
                                       : 2) *
                              3 +
                          (col_in[0]   ? 0
                           : col_in[1] ? 1
                                       : 2);
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

template <typename T, int V>
void launch_window_forward_typed(const PoolArgs& a, cudaStream_t stream) {
  const Pool2dGeometry g =
      make_geometry(a, V, PoolFastKernel::window_nhwc, dispatch::Direction::forward);
  const int64_t total = a.batch * g.groups * int64_t(g.by_y.divisor) * g.by_x.divisor;
  const unsigned grid = blocks_for(total);
  const bool max = a.mode == PoolMode::max;
  // int64 flat indices, else uint8 taps (null: max pooling without indices, or average pooling).
  const bool flat_indices = max && a.indices.defined() && a.indices.dtype() == DType::i64;
  uint8_t* taps = max && a.indices.defined() && !flat_indices ? a.indices.data<uint8_t>() : nullptr;
  // Packed taps are written only on whole vectors (a thread's taps are then whole bytes).
  EMBER_INTERNAL_ASSERT(!a.packed_taps || V > 1,
                        "max pooling: packed uint8 taps are written only on 16-byte vectors of "
                        "channels (the window_nhwc algorithm applies to them only there)");
  const bool packed = a.packed_taps;
  const T* in = static_cast<const T*>(a.input.data_ptr());
  T* out = static_cast<T*>(a.output.data_ptr());
  if (flat_indices)
    launch_window_kernel(pool2d_nhwc_forward_kernel<T, V, true, int64_t>, grid, stream, g, in, out,
                         a.indices.data<int64_t>(), total, false);
  else if (max)
    launch_window_kernel(pool2d_nhwc_forward_kernel<T, V, true, uint8_t>, grid, stream, g, in, out,
                         taps, total, packed);
  else
    launch_window_kernel(pool2d_nhwc_forward_kernel<T, V, false, uint8_t>, grid, stream, g, in, out,
                         static_cast<uint8_t*>(nullptr), total, false);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void launch_window_3x3_typed(const PoolArgs& a, cudaStream_t stream) {
  const Pool2dGeometry g =
      make_geometry(a, kVectorOf<T>, PoolFastKernel::window_3x3_nhwc, dispatch::Direction::forward);
  const int64_t total = a.batch * g.groups * int64_t(g.out_h) * g.out_w;
  uint8_t* taps = a.indices.defined() ? a.indices.data<uint8_t>() : nullptr;
  launch_window_kernel(a.mode == PoolMode::max ? pool2d_3x3_nhwc_forward_kernel<T, true>
                                               : pool2d_3x3_nhwc_forward_kernel<T, false>,
                       blocks_for(total), stream, g, static_cast<const T*>(a.input.data_ptr()),
                       static_cast<T*>(a.output.data_ptr()), taps, total, a.packed_taps);
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace

void launch_window_forward(const PoolArgs& a, int vector, cudaStream_t stream) {
  const auto launch = [&](auto tag) {
    using T = decltype(tag);
    if (vector == kVectorOf<T>)
      launch_window_forward_typed<T, kVectorOf<T>>(a, stream);
    else
      launch_window_forward_typed<T, 1>(a, stream);
  };
  dispatch_floating<FloatingTypes::f32_bf16>(a.input.dtype(), "pooling", "window_nhwc", launch);
}

void launch_window_3x3(const PoolArgs& a, cudaStream_t stream) {
  dispatch_floating<FloatingTypes::f32_bf16>(
      a.input.dtype(), "pooling", "window_3x3_nhwc",
      [&](auto tag) { launch_window_3x3_typed<decltype(tag)>(a, stream); });
}

}  // namespace ember::cuda
