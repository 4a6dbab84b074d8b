// More shape ops, named and defaulted as in PyTorch: dim moves, splits, diagonals, repeats,
// flips and rolls, triangular masks, padding and pixel shuffles. Each composes existing views
// and copying ops (index_select, cat, expand, where), so each is differentiable through them or
// records its own backward. Definitions in ops/shape_more_views.cpp, ops/shape_more_copy.cpp and
// ops/shape_more_pad.cpp; the Tensor methods are declared in tensor/tensor.h.
#pragma once
#include <string>
#include <vector>

#include "ember/tensor/tensor.h"

namespace ember {

// ---- views (ops/shape_more_views.cpp) ----
Tensor movedim(const Tensor& a, int64_t source, int64_t destination);
Tensor movedim(const Tensor& a, const Shape& source, const Shape& destination);
Tensor moveaxis(const Tensor& a, int64_t source, int64_t destination);
Tensor moveaxis(const Tensor& a, const Shape& source, const Shape& destination);
Tensor swapaxes(const Tensor& a, int64_t axis0, int64_t axis1);
Tensor swapdims(const Tensor& a, int64_t dim0, int64_t dim1);
// Splits dim into `sizes` (one of them may be -1).
Tensor unflatten(const Tensor& a, int64_t dim, const Shape& sizes);
Tensor narrow_copy(const Tensor& a, int64_t dim, int64_t start, int64_t length);
// `sections` near-equal parts (the first size % sections get one more), or split before each of
// `indices`; all views. A braced single value picks the sections overload: write Shape{i} for
// one index.
std::vector<Tensor> tensor_split(const Tensor& a, int64_t sections, int64_t dim = 0);
std::vector<Tensor> tensor_split(const Tensor& a, const Shape& indices, int64_t dim = 0);
std::vector<Tensor> hsplit(const Tensor& a, int64_t sections);
std::vector<Tensor> hsplit(const Tensor& a, const Shape& indices);
std::vector<Tensor> vsplit(const Tensor& a, int64_t sections);
std::vector<Tensor> vsplit(const Tensor& a, const Shape& indices);
std::vector<Tensor> dsplit(const Tensor& a, int64_t sections);
std::vector<Tensor> dsplit(const Tensor& a, const Shape& indices);
// The diagonal of dims dim1, dim2 (removed; the diagonal becomes the last dim), as a view.
Tensor diagonal(const Tensor& a, int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1);
// indexing "ij" (matrix) or "xy" (Cartesian: the first two outputs' dims swapped); expanded views.
std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors,
                             const std::string& indexing = "ij");
Tensor cartesian_prod(const std::vector<Tensor>& tensors);
Tensor pixel_shuffle(const Tensor& a, int64_t upscale_factor);
Tensor pixel_unshuffle(const Tensor& a, int64_t downscale_factor);

// ---- copies (ops/shape_more_copy.cpp) ----
// Integer class indices -> int64 one-hot rows; num_classes = -1 takes max + 1.
Tensor one_hot(const Tensor& a, int64_t num_classes = -1);
Tensor repeat(const Tensor& a, const Shape& repeats);
Tensor tile(const Tensor& a, const Shape& dims);
Tensor flip(const Tensor& a, const Shape& dims);
// With no dims the tensor is rolled flattened and restored to its shape.
Tensor roll(const Tensor& a, const Shape& shifts, const Shape& dims = {});
Tensor rot90(const Tensor& a, int64_t k = 1, const Shape& dims = {0, 1});
// Without dim the input is flattened. Tensor repeats: one per element of dim (or a single one).
Tensor repeat_interleave(const Tensor& a, int64_t repeats,
                         std::optional<int64_t> dim = std::nullopt);
Tensor repeat_interleave(const Tensor& a, const Tensor& repeats,
                         std::optional<int64_t> dim = std::nullopt);
// repeats [n] -> the indices 0..n-1, index i repeated repeats[i] times.
Tensor repeat_interleave(const Tensor& repeats);
Tensor diag_embed(const Tensor& a, int64_t offset = 0, int64_t dim1 = -2, int64_t dim2 = -1);
// 1-D -> a matrix with `a` on diagonal `offset`; 2-D -> a copy of its diagonal `offset`.
Tensor diag(const Tensor& a, int64_t diagonal = 0);
// 0-D, 1-D ([1, n]) and 2-D blocks on the diagonal of a zero matrix, dtype promoted.
Tensor block_diag(const std::vector<Tensor>& tensors);
Tensor trace(const Tensor& a);
// Keeps the elements on and below (tril) / above (triu) diagonal `diagonal` of the last two dims.
Tensor tril(const Tensor& a, int64_t diagonal = 0);
Tensor triu(const Tensor& a, int64_t diagonal = 0);
Tensor& tril_(Tensor& a, int64_t diagonal = 0);
Tensor& triu_(Tensor& a, int64_t diagonal = 0);

// ---- padding (ops/shape_more_pad.cpp) ----
// F.pad: `pad` holds (left, right) pairs starting from the last dim. mode "constant" (any number
// of dims; negative pads crop), "reflect", "replicate" or "circular" (non-negative pads of the
// last 1-3 dims of a batched or unbatched input; reflect pads < the size, circular <= it).
Tensor pad(const Tensor& a, const Shape& pad, const std::string& mode = "constant",
           double value = 0);

}  // namespace ember
