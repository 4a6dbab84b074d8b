// Reductions over dims (sum, mean, prod, amax/amin, max/min with indices, argmax/argmin, var,
// std, logsumexp) with keepdim, fp32-or-better accumulation, and their backward formulas.
#include <algorithm>
#include <cmath>

#include "ember/autograd/graph/graph.h"
#include "ember/kernel_interface/reduce.h"
#include "ember/ops/ops.h"

namespace ember {

using autograd::SavedTensor;
using Grads = std::vector<Tensor>;

namespace {

struct ReducePlan {
  std::vector<bool> reduced;  // per input dim
  Shape out_keepdim;          // output shape with reduced dims kept as 1
  Shape out_shape;            // output shape as returned
  int64_t count = 1;          // elements reduced into each output
};

ReducePlan plan_reduce(const char* op, const Tensor& a, const Shape& dims, bool keepdim) {
  EMBER_CHECK(a.defined(), op, ": the input is an undefined tensor");
  ReducePlan p;
  const int64_t nd = a.dim();
  p.reduced.assign(size_t(nd), dims.empty());
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, nd, op);
    if (nd > 0) {
      EMBER_CHECK(!p.reduced[size_t(w)], op, ": dim ", w, " appears more than once in ",
                  shape_str(dims));
      p.reduced[size_t(w)] = true;
    }
  }
  for (int64_t d = 0; d < nd; ++d) {
    if (p.reduced[size_t(d)]) {
      p.count *= a.size(d);
      p.out_keepdim.push_back(1);
      if (keepdim) p.out_shape.push_back(1);
    } else {
      p.out_keepdim.push_back(a.size(d));
      p.out_shape.push_back(a.size(d));
    }
  }
  return p;
}

// Runs the reduce kernel. The input is viewed as [outer, reduce, inner] without a copy when the
// reduced dims are one consecutive block of a contiguous tensor; otherwise it is permuted (kept
// dims first) into a dense copy.
void run_reduce(const Tensor& a, const ReducePlan& p, ReduceOp op, const Tensor& out,
                const Tensor* indices, int64_t correction) {
  const int64_t nd = a.dim();
  Tensor in = a;
  ReduceShape rs;
  int64_t first = -1, last = -1;
  for (int64_t d = 0; d < nd; ++d)
    if (p.reduced[size_t(d)] && a.size(d) != 1) {
      if (first < 0) first = d;
      last = d;
    }
  bool block = a.is_contiguous();
  for (int64_t d = first; block && first >= 0 && d <= last; ++d)
    if (!p.reduced[size_t(d)] && a.size(d) != 1) block = false;
  if (first < 0) {
    rs = {1, 1, a.numel()};
    if (!a.is_contiguous()) in = a.contiguous();
  } else if (block) {
    for (int64_t d = 0; d < first; ++d) rs.outer *= a.size(d);
    for (int64_t d = first; d <= last; ++d) rs.reduce *= a.size(d);
    for (int64_t d = last + 1; d < nd; ++d) rs.inner *= a.size(d);
  } else {
    Shape perm;
    for (int64_t d = 0; d < nd; ++d)
      if (!p.reduced[size_t(d)]) perm.push_back(d);
    for (int64_t d = 0; d < nd; ++d)
      if (p.reduced[size_t(d)]) perm.push_back(d);
    in = a.permute(perm).contiguous();
    rs = {a.numel() / std::max<int64_t>(p.count, 1), p.count, 1};
    if (p.count == 0) rs = {shape_numel(p.out_keepdim), 0, 1};
  }
  reduce_kernel().get(a.device().type, a.dtype())(out, indices, in, rs, op, correction);
}

Tensor reduce_out(const char* op, const Tensor& a0, const Shape& dims, bool keepdim, ReduceOp rop,
                  int64_t correction, ReducePlan* plan_out = nullptr) {
  Tensor a = a0;
  if ((rop == ReduceOp::sum || rop == ReduceOp::prod) && !is_floating(a.dtype()) &&
      a.dtype() != DType::i64) {
    autograd::NoGradGuard ng;
    a = a.to(DType::i64);  // integer sums accumulate in int64, as PyTorch does
  }
  if (rop == ReduceOp::mean || rop == ReduceOp::var)
    EMBER_CHECK(is_floating(a.dtype()), op, ": needs a floating-point input, got ",
                dtype_name(a.dtype()), "; convert with .to(DType::f32)");
  ReducePlan p = plan_reduce(op, a, dims, keepdim);
  DType out_dtype = (rop == ReduceOp::argmax || rop == ReduceOp::argmin) ? DType::i64 : a.dtype();
  Tensor out = empty(p.out_keepdim, out_dtype, a.device());
  {
    autograd::NoGradGuard ng;
    run_reduce(a, p, rop, out, nullptr, correction);
  }
  if (plan_out) *plan_out = p;
  return keepdim ? out : out.view(p.out_shape);
}

}  // namespace

Tensor sum(const Tensor& a, const Shape& dims, bool keepdim) {
  ReducePlan p;
  Tensor out = reduce_out("sum", a, dims, keepdim, ReduceOp::sum, 0, &p);
  if (autograd::needs_grad({&a})) {
    autograd::record_backward("sum", {a}, {&out},
                              [p, in = a.sizes(), dt = a.dtype()](const Grads& g, const auto&) {
                                Tensor r = g[0].reshape(p.out_keepdim).expand(in);
                                return Grads{r.dtype() == dt ? r : r.to(dt)};
                              });
  }
  return out;
}

Tensor mean(const Tensor& a, const Shape& dims, bool keepdim) {
  ReducePlan p;
  Tensor out = reduce_out("mean", a, dims, keepdim, ReduceOp::mean, 0, &p);
  if (autograd::needs_grad({&a})) {
    autograd::record_backward(
        "mean", {a}, {&out}, [p, in = a.sizes()](const Grads& g, const auto&) {
          return Grads{div(g[0].reshape(p.out_keepdim), double(p.count)).expand(in)};
        });
  }
  return out;
}

Tensor prod(const Tensor& a, const Shape& dims, bool keepdim) {
  ReducePlan p;
  Tensor out = reduce_out("prod", a, dims, keepdim, ReduceOp::prod, 0, &p);
  if (autograd::needs_grad({&a})) {
    SavedTensor sa(a, "prod"), so(out, "prod");
    autograd::record_backward("prod", {a}, {&out}, [p, sa, so](const Grads& g, const auto&) {
      // d prod / d x_i = prod / x_i (inputs with zeros are not special-cased).
      const Tensor& x = sa.unpack();
      return Grads{div(mul(g[0].reshape(p.out_keepdim), so.unpack().reshape(p.out_keepdim)), x)};
    });
  }
  return out;
}

namespace {
Tensor amax_amin(const char* op, const Tensor& a, const Shape& dims, bool keepdim, bool is_max) {
  ReducePlan p;
  Tensor out = reduce_out(op, a, dims, keepdim, is_max ? ReduceOp::max : ReduceOp::min, 0, &p);
  if (autograd::needs_grad({&a})) {
    SavedTensor sa(a, op), so(out, op);
    autograd::record_backward(op, {a}, {&out}, [p, sa, so](const Grads& g, const auto&) {
      // The gradient is shared evenly among the elements equal to the extremum (as PyTorch).
      const Tensor& x = sa.unpack();
      Tensor mask = eq(x, so.unpack().reshape(p.out_keepdim)).to(x.dtype());
      Tensor count = sum(
          mask,
          [&] {
            Shape d;
            for (size_t i = 0; i < p.reduced.size(); ++i)
              if (p.reduced[i]) d.push_back(int64_t(i));
            return d;
          }(),
          true);
      return Grads{mul(div(g[0].reshape(p.out_keepdim), count), mask)};
    });
  }
  return out;
}
}  // namespace

Tensor amax(const Tensor& a, const Shape& dims, bool keepdim) {
  return amax_amin("amax", a, dims, keepdim, true);
}
Tensor amin(const Tensor& a, const Shape& dims, bool keepdim) {
  return amax_amin("amin", a, dims, keepdim, false);
}
Tensor max(const Tensor& a) { return amax(a); }
Tensor min(const Tensor& a) { return amin(a); }

namespace {
ValuesIndices max_min_dim(const char* op, const Tensor& a, int64_t dim, bool keepdim, bool is_max) {
  EMBER_CHECK(a.defined(), op, ": the input is an undefined tensor");
  int64_t d = wrap_dim(dim, a.dim(), op);
  ReducePlan p = plan_reduce(op, a, {d}, keepdim);
  Tensor values = empty(p.out_keepdim, a.dtype(), a.device());
  Tensor indices = empty(p.out_keepdim, DType::i64, a.device());
  run_reduce(a, p, is_max ? ReduceOp::max : ReduceOp::min, values, &indices, 0);
  if (autograd::needs_grad({&a})) {
    autograd::record_backward(op, {a}, {&values},
                              [idx = indices, d, in = a.sizes(), dt = a.dtype(), dev = a.device()](
                                  const Grads& g, const auto&) {
                                // The node is recorded on the keepdim-shaped values; squeezing is a
                                // view after it.
                                Tensor r = zeros(in, TensorOptions(dt).with_device(dev));
                                return Grads{scatter_add(r, d, idx, g[0])};
                              });
  }
  if (!keepdim) {
    values = values.squeeze(d);
    indices = indices.squeeze(d);
  }
  return {values, indices};
}
}  // namespace

ValuesIndices max(const Tensor& a, int64_t dim, bool keepdim) {
  return max_min_dim("max", a, dim, keepdim, true);
}
ValuesIndices min(const Tensor& a, int64_t dim, bool keepdim) {
  return max_min_dim("min", a, dim, keepdim, false);
}

Tensor argmax(const Tensor& a, std::optional<int64_t> dim, bool keepdim) {
  if (!dim) return reduce_out("argmax", a.reshape({-1}), {0}, false, ReduceOp::argmax, 0);
  return reduce_out("argmax", a, {*dim}, keepdim, ReduceOp::argmax, 0);
}
Tensor argmin(const Tensor& a, std::optional<int64_t> dim, bool keepdim) {
  if (!dim) return reduce_out("argmin", a.reshape({-1}), {0}, false, ReduceOp::argmin, 0);
  return reduce_out("argmin", a, {*dim}, keepdim, ReduceOp::argmin, 0);
}

Tensor var(const Tensor& a, const Shape& dims, int64_t correction, bool keepdim) {
  ReducePlan p;
  Tensor out = reduce_out("var", a, dims, keepdim, ReduceOp::var, correction, &p);
  if (autograd::needs_grad({&a})) {
    SavedTensor sa(a, "var");
    autograd::record_backward("var", {a}, {&out}, [p, sa, correction](const Grads& g, const auto&) {
      const Tensor& x = sa.unpack();
      Shape d;
      for (size_t i = 0; i < p.reduced.size(); ++i)
        if (p.reduced[i]) d.push_back(int64_t(i));
      Tensor centered = sub(x, mean(x, d, true));
      double scale = 2.0 / double(std::max<int64_t>(p.count - correction, 1));
      return Grads{mul(mul(centered, scale), g[0].reshape(p.out_keepdim))};
    });
  }
  return out;
}

Tensor std(const Tensor& a, const Shape& dims, int64_t correction, bool keepdim) {
  return sqrt(var(a, dims, correction, keepdim));
}

Tensor logsumexp(const Tensor& a, const Shape& dims, bool keepdim) {
  Tensor m;
  {
    autograd::NoGradGuard ng;
    m = amax(a, dims, true);
    m = where(isfinite(m), m, zeros_like(m));  // all -inf rows stay -inf below
  }
  Tensor r = add(log(sum(exp(sub(a, m)), dims, true)), m);
  if (!keepdim) {
    ReducePlan p = plan_reduce("logsumexp", a, dims, false);
    r = r.reshape(p.out_shape);
  }
  return r;
}

Tensor log_softmax_reference(const Tensor& a, int64_t dim) {
  return sub(a, logsumexp(a, {dim}, true));
}

}  // namespace ember
