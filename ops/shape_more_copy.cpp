// The copying shape ops of ops/shape_more.h: one_hot, repeat / tile, flip, roll, rot90,
// repeat_interleave, diag_embed / diag, block_diag, trace and tril / triu, with their Tensor
// methods. Each is an expand + copy, an index_select along a dim, a cat of narrows or a where
// over a triangular mask, so autograd flows through those ops (diag_embed records its own
// backward: the diagonal of the gradient).
#include <algorithm>
#include <numeric>

#include "ember/autograd/graph/graph.h"
#include "ember/ops/ops.h"

namespace ember {

namespace {
TensorOptions index_options(const Tensor& like) {
  return TensorOptions(DType::i64).with_device(like.device());
}
}  // namespace

Tensor one_hot(const Tensor& a, int64_t num_classes) {
  EMBER_CHECK(is_integral(a.dtype()) && a.dtype() != DType::boolean,
              "one_hot: expects integer class indices, got dtype ", dtype_name(a.dtype()),
              " (shape ", a.shape_str(), ")");
  EMBER_CHECK(num_classes >= -1, "one_hot: num_classes must be -1 or >= 0, got ", num_classes);
  Tensor idx = a.to(DType::i64);
  if (a.numel() > 0) {
    const int64_t lo = min(idx).item<int64_t>(), hi = max(idx).item<int64_t>();
    EMBER_CHECK(lo >= 0, "one_hot: class indices must be non-negative, got ", lo, " (shape ",
                a.shape_str(), ")");
    if (num_classes == -1) num_classes = hi + 1;
    EMBER_CHECK(hi < num_classes, "one_hot: class index ", hi, " is out of range for num_classes ",
                num_classes);
  } else {
    EMBER_CHECK(num_classes != -1, "one_hot: cannot infer num_classes from an empty tensor (shape ",
                a.shape_str(), "); pass num_classes");
  }
  Tensor classes = arange(double(num_classes), index_options(a));
  return eq(idx.unsqueeze(-1), classes).to(DType::i64);
}

Tensor repeat(const Tensor& a, const Shape& repeats) {
  EMBER_CHECK(int64_t(repeats.size()) >= a.dim(), "repeat: got ", repeats.size(), " repeats ",
              shape_str(repeats), " for a tensor of shape ", a.shape_str(),
              "; give at least one per dim");
  const size_t lead = repeats.size() - size_t(a.dim());
  Shape padded(lead, 1);
  padded.insert(padded.end(), a.sizes().begin(), a.sizes().end());
  Shape vshape, eshape, out;
  for (size_t i = 0; i < repeats.size(); ++i) {
    EMBER_CHECK(repeats[i] >= 0, "repeat: repeats ", shape_str(repeats),
                " must be non-negative (shape ", a.shape_str(), ")");
    vshape.insert(vshape.end(), {1, padded[i]});
    eshape.insert(eshape.end(), {repeats[i], padded[i]});
    out.push_back(repeats[i] * padded[i]);
  }
  checked_numel(out, "repeat");
  return a.reshape(vshape).expand(eshape).clone(MemoryFormat::contiguous).reshape(out);
}

Tensor tile(const Tensor& a, const Shape& dims) {
  Shape reps = dims;
  if (int64_t(reps.size()) < a.dim()) reps.insert(reps.begin(), size_t(a.dim()) - reps.size(), 1);
  return repeat(a, reps);
}

Tensor flip(const Tensor& a, const Shape& dims) {
  std::vector<bool> seen(size_t(std::max<int64_t>(a.dim(), 1)), false);
  Tensor out = a;
  bool copied = false;
  for (int64_t dim : dims) {
    const int64_t d = wrap_dim(dim, std::max<int64_t>(a.dim(), 1), "flip");
    EMBER_CHECK(!seen[size_t(d)], "flip: dim ", d, " appears twice in dims ", shape_str(dims));
    seen[size_t(d)] = true;
    if (a.dim() == 0) continue;
    const int64_t n = a.size(d);
    out = index_select(out, d, arange(double(n) - 1, -1, -1, index_options(a)));
    copied = true;
  }
  return copied ? out : a.clone();
}

Tensor roll(const Tensor& a, const Shape& shifts, const Shape& dims) {
  if (dims.empty()) {
    EMBER_CHECK(shifts.size() == 1, "roll: without dims expects one shift, got ", shape_str(shifts),
                " (shape ", a.shape_str(), ")");
    return roll(a.flatten(), shifts, {0}).view(a.sizes());
  }
  EMBER_CHECK(shifts.size() == dims.size(), "roll: shifts ", shape_str(shifts), " and dims ",
              shape_str(dims), " must have the same length");
  if (a.dim() == 0) {  // dims 0 / -1 of a 0-d tensor: nothing moves
    for (int64_t d : dims) wrap_dim(d, 0, "roll");
    return a.clone();
  }
  Tensor out = a;
  bool copied = false;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], a.dim(), "roll");
    const int64_t n = a.size(d);
    if (n == 0) continue;
    const int64_t s = ((shifts[i] % n) + n) % n;
    if (s == 0) continue;
    out = cat({out.narrow(d, n - s, s), out.narrow(d, 0, n - s)}, d);
    copied = true;
  }
  return copied ? out : a.clone();
}

Tensor rot90(const Tensor& a, int64_t k, const Shape& dims) {
  EMBER_CHECK(dims.size() == 2, "rot90: expects 2 dims, got ", shape_str(dims));
  EMBER_CHECK(a.dim() >= 2, "rot90: expects a tensor with at least 2 dims, got ", a.shape_str());
  const int64_t d0 = wrap_dim(dims[0], a.dim(), "rot90"), d1 = wrap_dim(dims[1], a.dim(), "rot90");
  EMBER_CHECK(d0 != d1, "rot90: dims ", shape_str(dims), " must be two different dims of ",
              a.shape_str());
  switch (((k % 4) + 4) % 4) {
    case 1:
      return flip(a, {d1}).transpose(d0, d1);
    case 2:
      return flip(a, {d0, d1});
    case 3:
      return flip(a, {d0}).transpose(d0, d1);
    default:
      return a.clone();
  }
}

Tensor repeat_interleave(const Tensor& a, int64_t repeats, std::optional<int64_t> dim) {
  EMBER_CHECK(repeats >= 0, "repeat_interleave: repeats must be non-negative, got ", repeats);
  Tensor x = dim ? a : a.reshape({-1});
  const int64_t d = dim ? wrap_dim(*dim, std::max<int64_t>(x.dim(), 1), "repeat_interleave") : 0;
  if (x.dim() == 0) x = x.reshape({1});
  Shape e = x.sizes();
  e.insert(e.begin() + d + 1, repeats);
  Shape out = x.sizes();
  out[size_t(d)] *= repeats;
  return x.unsqueeze(d + 1).expand(e).clone(MemoryFormat::contiguous).reshape(out);
}

Tensor repeat_interleave(const Tensor& repeats) {
  EMBER_CHECK(
      repeats.dim() <= 1 && is_integral(repeats.dtype()) && repeats.dtype() != DType::boolean,
      "repeat_interleave: repeats must be a 0-d or 1-d integer tensor, got shape ",
      repeats.shape_str(), " of dtype ", dtype_name(repeats.dtype()));
  Tensor r = repeats.reshape({-1}).to(Device::cpu()).to(DType::i64).contiguous();
  const int64_t* p = r.data<int64_t>();
  std::vector<double> idx;
  for (int64_t i = 0; i < r.numel(); ++i) {
    EMBER_CHECK(p[i] >= 0, "repeat_interleave: repeats must be non-negative, got ", p[i],
                " at position ", i);
    idx.insert(idx.end(), size_t(p[i]), double(i));
  }
  return from_vector(idx, {int64_t(idx.size())}, index_options(repeats));
}

Tensor repeat_interleave(const Tensor& a, const Tensor& repeats, std::optional<int64_t> dim) {
  EMBER_CHECK(repeats.dim() <= 1, "repeat_interleave: repeats must be 0-d or 1-d, got shape ",
              repeats.shape_str());
  if (repeats.numel() == 1) return repeat_interleave(a, repeats.item<int64_t>(), dim);
  Tensor x = dim && a.dim() > 0 ? a : a.reshape({-1});
  const int64_t d = dim ? wrap_dim(*dim, a.dim(), "repeat_interleave") : 0;
  EMBER_CHECK(repeats.numel() == x.size(d), "repeat_interleave: repeats of shape ",
              repeats.shape_str(), " must have one entry per element of dim ", d, " (size ",
              x.size(d), ", input ", a.shape_str(), ")");
  return index_select(x, d, repeat_interleave(repeats).to(x.device()));
}

Tensor diag_embed(const Tensor& a, int64_t offset, int64_t dim1, int64_t dim2) {
  EMBER_CHECK(a.dim() >= 1, "diag_embed: expects a tensor with at least 1 dim, got a 0-d one");
  const int64_t nd = a.dim() + 1;
  const int64_t d1 = wrap_dim(dim1, nd, "diag_embed"), d2 = wrap_dim(dim2, nd, "diag_embed");
  EMBER_CHECK(d1 != d2, "diag_embed: dim1 and dim2 are both ", d1, " (input ", a.shape_str(),
              "); give two different dims");
  const int64_t n = a.size(-1) + (offset < 0 ? -offset : offset);
  Shape shape(a.sizes().begin(), a.sizes().end() - 1);
  shape.insert(shape.begin() + std::min(d1, d2), n);
  shape.insert(shape.begin() + std::max(d1, d2), n);
  Tensor out = zeros(shape, TensorOptions(a.dtype()).with_device(a.device()));
  {
    autograd::NoGradGuard ng;
    diagonal(out, offset, d1, d2).copy_(a);
  }
  if (autograd::needs_grad({&a})) {
    autograd::record_backward("diag_embed", {a}, {&out},
                              [offset, d1, d2](const auto& g, const auto&) {
                                return std::vector<Tensor>{diagonal(g[0], offset, d1, d2)};
                              });
  }
  return out;
}

Tensor diag(const Tensor& a, int64_t offset) {
  EMBER_CHECK(a.dim() == 1 || a.dim() == 2, "diag: expects a 1-d or 2-d tensor, got ",
              a.shape_str());
  if (a.dim() == 1) return diag_embed(a, offset, 0, 1);
  return diagonal(a, offset, 0, 1).clone(MemoryFormat::contiguous);
}

Tensor block_diag(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) return zeros({0, 0});
  DType dt = tensors[0].dtype();
  for (const Tensor& t : tensors) dt = promote_types(dt, t.dtype());
  const Device dev = tensors[0].device();
  std::vector<Tensor> blocks;
  int64_t cols = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    EMBER_CHECK(t.dim() <= 2, "block_diag: tensor ", i, " has shape ", t.shape_str(),
                "; expects 0-d, 1-d or 2-d tensors");
    EMBER_CHECK(t.device() == dev, "block_diag: tensor ", i, " is on ", t.device().str(),
                " but tensor 0 is on ", dev.str());
    Tensor b = t.dim() == 2 ? t : t.reshape({1, t.numel()});
    blocks.push_back(b.dtype() == dt ? b : b.to(dt));
    cols += blocks.back().size(1);
  }
  const TensorOptions o = TensorOptions(dt).with_device(dev);
  std::vector<Tensor> rows;
  int64_t left = 0;
  for (const Tensor& b : blocks) {
    const int64_t r = b.size(0), c = b.size(1);
    rows.push_back(cat({zeros({r, left}, o), b, zeros({r, cols - left - c}, o)}, 1));
    left += c;
  }
  return cat(rows, 0);
}

Tensor trace(const Tensor& a) {
  EMBER_CHECK(a.dim() == 2, "trace: expects a 2-d matrix, got ", a.shape_str());
  return diagonal(a, 0, 0, 1).sum();
}

namespace {
// True where the element (i, j) of the last two dims is kept: j - i <= k (tril) or >= k (triu).
Tensor triangle_mask(const char* op, const Tensor& a, int64_t k, bool lower) {
  EMBER_CHECK(a.dim() >= 2, op, ": expects a tensor with at least 2 dims, got ", a.shape_str());
  const int64_t m = a.size(-2), n = a.size(-1);
  Tensor diff = arange(double(n), index_options(a)).reshape({1, n}) -
                arange(double(m), index_options(a)).reshape({m, 1});
  Tensor kk = scalar_tensor(double(k), index_options(a));
  return lower ? le(diff, kk) : ge(diff, kk);
}
}  // namespace

Tensor tril(const Tensor& a, int64_t k) { return where(triangle_mask("tril", a, k, true), a, 0.0); }
Tensor triu(const Tensor& a, int64_t k) {
  return where(triangle_mask("triu", a, k, false), a, 0.0);
}
Tensor& tril_(Tensor& a, int64_t k) {
  return masked_fill_(a, logical_not(triangle_mask("tril_", a, k, true)), 0.0);
}
Tensor& triu_(Tensor& a, int64_t k) {
  return masked_fill_(a, logical_not(triangle_mask("triu_", a, k, false)), 0.0);
}

// ---- Tensor methods ----
Tensor Tensor::repeat(const Shape& r) const { return ember::repeat(*this, r); }
Tensor Tensor::tile(const Shape& d) const { return ember::tile(*this, d); }
Tensor Tensor::flip(const Shape& d) const { return ember::flip(*this, d); }
Tensor Tensor::roll(const Shape& s, const Shape& d) const { return ember::roll(*this, s, d); }
Tensor Tensor::rot90(int64_t k, const Shape& d) const { return ember::rot90(*this, k, d); }
Tensor Tensor::repeat_interleave(int64_t r, std::optional<int64_t> d) const {
  return ember::repeat_interleave(*this, r, d);
}
Tensor Tensor::repeat_interleave(const Tensor& r, std::optional<int64_t> d) const {
  return ember::repeat_interleave(*this, r, d);
}
Tensor Tensor::diag_embed(int64_t o, int64_t d1, int64_t d2) const {
  return ember::diag_embed(*this, o, d1, d2);
}
Tensor Tensor::diag(int64_t o) const { return ember::diag(*this, o); }
Tensor Tensor::trace() const { return ember::trace(*this); }
Tensor Tensor::tril(int64_t k) const { return ember::tril(*this, k); }
Tensor Tensor::triu(int64_t k) const { return ember::triu(*this, k); }
Tensor& Tensor::tril_(int64_t k) { return ember::tril_(*this, k); }
Tensor& Tensor::triu_(int64_t k) { return ember::triu_(*this, k); }

}  // namespace ember
