// scatter / scatter_reduce and the index family (index_add, index_copy, index_fill) with
// take_along_dim: argument checks that name the op and the shapes, the kernels of
// kernel_interface/indexing.h, and backward formulas written with differentiable ops (scatter,
// gather, index_select, index_fill, where). Each in-place op runs its kernel on self directly when
// autograd is not involved, else computes out of place and moves self's history onto the result.
#include <cmath>
#include <limits>

#include "ember/ops/indexing_internal.h"

namespace ember {

using namespace indexing_detail;

namespace {

// ---- scatter ----------------------------------------------------------------------------------

// Checks self / index / src as PyTorch's scatter does and returns the wrapped dim.
int64_t check_scatter_args(const char* op, const Tensor& self, int64_t dim, const Tensor& index,
                           const Tensor* src) {
  check_defined(op, self, "self");
  check_index_tensor(op, self, index);
  const int64_t d = wrap_dim(dim, std::max<int64_t>(self.dim(), 1), op);
  EMBER_CHECK(index.dim() == self.dim() || (self.dim() == 0 && index.numel() <= 1), op,
              ": index must have as many dims as self; self is ", self.shape_str(), ", index is ",
              index.shape_str());
  if (src) {
    check_same_dtype(op, self, *src, "src");
    check_same_device(op, self, *src, "src");
    EMBER_CHECK(src->dim() == index.dim(), op, ": src must have as many dims as index; index is ",
                index.shape_str(), ", src is ", src->shape_str());
  }
  for (int64_t i = 0; i < index.dim(); ++i) {
    EMBER_CHECK(i == d || index.size(i) <= self.size(i), op, ": index of shape ", index.shape_str(),
                " is larger than self ", self.shape_str(), " at dim ", i);
    EMBER_CHECK(!src || index.size(i) <= src->size(i), op, ": index of shape ", index.shape_str(),
                " is larger than src ", src->shape_str(), " at dim ", i);
  }
  return d;
}

// src read over the index's extent (the part scatter uses).
Tensor src_over_index(const Tensor& src, const Tensor& index) {
  Tensor s = src;
  for (int64_t i = 0; i < s.dim(); ++i)
    if (s.size(i) != index.size(i)) s = s.narrow(i, 0, index.size(i));
  return s;
}

ScatterReduce parse_reduce(const char* op, const std::string& reduce, bool& mean) {
  mean = reduce == "mean";
  if (reduce == "sum" || reduce == "add" || mean) return ScatterReduce::sum;
  if (reduce == "prod" || reduce == "multiply") return ScatterReduce::prod;
  if (reduce == "amax") return ScatterReduce::amax;
  if (reduce == "amin") return ScatterReduce::amin;
  EMBER_THROW(bad_param, op,
              ": reduce must be \"sum\", \"prod\", \"mean\", \"amax\" or \"amin\", got \"", reduce,
              "\"");
}

// A dense copy of self without history, the output of the out-of-place ops.
Tensor dense_copy(const Tensor& self) {
  autograd::NoGradGuard no_grad;
  return self.clone(MemoryFormat::contiguous);
}

void scatter_raw(const Tensor& out, int64_t d, const Tensor& index, const Tensor& src,
                 ScatterReduce reduce) {
  if (index.numel() == 0) return;
  scatter_reduce_kernel().get(out.device().type, out.dtype())(out, index, src, d, reduce);
}

Tensor filled_like_index(const Tensor& self, const Tensor& index, double value) {
  return full(index.sizes(), value, TensorOptions(self.dtype()).with_device(self.device()));
}

// The identity of a reduction in self's dtype (what include_self = false starts from).
double reduce_identity(ScatterReduce r, DType dtype) {
  const bool floating = is_floating(dtype);
  switch (r) {
    case ScatterReduce::prod:
      return 1;
    case ScatterReduce::amax:
      return floating ? -std::numeric_limits<double>::infinity()
                      : (dtype == DType::i32 ? double(std::numeric_limits<int32_t>::lowest())
                                             : double(std::numeric_limits<int64_t>::lowest()));
    case ScatterReduce::amin:
      return floating ? std::numeric_limits<double>::infinity()
                      : (dtype == DType::i32 ? double(std::numeric_limits<int32_t>::max())
                                             : double(std::numeric_limits<int64_t>::max()));
    default:
      return 0;
  }
}

Tensor ones_at_index(const Tensor& self, int64_t d, const Tensor& index) {
  Tensor out = zeros(self.sizes(), TensorOptions(self.dtype()).with_device(self.device()));
  scatter_raw(out, d, index, filled_like_index(self, index, 1), ScatterReduce::sum);
  return out;
}

}  // namespace

Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src0) {
  const int64_t d = check_scatter_args("scatter", self, dim, index, &src0);
  Tensor src = src_over_index(src0, index);
  Tensor out = dense_copy(self);
  scatter_raw(out, d, index, src, ScatterReduce::assign);
  if (autograd::needs_grad({&self, &src})) {
    autograd::record_backward("scatter", {self, src}, {&out},
                              [index, d](const Grads& g, const auto& node) {
                                Grads r(2);
                                if (node.needs_input_grad(0)) r[0] = scatter(g[0], d, index, 0.0);
                                if (node.needs_input_grad(1)) r[1] = gather(g[0], d, index);
                                return r;
                              });
  }
  return out;
}

Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, double value) {
  const int64_t d = check_scatter_args("scatter", self, dim, index, nullptr);
  Tensor out = dense_copy(self);
  scatter_raw(out, d, index, filled_like_index(self, index, value), ScatterReduce::assign);
  if (autograd::needs_grad({&self})) {
    autograd::record_backward("scatter", {self}, {&out}, [index, d](const Grads& g, const auto&) {
      return Grads{scatter(g[0], d, index, 0.0)};
    });
  }
  return out;
}

Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
               const std::string& reduce) {
  EMBER_CHECK(reduce == "add" || reduce == "multiply",
              "scatter: reduce must be \"add\" or \"multiply\", got \"", reduce,
              "\"; scatter_reduce takes \"sum\", \"prod\", \"mean\", \"amax\" and \"amin\"");
  return scatter_reduce(self, dim, index, src, reduce == "add" ? "sum" : "prod", true);
}

Tensor scatter_reduce(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src0,
                      const std::string& reduce_name, bool include_self) {
  const int64_t d = check_scatter_args("scatter_reduce", self, dim, index, &src0);
  bool mean = false;
  const ScatterReduce reduce = parse_reduce("scatter_reduce", reduce_name, mean);
  EMBER_CHECK(!mean || is_floating(self.dtype()),
              "scatter_reduce: reduce \"mean\" needs a floating dtype, got ",
              dtype_name(self.dtype()));
  Tensor src = src_over_index(src0, index);
  Tensor out = dense_copy(self);
  Tensor count;  // mean: how many values each position averages (at least 1)
  {
    autograd::NoGradGuard no_grad;
    if (!include_self)
      scatter_raw(out, d, index,
                  filled_like_index(self, index, reduce_identity(reduce, out.dtype())),
                  ScatterReduce::assign);
    scatter_raw(out, d, index, src, reduce);
    if (mean) {
      count = ones_at_index(self, d, index);
      if (include_self) count = count + 1.0;
      count = clamp(count, 1.0, std::nullopt);
      out = div(out, count);
    }
  }
  if (autograd::needs_grad({&self, &src})) {
    EMBER_CHECK(is_floating(self.dtype()), "scatter_reduce: gradients need a floating dtype");
    // Saved with their history, so that a create_graph backward differentiates the formulas
    // below through self, src and out too (the prod gradient depends on all three).
    const autograd::SavedTensor saved_self(self, "scatter_reduce"),
        saved_src(src, "scatter_reduce"), saved_out(out, "scatter_reduce");
    autograd::record_backward(
        "scatter_reduce", {self, src}, {&out},
        [index, d, reduce, mean, include_self, count, saved_self, saved_src, saved_out](
            const Grads& g, const auto& node) {
          const Tensor self_saved = saved_self.unpack(), src_saved = saved_src.unpack(),
                       out_saved = saved_out.unpack();
          // Positions that receive at least one value (where include_self = false drops self).
          auto scattered = [&] {
            return gt(
                ones_at_index(self_saved, d, index),
                zeros({}, TensorOptions(self_saved.dtype()).with_device(self_saved.device())));
          };
          Tensor gs = g[0], gsrc_full = g[0];
          if (reduce == ScatterReduce::sum) {
            if (mean) gs = gsrc_full = div(g[0], count);
            if (!include_self) gs = masked_fill(gs, scattered(), 0.0);
          } else if (reduce == ScatterReduce::prod) {
            // d(prod)/dx = prod / x: exact while no factor is zero.
            Tensor gp = mul(g[0], out_saved);
            gs = include_self ? div(gp, self_saved) : masked_fill(g[0], scattered(), 0.0);
            Grads r(2);
            if (node.needs_input_grad(0)) r[0] = gs;
            if (node.needs_input_grad(1)) r[1] = div(gather(gp, d, index), src_saved);
            return r;
          } else {
            // amax / amin: the gradient is shared evenly by the values equal to the result.
            const DType dt = self_saved.dtype();
            Tensor hits_src = eq(src_saved, gather(out_saved, d, index)).to(dt);
            Tensor hits_self = eq(self_saved, out_saved).to(dt);
            if (!include_self) hits_self = masked_fill(hits_self, scattered(), 0.0);
            Tensor n = scatter_add(hits_self, d, index, hits_src);
            Tensor share = div(g[0], clamp(n, 1.0, std::nullopt));
            Grads r(2);
            if (node.needs_input_grad(0)) r[0] = mul(share, hits_self);
            if (node.needs_input_grad(1)) r[1] = mul(gather(share, d, index), hits_src);
            return r;
          }
          Grads r(2);
          if (node.needs_input_grad(0)) r[0] = gs;
          if (node.needs_input_grad(1)) r[1] = gather(gsrc_full, d, index);
          return r;
        });
  }
  return out;
}

// ---- index_add / index_copy / index_fill --------------------------------------------------------

namespace {
// Checks an index-family call and returns the wrapped dim; `source` may be null (index_fill).
int64_t check_index_family(const char* op, const Tensor& self, int64_t dim, const Tensor& index,
                           const Tensor* source) {
  check_defined(op, self, "self");
  check_index_tensor(op, self, index);
  EMBER_CHECK(index.dim() <= 1, op, ": index must be 0-D or 1-D, got ", index.shape_str());
  const int64_t d = wrap_dim(dim, std::max<int64_t>(self.dim(), 1), op);
  if (source) {
    check_same_dtype(op, self, *source, "source");
    check_same_device(op, self, *source, "source");
    Shape want = self.sizes();
    if (!want.empty()) want[size_t(d)] = index.numel();
    EMBER_CHECK(source->sizes() == want || (self.dim() == 0 && source->numel() == index.numel()),
                op, ": source must have shape ", shape_str(want), " (self ", self.shape_str(),
                " with index.numel() = ", index.numel(), " along dim ", d, "), got ",
                source->shape_str());
  }
  return d;
}

Tensor as_i64(const Tensor& index) {
  autograd::NoGradGuard no_grad;
  Tensor i = index.reshape({-1});
  return (i.dtype() == DType::i64 ? i : i.to(DType::i64)).contiguous();
}

void index_add_raw(const Tensor& out, int64_t d, const Tensor& index, const Tensor& src) {
  int64_t outer, size, inner;
  split_dims(out.sizes(), d, outer, size, inner);
  if (src.numel() > 0)
    index_add_kernel().get(out.device().type, out.dtype())(out, index, src, outer, size, inner);
}

// alpha * source, dense, in source's dtype (an integer tensor stays integer, as index_add_ keeps
// self's dtype).
Tensor scaled_source(const Tensor& source, double alpha) {
  autograd::NoGradGuard no_grad;
  if (alpha == 1) return source.contiguous();
  Tensor scaled = mul(source, alpha);
  return (scaled.dtype() == source.dtype() ? scaled : scaled.to(source.dtype())).contiguous();
}

void index_copy_raw(const Tensor& out, int64_t d, const Tensor& index, const Tensor& src) {
  int64_t outer, size, inner;
  split_dims(out.sizes(), d, outer, size, inner);
  if (src.numel() > 0)
    index_copy_kernel().get(out.device().type, out.dtype())(out, index, src, outer, size, inner);
}
}  // namespace

Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index0, const Tensor& source,
                 double alpha) {
  const int64_t d = check_index_family("index_add", self, dim, index0, &source);
  Tensor index = index0.reshape({-1}).contiguous();
  Tensor out = dense_copy(self);
  {
    autograd::NoGradGuard no_grad;
    index_add_raw(out, d, index, scaled_source(source, alpha));
  }
  if (autograd::needs_grad({&self, &source})) {
    autograd::record_backward("index_add", {self, source}, {&out},
                              [index, d, alpha](const Grads& g, const auto& node) {
                                Grads r(2);
                                if (node.needs_input_grad(0)) r[0] = g[0];
                                if (node.needs_input_grad(1)) {
                                  r[1] = index_select(g[0], d, index);
                                  if (alpha != 1) r[1] = mul(r[1], alpha);
                                }
                                return r;
                              });
  }
  return out;
}

Tensor index_copy(const Tensor& self, int64_t dim, const Tensor& index0, const Tensor& source) {
  const int64_t d = check_index_family("index_copy", self, dim, index0, &source);
  Tensor index = as_i64(index0);
  Tensor out = dense_copy(self);
  {
    autograd::NoGradGuard no_grad;
    index_copy_raw(out, d, index, source.contiguous());
  }
  if (autograd::needs_grad({&self, &source})) {
    autograd::record_backward("index_copy", {self, source}, {&out},
                              [index, d](const Grads& g, const auto& node) {
                                Grads r(2);
                                if (node.needs_input_grad(0))
                                  r[0] = index_fill(g[0], d, index, 0.0);
                                if (node.needs_input_grad(1)) r[1] = index_select(g[0], d, index);
                                return r;
                              });
  }
  return out;
}

Tensor index_fill(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& value) {
  const int64_t d = check_index_family("index_fill", self, dim, index, nullptr);
  check_defined("index_fill", value, "value");
  EMBER_CHECK(value.dim() == 0, "index_fill: value must be a number or a 0-dim tensor, got shape ",
              value.shape_str());
  check_same_device("index_fill", self, value, "value");
  Shape src_shape = self.sizes();
  if (!src_shape.empty()) src_shape[size_t(d)] = index.numel();
  Tensor v = value.dtype() == self.dtype() ? value : value.to(self.dtype());
  return index_copy(self, d, index, v.expand(src_shape));
}

Tensor index_fill(const Tensor& self, int64_t dim, const Tensor& index, double value) {
  check_defined("index_fill", self, "self");
  return index_fill(self, dim, index,
                    scalar_tensor(value, TensorOptions(self.dtype()).with_device(self.device())));
}

Tensor take_along_dim(const Tensor& self, const Tensor& indices, std::optional<int64_t> dim) {
  check_defined("take_along_dim", self, "self");
  check_index_tensor("take_along_dim", self, indices);
  if (!dim) return gather(self.reshape({-1}), 0, indices.reshape({-1}));
  EMBER_CHECK(self.dim() == indices.dim(), "take_along_dim: self ", self.shape_str(),
              " and indices ", indices.shape_str(), " must have the same number of dims");
  const int64_t d = wrap_dim(*dim, std::max<int64_t>(self.dim(), 1), "take_along_dim");
  if (self.dim() == 0) return gather(self, 0, indices);
  Shape self_sizes = self.sizes();
  self_sizes[size_t(d)] = indices.size(d);
  const Shape b = broadcast_shapes("take_along_dim", {self_sizes, indices.sizes()});
  Shape self_b = b;
  self_b[size_t(d)] = self.size(d);
  return gather(self.expand(self_b), d, indices.expand(b));
}

// ---- in place ----------------------------------------------------------------------------------

namespace {
// The in-place form of an op: out of place (with history) when autograd needs it, else the
// kernel writes into self (or a dense copy written back).
template <typename OutOfPlace, typename Raw>
Tensor& inplace(const char* op, Tensor& self, std::initializer_list<const Tensor*> others,
                OutOfPlace out_of_place, Raw raw) {
  check_inplace(op, self);
  std::vector<const Tensor*> all = {&self};
  all.insert(all.end(), others.begin(), others.end());
  bool grad = false;
  for (const Tensor* t : all) grad = grad || autograd::needs_grad({t});
  if (grad) return assign_inplace(self, out_of_place(self.clone()));
  write_dense(self, raw);
  return self;
}
}  // namespace

Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t d = check_scatter_args("scatter_", self, dim, index, &src);
  return inplace(
      "scatter_", self, {&src}, [&](const Tensor& s) { return scatter(s, d, index, src); },
      [&](const Tensor& out) {
        scatter_raw(out, d, index, src_over_index(src, index), ScatterReduce::assign);
      });
}

Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, double value) {
  const int64_t d = check_scatter_args("scatter_", self, dim, index, nullptr);
  return inplace(
      "scatter_", self, {}, [&](const Tensor& s) { return scatter(s, d, index, value); },
      [&](const Tensor& out) {
        scatter_raw(out, d, index, filled_like_index(self, index, value), ScatterReduce::assign);
      });
}

Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                 const std::string& reduce) {
  return assign_inplace(self, scatter(self.clone(), dim, index, src, reduce));
}

Tensor& scatter_reduce_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                        const std::string& reduce, bool include_self) {
  check_inplace("scatter_reduce_", self);
  return assign_inplace(self, scatter_reduce(self.clone(), dim, index, src, reduce, include_self));
}

Tensor& index_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                   double alpha) {
  const int64_t d = check_index_family("index_add_", self, dim, index, &source);
  return inplace(
      "index_add_", self, {&source},
      [&](const Tensor& s) { return index_add(s, d, index, source, alpha); },
      [&](const Tensor& out) {
        index_add_raw(out, d, index.reshape({-1}).contiguous(), scaled_source(source, alpha));
      });
}

Tensor& index_copy_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& source) {
  const int64_t d = check_index_family("index_copy_", self, dim, index, &source);
  return inplace(
      "index_copy_", self, {&source},
      [&](const Tensor& s) { return index_copy(s, d, index, source); },
      [&](const Tensor& out) { index_copy_raw(out, d, as_i64(index), source.contiguous()); });
}

Tensor& index_fill_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& value) {
  check_inplace("index_fill_", self);
  return assign_inplace(
      self,
      index_fill(autograd::needs_grad({&self, &value}) ? self.clone() : self, dim, index, value));
}

Tensor& index_fill_(Tensor& self, int64_t dim, const Tensor& index, double value) {
  check_defined("index_fill_", self, "self");
  return index_fill_(self, dim, index,
                     scalar_tensor(value, TensorOptions(self.dtype()).with_device(self.device())));
}

}  // namespace ember
