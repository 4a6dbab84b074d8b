// The layout kernel interface: the batched transpose of dense memory behind ops/layout.h's NCHW
// <-> NHWC conversions. CPU kernel in cpu_kernels/layout.cpp, CUDA kernel in
// cuda_kernels/elementwise/layout.cu.
#pragma once
#include <cstdint>

#include "ember/dispatch/registry.h"
#include "ember/tensor/tensor.h"

namespace ember {

// Batched transpose of dense memory: dst[b][c][r] = src[b][r][c] for src [batch, rows, cols] and
// dst [batch, cols, rows], both starting at their data_ptr(). NCHW -> NHWC is rows = C,
// cols = H*W; NHWC -> NCHW is rows = H*W, cols = C. Selected by the dtype (any; the kernels move
// element-sized words).
using LayoutTransposeKernel = void (*)(const Tensor& dst, const Tensor& src, int64_t batch,
                                       int64_t rows, int64_t cols);
EMBER_DECLARE_KERNEL(layout_transpose_kernel, LayoutTransposeKernel)

}  // namespace ember
