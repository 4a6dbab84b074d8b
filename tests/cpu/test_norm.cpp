// Normalization ops on the CPU (ops/norm.h): batch norm (2-D to 5-D, NCHW and channels_last,
// training and eval) against a reference computed here element by element, the running-statistics
// update against hand-computed values, the fused ReLU / residual tails against their composition,
// layer / group / instance norm against references, (their op-table rows run in
// test_gradcheck.cpp), float16 / bfloat16 with float32 parameters, empty inputs, and the
// argument errors.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/ops/norm.h"
#include "support/op_table.h"

using namespace ember;

namespace {

TensorOptions f64() { return TensorOptions(DType::f64); }

Tensor random_f64(const Shape& shape, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  Generator gen(Device::cpu(), seed);
  return randn(shape, f64(), &gen) * scale + shift;
}

int64_t spatial(const Shape& s) {
  int64_t n = 1;
  for (size_t d = 2; d < s.size(); ++d) n *= s[d];
  return n;
}

// Per-channel batch statistics of x (logical order [N, C, S]): mean and biased variance, in double.
struct ChannelStats {
  std::vector<double> mean, var;
};
ChannelStats channel_stats(const Tensor& x) {
  const int64_t N = x.size(0), C = x.size(1), S = spatial(x.sizes());
  const std::vector<double> v = x.to_vector();
  ChannelStats st{std::vector<double>(size_t(C), 0.0), std::vector<double>(size_t(C), 0.0)};
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) sum += v[size_t((n * C + c) * S + s)];
    const double mean = sum / double(N * S);
    double m2 = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) m2 += std::pow(v[size_t((n * C + c) * S + s)] - mean, 2);
    st.mean[size_t(c)] = mean;
    st.var[size_t(c)] = m2 / double(N * S);
  }
  return st;
}

// y[n, c, s] = (x - mean[c]) / sqrt(var[c] + eps) * w[c] + b[c] (+ r) (relu), logical order.
std::vector<double> bn_reference(const Tensor& x, const std::vector<double>& mean,
                                 const std::vector<double>& var, const std::vector<double>& w,
                                 const std::vector<double>& b, double eps,
                                 const std::vector<double>* residual = nullptr, bool relu = false) {
  const int64_t N = x.size(0), C = x.size(1), S = spatial(x.sizes());
  std::vector<double> v = x.to_vector(), y(v.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s) {
        const size_t i = size_t((n * C + c) * S + s), k = size_t(c);
        double o = (v[i] - mean[k]) / std::sqrt(var[k] + eps) * w[k] + b[k];
        if (residual != nullptr) o += (*residual)[i];
        y[i] = relu ? std::max(o, 0.0) : o;
      }
  return y;
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// Runs f, expects an Error with `status` whose message contains every fragment.
template <typename F>
void expect_error(F f, Status status, std::vector<std::string> fragments) {
  try {
    f();
    FAIL("expected ember::Error");
  } catch (const Error& e) {
    CHECK(e.status() == status);
    for (const std::string& frag : fragments) {
      CAPTURE(frag);
      CHECK_MESSAGE(std::string(e.what()).find(frag) != std::string::npos, e.what());
    }
  }
}

}  // namespace

TEST_CASE("batch_norm training: batch statistics, output layout and running statistics") {
  struct Case {
    Shape shape;
    bool channels_last;
  };
  const std::vector<Case> cases = {{{6, 5}, false},
                                   {{3, 4, 7}, false},
                                   {{3, 5, 4, 3}, false},
                                   {{3, 5, 4, 3}, true},
                                   {{2, 3, 2, 3, 2}, false},
                                   {{2, 3, 2, 3, 2}, true},
                                   {{1, 7, 3, 1}, false},
                                   {{4, 3, 1, 1}, true},
                                   // Large enough for the channels to be split across threads,
                                   // with an odd plane (the sums' lanes end unevenly).
                                   {{3, 5, 131, 167}, false},
                                   {{3, 5, 131, 167}, true}};
  for (const Case& cs : cases) {
    CAPTURE(shape_str(cs.shape));
    CAPTURE(cs.channels_last);
    const int64_t C = cs.shape[1];
    Tensor x = random_f64(cs.shape, 1, 2.0, 3.0);
    if (cs.channels_last) x = x.contiguous(MemoryFormat::channels_last);
    Tensor w = random_f64({C}, 2, 0.5, 1.0), b = random_f64({C}, 3);
    Tensor rm = random_f64({C}, 4), rv = random_f64({C}, 5, 0.1, 1.0);
    const std::vector<double> rm0 = rm.to_vector(), rv0 = rv.to_vector();
    const double momentum = 0.3, eps = 1e-3;
    Tensor y = batch_norm(x, w, b, rm, rv, true, momentum, eps);

    const ChannelStats st = channel_stats(x);
    CHECK(max_diff(y.to_vector(),
                   bn_reference(x, st.mean, st.var, w.to_vector(), b.to_vector(), eps)) < 1e-12);
    CHECK(y.sizes() == x.sizes());
    CHECK(y.strides() == x.strides());  // NCHW stays NCHW, channels_last stays channels_last
    // running = (1 - momentum) * running + momentum * stat, with the unbiased variance.
    const double count = double(x.numel() / C);
    std::vector<double> rm_ref(static_cast<size_t>(C)), rv_ref(static_cast<size_t>(C));
    for (size_t c = 0; c < size_t(C); ++c) {
      rm_ref[c] = (1 - momentum) * rm0[c] + momentum * st.mean[c];
      rv_ref[c] = (1 - momentum) * rv0[c] + momentum * st.var[c] * count / (count - 1);
    }
    CHECK(max_diff(rm.to_vector(), rm_ref) < 1e-12);
    CHECK(max_diff(rv.to_vector(), rv_ref) < 1e-12);
  }
}

TEST_CASE("batch_norm training backward on a large tensor matches the formula") {
  // dx = invstd * w * (g - mean(g) - xhat * mean(g * xhat)), dw = sum(g * xhat), db = sum(g):
  // computed here element by element, against the kernels on a tensor large enough for their
  // channels to be split across threads, NCHW and channels_last.
  const Shape shape = {3, 5, 131, 167};
  const int64_t N = shape[0], C = shape[1], S = spatial(shape);
  const double eps = 1e-5;
  for (bool channels_last : {false, true}) {
    CAPTURE(channels_last);
    Tensor x = random_f64(shape, 41, 2.0, 1.0), gy = random_f64(shape, 42);
    if (channels_last) x = x.contiguous(MemoryFormat::channels_last);
    Tensor w = random_f64({C}, 43, 0.5, 1.0), b = random_f64({C}, 44);
    Tensor xl = x.detach().set_requires_grad(true), wl = w.detach().set_requires_grad(true),
           bl = b.detach().set_requires_grad(true);
    (batch_norm(xl, wl, bl, Tensor(), Tensor(), true, 0.1, eps) * gy).sum().backward();

    const ChannelStats st = channel_stats(x);
    const std::vector<double> xv = x.to_vector(), g = gy.to_vector(), wv = w.to_vector();
    std::vector<double> dx(xv.size()), dw(size_t(C), 0.0), db(size_t(C), 0.0);
    for (int64_t c = 0; c < C; ++c) {
      const size_t k = size_t(c);
      const double invstd = 1.0 / std::sqrt(st.var[k] + eps);
      auto at = [&](int64_t n, int64_t sp) { return size_t((n * C + c) * S + sp); };
      for (int64_t n = 0; n < N; ++n)
        for (int64_t sp = 0; sp < S; ++sp) {
          const size_t i = at(n, sp);
          db[k] += g[i];
          dw[k] += g[i] * (xv[i] - st.mean[k]) * invstd;
        }
      const double count = double(N * S);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t sp = 0; sp < S; ++sp) {
          const size_t i = at(n, sp);
          const double xhat = (xv[i] - st.mean[k]) * invstd;
          dx[i] = invstd * wv[k] * (g[i] - db[k] / count - xhat * dw[k] / count);
        }
    }
    CHECK(max_diff(xl.grad().to_vector(), dx) < 1e-10);
    CHECK(max_diff(wl.grad().to_vector(), dw) < 1e-8);
    CHECK(max_diff(bl.grad().to_vector(), db) < 1e-8);
  }
}

TEST_CASE("batch_norm updates strided running statistics in place, through the view") {
  // A strided (non-contiguous) running-statistics view is updated through the view.
  Tensor x = random_f64({8, 3, 5}, 11);
  Tensor storage = zeros({3, 2}, f64());
  Tensor rm = storage.select(1, 0), rv = storage.select(1, 1);
  rv.fill_(1.0);
  const uint64_t version = rm.version();
  (void)batch_norm(x, {}, {}, rm, rv, true, 0.5, 1e-5);
  const ChannelStats st = channel_stats(x);
  for (size_t c = 0; c < 3; ++c) {
    CHECK(rm.to_vector()[c] == doctest::Approx(0.5 * st.mean[c]).epsilon(1e-12));
    CHECK(rv.to_vector()[c] == doctest::Approx(0.5 + 0.5 * st.var[c] * 40.0 / 39.0).epsilon(1e-12));
  }
  CHECK(rm.version() > version);
}

TEST_CASE("batch_norm eval normalizes with the running statistics and leaves them alone") {
  Tensor x = random_f64({4, 3, 5, 2}, 21);
  Tensor w = random_f64({3}, 22), b = random_f64({3}, 23);
  Tensor rm = random_f64({3}, 24), rv = random_f64({3}, 25, 0.1, 2.0);
  const std::vector<double> rm0 = rm.to_vector(), rv0 = rv.to_vector();
  Tensor y = batch_norm(x, w, b, rm, rv, false, 0.1, 1e-5);
  CHECK(max_diff(y.to_vector(), bn_reference(x, rm0, rv0, w.to_vector(), b.to_vector(), 1e-5)) <
        1e-12);
  CHECK(rm.to_vector() == rm0);
  CHECK(rv.to_vector() == rv0);
  // Later in-place changes of the running statistics do not change the saved backward.
  x.set_requires_grad(true);
  Tensor y2 = batch_norm(x, w, b, rm, rv, false, 0.1, 1e-5);
  Tensor expected_grad = (w / sqrt(rv + 1e-5)).view({1, 3, 1, 1}).expand(x.sizes()).contiguous();
  rv.fill_(100.0);
  y2.sum().backward();
  CHECK(max_abs_diff(x.grad(), expected_grad) < 1e-12);
}

TEST_CASE("fused batch_norm tails equal their composition, forward and backward") {
  for (bool training : {true, false}) {
    for (bool channels_last : {false, true}) {
      CAPTURE(training);
      CAPTURE(channels_last);
      Tensor x0 = random_f64({3, 4, 5, 3}, 31), r0 = random_f64({3, 4, 5, 3}, 32);
      if (channels_last) x0 = x0.contiguous(MemoryFormat::channels_last);
      Tensor w0 = random_f64({4}, 33, 0.5, 1.0), b0 = random_f64({4}, 34);
      Tensor rm = random_f64({4}, 35), rv = random_f64({4}, 36, 0.1, 1.0);
      Tensor gy = random_f64({3, 4, 5, 3}, 37);
      auto leaves = [&] {
        return std::vector<Tensor>{
            x0.detach().set_requires_grad(true), r0.detach().set_requires_grad(true),
            w0.detach().set_requires_grad(true), b0.detach().set_requires_grad(true)};
      };
      std::vector<Tensor> a = leaves(), f = leaves(), g = leaves(), h = leaves();
      Tensor composed_relu = relu(batch_norm(a[0], a[2], a[3], rm.clone(), rv.clone(), training));
      Tensor fused_relu = batch_norm_relu(f[0], f[2], f[3], rm.clone(), rv.clone(), training);
      Tensor composed_add =
          relu(batch_norm(g[0], g[2], g[3], rm.clone(), rv.clone(), training) + g[1]);
      Tensor fused_add =
          batch_norm_add_relu(h[0], h[1], h[2], h[3], rm.clone(), rv.clone(), training);
      CHECK(max_abs_diff(fused_relu, composed_relu) < 1e-12);
      CHECK(max_abs_diff(fused_add, composed_add) < 1e-12);
      (composed_relu * gy).sum().backward();
      (fused_relu * gy).sum().backward();
      (composed_add * gy).sum().backward();
      (fused_add * gy).sum().backward();
      for (int i : {0, 2, 3}) {
        CAPTURE(i);
        CHECK(max_abs_diff(f[size_t(i)].grad(), a[size_t(i)].grad()) < 1e-10);
      }
      CHECK_FALSE(f[1].grad().defined());
      for (int i : {0, 1, 2, 3}) {
        CAPTURE(i);
        CHECK(max_abs_diff(h[size_t(i)].grad(), g[size_t(i)].grad()) < 1e-10);
      }
    }
  }
}

TEST_CASE("layer_norm, group_norm and instance_norm match references") {
  SUBCASE("layer_norm over the last two dims") {
    Tensor x = random_f64({3, 4, 5}, 41, 3.0, -2.0), w = random_f64({4, 5}, 42),
           b = random_f64({4, 5}, 43);
    Tensor y = layer_norm(x, {4, 5}, w, b, 1e-4);
    const std::vector<double> xv = x.to_vector(), wv = w.to_vector(), bv = b.to_vector();
    std::vector<double> ref(xv.size());
    for (size_t r = 0; r < 3; ++r) {
      double mean = 0, var = 0;
      for (size_t j = 0; j < 20; ++j) mean += xv[r * 20 + j] / 20;
      for (size_t j = 0; j < 20; ++j) var += std::pow(xv[r * 20 + j] - mean, 2) / 20;
      for (size_t j = 0; j < 20; ++j)
        ref[r * 20 + j] = (xv[r * 20 + j] - mean) / std::sqrt(var + 1e-4) * wv[j] + bv[j];
    }
    CHECK(max_diff(y.to_vector(), ref) < 1e-12);
  }
  SUBCASE("group_norm: statistics per (sample, group), affine per channel") {
    const int64_t N = 2, C = 6, G = 3, S = 4;
    Tensor x = random_f64({N, C, 2, 2}, 44, 2.0, 1.0), w = random_f64({C}, 45),
           b = random_f64({C}, 46);
    Tensor y = group_norm(x, G, w, b, 1e-5);
    const std::vector<double> xv = x.to_vector(), wv = w.to_vector(), bv = b.to_vector();
    std::vector<double> ref(xv.size());
    const int64_t D = (C / G) * S;
    for (int64_t r = 0; r < N * G; ++r) {
      double mean = 0, var = 0;
      for (int64_t j = 0; j < D; ++j) mean += xv[size_t(r * D + j)] / double(D);
      for (int64_t j = 0; j < D; ++j) var += std::pow(xv[size_t(r * D + j)] - mean, 2) / double(D);
      for (int64_t j = 0; j < D; ++j) {
        const size_t c = size_t((r % G) * (C / G) + j / S);
        ref[size_t(r * D + j)] =
            (xv[size_t(r * D + j)] - mean) / std::sqrt(var + 1e-5) * wv[c] + bv[c];
      }
    }
    CHECK(max_diff(y.to_vector(), ref) < 1e-12);
    // A channels_last input gives the same values.
    CHECK(max_abs_diff(group_norm(x.contiguous(MemoryFormat::channels_last), G, w, b, 1e-5), y) <
          1e-12);
  }
  SUBCASE("instance_norm: per (sample, channel), running statistics from the per-instance ones") {
    const int64_t N = 3, C = 2, S = 6;
    Tensor x = random_f64({N, C, S}, 47, 1.5, 0.5);
    Tensor rm = zeros({C}, f64()), rv = ones({C}, f64());
    Tensor y = instance_norm(x, {}, {}, rm, rv, true, 0.2, 1e-5);
    const std::vector<double> xv = x.to_vector();
    std::vector<double> ref(xv.size()), rm_ref(size_t(C), 0.0), rv_ref(size_t(C), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) {
        const size_t at = size_t((n * C + c) * S);
        double mean = 0, m2 = 0;
        for (int64_t s = 0; s < S; ++s) mean += xv[at + size_t(s)] / double(S);
        for (int64_t s = 0; s < S; ++s) m2 += std::pow(xv[at + size_t(s)] - mean, 2);
        for (int64_t s = 0; s < S; ++s)
          ref[at + size_t(s)] = (xv[at + size_t(s)] - mean) / std::sqrt(m2 / double(S) + 1e-5);
        rm_ref[size_t(c)] += mean / double(N);
        rv_ref[size_t(c)] += m2 / double(S - 1) / double(N);
      }
    CHECK(max_diff(y.to_vector(), ref) < 1e-12);
    for (size_t c = 0; c < size_t(C); ++c) {
      CHECK(rm.to_vector()[c] == doctest::Approx(0.2 * rm_ref[c]).epsilon(1e-12));
      CHECK(rv.to_vector()[c] == doctest::Approx(0.8 + 0.2 * rv_ref[c]).epsilon(1e-12));
    }
    // Without input statistics it is eval-mode batch norm with the running statistics.
    Tensor y_eval = instance_norm(x, {}, {}, rm, rv, false, 0.2, 1e-5);
    CHECK(max_abs_diff(y_eval, batch_norm(x, {}, {}, rm, rv, false, 0.2, 1e-5)) == 0);
  }
}

TEST_CASE("batch_norm gradients with only some inputs requiring grad") {
  Tensor x = random_f64({4, 3, 2, 2}, 51);
  Tensor w = random_f64({3}, 52).set_requires_grad(true), b = random_f64({3}, 53);
  Tensor y = batch_norm(x, w, b, {}, {}, true);
  (y * random_f64({4, 3, 2, 2}, 54)).sum().backward();
  REQUIRE(w.grad().defined());
  CHECK_FALSE(b.grad().defined());
  // d/dw sum(g * y) = sum over (n, s) of g * xhat.
  const ChannelStats st = channel_stats(x);
  const std::vector<double> xv = x.to_vector(), gv = random_f64({4, 3, 2, 2}, 54).to_vector();
  for (int64_t c = 0; c < 3; ++c) {
    double expect = 0;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t s = 0; s < 4; ++s) {
        const size_t i = size_t((n * 3 + c) * 4 + s);
        expect += gv[i] * (xv[i] - st.mean[size_t(c)]) / std::sqrt(st.var[size_t(c)] + 1e-5);
      }
    CHECK(w.grad().to_vector()[size_t(c)] == doctest::Approx(expect).epsilon(1e-10));
  }
}

TEST_CASE("float16 / bfloat16 inputs with float32 parameters on the CPU") {
  for (DType dt : {DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(dt));
    Tensor x64 = random_f64({4, 6, 3, 3}, 61);
    Tensor x = x64.to(dt).set_requires_grad(true);
    Tensor w = random_f64({6}, 62, 0.5, 1.0).to(DType::f32).set_requires_grad(true);
    Tensor b = random_f64({6}, 63).to(DType::f32).set_requires_grad(true);
    Tensor rm = zeros({6}), rv = ones({6});
    Tensor y = batch_norm(x, w, b, rm, rv, true);
    CHECK(y.dtype() == dt);
    Tensor ref = batch_norm(x.detach().to(DType::f64), w.detach().to(DType::f64),
                            b.detach().to(DType::f64), {}, {}, true);
    CHECK(max_abs_diff(y, ref) < (dt == DType::bf16 ? 3e-2 : 4e-3));
    y.sum().backward();
    CHECK(x.grad().dtype() == dt);
    CHECK(w.grad().dtype() == DType::f32);
    CHECK(b.grad().dtype() == DType::f32);
    CHECK(b.grad().to_vector()[0] == doctest::Approx(36.0));
    CHECK(rm.dtype() == DType::f32);
    Tensor ln = layer_norm(x, {3, 3}, ones({3, 3}), zeros({3, 3}));
    CHECK(ln.dtype() == dt);
    CHECK(max_abs_diff(ln, layer_norm(x.detach().to(DType::f64), {3, 3})) <
          (dt == DType::bf16 ? 3e-2 : 4e-3));
  }
}

TEST_CASE("layer_norm and group_norm with parameters in the input's 16-bit dtype on the CPU") {
  // The row-norm kernels read such parameters as they are (no conversion to float32 first).
  for (DType dt : {DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(dt));
    const double tol = dt == DType::bf16 ? 3e-2 : 4e-3;
    Tensor x = random_f64({4, 6, 3, 3}, 64).to(dt).set_requires_grad(true);
    Tensor w = random_f64({3, 3}, 65, 0.5, 1.0).to(dt).set_requires_grad(true);
    Tensor b = random_f64({3, 3}, 66).to(dt).set_requires_grad(true);
    Tensor y = layer_norm(x, {3, 3}, w, b);
    CHECK(y.dtype() == dt);
    const Tensor x64 = x.detach().to(DType::f64);
    CHECK(max_abs_diff(y, layer_norm(x64, {3, 3}, w.detach().to(DType::f64),
                                     b.detach().to(DType::f64))) < tol);
    y.sum().backward();
    CHECK(w.grad().dtype() == dt);
    CHECK(b.grad().to(DType::f64).sum().item() == doctest::Approx(216.0));  // 9 values, 24 rows
    Tensor gw = random_f64({6}, 67, 0.5, 1.0).to(dt), gb = random_f64({6}, 68).to(dt);
    Tensor g = group_norm(x.detach(), 3, gw, gb);
    CHECK(g.dtype() == dt);
    CHECK(max_abs_diff(g, group_norm(x64, 3, gw.to(DType::f64), gb.to(DType::f64))) < tol);
  }
}

TEST_CASE("empty inputs give empty outputs and zero parameter gradients") {
  Tensor x = zeros({0, 3, 4, 4}, f64()).set_requires_grad(true);
  Tensor w = ones({3}, f64()).set_requires_grad(true),
         b = zeros({3}, f64()).set_requires_grad(true);
  Tensor rm = zeros({3}, f64()), rv = ones({3}, f64());
  Tensor y = batch_norm(x, w, b, rm, rv, true);
  CHECK(y.sizes() == x.sizes());
  y.sum().backward();
  CHECK(x.grad().sizes() == x.sizes());
  CHECK(w.grad().to_vector() == std::vector<double>{0, 0, 0});
  CHECK(rv.to_vector() == std::vector<double>{1, 1, 1});  // untouched
  Tensor e = zeros({0, 5}, f64()).set_requires_grad(true);
  Tensor ln = layer_norm(e, {5});
  CHECK(ln.sizes() == Shape{0, 5});
}

TEST_CASE("normalization argument errors name the op, the argument and the shapes") {
  Tensor x = random_f64({2, 5, 3, 3}, 71).to(DType::f32);
  Tensor c5 = ones({5}), c4 = ones({4});
  expect_error([&] { batch_norm(x, c4, c5, {}, {}, true); }, Status::bad_param,
               {"batch_norm", "weight", "[5]", "[4]", "[2, 5, 3, 3]"});
  expect_error([&] { batch_norm(x, c5, c4, {}, {}, true); }, Status::bad_param,
               {"batch_norm", "bias", "[4]"});
  expect_error([&] { batch_norm(x, c5, c5, ones({3}), ones({5}), true); }, Status::bad_param,
               {"running_mean", "[3]"});
  expect_error([&] { batch_norm(x, c5, c5, c5, Tensor(), true); }, Status::bad_param,
               {"running_mean and running_var"});
  expect_error([&] { batch_norm(x, c5, c5, {}, {}, false); }, Status::bad_param,
               {"evaluation mode", "running_mean"});
  expect_error(
      [&] {
        batch_norm(ones({1, 5, 1, 1}), c5, c5, {}, {}, true);
      },
      Status::bad_param, {"more than 1 value per channel", "[1, 5, 1, 1]"});
  expect_error([&] { batch_norm(ones({5}), {}, {}, {}, {}, true); }, Status::bad_param,
               {"batch_norm", "[5]"});
  expect_error([&] { batch_norm(x, ones({5}, TensorOptions(DType::f64)), c5, {}, {}, true); },
               Status::bad_param, {"weight", "float64", "float32"});
  expect_error(
      [&] {
        batch_norm(x.to(DType::bf16), c5, ones({5}, TensorOptions(DType::bf16)), {}, {}, true);
      },
      Status::bad_param, {"bias", "bfloat16", "weight", "float32"});
  expect_error([&] { batch_norm(x, c5, c5, zeros({5}).set_requires_grad(true), ones({5}), true); },
               Status::bad_param, {"running statistics", "require grad"});
  expect_error([&] { batch_norm(x.to(DType::i64), {}, {}, {}, {}, true); }, Status::not_supported,
               {"batch_norm", "int64"});
  expect_error(
      [&] {
        batch_norm_add_relu(x, ones({2, 5, 3, 4}), c5, c5, {}, {}, true);
      },
      Status::bad_param, {"batch_norm_add_relu", "residual", "[2, 5, 3, 3]", "[2, 5, 3, 4]"});
  expect_error(
      [&] {
        batch_norm_add_relu(x, ones({2, 5, 3, 3}, TensorOptions(DType::f64)), c5, c5, {}, {}, true);
      },
      Status::bad_param, {"residual", "float64"});
  expect_error(
      [&] {
        layer_norm(x, {3, 4});
      },
      Status::bad_param, {"layer_norm", "normalized_shape", "[3, 4]", "[2, 5, 3, 3]"});
  expect_error([&] { layer_norm(x, {5, 3, 3, 3, 3}); }, Status::bad_param, {"normalized_shape"});
  expect_error([&] { layer_norm(x, {}); }, Status::bad_param, {"normalized_shape is empty"});
  expect_error(
      [&] {
        layer_norm(x, {3, 3}, ones({9}));
      },
      Status::bad_param, {"weight", "[3, 3]", "[9]"});
  expect_error([&] { group_norm(x, 2, c5, c5); }, Status::bad_param,
               {"group_norm", "groups = 2", "5 channels"});
  expect_error([&] { group_norm(x, 0); }, Status::bad_param, {"groups must be >= 1"});
  expect_error([&] { group_norm(x, 5, c4, c5); }, Status::bad_param, {"weight", "[5]", "[4]"});
  expect_error(
      [&] {
        instance_norm(ones({2, 5}));
      },
      Status::bad_param, {"instance_norm", "[2, 5]"});
  expect_error(
      [&] {
        instance_norm(ones({2, 5, 1}));
      },
      Status::bad_param, {"more than 1 spatial element"});
}

TEST_CASE("batch_norm training forward runs through the algorithm cache: CPU slot and keys") {
  const auto& slot = batch_norm_forward_slot(DeviceType::CPU);
  CHECK(slot.name() == "batch_norm.forward");
  CHECK(slot.names() == std::vector<std::string>{"two_pass"});
  auto problem = [](const Shape& shape, bool channels_last) {
    Tensor x = zeros(shape);
    if (channels_last) x = x.contiguous(MemoryFormat::channels_last);
    BatchNormForwardProblem p;
    p.x = x;
    p.y = empty_like(x);
    p.layout = ChannelLayout{shape[0], shape[1], shape[2] * shape[3], channels_last};
    p.save_mean = empty({shape[1]});
    p.save_invstd = empty({shape[1]});
    return p;
  };
  const BatchNormForwardProblem base = problem({2, 3, 4, 5}, false);
  CHECK(batch_norm_forward_choose(base).name == "two_pass");
  // Every property that can change an algorithm's applicability is in the key.
  BatchNormForwardProblem relu = base, residual = base, stats = base,
                          bigger = problem({4, 3, 4, 5}, false);
  relu.relu = true;
  residual.relu = true;
  residual.residual = zeros({2, 3, 4, 5});
  stats.running_mean = zeros({3});
  stats.running_var = ones({3});
  const BatchNormForwardProblem nhwc = problem({2, 3, 4, 5}, true);
  const dispatch::AlgoKey key = batch_norm_forward_key(base);
  CHECK(key == batch_norm_forward_key(problem({2, 3, 4, 5}, false)));
  for (const BatchNormForwardProblem* other :
       std::vector<const BatchNormForwardProblem*>{&relu, &residual, &stats, &bigger, &nhwc})
    CHECK(key != batch_norm_forward_key(*other));
  BatchNormForwardProblem half_stats = stats;
  half_stats.running_mean = zeros({3}, TensorOptions(DType::f16));
  half_stats.running_var = ones({3}, TensorOptions(DType::f16));
  CHECK(batch_norm_forward_key(stats) != batch_norm_forward_key(half_stats));

  // The scratch problem writes fresh outputs and COPIES of the running statistics.
  const BatchNormForwardProblem scratch = stats.with_scratch_outputs();
  CHECK(scratch.x.data_ptr() == stats.x.data_ptr());
  CHECK(scratch.y.data_ptr() != stats.y.data_ptr());
  CHECK(scratch.save_mean.data_ptr() != stats.save_mean.data_ptr());
  CHECK(scratch.running_mean.data_ptr() != stats.running_mean.data_ptr());
  CHECK(scratch.running_var.data_ptr() != stats.running_var.data_ptr());
  CHECK(scratch.y.is_contiguous() == stats.y.is_contiguous());
  CHECK(nhwc.with_scratch_outputs().y.is_contiguous(MemoryFormat::channels_last));

  // Benchmark mode (timing the single candidate on scratch outputs) updates the caller's running
  // statistics exactly once.
  dispatch::algo_cache().clear();
  dispatch::AlgoModeGuard benchmark(dispatch::AlgoMode::benchmark);
  Tensor x = arange(0, 8, 1, TensorOptions(DType::f32)).reshape({4, 2});  // channel 0: 0 2 4 6
  Tensor rm = zeros({2}), rv = ones({2});
  batch_norm(x, Tensor(), Tensor(), rm, rv, true, 0.5, 1e-5);
  CHECK(rm.to_vector()[0] == doctest::Approx(1.5));        // 0.5 * 0 + 0.5 * 3
  CHECK(rv.to_vector()[0] == doctest::Approx(3.8333333));  // 0.5 * 1 + 0.5 * 20 / 3
  // Forcing an algorithm the slot does not have is an error naming the slot's algorithms.
  dispatch::AlgoSettingsGuard forced(
      dispatch::current_algo_settings().force("batch_norm", "persistent"));
  CHECK_THROWS_AS(batch_norm_forward_choose(base), Error);
}
