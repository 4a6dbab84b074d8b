// The reductions and scans of ops/reduction_more.h on the CPU, against hand-computed values: any /
// all / count_nonzero (NaN counts as nonzero, empty dims), aminmax, var_mean / std_mean, norms of
// every ord, cumsum / cumprod (dtype promotion), cummax / cummin (ties, NaN), keepdim, 0-dim and
// empty inputs, gradients at the special points, and the errors bad input raises.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "ember/ember.h"
#include "support/errors.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
using V = std::vector<double>;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();
Tensor t(V v, Shape s, DType d = DType::f32) { return from_vector(v, s, TensorOptions(d)); }

bool close(const V& a, const V& b, double tol = 1e-5) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      if (std::isnan(a[i]) != std::isnan(b[i])) return false;
      continue;
    }
    if (std::abs(a[i] - b[i]) > tol * std::max(1.0, std::abs(b[i]))) return false;
  }
  return true;
}
}  // namespace

TEST_CASE("any, all, count_nonzero: dims, keepdim, NaN and empty dims") {
  Tensor x = t({0, 1, 0, 0, 0, 0, 2, 3, kNaN}, {3, 3});
  CHECK(any(x).dtype() == DType::boolean);
  CHECK(any(x).item() == 1);
  CHECK(all(x).item() == 0);
  CHECK(any(x, 1).to_vector() == V{1, 0, 1});
  CHECK(all(x, 1).to_vector() == V{0, 0, 1});  // NaN is nonzero
  CHECK(all(x, 0, true).sizes() == Shape{1, 3});
  CHECK(any(x, -2, true).to_vector() == V{1, 1, 1});
  CHECK(x.any(1).to_vector() == V{1, 0, 1});
  CHECK(x.all().item() == 0);
  CHECK(count_nonzero(x).item() == 4);
  CHECK(count_nonzero(x).dtype() == DType::i64);
  CHECK(count_nonzero(x, {0}).to_vector() == V{1, 2, 1});
  CHECK(x.count_nonzero({0, 1}).item() == 4);
  // Integers and bools.
  Tensor b = t({1, 1, 0, 1}, {2, 2}, DType::boolean);
  CHECK(all(b, 1).to_vector() == V{1, 0});
  CHECK(any(t({0, 0, 5}, {3}, DType::i32)).item() == 1);
  // Empty dims: any is false, all is true.
  Tensor e = zeros({2, 0});
  CHECK(any(e, 1).to_vector() == V{0, 0});
  CHECK(all(e, 1).to_vector() == V{1, 1});
  CHECK(all(e).item() == 1);
  CHECK(count_nonzero(e).item() == 0);
  // 0-dim.
  CHECK(any(scalar_tensor(2)).item() == 1);
  CHECK(all(scalar_tensor(0), 0).item() == 0);
}

TEST_CASE("aminmax, var_mean and std_mean") {
  Tensor x = t({3, -1, 4, 1, -5, 9}, {2, 3});
  auto [mn, mx] = aminmax(x);
  CHECK(mn.item() == -5);
  CHECK(mx.item() == 9);
  auto [mn1, mx1] = x.aminmax(1, true);
  CHECK(mn1.sizes() == Shape{2, 1});
  CHECK(mn1.to_vector() == V{-1, -5});
  CHECK(mx1.to_vector() == V{4, 9});
  auto [mn0, mx0] = aminmax(x, 0);
  CHECK(mn0.to_vector() == V{1, -5, 4});
  CHECK(mx0.to_vector() == V{3, -1, 9});
  Tensor y = t({1, 2, 3, 4, 6, 8}, {2, 3}, DType::f64);
  auto [v, m] = var_mean(y, {1});
  CHECK(close(v.to_vector(), V{1, 4}));
  CHECK(close(m.to_vector(), V{2, 6}));
  auto [v0, m0] = var_mean(y, {}, 0, true);
  CHECK(v0.sizes() == Shape{1, 1});
  CHECK(close(m0.to_vector(), V{4}));
  CHECK(close(v0.to_vector(), V{(9 + 4 + 1 + 0 + 4 + 16) / 6.0}));
  auto [s, m2] = std_mean(y, {1});
  CHECK(close(s.to_vector(), V{1, 2}));
  CHECK(close(m2.to_vector(), V{2, 6}));
  CHECK(contains(error_of([] { aminmax(zeros({0})); }), "aminmax"));
  CHECK(contains(error_of([] { aminmax(zeros({2, 0}), 1); }), "[2, 0]"));
}

TEST_CASE("norm / linalg_vector_norm: every ord, dims, keepdim") {
  Tensor x = t({3, -4, 0, 1, -2, 2}, {2, 3}, DType::f64);
  CHECK(close(norm(x).to_vector(), V{std::sqrt(34.0)}));
  CHECK(close(x.norm(2, {1}).to_vector(), V{5, 3}));
  CHECK(close(linalg_vector_norm(x, 1, {1}).to_vector(), V{7, 5}));
  CHECK(close(linalg_vector_norm(x, kInf, {1}).to_vector(), V{4, 2}));
  CHECK(close(linalg_vector_norm(x, -kInf, {1}).to_vector(), V{0, 1}));
  CHECK(close(linalg_vector_norm(x, 0, {1}).to_vector(), V{2, 3}));
  CHECK(close(linalg_vector_norm(x, 3, {0}).to_vector(), V{std::cbrt(28.0), std::cbrt(72.0), 2}));
  CHECK(close(linalg_vector_norm(x, 0.5, {1}).to_vector(),
              V{std::pow(std::sqrt(3.0) + 2, 2), std::pow(1 + 2 * std::sqrt(2.0), 2)}));
  CHECK(linalg_vector_norm(x, 2, {0}, true).sizes() == Shape{1, 3});
  CHECK(linalg_vector_norm(x, 2, {-1, 0}).sizes() == Shape{});
  CHECK(close(norm(zeros({2, 0}), 2, {1}).to_vector(), V{0, 0}));
  // Gradients: the zero norm gives a zero gradient (not NaN), zero entries get zero for p = 1.
  Tensor z = zeros({3}, TensorOptions(DType::f64).with_requires_grad());
  norm(z).backward();
  CHECK(z.grad().to_vector() == V{0, 0, 0});
  Tensor w = t({3, 0, -4}, {3}, DType::f64);
  w.set_requires_grad(true);
  linalg_vector_norm(w, 1).backward();
  CHECK(w.grad().to_vector() == V{1, 0, -1});
  Tensor u = t({3, 0, -4}, {3}, DType::f64);
  u.set_requires_grad(true);
  norm(u).backward();
  CHECK(close(u.grad().to_vector(), V{0.6, 0, -0.8}));
  CHECK(contains(error_of([] { norm(t({1, 2}, {2}, DType::i64)); }), "linalg_vector_norm"));
  CHECK(contains(error_of([] { norm(zeros({2, 0}), kInf, {1}); }), "[2, 0]"));
  CHECK(contains(error_of([] { norm(zeros({2, 3}), 2, {2}); }), "linalg_vector_norm"));
}

TEST_CASE("cumsum and cumprod: dims, dtype promotion, 0-dim and empty") {
  Tensor x = t({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(cumsum(x, 1).to_vector() == V{1, 3, 6, 4, 9, 15});
  CHECK(cumsum(x, 0).to_vector() == V{1, 2, 3, 5, 7, 9});
  CHECK(x.cumsum(-1).to_vector() == V{1, 3, 6, 4, 9, 15});
  CHECK(cumprod(x, 1).to_vector() == V{1, 2, 6, 4, 20, 120});
  CHECK(x.cumprod(0).to_vector() == V{1, 2, 3, 4, 10, 18});
  // Non-contiguous input.
  CHECK(cumsum(x.transpose(0, 1), 1).to_vector() == V{1, 5, 2, 7, 3, 9});
  // Integer and bool inputs give int64; an explicit dtype wins.
  Tensor i = t({1, 2, 3}, {3}, DType::i32);
  CHECK(cumsum(i, 0).dtype() == DType::i64);
  CHECK(cumsum(t({1, 1, 0, 1}, {4}, DType::boolean), 0).to_vector() == V{1, 2, 2, 3});
  CHECK(cumprod(i, 0).to_vector() == V{1, 2, 6});
  CHECK(cumsum(i, 0, DType::f64).dtype() == DType::f64);
  CHECK(cumsum(x, 0, DType::f64).dtype() == DType::f64);
  CHECK(cumsum(x, 1).dtype() == DType::f32);
  // 0-dim and empty.
  CHECK(cumsum(scalar_tensor(4), 0).item() == 4);
  CHECK(cumsum(scalar_tensor(4), -1).sizes() == Shape{});
  CHECK(cumsum(zeros({0, 3}), 1).sizes() == Shape{0, 3});
  CHECK(cumprod(zeros({2, 0}), 1).sizes() == Shape{2, 0});
  // Gradients: cumsum's is the reverse cumulative sum.
  Tensor g = t({1, 2, 3}, {3}, DType::f64);
  g.set_requires_grad(true);
  mul(cumsum(g, 0), t({1, 10, 100}, {3}, DType::f64)).sum().backward();
  CHECK(g.grad().to_vector() == V{111, 110, 100});
  Tensor h = t({2, 3, 4}, {3}, DType::f64);
  h.set_requires_grad(true);
  cumprod(h, 0).sum().backward();  // 2 + 6 + 24: d/dh0 = 1 + 3 + 12
  CHECK(close(h.grad().to_vector(), V{16, 10, 6}));
  // With zeros: out = [2, 0, 0, 0, 0]; d/dx1 = x0 + x0 x2 = 8, nothing flows past the first zero.
  Tensor z = t({2, 0, 3, 0, 5}, {5}, DType::f64);
  z.set_requires_grad(true);
  cumprod(z, 0).sum().backward();
  CHECK(z.grad().to_vector() == V{1, 8, 0, 0, 0});
  CHECK(contains(error_of([] { cumsum(zeros({2, 3}), 2); }), "cumsum"));
  CHECK(contains(error_of([] { cumprod(scalar_tensor(1), 1); }), "cumprod"));
}

TEST_CASE("cummax and cummin: ties take the later index, NaN propagates") {
  Tensor x = t({1, 3, 2, 3, 0, 5}, {6});
  auto [v, i] = cummax(x, 0);
  CHECK(v.to_vector() == V{1, 3, 3, 3, 3, 5});
  CHECK(i.to_vector() == V{0, 1, 1, 3, 3, 5});
  CHECK(i.dtype() == DType::i64);
  auto [vn, in] = x.cummin(0);
  CHECK(vn.to_vector() == V{1, 1, 1, 1, 0, 0});
  CHECK(in.to_vector() == V{0, 0, 0, 0, 4, 4});
  Tensor n = t({1, kNaN, 5, kNaN, 0}, {5});
  auto [nv, ni] = cummax(n, 0);
  CHECK(close(nv.to_vector(), V{1, kNaN, kNaN, kNaN, kNaN}));
  CHECK(ni.to_vector() == V{0, 1, 1, 3, 3});
  auto [mv, mi] = cummin(n, 0);
  CHECK(close(mv.to_vector(), V{1, kNaN, kNaN, kNaN, kNaN}));
  CHECK(mi.to_vector() == V{0, 1, 1, 3, 3});
  Tensor y = t({4, 1, 2, 3, 6, 0}, {2, 3});
  auto [yv, yi] = cummin(y, 0);
  CHECK(yv.to_vector() == V{4, 1, 2, 3, 1, 0});
  CHECK(yi.to_vector() == V{0, 0, 0, 1, 0, 1});
  auto [bv, bi] = cummax(t({0, 1, 0}, {3}, DType::boolean), 0);
  CHECK(bv.to_vector() == V{0, 1, 1});
  CHECK(bi.to_vector() == V{0, 1, 1});
  // The gradient lands on the recorded positions.
  Tensor g = t({1, 3, 2}, {3}, DType::f64);
  g.set_requires_grad(true);
  std::get<0>(cummax(g, 0)).sum().backward();
  CHECK(g.grad().to_vector() == V{1, 2, 0});
  auto [ev, ei] = cummax(zeros({0}), 0);
  CHECK(ev.numel() == 0);
  CHECK(contains(error_of([] { cummax(zeros({2, 3}), -3); }), "cummax"));
}

TEST_CASE("sort and argsort: stable, descending, NaN last / first, dims") {
  Tensor x = t({3, 1, 2, 1, kNaN, 0}, {6});
  auto [v, i] = sort(x);
  CHECK(close(v.to_vector(), V{0, 1, 1, 2, 3, kNaN}));
  CHECK(i.to_vector() == V{5, 1, 3, 2, 0, 4});
  auto [dv, di] = x.sort(0, true);
  CHECK(close(dv.to_vector(), V{kNaN, 3, 2, 1, 1, 0}));
  CHECK(di.to_vector() == V{4, 0, 2, 1, 3, 5});  // equal keys keep their order descending too
  CHECK(argsort(x).to_vector() == V{5, 1, 3, 2, 0, 4});
  CHECK(x.argsort(-1, true).to_vector() == V{4, 0, 2, 1, 3, 5});
  // -0.0 equals 0.0.
  CHECK(argsort(t({0.0, -0.0, 0.0}, {3})).to_vector() == V{0, 1, 2});
  // Along dim 0 of a 2-D, on a non-contiguous view, on integers, bools, 0-dim and empty.
  Tensor m = t({5, 1, 2, 4, 3, 6}, {3, 2});
  auto [mv, mi] = sort(m, 0);
  CHECK(mv.to_vector() == V{2, 1, 3, 4, 5, 6});
  CHECK(mi.to_vector() == V{1, 0, 2, 1, 0, 2});
  auto [tv, ti] = sort(m.t(), 1, true);
  CHECK(tv.to_vector() == V{5, 3, 2, 6, 4, 1});
  CHECK(ti.to_vector() == V{0, 2, 1, 2, 1, 0});
  auto [iv, ii] = sort(t({7, -2, 9}, {3}, DType::i64));
  CHECK(iv.to_vector() == V{-2, 7, 9});
  CHECK(iv.dtype() == DType::i64);
  auto [bv, bi] = sort(t({1, 0, 1}, {3}, DType::boolean));
  CHECK(bv.dtype() == DType::boolean);
  CHECK(bv.to_vector() == V{0, 1, 1});
  CHECK(bi.to_vector() == V{1, 0, 2});
  CHECK(std::get<0>(sort(scalar_tensor(3))).item() == 3);
  CHECK(std::get<1>(sort(zeros({2, 0}), 1)).sizes() == Shape{2, 0});
  // The gradient goes back to where each value came from.
  Tensor g = t({3, 1, 2}, {3}, DType::f64);
  g.set_requires_grad(true);
  mul(std::get<0>(sort(g)), t({1, 10, 100}, {3}, DType::f64)).sum().backward();
  CHECK(g.grad().to_vector() == V{100, 1, 10});
  CHECK(contains(error_of([] { sort(zeros({2, 3}), 2); }), "sort"));
}

TEST_CASE("topk and kthvalue") {
  Tensor x = t({4, 9, 1, 9, 3, 7}, {2, 3});
  auto [v, i] = topk(x, 2);
  CHECK(v.to_vector() == V{9, 4, 9, 7});
  CHECK(i.to_vector() == V{1, 0, 0, 2});
  auto [sv, si] = x.topk(1, 0, false);
  CHECK(sv.to_vector() == V{4, 3, 1});
  CHECK(si.to_vector() == V{0, 1, 0});
  CHECK(std::get<0>(topk(x, 0)).sizes() == Shape{2, 0});
  auto [kv, ki] = kthvalue(x, 2);
  CHECK(kv.to_vector() == V{4, 7});
  CHECK(ki.to_vector() == V{0, 2});
  auto [kv0, ki0] = x.kthvalue(1, 0, true);
  CHECK(kv0.sizes() == Shape{1, 3});
  CHECK(kv0.to_vector() == V{4, 3, 1});
  CHECK(ki0.to_vector() == V{0, 1, 0});
  Tensor g = t({2, 8, 5}, {3}, DType::f64);
  g.set_requires_grad(true);
  std::get<0>(topk(g, 2)).sum().backward();
  CHECK(g.grad().to_vector() == V{0, 1, 1});
  std::string e = error_of([&] { topk(x, 4); });
  CHECK(contains(e, "topk"));
  CHECK(contains(e, "[2, 3]"));
  CHECK(contains(error_of([&] { kthvalue(x, 0); }), "kthvalue"));
  CHECK(contains(error_of([&] { kthvalue(x, 3, 0); }), "k = 3"));
}

TEST_CASE("median and nanmedian: lower median, NaN rules, keepdim") {
  Tensor x = t({4, 1, 3, 2}, {4});
  CHECK(median(x).item() == 2);  // the lower of the two middle values
  CHECK(x.nanmedian().item() == 2);
  Tensor m = t({5, 1, 3, 9, kNaN, 2, kNaN, kNaN, kNaN}, {3, 3});
  auto [mv, mi] = median(m, 1);
  CHECK(close(mv.to_vector(), V{3, kNaN, kNaN}));
  CHECK(mi.to_vector()[0] == 2);
  CHECK(mi.to_vector()[1] == 1);
  auto [nv, ni] = nanmedian(m, 1);
  CHECK(close(nv.to_vector(), V{3, 2, kNaN}));
  CHECK(ni.to_vector()[0] == 2);
  CHECK(ni.to_vector()[1] == 2);
  CHECK(std::isnan(median(m).item()));
  CHECK(nanmedian(m).item() == 3);  // the lower median of 5 1 3 9 2
  auto [kv, ki] = m.median(0, true);
  CHECK(kv.sizes() == Shape{1, 3});
  auto [iv, ii] = median(t({3, 1, 2, 8}, {2, 2}, DType::i64), 0);
  CHECK(iv.to_vector() == V{2, 1});
  CHECK(ii.to_vector() == V{1, 0});
  CHECK(median(scalar_tensor(5)).item() == 5);
  Tensor g = t({2, 8, 5}, {3}, DType::f64);
  g.set_requires_grad(true);
  median(g).backward();
  CHECK(g.grad().to_vector() == V{0, 0, 1});
  CHECK(contains(error_of([] { median(zeros({0})); }), "median"));
  CHECK(contains(error_of([] { median(zeros({2, 0}), 1); }), "[2, 0]"));
}
