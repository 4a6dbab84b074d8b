// The shape ops of ops/shape_more.h with hand-computed values: dim moves, splits, diagonals,
// meshgrid, one_hot, repeats, flips, rolls, rot90, repeat_interleave, diag / block_diag / trace,
// tril / triu, pad in every mode and the pixel shuffles; negative dims, empty tensors, views
// sharing storage, autograd through the views, and the errors bad input raises (each names the
// op, the argument and the shapes).
#include <doctest/doctest.h>

#include <string>

#include "ember/ember.h"
#include "support/errors.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
using V = std::vector<double>;

namespace {
Tensor t(V v, Shape s, DType d = DType::f32) { return from_vector(v, s, TensorOptions(d)); }
Tensor ar(int64_t n, Shape s) { return arange(double(n), TensorOptions(DType::f32)).reshape(s); }
V vals(const std::vector<Tensor>& parts) {
  V out;
  for (const Tensor& p : parts)
    for (double v : p.to_vector()) out.push_back(v);
  return out;
}
}  // namespace

TEST_CASE("movedim, moveaxis, swapaxes, swapdims") {
  Tensor x = ar(24, {2, 3, 4});
  CHECK(x.movedim(0, -1).sizes() == Shape{3, 4, 2});
  CHECK(movedim(x, -1, 0).sizes() == Shape{4, 2, 3});
  CHECK(x.movedim({0, 1}, {2, 0}).sizes() == Shape{3, 4, 2});
  CHECK(x.movedim({0, 2}, {1, 0}).sizes() == Shape{4, 2, 3});
  CHECK(moveaxis(x, 1, 2).to_vector() == x.transpose(1, 2).contiguous().to_vector());
  CHECK(x.swapaxes(0, -1).sizes() == Shape{4, 3, 2});
  CHECK(swapdims(x, 0, 1).storage() == x.storage());
  CHECK(x.movedim(0, 1).to_vector() == x.permute({1, 0, 2}).contiguous().to_vector());
  CHECK(contains(error_of([&] { x.movedim({0, 0}, {1, 2}); }), "movedim: repeated dim 0"));
  CHECK(contains(error_of([&] { x.movedim({0}, {1, 2}); }), "same number of dims"));
  CHECK(contains(error_of([&] { x.movedim(3, 0); }), "movedim"));
  CHECK(scalar_tensor(2).movedim(0, -1).item() == 2);
  CHECK(contains(error_of([&] { scalar_tensor(2).movedim(1, 0); }), "movedim"));
}

TEST_CASE("unflatten and narrow_copy") {
  Tensor x = ar(24, {2, 12});
  CHECK(x.unflatten(1, {3, 4}).sizes() == Shape{2, 3, 4});
  CHECK(x.unflatten(-1, {-1, 2}).sizes() == Shape{2, 6, 2});
  CHECK(x.unflatten(0, {1, 2, 1}).sizes() == Shape{1, 2, 1, 12});
  CHECK(zeros({0, 6}).unflatten(1, {2, 3}).sizes() == Shape{0, 2, 3});
  CHECK(contains(error_of([&] { x.unflatten(1, {5, -1}); }), "unflatten: sizes [5, -1]"));
  CHECK(contains(error_of([&] { x.unflatten(1, {3, 5}); }), "multiply to 15"));
  CHECK(contains(error_of([&] { scalar_tensor(1).unflatten(0, {1}); }), "unflatten: expects"));
  CHECK(contains(error_of([&] { scalar_tensor(1).narrow_copy(0, 0, 1); }), "narrow_copy: expects"));
  Tensor c = x.narrow_copy(1, 2, 3);
  CHECK(c.sizes() == Shape{2, 3});
  CHECK(c.to_vector() == V{2, 3, 4, 14, 15, 16});
  CHECK(c.storage() != x.storage());
  CHECK(c.is_contiguous());
}

TEST_CASE("tensor_split, hsplit, vsplit, dsplit") {
  Tensor x = ar(7, {7});
  auto p = x.tensor_split(3);
  REQUIRE(p.size() == 3);
  CHECK(p[0].to_vector() == V{0, 1, 2});
  CHECK(p[1].to_vector() == V{3, 4});
  CHECK(p[2].to_vector() == V{5, 6});
  CHECK(p[0].storage() == x.storage());
  auto q = x.tensor_split(Shape{1, 5, 3, 20}, -1);
  REQUIRE(q.size() == 5);
  CHECK(q[0].to_vector() == V{0});
  CHECK(q[1].to_vector() == V{1, 2, 3, 4});
  CHECK(q[2].numel() == 0);
  CHECK(q[3].to_vector() == V{3, 4, 5, 6});
  CHECK(q[4].numel() == 0);
  CHECK(tensor_split(ar(2, {2}), 4).size() == 4);
  CHECK(tensor_split(zeros({0, 3}), 2, 0)[1].sizes() == Shape{0, 3});
  Tensor m = ar(12, {3, 4});
  auto h = m.hsplit(2);
  CHECK(h[1].to_vector() == V{2, 3, 6, 7, 10, 11});
  CHECK(x.hsplit(Shape{2})[1].to_vector() == V{2, 3, 4, 5, 6});
  CHECK(vals(m.vsplit(Shape{1})) == m.to_vector());
  CHECK(m.vsplit(3)[2].to_vector() == V{8, 9, 10, 11});
  Tensor d = ar(8, {1, 2, 4});
  CHECK(d.dsplit(2)[1].to_vector() == V{2, 3, 6, 7});
  CHECK(d.dsplit(Shape{3})[1].to_vector() == V{3, 7});
  CHECK(contains(error_of([&] { m.hsplit(3); }), "hsplit: dim 1 of size 4 (shape [3, 4])"));
  CHECK(contains(error_of([&] { x.vsplit(1); }), "vsplit: expects a tensor with at least 2 dims"));
  CHECK(contains(error_of([&] { m.dsplit(1); }), "dsplit"));
  CHECK(contains(error_of([&] { x.tensor_split(0); }), "sections must be positive"));
  CHECK(contains(error_of([&] { scalar_tensor(1).tensor_split(2); }), "0-d"));
}

TEST_CASE("diagonal is a view with offsets, negative dims and empty results") {
  Tensor m = ar(12, {3, 4});
  Tensor d = m.diagonal();
  CHECK(d.to_vector() == V{0, 5, 10});
  CHECK(d.storage() == m.storage());
  CHECK(m.diagonal(1).to_vector() == V{1, 6, 11});
  CHECK(m.diagonal(-1).to_vector() == V{4, 9});
  CHECK(m.diagonal(3).to_vector() == V{3});
  CHECK(m.diagonal(4).numel() == 0);
  CHECK(m.diagonal(-5).numel() == 0);
  CHECK(m.diagonal(0, 1, 0).to_vector() == V{0, 5, 10});
  Tensor b = ar(24, {2, 3, 4});
  Tensor bd = b.diagonal(0, -2, -1);
  CHECK(bd.sizes() == Shape{2, 3});
  CHECK(bd.to_vector() == V{0, 5, 10, 12, 17, 22});
  CHECK(b.diagonal(1, 0, 2).sizes() == Shape{3, 2});
  CHECK(b.diagonal(1, 0, 2).to_vector() == V{1, 14, 5, 18, 9, 22});
  d.fill_(-1);
  CHECK(m.to_vector()[5] == -1);
  Tensor w = ar(6, {2, 3}).to(DType::f64).set_requires_grad(true);
  w.diagonal(1).sum().backward();
  CHECK(w.grad().to_vector() == V{0, 1, 0, 0, 0, 1});
  CHECK(contains(error_of([&] { ar(3, {3}).diagonal(); }),
                 "diagonal: expects a tensor with at least 2"));
  CHECK(contains(error_of([&] { m.diagonal(0, 1, -1); }), "dim1 and dim2 are both 1"));
}

TEST_CASE("meshgrid and cartesian_prod") {
  Tensor a = t({1, 2, 3}, {3}), b = t({4, 5}, {2});
  auto ij = meshgrid({a, b});
  CHECK(ij[0].sizes() == Shape{3, 2});
  CHECK(ij[0].to_vector() == V{1, 1, 2, 2, 3, 3});
  CHECK(ij[1].to_vector() == V{4, 5, 4, 5, 4, 5});
  auto xy = meshgrid({a, b}, "xy");
  CHECK(xy[0].sizes() == Shape{2, 3});
  CHECK(xy[0].to_vector() == V{1, 2, 3, 1, 2, 3});
  CHECK(xy[1].to_vector() == V{4, 4, 4, 5, 5, 5});
  auto three = meshgrid({a, b, scalar_tensor(7)}, "xy");
  CHECK(three[2].sizes() == Shape{2, 3, 1});
  Tensor cp = cartesian_prod({a, b});
  CHECK(cp.sizes() == Shape{6, 2});
  CHECK(cp.to_vector() == V{1, 4, 1, 5, 2, 4, 2, 5, 3, 4, 3, 5});
  CHECK(cartesian_prod({a}).to_vector() == V{1, 2, 3});
  CHECK(cartesian_prod({a, zeros({0})}).sizes() == Shape{0, 2});
  CHECK(contains(error_of([&] { meshgrid({a}, "ab"); }), "meshgrid: indexing must be"));
  CHECK(contains(error_of([&] { meshgrid({ar(4, {2, 2})}); }), "tensor 0 has shape [2, 2]"));
  CHECK(contains(error_of([&] {
                   cartesian_prod({a, scalar_tensor(1)});
                 }),
                 "cartesian_prod: tensor 1"));
}

TEST_CASE("one_hot") {
  Tensor c = t({0, 2, 1, 2}, {2, 2}, DType::i64);
  Tensor o = one_hot(c);
  CHECK(o.dtype() == DType::i64);
  CHECK(o.sizes() == Shape{2, 2, 3});
  CHECK(o.to_vector() == V{1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1});
  CHECK(one_hot(t({1}, {1}, DType::i32), 4).to_vector() == V{0, 1, 0, 0});
  CHECK(one_hot(zeros({0}, TensorOptions(DType::i64)), 3).sizes() == Shape{0, 3});
  CHECK(contains(error_of([&] { one_hot(c, 2); }),
                 "class index 2 is out of range for num_classes 2"));
  CHECK(contains(error_of([&] { one_hot(t({-1}, {1}, DType::i64)); }), "non-negative"));
  CHECK(contains(error_of([&] { one_hot(zeros({0}, TensorOptions(DType::i64))); }), "empty"));
  CHECK(contains(error_of([&] { one_hot(zeros({2})); }), "one_hot: expects integer class indices"));
}

TEST_CASE("repeat and tile") {
  Tensor x = t({1, 2, 3}, {3});
  Tensor r = x.repeat({2, 2});
  CHECK(r.sizes() == Shape{2, 6});
  CHECK(r.to_vector() == V{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3});
  Tensor m = ar(4, {2, 2});
  CHECK(m.repeat({2, 1}).to_vector() == V{0, 1, 2, 3, 0, 1, 2, 3});
  CHECK(m.repeat({1, 1}).storage() != m.storage());
  CHECK(m.repeat({0, 3}).sizes() == Shape{0, 6});
  CHECK(m.tile({2}).to_vector() == V{0, 1, 0, 1, 2, 3, 2, 3});
  CHECK(m.tile({2, 1, 1}).sizes() == Shape{2, 2, 2});
  CHECK(contains(error_of([&] { m.repeat({2}); }),
                 "repeat: got 1 repeats [2] for a tensor of shape [2, 2]"));
  CHECK(contains(error_of([&] { m.repeat({2, -1}); }), "non-negative"));
}

TEST_CASE("flip, roll, rot90") {
  Tensor m = ar(6, {2, 3});
  CHECK(m.flip({1}).to_vector() == V{2, 1, 0, 5, 4, 3});
  CHECK(m.flip({0, -1}).to_vector() == V{5, 4, 3, 2, 1, 0});
  CHECK(m.flip({}).to_vector() == m.to_vector());
  CHECK(m.t().flip({0}).to_vector() == V{2, 5, 1, 4, 0, 3});
  CHECK(zeros({0, 3}).flip({0}).sizes() == Shape{0, 3});
  CHECK(contains(error_of([&] { m.flip({1, -1}); }), "flip: dim 1 appears twice"));
  CHECK(m.roll({1}).to_vector() == V{5, 0, 1, 2, 3, 4});
  CHECK(m.roll({-1}, {1}).to_vector() == V{1, 2, 0, 4, 5, 3});
  CHECK(m.roll({1, 4}, {0, 1}).to_vector() == V{5, 3, 4, 2, 0, 1});
  CHECK(m.roll({3}, {-1}).to_vector() == m.to_vector());
  CHECK(zeros({0, 2}).roll({1}, {0}).sizes() == Shape{0, 2});
  CHECK(contains(error_of([&] { m.roll({1, 2}); }), "roll: without dims expects one shift"));
  CHECK(contains(error_of([&] { m.roll({1}, {0, 1}); }), "same length"));
  CHECK(scalar_tensor(3).roll({2}, {0}).item() == 3);
  CHECK(scalar_tensor(3).roll({2}).item() == 3);
  // rot90 turns from the first dim towards the second, as numpy / PyTorch.
  CHECK(m.rot90().to_vector() == V{2, 5, 1, 4, 0, 3});
  CHECK(m.rot90().sizes() == Shape{3, 2});
  CHECK(m.rot90(2).to_vector() == V{5, 4, 3, 2, 1, 0});
  CHECK(m.rot90(-1).to_vector() == V{3, 0, 4, 1, 5, 2});
  CHECK(m.rot90(3).to_vector() == V{3, 0, 4, 1, 5, 2});
  CHECK(m.rot90(4).to_vector() == m.to_vector());
  CHECK(m.rot90(1, {1, 0}).to_vector() == V{3, 0, 4, 1, 5, 2});
  CHECK(contains(error_of([&] { m.rot90(1, {0, 0}); }), "rot90: dims [0, 0]"));
  CHECK(contains(error_of([&] { ar(3, {3}).rot90(); }), "at least 2 dims"));
}

TEST_CASE("repeat_interleave") {
  Tensor m = ar(4, {2, 2});
  CHECK(m.repeat_interleave(2).to_vector() == V{0, 0, 1, 1, 2, 2, 3, 3});
  CHECK(m.repeat_interleave(2, 0).to_vector() == V{0, 1, 0, 1, 2, 3, 2, 3});
  CHECK(m.repeat_interleave(2, -1).to_vector() == V{0, 0, 1, 1, 2, 2, 3, 3});
  CHECK(m.repeat_interleave(2, -1).sizes() == Shape{2, 4});
  CHECK(m.repeat_interleave(0, 1).sizes() == Shape{2, 0});
  Tensor reps = t({1, 2}, {2}, DType::i64);
  CHECK(m.repeat_interleave(reps, 0).to_vector() == V{0, 1, 2, 3, 2, 3});
  CHECK(m.repeat_interleave(reps, 1).to_vector() == V{0, 1, 1, 2, 3, 3});
  CHECK(m.repeat_interleave(t({3}, {1}, DType::i64)).numel() == 12);
  CHECK(repeat_interleave(t({2, 0, 1}, {3}, DType::i64)).to_vector() == V{0, 0, 2});
  CHECK(scalar_tensor(5).repeat_interleave(3, 0).to_vector() == V{5, 5, 5});
  CHECK(contains(error_of([&] {
                   m.repeat_interleave(t({1, 2, 3}, {3}, DType::i64), 0);
                 }),
                 "one entry per element of dim 0 (size 2"));
  CHECK(contains(error_of([&] {
                   repeat_interleave(t({1, -2}, {2}, DType::i64));
                 }),
                 "non-negative"));
  CHECK(contains(error_of([&] { m.repeat_interleave(-1); }), "non-negative"));
}

TEST_CASE("diag_embed, diag, block_diag, trace") {
  Tensor v = t({1, 2}, {2});
  CHECK(v.diag_embed().to_vector() == V{1, 0, 0, 2});
  CHECK(v.diag_embed(1).sizes() == Shape{3, 3});
  CHECK(v.diag_embed(1).to_vector() == V{0, 1, 0, 0, 0, 2, 0, 0, 0});
  CHECK(v.diag_embed(-1).to_vector() == V{0, 0, 0, 1, 0, 0, 0, 2, 0});
  Tensor b = ar(4, {2, 2});
  Tensor e = b.diag_embed(0, 0, 2);  // [i, batch, j]
  CHECK(e.sizes() == Shape{2, 2, 2});
  CHECK(e.to_vector() == V{0, 0, 2, 0, 0, 1, 0, 3});
  CHECK(v.diag().to_vector() == V{1, 0, 0, 2});
  Tensor m = ar(12, {3, 4});
  CHECK(m.diag(1).to_vector() == V{1, 6, 11});
  CHECK(m.diag(1).storage() != m.storage());
  CHECK(zeros({0}).diag().sizes() == Shape{0, 0});
  CHECK(contains(error_of([&] { ar(8, {2, 2, 2}).diag(); }), "diag: expects a 1-d or 2-d tensor"));
  CHECK(contains(error_of([&] { scalar_tensor(1).diag_embed(); }), "diag_embed"));
  Tensor bd = block_diag({t({1, 2, 3, 4}, {2, 2}), t({5, 6}, {2}), scalar_tensor(7)});
  CHECK(bd.sizes() == Shape{4, 5});
  CHECK(bd.to_vector() == V{1, 2, 0, 0, 0, 3, 4, 0, 0, 0, 0, 0, 5, 6, 0, 0, 0, 0, 0, 7});
  CHECK(block_diag({t({1}, {1}, DType::i64), t({2}, {1})}).dtype() == DType::f32);
  CHECK(block_diag({zeros({0, 2}), ones({1, 1})}).to_vector() == V{0, 0, 1});
  CHECK(contains(error_of([&] {
                   block_diag({zeros({1, 1, 1})});
                 }),
                 "block_diag: tensor 0 has shape"));
  CHECK(m.trace().item() == 15);
  CHECK(contains(error_of([&] { v.trace(); }), "trace: expects a 2-d matrix, got [2]"));
  Tensor w = ar(4, {2, 2}).to(DType::f64).set_requires_grad(true);
  (w.diag_embed() * ar(8, {2, 2, 2}).to(DType::f64)).sum().backward();
  CHECK(w.grad().to_vector() == V{0, 3, 4, 7});
}

TEST_CASE("tril and triu, in place too") {
  Tensor m = ar(12, {3, 4});
  CHECK(m.tril().to_vector() == V{0, 0, 0, 0, 4, 5, 0, 0, 8, 9, 10, 0});
  CHECK(m.tril(1).to_vector() == V{0, 1, 0, 0, 4, 5, 6, 0, 8, 9, 10, 11});
  CHECK(m.tril(-2).to_vector() == V{0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0});
  CHECK(m.triu().to_vector() == V{0, 1, 2, 3, 0, 5, 6, 7, 0, 0, 10, 11});
  CHECK(m.triu(2).to_vector() == V{0, 0, 2, 3, 0, 0, 0, 7, 0, 0, 0, 0});
  CHECK(m.triu(-1).to_vector() == V{0, 1, 2, 3, 4, 5, 6, 7, 0, 9, 10, 11});
  Tensor b = ar(8, {2, 2, 2});
  CHECK(b.triu().to_vector() == V{0, 1, 0, 3, 4, 5, 0, 7});
  CHECK(t({1, 1, 1, 1}, {2, 2}, DType::i64).tril().dtype() == DType::i64);
  CHECK(zeros({0, 3}).tril().sizes() == Shape{0, 3});
  Tensor c = ar(4, {2, 2});
  c.tril_();
  CHECK(c.to_vector() == V{0, 0, 2, 3});
  Tensor cv = ar(9, {3, 3});
  Tensor view = cv.narrow(1, 1, 2);  // a non-contiguous view written in place
  view.triu_();
  CHECK(cv.to_vector() == V{0, 1, 2, 3, 0, 5, 6, 0, 0});
  tril_(view, -1);
  CHECK(cv.to_vector() == V{0, 0, 0, 3, 0, 0, 6, 0, 0});
  CHECK(contains(error_of([&] { ar(3, {3}).tril(); }),
                 "tril: expects a tensor with at least 2 dims"));
}

TEST_CASE("pad: constant with negative pads, reflect, replicate, circular") {
  Tensor x = t({1, 2, 3}, {1, 3});
  CHECK(pad(x, {1, 2}).to_vector() == V{0, 1, 2, 3, 0, 0});
  CHECK(pad(x, {0, 0, 1, 0}, "constant", 9).to_vector() == V{9, 9, 9, 1, 2, 3});
  CHECK(pad(x, {-1, 1}).to_vector() == V{2, 3, 0});
  CHECK(pad(x, {-1, -2}).sizes() == Shape{1, 0});
  CHECK(pad(x, {1, 1}, "reflect").to_vector() == V{2, 1, 2, 3, 2});
  CHECK(pad(x, {2, 2}, "reflect").to_vector() == V{3, 2, 1, 2, 3, 2, 1});
  CHECK(pad(x, {2, 1}, "replicate").to_vector() == V{1, 1, 1, 2, 3, 3});
  CHECK(pad(x, {2, 3}, "circular").to_vector() == V{2, 3, 1, 2, 3, 1, 2, 3});
  Tensor m = ar(4, {1, 2, 2});  // 2-D padding of an unbatched [C, H, W]
  Tensor r = pad(m, {1, 0, 0, 1}, "reflect");
  CHECK(r.sizes() == Shape{1, 3, 3});
  CHECK(r.to_vector() == V{1, 0, 1, 3, 2, 3, 1, 0, 1});
  CHECK(pad(m, {0, 1, 1, 0}, "replicate").to_vector() == V{0, 1, 1, 0, 1, 1, 2, 3, 3});
  CHECK(pad(m, {0, 0, 1, 1}, "circular").to_vector() == V{2, 3, 0, 1, 2, 3, 0, 1});
  CHECK(pad(ar(8, {1, 1, 2, 2, 2}), {0, 0, 0, 0, 1, 0}, "replicate").sizes() ==
        Shape{1, 1, 3, 2, 2});
  CHECK(pad(ar(6, {1, 2, 3}).transpose(1, 2), {1, 0}, "reflect").to_vector() ==
        V{3, 0, 3, 4, 1, 4, 5, 2, 5});
  Tensor g = t({1, 2, 3}, {1, 3}, DType::f64).set_requires_grad(true);
  pad(g, {2, 0}, "reflect").sum().backward();  // out = [3, 2, 1, 2, 3]
  CHECK(g.grad().to_vector() == V{1, 2, 2});
  CHECK(contains(error_of([&] { pad(x, {1}); }),
                 "pad: the padding [1] must hold (left, right) pairs"));
  CHECK(contains(error_of([&] {
                   pad(x, {3, 0}, "reflect");
                 }),
                 "reflect padding (3, 0) of dim 1 must be less than its size 3"));
  CHECK(contains(error_of([&] { pad(x, {4, 0}, "circular"); }), "must not exceed its size 3"));
  CHECK(contains(error_of([&] { pad(x, {1, 1}, "wrap"); }), "unknown mode \"wrap\""));
  CHECK(contains(error_of([&] {
                   pad(ar(3, {3}), {1, 1}, "reflect");
                 }),
                 "expects a 2-d or 3-d input"));
  CHECK(contains(error_of([&] {
                   pad(x, {0, 0, 0, 0, 1, 1});
                 }),
                 "pads 3 dims but the input [1, 3]"));
  CHECK(contains(error_of([&] { pad(x, {-2, -2}); }), "crops dim 1 of size 3"));
}

TEST_CASE("pixel_shuffle and pixel_unshuffle") {
  Tensor x = ar(8, {1, 4, 1, 2});
  Tensor y = pixel_shuffle(x, 2);
  CHECK(y.sizes() == Shape{1, 1, 2, 4});
  CHECK(y.to_vector() == V{0, 2, 1, 3, 4, 6, 5, 7});
  CHECK(pixel_unshuffle(y, 2).to_vector() == x.to_vector());
  Tensor z = ar(48, {2, 12, 2});  // unbatched [C, H, W]
  CHECK(pixel_unshuffle(pixel_shuffle(ar(48, {12, 2, 2}), 2), 2).to_vector() ==
        ar(48, {12, 2, 2}).to_vector());
  CHECK(pixel_unshuffle(z, 2).sizes() == Shape{8, 6, 1});
  CHECK(contains(error_of([&] { pixel_shuffle(x, 3); }),
                 "pixel_shuffle: the channel count 4 of [1, 4, 1, 2] is not divisible"));
  CHECK(contains(error_of([&] { pixel_unshuffle(x, 2); }), "pixel_unshuffle: the height 1"));
  CHECK(contains(error_of([&] { pixel_shuffle(ar(4, {2, 2}), 1); }), "at least 3 dims"));
}
