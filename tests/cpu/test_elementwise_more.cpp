// Issue 34's elementwise ops (ops/elementwise_more.h) on the CPU against reference values from
// PyTorch 1.13.1: the transcendental and error functions, trunc / frac / round with decimals (half
// to even), atan2, hypot, lerp, addcmul, addcdiv, clamp with tensor bounds, nan_to_num, isinf and
// isclose; integral and bool inputs, inf / NaN edge cases, the gradients at a few hand-checked
// points, and the errors bad input raises. Gradchecks live in the op table
// (tests/support/op_table_elementwise_more.cpp).
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
Tensor t(V v, DType d = DType::f64) {
  return from_vector(v, {int64_t(v.size())}, TensorOptions(d));
}

bool close(const V& a, const V& b, double tol = 1e-12) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      if (std::isnan(a[i]) != std::isnan(b[i])) return false;
      continue;
    }
    if (a[i] == b[i]) continue;
    if (!(std::abs(a[i] - b[i]) <= tol * std::max(1.0, std::abs(b[i])))) {
      MESSAGE("element " << i << ": " << a[i] << " vs " << b[i]);
      return false;
    }
  }
  return true;
}

const V kX = {-0.9, -0.5, -0.1, 0.0, 0.3, 0.75, 0.99};
const V kPos = {0.25, 0.5, 1.0, 2.0, 10.0, 1000.0};
const V kRound = {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -3.7, 3.7, 2.675};
const V kA = {1.0, -2.0, 0.0, -0.0, 3.0, -1.0};
const V kB = {2.0, 1.0, -1.0, -1.0, 0.0, -4.0};
const V kW = {0.0, 1.0, 0.5, -0.25, 2.0, 0.6};
}  // namespace

TEST_CASE("log2, log10 and the trigonometric and hyperbolic ops match PyTorch") {
  CHECK(close(log2(t(kPos)).to_vector(), {-2, -1, 0, 1, 3.3219280948873622, 9.965784284662087}));
  CHECK(close(t(kPos).log10().to_vector(),
              {-0.6020599913279624, -0.3010299956639812, 0, 0.3010299956639812, 1, 3}));
  const Tensor x = t(kX);
  CHECK(
      close(tan(x).to_vector(), {-1.2601582175503392, -0.54630248984379048, -0.10033467208545055, 0,
                                 0.30933624960962325, 0.93159645994407247, 1.5236767410179022}));
  CHECK(
      close(asin(x).to_vector(), {-1.1197695149986342, -0.52359877559829893, -0.1001674211615598, 0,
                                  0.30469265401539747, 0.848062078981481, 1.4292568534704693}));
  CHECK(close(x.acos().to_vector(),
              {2.6905658417935308, 2.0943951023931957, 1.6709637479564565, 1.5707963267948966,
               1.2661036727794992, 0.72273424781341555, 0.14153947332442729}));
  CHECK(close(atan(x).to_vector(),
              {-0.73281510178650655, -0.46364760900080609, -0.099668652491162038, 0,
               0.2914567944778671, 0.64350110879328437, 0.78037308006663586}));
  CHECK(
      close(sinh(x).to_vector(), {-1.0265167257081753, -0.52109530549374738, -0.10016675001984403,
                                  0, 0.3045202934471426, 0.82231673193582999, 1.1598288906636083}));
  CHECK(close(x.cosh().to_vector(), {1.4330863854487745, 1.1276259652063807, 1.0050041680558035, 1,
                                     1.0453385141288605, 1.2946832846768448, 1.5314055816856538}));
  CHECK(close(asinh(x).to_vector(),
              {-0.80886693565278245, -0.48121182505960347, -0.099834078899207576, 0,
               0.29567304756342244, 0.69314718055994529, 0.87428481218729492}));
  CHECK(close(acosh(t({1.0, 1.5, 2.0, 10.0})).to_vector(),
              {0, 0.96242365011920694, 1.3169578969248166, 2.9932228461263808}));
  CHECK(close(x.atanh().to_vector(),
              {-1.4722194895832204, -0.54930614433405478, -0.10033534773107558, 0,
               0.30951960420311175, 0.97295507452765662, 2.6466524123622457}));
  // Out of the domain: NaN, as PyTorch.
  CHECK(std::isnan(asin(t({1.5})).item()));
  CHECK(std::isnan(acosh(t({0.5})).item()));
  CHECK(atanh(t({1.0})).item() == kInf);
}

TEST_CASE("erf, erfc and erfinv match PyTorch in float64 and float32") {
  const Tensor x = t(kX);
  CHECK(
      close(erf(x).to_vector(), {-0.79690821242283216, -0.52049987781304652, -0.1124629160182849, 0,
                                 0.32862675945912739, 0.71115563365351508, 0.83850806955536983}));
  CHECK(
      close(x.erfc().to_vector(), {1.7969082124228322, 1.5204998778130465, 1.1124629160182851, 1,
                                   0.67137324054087255, 0.28884436634648486, 0.1614919304446302}));
  CHECK(close(erfinv(x).to_vector(),
              {-1.1630871536766743, -0.47693627620446988, -0.088855990494257686, 0,
               0.27246271472675437, 0.81341984759761865, 1.8213863677184483}));
  CHECK(close(erfinv(x.to(kFloat)).to_vector(),
              {-1.163087010383606, -0.47693628072738647, -0.088855989277362823, 0,
               0.27246272563934326, 0.8134198784828186, 1.8213866949081421},
              1e-6));
  const V edges = erfinv(t({1.0, -1.0, 1.5, kNaN})).to_vector();
  CHECK(edges[0] == kInf);
  CHECK(edges[1] == -kInf);
  CHECK(std::isnan(edges[2]));
  CHECK(std::isnan(edges[3]));
  // erfinv inverts erf.
  CHECK(close(erf(erfinv(x)).to_vector(), kX, 1e-14));
}

TEST_CASE("trunc, frac and round with decimals (half to even) match PyTorch") {
  const Tensor r = t(kRound);
  CHECK(close(trunc(r).to_vector(), {-2, -1, -0.0, 0, 1, 2, -3, 3, 2}));
  CHECK(std::signbit(trunc(r).to_vector()[2]));
  CHECK(close(r.fix().to_vector(), trunc(r).to_vector()));
  CHECK(close(frac(r).to_vector(), {-0.5, -0.5, -0.5, 0.5, 0.5, 0.5, -0.70000000000000018,
                                    0.70000000000000018, 0.67499999999999982}));
  CHECK(close(round(r).to_vector(), {-2, -2, -0.0, 0, 2, 2, -4, 4, 3}));
  CHECK(close(round(r, 1).to_vector(), {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -3.7000000000000002,
                                        3.7000000000000002, 2.7000000000000002}));
  CHECK(close(round(r * 10, -1).to_vector(), {-20, -20, -0.0, 0, 20, 20, -40, 40, 30}));
  CHECK(close((r.to(kFloat) * 1.234).round(2).to_vector(),
              {-3.0799999237060547, -1.8500000238418579, -0.62000000476837158, 0.62000000476837158,
               1.8500000238418579, 3.0799999237060547, -4.570000171661377, 4.570000171661377,
               3.2999999523162842},
              0));
  // Infinities and NaN pass through.
  const V special = round(t({kInf, -kInf, kNaN}), 2).to_vector();
  CHECK(special[0] == kInf);
  CHECK(special[1] == -kInf);
  CHECK(std::isnan(special[2]));
  CHECK(std::isnan(frac(t({kNaN})).item()));
  // Integral tensors: trunc and round(decimals=0) are copies in the input dtype.
  const Tensor i = from_vector({-3, 0, 7}, {3}, kInt64);
  CHECK(trunc(i).dtype() == kInt64);
  CHECK(trunc(i).to_vector() == V{-3, 0, 7});
  CHECK(round(i, 0).to_vector() == V{-3, 0, 7});
  CHECK(trunc(ones({2}, kBool)).dtype() == kBool);
  CHECK(sgn(t(kA)).to_vector() == V{1, -1, 0, 0, 1, -1});
}

TEST_CASE("atan2 and hypot match PyTorch, broadcast and promote integers to float32") {
  CHECK(close(atan2(t(kA), t(kB)).to_vector(),
              {0.46364760900080609, -1.1071487177940904, 3.1415926535897931, -3.1415926535897931,
               1.5707963267948966, -2.8966139904629289}));
  CHECK(close(t(kA).hypot(t(kB)).to_vector(),
              {2.2360679774997898, 2.2360679774997898, 1, 1, 3, 4.1231056256176606}));
  const Tensor i1 = from_vector({1, 5, 10, -3}, {4}, kInt64);
  const Tensor i2 = from_vector({1, 6, 12, -3}, {4}, kInt64);
  const Tensor a = atan2(i1, i2);
  CHECK(a.dtype() == kFloat);
  CHECK(close(a.to_vector(),
              {0.78539818525314331, 0.69473826885223389, 0.69473826885223389, -2.3561944961547852},
              1e-7));
  CHECK(log2(abs(i2)).dtype() == kFloat);
  CHECK(arctan2(t({1.0}).reshape({1, 1}), t({1.0, -1.0})).sizes() == Shape{1, 2});
  CHECK(hypot(t({3.0}), t({4.0, 0.0})).to_vector() == V{5, 3});
  CHECK(hypot(t({kInf}), t({kNaN})).item() == kInf);
}

TEST_CASE("lerp, addcmul, addcdiv and clamp with tensor bounds match PyTorch") {
  const Tensor a = t(kA), b = t(kB), w = t(kW);
  CHECK(close(lerp(a, b, 0.3).to_vector(),
              {1.3, -1.1000000000000001, -0.29999999999999999, -0.29999999999999999,
               2.1000000000000001, -1.8999999999999999}));
  CHECK(close(a.lerp(b, 0.7).to_vector(),
              {1.7, 0.099999999999999867, -0.69999999999999996, -0.69999999999999996,
               0.90000000000000013, -3.0999999999999996}));
  CHECK(close(lerp(a, b, w).to_vector(), {1, 1, -0.5, 0.25, -3, -2.7999999999999998}));
  CHECK(lerp(a, b, 1.0).to_vector() == kB);  // exact at the ends
  CHECK(lerp(a, b, 0.0).to_vector() == kA);
  CHECK(close(addcmul(a, b, w, 0.5).to_vector(), {1, -1.5, -0.25, 0.125, 3, -2.2000000000000002}));
  CHECK(close(a.addcdiv(w, b + 5, -2).to_vector(),
              {1, -2.3333333333333335, -0.25, 0.125, 2.2000000000000002, -2.2000000000000002}));
  CHECK(addcmul(from_vector({1, 2}, {2}, kInt64), from_vector({3, 4}, {2}, kInt64),
                from_vector({5, 6}, {2}, kInt64))
            .to_vector() == V{16, 26});
  CHECK(close(clamp(a, w - 1, w + 0.5).to_vector(), {0.5, 0, 0, -0.0, 2.5, -0.40000000000000002}));
  CHECK(a.clamp(std::nullopt, t({0.5})).to_vector() == V{0.5, -2, 0, 0, 0.5, -1});
  // NaN in the input or a bound propagates, as PyTorch's clamp(Tensor, Tensor).
  CHECK(std::isnan(clamp(t({kNaN}), t({0.0}), t({1.0})).item()));
  CHECK(std::isnan(clamp(t({0.5}), t({kNaN}), std::nullopt).item()));
  // Broadcast bounds: [2, 1] lower and [3] upper against a [2, 3] input.
  Tensor x = from_vector({-2, 0, 2, -2, 0, 2}, {2, 3}, kFloat64);
  Tensor lo = from_vector({-1, 1}, {2, 1}, kFloat64), hi = t({1.5, 1.5, 0.5});
  CHECK(clamp(x, lo, hi).to_vector() == V{-1, 0, 0.5, 1, 1, 0.5});
}

TEST_CASE("gradients of lerp and of clamp with tensor bounds reach every input") {
  Tensor a = t({0.0, 1.0}).set_requires_grad(true);
  Tensor b = t({2.0, 5.0}).set_requires_grad(true);
  Tensor w = t({0.25, 0.75}).set_requires_grad(true);
  lerp(a, b, w).sum().backward();
  CHECK(a.grad().to_vector() == V{0.75, 0.25});
  CHECK(b.grad().to_vector() == V{0.25, 0.75});
  CHECK(w.grad().to_vector() == V{2, 4});

  Tensor x = t({-2.0, 0.0, 2.0}).set_requires_grad(true);
  Tensor lo = t({-1.0}).set_requires_grad(true);
  Tensor hi = t({1.0, 1.0, 1.0}).set_requires_grad(true);
  clamp(x, lo, hi).sum().backward();
  CHECK(x.grad().to_vector() == V{0, 1, 0});
  CHECK(lo.grad().to_vector() == V{1});  // reduced over the broadcast dim
  CHECK(hi.grad().to_vector() == V{0, 0, 1});

  Tensor y = t({kNaN, kInf, 1.0}).set_requires_grad(true);
  nan_to_num(y).sum().backward();
  CHECK(y.grad().to_vector() == V{0, 0, 1});
}

TEST_CASE("nan_to_num, isinf and isfinite on inf and NaN") {
  const V s = {kNaN, kInf, -kInf, 1.5, -2.0};
  const double fmax = double(std::numeric_limits<float>::max());
  CHECK(nan_to_num(t(s, kFloat)).to_vector() == V{0, fmax, -fmax, 1.5, -2});
  CHECK(t(s).nan_to_num(1.0, 100.0, -100.0).to_vector() == V{1, 100, -100, 1.5, -2});
  CHECK(nan_to_num(t(s, kHalf)).to_vector() == V{0, 65504, -65504, 1.5, -2});
  const double bmax = nan_to_num(t({kInf}, kBFloat16)).item();
  CHECK(std::isfinite(bmax));
  CHECK(bmax == 3.3895313892515355e38);
  CHECK(nan_to_num(t(s), std::nullopt).to_vector()[0] == 0);  // nan=None means 0, as PyTorch
  CHECK(nan_to_num(from_vector({1, 2}, {2}, kInt32)).to_vector() == V{1, 2});
  CHECK(isinf(t(s)).dtype() == kBool);
  CHECK(isinf(t(s)).to_vector() == V{0, 1, 1, 0, 0});
  CHECK(t(s, kHalf).isinf().to_vector() == V{0, 1, 1, 0, 0});
  CHECK(isfinite(t(s)).to_vector() == V{0, 0, 0, 1, 1});
  CHECK(isinf(from_vector({1, 2}, {2}, kInt64)).to_vector() == V{0, 0});
  CHECK(isinf(ones({2}, kBool)).to_vector() == V{0, 0});
  CHECK(isinf(empty({0, 3}, kFloat)).sizes() == Shape{0, 3});
}

TEST_CASE("isclose matches PyTorch: tolerances, infinities, NaN and integers") {
  const Tensor c1 = t({1.0, 1.0, kNaN, kInf, -kInf, 1e-9, 100.0});
  const Tensor c2 = t({1.0 + 1e-6, 1.1, kNaN, kInf, kInf, 0.0, 100.001});
  CHECK(isclose(c1, c2).to_vector() == V{1, 0, 0, 1, 0, 1, 1});
  CHECK(c1.isclose(c2, 1e-5, 1e-8, true).to_vector() == V{1, 0, 1, 1, 0, 1, 1});
  CHECK(isclose(c1, c2, 0.2, 0.0).to_vector() == V{1, 1, 0, 1, 0, 0, 1});
  const Tensor i1 = from_vector({1, 5, 10, -3}, {4}, kInt64);
  const Tensor i2 = from_vector({1, 6, 12, -3}, {4}, kInt64);
  CHECK(isclose(i1, i2, 0.1, 0.5).to_vector() == V{1, 1, 0, 1});
  CHECK(isclose(t({1.0, 2.0}).reshape({2, 1}), t({1.0, 2.0})).to_vector() == V{1, 0, 0, 1});
  CHECK(allclose(t({1.0, 2.0}), t({1.0, 2.0 + 1e-9})));
}

TEST_CASE("integral and bool inputs of the floating unary ops compute in float32") {
  const Tensor i = from_vector({1, 2, 4}, {3}, kInt32);
  for (const Tensor& r : {log2(i), log10(i), tan(i), atan(i), sinh(i), erf(i), erfc(i)})
    CHECK(r.dtype() == kFloat);
  CHECK(log2(i).to_vector() == V{0, 1, 2});
  CHECK(erf(ones({1}, kBool)).dtype() == kFloat);
}

TEST_CASE("elementwise_more ops on empty, 0-dim and non-contiguous inputs") {
  CHECK(erfinv(empty({0}, kFloat)).numel() == 0);
  CHECK(hypot(empty({0, 2}, kFloat), ones({2}, kFloat)).sizes() == Shape{0, 2});
  CHECK(std::abs(tan(scalar_tensor(0.5, kFloat64)).item() - std::tan(0.5)) < 1e-15);
  Tensor m = arange(6, kFloat64).reshape({2, 3}).t();  // non-contiguous
  CHECK(close(asinh(m).to_vector(), asinh(m.contiguous()).to_vector(), 0));
  CHECK(close(atan2(m, m.flip({0})).to_vector(),
              atan2(m.contiguous(), m.flip({0}).contiguous()).to_vector(), 0));
}

TEST_CASE("elementwise_more errors name the op, the argument and the shapes") {
  const Tensor a = ones({2, 3}), b = ones({4});
  CHECK(contains(error_of([&] { hypot(a, b); }), "hypot"));
  CHECK(contains(error_of([&] { atan2(a, b); }), "[2, 3]"));
  CHECK(contains(error_of([&] { lerp(a, b, 0.5); }), "lerp"));
  const std::string lerp_int = error_of([&] { lerp(ones({2}, kInt64), ones({2}, kInt64), 0.5); });
  CHECK(contains(lerp_int, "lerp"));
  CHECK(contains(lerp_int, "'input'"));
  CHECK(contains(lerp_int, "int64"));
  CHECK(contains(error_of([&] { lerp(a, a, ones({5})); }), "lerp"));
  CHECK(contains(error_of([&] { addcmul(a, a, b); }), "addcmul"));
  const std::string cdiv =
      error_of([&] { addcdiv(ones({2}, kInt64), ones({2}, kInt64), ones({2}, kInt64)); });
  CHECK(contains(cdiv, "addcdiv"));
  CHECK(contains(cdiv, "tensor1"));
  CHECK(contains(error_of([&] { clamp(a, std::optional<Tensor>(), std::optional<Tensor>()); }),
                 "at least one"));
  CHECK(contains(error_of([&] { clamp(a, b, std::nullopt); }), "clamp"));
  const std::string frac_int = error_of([&] { frac(ones({2}, kInt32)); });
  CHECK(contains(frac_int, "frac"));
  CHECK(contains(frac_int, "int32"));
  CHECK(contains(error_of([&] { round(ones({2}, kInt64), 2); }), "decimals"));
  const std::string iso = error_of([&] { isclose(ones({2}), ones({2}, kFloat64)); });
  CHECK(contains(iso, "isclose"));
  CHECK(contains(iso, "same dtype"));
  CHECK(contains(error_of([&] { isclose(a, a, -1.0); }), "rtol"));
  CHECK(contains(error_of([&] { erf(Tensor()); }), "erf: argument 'input'"));
}
