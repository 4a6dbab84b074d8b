// CUDA vs CPU for issue 34's elementwise and random ops (ops/elementwise_more.h): the new unary
// kernel ops (transcendental, error functions, rounding, nan_to_num, isinf) and hypot / atan2 on
// the binary kernel over awkward shapes (long: the vector path and its tail; transposed views;
// broadcasting; empty; one element; 0-dim) in float32, float64, float16 and bfloat16; the
// composites (lerp, addcmul, addcdiv, clamp with tensor bounds, isclose); and the random ops:
// same-seed reproducibility on the GPU, agreement with the CPU kernels (which draw the same Philox
// numbers), statistics, and multinomial's distinct indices. The op-table rows of these ops are
// compared by test_ops_parity.cpp. Skips without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include "ember/ember.h"

using namespace ember;
using V = std::vector<double>;

namespace {

struct ShapeCase {
  const char* name;
  Shape a, b;
  bool transposed = false;
};
const std::vector<ShapeCase>& shape_cases() {
  static const std::vector<ShapeCase> cases = {
      {"long", {1000003}, {1000003}},
      {"broadcast", {7, 1, 5}, {3, 1}},
      {"broadcast_scalar", {4099}, {}},
      {"transposed", {37, 19}, {37, 19}, true},
      {"empty", {0, 3}, {3}},
      {"one", {1}, {1}},
      {"zero_dim", {}, {}},
  };
  return cases;
}

// Uniform values in [low, high) made on the CPU in float64, then converted to `dtype` (so both
// devices see the same rounded inputs).
Tensor values(const Shape& s, DType dtype, uint64_t seed, bool transposed, double low,
              double high) {
  Generator gen(Device::cpu(), seed);
  Shape dense = s;
  if (transposed && s.size() == 2) std::swap(dense[0], dense[1]);
  Tensor v = rand(dense, TensorOptions(DType::f64), &gen) * (high - low) + low;
  if (transposed && s.size() == 2) v = v.t();
  return v.to(dtype);
}

// The GPU copy of a CPU input, strided like it.
Tensor to_gpu(const Tensor& t, bool transposed) {
  if (transposed && t.dim() == 2) return t.t().contiguous().to(Device::cuda()).t();
  return t.to(Device::cuda());
}

double rtol_for(DType d) {
  switch (d) {
    case DType::f64:
      return 1e-12;
    case DType::f32:
      return 2e-6;
    default:
      return 1e-2;  // 16-bit: one rounding of a float result may differ
  }
}

// Same shape and dtype, values close (NaN where the other has NaN, infinities equal).
void check_close(const Tensor& gpu, const Tensor& cpu, double rtol, double atol) {
  REQUIRE(gpu.device().is_cuda());
  CHECK(gpu.dtype() == cpu.dtype());
  REQUIRE(gpu.sizes() == cpu.sizes());
  if (cpu.numel() == 0) return;
  const Tensor g = gpu.cpu();
  if (cpu.dtype() == DType::boolean || !is_floating(cpu.dtype())) {
    CHECK(g.equal(cpu));
    return;
  }
  const Tensor ok = isclose(g.to(kFloat64), cpu.to(kFloat64), rtol, atol, true);
  const double bad = double(logical_not(ok).sum().item());
  if (bad > 0) MESSAGE(bad << " of " << cpu.numel() << " elements differ");
  CHECK(bad == 0);
}

using UnaryFn = std::function<Tensor(const Tensor&)>;
using BinaryFn = std::function<Tensor(const Tensor&, const Tensor&)>;

void check_unary(const char* op, const UnaryFn& f, double low, double high,
                 std::vector<DType> dtypes = {DType::f32, DType::f64, DType::f16, DType::bf16},
                 double rtol_scale = 1) {
  uint64_t seed = 101;
  for (DType d : dtypes)
    for (const ShapeCase& sc : shape_cases()) {
      CAPTURE(op);
      CAPTURE(sc.name);
      CAPTURE(dtype_name(d));
      const Tensor a = values(sc.a, d, seed++, sc.transposed, low, high);
      check_close(f(to_gpu(a, sc.transposed)), f(a), rtol_for(d) * rtol_scale,
                  d == DType::f64 ? 1e-14 : (d == DType::f32 ? 1e-6 : 1e-2));
    }
}

void check_binary(const char* op, const BinaryFn& f, double low, double high,
                  std::vector<DType> dtypes = {DType::f32, DType::f64, DType::f16, DType::bf16}) {
  uint64_t seed = 202;
  for (DType d : dtypes)
    for (const ShapeCase& sc : shape_cases()) {
      CAPTURE(op);
      CAPTURE(sc.name);
      CAPTURE(dtype_name(d));
      const Tensor a = values(sc.a, d, seed++, sc.transposed, low, high);
      const Tensor b = values(sc.b, d, seed++, sc.transposed, low, high);
      check_close(f(to_gpu(a, sc.transposed), to_gpu(b, sc.transposed)), f(a, b), rtol_for(d),
                  d == DType::f64 ? 1e-14 : (d == DType::f32 ? 1e-6 : 1e-2));
    }
}

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

TEST_CASE("transcendental unary ops on CUDA match the CPU" * doctest::skip(!cuda::is_available())) {
  check_unary(
      "log2", [](const Tensor& x) { return log2(x); }, 0.01, 100);
  check_unary(
      "log10", [](const Tensor& x) { return log10(x); }, 0.01, 100);
  check_unary(
      "tan", [](const Tensor& x) { return tan(x); }, -1.4, 1.4,
      {DType::f32, DType::f64, DType::f16, DType::bf16}, 4);
  check_unary(
      "asin", [](const Tensor& x) { return asin(x); }, -1, 1);
  check_unary(
      "acos", [](const Tensor& x) { return acos(x); }, -1, 1);
  check_unary(
      "atan", [](const Tensor& x) { return atan(x); }, -10, 10);
  check_unary(
      "sinh", [](const Tensor& x) { return sinh(x); }, -5, 5);
  check_unary(
      "cosh", [](const Tensor& x) { return cosh(x); }, -5, 5);
  check_unary(
      "asinh", [](const Tensor& x) { return asinh(x); }, -10, 10);
  check_unary(
      "acosh", [](const Tensor& x) { return acosh(x); }, 1, 10);
  check_unary(
      "atanh", [](const Tensor& x) { return atanh(x); }, -0.99, 0.99);
  check_unary(
      "erf", [](const Tensor& x) { return erf(x); }, -3, 3);
  check_unary(
      "erfc", [](const Tensor& x) { return erfc(x); }, -3, 3);
  // erfinv: our CPU scheme against CUDA's erfinvf / erfinv (both within a few ulp).
  check_unary(
      "erfinv", [](const Tensor& x) { return erfinv(x); }, -0.999, 0.999,
      {DType::f32, DType::f64, DType::f16, DType::bf16}, 10);
  // Out-of-domain inputs give NaN on both.
  check_unary(
      "asin_nan", [](const Tensor& x) { return asin(x); }, 1.5, 3);
  // Integral inputs compute in float32.
  Tensor i = from_vector({1, 2, 3, 40}, {4}, kInt32);
  check_close(log2(i.to(Device::cuda())), log2(i), 1e-6, 0);
  check_close(erf(i.to(Device::cuda())), erf(i), 1e-6, 0);
}

TEST_CASE("rounding ops, nan_to_num and isinf on CUDA match the CPU" *
          doctest::skip(!cuda::is_available())) {
  const std::vector<DType> all_floats = {DType::f32, DType::f64, DType::f16, DType::bf16};
  check_unary(
      "trunc", [](const Tensor& x) { return trunc(x); }, -50, 50);
  check_unary(
      "frac", [](const Tensor& x) { return frac(x); }, -50, 50);
  check_unary("round_decimals", [](const Tensor& x) { return round(x, 2); }, -50, 50,
              {DType::f32, DType::f64});
  check_unary("round_negative_decimals", [](const Tensor& x) { return round(x, -1); }, -500, 500,
              {DType::f32, DType::f64});
  check_unary(
      "isinf", [](const Tensor& x) { return isinf(x); }, -1, 1);
  // trunc on integers: a copy.
  Tensor ints = from_vector({-3, 0, 7}, {3}, kInt64);
  check_close(trunc(ints.to(Device::cuda())), ints, 0, 0);
  // Special values, exact in every floating dtype.
  for (DType d : all_floats) {
    CAPTURE(dtype_name(d));
    const Tensor s = from_vector({kNaN, kInf, -kInf, 1.5, -2.5, 0.5}, {6}, d);
    const Tensor g = s.to(Device::cuda());
    check_close(nan_to_num(g), nan_to_num(s), 0, 0);
    check_close(nan_to_num(g, 1.0, 7.0, -7.0), nan_to_num(s, 1.0, 7.0, -7.0), 0, 0);
    check_close(isinf(g), isinf(s), 0, 0);
    check_close(isfinite(g), isfinite(s), 0, 0);
    check_close(round(g), round(s), 0, 0);  // half to even
    check_close(trunc(g), trunc(s), 0, 0);
    // A transposed view of special values.
    const Tensor m = from_vector({kNaN, kInf, 1, -kInf, 2, 3}, {2, 3}, d).t();
    check_close(nan_to_num(m.t().contiguous().to(Device::cuda()).t()), nan_to_num(m), 0, 0);
  }
  check_close(isinf(from_vector({1, 2}, {2}, kInt64).to(Device::cuda())),
              from_vector({0, 0}, {2}, kBool), 0, 0);
}

TEST_CASE("atan2 and hypot on CUDA match the CPU" * doctest::skip(!cuda::is_available())) {
  check_binary(
      "atan2", [](const Tensor& a, const Tensor& b) { return atan2(a, b); }, -3, 3);
  check_binary(
      "hypot", [](const Tensor& a, const Tensor& b) { return hypot(a, b); }, -3, 3);
  const Tensor a = from_vector({kInf, kNaN, 0, -0.0}, {4}, kFloat32);
  const Tensor b = from_vector({kNaN, 1, -0.0, -1}, {4}, kFloat32);
  check_close(hypot(a.to(Device::cuda()), b.to(Device::cuda())), hypot(a, b), 0, 0);
  check_close(atan2(a.to(Device::cuda()), b.to(Device::cuda())), atan2(a, b), 1e-6, 0);
}

TEST_CASE("lerp, addcmul, addcdiv, clamp with tensor bounds and isclose on CUDA match the CPU" *
          doctest::skip(!cuda::is_available())) {
  check_binary(
      "lerp_scalar", [](const Tensor& a, const Tensor& b) { return lerp(a, b, 0.3); }, -2, 2);
  check_binary(
      "lerp_tensor", [](const Tensor& a, const Tensor& b) { return lerp(a, b, (a + b) * 0.25); },
      -2, 2);
  check_binary(
      "addcmul", [](const Tensor& a, const Tensor& b) { return addcmul(a, b, a, -0.5); }, -2, 2);
  check_binary(
      "addcdiv", [](const Tensor& a, const Tensor& b) { return addcdiv(b, a, b.abs() + 1, 2); }, -2,
      2);
  check_binary(
      "clamp_tensor", [](const Tensor& a, const Tensor& b) { return clamp(a, b - 0.5, b + 0.5); },
      -2, 2);
  check_binary(
      "isclose",
      [](const Tensor& a, const Tensor& b) { return isclose(a, a + b * 1e-3, 1e-3, 1e-4); }, -2, 2,
      {DType::f32, DType::f64});
}

TEST_CASE("random fills on CUDA: seeds reproduce, the CPU draws agree, statistics hold" *
          doctest::skip(!cuda::is_available())) {
  using Fill = void (*)(Tensor&, Generator*);
  const std::vector<std::pair<const char*, Fill>> fills = {
      {"exponential", [](Tensor& t, Generator* g) { exponential_(t, 2.0, g); }},
      {"cauchy", [](Tensor& t, Generator* g) { cauchy_(t, 1.0, 0.5, g); }},
      {"log_normal", [](Tensor& t, Generator* g) { log_normal_(t, 0.5, 0.25, g); }},
      {"geometric", [](Tensor& t, Generator* g) { geometric_(t, 0.25, g); }},
  };
  for (const auto& [name, fill] : fills)
    for (DType d : {DType::f32, DType::f64, DType::bf16}) {
      // CAPTURE takes a variable, not a structured binding (clang 14).
      const auto captured_name = name;
      CAPTURE(captured_name);
      CAPTURE(dtype_name(d));
      Generator g1(Device::cuda(), 77), g2(Device::cuda(), 77), gc(Device::cpu(), 77);
      Tensor a = empty({100003}, TensorOptions(d).with_device(Device::cuda()));
      Tensor b = empty({100003}, TensorOptions(d).with_device(Device::cuda()));
      Tensor c = empty({100003}, TensorOptions(d));
      fill(a, &g1);
      fill(b, &g2);
      fill(c, &gc);
      CHECK(a.cpu().equal(b.cpu()));
      // Same Philox numbers, the same transform in double; log / tan may differ in the last ulp,
      // and geometric's ceil may then (very rarely) step.
      const Tensor close = isclose(a.cpu().to(kFloat64), c.to(kFloat64), 1e-5, 1e-6, true);
      CHECK(double(logical_not(close).sum().item()) <= 2);
      // A strided (transposed) GPU output gets the values in logical order, as on the CPU.
      Generator g3(Device::cuda(), 77);
      Tensor t = empty({103, 970}, TensorOptions(d).with_device(Device::cuda())).t();
      fill(t, &g3);
      const Tensor first = a.narrow(0, 0, 970 * 103).reshape({970, 103});
      CHECK(t.cpu().equal(first.cpu()));
    }
  Generator g(Device::cuda(), 5);
  Tensor e = empty({1 << 20}, TensorOptions(kFloat64).with_device(Device::cuda()));
  exponential_(e, 4.0, &g);
  CHECK(mean(e).item() == doctest::Approx(0.25).epsilon(0.01));
  CHECK(min(e).item() >= 0);
  Tensor empty_gpu = empty({0}, TensorOptions(kFloat32).with_device(Device::cuda()));
  CHECK(cauchy_(empty_gpu).numel() == 0);
}

TEST_CASE("normal with tensor mean / std on CUDA: reproducible, right statistics, gradients" *
          doctest::skip(!cuda::is_available())) {
  const auto cuda_f64 = TensorOptions(kFloat64).with_device(Device::cuda());
  Tensor mean = full({1 << 18}, 3.0, cuda_f64);
  Tensor stdv = full({1}, 0.5, cuda_f64);
  Generator g1(Device::cuda(), 9), g2(Device::cuda(), 9);
  Tensor a = normal(mean, stdv, &g1), b = normal(mean, stdv, &g2);
  CHECK(a.device().is_cuda());
  CHECK(a.cpu().equal(b.cpu()));
  CHECK(ember::mean(a).item() == doctest::Approx(3.0).epsilon(0.01));
  CHECK(ember::std(a).item() == doctest::Approx(0.5).epsilon(0.01));
  Tensor m = zeros({4}, cuda_f64).set_requires_grad(true);
  Tensor s = ones({4}, cuda_f64).set_requires_grad(true);
  Tensor y = normal(m, s, &g1);
  y.sum().backward();
  CHECK(m.grad().cpu().to_vector() == V{1, 1, 1, 1});
  CHECK(s.grad().cpu().equal(y.detach().cpu()));
}

TEST_CASE("poisson on CUDA: reproducible, agrees with the CPU, right statistics" *
          doctest::skip(!cuda::is_available())) {
  for (double rate : {0.5, 4.0, 10.0, 60.0, 5000.0})
    for (DType d : {DType::f32, DType::f64, DType::bf16}) {
      CAPTURE(rate);
      CAPTURE(dtype_name(d));
      const int64_t n = 1 << 17;
      Tensor rates_cpu = full({n}, rate, TensorOptions(d));
      Tensor rates = rates_cpu.to(Device::cuda());
      Generator g1(Device::cuda(), 31), g2(Device::cuda(), 31), gc(Device::cpu(), 31);
      Tensor a = poisson(rates, &g1), b = poisson(rates, &g2), c = poisson(rates_cpu, &gc);
      CHECK(a.dtype() == d);
      CHECK(a.cpu().equal(b.cpu()));
      // The same uniforms; log / lgamma may differ in the last ulp at a rejection boundary.
      CHECK(double(ne(a.cpu(), c).sum().item()) <= double(n) * 1e-4);
      if (d == DType::bf16) continue;  // counts above 256 round in bf16
      const Tensor a64 = a.to(kFloat64);
      CHECK(mean(a64).item() == doctest::Approx(rate).epsilon(5 * std::sqrt(rate / n) / rate));
      CHECK(var(a64).item() == doctest::Approx(rate).epsilon(0.03));
    }
  Tensor mixed = from_vector({0, 1, 100, 0.25}, {2, 2}, kFloat32).to(Device::cuda()).t();
  CHECK(poisson(mixed).sizes() == Shape{2, 2});
  CHECK(poisson(empty({0}, TensorOptions(kFloat32).with_device(Device::cuda()))).numel() == 0);
}

TEST_CASE("multinomial on CUDA: distinct indices without replacement, frequencies with it" *
          doctest::skip(!cuda::is_available())) {
  const auto cuda_f32 = TensorOptions(kFloat32).with_device(Device::cuda());
  Generator g(Device::cuda(), 13);
  // Without replacement: each row's indices are distinct and skip the zero weights.
  Tensor probs = from_vector({0.1, 0, 0.3, 0.2, 0.4, 0, 1, 1, 1, 1, 1, 1}, {2, 6}, cuda_f32);
  for (int rep = 0; rep < 50; ++rep) {
    const V v = multinomial(probs, 4, false, &g).cpu().to_vector();
    CHECK(std::set<double>(v.begin(), v.begin() + 4) == std::set<double>{0, 2, 3, 4});
    CHECK(std::set<double>(v.begin() + 4, v.end()).size() == 4);
  }
  Tensor many = rand({300, 1000}, cuda_f32, &g) + 0.01;  // no zero weights
  Tensor picks = multinomial(many, 1000, false, &g);     // a permutation per row
  CHECK(std::get<0>(sort(picks, 1)).cpu().equal(arange(1000, kInt64).expand({300, 1000})));
  // With replacement: frequencies follow the weights; zero weights never drawn.
  Tensor w =
      from_vector({0, 1, 0, 3, 0, 4}, {6}, TensorOptions(kFloat64).with_device(Device::cuda()));
  const int64_t n = 1 << 20;
  Tensor s = multinomial(w, n, true, &g);
  CHECK(s.sizes() == Shape{n});
  const Tensor counts = stack({eq(s, 0), eq(s, 1), eq(s, 2), eq(s, 3), eq(s, 4), eq(s, 5)})
                            .to(kFloat64)
                            .sum({1})
                            .cpu();
  const V freq = (counts / double(n)).to_vector();
  CHECK(freq[0] == 0);
  CHECK(freq[2] == 0);
  CHECK(freq[4] == 0);
  CHECK(freq[1] == doctest::Approx(0.125).epsilon(0.02));
  CHECK(freq[5] == doctest::Approx(0.5).epsilon(0.01));
  // Seeds reproduce, and the CPU kernel (same uniforms, same CDF search) agrees.
  Generator g1(Device::cuda(), 4), g2(Device::cuda(), 4), gc(Device::cpu(), 4);
  Tensor rows = rand({64, 33}, TensorOptions(kFloat64), &gc);
  Generator gc2(Device::cpu(), 4);
  Tensor a = multinomial(rows.to(Device::cuda()), 17, true, &g1);
  Tensor b = multinomial(rows.to(Device::cuda()), 17, true, &g2);
  Tensor c = multinomial(rows, 17, true, &gc2);
  CHECK(a.cpu().equal(b.cpu()));
  CHECK(double(ne(a.cpu(), c).sum().item()) <= 2);  // a CDF summed in another order may differ
  CHECK(multinomial(rows.to(Device::cuda()), 1, false, &g1).sizes() == Shape{64, 1});
}
