// Direct tests of the CPU elementwise kernels (cpu_kernels/elementwise*.cpp): small tensors with
// hand-computed expected values, run through the kernel tables without ops or autograd. Covers the
// unary, binary, where and copy kernels over contiguous, strided and broadcast (stride 0) loops,
// and dtype casts with their rounding edge cases.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ember/kernel_interface/elementwise.h"
#include "support/cpu_kernel_checks.h"

namespace {

using namespace ember;
using namespace ember::testing::cpu_kernels;

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

}  // namespace
