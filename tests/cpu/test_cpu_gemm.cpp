// The CPU GEMM entry (cpu_kernels/gemm.h): OpenBLAS and Eigen agree with a plain triple loop and
// with each other on awkward shapes (sizes 0, 1, odd, just past a block), every transpose, leading
// dims wider than the rows, batch strides with gaps, alpha/beta, a NaN-filled C with beta = 0;
// matmul and an LSTM give the same result on 1 and 2 threads up to reassociation; GEMMs called
// from inside a parallel region are right.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "ember/cpu_kernels/gemm.h"
#include "ember/ember.h"
#include "ember/tensor/parallel.h"

namespace {

using namespace ember;
using cpu::GemmLibrary;

// Restores the GEMM library chosen when the test began.
struct GemmLibraryGuard {
  GemmLibrary saved = cpu::gemm_library();
  ~GemmLibraryGuard() { cpu::set_gemm_library(saved); }
};
// Restores the thread count.
struct ThreadCountGuard {
  int saved = get_num_threads();
  ~ThreadCountGuard() { set_num_threads(saved); }
};

// One batched problem: operands filled with values in [-1, 1], gaps between rows and batch entries
// filled with NaN (a GEMM that reads them fails the comparison).
template <typename T>
struct Problem {
  bool ta, tb;
  int64_t m, n, k, batch;
  T alpha, beta;
  int64_t lda, ldb, ldc, stride_a, stride_b, stride_c;
  std::vector<T> a, b, c;

  Problem(bool ta_, bool tb_, int64_t m_, int64_t n_, int64_t k_, int64_t batch_, T alpha_, T beta_,
          std::mt19937& rng)
      : ta(ta_), tb(tb_), m(m_), n(n_), k(k_), batch(batch_), alpha(alpha_), beta(beta_) {
    const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k;
    const int64_t b_rows = tb ? n : k, b_cols = tb ? k : n;
    lda = a_cols + 2;
    ldb = b_cols + 1;
    ldc = n + 3;
    stride_a = a_rows * lda + 5;
    stride_b = b_rows * ldb + 7;
    stride_c = m * ldc + 1;
    std::uniform_real_distribution<double> u(-1, 1);
    const T nan = std::numeric_limits<T>::quiet_NaN();
    auto fill = [&](std::vector<T>& v, int64_t rows, int64_t cols, int64_t ld, int64_t stride) {
      v.assign(size_t(std::max<int64_t>(1, stride * batch)), nan);
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < cols; ++j) v[size_t(i * stride + r * ld + j)] = T(u(rng));
    };
    fill(a, a_rows, a_cols, lda, stride_a);
    fill(b, b_rows, b_cols, ldb, stride_b);
    // beta == 0 must not read C: fill it with NaN then.
    if (beta == T(0))
      c.assign(size_t(std::max<int64_t>(1, stride_c * batch)), nan);
    else
      fill(c, m, n, ldc, stride_c);
  }

  GemmArgs args(std::vector<T>& out) const {
    GemmArgs g;
    g.trans_a = ta;
    g.trans_b = tb;
    g.m = m;
    g.n = n;
    g.k = k;
    g.alpha = double(alpha);
    g.beta = double(beta);
    g.a = a.data();
    g.lda = lda;
    g.stride_a = stride_a;
    g.b = b.data();
    g.ldb = ldb;
    g.stride_b = stride_b;
    g.c = out.data();
    g.ldc = ldc;
    g.stride_c = stride_c;
    g.batch = batch;
    g.dtype = std::is_same_v<T, float> ? DType::f32 : DType::f64;
    return g;
  }

  // C after the GEMM, through `library`.
  std::vector<T> run(GemmLibrary library) const {
    GemmLibraryGuard guard;
    cpu::set_gemm_library(library);
    std::vector<T> out = c;
    cpu::gemm_batched_native(args(out));
    return out;
  }

  // The reference in double: a triple loop.
  std::vector<double> reference() const {
    std::vector<double> out(c.begin(), c.end());
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          for (int64_t p = 0; p < k; ++p) {
            const double av = a[size_t(i * stride_a + (ta ? p * lda + r : r * lda + p))];
            const double bv = b[size_t(i * stride_b + (tb ? j * ldb + p : p * ldb + j))];
            sum += av * bv;
          }
          double& cv = out[size_t(i * stride_c + r * ldc + j)];
          cv = double(alpha) * sum + (beta == T(0) ? 0.0 : double(beta) * cv);
        }
    return out;
  }

  // Checks C's elements against `expected` within tol * (k + 1) (a NaN fails).
  template <typename U>
  void check(const std::vector<T>& got, const std::vector<U>& expected, double tol) const {
    int64_t bad = 0;
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < n; ++j) {
          const size_t at = size_t(i * stride_c + r * ldc + j);
          const double g = double(got[at]), e = double(expected[at]);
          if (!(std::abs(g - e) <= tol * double(k + 1))) ++bad;
        }
    CHECK_MESSAGE(bad == 0, "m=", m, " n=", n, " k=", k, " ta=", ta, " tb=", tb, " batch=", batch,
                  " alpha=", alpha, " beta=", beta, ": ", bad, " wrong elements");
  }
};

template <typename T>
void compare_libraries(double tol) {
  const int64_t sizes[] = {0, 1, 3, 17, 64, 129};
  const T alphas[] = {T(1), T(-0.5), T(2)};
  const T betas[] = {T(0), T(1), T(0.25)};
  std::mt19937 rng(1234);
  int variant = 0;
  for (int64_t m : sizes)
    for (int64_t n : sizes)
      for (int64_t k : sizes)
        for (int t = 0; t < 4; ++t, ++variant) {
          const T alpha = alphas[variant % 3], beta = betas[(variant / 3) % 3];
          const int64_t batch = 1 + variant % 2;
          // The largest shapes in every layout, the rest spread over the layouts.
          if (m * n * k > 64 * 64 * 64 && (m != 129 || n != 129 || k != 129) && variant % 3 != 0)
            continue;
          const Problem<T> p(t & 1, t & 2, m, n, k, batch, alpha, beta, rng);
          const std::vector<double> expected = p.reference();
          const std::vector<T> eigen = p.run(GemmLibrary::eigen);
          p.check(eigen, expected, tol);
          if (cpu::gemm_has_openblas()) {
            const std::vector<T> blas = p.run(GemmLibrary::openblas);
            p.check(blas, expected, tol);
            p.check(blas, eigen, tol);
          }
        }
}

TEST_CASE("cpu gemm: OpenBLAS and Eigen agree with a triple loop on awkward shapes (f32)") {
  compare_libraries<float>(2e-6);
}

TEST_CASE("cpu gemm: OpenBLAS and Eigen agree with a triple loop on awkward shapes (f64)") {
  compare_libraries<double>(1e-14);
}

TEST_CASE("cpu gemm: the library switch") {
  GemmLibraryGuard guard;
  cpu::set_gemm_library(GemmLibrary::eigen);
  CHECK(cpu::gemm_library() == GemmLibrary::eigen);
  if (cpu::gemm_has_openblas()) {
    cpu::set_gemm_library(GemmLibrary::openblas);
    CHECK(cpu::gemm_library() == GemmLibrary::openblas);
  } else {
    CHECK_THROWS_AS(cpu::set_gemm_library(GemmLibrary::openblas), Error);
  }
}

TEST_CASE("cpu gemm: matmul through both libraries, f32 / f64 / bf16, batched and transposed") {
  GemmLibraryGuard guard;
  const Tensor a = randn({3, 33, 70}), b = randn({70, 65});
  const Tensor at = randn({3, 70, 33}).transpose(1, 2);
  std::vector<Tensor> results;
  for (GemmLibrary lib : {GemmLibrary::eigen, GemmLibrary::openblas}) {
    if (lib == GemmLibrary::openblas && !cpu::gemm_has_openblas()) continue;
    cpu::set_gemm_library(lib);
    results.push_back(matmul(a, b));
    results.push_back(matmul(at, b));
    results.push_back(matmul(a.to(DType::f64), b.to(DType::f64)));
    results.push_back(matmul(a.to(DType::bf16), b.to(DType::bf16)).to(DType::f32));
  }
  const Tensor expected = matmul(a.to(DType::f64), b.to(DType::f64));
  const Tensor expected_t = matmul(at.to(DType::f64), b.to(DType::f64));
  for (size_t i = 0; i < results.size(); i += 4) {
    CHECK(allclose(results[i].to(DType::f64), expected, 1e-5, 1e-5));
    CHECK(allclose(results[i + 1].to(DType::f64), expected_t, 1e-5, 1e-5));
    CHECK(allclose(results[i + 2], expected, 1e-12, 1e-12));
    CHECK(allclose(results[i + 3].to(DType::f64),
                   matmul(a.to(DType::bf16).to(DType::f64), b.to(DType::bf16).to(DType::f64)), 1e-2,
                   1e-2));
  }
}

TEST_CASE("cpu gemm: matmul does not depend on the thread count beyond reassociation") {
  ThreadCountGuard threads;
  const Tensor a = randn({257, 300}), b = randn({300, 129}), batched = randn({4, 65, 300});
  set_num_threads(1);
  const Tensor one = matmul(a, b), one_batched = matmul(batched, b);
  set_num_threads(2);
  const Tensor two = matmul(a, b), two_batched = matmul(batched, b);
  CHECK(allclose(one, two, 1e-5, 1e-5));
  CHECK(allclose(one_batched, two_batched, 1e-5, 1e-5));
}

TEST_CASE("cpu gemm: GEMMs inside a parallel region are right") {
  ThreadCountGuard threads;
  set_num_threads(2);
  std::mt19937 rng(7);
  std::vector<Problem<float>> problems;
  for (int i = 0; i < 4; ++i) problems.emplace_back(i & 1, false, 96, 80, 200, 1, 1.0f, 0.0f, rng);
  std::vector<std::vector<float>> out(problems.size());
  parallel_for(0, int64_t(problems.size()), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      out[size_t(i)] = problems[size_t(i)].c;
      cpu::gemm_batched_native(problems[size_t(i)].args(out[size_t(i)]));
    }
  });
  for (size_t i = 0; i < problems.size(); ++i)
    problems[i].check(out[i], problems[i].reference(), 2e-6);
}

// Batch 70 of hidden 64: the gate loops split the batch over both threads.
TEST_CASE("cpu gemm: an LSTM's outputs and gradients do not depend on the thread count") {
  ThreadCountGuard threads;
  nn::LSTM lstm(nn::LSTMOptions(24, 64).num_layers(2));
  const Tensor x = randn({7, 70, 24}), gy = randn({7, 70, 64});
  std::vector<std::vector<Tensor>> runs;
  for (int n : {1, 2}) {
    set_num_threads(n);
    lstm->zero_grad();
    Tensor xi = x.detach().set_requires_grad(true);
    RnnResult r = lstm->forward(xi);
    r.output.backward(gy);
    std::vector<Tensor> run{r.output.detach(), r.c_n.detach(), xi.grad()};
    for (const Tensor& p : lstm->parameters()) run.push_back(p.grad());
    runs.push_back(run);
  }
  for (size_t i = 0; i < runs[0].size(); ++i)
    CHECK_MESSAGE(allclose(runs[0][i], runs[1][i], 1e-5, 1e-6), "tensor ", i);
}

}  // namespace
