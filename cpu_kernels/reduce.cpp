// CPU reduction kernel: sum, mean, prod, max, min, argmax, argmin, amax_abs and var over a dense
// input viewed as [outer, reduce, inner]. The reference for the CUDA reductions, so it favours
// accuracy: floating inputs (float32 included) accumulate in double, var uses Welford's update
// (never a sum and a sum of squares), and max/min propagate NaN as PyTorch does (the first NaN
// wins, ties keep the first index). Integer sums and products wrap around like PyTorch's.
#include "ember/kernel_interface/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace ember {
namespace {

template <typename T>
inline constexpr bool kIsFloating =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Values are compared and accumulated as double (floating) or int64 (integers and bool); both
// hold every input value exactly.
template <typename T>
using value_t = std::conditional_t<kIsFloating<T>, double, int64_t>;

template <typename T>
inline value_t<T> load_value(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return double(float(v));
  else
    return value_t<T>(v);
}

template <typename T>
inline T store_value(value_t<T> v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return T(float(v));
  else if constexpr (std::is_same_v<T, bool>)
    return v != 0;
  else
    return static_cast<T>(v);
}

template <typename V>
inline bool is_nan(V v) {
  if constexpr (std::is_floating_point_v<V>)
    return v != v;
  else
    return false;
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::mean:
      return "mean";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
    case ReduceOp::argmax:
      return "argmax";
    case ReduceOp::argmin:
      return "argmin";
    case ReduceOp::var:
      return "var";
    case ReduceOp::prod:
      return "prod";
    case ReduceOp::amax_abs:
      return "amax(abs)";
  }
  return "reduce";
}

// acc = combine(acc, value) along the reduce dim, then out = finish(acc). A row (inner == 1) keeps
// four independent accumulators so the additions pipeline; a [reduce, inner] block accumulates
// a vector of inner columns, which the compiler vectorizes.
template <typename T, typename Acc, typename Load, typename Combine, typename Finish>
void fold(const T* in, T* out, ReduceShape s, Acc init, Load load, Combine combine, Finish finish) {
  const int64_t R = s.reduce, I = s.inner;
  if (I == 1) {
    for (int64_t o = 0; o < s.outer; ++o) {
      const T* row = in + o * R;
      Acc acc[4] = {init, init, init, init};
      int64_t r = 0;
      for (; r + 4 <= R; r += 4)
        for (int lane = 0; lane < 4; ++lane) acc[lane] = combine(acc[lane], load(row[r + lane]));
      for (; r < R; ++r) acc[0] = combine(acc[0], load(row[r]));
      out[o] = finish(combine(combine(acc[0], acc[1]), combine(acc[2], acc[3])));
    }
    return;
  }
  std::vector<Acc> acc(static_cast<size_t>(I));
  for (int64_t o = 0; o < s.outer; ++o) {
    std::fill(acc.begin(), acc.end(), init);
    Acc* a = acc.data();
    for (int64_t r = 0; r < R; ++r) {
      const T* row = in + (o * R + r) * I;
      for (int64_t j = 0; j < I; ++j) a[j] = combine(a[j], load(row[j]));
    }
    for (int64_t j = 0; j < I; ++j) out[o * I + j] = finish(a[j]);
  }
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
    for (int64_t o = 0; o < s.outer; ++o) {
      const T* row = in + o * R;
      V best = load(row[0]);
      int64_t best_index = 0;
      for (int64_t r = 1; r < R && !is_nan(best); ++r) {
        const V x = load(row[r]);
        if (better(x, best)) {
          best = x;
          best_index = r;
        }
      }
      if (values) values[o] = store_value<T>(best);
      if (indices) indices[o] = best_index;
    }
    return;
  }
  std::vector<V> best(static_cast<size_t>(I));
  std::vector<int64_t> best_index(static_cast<size_t>(I));
  for (int64_t o = 0; o < s.outer; ++o) {
    const T* block = in + o * R * I;
    for (int64_t j = 0; j < I; ++j) {
      best[size_t(j)] = load(block[j]);
      best_index[size_t(j)] = 0;
    }
    for (int64_t r = 1; r < R; ++r) {
      const T* row = block + r * I;
      for (int64_t j = 0; j < I; ++j) {
        const V x = load(row[j]);
        if (better(x, best[size_t(j)])) {
          best[size_t(j)] = x;
          best_index[size_t(j)] = r;
        }
      }
    }
    for (int64_t j = 0; j < I; ++j) {
      if (values) values[o * I + j] = store_value<T>(best[size_t(j)]);
      if (indices) indices[o * I + j] = best_index[size_t(j)];
    }
  }
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

// Per-column Welford over `rows` rows of `cols` values (row stride `cols`): the columns are
// independent, so the update vectorizes across them.
template <typename T>
void welford_columns(const T* in, int64_t rows, int64_t cols, double* mean, double* m2) {
  std::fill(mean, mean + cols, 0.0);
  std::fill(m2, m2 + cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = in + r * cols;
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
void variance_welford(const T* in, T* out, ReduceShape s, int64_t correction) {
  const int64_t R = s.reduce, I = s.inner;
  const double divisor = std::max<double>(0.0, double(R) - double(correction));
  if (I == 1) {
    // A row is read as [R / kLanes, kLanes] columns (independent lanes instead of one serial
    // chain), the lanes are merged, then the tail is added one by one.
    constexpr int64_t kLanes = 8;
    double lane_mean[kLanes], lane_m2[kLanes];
    const int64_t blocks = R / kLanes;
    for (int64_t o = 0; o < s.outer; ++o) {
      const T* row = in + o * R;
      WelfordState total;
      if (blocks > 0) {
        welford_columns(row, blocks, kLanes, lane_mean, lane_m2);
        for (int64_t l = 0; l < kLanes; ++l)
          total.merge({double(blocks), lane_mean[l], lane_m2[l]});
      }
      for (int64_t r = blocks * kLanes; r < R; ++r) total.add(load_value(row[r]));
      out[o] = store_value<T>(total.m2 / divisor);
    }
    return;
  }
  std::vector<double> mean(static_cast<size_t>(I)), m2(static_cast<size_t>(I));
  for (int64_t o = 0; o < s.outer; ++o) {
    welford_columns(in + o * R * I, R, I, mean.data(), m2.data());
    for (int64_t j = 0; j < I; ++j) out[o * I + j] = store_value<T>(m2[size_t(j)] / divisor);
  }
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
