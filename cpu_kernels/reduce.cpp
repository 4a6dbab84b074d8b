// CPU reduction kernel: sum, mean, prod, max, min, argmax, argmin, amax_abs and var over a dense
// input viewed as [outer, reduce, inner]. The reference for the CUDA reductions, so it favours
// accuracy: floating inputs (float32 included) accumulate in double, var uses Welford's update
// (never a sum and a sum of squares), and max/min propagate NaN as PyTorch does (the first NaN
// wins, ties keep the first index). Integer sums and products wrap around like PyTorch's. Outer
// rows and column blocks run in parallel on the thread pool; a long row is reduced in fixed chunks
// combined in order, so every result is bitwise the same for any thread count.
#include "ember/kernel_interface/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "ember/cpu_kernels/wide_value.h"
#include "ember/tensor/parallel.h"

namespace ember {
namespace {

using cpu_reference::is_nan;
using cpu_reference::kIsFloating;
using cpu_reference::load_value;
using cpu_reference::store_value;
using cpu_reference::value_t;

// Elements per thread below which a reduction stays on one thread (as the elementwise kernels).
constexpr int64_t kParallelGrain = 32768;
// A long row is reduced in fixed chunks of this many elements whose partial results are combined
// left to right (parallel_reduce): the same order for any thread count, and shorter serial
// accumulation chains than one pass over the row.
constexpr int64_t kRowChunk = 16384;
// Columns of an [outer, reduce, inner] block given to one thread at a time.
constexpr int64_t kColumnBlock = 256;

// Runs f(o) for every outer row o on the thread pool (each row on one thread).
template <typename F>
void for_each_outer_row(int64_t outer, int64_t row_elements, const F& f) {
  parallel_for(0, outer, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, row_elements)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t o = lo; o < hi; ++o) f(o);
               });
}

// Runs f(o, j0, j1) for the [outer, reduce, inner] layout's columns [j0, j1) of outer row o, over
// blocks of kColumnBlock columns on the thread pool; each column is owned by one thread.
template <typename F>
void for_each_column_block(ReduceShape s, const F& f) {
  const int64_t blocks = (s.inner + kColumnBlock - 1) / kColumnBlock;
  const int64_t block_elements = std::max<int64_t>(1, s.reduce * std::min(s.inner, kColumnBlock));
  parallel_for(0, s.outer * blocks, std::max<int64_t>(1, kParallelGrain / block_elements),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t item = lo; item < hi; ++item) {
                   const int64_t o = item / blocks, j0 = item % blocks * kColumnBlock;
                   f(o, j0, std::min(s.inner, j0 + kColumnBlock));
                 }
               });
}

// acc = combine(acc, value) along the reduce dim, then out = finish(acc). A row (inner == 1) is cut
// into kRowChunk chunks (in parallel when the rows alone do not fill the threads), each with eight
// independent accumulators so the additions pipeline and vectorize; a [reduce, inner] block
// accumulates a vector of columns, which the compiler vectorizes.
template <typename T, typename Acc, typename Load, typename Combine, typename Finish>
void fold(const T* in, T* out, ReduceShape s, Acc init, Load load, Combine combine, Finish finish) {
  const int64_t R = s.reduce, I = s.inner;
  if (I == 1) {
    for_each_outer_row(s.outer, R, [&](int64_t o) {
      const T* row = in + o * R;
      auto chunk = [&](int64_t lo, int64_t hi) {
        constexpr int kLanes = 8;
        Acc acc[kLanes];
        for (int lane = 0; lane < kLanes; ++lane) acc[lane] = init;
        int64_t r = lo;
        for (; r + kLanes <= hi; r += kLanes)
          for (int lane = 0; lane < kLanes; ++lane)
            acc[lane] = combine(acc[lane], load(row[r + lane]));
        for (; r < hi; ++r) acc[0] = combine(acc[0], load(row[r]));
        for (int width = kLanes / 2; width > 0; width /= 2)
          for (int lane = 0; lane < width; ++lane)
            acc[lane] = combine(acc[lane], acc[lane + width]);
        return acc[0];
      };
      out[o] = finish(parallel_reduce(int64_t(0), R, kRowChunk, init, chunk, combine));
    });
    return;
  }
  for_each_column_block(s, [&](int64_t o, int64_t j0, int64_t j1) {
    Acc a[kColumnBlock];
    const int64_t n = j1 - j0;
    for (int64_t j = 0; j < n; ++j) a[j] = init;
    for (int64_t r = 0; r < R; ++r) {
      const T* row = in + (o * R + r) * I + j0;
      for (int64_t j = 0; j < n; ++j) a[j] = combine(a[j], load(row[j]));
    }
    for (int64_t j = 0; j < n; ++j) out[o * I + j0 + j] = finish(a[j]);
  });
}

enum class Extreme { max, min, max_abs };

// max/min (and max of |x|) with the position of the first extreme. NaN is more extreme than any
// number, so the first NaN wins. `values` and `indices` may each be null.
template <typename T, Extreme kind>
void extreme(const T* in, T* values, int64_t* indices, ReduceShape s) {
  using V = value_t<T>;
  auto load = [](T x) {
    V v = load_value(x);
    if constexpr (kind == Extreme::max_abs && std::is_signed_v<V>) {
      if constexpr (std::is_floating_point_v<V>)
        return std::abs(v);
      else
        return v < 0 ? V(uint64_t(0) - uint64_t(v)) : v;  // wraps for the lowest int64
    } else {
      return v;
    }
  };
  auto better = [](V x, V best) {
    if constexpr (kind == Extreme::min)
      return x < best || (is_nan(x) && !is_nan(best));
    else
      return x > best || (is_nan(x) && !is_nan(best));
  };
  const int64_t R = s.reduce, I = s.inner;
  if (R == 0) {  // only max of |x| reaches here empty: the norm of nothing is 0
    for (int64_t i = 0; i < s.outer * I; ++i) {
      if (values) values[i] = store_value<T>(V(0));
      if (indices) indices[i] = 0;
    }
    return;
  }
  if (I == 1) {
    // The first extreme of each chunk, then the chunks' left to right (ties keep the left one).
    struct Best {
      V value;
      int64_t index;  // -1: no element yet
    };
    auto pick = [&](Best left, Best right) {
      if (left.index < 0) return right;
      if (right.index < 0) return left;
      return better(right.value, left.value) ? right : left;
    };
    for_each_outer_row(s.outer, R, [&](int64_t o) {
      const T* row = in + o * R;
      auto chunk = [&](int64_t lo, int64_t hi) {
        V best = load(row[lo]);
        int64_t best_index = lo;
        for (int64_t r = lo + 1; r < hi && !is_nan(best); ++r) {
          const V x = load(row[r]);
          if (better(x, best)) {
            best = x;
            best_index = r;
          }
        }
        return Best{best, best_index};
      };
      const Best b = parallel_reduce(int64_t(0), R, kRowChunk, Best{V(0), -1}, chunk, pick);
      if (values) values[o] = store_value<T>(b.value);
      if (indices) indices[o] = b.index;
    });
    return;
  }
  for_each_column_block(s, [&](int64_t o, int64_t j0, int64_t j1) {
    V best[kColumnBlock];
    int64_t best_index[kColumnBlock];
    const int64_t n = j1 - j0;
    const T* block = in + o * R * I + j0;
    for (int64_t j = 0; j < n; ++j) {
      best[j] = load(block[j]);
      best_index[j] = 0;
    }
    for (int64_t r = 1; r < R; ++r) {
      const T* row = block + r * I;
      for (int64_t j = 0; j < n; ++j) {
        const V x = load(row[j]);
        if (better(x, best[j])) {
          best[j] = x;
          best_index[j] = r;
        }
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      if (values) values[o * I + j0 + j] = store_value<T>(best[j]);
      if (indices) indices[o * I + j0 + j] = best_index[j];
    }
  });
}

// Welford's running mean and M2 in double: accurate when the mean is large next to the spread,
// where sum(x^2) - n*mean^2 cancels catastrophically. var = M2 / max(0, n - correction), which is
// NaN or inf when the divisor is 0, as in PyTorch.
struct WelfordState {
  double count = 0, mean = 0, m2 = 0;
  void add(double x) {
    count += 1;
    const double delta = x - mean;
    mean += delta / count;
    m2 += delta * (x - mean);
  }
  // Chan et al.'s pairwise merge of two partial results.
  void merge(const WelfordState& o) {
    if (o.count == 0) return;
    const double n = count + o.count, delta = o.mean - mean;
    mean += delta * (o.count / n);
    m2 += o.m2 + delta * delta * (count * o.count / n);
    count = n;
  }
};

// Per-column Welford over `rows` rows of `cols` values (row stride `stride`): the columns are
// independent, so the update vectorizes across them.
template <typename T>
void welford_columns_strided(const T* in, int64_t rows, int64_t cols, int64_t stride, double* mean,
                             double* m2) {
  std::fill(mean, mean + cols, 0.0);
  std::fill(m2, m2 + cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = in + r * stride;
    const double count = double(r + 1);
    for (int64_t j = 0; j < cols; ++j) {
      const double x = load_value(row[j]);
      const double delta = x - mean[j];
      mean[j] += delta / count;
      m2[j] += delta * (x - mean[j]);
    }
  }
}

template <typename T>
void welford_columns(const T* in, int64_t rows, int64_t cols, double* mean, double* m2) {
  welford_columns_strided(in, rows, cols, cols, mean, m2);
}

template <typename T>
void variance_welford(const T* in, T* out, ReduceShape s, int64_t correction) {
  const int64_t R = s.reduce, I = s.inner;
  const double divisor = std::max<double>(0.0, double(R) - double(correction));
  if (I == 1) {
    // A chunk of a row is read as [n / kLanes, kLanes] columns (independent lanes instead of one
    // serial chain), the lanes are merged, then the tail is added one by one; the chunks' states
    // are merged left to right.
    for_each_outer_row(s.outer, R, [&](int64_t o) {
      const T* row = in + o * R;
      auto chunk = [&](int64_t lo, int64_t hi) {
        constexpr int64_t kLanes = 8;
        double lane_mean[kLanes], lane_m2[kLanes];
        const int64_t blocks = (hi - lo) / kLanes;
        WelfordState total;
        if (blocks > 0) {
          welford_columns(row + lo, blocks, kLanes, lane_mean, lane_m2);
          for (int64_t l = 0; l < kLanes; ++l)
            total.merge({double(blocks), lane_mean[l], lane_m2[l]});
        }
        for (int64_t r = lo + blocks * kLanes; r < hi; ++r) total.add(load_value(row[r]));
        return total;
      };
      auto merge = [](WelfordState a, const WelfordState& b) {
        a.merge(b);
        return a;
      };
      const WelfordState total =
          parallel_reduce(int64_t(0), R, kRowChunk, WelfordState{}, chunk, merge);
      out[o] = store_value<T>(total.m2 / divisor);
    });
    return;
  }
  for_each_column_block(s, [&](int64_t o, int64_t j0, int64_t j1) {
    double mean[kColumnBlock], m2[kColumnBlock];
    const int64_t n = j1 - j0;
    welford_columns_strided(in + o * R * I + j0, R, n, I, mean, m2);
    for (int64_t j = 0; j < n; ++j) out[o * I + j0 + j] = store_value<T>(m2[j] / divisor);
  });
}

template <typename T>
void reduce_typed(const Tensor& out, const Tensor* indices, const Tensor& in_tensor, ReduceShape s,
                  ReduceOp op, int64_t correction) {
  using V = value_t<T>;
  const T* in = static_cast<const T*>(in_tensor.data_ptr());
  const DType dtype = dtype_of<T>::value;
  // Integer sums and products accumulate in uint64: two's-complement wrap-around, no UB.
  using Acc = std::conditional_t<kIsFloating<T>, double, uint64_t>;
  auto load = [](T x) { return Acc(load_value(x)); };
  auto to_out = [](Acc a) { return store_value<T>(V(a)); };
  auto unsupported = [&] {
    EMBER_THROW(not_supported, reduce_op_name(op), "(): dtype ", dtype_name(dtype),
                " is not supported on the CPU; ",
                std::is_same_v<T, bool> ? "convert the bool tensor to int64 first"
                                        : "convert the input to a floating dtype first");
  };
  switch (op) {
    case ReduceOp::sum:
      if constexpr (std::is_same_v<T, bool>)
        unsupported();
      else
        fold(
            in, out.data<T>(), s, Acc(0), load, [](Acc a, Acc x) { return Acc(a + x); }, to_out);
      return;
    case ReduceOp::prod:
      if constexpr (std::is_same_v<T, bool>)
        unsupported();
      else
        fold(
            in, out.data<T>(), s, Acc(1), load, [](Acc a, Acc x) { return Acc(a * x); }, to_out);
      return;
    case ReduceOp::mean:
      if constexpr (std::is_same_v<T, bool>) {
        unsupported();
      } else {
        const double count = double(s.reduce);
        if constexpr (!kIsFloating<T>)
          EMBER_CHECK(s.reduce > 0, "mean(): the mean of an empty ", dtype_name(dtype),
                      " reduction is NaN, which the integer output cannot hold; reduce over a "
                      "non-empty dim or convert the input to a floating dtype");
        // Integer means go through the exact int64 sum and truncate toward zero.
        fold(
            in, out.data<T>(), s, Acc(0), load, [](Acc a, Acc x) { return Acc(a + x); },
            [count](Acc a) {
              if constexpr (kIsFloating<T>)
                return store_value<T>(a / count);
              else
                return static_cast<T>(double(int64_t(a)) / count);
            });
      }
      return;
    case ReduceOp::max:
      return extreme<T, Extreme::max>(in, out.data<T>(),
                                      indices ? indices->data<int64_t>() : nullptr, s);
    case ReduceOp::min:
      return extreme<T, Extreme::min>(in, out.data<T>(),
                                      indices ? indices->data<int64_t>() : nullptr, s);
    case ReduceOp::argmax:
      return extreme<T, Extreme::max>(in, nullptr, out.data<int64_t>(), s);
    case ReduceOp::argmin:
      return extreme<T, Extreme::min>(in, nullptr, out.data<int64_t>(), s);
    case ReduceOp::amax_abs:
      return extreme<T, Extreme::max_abs>(in, out.data<T>(), nullptr, s);
    case ReduceOp::var:
      if constexpr (kIsFloating<T>)
        variance_welford(in, out.data<T>(), s, correction);
      else
        unsupported();
      return;
  }
}

void reduce_cpu(const Tensor& out, const Tensor* indices, const Tensor& in, ReduceShape shape,
                ReduceOp op, int64_t correction) {
  EMBER_INTERNAL_ASSERT(shape.outer >= 0 && shape.reduce >= 0 && shape.inner >= 0,
                        "negative reduce shape");
  EMBER_INTERNAL_ASSERT(in.numel() == shape.outer * shape.reduce * shape.inner, reduce_op_name(op),
                        ": input of ", in.numel(), " elements viewed as [", shape.outer, ", ",
                        shape.reduce, ", ", shape.inner, "]");
  EMBER_INTERNAL_ASSERT(out.numel() == shape.outer * shape.inner, reduce_op_name(op),
                        ": output of ", out.numel(), " elements for [", shape.outer, ", ",
                        shape.inner, "]");
  const bool needs_elements = op == ReduceOp::max || op == ReduceOp::min ||
                              op == ReduceOp::argmax || op == ReduceOp::argmin;
  if (indices) {
    EMBER_INTERNAL_ASSERT(op == ReduceOp::max || op == ReduceOp::min,
                          "indices are only written by max and min, not ", reduce_op_name(op));
    EMBER_INTERNAL_ASSERT(indices->numel() == out.numel(), "indices of ", indices->numel(),
                          " elements for an output of ", out.numel());
  }
  if (shape.outer * shape.inner == 0) return;
  EMBER_CHECK(
      shape.reduce > 0 || !needs_elements, reduce_op_name(op),
      "(): cannot reduce over a zero-size dimension; the input of shape ", shape_str(in.sizes()),
      " has no elements to compare along the reduced dims. Reduce over non-empty dims or use "
      "a reduction with an identity (sum, prod)");
  EMBER_DISPATCH_ALL_DTYPES(in.dtype(), reduce_op_name(op), [&] {
    reduce_typed<scalar_t>(out, indices, in, shape, op, correction);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(reduce_kernel, CPU, dispatch::kAllTypes, &reduce_cpu);

}  // namespace ember
