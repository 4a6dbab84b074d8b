// CPU kernels for index_copy (rows written at int64 indices, overwriting) and scatter_reduce
// (elements combined along one dim by assign, sum, prod, amax or amin): the reference for the CUDA
// ones. Every index is checked before anything is written; a bad one throws bad_param naming the
// op, the value and the valid range. With duplicate indices the last write (in index order) wins
// for assign and index_copy; the reductions combine in index order.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ember/cpu_kernels/index_helpers.h"
#include "ember/kernel_interface/indexing.h"

namespace ember {
namespace {

using namespace cpu_index;

void index_copy_cpu(const Tensor& out, const Tensor& index, const Tensor& src, int64_t outer,
                    int64_t out_size, int64_t inner) {
  const IndexReader idx = index_reader("index_copy", index);
  const int64_t num_indices = index.numel();
  EMBER_INTERNAL_ASSERT(out.dtype() == src.dtype() && out.is_contiguous() && src.is_contiguous() &&
                            index.is_contiguous(),
                        "index_copy: out ", dtype_name(out.dtype()), " vs src ",
                        dtype_name(src.dtype()), " or a non-dense operand");
  EMBER_INTERNAL_ASSERT(
      out.numel() == outer * out_size * inner && src.numel() == outer * num_indices * inner,
      "index_copy: [outer, size, inner] = [", outer, ", ", out_size, ", ", inner,
      "] does not match the tensors");
  for (int64_t i = 0; i < num_indices; ++i) check_index_value("index_copy", idx[i], out_size, -1);
  const size_t run_bytes = size_t(inner) * out.element_size();
  const char* from = static_cast<const char*>(src.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < num_indices; ++i)
      std::memcpy(dst + size_t(o * out_size + idx[i]) * run_bytes,
                  from + size_t(o * num_indices + i) * run_bytes, run_bytes);
}

template <typename T>
void scatter_reduce_typed(const Tensor& out, const IndexReader& idx, const Tensor& index,
                          const Tensor& src, int64_t dim, ScatterReduce reduce) {
  using C = compute_t<T>;
  T* dst = static_cast<T*>(out.data_ptr());
  const T* from = static_cast<const T*>(src.data_ptr());
  const int64_t stride = indexed_stride(out, dim);
  auto apply = [&](auto combine) {
    walk_index(idx, index, src, out, dim, [&](int64_t v, int64_t src_off, int64_t out_off) {
      T& target = dst[out_off + v * stride];
      target = T(combine(C(target), C(from[src_off])));
    });
  };
  switch (reduce) {
    case ScatterReduce::assign:
      return apply([](C, C b) { return b; });
    case ScatterReduce::sum:
      return apply([](C a, C b) { return C(a + b); });
    case ScatterReduce::prod:
      return apply([](C a, C b) { return C(a * b); });
    // NaN propagates as in PyTorch's scatter_reduce.
    case ScatterReduce::amax:
      return apply([](C a, C b) {
        if constexpr (std::is_floating_point_v<C>)
          if (std::isnan(a) || std::isnan(b)) return C(NAN);
        return std::max(a, b);
      });
    case ScatterReduce::amin:
      return apply([](C a, C b) {
        if constexpr (std::is_floating_point_v<C>)
          if (std::isnan(a) || std::isnan(b)) return C(NAN);
        return std::min(a, b);
      });
  }
}

void scatter_reduce_cpu(const Tensor& out, const Tensor& index, const Tensor& src, int64_t dim,
                        ScatterReduce reduce) {
  const IndexReader idx = index_reader("scatter", index);
  EMBER_INTERNAL_ASSERT(
      out.dtype() == src.dtype() && index.sizes() == src.sizes() && out.dim() == index.dim(),
      "scatter: out ", out.shape_str(), " ", dtype_name(out.dtype()), ", index ", index.shape_str(),
      ", src ", src.shape_str(), " ", dtype_name(src.dtype()));
  const int64_t extent = indexed_extent(out, dim);
  walk_index(idx, index, src, out, dim,
             [&](int64_t v, int64_t, int64_t) { check_index_value("scatter", v, extent, dim); });
  if (reduce == ScatterReduce::assign) {
    // Moving elements: one instantiation per element size.
    switch (out.element_size()) {
      case 1:
        return scatter_reduce_typed<uint8_t>(out, idx, index, src, dim, reduce);
      case 2:
        return scatter_reduce_typed<int16_t>(out, idx, index, src, dim, reduce);
      case 4:
        return scatter_reduce_typed<int32_t>(out, idx, index, src, dim, reduce);
      default:
        return scatter_reduce_typed<int64_t>(out, idx, index, src, dim, reduce);
    }
  }
  switch (out.dtype()) {
    case DType::f32:
      return scatter_reduce_typed<float>(out, idx, index, src, dim, reduce);
    case DType::f64:
      return scatter_reduce_typed<double>(out, idx, index, src, dim, reduce);
    case DType::f16:
      return scatter_reduce_typed<Half>(out, idx, index, src, dim, reduce);
    case DType::bf16:
      return scatter_reduce_typed<BFloat16>(out, idx, index, src, dim, reduce);
    case DType::i32:
      return scatter_reduce_typed<int32_t>(out, idx, index, src, dim, reduce);
    case DType::i64:
      return scatter_reduce_typed<int64_t>(out, idx, index, src, dim, reduce);
    default:
      EMBER_THROW(not_supported, "scatter(): reduce \"", scatter_reduce_name(reduce),
                  "\" does not support dtype ", dtype_name(out.dtype()),
                  "; use a floating dtype, int32 or int64");
  }
}

}  // namespace

EMBER_REGISTER_KERNEL(index_copy_kernel, CPU, dispatch::kAllTypes, &index_copy_cpu);
EMBER_REGISTER_KERNEL(scatter_reduce_kernel, CPU, dispatch::kAllTypes, &scatter_reduce_cpu);

}  // namespace ember
