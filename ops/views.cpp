// View ops: new sizes/strides over the same storage, each with its backward. A view shares the
// storage's version counter, so in-place writes through any view are seen by saved tensors.
#include <algorithm>
#include <numeric>

#include "ember/autograd/graph/graph.h"
#include "ember/ops/ops.h"

namespace ember {

namespace {

// Records `name`'s backward for a view `out` of `in` when needed.
void record_view(const char* name, const Tensor& in, Tensor& out, autograd::BackwardFn fn) {
  if (autograd::needs_grad({&in})) autograd::record_backward(name, {in}, {&out}, std::move(fn));
}

// Strides for viewing `t` as `shape` without a copy, or empty when impossible (PyTorch's rule).
std::optional<Shape> view_strides(const Tensor& t, const Shape& shape) {
  const Shape& os = t.sizes();
  const Shape& ost = t.strides();
  Shape nst(shape.size());
  if (t.numel() == 0 || t.dim() == 0) return contiguous_strides(shape);
  int64_t view_d = int64_t(shape.size()) - 1;
  int64_t chunk_base_stride = ost.empty() ? 1 : ost.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(os.size()) - 1; d >= 0; --d) {
    tensor_numel *= os[size_t(d)];
    if (d == 0 ||
        (os[size_t(d - 1)] != 1 && ost[size_t(d - 1)] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[size_t(view_d)] == 1)) {
        nst[size_t(view_d)] = view_numel * chunk_base_stride;
        view_numel *= shape[size_t(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = ost[size_t(d - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return nst;
}

Shape infer_shape(const char* op, const Tensor& t, const Shape& shape) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      EMBER_CHECK(infer < 0, op, ": only one dimension can be -1 in ", shape_str(shape));
      infer = int64_t(i);
    } else {
      EMBER_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in ", shape_str(shape));
      EMBER_CHECK(!__builtin_mul_overflow(known, std::max<int64_t>(out[i], 1), &known) &&
                      known <= kMaxNumel,
                  op, ": shape ", shape_str(shape),
                  " exceeds the limit of 2^48 elements per "
                  "tensor; it is invalid for a tensor of ",
                  t.numel(), " elements");
      if (out[i] == 0) known = 0;
    }
  }
  if (infer >= 0) {
    EMBER_CHECK(known != 0 && t.numel() % known == 0, op, ": shape ", shape_str(shape),
                " is invalid for a tensor of ", t.numel(), " elements (", t.shape_str(), ")");
    out[size_t(infer)] = t.numel() / known;
  }
  EMBER_CHECK(checked_numel(out, op) == t.numel(), op, ": shape ", shape_str(shape),
              " is invalid for a tensor of ", t.numel(), " elements (", t.shape_str(), ")");
  return out;
}

}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  Shape s = infer_shape("view", *this, shape);
  auto st = view_strides(*this, s);
  EMBER_CHECK(st.has_value(), "view: the tensor of shape ", shape_str(), " and strides ",
              ::ember::shape_str(strides()), " cannot be viewed as ", ::ember::shape_str(s),
              " without a copy; use reshape() instead");
  Tensor out = make_view(*this, s, *st, offset());
  Shape in = sizes();
  record_view("view", *this, out,
              [in](const auto& g, const auto&) { return std::vector<Tensor>{g[0].reshape(in)}; });
  return out;
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape s = infer_shape("reshape", *this, shape);
  if (view_strides(*this, s).has_value()) return view(s);
  return contiguous().view(s);
}

Tensor Tensor::permute(const Shape& dims) const {
  const int64_t nd = dim();
  EMBER_CHECK(int64_t(dims.size()) == nd, "permute: got ", dims.size(), " dims ",
              ::ember::shape_str(dims), " for a tensor with ", nd, " dims");
  Shape sz(static_cast<size_t>(nd)), st(static_cast<size_t>(nd)), inv(static_cast<size_t>(nd));
  std::vector<bool> used(size_t(nd), false);
  for (int64_t i = 0; i < nd; ++i) {
    int64_t d = wrap_dim(dims[size_t(i)], nd, "permute");
    EMBER_CHECK(!used[size_t(d)], "permute: dim ", d, " repeated in ", ::ember::shape_str(dims));
    used[size_t(d)] = true;
    sz[size_t(i)] = sizes()[size_t(d)];
    st[size_t(i)] = strides()[size_t(d)];
    inv[size_t(d)] = i;
  }
  Tensor out = make_view(*this, sz, st, offset());
  record_view("permute", *this, out,
              [inv](const auto& g, const auto&) { return std::vector<Tensor>{g[0].permute(inv)}; });
  return out;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  const int64_t nd = dim();
  if (nd == 0) return *this;
  d0 = wrap_dim(d0, nd, "transpose");
  d1 = wrap_dim(d1, nd, "transpose");
  Shape perm(static_cast<size_t>(nd));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[size_t(d0)], perm[size_t(d1)]);
  return permute(perm);
}

Tensor Tensor::t() const {
  EMBER_CHECK(dim() <= 2, "t: expects a tensor with <= 2 dims, got ", shape_str(),
              "; use transpose(d0, d1)");
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d, dim(), "slice");
  EMBER_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = sizes()[size_t(d)];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape sz = sizes(), st = strides();
  sz[size_t(d)] = end == start ? 0 : (end - start - 1) / step + 1;  // no overflow for a huge step
  // A step beyond the size leaves at most one element, whose stride is unused: capping it keeps
  // the product from overflowing.
  st[size_t(d)] *= std::min<int64_t>(step, std::max<int64_t>(n, 1));
  Tensor out = make_view(*this, sz, st, offset() + start * strides()[size_t(d)]);
  Shape in = sizes();
  DType dt = dtype();
  Device dev = device();
  record_view("slice", *this, out, [in, dt, dev, d, start, end, step](const auto& g, const auto&) {
    Tensor r = zeros(in, TensorOptions(dt).with_device(dev));
    if (autograd::grad_enabled()) {
      // A create_graph backward: a scatter at start, start + step, ... along d, differentiable
      // (a write into a view of r would not give r history).
      const int64_t count = g[0].size(d);
      Shape index_shape(in.size(), 1);
      index_shape[size_t(d)] = count;
      Tensor index = arange(double(start), double(start + count * step), double(step),
                            TensorOptions(DType::i64).with_device(dev))
                         .reshape(index_shape)
                         .expand(g[0].sizes())
                         .contiguous();
      return std::vector<Tensor>{::ember::scatter_add(r, d, index, g[0])};
    }
    r.slice(d, start, end, step).copy_(g[0]);
    return std::vector<Tensor>{r};
  });
  return out;
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim(), "narrow");
  const int64_t n = sizes()[size_t(d)];
  if (start < 0) start += n;
  EMBER_CHECK(start >= 0 && start <= n && length >= 0 && length <= n - start, "narrow: start ",
              start, " and length ", length, " are out of range for dimension ", d, " of size ", n,
              " (shape ", shape_str(), ")");
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = wrap_dim(d, dim(), "select");
  const int64_t n = sizes()[size_t(d)];
  EMBER_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dimension ",
              d, " of size ", n);
  if (index < 0) index += n;
  return narrow(d, index, 1).squeeze(d);
}

Tensor Tensor::expand(const Shape& shape) const {
  const int64_t nd = int64_t(shape.size());
  EMBER_CHECK(nd >= dim(), "expand: cannot expand shape ", shape_str(), " to ",
              ::ember::shape_str(shape), " (fewer dims)");
  Shape sz(static_cast<size_t>(nd)), st(static_cast<size_t>(nd));
  for (int64_t i = nd - 1; i >= 0; --i) {
    int64_t j = i - (nd - dim());
    int64_t target = shape[size_t(i)];
    EMBER_CHECK(target >= -1, "expand: invalid size ", target, " at dim ", i, " of the target ",
                ::ember::shape_str(shape), "; sizes must be >= 0, or -1 to keep a size of ",
                shape_str());
    if (j >= 0) {
      int64_t have = sizes()[size_t(j)];
      if (target == -1) target = have;
      EMBER_CHECK(have == target || have == 1, "expand: the size ", have, " at dim ", j,
                  " of shape ", shape_str(), " cannot be expanded to ", target, " (target ",
                  ::ember::shape_str(shape), ")");
      sz[size_t(i)] = target;
      st[size_t(i)] = have == target ? strides()[size_t(j)] : 0;
    } else {
      EMBER_CHECK(target >= 0, "expand: -1 is not allowed for the new leading dim ", i,
                  " of the target ", ::ember::shape_str(shape), " (shape ", shape_str(),
                  "); give its size");
      sz[size_t(i)] = target;
      st[size_t(i)] = 0;
    }
  }
  if (sz == sizes()) return *this;
  checked_numel(sz, "expand");
  Tensor out = make_view(*this, sz, st, offset());
  Shape in = sizes();
  record_view("expand", *this, out, [in](const auto& g, const auto&) {
    return std::vector<Tensor>{autograd::sum_to(g[0], in)};
  });
  return out;
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  d = wrap_dim(d, dim(), "squeeze");
  if (sizes()[size_t(d)] != 1) return *this;
  Shape sz = sizes(), st = strides();
  sz.erase(sz.begin() + d);
  st.erase(st.begin() + d);
  Tensor out = make_view(*this, sz, st, offset());
  Shape in = sizes();
  record_view("squeeze", *this, out,
              [in](const auto& g, const auto&) { return std::vector<Tensor>{g[0].reshape(in)}; });
  return out;
}

Tensor Tensor::squeeze() const {
  Shape sz;
  for (int64_t s : sizes())
    if (s != 1) sz.push_back(s);
  return sz.size() == sizes().size() ? *this : reshape(sz);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape sz = sizes(), st = strides();
  int64_t new_stride = d < dim() ? sz[size_t(d)] * st[size_t(d)] : 1;
  sz.insert(sz.begin() + d, 1);
  st.insert(st.begin() + d, new_stride);
  Tensor out = make_view(*this, sz, st, offset());
  Shape in = sizes();
  record_view("unsqueeze", *this, out,
              [in](const auto& g, const auto&) { return std::vector<Tensor>{g[0].reshape(in)}; });
  return out;
}

Tensor Tensor::flatten(int64_t start, int64_t end) const {
  if (dim() == 0) return reshape({1});
  start = wrap_dim(start, dim(), "flatten");
  end = wrap_dim(end, dim(), "flatten");
  EMBER_CHECK(start <= end, "flatten: start_dim ", start, " is after end_dim ", end);
  Shape sz;
  for (int64_t i = 0; i < start; ++i) sz.push_back(sizes()[size_t(i)]);
  int64_t m = 1;
  for (int64_t i = start; i <= end; ++i) m *= sizes()[size_t(i)];
  sz.push_back(m);
  for (int64_t i = end + 1; i < dim(); ++i) sz.push_back(sizes()[size_t(i)]);
  return reshape(sz);
}

}  // namespace ember
