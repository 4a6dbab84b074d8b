// The generic CUDA pooling algorithm ("generic", in the algorithm cache's CUDA slots
// "pooling.forward" and "pooling.backward"; kernel_interface/pooling.h): max, average and adaptive
// average pooling over 5-D strided views (1-D and 2-D pooling have unit dims), any floating dtype.
//  - forward: a thread per output element, walking its window; channels_last tensors are walked
//    channels fastest (coalesced along C), NCHW ones along W. Max pooling keeps the first maximum
//    and lets NaN win (the last NaN), as PyTorch; averages accumulate in float (double for f64).
//    Max indices are int64 flat positions, uint8 window taps or not written
//    (kernel_interface/pooling.h), a uniform run-time choice rather than more template instances
//    (packed taps are the channels_last kernels' alone);
//  - global average pooling of an NCHW tensor (adaptive to size 1, dense planes): a warp per
//    plane, reading it contiguously;
//  - backward: a thread per INPUT element gathering from the windows that contain it (no atomics,
//    so results are deterministic); max pooling compares the saved index with the element's.
// Gradients are written, never accumulated. Index decompositions use 32-bit multiply-shift
// division when the loop has fewer than 2^31 elements. Dense channels_last windows and global
// average pooling have faster algorithms (pooling_nhwc_algorithms.cu), which the heuristic ranks
// first where they apply.
#include "ember/cuda_kernels/common/reduce.cuh"
#include "ember/cuda_kernels/pooling/pooling.h"
#include "ember/dispatch/algorithm.h"

namespace ember::cuda {
namespace {

// How max pooling's indices are encoded (kernel_interface/pooling.h: the indices' dtype, or none).
enum class MaxIndices : uint8_t { none, flat_i64, taps_u8 };

struct PoolDevice {
  PoolMode mode;
  MaxIndices indices;
  bool count_include_pad;
  bool channels_last;
  bool use32;
  int64_t batch, channels;
  int64_t in_size[3], out_size[3], kernel[3], stride[3], padding[3], dilation[3];
  int64_t in_strides[5], out_strides[5];
  // Dividers of the flat index, fastest dim first: channels_last (C, W, H, D), else (W, H, D, C).
  FastDivmod64 divs[4];
};

// Splits a flat index over (n, c, d, h, w) of sizes (batch, channels, sizes[0..2]).
__device__ __forceinline__ void decompose(const PoolDevice& a, int64_t idx, int64_t& n, int64_t& c,
                                          int64_t (&x)[3]) {
  int64_t r[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t q = a.divs[i].div(idx, a.use32);
    r[i] = idx - q * a.divs[i].divisor;
    idx = q;
  }
  if (a.channels_last) {
    c = r[0];
    x[2] = r[1];
    x[1] = r[2];
    x[0] = r[3];
  } else {
    x[2] = r[0];
    x[1] = r[1];
    x[0] = r[2];
    c = r[3];
  }
  n = idx;
}

// For max, first_tap is the tap of `begin` (taps in the left padding are skipped).
struct Window {
  int64_t begin, end, step, divisor, first_tap;
};

// The input range of output cell o along `dim` (see cpu_kernels/pooling.cpp, the same rules).
__device__ __forceinline__ Window window(const PoolDevice& a, int dim, int64_t o) {
  const int64_t in = a.in_size[dim];
  if (a.mode == PoolMode::max) {
    const int64_t d = a.dilation[dim];
    int64_t begin = o * a.stride[dim] - a.padding[dim];
    const int64_t end = ::min(begin + (a.kernel[dim] - 1) * d + 1, in);
    const int64_t skipped = begin < 0 ? (-begin + d - 1) / d : 0;
    begin += skipped * d;
    return {begin, end, d, 1, skipped};
  }
  if (a.mode == PoolMode::avg) {
    int64_t begin = o * a.stride[dim] - a.padding[dim];
    int64_t end = ::min(begin + a.kernel[dim], in + a.padding[dim]);
    const int64_t padded = end - begin;
    begin = ::max(begin, int64_t(0));
    end = ::min(end, in);
    return {begin, end, 1, a.count_include_pad ? padded : end - begin, 0};
  }
  const int64_t out = a.out_size[dim];
  const int64_t begin = (o * in) / out;
  const int64_t end = ((o + 1) * in + out - 1) / out;
  return {begin, end, 1, end - begin, 0};
}

template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    pool_forward_kernel_impl(PoolDevice a, const T* __restrict__ in, T* __restrict__ out,
                             void* __restrict__ indices, int64_t total) {
  using A = OpMath<T>;
  const int64_t* is = a.in_strides;
  const int64_t* os = a.out_strides;
  const int64_t H = a.in_size[1], W = a.in_size[2];
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    int64_t n, c, o[3];
    decompose(a, idx, n, c, o);
    const Window wd = window(a, 0, o[0]), wh = window(a, 1, o[1]), ww = window(a, 2, o[2]);
    const T* plane = in + n * is[0] + c * is[1];
    const int64_t at = n * os[0] + c * os[1] + o[0] * os[2] + o[1] * os[3] + o[2] * os[4];
    if (a.mode == PoolMode::max) {
      const bool taps = a.indices == MaxIndices::taps_u8;
      A best = neg_infinity<A>();
      int64_t best_index =
          taps ? (wd.first_tap * a.kernel[1] + wh.first_tap) * a.kernel[2] + ww.first_tap
               : (wd.begin * H + wh.begin) * W + ww.begin;
      for (int64_t d = wd.begin, td = wd.first_tap; d < wd.end; d += wd.step, ++td)
        for (int64_t h = wh.begin, th = wh.first_tap; h < wh.end; h += wh.step, ++th)
          for (int64_t w = ww.begin, tw = ww.first_tap; w < ww.end; w += ww.step, ++tw) {
            const A v = convert<A>(plane[d * is[2] + h * is[3] + w * is[4]]);
            if (v > best || v != v) {
              best = v;
              best_index = taps ? (td * a.kernel[1] + th) * a.kernel[2] + tw : (d * H + h) * W + w;
            }
          }
      out[at] = convert<T>(best);
      if (taps)
        static_cast<uint8_t*>(indices)[at] = uint8_t(best_index);
      else if (a.indices == MaxIndices::flat_i64)
        static_cast<int64_t*>(indices)[at] = best_index;
    } else {
      A sum = 0;
      for (int64_t d = wd.begin; d < wd.end; ++d)
        for (int64_t h = wh.begin; h < wh.end; ++h)
          for (int64_t w = ww.begin; w < ww.end; ++w)
            sum += convert<A>(plane[d * is[2] + h * is[3] + w * is[4]]);
      out[at] = convert<T>(sum / A(wd.divisor * wh.divisor * ww.divisor));
    }
  }
}

// Global average of dense NCHW planes: a warp per (n, c) plane of `plane` elements.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    global_avg_pool_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t planes,
                           int64_t channels, int64_t plane, int64_t out_stride_n,
                           int64_t out_stride_c) {
  using A = OpMath<T>;
  const int warps_per_block = kBlockThreads / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  for (int64_t p = int64_t(blockIdx.x) * warps_per_block + threadIdx.x / kWarpSize; p < planes;
       p += int64_t(gridDim.x) * warps_per_block) {
    const T* src = in + p * plane;
    A sum = 0;
    for (int64_t i = lane; i < plane; i += kWarpSize) sum += convert<A>(src[i]);
    sum = warp_reduce(sum, SumOp());
    if (lane == 0) {
      const int64_t n = p / channels, c = p - n * channels;
      out[n * out_stride_n + c * out_stride_c] = convert<T>(sum / A(plane));
    }
  }
}

// Calls f(o, divisor, tap) for each output cell o along `dim` whose window contains input
// position x at window tap `tap` (0 for adaptive pooling, which keeps no indices).
template <typename F>
__device__ __forceinline__ void for_each_window_of(const PoolDevice& a, int dim, int64_t x, F&& f) {
  const int64_t out = a.out_size[dim];
  if (a.mode == PoolMode::adaptive_avg) {
    const int64_t in = a.in_size[dim];
    const int64_t first = (x * out) / in;
    const int64_t last = ((x + 1) * out + in - 1) / in;  // exclusive
    for (int64_t o = first; o < last && o < out; ++o) {
      const Window w = window(a, dim, o);
      if (w.begin <= x && x < w.end) f(o, w.divisor, int64_t(0));
    }
    return;
  }
  // x = o * stride - padding + j * dilation for a tap j in [0, kernel).
  for (int64_t j = 0; j < a.kernel[dim]; ++j) {
    const int64_t t = x + a.padding[dim] - j * a.dilation[dim];
    if (t < 0) break;  // t only decreases with j
    const int64_t o = t / a.stride[dim];
    if (o * a.stride[dim] != t || o >= out) continue;
    f(o, a.mode == PoolMode::avg ? window(a, dim, o).divisor : int64_t(1), j);
  }
}

template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    pool_backward_kernel_impl(PoolDevice a, T* __restrict__ grad_in, const T* __restrict__ grad_out,
                              const void* __restrict__ indices, int64_t total) {
  using A = OpMath<T>;
  const int64_t* is = a.in_strides;
  const int64_t* os = a.out_strides;
  const int64_t H = a.in_size[1], W = a.in_size[2];
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    int64_t n, c, x[3];
    decompose(a, idx, n, c, x);
    const int64_t base = n * os[0] + c * os[1];
    const int64_t flat = (x[0] * H + x[1]) * W + x[2];
    const bool taps = a.indices == MaxIndices::taps_u8;
    A acc = 0;
    for_each_window_of(a, 0, x[0], [&](int64_t od, int64_t div_d, int64_t td) {
      for_each_window_of(a, 1, x[1], [&](int64_t oh, int64_t div_h, int64_t th) {
        for_each_window_of(a, 2, x[2], [&](int64_t ow, int64_t div_w, int64_t tw) {
          const int64_t at = base + od * os[2] + oh * os[3] + ow * os[4];
          if (a.mode == PoolMode::max) {
            const bool chosen = taps ? int64_t(static_cast<const uint8_t*>(indices)[at]) ==
                                           (td * a.kernel[1] + th) * a.kernel[2] + tw
                                     : static_cast<const int64_t*>(indices)[at] == flat;
            if (chosen) acc += convert<A>(grad_out[at]);
          } else {
            acc += convert<A>(grad_out[at]) / A(div_d * div_h * div_w);
          }
        });
      });
    });
    grad_in[n * is[0] + c * is[1] + x[0] * is[2] + x[1] * is[3] + x[2] * is[4]] = convert<T>(acc);
  }
}

// The device description; `sizes` are the spatial sizes of the flat loop (output sizes for the
// forward, input sizes for the backward).
PoolDevice make_pool_device(const PoolArgs& a, const int64_t (&sizes)[3], int64_t total) {
  PoolDevice d{};
  d.mode = a.mode;
  d.indices = a.mode != PoolMode::max || !a.indices.defined() ? MaxIndices::none
              : a.indices.dtype() == DType::u8                ? MaxIndices::taps_u8
                                                              : MaxIndices::flat_i64;
  d.count_include_pad = a.count_include_pad;
  d.channels_last = a.channels_last;
  d.use32 = total <= std::numeric_limits<int32_t>::max();
  d.batch = a.batch;
  d.channels = a.channels;
  for (int i = 0; i < 3; ++i) {
    d.in_size[i] = a.in_size[i];
    d.out_size[i] = a.out_size[i];
    d.kernel[i] = a.kernel[i];
    d.stride[i] = a.stride[i];
    d.padding[i] = a.padding[i];
    d.dilation[i] = a.dilation[i];
  }
  for (int i = 0; i < 5; ++i) {
    d.in_strides[i] = a.in_strides[i];
    d.out_strides[i] = a.out_strides[i];
  }
  const int64_t order_cl[4] = {a.channels, sizes[2], sizes[1], sizes[0]};
  const int64_t order_nchw[4] = {sizes[2], sizes[1], sizes[0], a.channels};
  for (int i = 0; i < 4; ++i)
    d.divs[i] = FastDivmod64(a.channels_last ? order_cl[i] : order_nchw[i], d.use32);
  return d;
}

int64_t pool_volume(const PoolArgs& a, const int64_t (&sizes)[3]) {
  return a.batch * a.channels * sizes[0] * sizes[1] * sizes[2];
}

// Adaptive pooling to size 1 of dense NCHW planes.
bool is_global_nchw(const PoolArgs& a) {
  const int64_t* s = a.in_strides;
  const int64_t plane = a.in_size[0] * a.in_size[1] * a.in_size[2];
  return a.mode == PoolMode::adaptive_avg && a.out_size[0] == 1 && a.out_size[1] == 1 &&
         a.out_size[2] == 1 && !a.channels_last && s[4] == 1 && s[3] == a.in_size[2] &&
         (a.in_size[0] == 1 || s[2] == a.in_size[1] * a.in_size[2]) &&
         (a.channels == 1 || s[1] == plane) && (a.batch == 1 || s[0] == a.channels * plane);
}

template <typename T>
void launch_pool_forward(const PoolArgs& a, cudaStream_t stream) {
  const int device = a.input.device().index;
  const T* in = static_cast<const T*>(a.input.data_ptr());
  T* out = static_cast<T*>(a.output.data_ptr());
  if (is_global_nchw(a)) {
    const int64_t planes = a.batch * a.channels;
    const int64_t plane = a.in_size[0] * a.in_size[1] * a.in_size[2];
    global_avg_pool_kernel<T><<<grid_for(planes * kWarpSize, device), kBlockThreads, 0, stream>>>(
        in, out, planes, a.channels, plane, a.out_strides[0], a.out_strides[1]);
    EMBER_CUDA_LAUNCH_CHECK();
    return;
  }
  const int64_t total = pool_volume(a, a.out_size);
  const PoolDevice d = make_pool_device(a, a.out_size, total);
  void* indices = d.indices == MaxIndices::none ? nullptr : a.indices.data_ptr();
  pool_forward_kernel_impl<T>
      <<<grid_for(total, device), kBlockThreads, 0, stream>>>(d, in, out, indices, total);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void launch_pool_backward(const PoolArgs& a, cudaStream_t stream) {
  const int64_t total = pool_volume(a, a.in_size);
  const PoolDevice d = make_pool_device(a, a.in_size, total);
  const void* indices = d.indices == MaxIndices::none ? nullptr : a.indices.data_ptr();
  pool_backward_kernel_impl<T>
      <<<grid_for(total, a.input.device().index), kBlockThreads, 0, stream>>>(
          d, static_cast<T*>(a.input.data_ptr()), static_cast<const T*>(a.output.data_ptr()),
          indices, total);
  EMBER_CUDA_LAUNCH_CHECK();
}

dispatch::Algorithm<PoolProblem> generic(bool forward) {
  dispatch::Algorithm<PoolProblem> algo;
  algo.name = "generic";
  algo.deterministic = true;  // gathers, no atomics
  // Every problem but packed taps, which these kernels neither write nor read (a byte per tap).
  algo.applies = [](const PoolProblem& p) { return p.indices != PoolIndices::taps_packed; };
  algo.heuristic_cost = [](const PoolProblem&) { return 10.0; };  // after the fast kernels
  algo.run = [forward](const PoolProblem& p, void*) {
    const PoolArgs& a = p.args;
    if ((forward ? a.output : a.input).numel() == 0) return;
    DeviceGuard device_guard(a.input.device());
    cudaStream_t stream = stream_of(a.input.device());
    dispatch_floating(a.input.dtype(), "pooling", [&](auto tag) {
      if (forward)
        launch_pool_forward<decltype(tag)>(a, stream);
      else
        launch_pool_backward<decltype(tag)>(a, stream);
    });
  };
  return algo;
}

}  // namespace
}  // namespace ember::cuda

namespace ember {
EMBER_REGISTER_ALGORITHM(PoolProblem, "pooling", forward, CUDA, cuda::generic(true));
EMBER_REGISTER_ALGORITHM(PoolProblem, "pooling", backward, CUDA, cuda::generic(false));
}  // namespace ember
