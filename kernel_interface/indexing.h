// The indexing kernel interfaces: index_select, index_add, gather, scatter_add, index_copy,
// scatter_reduce, nonzero and the advanced-indexing (x.index / index_put_) kernels, on dense
// tensors unless a kernel says otherwise. Index tensors are int32 or int64 unless a kernel says
// otherwise. CPU kernels throw on an out-of-range index before writing anything; CUDA kernels
// report it through the device error flag (tensor/runtime/device_errors.h) and skip it.
#pragma once
#include <cstdint>

#include "ember/dispatch/registry.h"
#include "ember/tensor/tensor.h"

namespace ember {

// index_select: out[o, i, n] = in[o, index[i], n], shapes [outer, size, inner] / [outer, nidx,
// inner]
using IndexSelectKernel = void (*)(const Tensor& out, const Tensor& in, const Tensor& index,
                                   int64_t outer, int64_t in_size, int64_t inner);
EMBER_DECLARE_KERNEL(index_select_kernel, IndexSelectKernel)
// index_add: out[o, index[i], n] += src[o, i, n] (the backward of index_select / embedding).
using IndexAddKernel = void (*)(const Tensor& out, const Tensor& index, const Tensor& src,
                                int64_t outer, int64_t out_size, int64_t inner);
EMBER_DECLARE_KERNEL(index_add_kernel, IndexAddKernel)
// gather: out[..i..] = in[..index[..i..]..] along dim (index and out share a shape).
using GatherKernel = void (*)(const Tensor& out, const Tensor& in, const Tensor& index,
                              int64_t dim);
EMBER_DECLARE_KERNEL(gather_kernel, GatherKernel)
// scatter_add: out[..index[..i..]..] += src[..i..] along dim (index and src share a shape).
using ScatterAddKernel = void (*)(const Tensor& out, const Tensor& index, const Tensor& src,
                                  int64_t dim);
EMBER_DECLARE_KERNEL(scatter_add_kernel, ScatterAddKernel)

// index_copy: out[o, index[i], n] = src[o, i, n], shapes [outer, size, inner] / [outer, nidx,
// inner], index int64. Overwrites; with duplicate indices the CPU keeps the last write, CUDA an
// unspecified one (as PyTorch). A negative index is out of range (the ops wrap them first).
using IndexCopyKernel = void (*)(const Tensor& out, const Tensor& index, const Tensor& src,
                                 int64_t outer, int64_t out_size, int64_t inner);
EMBER_DECLARE_KERNEL(index_copy_kernel, IndexCopyKernel)

// scatter_reduce: out[..index[..i..]..] = reduce(out[...], src[..i..]) along dim, index and src
// sharing a shape (any strides), out dense. `assign` overwrites (duplicates: unspecified winner on
// CUDA, the last on the CPU); the others combine with what is there (the op resets out to the
// reduction's identity first when include_self is false).
enum class ScatterReduce : uint8_t { assign, sum, prod, amax, amin };
const char* scatter_reduce_name(ScatterReduce r);
using ScatterReduceKernel = void (*)(const Tensor& out, const Tensor& index, const Tensor& src,
                                     int64_t dim, ScatterReduce reduce);
EMBER_DECLARE_KERNEL(scatter_reduce_kernel, ScatterReduceKernel)

// nonzero_flat: the positions (int64, increasing) of the nonzero bytes of a dense bool/uint8
// tensor, as a new 1-D tensor on the input's device. On CUDA it waits for the count (as PyTorch).
using NonzeroFlatKernel = Tensor (*)(const Tensor& mask);
EMBER_DECLARE_KERNEL(nonzero_flat_kernel, NonzeroFlatKernel)

// unravel_index: out[i, d] = the coordinate along d of flat position flat[i] in a dense tensor of
// `sizes`; out is [n, sizes.size()] int64, flat [n] int64 (both dense).
using UnravelIndexKernel = void (*)(const Tensor& out, const Tensor& flat, const Shape& sizes);
EMBER_DECLARE_KERNEL(unravel_index_kernel, UnravelIndexKernel)

// Up to kMaxAdvancedIndices index tensors over the dims they index, all of `count` elements (the
// broadcast shape, flattened): index j is read at element i * elem_stride[j] (int32 or int64),
// wrapped when negative (+ size[j]) and must then lie in [0, size[j]). The linear position is
// sum_j wrapped_j * stride[j].
constexpr int kMaxAdvancedIndices = 8;
struct AdvancedIndex {
  int num_indices = 0;
  int64_t count = 0;
  const void* data[kMaxAdvancedIndices] = {};
  bool is_i64[kMaxAdvancedIndices] = {};
  int64_t elem_stride[kMaxAdvancedIndices] = {};
  int64_t size[kMaxAdvancedIndices] = {};
  int64_t stride[kMaxAdvancedIndices] = {};
};

// advanced_gather: out[o, i, n] = in[o, L(i), n] with in [outer, rows, inner] and out [outer,
// count, inner], both dense, L the linear position of AdvancedIndex (an element of `rows`).
using AdvancedGatherKernel = void (*)(const Tensor& out, const Tensor& in,
                                      const AdvancedIndex& index, int64_t outer, int64_t rows,
                                      int64_t inner);
EMBER_DECLARE_KERNEL(advanced_gather_kernel, AdvancedGatherKernel)

// linear_index: out[i] = L(i) (int64, dense, `count` elements); an out-of-range entry is an
// error (CPU: thrown; CUDA: reported through the device flag and written as -1, which the
// index_copy and index_add kernels skip).
using LinearIndexKernel = void (*)(const Tensor& out, const AdvancedIndex& index);
EMBER_DECLARE_KERNEL(linear_index_kernel, LinearIndexKernel)

}  // namespace ember
