// More reductions and scans, as PyTorch names and defaults them: any / all / count_nonzero,
// aminmax, var_mean / std_mean, norm / linalg_vector_norm (ops/reduction_more.cpp) and the
// cumulative scans cumsum / cumprod / cummax / cummin (ops/reduction_more_scan.cpp).
// Dims follow ops.h: negative dims count from the end, an empty list reduces everything.
#pragma once
#include <cstdint>
#include <limits>
#include <optional>
#include <tuple>

#include "ember/tensor/tensor.h"

namespace ember {

// Boolean tests over dims: any (some element nonzero; false over an empty dim) and all (every
// element nonzero; true over an empty dim). NaN counts as nonzero. The result is boolean.
Tensor any(const Tensor& a);
Tensor any(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor any(const Tensor& a, const Shape& dims, bool keepdim = false);
Tensor all(const Tensor& a);
Tensor all(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor all(const Tensor& a, const Shape& dims, bool keepdim = false);
// The number of nonzero elements over dims (all when empty), as int64.
Tensor count_nonzero(const Tensor& a, const Shape& dims = {});
// (min, max) over `dim`, or over every element when no dim is given (differentiable like
// amin / amax: ties share the gradient evenly).
std::tuple<Tensor, Tensor> aminmax(const Tensor& a, std::optional<int64_t> dim = std::nullopt,
                                   bool keepdim = false);
// (var, mean) and (std, mean) in one call; correction is Bessel's (1 = unbiased).
std::tuple<Tensor, Tensor> var_mean(const Tensor& a, const Shape& dims = {}, int64_t correction = 1,
                                    bool keepdim = false);
std::tuple<Tensor, Tensor> std_mean(const Tensor& a, const Shape& dims = {}, int64_t correction = 1,
                                    bool keepdim = false);
// Vector norms over dims (every element when empty), as torch.linalg.vector_norm: ord = inf
// (max |x|), -inf (min |x|), 0 (number of nonzeros, no gradient), any other p gives
// (sum |x|^p)^(1/p). Floating inputs only. The gradient at a zero norm is zero (as PyTorch).
Tensor linalg_vector_norm(const Tensor& a, double ord = 2, const Shape& dims = {},
                          bool keepdim = false);
// torch.norm for vectors: the same as linalg_vector_norm with p as ord.
Tensor norm(const Tensor& a, double p = 2, const Shape& dims = {}, bool keepdim = false);

}  // namespace ember

namespace ember {

// Inclusive scans along `dim` (ops/reduction_more_scan.cpp). cumsum / cumprod return `dtype` when
// given, else int64 for integer and bool inputs and the input's dtype otherwise (as PyTorch).
// cumprod's gradient is exact with zeros in the input too.
Tensor cumsum(const Tensor& a, int64_t dim, std::optional<DType> dtype = std::nullopt);
Tensor cumprod(const Tensor& a, int64_t dim, std::optional<DType> dtype = std::nullopt);
// (values, indices): the running max / min and where it was found; ties take the later index and
// NaN propagates, as PyTorch. The gradient flows to the recorded indices.
std::tuple<Tensor, Tensor> cummax(const Tensor& a, int64_t dim);
std::tuple<Tensor, Tensor> cummin(const Tensor& a, int64_t dim);

}  // namespace ember

namespace ember {

// Sorting and order statistics along `dim` (ops/reduction_more_sort.cpp). The sort is always
// stable (torch.sort(stable=True)); NaN sorts above every number (last ascending, first
// descending). Values are differentiable: the gradient flows back to the positions in `indices`.
std::tuple<Tensor, Tensor> sort(const Tensor& a, int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor& a, int64_t dim = -1, bool descending = false);
// The k largest (or smallest) along dim; always returned sorted (sorted=false is accepted).
std::tuple<Tensor, Tensor> topk(const Tensor& a, int64_t k, int64_t dim = -1, bool largest = true,
                                bool sorted = true);
// The k-th smallest (1-based) along dim.
std::tuple<Tensor, Tensor> kthvalue(const Tensor& a, int64_t k, int64_t dim = -1,
                                    bool keepdim = false);
// The lower median (the ((n - 1) / 2)-th smallest). median gives NaN where a row holds a NaN;
// nanmedian ignores NaN (NaN only where the whole row is NaN). Without dim: over all elements,
// values only.
Tensor median(const Tensor& a);
std::tuple<Tensor, Tensor> median(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor nanmedian(const Tensor& a);
std::tuple<Tensor, Tensor> nanmedian(const Tensor& a, int64_t dim, bool keepdim = false);

}  // namespace ember
