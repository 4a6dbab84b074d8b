// CPU sort kernel (kernel_interface/sort.h): a stable sort of each row of a dense [rows, len]
// input, NaN above every number and -0.0 equal to 0.0 (as PyTorch). The reference for the CUDA
// sort.
#include "ember/kernel_interface/sort.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

namespace ember {
namespace {

template <typename T>
inline double key_of(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return double(float(v));
  else
    return double(v);
}

template <typename T>
void sort_rows(const Tensor& values_t, const Tensor& indices_t, const Tensor& in_t, int64_t rows,
               int64_t len, bool descending) {
  const T* in = in_t.data<T>();
  T* values = values_t.data<T>();
  int64_t* indices = indices_t.data<int64_t>();
  std::vector<int64_t> order(static_cast<size_t>(len));
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = in + r * len;
    std::iota(order.begin(), order.end(), int64_t(0));
    // "a before b": NaN is the largest key; int64 keys are compared exactly (not through double).
    auto less = [&](int64_t a, int64_t b) {
      if constexpr (std::is_integral_v<T>) {
        return descending ? row[a] > row[b] : row[a] < row[b];
      } else {
        const double x = key_of(row[a]), y = key_of(row[b]);
        const bool xn = std::isnan(x), yn = std::isnan(y);
        if (descending) return (xn && !yn) || (!xn && !yn && x > y);
        return (!xn && yn) || (!xn && !yn && x < y);
      }
    };
    std::stable_sort(order.begin(), order.end(), less);
    for (int64_t k = 0; k < len; ++k) {
      values[r * len + k] = row[order[size_t(k)]];
      indices[r * len + k] = order[size_t(k)];
    }
  }
}

void sort_cpu(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t rows,
              int64_t len, bool descending) {
  EMBER_INTERNAL_ASSERT(
      in.numel() == rows * len && values.numel() == in.numel() && indices.numel() == in.numel() &&
          values.dtype() == in.dtype() && indices.dtype() == DType::i64,
      "sort: input ", in.shape_str(), ", values ", values.shape_str(), ", indices ",
      indices.shape_str(), " are not dense [", rows, ", ", len, "]");
  if (in.numel() == 0) return;
  EMBER_DISPATCH_ALL_DTYPES(
      in.dtype(), "sort", [&] { sort_rows<scalar_t>(values, indices, in, rows, len, descending); });
}

}  // namespace

EMBER_REGISTER_KERNEL(sort_kernel, CPU, dispatch::kAllTypes, &sort_cpu);

}  // namespace ember
