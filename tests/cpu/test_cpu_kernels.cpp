// Direct tests of the CPU reduction, GEMM and index kernels (cpu_kernels/): small tensors with
// hand-computed expected values, run through the kernel tables without ops or autograd. Covers
// reductions (Welford precision, argmax ties and NaN, empty reductions), GEMM layouts, the index
// kernels' range checks, and the dtypes each CPU kernel table registers. The elementwise kernels'
// tests are in test_cpu_kernels_elementwise.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ember/kernel_interface/elementwise.h"
#include "ember/kernel_interface/gemm.h"
#include "ember/kernel_interface/indexing.h"
#include "ember/kernel_interface/reduce.h"
#include "support/cpu_kernel_checks.h"

namespace {

using namespace ember;
using namespace ember::testing::cpu_kernels;

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
