// Memory-layout helpers and the fast NCHW <-> NHWC conversion:
//  - to_layout_of: a tensor in the dense layout of another (see tensor/tensor.h's dense layouts);
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

// is_dense_layout, same_layout and empty_with_layout_of live in tensor/tensor.h (core).
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
