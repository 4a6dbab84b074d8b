// sort, argsort, topk, kthvalue, median and nanmedian: argument checks, moving the sorted dim last
// for sort_kernel (kernel_interface/sort.h), and order statistics picked from the sorted rows.
// Values that need a gradient are re-read with gather at the chosen indices, so their backward is
// gather's (the incoming gradient scattered back to those positions).
#include <algorithm>

#include "ember/autograd/graph/graph.h"
#include "ember/kernel_interface/sort.h"
#include "ember/ops/ops.h"

namespace ember {

namespace {

TensorOptions options_on(const Tensor& a, DType d) {
  return TensorOptions(d).with_device(a.device());
}

int64_t sort_dim(const char* op, const Tensor& a, int64_t dim) {
  EMBER_CHECK(a.defined(), op, ": the input is an undefined tensor");
  if (a.dim() == 0) {
    EMBER_CHECK(dim == 0 || dim == -1, op, ": dim ", dim,
                " is out of range for a 0-dim input; use dim 0 or -1");
    return 0;
  }
  return wrap_dim(dim, a.dim(), op);
}

// (values, indices) of `a` sorted along `d` (stable), without autograd. A 0-dim input is one row
// of one element.
std::tuple<Tensor, Tensor> sort_raw(const Tensor& a0, int64_t d, bool descending) {
  autograd::NoGradGuard ng;
  Tensor a = a0.detach();
  if (a.dim() == 0) return {a.clone(), zeros({}, options_on(a, DType::i64))};
  Shape perm, inverse(size_t(a.dim()));
  for (int64_t i = 0; i < a.dim(); ++i)
    if (i != d) perm.push_back(i);
  perm.push_back(d);
  for (size_t i = 0; i < perm.size(); ++i) inverse[size_t(perm[i])] = int64_t(i);
  Tensor in = a.permute(perm).contiguous();
  if (in.dtype() == DType::boolean) in = in.to(DType::u8);
  Tensor values = empty(in.sizes(), options_on(a, in.dtype()));
  Tensor indices = empty(in.sizes(), options_on(a, DType::i64));
  const int64_t len = a.size(d);
  if (in.numel() > 0)
    sort_kernel().get(a.device().type, in.dtype())(values, indices, in, in.numel() / len, len,
                                                   descending);
  if (values.dtype() != a.dtype()) values = values.to(a.dtype());
  return {values.permute(inverse), indices.permute(inverse)};
}

// `raw_values` (already `a` at `indices` along d), or gather's differentiable read when `a`
// needs a gradient.
Tensor values_at(const Tensor& a, int64_t d, const Tensor& indices, const Tensor& raw_values) {
  if (!autograd::needs_grad({&a})) return raw_values;
  if (a.dim() == 0) return a.clone();
  return gather(a, d, indices);
}

void check_nonempty_dim(const char* op, const Tensor& a, int64_t d) {
  EMBER_CHECK(a.dim() == 0 || a.size(d) > 0, op, ": dim ", d, " of the input of shape ",
              a.shape_str(), " is empty; there is no value to pick");
}

// The order statistic at position `pos` (int64, keepdim-shaped) of each row along d.
std::tuple<Tensor, Tensor> pick(const Tensor& a, int64_t d, const Tensor& sorted_values,
                                const Tensor& sorted_indices, const Tensor& pos, bool keepdim) {
  Tensor idx, raw;
  if (a.dim() == 0) {
    idx = sorted_indices;
    raw = sorted_values;
  } else {
    autograd::NoGradGuard ng;
    idx = gather(sorted_indices, d, pos);
    raw = gather(sorted_values, d, pos);
  }
  Tensor values = values_at(a, d, idx, raw);
  if (!keepdim && a.dim() > 0) return {values.squeeze(d), idx.squeeze(d)};
  return {values, idx};
}

Shape keepdim_shape(const Tensor& a, int64_t d) {
  Shape s = a.sizes();
  if (!s.empty()) s[size_t(d)] = 1;
  return s;
}

std::tuple<Tensor, Tensor> median_dim(const char* op, const Tensor& a, int64_t dim, bool keepdim,
                                      bool ignore_nan) {
  const int64_t d = sort_dim(op, a, dim);
  check_nonempty_dim(op, a, d);
  auto [sv, si] = sort_raw(a, d, false);
  Tensor pos;
  {
    autograd::NoGradGuard ng;
    const int64_t n = a.dim() == 0 ? 1 : a.size(d);
    const Shape ks = keepdim_shape(a, d);
    Tensor nan_count = zeros(ks, options_on(a, DType::f64));
    if (is_floating(a.dtype()) && a.dim() > 0)
      nan_count = sum(isnan(a.detach()), {d}, true).to(DType::f64);
    Tensor zero = zeros({}, options_on(a, DType::f64));
    if (ignore_nan) {
      // The lower median of the numbers; position 0 (a NaN) for all-NaN rows.
      Tensor count = rsub(nan_count, double(n));
      pos = clamp(mul(sub(count, 1.0), 0.5), 0.0, std::nullopt);
    } else {
      // A row with a NaN gives its first NaN (NaN sorts last).
      pos = where(gt(nan_count, zero), rsub(nan_count, double(n)),
                  full({}, double((n - 1) / 2), options_on(a, DType::f64)));
    }
    pos = pos.to(DType::i64);  // truncation: the positions are >= 0
  }
  return pick(a, d, sv, si, pos, keepdim);
}

}  // namespace

std::tuple<Tensor, Tensor> sort(const Tensor& a, int64_t dim, bool descending) {
  const int64_t d = sort_dim("sort", a, dim);
  auto [values, indices] = sort_raw(a, d, descending);
  return {values_at(a, d, indices, values), indices};
}

Tensor argsort(const Tensor& a, int64_t dim, bool descending) {
  return std::get<1>(sort_raw(a, sort_dim("argsort", a, dim), descending));
}

std::tuple<Tensor, Tensor> topk(const Tensor& a, int64_t k, int64_t dim, bool largest, bool) {
  const int64_t d = sort_dim("topk", a, dim);
  const int64_t n = a.dim() == 0 ? 1 : a.size(d);
  EMBER_CHECK(k >= 0 && k <= n, "topk: k = ", k, " is out of range for dim ", d, " of size ", n,
              " (input shape ", a.shape_str(), "); use 0 <= k <= ", n);
  auto [sv, si] = sort_raw(a, d, largest);
  if (a.dim() > 0) {
    sv = sv.narrow(d, 0, k);
    si = si.narrow(d, 0, k);
  }
  return {values_at(a, d, si, sv), si};
}

std::tuple<Tensor, Tensor> kthvalue(const Tensor& a, int64_t k, int64_t dim, bool keepdim) {
  const int64_t d = sort_dim("kthvalue", a, dim);
  const int64_t n = a.dim() == 0 ? 1 : a.size(d);
  EMBER_CHECK(k >= 1 && k <= n, "kthvalue: k = ", k, " is out of range for dim ", d, " of size ", n,
              " (input shape ", a.shape_str(), "); use 1 <= k <= ", n);
  auto [sv, si] = sort_raw(a, d, false);
  Tensor pos = full(keepdim_shape(a, d), double(k - 1), options_on(a, DType::i64));
  return pick(a, d, sv, si, pos, keepdim);
}

std::tuple<Tensor, Tensor> median(const Tensor& a, int64_t dim, bool keepdim) {
  return median_dim("median", a, dim, keepdim, false);
}
std::tuple<Tensor, Tensor> nanmedian(const Tensor& a, int64_t dim, bool keepdim) {
  return median_dim("nanmedian", a, dim, keepdim, true);
}
Tensor median(const Tensor& a) {
  EMBER_CHECK(a.defined() && a.numel() > 0, "median: the input of shape ",
              a.defined() ? a.shape_str() : "(undefined)", " has no elements");
  return std::get<0>(median_dim("median", a.reshape({-1}), 0, false, false));
}
Tensor nanmedian(const Tensor& a) {
  EMBER_CHECK(a.defined() && a.numel() > 0, "nanmedian: the input of shape ",
              a.defined() ? a.shape_str() : "(undefined)", " has no elements");
  return std::get<0>(median_dim("nanmedian", a.reshape({-1}), 0, false, true));
}

// ---- Tensor methods ----
std::tuple<Tensor, Tensor> Tensor::sort(int64_t dim, bool descending) const {
  return ::ember::sort(*this, dim, descending);
}
Tensor Tensor::argsort(int64_t dim, bool descending) const {
  return ::ember::argsort(*this, dim, descending);
}
std::tuple<Tensor, Tensor> Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return ::ember::topk(*this, k, dim, largest, sorted);
}
std::tuple<Tensor, Tensor> Tensor::kthvalue(int64_t k, int64_t dim, bool keepdim) const {
  return ::ember::kthvalue(*this, k, dim, keepdim);
}
Tensor Tensor::median() const { return ::ember::median(*this); }
std::tuple<Tensor, Tensor> Tensor::median(int64_t dim, bool keepdim) const {
  return ::ember::median(*this, dim, keepdim);
}
Tensor Tensor::nanmedian() const { return ::ember::nanmedian(*this); }
std::tuple<Tensor, Tensor> Tensor::nanmedian(int64_t dim, bool keepdim) const {
  return ::ember::nanmedian(*this, dim, keepdim);
}

}  // namespace ember
