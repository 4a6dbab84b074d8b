// Helpers shared by the ops/indexing*.cpp files (not a public header): argument checks that name
// the op, and the in-place pattern of the indexing ops (compute out of place with its backward
// node when autograd needs it, then write into self and move self's history onto that node).
#pragma once
#include <string>

#include "ember/autograd/graph/graph.h"
#include "ember/kernel_interface/indexing.h"
#include "ember/ops/ops.h"
#include "ember/tensor/tensor_iter.h"

namespace ember::indexing_detail {

using Grads = std::vector<Tensor>;

inline void check_defined(const char* op, const Tensor& t, const char* arg) {
  EMBER_CHECK(t.defined(), op, ": ", arg, " is an undefined tensor");
}

inline void check_same_device(const char* op, const Tensor& self, const Tensor& t,
                              const char* arg) {
  EMBER_CHECK(self.device() == t.device(), op, ": self is on ", self.device().str(), " but ", arg,
              " is on ", t.device().str(), "; move it with .to(device)");
}

inline void check_same_dtype(const char* op, const Tensor& self, const Tensor& t, const char* arg) {
  EMBER_CHECK(self.dtype() == t.dtype(), op, ": self has dtype ", dtype_name(self.dtype()), " but ",
              arg, " has dtype ", dtype_name(t.dtype()), " (shape ", t.shape_str(),
              "); convert it with .to(", dtype_name(self.dtype()), ")");
}

inline void check_index_tensor(const char* op, const Tensor& self, const Tensor& index) {
  check_defined(op, index, "index");
  EMBER_CHECK(index.dtype() == DType::i64 || index.dtype() == DType::i32, op,
              ": index must be int64 or int32, got ", dtype_name(index.dtype()), " of shape ",
              index.shape_str());
  check_same_device(op, self, index, "index");
}

inline void check_inplace(const char* op, const Tensor& self) {
  check_defined(op, self, "self");
  if (!autograd::grad_enabled()) return;
  EMBER_CHECK(!(self.requires_grad() && self.is_leaf()), op,
              ": a leaf tensor that requires grad (shape ", self.shape_str(),
              ") cannot be modified in place; use the out-of-place op or wrap the update in "
              "NoGradGuard");
}

// Writes `result` into self and, when result carries history, makes it self's history.
inline Tensor& assign_inplace(Tensor& self, const Tensor& result) {
  {
    autograd::NoGradGuard no_grad;
    self.copy_(result);
  }
  if (result.requires_grad()) {
    auto& meta = self.impl()->autograd;
    if (!meta) meta = std::make_shared<AutogradMeta>();
    meta->requires_grad = true;
    meta->grad_fn = result.grad_fn();
    meta->output_nr = result.impl()->autograd->output_nr;
  }
  return self;
}

// Runs `write(dense)` on a dense tensor holding self's values and makes sure self ends up with
// the result: self itself when it is dense, else a contiguous copy written back.
template <typename Write>
void write_dense(const Tensor& self, Write&& write) {
  autograd::NoGradGuard no_grad;
  if (self.is_contiguous()) {
    write(self);
    self.bump_version();
    return;
  }
  Tensor dense = self.contiguous();
  write(dense);
  Tensor target = self;
  target.copy_(dense);
}

// [outer, size, inner] of a dense tensor around `dim` (a 0-d tensor is [1, 1, 1]).
inline void split_dims(const Shape& s, int64_t dim, int64_t& outer, int64_t& size, int64_t& inner) {
  outer = 1;
  inner = 1;
  size = s.empty() ? 1 : s[size_t(dim)];
  for (int64_t d = 0; d < dim && d < int64_t(s.size()); ++d) outer *= s[size_t(d)];
  for (size_t d = size_t(dim) + 1; d < s.size(); ++d) inner *= s[d];
}

}  // namespace ember::indexing_detail
