// x.index / index_put_ as libtorch writes them (each index kind and their mixtures, PyTorch's
// placement of advanced dims, broadcasting, masks) and the mask, scatter and index-family ops,
// with hand-computed values; autograd through index and index_put_; and the errors bad input
// raises (each names the op, the argument and the shapes).
#include <doctest/doctest.h>

#include <string>

#include "ember/ember.h"
#include "support/errors.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
using namespace ember::indexing;
using V = std::vector<double>;

namespace {
Tensor t(V v, Shape s, DType d = DType::f32) { return from_vector(v, s, TensorOptions(d)); }
Tensor i64(V v, Shape s) { return t(std::move(v), std::move(s), DType::i64); }
Tensor i64(V v) {
  const int64_t n = int64_t(v.size());
  return i64(std::move(v), {n});
}
Tensor mask(V v, Shape s) { return t(std::move(v), std::move(s), DType::boolean); }
// x[i][j][k] = 12 i + 4 j + k
Tensor x234() { return arange(24, TensorOptions(DType::f32)).reshape({2, 3, 4}); }

}  // namespace

TEST_CASE("index: integers, slices, None and Ellipsis make views") {
  Tensor x = x234();
  Tensor a = x.index({1});
  CHECK(a.sizes() == Shape{3, 4});
  CHECK(a.to_vector() == V{12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23});
  CHECK(a.storage() == x.storage());
  CHECK(x.index({Slice(), 1}).to_vector() == V{4, 5, 6, 7, 16, 17, 18, 19});
  CHECK(x.index({Slice(None, None, 2)}).sizes() == Shape{1, 3, 4});
  CHECK(x.index({Ellipsis, Slice(1, 3)}).to_vector() ==
        V{1, 2, 5, 6, 9, 10, 13, 14, 17, 18, 21, 22});
  Tensor b = x.index({None, 0, "...", -1});
  CHECK(b.sizes() == Shape{1, 3});
  CHECK(b.to_vector() == V{3, 7, 11});
  CHECK(x.index({0, None, Slice(-2)}).sizes() == Shape{1, 2, 4});
  CHECK(x.index({0, None, Slice(-2)}).to_vector() == V{4, 5, 6, 7, 8, 9, 10, 11});
  CHECK(x.index({1, 2, Slice(1, None, 2)}).to_vector() == V{21, 23});
  CHECK(x.index({Ellipsis, None}).sizes() == Shape{2, 3, 4, 1});
  CHECK(x.index({}).sizes() == Shape{2, 3, 4});
  // A write through a basic-index view lands in x.
  x.index({0, 0}).fill_(-1);
  CHECK(x.to_vector()[3] == -1);
}

TEST_CASE("index: integer tensors gather, negative indices count from the end") {
  Tensor x = x234();
  Tensor r = x.index({Slice(), i64({2, 0})});
  CHECK(r.sizes() == Shape{2, 2, 4});
  CHECK(r.to_vector() == V{8, 9, 10, 11, 0, 1, 2, 3, 20, 21, 22, 23, 12, 13, 14, 15});
  CHECK(r.storage() != x.storage());
  CHECK(x.index({i64({-1})}).to_vector() == x.index({1}).reshape({1, 3, 4}).to_vector());
  Tensor two_d = x.index({0, i64({0, 1, 2, 2}, {2, 2})});
  CHECK(two_d.sizes() == Shape{2, 2, 4});
  CHECK(two_d.to_vector() == V{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 8, 9, 10, 11});
  // int32 indices work too; a 0-dim index tensor removes the dim like an integer.
  CHECK(x.index({0, 0, t({3, 1}, {2}, DType::i32)}).to_vector() == V{3, 1});
  CHECK(x.index({i64({1}, {})}).sizes() == Shape{3, 4});
}

TEST_CASE("index: adjacent advanced indices stay in place, separated ones move to the front") {
  Tensor x = x234();
  // Adjacent (dims 1 and 2): the broadcast shape [2] replaces them at their position.
  Tensor adj = x.index({Slice(), i64({0, 2}), i64({1, 3})});
  CHECK(adj.sizes() == Shape{2, 2});
  CHECK(adj.to_vector() == V{1, 11, 13, 23});
  // Separated by a slice: the broadcast dims go first.
  Tensor sep = x.index({i64({0, 1}), Slice(), i64({1, 3})});
  CHECK(sep.sizes() == Shape{2, 3});
  CHECK(sep.to_vector() == V{1, 5, 9, 15, 19, 23});
  // Index tensors broadcast: [2, 1] with [2] gives [2, 2], first because separated.
  Tensor bc = x.index({i64({0, 1}, {2, 1}), Slice(), i64({1, 3})});
  CHECK(bc.sizes() == Shape{2, 2, 3});
  CHECK(bc.to_vector() == V{1, 5, 9, 3, 7, 11, 13, 17, 21, 15, 19, 23});
  // An integer selects (as in PyTorch), so the tensors around it are adjacent afterwards.
  Tensor with_int = x.index({i64({0, 1}), 0, i64({1, 3})});
  CHECK(with_int.sizes() == Shape{2});
  CHECK(with_int.to_vector() == V{1, 15});
  // A None between advanced indices separates them.
  CHECK(x.index({Slice(), i64({0, 2}), None, i64({1, 3})}).sizes() == Shape{2, 2, 1});
}

TEST_CASE("index: bool masks act as their nonzero coordinates") {
  Tensor x = x234();
  CHECK(x.index({Slice(), mask({1, 0, 1}, {3})}).to_vector() ==
        V{0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 20, 21, 22, 23});
  Tensor full_mask = x > from_vector({20}, {}, TensorOptions(DType::f32));
  CHECK(x.index({full_mask}).to_vector() == V{21, 22, 23});
  Tensor m2 = mask({1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}, {3, 4});
  Tensor r = x.index({Slice(), m2});
  CHECK(r.sizes() == Shape{2, 3});
  CHECK(r.to_vector() == V{0, 6, 11, 12, 18, 23});
  // A mask next to an integer tensor: both broadcast to [2].
  CHECK(x.index({i64({1, 0}), mask({0, 1, 1}, {3})}).to_vector() ==
        V{16, 17, 18, 19, 8, 9, 10, 11});
  // 0-dim masks add a dim that is kept (true) or emptied (false).
  CHECK(x.index({mask({1}, {})}).sizes() == Shape{1, 2, 3, 4});
  CHECK(x.index({mask({0}, {})}).sizes() == Shape{0, 2, 3, 4});
  CHECK(x.index({Slice(), mask({0, 0, 0}, {3})}).sizes() == Shape{2, 0, 4});
}

TEST_CASE("index_put_: values, accumulate, masks, slices and broadcasting") {
  Tensor y = zeros({3, 4});
  y.index_put_({i64({0, 2}), i64({1, 3})}, 5.0);
  CHECK(y.to_vector() == V{0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5});
  y.index_put_({Slice(), i64({0})}, t({7, 8, 9}, {3, 1}));
  CHECK(y.to_vector() == V{7, 5, 0, 0, 8, 0, 0, 0, 9, 0, 0, 5});
  y.index_put_({y > from_vector({6}, {}, TensorOptions(DType::f32))}, -1.0);
  CHECK(y.to_vector() == V{-1, 5, 0, 0, -1, 0, 0, 0, -1, 0, 0, 5});
  y.index_put_({1}, 2.0);
  CHECK(y.to_vector() == V{-1, 5, 0, 0, 2, 2, 2, 2, -1, 0, 0, 5});
  y.index_put_({Slice(), 1}, t({1, 1, 1}, {3}), true);
  CHECK(y.to_vector() == V{-1, 6, 0, 0, 2, 3, 2, 2, -1, 1, 0, 5});

  Tensor z = zeros({5});
  z.index_put_({i64({1, 1, 3, -1})}, t({1, 2, 3, 4}, {4}), true);
  CHECK(z.to_vector() == V{0, 3, 0, 3, 4});
  z.index_put_({i64({0, 2})}, t({9}, {1}));  // values broadcast
  CHECK(z.to_vector() == V{9, 3, 9, 3, 4});

  // Separated advanced indices: values are laid out [broadcast, rest].
  Tensor w = zeros({2, 3, 4});
  w.index_put_({i64({0, 1}), Slice(), i64({1, 3})}, t({1, 2, 3, 4, 5, 6}, {2, 3}));
  CHECK(w.index({0, Slice(), 1}).to_vector() == V{1, 2, 3});
  CHECK(w.index({1, Slice(), 3}).to_vector() == V{4, 5, 6});
  CHECK(w.sum().item() == 21);
  // Into a non-contiguous view: the write lands in the base.
  Tensor base = zeros({4, 3});
  Tensor view = base.t();
  view.index_put_({i64({2}), i64({1})}, 8.0);
  CHECK(base.to_vector()[1 * 3 + 2] == 8);
  // Out of place.
  Tensor p = index_put(zeros({3}), {i64({1})}, t({4}, {1}));
  CHECK(p.to_vector() == V{0, 4, 0});
}

TEST_CASE("index and index_put_ are differentiable") {
  Tensor a = arange(6, TensorOptions(DType::f64)).reshape({2, 3}).set_requires_grad(true);
  a.index({i64({1, 1, 0})}).sum().backward();
  CHECK(a.grad().to_vector() == V{1, 1, 1, 2, 2, 2});
  Tensor b = arange(6, TensorOptions(DType::f64)).reshape({2, 3}).set_requires_grad(true);
  (b.index({Slice(), mask({1, 0, 1}, {3})}) * 3.0).sum().backward();
  CHECK(b.grad().to_vector() == V{3, 0, 3, 3, 0, 3});

  Tensor s = ones({4}, TensorOptions(DType::f64)).set_requires_grad(true);
  Tensor v = from_vector({2, 3}, {2}, TensorOptions(DType::f64)).set_requires_grad(true);
  Tensor out = index_put(s * 1.0, {i64({0, 2})}, v);
  (out * from_vector({1, 2, 3, 4}, {4}, TensorOptions(DType::f64))).sum().backward();
  CHECK(s.grad().to_vector() == V{0, 2, 0, 4});  // overwritten positions get no gradient
  CHECK(v.grad().to_vector() == V{1, 3});

  Tensor s2 = ones({3}, TensorOptions(DType::f64)).set_requires_grad(true);
  Tensor v2 = from_vector({5}, {1}, TensorOptions(DType::f64)).set_requires_grad(true);
  Tensor h = s2 * 2.0;
  h.index_put_({i64({0, 0, 2})}, v2, true);
  h.sum().backward();
  CHECK(s2.grad().to_vector() == V{2, 2, 2});
  CHECK(v2.grad().to_vector() == V{3});  // broadcast to three positions
  CHECK(h.to_vector() == V{12, 2, 7});
}

TEST_CASE("masked_fill, masked_select, masked_scatter, nonzero and where") {
  Tensor x = t({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor row_mask = mask({1, 0, 1}, {3});
  CHECK(x.masked_fill(row_mask, 0.0).to_vector() == V{0, 2, 0, 0, 5, 0});
  CHECK(x.masked_fill(row_mask, from_vector({-1}, {}, TensorOptions(DType::f32))).to_vector() ==
        V{-1, 2, -1, -1, 5, -1});
  Tensor y = x.clone();
  y.masked_fill_(mask({0, 1}, {2, 1}), 9.0);
  CHECK(y.to_vector() == V{1, 2, 3, 9, 9, 9});
  CHECK(x.masked_select(row_mask).to_vector() == V{1, 3, 4, 6});
  CHECK(masked_select(t({7}, {1}), mask({1, 0, 1}, {3})).to_vector() == V{7, 7});
  CHECK(x.masked_scatter(row_mask, t({10, 20, 30, 40, 50}, {5})).to_vector() ==
        V{10, 2, 20, 30, 5, 40});
  Tensor nz = t({0, 3, 0, 0, 0, -1}, {2, 3}).nonzero();
  CHECK(nz.sizes() == Shape{2, 2});
  CHECK(nz.dtype() == DType::i64);
  CHECK(nz.to_vector() == V{0, 1, 1, 2});
  CHECK(zeros({2, 2}).nonzero().sizes() == Shape{0, 2});
  CHECK(argwhere(mask({1, 1}, {2})).to_vector() == V{0, 1});
  Tensor c = mask({1, 0, 1}, {3});
  CHECK(where(c, 1.0, t({5, 6, 7}, {3})).to_vector() == V{1, 6, 1});
  CHECK(where(c, t({5, 6, 7}, {3}), 0.0).to_vector() == V{5, 0, 7});
  Tensor ss = where(c, 2.0, 3.0);
  CHECK(ss.dtype() == DType::f32);
  CHECK(ss.to_vector() == V{2, 3, 2});

  Tensor a = t({1, 2, 3, 4}, {4}, DType::f64).set_requires_grad(true);
  Tensor m4 = mask({1, 0, 0, 1}, {4});
  (a.masked_select(m4).sum() + a.masked_fill(m4, 0.0).sum() * 2.0).backward();
  CHECK(a.grad().to_vector() == V{1, 2, 2, 1});
}

TEST_CASE("scatter, scatter_reduce, index_add, index_copy, index_fill, take_along_dim") {
  Tensor self = zeros({2, 3});
  Tensor index = i64({0, 2, 1, 0}, {2, 2});
  Tensor src = t({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(self.scatter(1, index, src).to_vector() == V{1, 0, 2, 5, 4, 0});
  CHECK(self.scatter(1, index, 7.0).to_vector() == V{7, 0, 7, 7, 7, 0});
  Tensor dup = i64({1, 1, 1}, {1, 3});
  Tensor base = t({1, 2, 3}, {1, 3});
  Tensor s3 = t({2, 3, 4}, {1, 3});
  CHECK(base.scatter_reduce(1, dup, s3, "sum").to_vector() == V{1, 11, 3});
  CHECK(base.scatter_reduce(1, dup, s3, "sum", false).to_vector() == V{1, 9, 3});
  CHECK(base.scatter_reduce(1, dup, s3, "prod").to_vector() == V{1, 48, 3});
  CHECK(base.scatter_reduce(1, dup, s3, "mean").to_vector() == V{1, 2.75, 3});
  CHECK(base.scatter_reduce(1, dup, s3, "mean", false).to_vector() == V{1, 3, 3});
  CHECK(base.scatter_reduce(1, dup, s3, "amax").to_vector() == V{1, 4, 3});
  CHECK(base.scatter_reduce(1, dup, s3, "amin").to_vector() == V{1, 2, 3});
  CHECK(base.scatter(1, dup, s3, "add").to_vector() == V{1, 11, 3});
  Tensor sc = zeros({3});
  sc.scatter_(0, i64({2}), t({5}, {1}));
  CHECK(sc.to_vector() == V{0, 0, 5});

  Tensor m = zeros({3, 2});
  Tensor rows = t({1, 1, 2, 2, 3, 3}, {3, 2});
  CHECK(m.index_add(0, i64({2, 0, 2}), rows).to_vector() == V{2, 2, 0, 0, 4, 4});
  CHECK(m.index_add(0, i64({2, 0, 2}), rows, 0.5).to_vector() == V{1, 1, 0, 0, 2, 2});
  CHECK(m.index_copy(0, i64({2, 0, 1}), rows).to_vector() == V{2, 2, 3, 3, 1, 1});
  CHECK(m.index_fill(1, i64({1}), 4.0).to_vector() == V{0, 4, 0, 4, 0, 4});
  Tensor mm = zeros({3, 2});
  mm.index_add_(1, i64({0, 0}), ones({3, 2}));
  CHECK(mm.to_vector() == V{2, 0, 2, 0, 2, 0});
  mm.index_fill_(0, i64({1}), -1.0);
  CHECK(mm.to_vector() == V{2, 0, -1, -1, 2, 0});

  Tensor v = t({10, 30, 20, 60, 50, 40}, {2, 3});
  CHECK(v.take_along_dim(i64({1, 2}, {2, 1}), 1).to_vector() == V{30, 40});
  CHECK(v.take_along_dim(i64({5, 0})).to_vector() == V{40, 10});
  CHECK(v.take_along_dim(i64({0}, {1, 1}), 0).to_vector() == V{10, 30, 20});
  CHECK(v.take_along_dim(i64({1, 0, 0}, {1, 3}), 0).to_vector() == V{60, 30, 20});
}

TEST_CASE("scatter family gradients") {
  auto f64 = [](V v, Shape s) { return t(std::move(v), std::move(s), DType::f64); };
  Tensor self = f64({1, 2, 3}, {1, 3}).set_requires_grad(true);
  Tensor src = f64({2, 3, 4}, {1, 3}).set_requires_grad(true);
  self.scatter(1, i64({1, 1}, {1, 2}), src).sum().backward();
  CHECK(self.grad().to_vector() == V{1, 0, 1});
  CHECK(src.grad().to_vector() == V{1, 1, 0});

  Tensor a = f64({1, 5, 3}, {1, 3}).set_requires_grad(true);
  Tensor b = f64({5, 2, 5}, {1, 3}).set_requires_grad(true);
  a.scatter_reduce(1, i64({1, 1, 1}, {1, 3}), b, "amax").sum().backward();
  // Three values tie at the max 5 of position 1: each gets a third.
  CHECK(a.grad().to_vector()[1] == doctest::Approx(1.0 / 3));
  CHECK(b.grad().to_vector()[0] == doctest::Approx(1.0 / 3));
  CHECK(b.grad().to_vector()[1] == 0);

  Tensor c = f64({1, 1}, {2}).set_requires_grad(true);
  Tensor d = f64({3, 4}, {2}).set_requires_grad(true);
  c.index_copy(0, i64({1}), d.narrow(0, 0, 1)).sum().backward();
  CHECK(c.grad().to_vector() == V{1, 0});
  CHECK(d.grad().to_vector() == V{1, 0});
}

TEST_CASE("in-place indexing ops on tensors with history pass gradients on") {
  auto f64 = [](V v, Shape s) { return t(std::move(v), std::move(s), DType::f64); };
  Tensor a = f64({1, 2, 3, 4}, {4}).set_requires_grad(true);
  Tensor b = a * 2.0;
  b.masked_fill_(mask({1, 0, 0, 1}, {4}), 0.0);
  CHECK(b.to_vector() == V{0, 4, 6, 0});
  b.sum().backward();
  CHECK(a.grad().to_vector() == V{0, 2, 2, 0});

  Tensor c = f64({1, 2, 3}, {3}).set_requires_grad(true);
  Tensor src = f64({5, 6}, {2}).set_requires_grad(true);
  Tensor d = c * 1.0;
  d.index_add_(0, i64({2, 2}), src, 3.0);
  CHECK(d.to_vector() == V{1, 2, 36});
  (d * f64({1, 10, 100}, {3})).sum().backward();
  CHECK(c.grad().to_vector() == V{1, 10, 100});
  CHECK(src.grad().to_vector() == V{300, 300});

  Tensor e = f64({1, 2, 3}, {3}).set_requires_grad(true);
  Tensor f = e * 1.0;
  f.scatter_(0, i64({0}), f64({9}, {1}));
  f.index_put_({i64({2})}, 7.0);
  f.sum().backward();
  CHECK(e.grad().to_vector() == V{0, 1, 0});

  // Advanced indexing of a non-contiguous view.
  Tensor g = arange(6, TensorOptions(DType::f64)).reshape({2, 3}).set_requires_grad(true);
  Tensor picked = g.t().index({i64({2, 0, 2})});
  CHECK(picked.to_vector() == V{2, 5, 0, 3, 2, 5});
  picked.sum().backward();
  CHECK(g.grad().to_vector() == V{1, 0, 2, 1, 0, 2});
  CHECK(from_vector({3}, {}, TensorOptions(DType::f32)).nonzero().sizes() == Shape{1, 0});
}

TEST_CASE("indexing errors name the op, the argument and the shapes") {
  Tensor x = x234();
  std::string e = error_of([&] { x.index({Slice(), i64({3})}); });
  CHECK(contains(e, "index: index 3 is out of range"));
  CHECK(contains(e, "self has shape [2, 3, 4]"));
  e = error_of([&] { zeros({4}).index_put_({i64({-5})}, 1.0); });
  CHECK(contains(e, "index_put_: index -5 is out of range"));
  e = error_of([&] { x.index({5}); });
  CHECK(contains(e, "index"));
  CHECK(contains(e, "out of range"));
  CHECK(contains(e, "[2, 3, 4]"));
  e = error_of([&] { x.index({mask({1, 0, 1}, {3}), Slice()}); });
  CHECK(contains(e, "index"));
  CHECK(contains(e, "mask of shape [3]"));
  e = error_of([&] { x.index({0, 0, 0, 0}); });
  CHECK(contains(e, "too many indices"));
  CHECK(contains(e, "[2, 3, 4]"));
  e = error_of([&] { x.index({t({0}, {1})}); });
  CHECK(contains(e, "int64, int32 or bool"));
  e = error_of([&] { x.index({Ellipsis, 0, Ellipsis}); });
  CHECK(contains(e, "Ellipsis"));
  e = error_of([&] { x.index_put_({i64({0})}, zeros({3, 4}, TensorOptions(DType::f64))); });
  CHECK(contains(e, "index_put_"));
  CHECK(contains(e, "float64"));
  e = error_of([&] { x.index_put_({i64({0})}, zeros({2, 4})); });
  CHECK(contains(e, "do not broadcast"));
  e = error_of([&] { x.masked_fill(mask({1, 0}, {2}), 0.0); });
  CHECK(contains(e, "masked_fill"));
  CHECK(contains(e, "[2]"));
  e = error_of([&] { x.masked_fill(zeros({4}), 0.0); });
  CHECK(contains(e, "bool"));
  e = error_of([&] { masked_scatter(zeros({3}), mask({1, 1, 1}, {3}), zeros({2})); });
  CHECK(contains(e, "selects 3"));
  e = error_of([&] { zeros({2, 3}).scatter(1, i64({0, 3}, {1, 2}), 1.0); });
  CHECK(contains(e, "out of range"));
  e = error_of([&] { zeros({2, 3}).scatter_reduce(1, i64({0}, {1, 1}), zeros({1, 1}), "max"); });
  CHECK(contains(e, "\"amax\""));
  e = error_of([&] { zeros({2, 3}).index_add(0, i64({0}), zeros({2, 3})); });
  CHECK(contains(e, "index_add"));
  CHECK(contains(e, "[1, 3]"));
  e = error_of([&] { zeros({2, 3}).index_copy(0, i64({2}), zeros({1, 3})); });
  CHECK(contains(e, "out of range"));
  e = error_of([&] { zeros({2}).index({Slice(0, 1, -1)}); });
  CHECK(contains(e, "step"));
}
