// The CPU conv2d algorithms beyond the shared sweep of test_conv_cpu.cpp: winograd (forward and
// backward-data, float32 and float64) against an fp64 reference over awkward shapes (batch 0..3,
// channels not multiples of 8, odd and tiny maps, padding 0/1/2 per axis), every algorithm forced
// on NCHW and channels_last operands, results independent of the thread count, gradcheck through
// the op with winograd forced, the heuristic's choices on ResNet layers, and the bounded
// first-sight timing of benchmark mode on the CPU (docs/dispatch.md).
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstring>

#include "ember/dispatch/algo_cache.h"
#include "ember/ember.h"
#include "ember/ops/conv.h"
#include "support/algo_cache_fakes.h"
#include "support/conv_cases.h"

using namespace ember;
using dispatch::AlgoMode;
using dispatch::AlgoSettings;
using dispatch::AlgoSettingsGuard;
using dispatch::Direction;
using testing::ConvCase;
using testing::params;

namespace {

// fp64 convolution of a stride-1, dilation-1, ungrouped case in the forward and backward-data
// directions on host vectors (NCHW / KCRS).
struct Expected {
  std::vector<double> y, dx;
};
Expected reference(const ConvCase& c, int64_t P, int64_t Q, const std::vector<double>& x,
                   const std::vector<double>& w, const std::vector<double>& dy) {
  Expected e;
  e.y.assign(size_t(c.N * c.K * P * Q), 0.0);
  e.dx.assign(x.size(), 0.0);
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t k = 0; k < c.K; ++k)
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q)
          for (int64_t ch = 0; ch < c.C; ++ch)
            for (int64_t r = 0; r < c.R; ++r)
              for (int64_t s = 0; s < c.S; ++s) {
                const int64_t h = p - c.p.padding[0] + r, ww = q - c.p.padding[1] + s;
                if (h < 0 || h >= c.H || ww < 0 || ww >= c.W) continue;
                const size_t yi = size_t(((n * c.K + k) * P + p) * Q + q);
                const size_t xi = size_t(((n * c.C + ch) * c.H + h) * c.W + ww);
                const size_t wi = size_t(((k * c.C + ch) * c.R + r) * c.S + s);
                e.y[yi] += x[xi] * w[wi];
                e.dx[xi] += dy[yi] * w[wi];
              }
  return e;
}

double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double v : a) m = std::max(m, std::abs(v));
  return m;
}
double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

std::string force_key(Direction d) { return std::string("conv2d.") + dispatch::direction_name(d); }

const std::vector<ConvCase>& winograd_cases() {
  static const std::vector<ConvCase> cases = {
      {"1 image, 1 channel, 1x1 map padded", 1, 1, 1, 1, 1, 3, 3, params(1, 1, 1, 1, 1, 1, 1)},
      {"3x3 map unpadded: one output", 2, 3, 3, 3, 5, 3, 3, params(1, 1, 0, 0, 1, 1, 1)},
      {"odd map, padding 1", 3, 5, 7, 9, 6, 3, 3, params(1, 1, 1, 1, 1, 1, 1)},
      {"even map, padding 2", 2, 4, 6, 8, 3, 3, 3, params(1, 1, 2, 2, 1, 1, 1)},
      {"padding 0 / 2 per axis", 1, 7, 5, 4, 9, 3, 3, params(1, 1, 0, 2, 1, 1, 1)},
      {"padding 2 / 1, thin map", 2, 3, 2, 11, 4, 3, 3, params(1, 1, 2, 1, 1, 1, 1)},
      {"13 -> 17 channels, several tile blocks", 3, 13, 15, 13, 17, 3, 3,
       params(1, 1, 1, 1, 1, 1, 1)},
      {"empty batch", 0, 3, 5, 5, 4, 3, 3, params(1, 1, 1, 1, 1, 1, 1)},
  };
  return cases;
}

}  // namespace

TEST_CASE("conv2d winograd: forward and backward-data match the fp64 reference") {
  for (DType dtype : {DType::f64, DType::f32}) {
    for (const ConvCase& c : winograd_cases()) {
      CAPTURE(c.name);
      CAPTURE(dtype_name(dtype));
      const int64_t P = c.H + 2 * c.p.padding[0] - 2, Q = c.W + 2 * c.p.padding[1] - 2;
      Tensor x = randn({c.N, c.C, c.H, c.W}, dtype);
      Tensor w = randn({c.K, c.C, 3, 3}, dtype);
      Tensor dy = randn({c.N, c.K, P, Q}, dtype);
      Expected e = reference(c, P, Q, x.to_vector(), w.to_vector(), dy.to_vector());
      // F(2x2, 3x3) in float32: a few ulps of the largest term's sum per channel.
      const double scale = std::max(1.0, std::max(max_abs(e.y), max_abs(e.dx)));
      const double tol =
          (dtype == DType::f64 ? 1e-12 : 2e-6) * scale * std::sqrt(double(c.C + c.K));
      for (Direction d : {Direction::forward, Direction::backward_data}) {
        CAPTURE(dispatch::direction_name(d));
        AlgoSettingsGuard forced(AlgoSettings().force(force_key(d), "winograd"));
        ConvProblem pr{d, x, w, dy, c.p, true};
        const std::vector<double>* expected = &e.y;
        if (d == Direction::forward) {
          pr.output = full({c.N, c.K, P, Q}, 1e3, dtype);  // overwritten, not accumulated into
        } else {
          pr.input = full(x.sizes(), 1e3, dtype);
          expected = &e.dx;
        }
        CHECK(conv2d_choose(pr).name == "winograd");
        conv2d_run(pr);
        CHECK(max_diff(pr.written().to_vector(), *expected) < tol);
      }
    }
  }
}

TEST_CASE("conv2d winograd: applies to 3x3 stride-1 ungrouped layers only, never backward-filter") {
  Tensor x = randn({1, 4, 8, 8});
  auto applies = [&](Shape w_shape, Conv2dParams p) {
    ConvProblem pr{Direction::forward, x, randn(w_shape), Tensor(), p, true};
    Shape out = conv2d(x, pr.weight, Tensor(), p).sizes();
    pr.output = empty(out);
    for (const auto& a : conv2d_slot(Direction::forward, DeviceType::CPU).names())
      if (a == "winograd") {
        AlgoSettingsGuard g(AlgoSettings().force("conv2d.forward", "winograd"));
        try {
          return conv2d_choose(pr).name == "winograd";
        } catch (const Error&) {
          return false;
        }
      }
    return false;
  };
  CHECK(applies({4, 4, 3, 3}, params(1, 1, 1, 1, 1, 1, 1)));
  CHECK_FALSE(applies({4, 4, 3, 3}, params(2, 2, 1, 1, 1, 1, 1)));  // stride 2
  CHECK_FALSE(applies({4, 4, 3, 3}, params(1, 1, 2, 2, 2, 2, 1)));  // dilation 2
  CHECK_FALSE(applies({4, 2, 3, 3}, params(1, 1, 1, 1, 1, 1, 2)));  // groups
  CHECK_FALSE(applies({4, 4, 5, 5}, params(1, 1, 2, 2, 1, 1, 1)));  // 5x5
  CHECK_FALSE(applies({4, 4, 3, 3}, params(1, 1, 3, 3, 1, 1, 1)));  // padding 3
  for (const auto& a : conv2d_slot(Direction::backward_filter, DeviceType::CPU).names())
    CHECK(a != "winograd");
}

TEST_CASE("conv2d: every CPU algorithm, forced, on channels_last and NCHW operands") {
  // Through the op, forward and both gradients, against the fp64 heuristic result on NCHW.
  const std::vector<ConvCase> cases = {
      {"3x3 padded", 2, 5, 7, 6, 3, 3, 3, params(1, 1, 1, 1, 1, 1, 1)},
      {"1x1", 3, 6, 5, 5, 7, 1, 1, params(1, 1, 0, 0, 1, 1, 1)},
      {"stride 2 groups", 1, 4, 9, 7, 6, 3, 3, params(2, 2, 1, 1, 1, 1, 2)},
  };
  for (const ConvCase& c : cases) {
    CAPTURE(c.name);
    Tensor x64 = randn({c.N, c.C, c.H, c.W}, DType::f64).set_requires_grad(true);
    Tensor w64 = randn({c.K, c.C / c.p.groups, c.R, c.S}, DType::f64).set_requires_grad(true);
    Tensor y64 = conv2d(x64, w64, Tensor(), c.p);
    Tensor g = randn(y64.sizes(), DType::f64);
    y64.backward(g);
    for (DType dtype : {DType::f64, DType::f32}) {
      const double tol = dtype == DType::f64 ? 1e-10 : 1e-4;
      for (const std::string& algo : conv2d_slot(Direction::forward, DeviceType::CPU).names()) {
        if (algo == "winograd" && (c.R != 3 || c.p.stride[0] != 1 || c.p.groups != 1)) continue;
        for (MemoryFormat format : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
          CAPTURE(algo);
          CAPTURE(dtype_name(dtype));
          CAPTURE(format == MemoryFormat::channels_last);
          AlgoSettings forced = AlgoSettings().force("conv2d.forward", algo);
          if (algo != "winograd") forced = forced.force("conv2d.backward_filter", algo);
          forced = forced.force("conv2d.backward_data", algo);
          AlgoSettingsGuard guard(forced);
          Tensor x = x64.detach().to(dtype).contiguous(format).set_requires_grad(true);
          Tensor w = w64.detach().to(dtype).contiguous(format).set_requires_grad(true);
          Tensor y = conv2d(x, w, Tensor(), c.p);
          y.backward(g.to(dtype));
          CHECK(max_diff(y.to(DType::f64).to_vector(), y64.detach().to_vector()) < tol);
          CHECK(max_diff(x.grad().to(DType::f64).to_vector(), x64.grad().to_vector()) < tol);
          CHECK(max_diff(w.grad().to(DType::f64).to_vector(), w64.grad().to_vector()) < tol);
        }
      }
    }
  }
}

TEST_CASE("conv2d CPU algorithms: results do not depend on the thread count") {
  // Large enough for every algorithm's threads (several winograd tile blocks, image runs).
  Tensor x = randn({5, 24, 30, 26});
  Tensor w = randn({40, 24, 3, 3});
  Tensor dy = randn({5, 40, 30, 26});
  const int threads_before = get_num_threads();
  for (Direction d : {Direction::forward, Direction::backward_data, Direction::backward_filter})
    for (const std::string& algo : conv2d_slot(d, DeviceType::CPU).names()) {
      CAPTURE(algo);
      CAPTURE(dispatch::direction_name(d));
      AlgoSettingsGuard forced(AlgoSettings().force(force_key(d), algo));
      std::vector<Tensor> results;
      for (int threads : {1, 2, 3}) {
        set_num_threads(threads);
        ConvProblem pr{d, x, w, dy, params(1, 1, 1, 1, 1, 1, 1), true};
        if (d == Direction::forward) pr.output = empty(dy.sizes());
        if (d == Direction::backward_data) pr.input = empty(x.sizes());
        if (d == Direction::backward_filter) pr.weight = empty(w.sizes());
        conv2d_run(pr);
        results.push_back(pr.written());
      }
      for (size_t i = 1; i < results.size(); ++i)
        CHECK(std::memcmp(results[0].data_ptr(), results[i].data_ptr(), results[0].nbytes()) == 0);
    }
  set_num_threads(threads_before);
}

TEST_CASE("conv2d winograd: gradcheck in fp64 through the op") {
  AlgoSettingsGuard forced(
      AlgoSettings().force("conv2d.forward", "winograd").force("conv2d.backward_data", "winograd"));
  for (Conv2dParams p : {params(1, 1, 1, 1, 1, 1, 1), params(1, 1, 0, 2, 1, 1, 1)}) {
    std::vector<Tensor> inputs = {randn({2, 3, 5, 4}, DType::f64).set_requires_grad(true),
                                  randn({2, 3, 3, 3}, DType::f64).set_requires_grad(true),
                                  randn({2}, DType::f64).set_requires_grad(true)};
    std::string report;
    CHECK_MESSAGE(autograd::gradcheck(
                      [p](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], p); },
                      inputs, 1e-6, 1e-5, 1e-4, &report),
                  report);
  }
}

TEST_CASE("conv2d CPU heuristic: never the direct loop nest on ResNet layers") {
  // ResNet-18's CIFAR-stem 3x3 layers at batch 64 and ResNet-50's 1x1 and 3x3 layers: the GEMM
  // algorithms beat the loop nest by an order of magnitude there, in every direction.
  struct Layer {
    int64_t N, C, H, K, R, stride, pad;
  };
  const std::vector<Layer> layers = {
      {64, 64, 28, 64, 3, 1, 1},  {64, 128, 14, 128, 3, 1, 1}, {64, 256, 7, 256, 3, 1, 1},
      {64, 512, 4, 512, 3, 1, 1}, {64, 64, 28, 128, 3, 2, 1},  {8, 256, 56, 64, 1, 1, 0},
      {8, 64, 56, 64, 3, 1, 1},   {8, 512, 28, 128, 1, 1, 0},  {8, 1024, 14, 256, 1, 1, 0},
      {8, 2048, 7, 512, 1, 1, 0},
  };
  for (const Layer& l : layers) {
    const int64_t P = (l.H + 2 * l.pad - l.R) / l.stride + 1;
    ConvProblem pr{Direction::forward,
                   empty({l.N, l.C, l.H, l.H}),
                   empty({l.K, l.C, l.R, l.R}),
                   empty({l.N, l.K, P, P}),
                   params(l.stride, l.stride, l.pad, l.pad, 1, 1, 1),
                   true};
    for (Direction d : {Direction::forward, Direction::backward_data, Direction::backward_filter}) {
      pr.direction = d;
      CAPTURE(l.C);
      CAPTURE(l.H);
      CHECK(conv2d_choose(pr).name != "direct");
    }
  }
}

TEST_CASE("benchmark mode on the CPU: candidates the cost model rules out are never timed") {
  // "dear" is estimated 20x "cheap": on the CPU it is not run at all, although it would be the
  // fastest; "close" (2x) is timed.
  using testing::FakeOp;
  FakeOp op({{"cheap", 1.0, true, 0, INT64_MAX, [](int64_t) { return 2000; }},
             {"close", 2.0, true, 0, INT64_MAX, [](int64_t) { return 1000; }},
             {"dear", 20.0, true, 0, INT64_MAX, [](int64_t) { return 0; }}});
  dispatch::AlgoCache cache;
  dispatch::AlgoModeGuard mode(AlgoMode::benchmark);
  CHECK(op.choose(cache, 9) == "close");
  CHECK(op.log().count("dear") == 0);
  CHECK(op.log().count("cheap") >= 1);
  CHECK(cache.stats().candidates_timed == 2);
}

TEST_CASE("benchmark mode on the CPU: a large convolution's first call times no loop nest") {
  // ResNet-18's first 3x3 layer at batch 16: one direct run takes far longer than the bound below,
  // im2col_gemm and winograd a few milliseconds each; each is run at most a few times.
  dispatch::AlgoCache& cache = dispatch::algo_cache();
  cache.clear();
  cache.reset_stats();
  Tensor x = randn({16, 64, 28, 28});
  Tensor w = randn({64, 64, 3, 3});
  dispatch::AlgoModeGuard mode(AlgoMode::benchmark);
  conv2d(x, w, Tensor(), params(1, 1, 1, 1, 1, 1, 1));
  const dispatch::AlgoCacheStats s = cache.stats();
  CHECK(s.benchmarks == 1);
  CHECK(s.candidates_timed == 2);  // im2col_gemm and winograd; direct is 20x and more
  CHECK(s.benchmark_ms < 2000);
}
