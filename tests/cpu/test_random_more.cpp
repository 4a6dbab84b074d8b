// Issue 34's random ops (ops/elementwise_more.h) on the CPU: exponential_, geometric_, cauchy_ and
// log_normal_ fills, normal with tensor mean / std (values and gradients), poisson (small and
// large rates, the two sampling schemes) and multinomial with and without replacement. Statistical
// checks use many samples and tolerances of several standard errors; seeds must reproduce, and bad
// input raises errors that name the op and argument.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "ember/ember.h"
#include "support/errors.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
using V = std::vector<double>;

namespace {
struct Moments {
  double mean, var;
};
Moments moments(const Tensor& t) {
  const V v = t.to_vector();
  double m = 0;
  for (double x : v) m += x;
  m /= double(v.size());
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return {m, s / double(v.size() - 1)};
}
double quantile(const Tensor& t, double q) {
  V v = t.to_vector();
  std::sort(v.begin(), v.end());
  return v[size_t(q * double(v.size() - 1))];
}
constexpr int64_t kN = 200000;
}  // namespace

TEST_CASE("exponential_, geometric_, cauchy_ and log_normal_ have the right statistics") {
  Generator gen(Device::cpu(), 1234);
  Tensor e = empty({kN}, kFloat64);
  exponential_(e, 2.0, &gen);
  Moments m = moments(e);
  CHECK(m.mean == doctest::Approx(0.5).epsilon(0.01));
  CHECK(m.var == doctest::Approx(0.25).epsilon(0.03));
  CHECK(min(e).item() >= 0);

  Tensor g = empty({kN}, kFloat32);
  g.geometric_(0.25, &gen);
  m = moments(g);
  CHECK(m.mean == doctest::Approx(4.0).epsilon(0.02));
  CHECK(m.var == doctest::Approx(12.0).epsilon(0.04));
  CHECK(min(g).item() >= 1);
  CHECK(equal(g, g.round()));

  Tensor c = empty({kN}, kFloat64);
  cauchy_(c, 1.0, 3.0, &gen);
  CHECK(quantile(c, 0.5) == doctest::Approx(1.0).epsilon(0.05));
  CHECK(quantile(c, 0.25) == doctest::Approx(-2.0).epsilon(0.05));
  CHECK(quantile(c, 0.75) == doctest::Approx(4.0).epsilon(0.05));

  Tensor l = empty({kN}, kFloat64);
  l.log_normal_(0.5, 0.25, &gen);
  CHECK(min(l).item() > 0);
  m = moments(log(l));
  CHECK(m.mean == doctest::Approx(0.5).epsilon(0.01));
  CHECK(std::sqrt(m.var) == doctest::Approx(0.25).epsilon(0.02));

  // Defaults as PyTorch: exponential_(1), cauchy_(0, 1), log_normal_(1, 2).
  Tensor d = empty({kN}, kFloat64);
  d.exponential_();
  CHECK(moments(d).mean == doctest::Approx(1.0).epsilon(0.02));
  d.log_normal_();
  CHECK(moments(log(d)).mean == doctest::Approx(1.0).epsilon(0.03));
}

TEST_CASE("the distribution fills reproduce with a seed, fill 16-bit and strided tensors") {
  for (auto fill : {+[](Tensor&t, Generator*g) { exponential_(t, 1.5, g); },
                    +[](Tensor&t, Generator*g) { geometric_(t, 0.3, g); },
                    +[](Tensor&t, Generator*g) { cauchy_(t, 0, 1, g); },
                    +[](Tensor&t, Generator*g) { log_normal_(t, 0, 1, g); }}) {
    Generator g1(Device::cpu(), 7), g2(Device::cpu(), 7), g3(Device::cpu(), 8);
    Tensor a = empty({5, 7}, kFloat32), b = empty({5, 7}, kFloat32), c = empty({5, 7}, kFloat32);
    fill(a, &g1);
    fill(b, &g2);
    fill(c, &g3);
    CHECK(equal(a, b));
    CHECK_FALSE(equal(a, c));
    fill(a, &g1);  // the generator advances
    CHECK_FALSE(equal(a, b));
    // A transposed view gets the values its dense layout would, in logical order.
    Generator g4(Device::cpu(), 7);
    Tensor t = empty({7, 5}, kFloat32).t();
    fill(t, &g4);
    CHECK(equal(t, b));
    for (DType d : {kHalf, kBFloat16}) {
      Tensor h = empty({64}, d);
      fill(h, &g1);
      CHECK(all(isfinite(h) | isinf(h)).item());  // cauchy may overflow 16 bits
    }
  }
  Tensor empty_t = empty({0}, kFloat32);
  CHECK(exponential_(empty_t).numel() == 0);
}

TEST_CASE("normal with tensor mean and std: broadcasting, statistics and gradients") {
  Generator gen(Device::cpu(), 99);
  Tensor mean = from_vector({-3, 0, 5}, {3}, kFloat64);
  Tensor stdv = from_vector({0.5, 2}, {2, 1}, kFloat64);
  Tensor many_mean = mean.expand({kN / 4, 2, 3}).contiguous();
  Tensor out = normal(many_mean, stdv, &gen);
  CHECK(out.sizes() == Shape{kN / 4, 2, 3});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      Moments m = moments(out.select(1, i).select(1, j).contiguous());
      CHECK(m.mean == doctest::Approx(mean.to_vector()[size_t(j)]).epsilon(0.01).scale(1));
      CHECK(std::sqrt(m.var) == doctest::Approx(stdv.to_vector()[size_t(i)]).epsilon(0.02));
    }
  CHECK(normal(mean, 0.0, &gen).to_vector() == V{-3, 0, 5});  // std 0: the mean itself
  CHECK(normal(2.0, from_vector({1, 1}, {2}, kFloat32), &gen).dtype() == kFloat32);

  Generator g1(Device::cpu(), 5), g2(Device::cpu(), 5);
  CHECK(equal(normal(mean, stdv, &g1), normal(mean, stdv, &g2)));

  // d out / d mean = 1, d out / d std = (out - mean) / std.
  Tensor m = from_vector({1, 2}, {2}, kFloat64).set_requires_grad(true);
  Tensor s = from_vector({0.5, 3}, {2}, kFloat64).set_requires_grad(true);
  Tensor y = normal(m, s, &gen);
  y.sum().backward();
  CHECK(m.grad().to_vector() == V{1, 1});
  const V yv = y.detach().to_vector();
  CHECK(s.grad().to_vector()[0] == doctest::Approx((yv[0] - 1) / 0.5));
  CHECK(s.grad().to_vector()[1] == doctest::Approx((yv[1] - 2) / 3));
}

TEST_CASE("poisson: small and large rates, zero rate, dtypes and seeds") {
  Generator gen(Device::cpu(), 2024);
  for (double rate : {0.7, 3.0, 9.5, 10.0, 42.0, 1000.0}) {
    CAPTURE(rate);
    Tensor p = poisson(full({kN}, rate, kFloat64), &gen);
    Moments m = moments(p);
    CHECK(m.mean == doctest::Approx(rate).epsilon(4 * std::sqrt(rate / double(kN)) / rate));
    CHECK(m.var == doctest::Approx(rate).epsilon(0.03));
    CHECK(min(p).item() >= 0);
    CHECK(equal(p, p.round()));
  }
  Tensor rates = from_vector({0, 1, 2, 0}, {2, 2}, kFloat32);
  Tensor p = poisson(rates, &gen);
  CHECK(p.dtype() == kFloat32);
  CHECK(p.sizes() == Shape{2, 2});
  CHECK(p.to_vector()[0] == 0);
  CHECK(p.to_vector()[3] == 0);
  CHECK(poisson(full({8}, 4.0, kBFloat16), &gen).dtype() == kBFloat16);
  CHECK(poisson(empty({0, 3}, kFloat32)).sizes() == Shape{0, 3});
  Generator g1(Device::cpu(), 3), g2(Device::cpu(), 3);
  Tensor r = full({100}, 25.0, kFloat32);
  CHECK(equal(poisson(r, &g1), poisson(r, &g2)));
}

TEST_CASE("multinomial without replacement draws distinct indices, never zero weights") {
  Generator gen(Device::cpu(), 11);
  Tensor probs = from_vector({0.1, 0, 0.3, 0.2, 0.4, 0, 1, 1, 1, 1, 1, 1}, {2, 6}, kFloat32);
  for (int rep = 0; rep < 200; ++rep) {
    Tensor s = multinomial(probs, 4, false, &gen);
    REQUIRE(s.sizes() == Shape{2, 4});
    CHECK(s.dtype() == kInt64);
    const V v = s.to_vector();
    std::set<double> row0(v.begin(), v.begin() + 4), row1(v.begin() + 4, v.end());
    CHECK(row0 == std::set<double>{0, 2, 3, 4});  // the four nonzero categories
    CHECK(row1.size() == 4);
  }
  // First-draw frequencies follow the weights.
  Tensor w = from_vector({1, 2, 3, 4}, {4}, kFloat64);
  Tensor counts = zeros({4}, kFloat64);
  const int draws = 20000;
  for (int i = 0; i < draws / 1000; ++i) {
    Tensor rows = w.expand({1000, 4}).contiguous();
    Tensor first = multinomial(rows, 1, false, &gen).squeeze(1);
    for (int c = 0; c < 4; ++c) counts.select(0, c).add_(eq(first, c).sum().to(kFloat64));
  }
  for (int c = 0; c < 4; ++c)
    CHECK(counts.to_vector()[size_t(c)] / draws == doctest::Approx((c + 1) / 10.0).epsilon(0.06));
  // 1-D input, all categories: a permutation.
  Tensor perm = multinomial(ones({9}), 9, false, &gen);
  CHECK(perm.sizes() == Shape{9});
  CHECK(equal(std::get<0>(sort(perm)), arange(9, kInt64)));
}

TEST_CASE("multinomial with replacement: frequencies, zero weights and seeds") {
  Generator gen(Device::cpu(), 12);
  Tensor probs = from_vector({0, 1, 0, 3, 0, 4}, {6}, kFloat64);  // unnormalized
  Tensor s = multinomial(probs, kN, true, &gen);
  REQUIRE(s.sizes() == Shape{kN});
  const V v = s.to_vector();
  V freq(6, 0);
  for (double x : v) freq[size_t(x)] += 1.0 / double(kN);
  CHECK(freq[0] == 0);
  CHECK(freq[2] == 0);
  CHECK(freq[4] == 0);
  CHECK(freq[1] == doctest::Approx(0.125).epsilon(0.03));
  CHECK(freq[3] == doctest::Approx(0.375).epsilon(0.02));
  CHECK(freq[5] == doctest::Approx(0.5).epsilon(0.02));
  Tensor two = multinomial(from_vector({1, 0, 0, 1}, {2, 2}, kFloat32), 5, true, &gen);
  CHECK(two.to_vector() == V{0, 0, 0, 0, 0, 1, 1, 1, 1, 1});
  Generator g1(Device::cpu(), 4), g2(Device::cpu(), 4);
  CHECK(equal(probs.multinomial(50, true, &g1), probs.multinomial(50, true, &g2)));
  CHECK(equal(multinomial(probs, 3, false, &g1), multinomial(probs, 3, false, &g2)));
}

TEST_CASE("random_more errors name the op and the argument") {
  Tensor f = empty({4}, kFloat32);
  CHECK(contains(error_of([&] { exponential_(f, 0.0); }), "lambd"));
  CHECK(contains(error_of([&] { geometric_(f, 1.0); }), "geometric_: p"));
  CHECK(contains(error_of([&] { cauchy_(f, 0, -1); }), "sigma"));
  CHECK(contains(error_of([&] { log_normal_(f, 0, 0); }), "std"));
  Tensor i = empty({4}, kInt64);
  const std::string int_fill = error_of([&] { exponential_(i); });
  CHECK(contains(int_fill, "exponential_"));
  CHECK(contains(int_fill, "int64"));
  CHECK(contains(error_of([&] { normal(ones({2}), from_vector({1, -1}, {2})); }), "non-negative"));
  CHECK(contains(error_of([&] { normal(ones({2}), ones({3})); }), "normal"));
  CHECK(contains(error_of([&] { poisson(from_vector({1, -2}, {2})); }), "non-negative"));
  CHECK(contains(error_of([&] { poisson(ones({2}, kInt64)); }), "poisson"));
  CHECK(contains(error_of([&] { multinomial(ones({2, 2, 2}), 1); }), "1-D or 2-D"));
  CHECK(contains(error_of([&] { multinomial(ones({3}), 4); }), "without replacement"));
  CHECK(contains(error_of([&] { multinomial(from_vector({1, 0, 0}, {3}), 2); }), "nonzero"));
  CHECK(contains(error_of([&] {
                   multinomial(from_vector({1, -1}, {2}), 1, true);
                 }),
                 "non-negative"));
  CHECK(contains(error_of([&] { multinomial(zeros({2}), 1, true); }), "sums to 0"));
  CHECK(contains(error_of([&] { multinomial(ones({2}), 0); }), "num_samples"));
  CHECK(contains(error_of([&] { multinomial(ones({2}, kInt64), 1); }), "floating"));
}
