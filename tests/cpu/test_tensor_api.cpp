// The libtorch-style Tensor API: methods named and defaulted as libtorch's, operators between
// tensors and numbers on either side, comparisons, bitwise and logical ops, data_ptr<T>,
// accessor<T, N>, options, the *_like factories, linspace, logspace, eye, tensor({...}) and
// from_blob. Each snippet is written as libtorch would write it with only the namespace changed,
// and asserts values; bad input raises ember::Error naming the op.
#include <doctest/doctest.h>

#include <cmath>
#include <tuple>
#include <type_traits>

#include "ember/ember.h"
#include "support/errors.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
using V = std::vector<double>;

namespace {
Tensor t(V v, Shape s, DType d = DType::f32) { return from_vector(v, s, TensorOptions(d)); }

// The message of the ember::Error that f throws ("" when it throws none).
}  // namespace

TEST_CASE("tensor api: libtorch snippets resolve to the intended overloads") {
  Tensor x = t({1, 2, 3, 4, 5, 6}, {2, 3});
  // dims as a single int pick the dim overloads
  static_assert(std::is_same_v<decltype(x.max(1)), std::tuple<Tensor, Tensor>>);
  static_assert(std::is_same_v<decltype(x == 1), Tensor>);
  static_assert(std::is_same_v<decltype(x > 0.5), Tensor>);
  static_assert(std::is_same_v<decltype(2 * x), Tensor>);
  static_assert(std::is_same_v<decltype(1 < x), Tensor>);
  static_assert(std::is_same_v<decltype(x.sum(1)), Tensor>);
  static_assert(std::is_same_v<decltype(x.split(1)), std::vector<Tensor>>);
  CHECK(x.sum(1).to_vector() == V{6, 15});
  CHECK(x.sum({0, 1}).item() == 21);
  CHECK(x.sum({1}).to_vector() == V{6, 15});
  CHECK(x.sum({}).item() == 21);  // a braced list stays a list of dims: {} reduces everything
  CHECK(x.mean({}).item() == 3.5);
  CHECK(x.amax({}).item() == 6);
  CHECK(x.logsumexp({}).dim() == 0);
  CHECK(x.sum(int64_t(0)).to_vector() == V{5, 7, 9});
  CHECK(x.sum(size_t(1), true).sizes() == Shape{2, 1});
  CHECK(x.sum(1, true).sizes() == Shape{2, 1});
  CHECK(x.mean(0).to_vector() == V{2.5, 3.5, 4.5});
  CHECK(x.argmax(1).to_vector() == V{2, 2});
  CHECK((x == 1).to_vector() == V{1, 0, 0, 0, 0, 0});
  CHECK((x > 2.5).to_vector() == V{0, 0, 1, 1, 1, 1});
  CHECK((2 * x).to_vector() == V{2, 4, 6, 8, 10, 12});
  CHECK((x % 4).to_vector() == V{1, 2, 3, 0, 1, 2});
  auto [values, indices] = x.max(1);
  CHECK(values.to_vector() == V{3, 6});
  CHECK(indices.to_vector() == V{2, 2});
  CHECK(std::get<0>(x.min(0)).to_vector() == V{1, 2, 3});
  CHECK(std::get<1>(x.min(0, true)).sizes() == Shape{1, 3});
}

TEST_CASE("tensor api: reductions as methods") {
  Tensor x = t({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(x.prod().item() == 720);
  CHECK(x.prod(1).to_vector() == V{6, 120});
  CHECK(x.prod(0, true).sizes() == Shape{1, 3});
  CHECK(x.amax().item() == 6);
  CHECK(x.amax(1).to_vector() == V{3, 6});
  CHECK(x.amin(0).to_vector() == V{1, 2, 3});
  CHECK(x.amin({0, 1}, true).sizes() == Shape{1, 1});
  CHECK(x.var().item() == doctest::Approx(3.5));
  CHECK(x.var(false).item() == doctest::Approx(35.0 / 12));
  CHECK(x.var(1, true).to_vector() == V{1, 1});
  CHECK(x.var({1}, false, true).sizes() == Shape{2, 1});
  CHECK(x.std(1, true).to_vector() == V{1, 1});
  CHECK(x.std().item() == doctest::Approx(std::sqrt(3.5)));
  CHECK(x.std(Shape{0}, false).to_vector()[0] == doctest::Approx(1.5));
  CHECK(x.max().item() == 6);
  CHECK(x.min().item() == 1);
  CHECK(x.max(t({4}, {1})).to_vector() == V{4, 4, 4, 4, 5, 6});
  CHECK(x.min(t({4}, {1})).to_vector() == V{1, 2, 3, 4, 4, 4});
  CHECK(x.argmax().item() == 5);
  CHECK(x.argmin(0, true).sizes() == Shape{1, 3});
  CHECK(x.argmin(1).to_vector() == V{0, 0});
  Tensor z = t({0, 0, 0, 0}, {2, 2});
  CHECK(z.logsumexp(1).to_vector()[0] == doctest::Approx(std::log(2.0)));
  CHECK(z.logsumexp({0, 1}).item() == doctest::Approx(std::log(4.0)));
}

TEST_CASE("tensor api: arithmetic methods and their in-place forms") {
  Tensor x = t({1, 2, 3}, {3});
  Tensor y = t({10, 20, 30}, {3});
  CHECK(x.add(y).to_vector() == V{11, 22, 33});
  CHECK(x.add(y, 2).to_vector() == V{21, 42, 63});
  CHECK(x.add(1).to_vector() == V{2, 3, 4});
  CHECK(x.add(1, 3).to_vector() == V{4, 5, 6});
  CHECK(x.sub(y, 0.5).to_vector() == V{-4, -8, -12});
  CHECK(x.sub(1).to_vector() == V{0, 1, 2});
  CHECK(x.mul(y).to_vector() == V{10, 40, 90});
  CHECK(x.mul(2).to_vector() == V{2, 4, 6});
  CHECK(y.div(x).to_vector() == V{10, 10, 10});
  CHECK(y.div(10).to_vector() == V{1, 2, 3});
  CHECK(x.pow(t({2, 2, 0}, {3})).to_vector() == V{1, 4, 1});
  CHECK(x.pow(2).to_vector() == V{1, 4, 9});
  CHECK(x.neg().to_vector() == V{-1, -2, -3});
  CHECK(x.square().to_vector() == V{1, 4, 9});
  CHECK(t({4}, {1}).rsqrt().item() == 0.5);
  CHECK(t({4}, {1}).reciprocal().item() == 0.25);
  CHECK(t({0}, {1}).sigmoid().item() == 0.5);
  CHECK(t({0}, {1}).tanh().item() == 0);
  CHECK(t({0}, {1}).sin().item() == 0);
  CHECK(t({0}, {1}).cos().item() == 1);
  CHECK(t({-2.5, 0, 3}, {3}).sign().to_vector() == V{-1, 0, 1});
  CHECK(t({-2.5, 0.5, 2.5, 1.7}, {4}).floor().to_vector() == V{-3, 0, 2, 1});
  CHECK(t({-2.5, 0.5, 2.5, 1.2}, {4}).ceil().to_vector() == V{-2, 1, 3, 2});
  CHECK(t({-2.5, 0.5, 1.5, 1.7}, {4}).round().to_vector() == V{-2, 0, 2, 2});
  CHECK(t({0}, {1}, DType::f64).log1p().item() == 0);
  CHECK(t({1e-10}, {1}, DType::f64).expm1().item() == doctest::Approx(1e-10));
  CHECK(t({-2, 0.5, 2}, {3}).clamp(-1, 1).to_vector() == V{-1, 0.5, 1});
  CHECK(t({-2, 0.5, 2}, {3}).clamp(0).to_vector() == V{0, 0.5, 2});
  CHECK(t({-2, 0.5, 2}, {3}).clamp(std::nullopt, 0).to_vector() == V{-2, 0, 0});
  CHECK(t({-2, 0.5, 2}, {3}).clamp_min(0).to_vector() == V{0, 0.5, 2});
  CHECK(t({-2, 0.5, 2}, {3}).clamp_max(0).to_vector() == V{-2, 0, 0});
  CHECK(t({1, 2}, {2}, DType::i64).sign().dtype() == DType::i64);

  Tensor a = t({1, 2, 3}, {3});
  const uint64_t v0 = a.version();
  a.add_(y);
  CHECK(a.to_vector() == V{11, 22, 33});
  a.add_(y, -1);
  CHECK(a.to_vector() == V{1, 2, 3});
  a.add_(1);
  a.add_(1, -1);
  a.sub_(y, 0.1);
  CHECK(a.to_vector()[0] == doctest::Approx(0));
  a.sub_(-1);
  a.sub_(1, -1);
  CHECK(a.to_vector()[2] == doctest::Approx(2));
  a.mul_(y);
  a.mul_(0.5);
  a.div_(y);
  a.div_(0.5);
  CHECK(a.to_vector()[2] == doctest::Approx(2));
  a.pow_(2);
  CHECK(a.to_vector()[2] == doctest::Approx(4));
  CHECK(a.version() > v0);

  Tensor b = t({-1, 4, 0.25}, {3});
  b.abs_();
  CHECK(b.to_vector() == V{1, 4, 0.25});
  b.sqrt_();
  CHECK(b.to_vector() == V{1, 2, 0.5});
  b.reciprocal_();
  CHECK(b.to_vector() == V{1, 0.5, 2});
  b.square_();
  CHECK(b.to_vector() == V{1, 0.25, 4});
  b.rsqrt_();
  CHECK(b.to_vector() == V{1, 2, 0.5});
  b.log_();
  b.exp_();
  CHECK(b.to_vector()[1] == doctest::Approx(2));
  b.neg_();
  CHECK(b.to_vector()[1] == doctest::Approx(-2));
  b.clamp_(-1.5, 0);
  CHECK(b.to_vector()[1] == -1.5);
  b.clamp_min_(-1);
  b.clamp_max_(-0.75);
  CHECK(b.to_vector() == V{-1, -1, -0.75});
  b.relu_();
  CHECK(b.to_vector() == V{0, 0, 0});
  b.sigmoid_();
  CHECK(b.to_vector() == V{0.5, 0.5, 0.5});
  b.zero_().tanh_();
  b.sin_();
  b.cos_();
  CHECK(b.to_vector() == V{1, 1, 1});
}

TEST_CASE("tensor api: operators with numbers on either side and compound assignment") {
  Tensor x = t({1, 2, 3}, {3});
  CHECK((x + 1).to_vector() == V{2, 3, 4});
  CHECK((1 + x).to_vector() == V{2, 3, 4});
  CHECK((x - 1).to_vector() == V{0, 1, 2});
  CHECK((1 - x).to_vector() == V{0, -1, -2});
  CHECK((x * 2).to_vector() == V{2, 4, 6});
  CHECK((x / 2).to_vector() == V{0.5, 1, 1.5});
  CHECK((6 / x).to_vector() == V{6, 3, 2});
  CHECK((-x).to_vector() == V{-1, -2, -3});
  Tensor y = x.clone();
  y += 1;
  y -= 2;
  y *= 4;
  y /= 2;
  CHECK(y.to_vector() == V{0, 2, 4});
  y += x;
  y -= x;
  y *= x;
  y /= x;
  CHECK(y.to_vector() == V{0, 2, 4});
  Tensor i = t({5, 7}, {2}, DType::i64);
  i += 1;
  i -= 2;
  i *= 3;
  CHECK(i.to_vector() == V{12, 18});
  CHECK(i.dtype() == DType::i64);
  CHECK(contains(error_of([&] { i /= 2; }), "div_"));
  CHECK(contains(error_of([&] { i.exp_(); }), "exp_"));
}

TEST_CASE("tensor api: remainder and fmod follow Python's and C's sign rules") {
  Tensor a = t({5, -5, 5, -5, 5.5}, {5});
  Tensor b = t({3, 3, -3, -3, 2}, {5});
  CHECK((a % b).to_vector() == V{2, 1, -1, -2, 1.5});
  CHECK(a.remainder(b).to_vector() == V{2, 1, -1, -2, 1.5});
  CHECK(remainder(a, 3).to_vector() == V{2, 1, 2, 1, 2.5});
  CHECK(a.fmod(b).to_vector() == V{2, -2, 2, -2, 1.5});
  CHECK(fmod(a, 3).to_vector() == V{2, -2, 2, -2, 2.5});
  CHECK(a.fmod(-3).to_vector() == V{2, -2, 2, -2, 2.5});
  Tensor ia = t({7, -7, 7, -7}, {4}, DType::i64);
  Tensor ib = t({2, 2, -2, -2}, {4}, DType::i32);
  CHECK((ia % ib).dtype() == DType::i64);
  CHECK((ia % ib).to_vector() == V{1, 1, -1, -1});
  CHECK(fmod(ia, ib).to_vector() == V{1, -1, 1, -1});
  CHECK((ia % 3).to_vector() == V{1, 2, 1, 2});
  CHECK((ia % 3).dtype() == DType::i64);
  CHECK((ia % 2.5).dtype() == DType::f32);
  CHECK((ia % 2.5).to_vector() == V{2, 0.5, 2, 0.5});
  CHECK((10 % t({3, 4}, {2})).to_vector() == V{1, 2});
  CHECK((t({1, 2, 3, 4}, {2, 2}) % t({3, 2}, {2})).to_vector() == V{1, 0, 0, 0});
  CHECK(contains(error_of([&] { (void)(ia % t({0, 1, 1, 1}, {4}, DType::i64)); }), "remainder"));
  CHECK(contains(error_of([&] { (void)fmod(ia, t({0, 1, 1, 1}, {4}, DType::i64)); }), "fmod"));
}

TEST_CASE("tensor api: comparisons with tensors and numbers give bool tensors") {
  Tensor x = t({1, 2, 3}, {3});
  Tensor y = t({3, 2, 1}, {3});
  CHECK((x == y).to_vector() == V{0, 1, 0});
  CHECK((x != y).to_vector() == V{1, 0, 1});
  CHECK((x < y).to_vector() == V{1, 0, 0});
  CHECK((x <= y).to_vector() == V{1, 1, 0});
  CHECK((x > y).to_vector() == V{0, 0, 1});
  CHECK((x >= y).to_vector() == V{0, 1, 1});
  CHECK((x != 2).to_vector() == V{1, 0, 1});
  CHECK((x < 2).to_vector() == V{1, 0, 0});
  CHECK((x <= 2).to_vector() == V{1, 1, 0});
  CHECK((x >= 2).to_vector() == V{0, 1, 1});
  CHECK((x > 1.5).dtype() == DType::boolean);
  CHECK((2 == x).to_vector() == V{0, 1, 0});
  CHECK((2 != x).to_vector() == V{1, 0, 1});
  CHECK((2 < x).to_vector() == V{0, 0, 1});
  CHECK((2 <= x).to_vector() == V{0, 1, 1});
  CHECK((2 > x).to_vector() == V{1, 0, 0});
  CHECK((2 >= x).to_vector() == V{1, 1, 0});
  CHECK(x.eq(y).to_vector() == V{0, 1, 0});
  CHECK(x.ne(2).to_vector() == V{1, 0, 1});
  CHECK(x.lt(y).to_vector() == V{1, 0, 0});
  CHECK(x.le(2).to_vector() == V{1, 1, 0});
  CHECK(x.gt(y).to_vector() == V{0, 0, 1});
  CHECK(x.ge(2.5).to_vector() == V{0, 0, 1});
  CHECK(x.eq(2).to_vector() == V{0, 1, 0});
  CHECK(x.ne(y).to_vector() == V{1, 0, 1});
  CHECK(x.le(y).to_vector() == V{1, 1, 0});
  CHECK(x.lt(3).to_vector() == V{1, 1, 0});
  CHECK(x.gt(1).to_vector() == V{0, 1, 1});
  CHECK(x.ge(y).to_vector() == V{0, 1, 1});
  // an integer tensor against a fractional number compares in float (PyTorch's promotion)
  Tensor i = t({0, 1, 2}, {3}, DType::i32);
  CHECK((i > 0.5).to_vector() == V{0, 1, 1});
  CHECK((i == 1).to_vector() == V{0, 1, 0});
  // a bool tensor against an integer compares as int64: true == 2 is false
  Tensor m = t({1, 0}, {2}, DType::boolean);
  CHECK((m == 1).to_vector() == V{1, 0});
  CHECK((m == 2).to_vector() == V{0, 0});
  CHECK((m == true).to_vector() == V{1, 0});
  CHECK(x.equal(t({1, 2, 3}, {3})));
  CHECK_FALSE(x.equal(y));
  CHECK_FALSE(x.equal(t({1, 2, 3}, {1, 3})));
  CHECK(x.equal(t({1, 2, 3}, {3}, DType::i64)));
  CHECK(x.allclose(x + 1e-7));
  CHECK_FALSE(x.allclose(x + 1e-3));
  CHECK(x.allclose(x + 1e-3, 1e-2));
  Tensor n = t({NAN, INFINITY, 1}, {3});
  CHECK(n.isnan().to_vector() == V{1, 0, 0});
  CHECK(n.isfinite().to_vector() == V{0, 0, 1});
  CHECK(x.where(x > 1, y).to_vector() == V{3, 2, 3});
}

TEST_CASE("tensor api: bitwise and logical ops on bool and integer tensors") {
  Tensor a = t({1, 1, 0, 0}, {4}, DType::boolean);
  Tensor b = t({1, 0, 1, 0}, {4}, DType::boolean);
  CHECK((a & b).to_vector() == V{1, 0, 0, 0});
  CHECK((a | b).to_vector() == V{1, 1, 1, 0});
  CHECK((a ^ b).to_vector() == V{0, 1, 1, 0});
  CHECK((~a).to_vector() == V{0, 0, 1, 1});
  CHECK((a & b).dtype() == DType::boolean);
  CHECK((a & true).to_vector() == V{1, 1, 0, 0});
  CHECK((a & true).dtype() == DType::boolean);
  CHECK((false | a).to_vector() == V{1, 1, 0, 0});
  CHECK((a ^ true).to_vector() == V{0, 0, 1, 1});
  Tensor i = t({12, 10, -1, 0}, {4}, DType::i64);
  Tensor j = t({10, 6, 5, 7}, {4}, DType::i64);
  CHECK((i & j).to_vector() == V{8, 2, 5, 0});
  CHECK((i | j).to_vector() == V{14, 14, -1, 7});
  CHECK((i ^ j).to_vector() == V{6, 12, -6, 7});
  CHECK((~i).to_vector() == V{-13, -11, 0, -1});
  CHECK((i & 6).to_vector() == V{4, 2, 6, 0});
  CHECK((6 | i).to_vector() == V{14, 14, -1, 6});
  CHECK((3 ^ i).to_vector() == V{15, 9, -4, 3});
  Tensor u = t({0, 1, 255}, {3}, DType::u8);
  CHECK((~u).to_vector() == V{255, 254, 0});
  Tensor i32 = t({5}, {1}, DType::i32);
  CHECK((i32 & j.slice(0, 0, 1)).dtype() == DType::i64);  // promoted
  CHECK(i.bitwise_and(j).to_vector() == V{8, 2, 5, 0});
  CHECK(i.bitwise_or(j).to_vector() == V{14, 14, -1, 7});
  CHECK(i.bitwise_xor(j).to_vector() == V{6, 12, -6, 7});
  CHECK(i.bitwise_not().to_vector() == V{-13, -11, 0, -1});
  CHECK(bitwise_and(i, 4).to_vector() == V{4, 0, 4, 0});
  CHECK(bitwise_or(i, 1).to_vector() == V{13, 11, -1, 1});
  CHECK(bitwise_xor(i, 1).to_vector() == V{13, 11, -2, 1});
  // logical ops take any dtype and give bool
  Tensor f = t({0, 2.5, 0, -1}, {4});
  CHECK(logical_and(f, i).to_vector() == V{0, 1, 0, 0});
  CHECK(logical_or(f, i).to_vector() == V{1, 1, 1, 1});
  CHECK(logical_xor(f, i).to_vector() == V{1, 0, 1, 1});
  CHECK(f.logical_and(a).to_vector() == V{0, 1, 0, 0});
  CHECK(f.logical_or(b).to_vector() == V{1, 1, 1, 1});
  CHECK(f.logical_xor(b).to_vector() == V{1, 1, 1, 1});
  CHECK(f.logical_not().to_vector() == V{1, 0, 1, 0});
  CHECK(logical_xor(f, i).dtype() == DType::boolean);
  // broadcast
  CHECK((t({1, 0}, {2, 1}, DType::boolean) & t({1, 1, 0}, {3}, DType::boolean)).to_vector() ==
        V{1, 1, 0, 0, 0, 0});
  std::string e = error_of([&] { (void)(f & i); });
  CHECK(contains(e, "bitwise_and"));
  CHECK(contains(e, "float32"));
  CHECK(contains(error_of([&] { (void)~f; }), "bitwise_not"));
  CHECK(contains(error_of([&] { (void)(i | 1.5); }), "bitwise_or"));
}

TEST_CASE("tensor api: in-place ops bump the version and refuse leaves that require grad") {
  Tensor w = t({1, 2}, {2}).requires_grad_();
  std::string e = error_of([&] { w += 1; });
  CHECK(contains(e, "add_"));
  CHECK(contains(error_of([&] { w.exp_(); }), "exp_"));
  CHECK(contains(error_of([&] { w.mul_(2); }), "mul_"));
  CHECK(contains(error_of([&] { w -= 1; }), "add_"));
  CHECK(contains(error_of([&] { w /= 2; }), "mul_"));
  {
    autograd::NoGradGuard ng;
    w.exp_();
    w -= 1;
  }
  CHECK(w.to_vector()[0] == doctest::Approx(std::exp(1.0) - 1));
  // through autograd: y = exp(x * 2) computed in place on a non-leaf
  Tensor x = t({0.5, -1}, {2}, DType::f64).requires_grad_();
  Tensor y = x * 2;
  const uint64_t v = y.version();
  y.exp_();
  CHECK(y.version() > v);
  y.sum().backward();
  CHECK(x.grad().to_vector()[0] == doctest::Approx(2 * std::exp(1.0)));
  CHECK(x.grad().to_vector()[1] == doctest::Approx(2 * std::exp(-2.0)));
  // a value saved for backward and then modified in place is an error at backward
  Tensor p = t({1, 2}, {2}, DType::f64).requires_grad_();
  Tensor q = p * 1;
  Tensor r = q.sin();
  q.mul_(3);
  CHECK(!error_of([&] { r.sum().backward(); }).empty());
}

TEST_CASE("tensor api: shape methods") {
  Tensor x = arange(6).reshape({2, 3});
  Tensor other = zeros({3, 2});
  CHECK(x.view_as(other).sizes() == Shape{3, 2});
  CHECK(x.reshape_as(other).to_vector() == V{0, 1, 2, 3, 4, 5});
  CHECK(t({1, 2, 3}, {3}).expand_as(x).to_vector() == V{1, 2, 3, 1, 2, 3});
  auto chunks = x.chunk(3, 1);
  REQUIRE(chunks.size() == 3);
  CHECK(chunks[1].to_vector() == V{1, 4});
  auto parts = x.split(2, 1);
  REQUIRE(parts.size() == 2);
  CHECK(parts[1].to_vector() == V{2, 5});
  auto sized = x.split({1, 2}, 1);
  REQUIRE(sized.size() == 2);
  CHECK(sized[1].sizes() == Shape{2, 2});
  CHECK(x.split_with_sizes({1, 1}).at(1).to_vector() == V{3, 4, 5});
  auto rows = x.unbind();
  REQUIRE(rows.size() == 2);
  CHECK(rows[1].to_vector() == V{3, 4, 5});
  CHECK(x.unbind(1).at(2).to_vector() == V{2, 5});
  CHECK(arange(24).reshape({2, 12}).unflatten(1, {3, 4}).sizes() == Shape{2, 3, 4});
  CHECK(arange(24).reshape({2, 12}).unflatten(-1, {-1, 6}).sizes() == Shape{2, 2, 6});
  CHECK(contains(error_of([&] {
                   (void)arange(24).reshape({2, 12}).unflatten(1, {5, 2});
                 }),
                 "unflatten"));
  CHECK(contains(error_of([&] { (void)scalar_tensor(1).unbind(); }), "unbind"));
  CHECK(x.flatten().sizes() == Shape{6});
  Tensor idx = t({2, 0}, {2}, DType::i64);
  CHECK(x.index_select(1, idx).to_vector() == V{2, 0, 5, 3});
  CHECK(x.gather(1, t({0, 0, 1, 2}, {2, 2}, DType::i64)).to_vector() == V{0, 0, 4, 5});
  CHECK(zeros({3}).scatter_add(0, t({0, 0, 2}, {3}, DType::i64), t({1, 2, 3}, {3})).to_vector() ==
        V{3, 0, 3});
  Tensor m = t({1, 2, 3, 4}, {2, 2});
  CHECK(m.mm(m).to_vector() == V{7, 10, 15, 22});
  CHECK(m.unsqueeze(0).bmm(m.unsqueeze(0)).sizes() == Shape{1, 2, 2});
  CHECK(m.matmul(m).to_vector() == V{7, 10, 15, 22});
}

TEST_CASE("tensor api: dtype conversion, options and accessors") {
  Tensor x = t({1.5, -2.5}, {2});
  CHECK(x.to(kInt64).to_vector() == V{1, -2});
  CHECK(x.to(kBool).to_vector() == V{1, 1});
  CHECK(x.half().dtype() == DType::f16);
  CHECK(x.bfloat16().dtype() == DType::bf16);
  CHECK(x.to(TensorOptions(kDouble)).dtype() == DType::f64);
  CHECK(x.to(x.options()).dtype() == DType::f32);
  CHECK(x.type_as(t({1}, {1}, DType::i32)).dtype() == DType::i32);
  CHECK(x.ndimension() == 1);
  CHECK(x.numel() == 2);
  CHECK(x.is_floating_point());
  CHECK_FALSE(x.to(kLong).is_floating_point());
  CHECK(x.scalar_type() == kFloat);
  TensorOptions o = x.options();
  CHECK(o.dtype == DType::f32);
  CHECK(o.device == Device::cpu());
  CHECK_FALSE(o.requires_grad);
  CHECK(zeros({2}, x.to(kDouble).options()).dtype() == DType::f64);

  float* p = x.data_ptr<float>();
  CHECK(p[1] == -2.5f);
  CHECK(x.data_ptr() == static_cast<void*>(p));
  const float* cp = x.data_ptr<const float>();
  CHECK(cp[0] == 1.5f);
  std::string e = error_of([&] { (void)x.data_ptr<double>(); });
  CHECK(contains(e, "data_ptr"));
  CHECK(contains(e, "float32"));

  Tensor m = arange(6, kFloat).reshape({2, 3});
  auto acc = m.accessor<float, 2>();
  CHECK(acc.size(0) == 2);
  CHECK(acc.size(1) == 3);
  CHECK(acc.stride(0) == 3);
  CHECK(acc[1][2] == 5);
  acc[0][1] = 42;
  CHECK(m.to_vector()[1] == 42);
  Tensor mt = m.t();
  auto tacc = mt.accessor<float, 2>();  // strided
  CHECK(tacc[2][1] == 5);
  auto row = acc[1];
  CHECK(row[0] == 3);
  float total = 0;
  for (int64_t i = 0; i < acc.size(0); ++i)
    for (int64_t j = 0; j < acc.size(1); ++j) total += acc[i][j];
  CHECK(total == 0 + 42 + 2 + 3 + 4 + 5);
  // (the accessor of a temporary tensor is refused at compile time, as libtorch's)
  Tensor li = arange(3, kLong);
  CHECK(li.accessor<int64_t, 1>()[2] == 2);
  CHECK(contains(error_of([&] { (void)m.accessor<double, 2>(); }), "accessor"));
  CHECK(contains(error_of([&] { (void)m.accessor<float, 3>(); }), "3-dim"));

  CHECK(scalar_tensor(3.7).item<int>() == 3);
  CHECK(scalar_tensor(2.5).item<float>() == 2.5f);
  e = error_of([&] { (void)m.item<float>(); });
  CHECK(contains(e, "item"));
  CHECK(contains(e, "[2, 3]"));
}

TEST_CASE("tensor api: *_like factories take options") {
  Tensor x = t({1, 2, 3, 4}, {2, 2}, DType::f64);
  CHECK(empty_like(x, kFloat).dtype() == DType::f32);
  CHECK(empty_like(x, kFloat).sizes() == Shape{2, 2});
  CHECK(zeros_like(x, kInt).to_vector() == V{0, 0, 0, 0});
  CHECK(zeros_like(x, kInt).dtype() == DType::i32);
  CHECK(ones_like(x, TensorOptions()).dtype() == DType::f64);  // nothing given: like's
  CHECK(ones_like(x, TensorOptions().with_requires_grad()).requires_grad());
  CHECK(full_like(x, 7, kLong).to_vector() == V{7, 7, 7, 7});
  CHECK(full_like(x, 7, kLong).dtype() == DType::i64);
  Tensor r = rand_like(x);
  CHECK(r.dtype() == DType::f64);
  CHECK((r >= 0).logical_and(r < 1).equal(ones_like(r, kBool)));
  CHECK(randn_like(x, kFloat).dtype() == DType::f32);
  CHECK(randn_like(x).sizes() == Shape{2, 2});
  Tensor ri = randint_like(x, 5);
  CHECK(ri.dtype() == DType::f64);
  CHECK(((ri >= 0) & (ri < 5)).equal(ones_like(ri, kBool)));
  CHECK((ri == ri.floor()).equal(ones_like(ri, kBool)));
  Tensor rl = randint_like(x, 10, 12, kLong);
  CHECK(rl.dtype() == DType::i64);
  CHECK(((rl >= 10) & (rl < 12)).equal(ones_like(rl, kBool)));
  Tensor cl = empty({2, 3, 4, 5}).contiguous(MemoryFormat::channels_last);
  CHECK(zeros_like(cl, kDouble).is_contiguous(MemoryFormat::channels_last));
  CHECK(contains(error_of([&] { (void)rand_like(x, kLong); }), "rand"));
}

TEST_CASE("tensor api: linspace, logspace, eye") {
  CHECK(linspace(0, 1, 5).to_vector() == V{0, 0.25, 0.5, 0.75, 1});
  CHECK(linspace(0, 1, 5).dtype() == DType::f32);
  CHECK(linspace(1, -1, 3, kDouble).to_vector() == V{1, 0, -1});
  CHECK(linspace(2, 3, 1).to_vector() == V{2});
  CHECK(linspace(2, 3, 0).numel() == 0);
  Tensor l = linspace(-1, 1, 7, kDouble);
  CHECK(l.to_vector().back() == 1);
  CHECK(l.to_vector()[3] == 0);
  CHECK(logspace(0, 2, 3).to_vector() == V{1, 10, 100});
  CHECK(logspace(0, 3, 4, 2, kDouble).to_vector() == V{1, 2, 4, 8});
  CHECK(eye(2).to_vector() == V{1, 0, 0, 1});
  CHECK(eye(2, 3).to_vector() == V{1, 0, 0, 0, 1, 0});
  CHECK(eye(3, 2, kLong).to_vector() == V{1, 0, 0, 1, 0, 0});
  CHECK(eye(3, 2, kLong).dtype() == DType::i64);
  CHECK(eye(0).sizes() == Shape{0, 0});
  CHECK(eye(2, TensorOptions(kDouble).with_requires_grad()).requires_grad());
  CHECK(contains(error_of([&] { (void)linspace(0, 1, -1); }), "linspace"));
  CHECK(contains(error_of([&] { (void)eye(-1); }), "eye"));
}

TEST_CASE("tensor api: tensor({...}) from nested lists infers dtypes as libtorch") {
  Tensor a = tensor({1, 2, 3});
  CHECK(a.dtype() == DType::i64);
  CHECK(a.sizes() == Shape{3});
  CHECK(a.to_vector() == V{1, 2, 3});
  Tensor b = tensor({1.5, 2.5});
  CHECK(b.dtype() == DType::f32);
  CHECK(b.to_vector() == V{1.5, 2.5});
  Tensor c = tensor({true, false});
  CHECK(c.dtype() == DType::boolean);
  CHECK(c.to_vector() == V{1, 0});
  Tensor d = tensor({{1, 2, 3}, {4, 5, 6}});
  CHECK(d.sizes() == Shape{2, 3});
  CHECK(d.to_vector() == V{1, 2, 3, 4, 5, 6});
  Tensor e = tensor({{{1.0f}, {2.0f}}, {{3.0f}, {4.0f}}});
  CHECK(e.sizes() == Shape{2, 2, 1});
  CHECK(e.dtype() == DType::f32);
  Tensor f = tensor({{{{1, 2}}}});
  CHECK(f.sizes() == Shape{1, 1, 1, 2});
  CHECK(tensor({1, 2}, kDouble).dtype() == DType::f64);
  CHECK(tensor({1.5, 2.5}, kInt).to_vector() == V{1, 2});
  CHECK(tensor({0.5}, TensorOptions(kDouble).with_requires_grad()).requires_grad());
  CHECK(tensor(3.5).dim() == 0);
  CHECK(tensor(3.5).item() == 3.5);
  CHECK(tensor(int64_t(1) << 60).item<int64_t>() == (int64_t(1) << 60) * 1);
  CHECK(tensor(std::vector<int>{4, 5}).to_vector() == V{4, 5});
  CHECK(tensor(std::vector<bool>{true, false}).dtype() == DType::boolean);
  std::string err = error_of([] { (void)tensor({{1, 2}, {3}}); });
  CHECK(contains(err, "tensor"));
  CHECK(contains(err, "rectangular"));
}

namespace {
int g_deleted = 0;
}

TEST_CASE("tensor api: from_blob wraps caller memory, owning it only with a deleter") {
  float data[6] = {0, 1, 2, 3, 4, 5};
  {
    Tensor x = from_blob(data, {2, 3});
    CHECK(x.dtype() == DType::f32);
    CHECK(x.to_vector() == V{0, 1, 2, 3, 4, 5});
    x.mul_(2);  // writes the caller's memory
    CHECK(data[5] == 10);
    Tensor s = from_blob(data, {3, 2}, {1, 3});  // strided: the transpose
    CHECK(s.to_vector() == V{0, 6, 2, 8, 4, 10});
    CHECK(from_blob(data, {2}, {2}, kFloat).to_vector() == V{0, 4});
  }
  CHECK(data[0] == 0);  // not freed, still readable
  int64_t values[3] = {7, 8, 9};
  g_deleted = 0;
  int captured = 0;
  {
    Tensor x = from_blob(
        values, {3},
        [&captured](void* p) {
          captured = int(static_cast<int64_t*>(p)[0]);
          ++g_deleted;
        },
        kLong);
    Tensor view = x.slice(0, 1, 3);
    x = Tensor();
    CHECK(g_deleted == 0);  // the view keeps the storage
    CHECK(view.to_vector() == V{8, 9});
  }
  CHECK(g_deleted == 1);
  CHECK(captured == 7);
  CHECK(from_blob(values, {0}).numel() == 0);
  CHECK(contains(error_of([&] { (void)from_blob(data, {2, 3}, {1}); }), "from_blob"));
  CHECK(contains(error_of([&] { (void)from_blob(nullptr, {2}); }), "from_blob"));
}

TEST_CASE("tensor api: random fills as methods") {
  Tensor x = empty({1000});
  x.uniform_(2, 3);
  CHECK(x.amin().item() >= 2);
  CHECK(x.amax().item() < 3);
  x.uniform_();
  CHECK(x.amax().item() < 1);
  x.normal_(5, 0.01);
  CHECK(x.mean().item() == doctest::Approx(5).epsilon(0.01));
  x.normal_();
  CHECK(std::abs(x.mean().item()) < 0.2);
  x.fill_(2).zero_();
  CHECK(x.sum().item() == 0);
}

TEST_CASE("tensor api: empty, one-element and non-contiguous inputs") {
  Tensor e = empty({0, 3});
  CHECK((e % 2).sizes() == Shape{0, 3});
  CHECK((e == 1).sizes() == Shape{0, 3});
  CHECK((e.to(kLong) & 1).sizes() == Shape{0, 3});
  CHECK(e.equal(empty({0, 3})));
  Tensor one = t({5}, {1, 1}, DType::i32);
  CHECK((one ^ 1).to_vector() == V{4});
  Tensor nc = arange(6, kLong).reshape({2, 3}).t();  // [[0, 3], [1, 4], [2, 5]]
  CHECK((nc % 2).to_vector() == V{0, 1, 1, 0, 0, 1});
  CHECK((nc & 6).to_vector() == V{0, 2, 0, 4, 2, 4});
  CHECK((nc > 2).to_vector() == V{0, 1, 0, 1, 0, 1});
}
