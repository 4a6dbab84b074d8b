// Helpers shared by the CPU indexing kernels (cpu_kernels/index*.cpp): reading int32/int64 index
// tensors, the range check that names the op, and the walk over an index tensor's elements that
// gather, scatter_add and scatter_reduce share.
#pragma once
#include <string>
#include <type_traits>
#include <vector>

#include "ember/tensor/error.h"
#include "ember/tensor/tensor.h"

namespace ember::cpu_index {

// Reads element i (in elements from `base`) of an int32 or int64 index tensor as int64.
struct IndexReader {
  const char* base;
  bool is_int64;
  int64_t operator[](int64_t i) const {
    return is_int64 ? reinterpret_cast<const int64_t*>(base)[i]
                    : int64_t(reinterpret_cast<const int32_t*>(base)[i]);
  }
};

inline IndexReader index_reader(const char* op, const Tensor& index) {
  EMBER_CHECK(index.dtype() == DType::i64 || index.dtype() == DType::i32, op,
              "(): index must have dtype int64 or int32, got ", dtype_name(index.dtype()),
              "; convert it with .to(ember::DType::i64)");
  return IndexReader{static_cast<const char*>(index.data_ptr()), index.dtype() == DType::i64};
}

// `dim` is the indexed dim of the op's tensor, or -1 where the kernel only sees a [outer, size,
// inner] view and does not know it.
inline void check_index_value(const char* op, int64_t value, int64_t size, int64_t dim) {
  if (value >= 0 && value < size) [[likely]]
    return;
  const std::string where = dim >= 0 ? detail::concat("dimension ", dim, " of size ", size)
                                     : detail::concat("a dimension of size ", size);
  if (size == 0)
    EMBER_THROW(bad_param, op, "(): index ", value, " is out of range for ", where,
                ": the dimension is empty, so no index is valid");
  EMBER_THROW(bad_param, op, "(): index ", value, " is out of range for ", where,
              "; valid indices are 0 to ", size - 1, " (negative indices are not accepted)");
}

template <typename T>
using compute_t =
    std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

// Walks every element of `index` (whose shape `dense` shares) and calls
// fn(index_value, dense_offset, indexed_offset_without_dim), offsets in elements. `indexed` is the
// tensor addressed by the index along `dim` (the input of gather, the output of scatter_add);
// its coordinate along `dim` is left out of the offset for fn to add.
template <typename Fn>
void walk_index(const IndexReader& idx, const Tensor& index, const Tensor& dense,
                const Tensor& indexed, int64_t dim, Fn&& fn) {
  const int64_t ndim = index.dim();
  if (index.numel() == 0) return;
  if (ndim == 0) {
    fn(idx[0], int64_t(0), int64_t(0));
    return;
  }
  const Shape& sizes = index.sizes();
  const Shape& is = index.strides();
  const Shape& ds = dense.strides();
  Shape xs = indexed.strides();
  xs[size_t(dim)] = 0;  // the index supplies this coordinate
  const int64_t last = ndim - 1;
  const int64_t row_len = sizes[size_t(last)];
  std::vector<int64_t> counter(size_t(ndim), 0);
  int64_t index_off = 0, dense_off = 0, indexed_off = 0;
  for (;;) {
    for (int64_t i = 0; i < row_len; ++i)
      fn(idx[index_off + i * is[size_t(last)]], dense_off + i * ds[size_t(last)],
         indexed_off + i * xs[size_t(last)]);
    int64_t d = last - 1;
    for (; d >= 0; --d) {
      const size_t u = size_t(d);
      if (++counter[u] < sizes[u]) {
        index_off += is[u];
        dense_off += ds[u];
        indexed_off += xs[u];
        break;
      }
      counter[u] = 0;
      index_off -= is[u] * (sizes[u] - 1);
      dense_off -= ds[u] * (sizes[u] - 1);
      indexed_off -= xs[u] * (sizes[u] - 1);
    }
    if (d < 0) return;
  }
}

// The extent of the indexed dim (a 0-d tensor counts as one element).
inline int64_t indexed_extent(const Tensor& t, int64_t dim) {
  return t.dim() == 0 ? 1 : t.size(dim);
}
inline int64_t indexed_stride(const Tensor& t, int64_t dim) {
  return t.dim() == 0 ? 0 : t.stride(dim);
}

}  // namespace ember::cpu_index
