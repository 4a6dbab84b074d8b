// CUDA vs CPU for the reductions and scans of ops/reduction_more.h: cumsum / cumprod / cummax /
// cummin (scan_kernel's column and block-per-row paths) over awkward shapes (empty, one element,
// rows of 1, 33, 4097 and 70000 elements, dims other than the last, non-contiguous inputs) in
// f32 / f64 / bf16 / integers, ties and NaN for cummax / cummin, gradients through
// check_gpu_parity; any / all / count_nonzero / aminmax / var_mean / norms on the GPU; sort /
// argsort (every dtype, ties, NaN, signed zeros), topk, kthvalue, median and nanmedian, exactly
// equal to the CPU (both sorts are stable). Every case skips without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ember/ember.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "support/compare.h"
#include "support/gpu_parity.h"

using namespace ember;
using namespace ember::testing;

namespace {
const Device kGpu = Device::cuda(0);

struct ScanCase {
  Shape shape;
  int64_t dim;
  bool transposed;  // scan a transposed (non-contiguous) view of the input
};

std::vector<ScanCase> scan_cases() {
  return {{{0}, 0, false},        {{1}, 0, false},        {{4, 0, 3}, 1, false},
          {{7, 1}, 1, false},     {{5, 33}, 1, false},    {{3, 4097}, -1, false},
          {{70000}, 0, false},    {{2, 70000}, 1, false}, {{33, 5, 7}, 0, false},
          {{33, 5, 7}, 1, false}, {{40, 33}, 0, true},    {{40, 70}, 1, true},
          {{64, 300}, 0, false}};
}

// Values near 1 for cumprod (so long rows neither overflow nor vanish), normal otherwise; drawn
// on the CPU and rounded to `dtype` there, so both devices scan identical values.
Tensor scan_input(const ScanCase& c, DType dtype, bool for_prod, uint64_t seed) {
  Generator gen(Device::cpu(), seed);
  Shape s = c.shape;
  if (c.transposed) std::swap(s[0], s[1]);
  Tensor x = randn(s, TensorOptions(DType::f64), &gen);
  if (for_prod) x = add(mul(x, 1e-3), 1.0);
  if (dtype == DType::i64 || dtype == DType::i32) x = clamp(mul(x, 10), -50.0, 50.0);
  x = x.to(dtype);
  return c.transposed ? x.transpose(0, 1) : x;
}

double scan_tol(DType d) {
  switch (d) {
    case DType::bf16:
      return 2e-2;
    case DType::f32:
      return 1e-4;
    default:
      return 1e-10;
  }
}
}  // namespace

TEST_CASE("cumsum / cumprod match the CPU over awkward shapes and dtypes" *
          doctest::skip(!cuda::is_available())) {
  uint64_t seed = 11;
  for (const ScanCase& c : scan_cases())
    for (DType d : {DType::f32, DType::f64, DType::bf16, DType::i64, DType::i32})
      for (bool prod : {false, true}) {
        if (prod && d == DType::i32) continue;
        Tensor x = scan_input(c, d, prod, seed++);
        Tensor xg = x.to(kGpu);
        if (c.transposed) xg = xg.transpose(0, 1).contiguous().transpose(0, 1);
        INFO("shape ", shape_str(c.shape), " dim ", c.dim, " transposed ", c.transposed, " dtype ",
             dtype_name(d), prod ? " cumprod" : " cumsum");
        Tensor ref = prod ? cumprod(x, c.dim) : cumsum(x, c.dim);
        Tensor got = prod ? cumprod(xg, c.dim) : cumsum(xg, c.dim);
        REQUIRE(got.sizes() == ref.sizes());
        CHECK(got.dtype() == ref.dtype());
        CHECK(got.is_cuda());
        if (is_floating(d))
          CHECK(rel_err(got.to(Device::cpu(), DType::f64), ref.to(DType::f64)) <= scan_tol(d));
        else
          CHECK(got.to(Device::cpu()).to_vector() == ref.to_vector());
      }
}

TEST_CASE("cummax / cummin match the CPU: values, indices, ties and NaN" *
          doctest::skip(!cuda::is_available())) {
  uint64_t seed = 101;
  for (const ScanCase& c : scan_cases())
    for (DType d : {DType::f32, DType::bf16, DType::i64, DType::f64})
      for (bool is_max : {true, false}) {
        // Few distinct values so ties are common; about one NaN in 16 in the floating inputs.
        Generator gen(Device::cpu(), seed++);
        Shape s = c.shape;
        if (c.transposed) std::swap(s[0], s[1]);
        Tensor x = randint(-3, 4, s, TensorOptions(DType::f64), &gen);
        if (is_floating(d)) {
          Tensor nan_at = eq(randint(0, 16, s, TensorOptions(DType::i64), &gen),
                             zeros({}, TensorOptions(DType::i64)));
          x = where(nan_at, full(s, std::numeric_limits<double>::quiet_NaN(), DType::f64), x);
        }
        x = x.to(d);
        if (c.transposed) x = x.transpose(0, 1);
        Tensor xg = x.to(kGpu);
        if (c.transposed) xg = xg.transpose(0, 1).contiguous().transpose(0, 1);
        INFO("shape ", shape_str(c.shape), " dim ", c.dim, " transposed ", c.transposed, " dtype ",
             dtype_name(d), is_max ? " cummax" : " cummin");
        auto [rv, ri] = is_max ? cummax(x, c.dim) : cummin(x, c.dim);
        auto [gv, gi] = is_max ? cummax(xg, c.dim) : cummin(xg, c.dim);
        REQUIRE(gv.sizes() == rv.sizes());
        CHECK(gv.dtype() == d);
        CHECK(gi.dtype() == DType::i64);
        CHECK(rel_err(gv.to(Device::cpu(), DType::f64), rv.to(DType::f64)) == 0);
        CHECK(gi.to(Device::cpu()).to_vector() == ri.to_vector());
      }
}

TEST_CASE("scan gradients match the CPU" * doctest::skip(!cuda::is_available())) {
  for (const ScanCase& c : scan_cases()) {
    if (c.transposed) continue;
    Generator gen(Device::cpu(), 7);
    Tensor x = randn(c.shape, TensorOptions(DType::f32), &gen).to(kGpu);
    Tensor near_one = add(mul(x, 1e-3), 1.0);
    INFO("shape ", shape_str(c.shape), " dim ", c.dim);
    check_gpu_parity([&](const Tensor& t) { return cumsum(t, c.dim); }, x, 1e-4);
    check_gpu_parity([&](const Tensor& t) { return cumprod(t, c.dim); }, near_one, 1e-3);
    check_gpu_parity([&](const Tensor& t) { return std::get<0>(cummax(t, c.dim)); }, x, 1e-5);
    check_gpu_parity([&](const Tensor& t) { return std::get<0>(cummin(t, c.dim)); }, x, 1e-5);
  }
}

TEST_CASE("any, all, count_nonzero, aminmax, var_mean, norms on the GPU match the CPU" *
          doctest::skip(!cuda::is_available())) {
  const double inf = std::numeric_limits<double>::infinity();
  for (Shape s : {Shape{0}, Shape{1}, Shape{5, 33}, Shape{3, 4097}, Shape{2, 0, 3}, Shape{70000}})
    for (DType d : {DType::f32, DType::bf16}) {
      Generator gen(Device::cpu(), 3);
      Tensor x = randint(-2, 3, s, TensorOptions(DType::f32), &gen).to(d);
      Tensor xg = x.to(kGpu);
      const int64_t last = int64_t(s.size()) - 1;
      INFO("shape ", shape_str(s), " dtype ", dtype_name(d));
      CHECK(any(xg).item() == any(x).item());
      CHECK(all(xg, last).to(Device::cpu()).to_vector() == all(x, last).to_vector());
      CHECK(any(xg, 0, true).to(Device::cpu()).to_vector() == any(x, 0, true).to_vector());
      CHECK(count_nonzero(xg, {last}).to(Device::cpu()).to_vector() ==
            count_nonzero(x, {last}).to_vector());
      for (double ord : {1.0, 2.0, 3.0, 0.0}) {
        Tensor r = linalg_vector_norm(x.to(DType::f64), ord, {last});
        Tensor g = linalg_vector_norm(xg, ord, {last}).to(Device::cpu(), DType::f64);
        CHECK(rel_err(g, r) <= (d == DType::bf16 ? 2e-2 : 1e-5));
      }
      if (x.numel() == 0) continue;
      CHECK(rel_err(linalg_vector_norm(xg, inf).to(Device::cpu(), DType::f64),
                    linalg_vector_norm(x, inf).to(DType::f64)) == 0);
      auto [mn, mx] = aminmax(xg, last);
      auto [rmn, rmx] = aminmax(x, last);
      CHECK(mn.to(Device::cpu()).to_vector() == rmn.to_vector());
      CHECK(mx.to(Device::cpu()).to_vector() == rmx.to_vector());
      if (x.size(last) < 2) continue;
      auto [v, m] = var_mean(xg.to(DType::f32), {last});
      auto [rv, rm] = var_mean(x.to(DType::f64), {last});
      CHECK(rel_err(v.to(Device::cpu(), DType::f64), rv) <= 1e-5);
      CHECK(rel_err(m.to(Device::cpu(), DType::f64), rm) <= 1e-5);
    }
  Generator gen(Device::cpu(), 5);
  Tensor x = randn({6, 70}, TensorOptions(DType::f32), &gen).to(kGpu);
  check_gpu_parity([](const Tensor& t) { return norm(t, 2, {1}); }, x, 1e-5);
  check_gpu_parity([](const Tensor& t) { return linalg_vector_norm(t, 3, {0}, true); }, x, 1e-5);
  check_gpu_parity([](const Tensor& t) { return std::get<0>(std_mean(t, {1})); }, x, 1e-5);
}

namespace {
// Few distinct values (ties everywhere), signed zeros and about one NaN in 16 in floating inputs,
// drawn on the CPU so both devices sort identical values.
Tensor sort_input(const Shape& s, DType d, uint64_t seed) {
  Generator gen(Device::cpu(), seed);
  Tensor x = randint(-20, 21, s, TensorOptions(DType::f64), &gen);
  if (d == DType::u8 || d == DType::boolean) x = x.abs();
  if (is_floating(d)) {
    x = mul(x, 0.25);
    Tensor r = randint(0, 16, s, TensorOptions(DType::i64), &gen);
    Tensor zero = zeros({}, TensorOptions(DType::i64));
    x = where(eq(r, zero), full(s, std::numeric_limits<double>::quiet_NaN(), DType::f64), x);
    x = where(eq(r, full({}, 1, DType::i64)), full(s, -0.0, DType::f64), x);
  }
  return x.to(d);
}

void check_same(const Tensor& gpu, const Tensor& cpu) {
  REQUIRE(gpu.sizes() == cpu.sizes());
  CHECK(gpu.dtype() == cpu.dtype());
  CHECK(rel_err(gpu.to(Device::cpu(), DType::f64), cpu.to(DType::f64)) == 0);
}
}  // namespace

TEST_CASE("sort / argsort match the CPU: stable, NaN, signed zeros, every dtype" *
          doctest::skip(!cuda::is_available())) {
  uint64_t seed = 301;
  std::vector<ScanCase> cases = scan_cases();
  cases.push_back({{1 << 20}, 0, false});
  cases.push_back({{300, 4097}, 1, false});
  for (const ScanCase& c : cases)
    for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32,
                    DType::u8, DType::boolean})
      for (bool descending : {false, true}) {
        Shape s = c.shape;
        if (c.transposed) std::swap(s[0], s[1]);
        Tensor x = sort_input(s, d, seed++);
        if (c.transposed) x = x.transpose(0, 1);
        Tensor xg = x.to(kGpu);
        INFO("shape ", shape_str(c.shape), " dim ", c.dim, " transposed ", c.transposed, " dtype ",
             dtype_name(d), descending ? " descending" : " ascending");
        auto [rv, ri] = sort(x, c.dim, descending);
        auto [gv, gi] = sort(xg, c.dim, descending);
        check_same(gv, rv);
        CHECK(gi.to(Device::cpu()).to_vector() == ri.to_vector());
        CHECK(argsort(xg, c.dim, descending).to(Device::cpu()).to_vector() == ri.to_vector());
      }
}

TEST_CASE("topk, kthvalue, median, nanmedian match the CPU" *
          doctest::skip(!cuda::is_available())) {
  uint64_t seed = 401;
  for (const ScanCase& c : scan_cases())
    for (DType d : {DType::f32, DType::bf16, DType::i64}) {
      Shape s = c.shape;
      if (c.transposed) std::swap(s[0], s[1]);
      Tensor x = sort_input(s, d, seed++);
      if (c.transposed) x = x.transpose(0, 1);
      Tensor xg = x.to(kGpu);
      const int64_t n = c.shape[size_t(c.dim < 0 ? c.dim + int64_t(c.shape.size()) : c.dim)];
      INFO("shape ", shape_str(c.shape), " dim ", c.dim, " dtype ", dtype_name(d));
      for (bool largest : {true, false}) {
        const int64_t k = std::min<int64_t>(n, 5);
        auto [rv, ri] = topk(x, k, c.dim, largest);
        auto [gv, gi] = topk(xg, k, c.dim, largest);
        check_same(gv, rv);
        CHECK(gi.to(Device::cpu()).to_vector() == ri.to_vector());
      }
      if (n == 0) continue;
      auto [kv, ki] = kthvalue(x, (n + 1) / 2, c.dim, true);
      auto [gkv, gki] = kthvalue(xg, (n + 1) / 2, c.dim, true);
      check_same(gkv, kv);
      CHECK(gki.to(Device::cpu()).to_vector() == ki.to_vector());
      auto [mv, mi] = median(x, c.dim);
      auto [gmv, gmi] = median(xg, c.dim);
      check_same(gmv, mv);
      CHECK(gmi.to(Device::cpu()).to_vector() == mi.to_vector());
      auto [nv, ni] = nanmedian(x, c.dim);
      auto [gnv, gni] = nanmedian(xg, c.dim);
      check_same(gnv, nv);
      CHECK(gni.to(Device::cpu()).to_vector() == ni.to_vector());
      check_same(median(xg), median(x));
      check_same(nanmedian(xg), nanmedian(x));
    }
}

TEST_CASE("sort-based gradients match the CPU" * doctest::skip(!cuda::is_available())) {
  Generator gen(Device::cpu(), 9);
  Tensor x = randn({7, 33}, TensorOptions(DType::f32), &gen).to(kGpu);
  check_gpu_parity([](const Tensor& t) { return std::get<0>(sort(t, 1, true)); }, x, 1e-6);
  check_gpu_parity([](const Tensor& t) { return std::get<0>(topk(t, 4, 0)); }, x, 1e-6);
  check_gpu_parity([](const Tensor& t) { return std::get<0>(kthvalue(t, 3, 1)); }, x, 1e-6);
  check_gpu_parity([](const Tensor& t) { return std::get<0>(median(t, 0, true)); }, x, 1e-6);
  check_gpu_parity([](const Tensor& t) { return nanmedian(t); }, x, 1e-6);
}
