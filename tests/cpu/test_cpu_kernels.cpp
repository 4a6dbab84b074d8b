// Direct tests of the CPU kernels (cpu_kernels/): small tensors with hand-computed expected values,
// run through the kernel tables without ops or autograd. Covers contiguous, strided and broadcast
// (stride 0) loops, dtype casts with their rounding edge cases, reductions (Welford precision,
// argmax ties and NaN, empty reductions), GEMM layouts, and the index kernels' range checks.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ember/kernel_interface/elementwise.h"
#include "ember/kernel_interface/reduce.h"
#include "ember/kernel_interface/gemm.h"
#include "ember/kernel_interface/indexing.h"

namespace {

using namespace ember;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr DType kFloatTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

// ---- helpers ------------------------------------------------------------------------------------

// A std::string, so that doctest's lazily captured INFO prints the name rather than a pointer.
std::string name_of(DType dtype) { return dtype_name(dtype); }

template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return T(float(v));
  else if constexpr (std::is_same_v<T, bool>)
    return v != 0;
  else
    return static_cast<T>(v);
}

template <typename T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return double(float(v));
  else
    return static_cast<double>(v);
}

// A contiguous CPU tensor holding `values` (row-major), converted to `dtype`.
Tensor make(const Shape& sizes, DType dtype, const std::vector<double>& values) {
  Tensor t = empty(sizes, dtype);
  REQUIRE(t.numel() == int64_t(values.size()));
  EMBER_DISPATCH_ALL_DTYPES(dtype, "test", [&] {
    scalar_t* p = t.data<scalar_t>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = from_double<scalar_t>(values[i]);
  });
  return t;
}

// The elements of a view (any strides) in logical order, as double.
std::vector<double> values_of(const Tensor& t) {
  std::vector<double> out;
  const int64_t nd = t.dim();
  std::vector<int64_t> idx(size_t(nd), 0);
  EMBER_DISPATCH_ALL_DTYPES(t.dtype(), "test", [&] {
    const scalar_t* base = static_cast<const scalar_t*>(t.data_ptr());
    for (int64_t n = 0; n < t.numel(); ++n) {
      int64_t off = 0;
      for (int64_t d = 0; d < nd; ++d) off += idx[size_t(d)] * t.stride(d);
      out.push_back(to_double(base[off]));
      for (int64_t d = nd - 1; d >= 0; --d) {
        if (++idx[size_t(d)] < t.size(d)) break;
        idx[size_t(d)] = 0;
      }
    }
  });
  return out;
}

// The value `v` takes once stored in `dtype` (the rounding the kernels must reproduce).
double rounded(DType dtype, double v) {
  double r = 0;
  EMBER_DISPATCH_ALL_DTYPES(dtype, "test", [&] { r = to_double(from_double<scalar_t>(v)); });
  return r;
}

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return 1e-12;
    case DType::f32:
      return 1e-6;
    case DType::f16:
      return 1e-3;
    case DType::bf16:
      return 8e-3;
    default:
      return 0;
  }
}

// Equal within rtol (relative, plus the same absolute floor), NaN matching NaN.
void check_close(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                 const std::string& what) {
  REQUIRE_MESSAGE(got.size() == want.size(), what);
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(what, " element ", i, ": got ", got[i], ", want ", want[i]);
    if (std::isnan(want[i])) {
      CHECK(std::isnan(got[i]));
    } else if (std::isinf(want[i])) {
      CHECK(got[i] == want[i]);
    } else {
      CHECK(std::abs(got[i] - want[i]) <= rtol * (1 + std::abs(want[i])));
    }
  }
}

// Runs fn and checks it throws ember::Error with `status` and a message holding every part.
template <typename Fn>
void check_error(Fn&& fn, Status status, const std::vector<std::string>& parts) {
  try {
    fn();
    FAIL("expected an ember::Error");
  } catch (const Error& e) {
    CHECK(e.status() == status);
    for (const std::string& part : parts)
      CHECK_MESSAGE(e.message().find(part) != std::string::npos, "'", part,
                    "' not in: ", e.message());
  }
}

void unary(const Tensor& out, const Tensor& in, UnaryOp op, UnaryParams p = {}) {
  ElementwiseIter it = make_elementwise_iter("test", out, {in});
  unary_kernel().get(DeviceType::CPU, in.dtype())(it, op, p);
}
void binary(const Tensor& out, const Tensor& a, const Tensor& b, BinaryOp op, double alpha = 1) {
  ElementwiseIter it = make_elementwise_iter("test", out, {a, b});
  binary_kernel().get(DeviceType::CPU, a.dtype())(it, op, alpha);
}
void copy(const Tensor& out, const Tensor& in) {
  ElementwiseIter it = make_elementwise_iter("test", out, {in});
  copy_kernel().get(DeviceType::CPU, out.dtype())(it);
}

// ---- unary --------------------------------------------------------------------------------------

struct UnaryCase {
  UnaryOp op;
  double a, b;
  std::vector<double> in, want;
};

TEST_CASE("unary kernel: every floating op, every floating dtype") {
  const double e = 2.718281828459045, ln2 = 0.6931471805599453;
  const std::vector<UnaryCase> cases = {
      {UnaryOp::neg, 0, 0, {1.5, -2, 0}, {-1.5, 2, 0}},
      {UnaryOp::exp, 0, 0, {0, 1, -1}, {1, e, 1 / e}},
      {UnaryOp::log, 0, 0, {1, 2, 0.5}, {0, ln2, -ln2}},
      {UnaryOp::sqrt, 0, 0, {4, 0.25, 2}, {2, 0.5, 1.4142135623730951}},
      {UnaryOp::rsqrt, 0, 0, {4, 0.25, 1}, {0.5, 2, 1}},
      {UnaryOp::abs, 0, 0, {-3, 2.5, 0}, {3, 2.5, 0}},
      {UnaryOp::tanh, 0, 0, {0, 1, -1}, {0, 0.7615941559557649, -0.7615941559557649}},
      {UnaryOp::sigmoid, 0, 0, {0, 2, -2}, {0.5, 0.8807970779778823, 0.11920292202211755}},
      {UnaryOp::relu, 0, 0, {-1, 0, 2.5}, {0, 0, 2.5}},
      {UnaryOp::sin, 0, 0, {0, 1, -0.5}, {0, 0.8414709848078965, -0.479425538604203}},
      {UnaryOp::cos, 0, 0, {0, 1, 2}, {1, 0.5403023058681398, -0.4161468365471424}},
      {UnaryOp::sign, 0, 0, {-2, 0, 3}, {-1, 0, 1}},
      {UnaryOp::reciprocal, 0, 0, {4, -0.5, 2}, {0.25, -2, 0.5}},
      {UnaryOp::square, 0, 0, {-3, 1.5, 0}, {9, 2.25, 0}},
      {UnaryOp::log1p, 0, 0, {0, 1, -0.5}, {0, ln2, -ln2}},
      {UnaryOp::expm1, 0, 0, {0, 1, -1}, {0, e - 1, 1 / e - 1}},
      {UnaryOp::floor, 0, 0, {-1.5, 1.5, 2}, {-2, 1, 2}},
      {UnaryOp::ceil, 0, 0, {-1.5, 1.5, 2}, {-1, 2, 2}},
      {UnaryOp::round, 0, 0, {2.5, 3.5, -0.5}, {2, 4, 0}},  // half to even
      {UnaryOp::clamp, -1, 2, {-3, 0.5, 4}, {-1, 0.5, 2}},
      {UnaryOp::clamp, kNaN, 1, {-3, 0.5, 4}, {-3, 0.5, 1}},  // NaN bound: none
      {UnaryOp::clamp, 1, kNaN, {-3, 0.5, 4}, {1, 1, 4}},
      {UnaryOp::clamp, 3, 1, {0, 2, 5}, {1, 1, 1}},  // min > max gives max, as torch.clamp
      {UnaryOp::pow_scalar, 2, 0, {3, -1.5, 0}, {9, 2.25, 0}},
      {UnaryOp::pow_scalar, 3, 0, {2, -1, 0.5}, {8, -1, 0.125}},
      {UnaryOp::pow_scalar, 0.5, 0, {4, 0.25, 0}, {2, 0.5, 0}},
      {UnaryOp::pow_scalar, 1.5, 0, {4, 1, 0.25}, {8, 1, 0.125}},
      {UnaryOp::pow_scalar, -1, 0, {2, 4, -0.5}, {0.5, 0.25, -2}},
      {UnaryOp::add_scalar, 2.5, 0, {1, -1, 0}, {3.5, 1.5, 2.5}},
      {UnaryOp::mul_scalar, -2, 0, {1, -1.5, 0}, {-2, 3, 0}},
      {UnaryOp::rsub_scalar, 5, 0, {1, 6, 0}, {4, -1, 5}},
      {UnaryOp::rdiv_scalar, 3, 0, {2, -4, 0.5}, {1.5, -0.75, 6}},
  };
  for (DType dtype : kFloatTypes) {
    for (const UnaryCase& c : cases) {
      Tensor in = make({3}, dtype, c.in), out = empty({3}, dtype);
      unary(out, in, c.op, {c.a, c.b});
      check_close(values_of(out), c.want, tolerance(dtype),
                  name_of(dtype) + " op " + std::to_string(int(c.op)));
    }
  }
}

TEST_CASE("unary kernel: NaN handling and bool-valued ops") {
  for (DType dtype : kFloatTypes) {
    Tensor in = make({5}, dtype, {kNaN, 0, -1.5, kInf, -kInf}), out = empty({5}, dtype);
    unary(out, in, UnaryOp::relu);
    check_close(values_of(out), {kNaN, 0, 0, kInf, 0}, 0, "relu");
    unary(out, in, UnaryOp::clamp, {-1, 1});
    check_close(values_of(out), {kNaN, 0, -1, 1, -1}, 0, "clamp");
    unary(out, in, UnaryOp::sign);
    check_close(values_of(out), {0, 0, -1, 1, -1}, 0, "sign");  // sign(NaN) = 0, as PyTorch

    Tensor flags = empty({5}, DType::boolean);
    unary(flags, in, UnaryOp::isnan);
    CHECK(values_of(flags) == std::vector<double>{1, 0, 0, 0, 0});
    unary(flags, in, UnaryOp::isfinite);
    CHECK(values_of(flags) == std::vector<double>{0, 1, 1, 0, 0});
    unary(flags, in, UnaryOp::logical_not);
    CHECK(values_of(flags) == std::vector<double>{0, 1, 0, 0, 0});
  }
}

TEST_CASE("unary kernel: integer and bool dtypes") {
  Tensor in = make({6}, DType::i32, {0, 1, 2, 3, -4, 5}), out = empty({6}, DType::i32);
  const std::vector<UnaryCase> cases = {
      {UnaryOp::neg, 0, 0, {}, {0, -1, -2, -3, 4, -5}},
      {UnaryOp::abs, 0, 0, {}, {0, 1, 2, 3, 4, 5}},
      {UnaryOp::sign, 0, 0, {}, {0, 1, 1, 1, -1, 1}},
      {UnaryOp::square, 0, 0, {}, {0, 1, 4, 9, 16, 25}},
      {UnaryOp::relu, 0, 0, {}, {0, 1, 2, 3, 0, 5}},
      {UnaryOp::clamp, 1.5, 4.2, {}, {2, 2, 2, 3, 2, 4}},  // integer bounds: ceil(min), floor(max)
      {UnaryOp::clamp, kNaN, 2, {}, {0, 1, 2, 2, -4, 2}},
      {UnaryOp::add_scalar, 3, 0, {}, {3, 4, 5, 6, -1, 8}},
      {UnaryOp::mul_scalar, -2, 0, {}, {0, -2, -4, -6, 8, -10}},
      {UnaryOp::rsub_scalar, 10, 0, {}, {10, 9, 8, 7, 14, 5}},
  };
  for (const UnaryCase& c : cases) {
    unary(out, in, c.op, {c.a, c.b});
    CHECK_MESSAGE((values_of(out) == c.want), "op ", int(c.op));
  }
  // Wrap-around like PyTorch, not UB.
  Tensor lowest = make({1}, DType::i32, {double(std::numeric_limits<int32_t>::lowest())});
  unary(make_view(out, {1}, {1}, 0), lowest, UnaryOp::neg);
  CHECK(out.data<int32_t>()[0] == std::numeric_limits<int32_t>::lowest());
  Tensor byte = make({2}, DType::u8, {1, 200}), byte_out = empty({2}, DType::u8);
  unary(byte_out, byte, UnaryOp::neg);
  CHECK(values_of(byte_out) == std::vector<double>{255, 56});

  Tensor flags = make({3}, DType::boolean, {1, 0, 1}), flags_out = empty({3}, DType::boolean);
  unary(flags_out, flags, UnaryOp::logical_not);
  CHECK(values_of(flags_out) == std::vector<double>{0, 1, 0});
  Tensor is_nan = empty({6}, DType::boolean);
  unary(is_nan, in, UnaryOp::isnan);
  CHECK(values_of(is_nan) == std::vector<double>(6, 0));

  check_error([&] { unary(out, in, UnaryOp::exp); }, Status::not_supported, {"exp", "int32"});
  check_error([&] { unary(flags_out, flags, UnaryOp::neg); }, Status::not_supported,
              {"neg", "bool"});
  check_error(
      [&] {
        unary(out, in, UnaryOp::add_scalar, {0.5, 0});
      },
      Status::bad_param, {"0.5", "int32"});
}

TEST_CASE("unary kernel: fill writes every dtype, through strides") {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::i64, DType::u8, DType::boolean}) {
    Tensor base = make({2, 4}, dtype, std::vector<double>(8, 0));
    Tensor every_other = make_view(base, {2, 2}, {4, 2}, 1);  // columns 1 and 3
    ElementwiseIter it = make_elementwise_iter("fill", every_other, {});
    unary_kernel().get(DeviceType::CPU, dtype)(it, UnaryOp::fill, {0.1, 0});
    const double v = rounded(dtype, 0.1);
    CHECK_MESSAGE((values_of(base) == std::vector<double>{0, v, 0, v, 0, v, 0, v}), name_of(dtype));
  }
}

TEST_CASE("unary kernel: strided inputs and outputs give the contiguous result") {
  for (DType dtype : kFloatTypes) {
    // A transposed input: view (i, j) = base[j][i].
    Tensor base = make({2, 3}, dtype, {0, 1, 2, 3, 4, 5});
    Tensor transposed = make_view(base, {3, 2}, {1, 3}, 0);
    Tensor out = empty({3, 2}, dtype);
    unary(out, transposed, UnaryOp::mul_scalar, {2, 0});
    CHECK(values_of(out) == std::vector<double>{0, 6, 2, 8, 4, 10});
    // A transposed output.
    Tensor out_base = empty({2, 3}, dtype);
    Tensor out_t = make_view(out_base, {3, 2}, {1, 3}, 0);
    unary(out_t, out, UnaryOp::neg);
    CHECK(values_of(out_base) == std::vector<double>{-0., -2, -4, -6, -8, -10});
  }
  // Long rows take the direct path, long strided runs fill several gather chunks; both must agree
  // with the plain formula everywhere.
  const int64_t n = 700;
  std::vector<double> ramp(size_t(2 * n));
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = double(i % 97) - 48;
  Tensor src = make({2 * n}, DType::f32, ramp);
  Tensor strided = make_view(src, {n}, {2}, 1), dense = make_view(src, {2, n / 2}, {n, 1}, 3);
  Tensor out_strided = empty({n}, DType::f32), out_dense = empty({2, n / 2}, DType::f32);
  unary(out_strided, strided, UnaryOp::square);
  unary(out_dense, dense, UnaryOp::square);
  std::vector<double> want_strided, want_dense;
  for (int64_t i = 0; i < n; ++i)
    want_strided.push_back(ramp[size_t(2 * i + 1)] * ramp[size_t(2 * i + 1)]);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t i = 0; i < n / 2; ++i) {
      const double x = ramp[size_t(3 + r * n + i)];
      want_dense.push_back(x * x);
    }
  CHECK(values_of(out_strided) == want_strided);
  CHECK(values_of(out_dense) == want_dense);
}

// ---- binary -------------------------------------------------------------------------------------

struct BinaryCase {
  BinaryOp op;
  double alpha;
  std::vector<double> a, b, want;
};

TEST_CASE("binary kernel: arithmetic ops, every floating dtype") {
  const std::vector<BinaryCase> cases = {
      {BinaryOp::add, 1, {1, 2.5, -3}, {0.5, 0.5, 3}, {1.5, 3, 0}},
      {BinaryOp::add, -2, {1, 2.5, -3}, {0.5, 0.5, 3}, {0, 1.5, -9}},
      {BinaryOp::sub, 0.5, {1, 2.5, -3}, {2, 1, 4}, {0, 2, -5}},
      {BinaryOp::mul, 1, {1.5, -2, 0}, {2, 3, 5}, {3, -6, 0}},
      {BinaryOp::div, 1, {3, -2, 1}, {2, 4, 0}, {1.5, -0.5, kInf}},
      {BinaryOp::pow, 1, {2, 4, 9}, {3, 0.5, -0.5}, {8, 2, 1.0 / 3}},
      {BinaryOp::maximum, 1, {1, kNaN, 3}, {2, 1, kNaN}, {2, kNaN, kNaN}},
      {BinaryOp::minimum, 1, {1, kNaN, 3}, {2, 1, kNaN}, {1, kNaN, kNaN}},
      {BinaryOp::atan2,
       1,
       {1, 1, -1},
       {1, 0, -1},
       {0.7853981633974483, 1.5707963267948966, -2.356194490192345}},
      {BinaryOp::remainder, 1, {5, -5, 5, -5, 5.5}, {3, 3, -3, -3, 2}, {2, 1, -1, -2, 1.5}},
      {BinaryOp::relu_backward, 1, {1, 2, 3}, {-1, 0, 2}, {0, 0, 3}},
      {BinaryOp::sigmoid_backward, 1, {1, 2}, {0.5, 0.25}, {0.25, 0.375}},
      {BinaryOp::tanh_backward, 1, {1, 2}, {0.5, -1}, {0.75, 0}},
  };
  for (DType dtype : kFloatTypes) {
    for (const BinaryCase& c : cases) {
      const int64_t n = int64_t(c.a.size());
      Tensor a = make({n}, dtype, c.a), b = make({n}, dtype, c.b), out = empty({n}, dtype);
      binary(out, a, b, c.op, c.alpha);
      check_close(values_of(out), c.want, tolerance(dtype),
                  name_of(dtype) + " op " + std::to_string(int(c.op)));
    }
  }
}

TEST_CASE("binary kernel: broadcasting through stride-0 operands") {
  Tensor a = make({2, 3}, DType::f32, {1, 2, 3, 4, 5, 6});
  Tensor row = make({3}, DType::f32, {10, 20, 30});
  Tensor col = make({2, 1}, DType::f32, {100, 200});
  Tensor out = empty({2, 3}, DType::f32);
  binary(out, a, row, BinaryOp::add);
  CHECK(values_of(out) == std::vector<double>{11, 22, 33, 14, 25, 36});
  binary(out, a, col, BinaryOp::sub);
  CHECK(values_of(out) == std::vector<double>{-99, -98, -97, -196, -195, -194});
  // An explicit stride-0 view (what expand makes), with a transposed second operand.
  Tensor scalar = make({1}, DType::f32, {0.5});
  Tensor expanded = make_view(scalar, {2, 3}, {0, 0}, 0);
  Tensor a_t_base = make({3, 2}, DType::f32, {1, 4, 2, 5, 3, 6});
  Tensor a_t = make_view(a_t_base, {2, 3}, {1, 2}, 0);  // equals a
  binary(out, a_t, expanded, BinaryOp::mul);
  CHECK(values_of(out) == std::vector<double>{0.5, 1, 1.5, 2, 2.5, 3});
}

TEST_CASE("binary kernel: comparisons and logical ops write bool") {
  const std::vector<BinaryCase> cases = {
      {BinaryOp::eq, 1, {1, 2, kNaN}, {2, 2, kNaN}, {0, 1, 0}},
      {BinaryOp::ne, 1, {1, 2, kNaN}, {2, 2, kNaN}, {1, 0, 1}},
      {BinaryOp::lt, 1, {1, 2, kNaN}, {2, 2, kNaN}, {1, 0, 0}},
      {BinaryOp::le, 1, {1, 2, kNaN}, {2, 2, kNaN}, {1, 1, 0}},
      {BinaryOp::gt, 1, {1, 2, kNaN}, {2, 2, kNaN}, {0, 0, 0}},
      {BinaryOp::ge, 1, {1, 2, kNaN}, {2, 2, kNaN}, {0, 1, 0}},
      {BinaryOp::logical_and, 1, {0, 1, kNaN}, {1, 1, 0}, {0, 1, 0}},
      {BinaryOp::logical_or, 1, {0, 1, kNaN}, {1, 0, 0}, {1, 1, 1}},
  };
  for (DType dtype : {DType::f32, DType::f16, DType::f64, DType::bf16}) {
    for (const BinaryCase& c : cases) {
      Tensor a = make({3}, dtype, c.a), b = make({3}, dtype, c.b), out = empty({3}, DType::boolean);
      binary(out, a, b, c.op);
      CHECK_MESSAGE((values_of(out) == c.want), name_of(dtype), " op ", int(c.op));
    }
  }
  Tensor ia = make({3}, DType::i64, {-1, 0, 7}), ib = make({3}, DType::i64, {0, 0, 3});
  Tensor flags = empty({3}, DType::boolean);
  binary(flags, ia, ib, BinaryOp::lt);
  CHECK(values_of(flags) == std::vector<double>{1, 0, 0});
  binary(flags, ia, ib, BinaryOp::logical_or);
  CHECK(values_of(flags) == std::vector<double>{1, 0, 1});
}

TEST_CASE("binary kernel: integer and bool dtypes") {
  Tensor a = make({4}, DType::i64, {1, 2, -5, 5}), b = make({4}, DType::i64, {3, 4, 3, -3});
  Tensor out = empty({4}, DType::i64);
  binary(out, a, b, BinaryOp::add, 2);
  CHECK(values_of(out) == std::vector<double>{7, 10, 1, -1});
  binary(out, a, b, BinaryOp::remainder);  // Python modulo: the divisor's sign
  CHECK(values_of(out) == std::vector<double>{1, 2, 1, -1});
  binary(out, a, b, BinaryOp::maximum);
  CHECK(values_of(out) == std::vector<double>{3, 4, 3, 5});
  Tensor base = make({2}, DType::i32, {2, -3}), exponent = make({2}, DType::i32, {10, 3});
  Tensor ipow = empty({2}, DType::i32);
  binary(ipow, base, exponent, BinaryOp::pow);
  CHECK(values_of(ipow) == std::vector<double>{1024, -27});
  Tensor big = make({1}, DType::i32, {double(std::numeric_limits<int32_t>::max())});
  Tensor one = make({1}, DType::i32, {1}), wrapped = empty({1}, DType::i32);
  binary(wrapped, big, one, BinaryOp::add);
  CHECK(wrapped.data<int32_t>()[0] == std::numeric_limits<int32_t>::lowest());

  Tensor zero_div = make({4}, DType::i64, {1, 1, 0, 1});
  check_error([&] { binary(out, a, zero_div, BinaryOp::remainder); }, Status::bad_param,
              {"remainder", "zero"});
  Tensor negative = make({2}, DType::i32, {1, -1});
  check_error([&] { binary(ipow, base, negative, BinaryOp::pow); }, Status::bad_param,
              {"negative"});
  check_error([&] { binary(out, a, b, BinaryOp::div); }, Status::not_supported, {"div", "int64"});

  Tensor p = make({4}, DType::boolean, {0, 0, 1, 1}), q = make({4}, DType::boolean, {0, 1, 0, 1});
  Tensor r = empty({4}, DType::boolean);
  binary(r, p, q, BinaryOp::maximum);
  CHECK(values_of(r) == std::vector<double>{0, 1, 1, 1});
  binary(r, p, q, BinaryOp::mul);
  CHECK(values_of(r) == std::vector<double>{0, 0, 0, 1});
  check_error([&] { binary(r, p, q, BinaryOp::sub); }, Status::not_supported, {"sub", "bool"});
}

TEST_CASE("binary kernel: float16 computes in float and rounds once, to nearest even") {
  const double ulp = std::ldexp(1.0, -10);  // float16 spacing at 1
  Tensor a = make({2}, DType::f16, {1, 1 + ulp}), b = make({2}, DType::f16, {ulp / 2, ulp / 2});
  Tensor out = empty({2}, DType::f16);
  binary(out, a, b, BinaryOp::add);
  // 1 + ulp/2 ties to 1 (even); 1 + 1.5 ulp ties to 1 + 2 ulp (even).
  CHECK(out.data<Half>()[0].bits == 0x3C00);
  CHECK(out.data<Half>()[1].bits == 0x3C02);
}

// ---- where --------------------------------------------------------------------------------------

TEST_CASE("where kernel: selects with broadcast condition and operands") {
  for (DType dtype : {DType::f32, DType::f16, DType::i64, DType::u8}) {
    Tensor cond = make({3}, DType::boolean, {1, 0, 1});
    Tensor a = make({2, 3}, dtype, {1, 2, 3, 4, 5, 6});
    Tensor b = make({1}, dtype, {9});
    Tensor out = empty({2, 3}, dtype);
    ElementwiseIter it = make_elementwise_iter("where", out, {cond, a, b});
    where_kernel().get(DeviceType::CPU, dtype)(it);
    CHECK_MESSAGE((values_of(out) == std::vector<double>{1, 9, 3, 4, 9, 6}), name_of(dtype));
  }
}

// ---- copy (dtype conversion) --------------------------------------------------------------------

struct CastCase {
  DType from, to;
  std::vector<double> in, want;
};

TEST_CASE("copy kernel: casts between dtypes with their rounding edge cases") {
  const double e8 = std::ldexp(1.0, -8), e11 = std::ldexp(1.0, -11), e24 = std::ldexp(1.0, -24);
  const std::vector<CastCase> cases = {
      // bfloat16 (8 significant bits): ties to even; just above a tie rounds up.
      {DType::f32,
       DType::bf16,
       {1 + e8, 1 + 3 * e8, 1 + e8 + std::ldexp(1.0, -20), -0.0, kInf, kNaN},
       {1, 1 + 4 * e8, 1 + 2 * e8, -0.0, kInf, kNaN}},
      // float16: ties to even, overflow at the 65520 tie, subnormals down to 2^-24.
      {DType::f32,
       DType::f16,
       {1 + e11, 1 + 3 * e11, 65519, 65520, e24, e24 / 2, 1.5 * e24, -e24, 1e-8},
       {1, 1 + 4 * e11, 65504, kInf, e24, 0, 2 * e24, -e24, 0}},
      {DType::f64, DType::f16, {0.1}, {0.0999755859375}},  // through float, as PyTorch
      {DType::bf16, DType::f16, {1.5, -2}, {1.5, -2}},
      {DType::f32, DType::i32, {2.7, -2.7, 0.5, -0.5, 1e9}, {2, -2, 0, 0, 1e9}},  // toward zero
      {DType::f16, DType::i64, {-3.75, 3.75}, {-3, 3}},
      {DType::f32, DType::u8, {-1, 255, 3.9}, {255, 255, 3}},  // through int64: -1 wraps to 255
      {DType::f32, DType::boolean, {0, -0.0, kNaN, 0.5, -kInf}, {0, 0, 1, 1, 1}},
      {DType::boolean, DType::f32, {1, 0}, {1, 0}},
      {DType::i64, DType::f32, {16777217, -3}, {16777216, -3}},  // 2^24 + 1 ties to even
      {DType::i32, DType::u8, {300, -1}, {44, 255}},
      {DType::u8, DType::i32, {200, 0}, {200, 0}},
      {DType::i32, DType::f64, {-7, 123456789}, {-7, 123456789}},
  };
  for (const CastCase& c : cases) {
    const int64_t n = int64_t(c.in.size());
    Tensor in = make({n}, c.from, c.in);  // every input is exact in its source dtype
    Tensor out = empty({n}, c.to);
    copy(out, in);
    const std::vector<double> got = values_of(out);
    for (size_t i = 0; i < got.size(); ++i) {
      INFO(name_of(c.from), " -> ", name_of(c.to), " element ", i, ": got ", got[i], " want ",
           c.want[i]);
      if (std::isnan(c.want[i])) {
        CHECK(std::isnan(got[i]));
      } else {
        CHECK(got[i] == c.want[i]);
        CHECK(std::signbit(got[i]) == std::signbit(c.want[i]));
      }
    }
  }
}

TEST_CASE("copy kernel: strided source into a contiguous destination") {
  Tensor base = make({2, 3}, DType::f32, {0, 1, 2, 3, 4, 5});
  Tensor transposed = make_view(base, {3, 2}, {1, 3}, 0);
  for (DType to : {DType::f32, DType::f64, DType::bf16, DType::i32}) {
    Tensor out = empty({3, 2}, to);
    copy(out, transposed);
    CHECK_MESSAGE((values_of(out) == std::vector<double>{0, 3, 1, 4, 2, 5}), name_of(to));
  }
}

// ---- reductions ---------------------------------------------------------------------------------

// Runs reduce_kernel on `in` viewed as [outer, reduce, inner]; returns the values (or indices).
std::vector<double> reduce(const Tensor& in, ReduceShape s, ReduceOp op, int64_t correction = 1,
                           std::vector<double>* indices_out = nullptr) {
  const bool arg = op == ReduceOp::argmax || op == ReduceOp::argmin;
  Tensor out = empty({s.outer, s.inner}, arg ? DType::i64 : in.dtype());
  Tensor indices = empty({s.outer, s.inner}, DType::i64);
  reduce_kernel().get(DeviceType::CPU, in.dtype())(out, indices_out ? &indices : nullptr, in, s, op,
                                                   correction);
  if (indices_out) *indices_out = values_of(indices);
  return values_of(out);
}

TEST_CASE("reduce kernel: sum, mean, prod, max, min over [outer, reduce, inner]") {
  // x[o][r][i] = 6o + 2r + i
  std::vector<double> ramp(12);
  for (size_t i = 0; i < 12; ++i) ramp[i] = double(i);
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    INFO(name_of(dtype));
    Tensor x = make({2, 3, 2}, dtype, ramp);
    const Tensor x_rows = make_view(x, {4, 3}, {3, 1}, 0);
    const ReduceShape middle{2, 3, 2}, rows{4, 3, 1};
    CHECK(reduce(x, middle, ReduceOp::sum) == std::vector<double>{6, 9, 24, 27});
    // 693 is not a bfloat16: the double product is rounded once on the way out.
    CHECK(reduce(x, middle, ReduceOp::prod) ==
          std::vector<double>{0, 15, 480, rounded(dtype, 693)});
    std::vector<double> indices;
    CHECK(reduce(x, middle, ReduceOp::max, 1, &indices) == std::vector<double>{4, 5, 10, 11});
    CHECK(indices == std::vector<double>{2, 2, 2, 2});
    CHECK(reduce(x, middle, ReduceOp::min, 1, &indices) == std::vector<double>{0, 1, 6, 7});
    CHECK(indices == std::vector<double>{0, 0, 0, 0});
    // The same data as four rows of three (inner == 1).
    CHECK(reduce(x_rows, rows, ReduceOp::sum) == std::vector<double>{3, 12, 21, 30});
    CHECK(reduce(x_rows, rows, ReduceOp::argmax) == std::vector<double>{2, 2, 2, 2});
    if (is_floating(dtype)) {
      CHECK(reduce(x, middle, ReduceOp::mean) == std::vector<double>{2, 3, 8, 9});
      CHECK(reduce(x_rows, rows, ReduceOp::mean) == std::vector<double>{1, 4, 7, 10});
    }
  }
}

TEST_CASE("reduce kernel: argmax/argmin take the first extreme, NaN wins") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16}) {
    INFO(name_of(dtype));
    Tensor ties = make({2, 4}, dtype, {1, 3, 3, 2, 2, 1, 1, 5});
    CHECK(reduce(ties, {2, 4, 1}, ReduceOp::argmax) == std::vector<double>{1, 3});
    CHECK(reduce(ties, {2, 4, 1}, ReduceOp::argmin) == std::vector<double>{0, 1});
    // Column-wise (inner == 2): rows [1,3], [3,3], [3,0].
    Tensor cols = make({3, 2}, dtype, {1, 3, 3, 3, 3, 0});
    CHECK(reduce(cols, {1, 3, 2}, ReduceOp::argmax) == std::vector<double>{1, 0});
    CHECK(reduce(cols, {1, 3, 2}, ReduceOp::argmin) == std::vector<double>{0, 2});

    Tensor with_nan = make({2, 4}, dtype, {1, kNaN, 5, kNaN, 7, 2, kNaN, 9});
    std::vector<double> indices;
    check_close(reduce(with_nan, {2, 4, 1}, ReduceOp::max, 1, &indices), {kNaN, kNaN}, 0, "max");
    CHECK(indices == std::vector<double>{1, 2});
    check_close(reduce(with_nan, {2, 4, 1}, ReduceOp::min, 1, &indices), {kNaN, kNaN}, 0, "min");
    CHECK(indices == std::vector<double>{1, 2});
    CHECK(reduce(with_nan, {2, 4, 1}, ReduceOp::argmin) == std::vector<double>{1, 2});
    // Column-wise NaN: columns [1, 7], [NaN, 2], [5, NaN], [NaN, 9] as [reduce=2, inner=4].
    check_close(reduce(with_nan, {1, 2, 4}, ReduceOp::max, 1, &indices), {7, kNaN, kNaN, kNaN}, 0,
                "max");
    CHECK(indices == std::vector<double>{1, 0, 1, 0});

    Tensor signed_values = make({4}, dtype, {-5, 3, 4, -1});
    CHECK(reduce(signed_values, {1, 4, 1}, ReduceOp::amax_abs) == std::vector<double>{5});
  }
}

TEST_CASE("reduce kernel: var uses Welford (exact on a large mean) and Bessel's correction") {
  for (DType dtype : kFloatTypes) {
    Tensor x = make({4}, dtype, {1, 2, 3, 4});
    check_close(reduce(x, {1, 4, 1}, ReduceOp::var, 1), {5.0 / 3}, tolerance(dtype), "unbiased");
    check_close(reduce(x, {1, 4, 1}, ReduceOp::var, 0), {1.25}, tolerance(dtype), "biased");
    Tensor single = make({1}, dtype, {3});
    check_close(reduce(single, {1, 1, 1}, ReduceOp::var, 1), {kNaN}, 0, "n - correction = 0");
  }
  // 1e6 + noise of order 1e-3: the variance is ~2e-5 while sum(x^2) ~ 8e12, so a sum-of-squares
  // formula keeps no correct digit even in double. The reference is the two-pass formula.
  const std::vector<double> noise = {1e-3, -2e-3, 3e-3, -4e-3, 5e-3, -6e-3, 7e-3, -8e-3};
  std::vector<double> x, column_pairs;
  for (double d : noise) x.push_back(1e6 + d);
  for (double v : x) column_pairs.insert(column_pairs.end(), {v, v});
  double mean = 0;
  for (double v : x) mean += v / double(x.size());
  double m2 = 0;
  for (double v : x) m2 += (v - mean) * (v - mean);
  const double want = m2 / double(x.size() - 1);
  const std::vector<double> row = reduce(make({8}, DType::f64, x), {1, 8, 1}, ReduceOp::var);
  const std::vector<double> cols =
      reduce(make({8, 2}, DType::f64, column_pairs), {1, 8, 2}, ReduceOp::var);
  CHECK(std::abs(row[0] - want) <= 1e-6 * want);
  CHECK(std::abs(cols[0] - want) <= 1e-6 * want);
  CHECK(cols[1] == cols[0]);
  // A longer row (merged lanes plus a tail), same large mean, checked against two passes.
  std::vector<double> long_row(203);
  for (size_t i = 0; i < long_row.size(); ++i)
    long_row[i] = 1e6 + double(int64_t(i * 37 % 17) - 8) * 1e-3;
  double long_mean = 0, long_m2 = 0;
  for (double v : long_row) long_mean += v / double(long_row.size());
  for (double v : long_row) long_m2 += (v - long_mean) * (v - long_mean);
  const double long_want = long_m2 / double(long_row.size());
  const std::vector<double> long_got =
      reduce(make({203}, DType::f64, long_row), {1, 203, 1}, ReduceOp::var, 0);
  CHECK(std::abs(long_got[0] - long_want) <= 1e-6 * long_want);
  // float32 data with a large mean: 1e6 + k/16 is exact in float; var of k/16, k = 0..7, is
  // 0.0234375.
  std::vector<double> f(8);
  for (size_t k = 0; k < 8; ++k) f[k] = 1e6 + double(k) / 16;
  check_close(reduce(make({8}, DType::f32, f), {1, 8, 1}, ReduceOp::var), {6.0 / 256}, 1e-6, "f32");
}

TEST_CASE("reduce kernel: empty reductions and unsupported dtypes") {
  Tensor empty_in = empty({2, 0}, DType::f32);
  const ReduceShape s{2, 0, 1};
  CHECK(reduce(empty_in, s, ReduceOp::sum) == std::vector<double>{0, 0});
  CHECK(reduce(empty_in, s, ReduceOp::prod) == std::vector<double>{1, 1});
  check_close(reduce(empty_in, s, ReduceOp::mean), {kNaN, kNaN}, 0, "mean");
  for (ReduceOp op : {ReduceOp::max, ReduceOp::min, ReduceOp::argmax, ReduceOp::argmin})
    check_error([&] { reduce(empty_in, s, op); }, Status::bad_param,
                {"cannot reduce over a zero-size dimension"});
  check_error([&] { reduce(empty_in, s, ReduceOp::max); }, Status::bad_param, {"max():"});

  // float16 sums accumulate wide: 1 + 2048 + 1 is 2050, not the 2048 of float16 arithmetic.
  CHECK(reduce(make({3}, DType::f16, {1, 2048, 1}), {1, 3, 1}, ReduceOp::sum) ==
        std::vector<double>{2050});
  Tensor flags = make({2, 2}, DType::boolean, {0, 1, 0, 0});
  CHECK(reduce(flags, {2, 2, 1}, ReduceOp::max) == std::vector<double>{1, 0});
  CHECK(reduce(flags, {2, 2, 1}, ReduceOp::argmax) == std::vector<double>{1, 0});
  check_error(
      [&] {
        reduce(flags, {2, 2, 1}, ReduceOp::sum);
      },
      Status::not_supported, {"sum", "bool"});
  check_error(
      [&] {
        reduce(make({2}, DType::i32, {1, 2}), {1, 2, 1}, ReduceOp::var);
      },
      Status::not_supported, {"var", "int32"});
}

// ---- gemm ---------------------------------------------------------------------------------------

// Writes the rows x cols matrix m (row-major) into storage with leading dim ld, NaN in the padding.
std::vector<double> padded(const std::vector<double>& m, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<double> out(size_t(rows * ld), kNaN);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[size_t(r * ld + c)] = m[size_t(r * cols + c)];
  return out;
}
std::vector<double> transpose(const std::vector<double>& m, int64_t rows, int64_t cols) {
  std::vector<double> out(m.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[size_t(c * rows + r)] = m[size_t(r * cols + c)];
  return out;
}

TEST_CASE("gemm kernel: transposes, leading dims, batch, alpha and beta") {
  const std::vector<double> A = {1, 2, 3, 4, 5, 6};     // 2 x 3
  const std::vector<double> B = {7, 8, 9, 10, 11, 12};  // 3 x 2
  const std::vector<double> AB = {58, 64, 139, 154};    // 2 x 2
  const int64_t m = 2, n = 2, k = 3, pad = 2, batch = 2;
  for (DType dtype : kFloatTypes) {
    for (int trans = 0; trans < 4; ++trans) {
      const bool ta = trans & 1, tb = trans & 2;
      INFO(name_of(dtype), " trans_a=", ta, " trans_b=", tb);
      // Stored operands (transposed when asked), padded rows, two batch entries: the second A is
      // 2A.
      const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k,
                    b_cols = tb ? k : n;
      const std::vector<double> a_stored =
          padded(ta ? transpose(A, m, k) : A, a_rows, a_cols, a_cols + pad);
      const std::vector<double> b_stored =
          padded(tb ? transpose(B, k, n) : B, b_rows, b_cols, b_cols + pad);
      std::vector<double> a_batch = a_stored, b_batch = b_stored;
      for (double v : a_stored) a_batch.push_back(2 * v);
      b_batch.insert(b_batch.end(), b_stored.begin(), b_stored.end());
      Tensor a = make({int64_t(a_batch.size())}, dtype, a_batch);
      Tensor b = make({int64_t(b_batch.size())}, dtype, b_batch);
      const int64_t ldc = n + 1;
      for (double beta : {0.0, 0.5}) {
        // C starts as NaN (must not be read when beta == 0) or ones; its padding stays NaN.
        std::vector<double> c_init(size_t(batch * m * ldc), kNaN);
        if (beta != 0)
          for (int64_t i = 0; i < batch * m; ++i)
            for (int64_t j = 0; j < n; ++j) c_init[size_t(i * ldc + j)] = 1;
        Tensor c = make({int64_t(c_init.size())}, dtype, c_init);
        GemmArgs g;
        g.trans_a = ta;
        g.trans_b = tb;
        g.m = m, g.n = n, g.k = k;
        g.alpha = 2, g.beta = beta;
        g.a = a.data_ptr(), g.lda = a_cols + pad, g.stride_a = int64_t(a_stored.size());
        g.b = b.data_ptr(), g.ldb = b_cols + pad, g.stride_b = int64_t(b_stored.size());
        g.c = c.data_ptr(), g.ldc = ldc, g.stride_c = m * ldc;
        g.batch = batch;
        g.dtype = dtype;
        gemm_kernel().get(DeviceType::CPU, dtype)(g);
        const std::vector<double> got = values_of(c);
        for (int64_t bi = 0; bi < batch; ++bi)
          for (int64_t i = 0; i < m; ++i) {
            CHECK(std::isnan(got[size_t((bi * m + i) * ldc + n)]));  // padding untouched
            for (int64_t j = 0; j < n; ++j) {
              const double want = rounded(dtype, 2 * double(bi + 1) * AB[size_t(i * n + j)] + beta);
              CHECK(got[size_t((bi * m + i) * ldc + j)] == want);
            }
          }
      }
    }
  }
}

TEST_CASE("gemm kernel: a blocked-size product matches a naive loop; k == 0 scales C") {
  const int64_t m = 37, n = 29, k = 53;
  std::vector<double> a(size_t(m * k)), b(size_t(k * n)), want(size_t(m * n), 0);
  for (size_t i = 0; i < a.size(); ++i) a[i] = double(int64_t(i * 7 % 13) - 6) / 4;
  for (size_t i = 0; i < b.size(); ++i) b[i] = double(int64_t(i * 5 % 11) - 5) / 8;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l)
        want[size_t(i * n + j)] += a[size_t(i * k + l)] * b[size_t(l * n + j)];
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor ta = make({m, k}, dtype, a), tb = make({k, n}, dtype, b), tc = empty({m, n}, dtype);
    GemmArgs g;
    g.m = m, g.n = n, g.k = k;
    g.a = ta.data_ptr(), g.lda = k;
    g.b = tb.data_ptr(), g.ldb = n;
    g.c = tc.data_ptr(), g.ldc = n;
    g.dtype = dtype;
    gemm_kernel().get(DeviceType::CPU, dtype)(g);
    check_close(values_of(tc), want, tolerance(dtype), name_of(dtype));  // sums of k/32 are exact
  }
  Tensor c = make({2, 2}, DType::f32, {1, 2, 3, 4});
  GemmArgs g;
  g.m = 2, g.n = 2, g.k = 0, g.beta = 3;
  g.lda = 1, g.ldb = 2, g.c = c.data_ptr(), g.ldc = 2;
  gemm_kernel().get(DeviceType::CPU, DType::f32)(g);
  CHECK(values_of(c) == std::vector<double>{3, 6, 9, 12});
  CHECK_FALSE(gemm_kernel().has(DeviceType::CPU, DType::i32));
}

// ---- indexing -----------------------------------------------------------------------------------

TEST_CASE("index_select and index_add kernels") {
  std::vector<double> ramp(12);
  for (size_t i = 0; i < 12; ++i) ramp[i] = double(i);
  for (DType index_dtype : {DType::i64, DType::i32}) {
    for (DType dtype : {DType::f32, DType::bf16, DType::i64}) {
      INFO(name_of(dtype), " index ", name_of(index_dtype));
      // in [outer=2, size=3, inner=2]: rows {0,1} {2,3} {4,5} | {6,7} {8,9} {10,11}
      Tensor in = make({2, 3, 2}, dtype, ramp), out = empty({2, 3, 2}, dtype);
      Tensor index = make({3}, index_dtype, {2, 0, 2});
      index_select_kernel().get(DeviceType::CPU, dtype)(out, in, index, 2, 3, 2);
      CHECK(values_of(out) == std::vector<double>{4, 5, 0, 1, 4, 5, 10, 11, 6, 7, 10, 11});

      // out[index[i]] += src[i] with a repeated index.
      Tensor acc = make({3, 2}, dtype, std::vector<double>(6, 0));
      Tensor src = make({3, 2}, dtype, {1, 2, 3, 4, 5, 6});
      Tensor add_index = make({3}, index_dtype, {0, 2, 0});
      index_add_kernel().get(DeviceType::CPU, dtype)(acc, add_index, src, 1, 3, 2);
      CHECK(values_of(acc) == std::vector<double>{6, 8, 0, 0, 3, 4});

      Tensor bad = make({3}, index_dtype, {0, 3, 1});
      check_error([&] { index_select_kernel().get(DeviceType::CPU, dtype)(out, in, bad, 2, 3, 2); },
                  Status::bad_param, {"index_select", "index 3", "0 to 2"});
      Tensor negative = make({3}, index_dtype, {0, -1, 1});
      check_error(
          [&] { index_add_kernel().get(DeviceType::CPU, dtype)(acc, negative, src, 1, 3, 2); },
          Status::bad_param, {"index_add", "index -1", "0 to 2"});
      CHECK(values_of(acc) == std::vector<double>{6, 8, 0, 0, 3, 4});  // checked before writing
    }
  }
  Tensor floats = make({2}, DType::f32, {0, 1}), out = empty({2, 1, 1}, DType::f32);
  check_error(
      [&] { index_select_kernel().get(DeviceType::CPU, DType::f32)(out, out, floats, 2, 1, 1); },
      Status::bad_param, {"int64 or int32", "float32"});
}

TEST_CASE("gather and scatter_add kernels, including strided inputs") {
  for (DType dtype : {DType::f32, DType::f16, DType::i32}) {
    INFO(name_of(dtype));
    Tensor in = make({2, 3}, dtype, {1, 2, 3, 4, 5, 6});
    Tensor index = make({2, 2}, DType::i64, {2, 0, 1, 1});
    Tensor out = empty({2, 2}, dtype);
    gather_kernel().get(DeviceType::CPU, dtype)(out, in, index, 1);
    CHECK(values_of(out) == std::vector<double>{3, 1, 5, 5});
    Tensor index0 = make({1, 3}, DType::i32, {1, 0, 1}), out0 = empty({1, 3}, dtype);
    gather_kernel().get(DeviceType::CPU, dtype)(out0, in, index0, 0);
    CHECK(values_of(out0) == std::vector<double>{4, 2, 6});
    // A transposed input: in_t = [[1,4],[2,5],[3,6]], gather along dim 0.
    Tensor in_t = make_view(in, {3, 2}, {1, 3}, 0);
    Tensor index_t = make({2, 2}, DType::i64, {2, 0, 0, 1}), out_t = empty({2, 2}, dtype);
    gather_kernel().get(DeviceType::CPU, dtype)(out_t, in_t, index_t, 0);
    CHECK(values_of(out_t) == std::vector<double>{3, 4, 1, 5});
    Tensor bad = make({2, 2}, DType::i64, {0, 3, 1, 1});
    check_error([&] { gather_kernel().get(DeviceType::CPU, dtype)(out, in, bad, 1); },
                Status::bad_param, {"gather", "index 3", "dimension 1 of size 3"});

    Tensor acc = make({2, 3}, dtype, std::vector<double>(6, 0));
    Tensor scatter_index = make({2, 3}, DType::i64, {0, 0, 2, 1, 1, 1});
    Tensor src = make({2, 3}, dtype, {1, 2, 3, 4, 5, 6});
    scatter_add_kernel().get(DeviceType::CPU, dtype)(acc, scatter_index, src, 1);
    CHECK(values_of(acc) == std::vector<double>{3, 0, 3, 0, 15, 0});
    Tensor bad_scatter = make({2, 3}, DType::i64, {0, 0, 0, 1, 1, 5});
    check_error([&] { scatter_add_kernel().get(DeviceType::CPU, dtype)(acc, bad_scatter, src, 1); },
                Status::bad_param, {"scatter_add", "index 5", "0 to 2"});
    CHECK(values_of(acc) == std::vector<double>{3, 0, 3, 0, 15, 0});  // checked before writing
  }
}

TEST_CASE("CPU kernel tables: the registered dtypes") {
  for (DType dtype : dispatch::kAllTypes) {
    CHECK(unary_kernel().has(DeviceType::CPU, dtype));
    CHECK(binary_kernel().has(DeviceType::CPU, dtype));
    CHECK(where_kernel().has(DeviceType::CPU, dtype));
    CHECK(copy_kernel().has(DeviceType::CPU, dtype));
    CHECK(reduce_kernel().has(DeviceType::CPU, dtype));
    CHECK(index_select_kernel().has(DeviceType::CPU, dtype));
    CHECK(gather_kernel().has(DeviceType::CPU, dtype));
    const bool accumulates = is_floating(dtype) || dtype == DType::i32 || dtype == DType::i64;
    CHECK(index_add_kernel().has(DeviceType::CPU, dtype) == accumulates);
    CHECK(scatter_add_kernel().has(DeviceType::CPU, dtype) == accumulates);
    CHECK(gemm_kernel().has(DeviceType::CPU, dtype) == is_floating(dtype));
  }
}

}  // namespace
