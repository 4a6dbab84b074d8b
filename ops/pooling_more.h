// More pooling-shaped ops, named and defaulted as torch.nn.functional: adaptive max pooling (with
// the argmax indices), power-average (LP) pooling, max unpooling, and the sliding-window copies
// unfold (im2col) and fold (col2im). Each composes differentiable ops of ops/ops.h (index_select,
// gather, scatter, index_add, max along a dim, avg_pool), so forward and backward run on every
// device those ops run on, and the backward is theirs: adaptive max pooling's gradient lands on
// each window's argmax, max unpooling's is a gather at the indices, fold and unfold are each
// other's adjoint. Definitions in ops/pooling_more.cpp.
//
// Inputs are batched [N, C, *spatial] or unbatched [C, *spatial] (the output matches), except
// fold's and unfold's, which are [N, C * prod(kernel), L] / [N, C, H, W] or without the N.
// Integer-list arguments take one value for every spatial dim or one per dim.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "ember/ops/ops.h"
#include "ember/ops/pooling.h"
#include "ember/tensor/tensor.h"

namespace ember {

// ---- adaptive max pooling ----
// Output cell o of a dim of input size I and output size O takes the maximum over
// [floor(o I / O), ceil((o + 1) I / O)); the first maximum in row-major window order wins ties.
// Indices (int64) are flat positions within each input plane (l, h * W + w, d * H * W + h * W + w),
// as PyTorch's, so max_unpool consumes them. output_size entries are > 0.
ValuesIndices adaptive_max_pool1d_with_indices(const Tensor& x, const IntList& output_size);
ValuesIndices adaptive_max_pool2d_with_indices(const Tensor& x, const IntList& output_size);
ValuesIndices adaptive_max_pool3d_with_indices(const Tensor& x, const IntList& output_size);
Tensor adaptive_max_pool1d(const Tensor& x, const IntList& output_size);
Tensor adaptive_max_pool2d(const Tensor& x, const IntList& output_size);
Tensor adaptive_max_pool3d(const Tensor& x, const IntList& output_size);

// ---- power-average pooling ----
// (sum over each window of x^p)^(1/p), computed as PyTorch's F.lp_poolNd does: avg_pool of x^p
// (no padding) times the window size, then the 1/p power. p = norm_type > 0; stride defaults to
// the kernel size.
Tensor lp_pool1d(const Tensor& x, double norm_type, const IntList& kernel_size,
                 const IntList& stride = {}, bool ceil_mode = false);
Tensor lp_pool2d(const Tensor& x, double norm_type, const IntList& kernel_size,
                 const IntList& stride = {}, bool ceil_mode = false);
Tensor lp_pool3d(const Tensor& x, double norm_type, const IntList& kernel_size,
                 const IntList& stride = {}, bool ceil_mode = false);

// ---- max unpooling ----
// The partial inverse of max pooling: a zero tensor of the output size with x's values written at
// `indices` (as max_pool*_with_indices returns them: flat positions in each output plane).
// The output size defaults to (in - 1) * stride - 2 * padding + kernel_size per dim; output_size,
// when given (the spatial sizes, or the full shape whose last dims are taken), must lie within
// stride of that default, as PyTorch checks. Differentiable in x (the gradient gathers at indices).
Tensor max_unpool1d(const Tensor& x, const Tensor& indices, const IntList& kernel_size,
                    const IntList& stride = {}, const IntList& padding = {0},
                    const std::optional<IntList>& output_size = std::nullopt);
Tensor max_unpool2d(const Tensor& x, const Tensor& indices, const IntList& kernel_size,
                    const IntList& stride = {}, const IntList& padding = {0},
                    const std::optional<IntList>& output_size = std::nullopt);
Tensor max_unpool3d(const Tensor& x, const Tensor& indices, const IntList& kernel_size,
                    const IntList& stride = {}, const IntList& padding = {0},
                    const std::optional<IntList>& output_size = std::nullopt);

// ---- sliding windows ----
// unfold (im2col): x [N, C, H, W] (or [C, H, W]) -> [N, C * kH * kW, L] (or without N), column l
// holding the window at output position l (row-major over the L = L_h * L_w positions, rows
// ordered c, kh, kw), with L_h = (H + 2 padding - dilation (kH - 1) - 1) / stride + 1 (W alike),
// zero padding.
Tensor unfold(const Tensor& x, const IntList& kernel_size, const IntList& dilation = {1},
              const IntList& padding = {0}, const IntList& stride = {1});
// fold (col2im), unfold's adjoint: x [N, C * kH * kW, L] (or [C * kH * kW, L]) -> [N, C, H, W]
// with (H, W) = output_size, summing the values that land on the same position.
Tensor fold(const Tensor& x, const IntList& output_size, const IntList& kernel_size,
            const IntList& dilation = {1}, const IntList& padding = {0},
            const IntList& stride = {1});

}  // namespace ember
