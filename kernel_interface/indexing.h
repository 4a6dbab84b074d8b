// The indexing kernel interfaces: index_select, index_add, gather, scatter_add on dense tensors.
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

}  // namespace ember
