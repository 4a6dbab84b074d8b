// Indexing as libtorch writes it: ember::indexing::{Slice, None, Ellipsis, TensorIndex} for
// x.index({...}) / x.index_put_({...}, v), and the mask, scatter and index-family ops (masked_fill,
// masked_select, masked_scatter, nonzero, where with scalars, scatter, scatter_reduce, index_add,
// index_copy, index_fill, take_along_dim). index_select, gather, scatter_add and embedding stay
// declared in ops/ops.h.
//
// Index semantics follow PyTorch: an integer selects (the dim goes away), a Slice makes a strided
// view, None inserts a size-1 dim, Ellipsis stands for the dims no other index names; these basic
// indices alone give a view. Integer (int64/int32) and bool tensors are advanced indices: a bool
// mask over k dims acts as its nonzero() coordinates, and all advanced indices broadcast together
// to one shape B. The result holds B where the first advanced index stood when the advanced
// indices are adjacent, else B comes first (x.index({idx, Slice(), idx}) is [B..., x.size(1)]).
// Negative integers count from the end. Advanced indexing gathers into a new tensor; its backward
// is an accumulating index_put onto zeros.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "ember/tensor/tensor.h"

namespace ember {
namespace indexing {

// The type of Ellipsis.
struct EllipsisIndexType {};
// Python's `...` in an index: stands for as many full slices as the other entries leave dims.
inline constexpr EllipsisIndexType Ellipsis{};
// Python's None in an index: inserts a dim of size 1 there (as unsqueeze).
inline constexpr std::nullopt_t None = std::nullopt;

// Python's start:stop:step (step > 0); a missing bound means the whole extent.
class Slice {
 public:
  // Slice(start, stop, step); Slice() is `:`. Negative bounds count from the end and bounds past
  // the extent are clamped, as Tensor::slice does; a step <= 0 throws bad_param when indexing.
  Slice(std::optional<int64_t> start = std::nullopt, std::optional<int64_t> stop = std::nullopt,
        std::optional<int64_t> step = std::nullopt)
      : start_(start.value_or(0)), stop_(stop.value_or(INT64_MAX)), step_(step.value_or(1)) {}
  // The first index (0 when missing).
  int64_t start() const { return start_; }
  // The end, exclusive (INT64_MAX, the whole extent, when missing).
  int64_t stop() const { return stop_; }
  // The step (1 when missing).
  int64_t step() const { return step_; }

 private:
  int64_t start_, stop_, step_;
};

// Which kind of entry a TensorIndex holds.
enum class TensorIndexType : uint8_t { None, Ellipsis, Integer, Slice, Tensor };

// One entry of x.index({...}): an integer, a Slice, None, Ellipsis (or "..."), or a tensor (int64
// / int32 indices or a bool mask).
class TensorIndex {
 public:
  // Implicit conversions, so that x.index({0, Slice(1, None), None, "...", mask}) reads as
  // Python: None (a new dim of size 1), Ellipsis, the string "..." (any other string throws
  // bad_param), a Slice, a tensor (int64/int32 indices or a bool mask) and any integer type but
  // bool (selects that position, which must be in [-size, size)).
  TensorIndex(std::nullopt_t) : type_(TensorIndexType::None) {}                     // NOLINT
  TensorIndex(EllipsisIndexType) : type_(TensorIndexType::Ellipsis) {}              // NOLINT
  TensorIndex(const char* ellipsis);                                                // NOLINT
  TensorIndex(Slice s) : type_(TensorIndexType::Slice), slice_(s) {}                // NOLINT
  TensorIndex(Tensor t) : type_(TensorIndexType::Tensor), tensor_(std::move(t)) {}  // NOLINT
  template <typename I>
  requires(std::is_integral_v<I> && !std::is_same_v<I, bool>) TensorIndex(I i)
      : type_(TensorIndexType::Integer), integer_(int64_t(i)) {}  // NOLINT

  // The kind of entry, and one test per kind.
  TensorIndexType type() const { return type_; }
  bool is_none() const { return type_ == TensorIndexType::None; }
  bool is_ellipsis() const { return type_ == TensorIndexType::Ellipsis; }
  bool is_integer() const { return type_ == TensorIndexType::Integer; }
  bool is_slice() const { return type_ == TensorIndexType::Slice; }
  bool is_tensor() const { return type_ == TensorIndexType::Tensor; }
  // The entry's value; meaningful only for its kind (0, Slice() or an undefined tensor otherwise).
  int64_t integer() const { return integer_; }
  const Slice& slice() const { return slice_; }
  const Tensor& tensor() const { return tensor_; }

 private:
  TensorIndexType type_;
  int64_t integer_ = 0;
  Slice slice_;
  Tensor tensor_;
};

}  // namespace indexing

// ---- x.index / x.index_put_ (ops/indexing_advanced.cpp) ----
Tensor index(const Tensor& self, const std::vector<indexing::TensorIndex>& indices);
// Out of place: a copy of self with the indexed positions set to (or, accumulating, increased
// by) `values`, which broadcast to the shape self.index(indices) has. values' dtype must match.
Tensor index_put(const Tensor& self, const std::vector<indexing::TensorIndex>& indices,
                 const Tensor& values, bool accumulate = false);
Tensor& index_put_(Tensor& self, const std::vector<indexing::TensorIndex>& indices,
                   const Tensor& values, bool accumulate = false);
Tensor& index_put_(Tensor& self, const std::vector<indexing::TensorIndex>& indices, double value);

// ---- masks and where (ops/indexing_masked.cpp) ----
// mask: bool, broadcastable to self's shape. value: a number or a 0-dim tensor (differentiable).
Tensor masked_fill(const Tensor& self, const Tensor& mask, double value);
Tensor masked_fill(const Tensor& self, const Tensor& mask, const Tensor& value);
Tensor& masked_fill_(Tensor& self, const Tensor& mask, double value);
Tensor& masked_fill_(Tensor& self, const Tensor& mask, const Tensor& value);
// The elements of self (broadcast with mask) where mask is true, as a 1-D tensor in order.
Tensor masked_select(const Tensor& self, const Tensor& mask);
// Copies source's first mask.sum() elements (in order) into the positions where mask is true.
Tensor masked_scatter(const Tensor& self, const Tensor& mask, const Tensor& source);
Tensor& masked_scatter_(Tensor& self, const Tensor& mask, const Tensor& source);
// [n, self.dim()] int64 coordinates of the nonzero elements, in row-major order (argwhere: same).
Tensor nonzero(const Tensor& self);
Tensor argwhere(const Tensor& self);
// where with a number on either side: the number takes the tensor's dtype; with two numbers the
// result is float32 on cond's device.
Tensor where(const Tensor& cond, double a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor where(const Tensor& cond, double a, double b);

// ---- scatter and the index family (ops/indexing_scatter.cpp) ----
// out[..index[i]..] = src[i] along dim (index and src as for scatter_add); duplicates: unspecified
// winner on CUDA.
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, double value);
// libtorch's scatter with reduce "add" or "multiply" (scatter_reduce "sum" / "prod", self
// included).
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
               const std::string& reduce);
Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, double value);
Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                 const std::string& reduce);
// reduce: "sum", "prod", "mean", "amax" or "amin"; include_self = false leaves self's values out
// of the reduction at the positions that receive something.
Tensor scatter_reduce(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                      const std::string& reduce, bool include_self = true);
Tensor& scatter_reduce_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                        const std::string& reduce, bool include_self = true);
// self[.., index[i], ..] += alpha * source[.., i, ..] along dim; index 1-D, source shaped like
// self with index.numel() along dim.
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                 double alpha = 1);
Tensor& index_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                   double alpha = 1);
Tensor index_copy(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source);
Tensor& index_copy_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& source);
Tensor index_fill(const Tensor& self, int64_t dim, const Tensor& index, double value);
Tensor index_fill(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& value);
Tensor& index_fill_(Tensor& self, int64_t dim, const Tensor& index, double value);
Tensor& index_fill_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& value);
// gather with self and indices broadcast against each other except along dim; without dim both
// are flattened.
Tensor take_along_dim(const Tensor& self, const Tensor& indices,
                      std::optional<int64_t> dim = std::nullopt);

}  // namespace ember
