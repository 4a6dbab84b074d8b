// Op semantics with hand-computed results: broadcasting, reductions, matmul shapes, indexing,
// comparisons and where.
#include <doctest/doctest.h>

#include <cmath>

#include "ember/ember.h"

using namespace ember;

namespace {
Tensor t(std::vector<double> v, Shape s, DType d = DType::f32) {
  return from_vector(v, s, TensorOptions(d));
}
}  // namespace

TEST_CASE("binary ops broadcast with numpy rules") {
  Tensor a = t({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = t({10, 20, 30}, {3});
  CHECK((a + b).to_vector() == std::vector<double>{11, 22, 33, 14, 25, 36});
  Tensor col = t({1, 2}, {2, 1});
  CHECK((a * col).to_vector() == std::vector<double>{1, 2, 3, 8, 10, 12});
  CHECK((t({1}, {1}) - a).sizes() == Shape{2, 3});
  CHECK(add(a, b, 2).to_vector()[0] == 21);
  CHECK(maximum(a, t({3}, {1})).to_vector() == std::vector<double>{3, 3, 3, 4, 5, 6});
  CHECK(pow(t({2, 3}, {2}), t({3, 2}, {2})).to_vector() == std::vector<double>{8, 9});
  CHECK(broadcast_shapes("x", {{5, 1, 4}, {3, 1}}) == Shape{5, 3, 4});
}

TEST_CASE("unary and scalar ops") {
  Tensor x = t({-2, -0.5, 0, 0.5, 2}, {5});
  CHECK(relu(x).to_vector() == std::vector<double>{0, 0, 0, 0.5, 2});
  CHECK(abs(x).to_vector() == std::vector<double>{2, 0.5, 0, 0.5, 2});
  CHECK(clamp(x, -1.0, 1.0).to_vector() == std::vector<double>{-1, -0.5, 0, 0.5, 1});
  CHECK(clamp(x, std::nullopt, 0.0).to_vector() == std::vector<double>{-2, -0.5, 0, 0, 0});
  CHECK(sigmoid(t({0}, {1})).item() == doctest::Approx(0.5));
  CHECK(tanh(t({100}, {1})).item() == doctest::Approx(1));
  CHECK(exp(t({1}, {1}, DType::f64)).item() == doctest::Approx(M_E));
  CHECK(sqrt(t({9}, {1})).item() == 3);
  CHECK(rsqrt(t({4}, {1})).item() == 0.5);
  CHECK((2.0 / t({4}, {1})).item() == 0.5);
  CHECK((1.0 - t({4}, {1})).item() == -3);
  CHECK(std::isnan(log(t({-1}, {1})).item()));
  CHECK(isnan(t({NAN, 1}, {2})).to_vector() == std::vector<double>{1, 0});
  CHECK(isfinite(t({INFINITY, 1}, {2})).to_vector() == std::vector<double>{0, 1});
  CHECK(logical_not(t({0, 3}, {2})).to_vector() == std::vector<double>{1, 0});
  // Integer ops stay integer; fractional scalars promote.
  Tensor i = arange(4, TensorOptions(DType::i64));
  CHECK((i * 2.0).dtype() == DType::i64);
  CHECK((i * 0.5).dtype() == DType::f32);
}

TEST_CASE("comparisons write bool and where selects") {
  Tensor a = t({1, 5, 3}, {3}), b = t({2, 5, 1}, {3});
  CHECK(eq(a, b).dtype() == DType::boolean);
  CHECK(eq(a, b).to_vector() == std::vector<double>{0, 1, 0});
  CHECK(lt(a, b).to_vector() == std::vector<double>{1, 0, 0});
  CHECK(ge(a, b).to_vector() == std::vector<double>{0, 1, 1});
  CHECK(ne(a, b).to_vector() == std::vector<double>{1, 0, 1});
  CHECK(where(gt(a, b), a, b).to_vector() == std::vector<double>{2, 5, 3});
  CHECK(where(gt(a, b), a, t({0}, {1})).to_vector() == std::vector<double>{0, 0, 3});
}

TEST_CASE("reductions over dims with keepdim") {
  Tensor a = t({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(sum(a).item() == 21);
  CHECK(sum(a, {0}).to_vector() == std::vector<double>{5, 7, 9});
  CHECK(sum(a, {1}, true).sizes() == Shape{2, 1});
  CHECK(sum(a, {-1}).to_vector() == std::vector<double>{6, 15});
  CHECK(mean(a, {1}).to_vector() == std::vector<double>{2, 5});
  CHECK(prod(a, {0}).to_vector() == std::vector<double>{4, 10, 18});
  CHECK(amax(a, {0}).to_vector() == std::vector<double>{4, 5, 6});
  CHECK(amin(a).item() == 1);
  auto mx = max(a, 1);
  CHECK(mx.values.to_vector() == std::vector<double>{3, 6});
  CHECK(mx.indices.to_vector() == std::vector<double>{2, 2});
  CHECK(mx.indices.dtype() == DType::i64);
  CHECK(argmax(a).item() == 5);
  CHECK(argmin(a, 0).to_vector() == std::vector<double>{0, 0, 0});
  CHECK(argmax(t({1, 3, 3}, {3})).item() == 1);  // first of ties
  CHECK(var(a, {1}).to_vector() == std::vector<double>{1, 1});
  CHECK(var(a, {1}, 0).to_vector()[0] == doctest::Approx(2.0 / 3));
  CHECK(ember::std(a).item() == doctest::Approx(1.8708287));
  // Reductions over a non-adjacent set of dims of a permuted tensor.
  Tensor b = arange(24, TensorOptions(DType::f64)).reshape({2, 3, 4});
  CHECK(sum(b, {0, 2}).to_vector() == std::vector<double>{60, 92, 124});
  CHECK(sum(b.permute({2, 1, 0}), {1}).sizes() == Shape{4, 2});
  CHECK(sum(b.permute({2, 1, 0}), {1}).to_vector()[1] == sum(b.select(0, 1).select(1, 0)).item());
  // Sums of integers and bools are int64.
  CHECK(sum(ones({3}, TensorOptions(DType::boolean))).dtype() == DType::i64);
  // Welford variance keeps precision with a large mean.
  Tensor big = t({1e6 + 1, 1e6 + 2, 1e6 + 3, 1e6 + 4}, {4});
  CHECK(var(big).item() == doctest::Approx(5.0 / 3).epsilon(1e-3));
  CHECK(logsumexp(t({1000, 1000}, {2}), {0}).item() == doctest::Approx(1000 + std::log(2.0)));
}

TEST_CASE("matmul follows torch.matmul shapes") {
  Tensor a = t({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = t({1, 0, 0, 1, 1, 1}, {3, 2});
  CHECK(mm(a, b).to_vector() == std::vector<double>{4, 5, 10, 11});
  CHECK(matmul(a, b.t().t()).to_vector() == std::vector<double>{4, 5, 10, 11});
  CHECK(mm(a.t().contiguous().t(), b).to_vector() == std::vector<double>{4, 5, 10, 11});
  CHECK(matmul(ones({3}), ones({3})).item() == 3);
  CHECK(matmul(ones({5, 2, 3}), ones({3, 4})).sizes() == Shape{5, 2, 4});
  CHECK(matmul(ones({2, 1, 2, 3}), ones({4, 3, 5})).sizes() == Shape{2, 4, 2, 5});
  CHECK(matmul(ones({3}), ones({2, 3, 4})).sizes() == Shape{2, 4});
  CHECK(bmm(ones({2, 2, 3}), ones({2, 3, 1})).to_vector() == std::vector<double>(4, 3.0));
  CHECK(addmm(t({1, 2}, {2}), a, b).to_vector() == std::vector<double>{5, 7, 11, 13});
  CHECK(linear(a, b.t(), t({1, 1}, {2})).to_vector() == std::vector<double>{5, 6, 11, 12});
  CHECK(mm(ones({2, 0}), ones({0, 3})).to_vector() == std::vector<double>(6, 0.0));
  for (DType d : {DType::f16, DType::bf16, DType::f64})
    CHECK(allclose(mm(a.to(d), b.to(d)), mm(a, b).to(d)));
}

TEST_CASE("indexing ops") {
  Tensor w = arange(12).reshape({4, 3});
  Tensor idx = from_vector({3, 0, 3}, {3}, TensorOptions(DType::i64));
  CHECK(index_select(w, 0, idx).to_vector() == std::vector<double>{9, 10, 11, 0, 1, 2, 9, 10, 11});
  CHECK(index_select(w, 1, from_vector({2}, {1}, TensorOptions(DType::i32))).to_vector() ==
        std::vector<double>{2, 5, 8, 11});
  CHECK(embedding(w, from_vector({1, 2, 3, 0}, {2, 2}, TensorOptions(DType::i64))).sizes() ==
        Shape{2, 2, 3});
  Tensor g = gather(w, 1, from_vector({0, 2, 1, 1, 0, 0, 2, 2}, {4, 2}, TensorOptions(DType::i64)));
  CHECK(g.to_vector() == std::vector<double>{0, 2, 4, 4, 6, 6, 11, 11});
  Tensor s = scatter_add(
      zeros({2, 3}), 1, from_vector({0, 0, 2, 1}, {2, 2}, TensorOptions(DType::i64)), ones({2, 2}));
  CHECK(s.to_vector() == std::vector<double>{2, 0, 0, 0, 1, 1});
}

TEST_CASE("in-place ops write through and keep identity") {
  Tensor a = ones({3});
  void* p = a.data_ptr();
  a += ones({3});
  a *= 3.0;
  add_(a, 1.0);
  CHECK(a.data_ptr() == p);
  CHECK(a.to_vector() == std::vector<double>{7, 7, 7});
  Tensor b = from_vector({-1, 2}, {2});
  relu_(b);
  CHECK(b.to_vector() == std::vector<double>{0, 2});
  clamp_(b, 0.5, 1.5);
  CHECK(b.to_vector() == std::vector<double>{0.5, 1.5});
}
