// The CPU pooling algorithm ("direct", the one algorithm of the CPU slots "pooling.forward" and
// "pooling.backward"; kernel_interface/pooling.h): max (the first maximum wins ties; a NaN wins
// over numbers and the last NaN wins, as in PyTorch), average and adaptive average pooling over
// 5-D strided views, with max pooling's indices as int64 flat positions, uint8 window taps or none
// (packed taps are the CUDA fast kernels' alone). The reference for the CUDA kernels: plain loops,
// accumulation in double.
// The backward scatters each output gradient into its window (sequential within a plane, so
// deterministic), where the CUDA kernel gathers: the two formulations check each other. Planes
// (image, channel) run in parallel on the thread pool, each on one thread.
#include "ember/kernel_interface/pooling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "ember/dispatch/algorithm.h"
#include "ember/tensor/parallel.h"

namespace ember {
namespace {

// The input range [begin, end) of output cell o along one dim, the step between taps, the
// window's divisor contribution (avg: with or without padding) and, for max, the tap of `begin`
// (taps in the left padding are skipped).
struct Window {
  int64_t begin, end, step, divisor, first_tap = 0;
};

Window window(const PoolArgs& a, int dim, int64_t o) {
  const int64_t in = a.in_size[dim];
  switch (a.mode) {
    case PoolMode::max: {
      const int64_t d = a.dilation[dim];
      int64_t begin = o * a.stride[dim] - a.padding[dim];
      const int64_t end = std::min(begin + (a.kernel[dim] - 1) * d + 1, in);
      int64_t tap = 0;
      for (; begin < 0; ++tap) begin += d;
      return {begin, end, d, 1, tap};
    }
    case PoolMode::avg: {
      int64_t begin = o * a.stride[dim] - a.padding[dim];
      int64_t end = std::min(begin + a.kernel[dim], in + a.padding[dim]);
      const int64_t padded = end - begin;
      begin = std::max<int64_t>(begin, 0);
      end = std::min(end, in);
      return {begin, end, 1, a.count_include_pad ? padded : end - begin};
    }
    case PoolMode::adaptive_avg: {
      const int64_t out = a.out_size[dim];
      const int64_t begin = (o * in) / out;
      const int64_t end = ((o + 1) * in + out - 1) / out;
      return {begin, end, 1, end - begin};
    }
  }
  return {0, 0, 1, 1};
}

template <typename T>
double load(const T* p) {
  return double(*p);
}
template <typename T>
void store(T* p, double v) {
  if constexpr (std::is_same_v<T, double>)
    *p = v;
  else
    *p = T(float(v));
}

// Max pooling's index of window tap (td, th, tw) at input cell (d, h, w): the tap when `taps`
// (uint8 indices), else the flat position.
int64_t max_index(const PoolArgs& a, bool taps, int64_t d, int64_t h, int64_t w, int64_t td,
                  int64_t th, int64_t tw) {
  if (taps) return (td * a.kernel[1] + th) * a.kernel[2] + tw;
  return (d * a.in_size[1] + h) * a.in_size[2] + w;
}

// The input cell (flat in its plane) that max pooling index `index` of output (od, oh, ow) names.
int64_t max_cell(const PoolArgs& a, bool taps, int64_t index, int64_t od, int64_t oh, int64_t ow) {
  if (!taps) return index;
  const int64_t tw = index % a.kernel[2], th = index / a.kernel[2] % a.kernel[1],
                td = index / (a.kernel[2] * a.kernel[1]);
  const int64_t d = od * a.stride[0] - a.padding[0] + td * a.dilation[0];
  const int64_t h = oh * a.stride[1] - a.padding[1] + th * a.dilation[1];
  const int64_t w = ow * a.stride[2] - a.padding[2] + tw * a.dilation[2];
  return (d * a.in_size[1] + h) * a.in_size[2] + w;
}

// Runs f(n, c) for every (image, channel) plane on the thread pool, each plane on one thread (its
// outputs, and in the backward its gradient plane, belong to it alone). ~32K window taps per
// thread at least.
template <typename F>
void for_each_plane(const PoolArgs& a, const F& f) {
  const int64_t taps = std::max<int64_t>(
      1, a.out_size[0] * a.out_size[1] * a.out_size[2] * a.kernel[0] * a.kernel[1] * a.kernel[2]);
  parallel_for(0, a.batch * a.channels, std::max<int64_t>(1, 32768 / taps),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t plane = lo; plane < hi; ++plane)
                   f(plane / a.channels, plane % a.channels);
               });
}

template <typename T>
void pool_forward_typed(const PoolArgs& a) {
  const T* in = static_cast<const T*>(a.input.data_ptr());
  T* out = static_cast<T*>(a.output.data_ptr());
  const bool write_indices = a.mode == PoolMode::max && a.indices.defined();
  const bool taps = write_indices && a.indices.dtype() == DType::u8;
  int64_t* flat_out = write_indices && !taps ? a.indices.data<int64_t>() : nullptr;
  uint8_t* tap_out = taps ? a.indices.data<uint8_t>() : nullptr;
  const int64_t* is = a.in_strides;
  const int64_t* os = a.out_strides;
  for_each_plane(a, [&](int64_t n, int64_t c) {
    for (int64_t od = 0; od < a.out_size[0]; ++od)
      for (int64_t oh = 0; oh < a.out_size[1]; ++oh)
        for (int64_t ow = 0; ow < a.out_size[2]; ++ow) {
          const Window wd = window(a, 0, od), wh = window(a, 1, oh), ww = window(a, 2, ow);
          const T* plane = in + n * is[0] + c * is[1];
          const int64_t at = n * os[0] + c * os[1] + od * os[2] + oh * os[3] + ow * os[4];
          if (a.mode == PoolMode::max) {
            double best = -std::numeric_limits<double>::infinity();
            int64_t best_index = 0;
            if (write_indices)
              best_index = max_index(a, taps, wd.begin, wh.begin, ww.begin, wd.first_tap,
                                     wh.first_tap, ww.first_tap);
            for (int64_t d = wd.begin, td = wd.first_tap; d < wd.end; d += wd.step, ++td)
              for (int64_t h = wh.begin, th = wh.first_tap; h < wh.end; h += wh.step, ++th)
                for (int64_t w = ww.begin, tw = ww.first_tap; w < ww.end; w += ww.step, ++tw) {
                  const double v = load(plane + d * is[2] + h * is[3] + w * is[4]);
                  if (v > best || std::isnan(v)) {
                    best = v;
                    if (write_indices) best_index = max_index(a, taps, d, h, w, td, th, tw);
                  }
                }
            store(out + at, best);
            if (taps)
              tap_out[at] = uint8_t(best_index);
            else if (write_indices)
              flat_out[at] = best_index;
          } else {
            double sum = 0;
            for (int64_t d = wd.begin; d < wd.end; ++d)
              for (int64_t h = wh.begin; h < wh.end; ++h)
                for (int64_t w = ww.begin; w < ww.end; ++w)
                  sum += load(plane + d * is[2] + h * is[3] + w * is[4]);
            store(out + at, sum / double(wd.divisor * wh.divisor * ww.divisor));
          }
        }
  });
}

template <typename T>
void pool_backward_typed(const PoolArgs& a) {
  const T* g = static_cast<const T*>(a.output.data_ptr());
  T* gin = static_cast<T*>(a.input.data_ptr());
  const bool max = a.mode == PoolMode::max;
  const bool taps = max && a.indices.dtype() == DType::u8;
  const int64_t* flat_indices = max && !taps ? a.indices.data<int64_t>() : nullptr;
  const uint8_t* tap_indices = taps ? a.indices.data<uint8_t>() : nullptr;
  const int64_t* is = a.in_strides;
  const int64_t* os = a.out_strides;
  const int64_t H = a.in_size[1], W = a.in_size[2];
  // Accumulate in double over the whole input, then store once.
  const int64_t volume = a.in_size[0] * H * W;
  for_each_plane(a, [&](int64_t n, int64_t c) {
    thread_local std::vector<double> acc;
    acc.assign(static_cast<size_t>(volume), 0.0);
    for (int64_t od = 0; od < a.out_size[0]; ++od)
      for (int64_t oh = 0; oh < a.out_size[1]; ++oh)
        for (int64_t ow = 0; ow < a.out_size[2]; ++ow) {
          const int64_t at = n * os[0] + c * os[1] + od * os[2] + oh * os[3] + ow * os[4];
          const double gv = load(g + at);
          if (max) {
            const int64_t index = taps ? int64_t(tap_indices[at]) : flat_indices[at];
            acc[size_t(max_cell(a, taps, index, od, oh, ow))] += gv;
            continue;
          }
          const Window wd = window(a, 0, od), wh = window(a, 1, oh), ww = window(a, 2, ow);
          const double share = gv / double(wd.divisor * wh.divisor * ww.divisor);
          for (int64_t d = wd.begin; d < wd.end; ++d)
            for (int64_t h = wh.begin; h < wh.end; ++h)
              for (int64_t w = ww.begin; w < ww.end; ++w) acc[size_t((d * H + h) * W + w)] += share;
        }
    T* plane = gin + n * is[0] + c * is[1];
    for (int64_t d = 0; d < a.in_size[0]; ++d)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          store(plane + d * is[2] + h * is[3] + w * is[4], acc[size_t((d * H + h) * W + w)]);
  });
}

dispatch::Algorithm<PoolProblem> direct(bool forward) {
  dispatch::Algorithm<PoolProblem> a;
  a.name = "direct";
  a.deterministic = true;
  // Every problem but packed taps, which no CPU kernel writes or reads.
  a.applies = [](const PoolProblem& p) { return p.indices != PoolIndices::taps_packed; };
  a.run = [forward](const PoolProblem& p, void*) {
    const PoolArgs& args = p.args;
    if (forward)
      EMBER_DISPATCH_FLOATING_DTYPES(args.input.dtype(), "pooling",
                                     [&] { pool_forward_typed<scalar_t>(args); });
    else
      EMBER_DISPATCH_FLOATING_DTYPES(args.input.dtype(), "pooling",
                                     [&] { pool_backward_typed<scalar_t>(args); });
  };
  return a;
}

}  // namespace

EMBER_REGISTER_ALGORITHM(PoolProblem, "pooling", forward, CPU, direct(true));
EMBER_REGISTER_ALGORITHM(PoolProblem, "pooling", backward, CPU, direct(false));

}  // namespace ember
