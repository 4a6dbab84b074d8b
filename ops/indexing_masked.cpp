// Mask ops and where with numbers: masked_fill, masked_select, masked_scatter, nonzero / argwhere
// and where(cond, number, tensor). masked_fill is where() against a 0-dim value; masked_select and
// masked_scatter find the mask's nonzero positions (nonzero_flat_kernel, a host sync on CUDA as in
// PyTorch, since the result's size depends on them) and reuse index_select / index_copy, whose
// backward formulas make them differentiable.
#include "ember/ops/indexing_internal.h"

namespace ember {

using namespace indexing_detail;

namespace {
void check_mask(const char* op, const Tensor& self, const Tensor& mask) {
  check_defined(op, self, "self");
  check_defined(op, mask, "mask");
  EMBER_CHECK(mask.dtype() == DType::boolean, op, ": mask must be a bool tensor, got ",
              dtype_name(mask.dtype()), " of shape ", mask.shape_str(),
              "; compare first (e.g. x > 0) or convert with .to(ember::DType::boolean)");
  check_same_device(op, self, mask, "mask");
}

// The mask broadcast to self's shape (an error naming both shapes when it does not fit).
Tensor mask_over_self(const char* op, const Tensor& self, const Tensor& mask) {
  bool fits = mask.dim() <= self.dim();
  for (int64_t i = 1; fits && i <= mask.dim(); ++i)
    fits = mask.size(-i) == 1 || mask.size(-i) == self.size(-i);
  EMBER_CHECK(fits, op, ": mask of shape ", mask.shape_str(),
              " does not broadcast to self of shape ", self.shape_str());
  return mask.expand(self.sizes());
}

// The positions of the true elements of a (broadcast) bool tensor in its row-major order.
Tensor true_positions(const Tensor& mask) {
  autograd::NoGradGuard no_grad;
  Tensor dense = mask.contiguous();
  return nonzero_flat_kernel().get(dense.device().type, dense.dtype())(dense);
}
}  // namespace

Tensor masked_fill(const Tensor& self, const Tensor& mask, const Tensor& value) {
  check_mask("masked_fill", self, mask);
  check_defined("masked_fill", value, "value");
  EMBER_CHECK(value.dim() == 0, "masked_fill: value must be a number or a 0-dim tensor, got shape ",
              value.shape_str());
  check_same_device("masked_fill", self, value, "value");
  Tensor m = mask_over_self("masked_fill", self, mask);
  Tensor v = value.dtype() == self.dtype() ? value : value.to(self.dtype());
  return where(m, v, self);
}

Tensor masked_fill(const Tensor& self, const Tensor& mask, double value) {
  check_defined("masked_fill", self, "self");
  return masked_fill(self, mask,
                     scalar_tensor(value, TensorOptions(self.dtype()).with_device(self.device())));
}

Tensor& masked_fill_(Tensor& self, const Tensor& mask, const Tensor& value) {
  check_inplace("masked_fill_", self);
  check_mask("masked_fill_", self, mask);
  Tensor result = masked_fill(autograd::needs_grad({&self}) ? self.clone() : self, mask, value);
  return assign_inplace(self, result);
}

Tensor& masked_fill_(Tensor& self, const Tensor& mask, double value) {
  check_defined("masked_fill_", self, "self");
  return masked_fill_(self, mask,
                      scalar_tensor(value, TensorOptions(self.dtype()).with_device(self.device())));
}

Tensor masked_select(const Tensor& self, const Tensor& mask) {
  check_mask("masked_select", self, mask);
  const Shape shape = broadcast_shapes("masked_select", {self.sizes(), mask.sizes()});
  Tensor positions = true_positions(mask.expand(shape));
  Tensor flat = self.sizes() == shape ? self.reshape({-1}) : self.expand(shape).reshape({-1});
  return index_select(flat, 0, positions);
}

Tensor masked_scatter(const Tensor& self, const Tensor& mask, const Tensor& source) {
  check_mask("masked_scatter", self, mask);
  check_defined("masked_scatter", source, "source");
  check_same_dtype("masked_scatter", self, source, "source");
  check_same_device("masked_scatter", self, source, "source");
  Tensor positions = true_positions(mask_over_self("masked_scatter", self, mask));
  const int64_t n = positions.numel();
  EMBER_CHECK(source.numel() >= n, "masked_scatter: the mask of shape ", mask.shape_str(),
              " selects ", n, " elements but source of shape ", source.shape_str(), " has only ",
              source.numel());
  Tensor values = source.reshape({-1}).narrow(0, 0, n);
  return index_copy(self.reshape({-1}), 0, positions, values).reshape(self.sizes());
}

Tensor& masked_scatter_(Tensor& self, const Tensor& mask, const Tensor& source) {
  check_inplace("masked_scatter_", self);
  const bool grad = autograd::needs_grad({&self, &source});
  return assign_inplace(self, masked_scatter(grad ? self.clone() : self, mask, source));
}

Tensor nonzero(const Tensor& self) {
  check_defined("nonzero", self, "self");
  Tensor flags;
  {
    autograd::NoGradGuard no_grad;
    flags = self.dtype() == DType::boolean || self.dtype() == DType::u8
                ? self
                : ne(self, zeros({}, TensorOptions(self.dtype()).with_device(self.device())));
  }
  Tensor positions = true_positions(flags);
  if (self.dim() == 1) return positions.reshape({positions.numel(), 1});  // already coordinates
  Tensor out = empty({positions.numel(), self.dim()}, DType::i64, self.device());
  if (out.numel() > 0)
    unravel_index_kernel().get(out.device().type, DType::i64)(out, positions, self.sizes());
  return out;
}

Tensor argwhere(const Tensor& self) { return nonzero(self); }

Tensor where(const Tensor& cond, double a, const Tensor& b) {
  check_defined("where", b, "other");
  return where(cond, scalar_tensor(a, TensorOptions(b.dtype()).with_device(b.device())), b);
}

Tensor where(const Tensor& cond, const Tensor& a, double b) {
  check_defined("where", a, "self");
  return where(cond, a, scalar_tensor(b, TensorOptions(a.dtype()).with_device(a.device())));
}

Tensor where(const Tensor& cond, double a, double b) {
  check_defined("where", cond, "condition");
  const TensorOptions o = TensorOptions(DType::f32).with_device(cond.device());
  return where(cond, scalar_tensor(a, o), scalar_tensor(b, o));
}

}  // namespace ember
