// Memory-layout helpers and the fast NCHW <-> NHWC conversion:
//  - dense layouts: a tensor whose elements fill one block of memory in some dim order (contiguous,
//    channels_last, any permutation of them). Ops that only need "rows" of memory (softmax,
//    cross-entropy, dropout) work on such tensors in place of a transpose copy, and allocate
//    their outputs with the same strides;
//  - nchw_to_nhwc / nhwc_to_nchw: explicit, differentiable conversions through a tiled transpose
//    kernel (shared-memory tiles on CUDA, cache blocks on the CPU);
//  - try_fast_layout_copy: the same kernel as a copy path for ops/copy.cpp (Tensor::contiguous,
//    copy_ and to(MemoryFormat) between the two formats).
// The transpose kernel's table is kernel_interface/layout.h.
#pragma once
#include <cstdint>

#include "ember/kernel_interface/layout.h"
#include "ember/tensor/tensor.h"

namespace ember {

// True when the elements of `t` occupy exactly numel consecutive elements of memory from its
// offset, in some order of its dims (size-1 dims are ignored). Empty tensors are dense.
bool is_dense_layout(const Tensor& t);
// True when `a` and `b` have the same sizes and the same strides on every dim of size > 1.
bool same_layout(const Tensor& a, const Tensor& b);
// An uninitialised tensor with the sizes and strides of the dense tensor `like` (its own storage,
// offset 0) and dtype `dtype`.
Tensor empty_with_layout_of(const Tensor& like, DType dtype);
// `t` itself when it already has the layout of `like` (same sizes), else a copy in that layout.
// No autograd (for use inside ops and backward formulas).
Tensor to_layout_of(const Tensor& t, const Tensor& like);

// x [N, C, H, W] (or [N, C, D, H, W]) in channels_last memory format, and back. Return the input
// itself when it already is in the target format; differentiable (the gradient of a layout change
// is the gradient itself).
Tensor nchw_to_nhwc(const Tensor& x);
Tensor nhwc_to_nchw(const Tensor& x);

// The copy path for ops/copy.cpp: when dst and src are on one device, have one dtype and one 4-D
// or 5-D shape, and one is contiguous while the other is contiguous in channels_last (and they
// are not both), copies src into dst with the tiled transpose kernel and returns true. Otherwise
// does nothing and returns false. No autograd and no version bump (the caller does both).
bool try_fast_layout_copy(const Tensor& dst, const Tensor& src);

}  // namespace ember
