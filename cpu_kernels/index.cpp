// CPU indexing kernels: index_select, index_add, gather and scatter_add, the reference for the CUDA
// ones. Indices are int32 or int64 and must lie in [0, size) of the indexed dim (no negative
// indices, as in PyTorch); every index is checked before anything is written, and a bad one throws
// bad_param naming the op, the value and the valid range. index_add and scatter_add accumulate into
// `out` (duplicate indices add up, in index order); the other two overwrite it.
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "ember/cpu_kernels/index_helpers.h"
#include "ember/kernel_interface/indexing.h"

namespace ember {
namespace {

using namespace cpu_index;

// ---- index_select / index_add ([outer, size, inner] views) -------------------------------------

void index_select_cpu(const Tensor& out, const Tensor& in, const Tensor& index, int64_t outer,
                      int64_t in_size, int64_t inner) {
  const IndexReader idx = index_reader("index_select", index);
  const int64_t num_indices = index.numel();
  EMBER_INTERNAL_ASSERT(out.dtype() == in.dtype(), "index_select: out ", dtype_name(out.dtype()),
                        " vs in ", dtype_name(in.dtype()));
  EMBER_INTERNAL_ASSERT(
      in.numel() == outer * in_size * inner && out.numel() == outer * num_indices * inner,
      "index_select: [outer, size, inner] = [", outer, ", ", in_size, ", ", inner,
      "] does not match the tensors");
  for (int64_t i = 0; i < num_indices; ++i) check_index_value("index_select", idx[i], in_size, -1);
  // A pure copy of `inner`-element runs: bytes, whatever the dtype.
  const size_t run_bytes = size_t(inner) * out.element_size();
  const char* src = static_cast<const char*>(in.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < num_indices; ++i)
      std::memcpy(dst + size_t(o * num_indices + i) * run_bytes,
                  src + size_t(o * in_size + idx[i]) * run_bytes, run_bytes);
}

template <typename T>
void index_add_typed(T* out, const IndexReader& idx, const T* src, int64_t num_indices,
                     int64_t outer, int64_t out_size, int64_t inner) {
  using C = compute_t<T>;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < num_indices; ++i) {
      T* dst_row = out + (o * out_size + idx[i]) * inner;
      const T* src_row = src + (o * num_indices + i) * inner;
      for (int64_t n = 0; n < inner; ++n) dst_row[n] = T(C(dst_row[n]) + C(src_row[n]));
    }
}

void index_add_cpu(const Tensor& out, const Tensor& index, const Tensor& src, int64_t outer,
                   int64_t out_size, int64_t inner) {
  const IndexReader idx = index_reader("index_add", index);
  const int64_t num_indices = index.numel();
  EMBER_INTERNAL_ASSERT(out.dtype() == src.dtype(), "index_add: out ", dtype_name(out.dtype()),
                        " vs src ", dtype_name(src.dtype()));
  EMBER_INTERNAL_ASSERT(
      out.numel() == outer * out_size * inner && src.numel() == outer * num_indices * inner,
      "index_add: [outer, size, inner] = [", outer, ", ", out_size, ", ", inner,
      "] does not match the tensors");
  for (int64_t i = 0; i < num_indices; ++i) check_index_value("index_add", idx[i], out_size, -1);
  switch (out.dtype()) {
    case DType::f32:
      return index_add_typed(out.data<float>(), idx, src.data<float>(), num_indices, outer,
                             out_size, inner);
    case DType::f64:
      return index_add_typed(out.data<double>(), idx, src.data<double>(), num_indices, outer,
                             out_size, inner);
    case DType::f16:
      return index_add_typed(out.data<Half>(), idx, src.data<Half>(), num_indices, outer, out_size,
                             inner);
    case DType::bf16:
      return index_add_typed(out.data<BFloat16>(), idx, src.data<BFloat16>(), num_indices, outer,
                             out_size, inner);
    case DType::i32:
      return index_add_typed(out.data<int32_t>(), idx, src.data<int32_t>(), num_indices, outer,
                             out_size, inner);
    case DType::i64:
      return index_add_typed(out.data<int64_t>(), idx, src.data<int64_t>(), num_indices, outer,
                             out_size, inner);
    default:
      EMBER_THROW(not_supported, "index_add(): dtype ", dtype_name(out.dtype()),
                  " is not supported on the CPU; use a floating dtype, int32 or int64");
  }
}

// ---- gather / scatter_add (along one dim of N-d tensors, any strides) --------------------------

void check_same_rank(const char* op, const Tensor& index, const Tensor& dense,
                     const Tensor& indexed, int64_t dim) {
  EMBER_INTERNAL_ASSERT(index.sizes() == dense.sizes(), op, ": index ", shape_str(index.sizes()),
                        " and ", shape_str(dense.sizes()), " must share a shape");
  EMBER_INTERNAL_ASSERT(
      indexed.dim() == index.dim() && (index.dim() == 0 || (dim >= 0 && dim < index.dim())), op,
      ": rank mismatch or bad dim ", dim);
  for (int64_t d = 0; d < index.dim(); ++d)
    EMBER_INTERNAL_ASSERT(d == dim || index.size(d) <= indexed.size(d), op, ": index ",
                          shape_str(index.sizes()), " exceeds ", shape_str(indexed.sizes()),
                          " at dim ", d);
}

template <typename T>
void gather_typed(const Tensor& out, const Tensor& in, const IndexReader& idx, const Tensor& index,
                  int64_t dim) {
  T* dst = static_cast<T*>(out.data_ptr());
  const T* src = static_cast<const T*>(in.data_ptr());
  const int64_t stride = indexed_stride(in, dim);
  walk_index(idx, index, out, in, dim, [&](int64_t v, int64_t out_off, int64_t in_off) {
    dst[out_off] = src[in_off + v * stride];
  });
}

void gather_cpu(const Tensor& out, const Tensor& in, const Tensor& index, int64_t dim) {
  const IndexReader idx = index_reader("gather", index);
  EMBER_INTERNAL_ASSERT(out.dtype() == in.dtype(), "gather: out ", dtype_name(out.dtype()),
                        " vs in ", dtype_name(in.dtype()));
  check_same_rank("gather", index, out, in, dim);
  const int64_t extent = indexed_extent(in, dim);
  walk_index(idx, index, out, in, dim,
             [&](int64_t v, int64_t, int64_t) { check_index_value("gather", v, extent, dim); });
  EMBER_DISPATCH_ALL_DTYPES(out.dtype(), "gather",
                            [&] { gather_typed<scalar_t>(out, in, idx, index, dim); });
}

template <typename T>
void scatter_add_typed(const Tensor& out, const IndexReader& idx, const Tensor& index,
                       const Tensor& src, int64_t dim) {
  using C = compute_t<T>;
  T* dst = static_cast<T*>(out.data_ptr());
  const T* from = static_cast<const T*>(src.data_ptr());
  const int64_t stride = indexed_stride(out, dim);
  walk_index(idx, index, src, out, dim, [&](int64_t v, int64_t src_off, int64_t out_off) {
    T& target = dst[out_off + v * stride];
    target = T(C(target) + C(from[src_off]));
  });
}

void scatter_add_cpu(const Tensor& out, const Tensor& index, const Tensor& src, int64_t dim) {
  const IndexReader idx = index_reader("scatter_add", index);
  EMBER_INTERNAL_ASSERT(out.dtype() == src.dtype(), "scatter_add: out ", dtype_name(out.dtype()),
                        " vs src ", dtype_name(src.dtype()));
  check_same_rank("scatter_add", index, src, out, dim);
  const int64_t extent = indexed_extent(out, dim);
  walk_index(idx, index, src, out, dim, [&](int64_t v, int64_t, int64_t) {
    check_index_value("scatter_add", v, extent, dim);
  });
  switch (out.dtype()) {
    case DType::f32:
      return scatter_add_typed<float>(out, idx, index, src, dim);
    case DType::f64:
      return scatter_add_typed<double>(out, idx, index, src, dim);
    case DType::f16:
      return scatter_add_typed<Half>(out, idx, index, src, dim);
    case DType::bf16:
      return scatter_add_typed<BFloat16>(out, idx, index, src, dim);
    case DType::i32:
      return scatter_add_typed<int32_t>(out, idx, index, src, dim);
    case DType::i64:
      return scatter_add_typed<int64_t>(out, idx, index, src, dim);
    default:
      EMBER_THROW(not_supported, "scatter_add(): dtype ", dtype_name(out.dtype()),
                  " is not supported on the CPU; use a floating dtype, int32 or int64");
  }
}

// index_add and scatter_add do arithmetic: floating dtypes and the two index-like integers.
constexpr std::initializer_list<DType> kAccumulateTypes = {DType::f32,  DType::f64, DType::f16,
                                                           DType::bf16, DType::i32, DType::i64};

}  // namespace

// index_select and gather only move elements, so they serve every dtype.
EMBER_REGISTER_KERNEL(index_select_kernel, CPU, dispatch::kAllTypes, &index_select_cpu);
EMBER_REGISTER_KERNEL(gather_kernel, CPU, dispatch::kAllTypes, &gather_cpu);
EMBER_REGISTER_KERNEL(index_add_kernel, CPU, kAccumulateTypes, &index_add_cpu);
EMBER_REGISTER_KERNEL(scatter_add_kernel, CPU, kAccumulateTypes, &scatter_add_cpu);

}  // namespace ember
