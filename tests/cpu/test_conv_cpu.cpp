// conv2d on the CPU: every registered algorithm of every direction against a naive fp64 reference
// over a sweep of shapes, the op with bias and autograd (gradcheck in fp64), the algorithm-cache
// modes through the op (forced, workspace limit, deterministic repeatability, benchmark; winograd
// on the shapes it takes, and more of it in test_conv_cpu_algos.cpp),
// float16/bfloat16, channels_last and empty inputs, and the argument errors; padding 'same' and
// 'valid' for conv1d/2d/3d and the nn layers (against explicitly padded inputs, gradcheck, errors).
#include <doctest/doctest.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "ember/dispatch/algo_cache.h"
#include "ember/ember.h"
#include "ember/ops/conv.h"
#include "support/conv_cases.h"

using namespace ember;
using dispatch::AlgoMode;
using dispatch::AlgoSettings;
using dispatch::AlgoSettingsGuard;
using dispatch::Direction;

namespace {

using testing::ConvCase;
using testing::params;

// Odd sizes, channels not multiples of 8, stride 2, dilation 2, groups, depthwise, batch 1,
// padding, 1x1 (the pointwise im2col shortcut), asymmetric parameters and one larger layer.
const std::vector<ConvCase>& sweep() {
  static const std::vector<ConvCase> cases = {
      {"3x3 plain", 2, 3, 7, 9, 5, 3, 3, params(1, 1, 0, 0, 1, 1, 1)},
      {"3x3 padded", 2, 5, 6, 5, 4, 3, 3, params(1, 1, 1, 1, 1, 1, 1)},
      {"stride 2", 2, 3, 9, 8, 6, 3, 3, params(2, 2, 1, 1, 1, 1, 1)},
      {"dilation 2", 1, 4, 9, 11, 3, 3, 3, params(1, 1, 2, 2, 2, 2, 1)},
      {"groups 2", 2, 6, 7, 7, 4, 3, 3, params(1, 1, 1, 1, 1, 1, 2)},
      {"depthwise", 2, 5, 8, 7, 5, 3, 3, params(1, 1, 1, 1, 1, 1, 5)},
      {"depthwise x2 stride 2", 1, 3, 9, 9, 6, 3, 3, params(2, 2, 1, 1, 1, 1, 3)},
      {"batch 1, 5x5", 1, 3, 11, 10, 7, 5, 5, params(1, 1, 2, 2, 1, 1, 1)},
      {"1x1", 2, 7, 5, 6, 9, 1, 1, params(1, 1, 0, 0, 1, 1, 1)},
      {"1x1 stride 2", 2, 4, 7, 7, 3, 1, 1, params(2, 2, 0, 0, 1, 1, 1)},
      {"asymmetric", 2, 4, 10, 7, 6, 3, 2, params(2, 1, 0, 1, 1, 2, 2)},
      {"kernel = padded input", 1, 2, 3, 4, 2, 5, 6, params(1, 1, 1, 1, 1, 1, 1)},
      // Large enough for the packed float32 GEMM's threads, several K blocks (C*R*S = 360),
      // partial register tiles (70 channels) and images side by side in one GEMM.
      {"large, threaded", 3, 40, 20, 20, 70, 3, 3, params(1, 1, 1, 1, 1, 1, 1)},
  };
  return cases;
}

int64_t out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
  return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
}

// Naive fp64 convolution in all three directions on host vectors (NCHW / KCRS).
struct Reference {
  std::vector<double> y, dx, dw;
};
Reference reference(const ConvCase& c, const std::vector<double>& x, const std::vector<double>& w,
                    const std::vector<double>& dy) {
  const auto& p = c.p;
  int64_t P = out_size(c.H, c.R, p.stride[0], p.padding[0], p.dilation[0]);
  int64_t Q = out_size(c.W, c.S, p.stride[1], p.padding[1], p.dilation[1]);
  int64_t Cg = c.C / p.groups, Kg = c.K / p.groups;
  Reference r;
  r.y.assign(size_t(c.N * c.K * P * Q), 0.0);
  r.dx.assign(x.size(), 0.0);
  r.dw.assign(w.size(), 0.0);
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t k = 0; k < c.K; ++k)
      for (int64_t oh = 0; oh < P; ++oh)
        for (int64_t ow = 0; ow < Q; ++ow) {
          size_t yi = size_t(((n * c.K + k) * P + oh) * Q + ow);
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t r_ = 0; r_ < c.R; ++r_)
              for (int64_t s = 0; s < c.S; ++s) {
                int64_t h = oh * p.stride[0] - p.padding[0] + r_ * p.dilation[0];
                int64_t ww = ow * p.stride[1] - p.padding[1] + s * p.dilation[1];
                if (h < 0 || h >= c.H || ww < 0 || ww >= c.W) continue;
                int64_t channel = (k / Kg) * Cg + ci;
                size_t xi = size_t(((n * c.C + channel) * c.H + h) * c.W + ww);
                size_t wi = size_t(((k * Cg + ci) * c.R + r_) * c.S + s);
                r.y[yi] += x[xi] * w[wi];
                r.dx[xi] += dy[yi] * w[wi];
                r.dw[wi] += dy[yi] * x[xi];
              }
        }
  return r;
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

std::vector<std::string> algorithm_names(Direction d) {
  return conv2d_slot(d, DeviceType::CPU).names();
}

std::string force_key(Direction d) { return std::string("conv2d.") + dispatch::direction_name(d); }

// The shapes the CPU winograd algorithm takes: 3x3, stride 1, dilation 1, no groups, padding
// at most 2.
bool winograd_shape(const ConvCase& c) {
  const Conv2dParams& p = c.p;
  return c.R == 3 && c.S == 3 && p.stride == std::array<int64_t, 2>{1, 1} &&
         p.dilation == std::array<int64_t, 2>{1, 1} && p.groups == 1 && p.padding[0] <= 2 &&
         p.padding[1] <= 2;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

}  // namespace

TEST_CASE("conv2d: every algorithm of every direction matches the fp64 reference") {
  for (Direction d : {Direction::forward, Direction::backward_data, Direction::backward_filter})
    CHECK(algorithm_names(d).size() >= 2);

  for (DType dtype : {DType::f64, DType::f32}) {
    const double tol = dtype == DType::f64 ? 1e-10 : 2e-4;
    for (const ConvCase& c : sweep()) {
      CAPTURE(c.name);
      CAPTURE(dtype_name(dtype));
      int64_t P = out_size(c.H, c.R, c.p.stride[0], c.p.padding[0], c.p.dilation[0]);
      int64_t Q = out_size(c.W, c.S, c.p.stride[1], c.p.padding[1], c.p.dilation[1]);
      Tensor x = randn({c.N, c.C, c.H, c.W}, dtype);
      Tensor w = randn({c.K, c.C / c.p.groups, c.R, c.S}, dtype);
      Tensor dy = randn({c.N, c.K, P, Q}, dtype);
      Reference ref = reference(c, x.to_vector(), w.to_vector(), dy.to_vector());

      for (Direction d :
           {Direction::forward, Direction::backward_data, Direction::backward_filter}) {
        for (const std::string& algo : algorithm_names(d)) {
          if (algo == "winograd" && !winograd_shape(c)) continue;  // 3x3 stride-1 layers only
          CAPTURE(algo);
          CAPTURE(dispatch::direction_name(d));
          AlgoSettingsGuard forced(AlgoSettings().force(force_key(d), algo));
          ConvProblem pr{d, x, w, dy, c.p, true};
          const std::vector<double>* expected = &ref.y;
          // Outputs start as garbage-filled tensors: algorithms must overwrite, not accumulate.
          if (d == Direction::forward) {
            pr.output = full({c.N, c.K, P, Q}, 1e3, dtype);
          } else if (d == Direction::backward_data) {
            pr.input = full(x.sizes(), 1e3, dtype);
            expected = &ref.dx;
          } else {
            pr.weight = full(w.sizes(), 1e3, dtype);
            expected = &ref.dw;
          }
          CHECK(conv2d_choose(pr).name == algo);
          conv2d_run(pr);
          CHECK(max_diff(pr.written().to_vector(), *expected) < tol);
        }
      }
    }
  }
}

TEST_CASE("conv2d float32 packed GEMM: the AVX-512 and AVX2 micro-kernels agree bit for bit" *
          doctest::skip(!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx2") ||
                        !__builtin_cpu_supports("fma"))) {
  // EMBER_CPU_AVX512=0 takes the AVX2 kernel (two 6x16 halves of each 6x32 register tile); both
  // sum every element over k in the same order with fused multiply-adds. Skipped where the CPU
  // lacks either kernel (both runs would take the same one).
  for (const ConvCase& c : sweep()) {
    CAPTURE(c.name);
    const int64_t P = out_size(c.H, c.R, c.p.stride[0], c.p.padding[0], c.p.dilation[0]);
    const int64_t Q = out_size(c.W, c.S, c.p.stride[1], c.p.padding[1], c.p.dilation[1]);
    const Tensor x = randn({c.N, c.C, c.H, c.W}, DType::f32);
    const Tensor w = randn({c.K, c.C / c.p.groups, c.R, c.S}, DType::f32);
    const Tensor dy = randn({c.N, c.K, P, Q}, DType::f32);
    for (Direction d : {Direction::forward, Direction::backward_data, Direction::backward_filter}) {
      CAPTURE(dispatch::direction_name(d));
      AlgoSettingsGuard forced(AlgoSettings().force(force_key(d), "im2col_gemm"));
      auto run = [&](const char* avx512) {
        ::setenv("EMBER_CPU_AVX512", avx512, 1);
        ConvProblem pr{d, x, w, dy, c.p, true};
        if (d == Direction::forward)
          pr.output = empty({c.N, c.K, P, Q}, DType::f32);
        else if (d == Direction::backward_data)
          pr.input = empty(x.sizes(), DType::f32);
        else
          pr.weight = empty(w.sizes(), DType::f32);
        conv2d_run(pr);
        ::unsetenv("EMBER_CPU_AVX512");
        return pr.written();
      };
      CHECK(bitwise_equal(run("1"), run("0")));
    }
  }
}

TEST_CASE("conv2d: the op adds the bias and matches the reference; channels_last input") {
  const ConvCase& c = sweep()[4];  // groups 2, padded
  Tensor x = randn({c.N, c.C, c.H, c.W}, DType::f64);
  Tensor w = randn({c.K, c.C / c.p.groups, c.R, c.S}, DType::f64);
  Tensor b = randn({c.K}, DType::f64);
  Tensor y = conv2d(x, w, b, c.p);
  int64_t P = out_size(c.H, c.R, 1, 1, 1), Q = out_size(c.W, c.S, 1, 1, 1);
  CHECK(y.sizes() == Shape{c.N, c.K, P, Q});
  Reference ref = reference(c, x.to_vector(), w.to_vector(),
                            std::vector<double>(size_t(c.N * c.K * P * Q), 0.0));
  std::vector<double> expected = ref.y, bias = b.to_vector();
  for (size_t i = 0; i < expected.size(); ++i)
    expected[i] += bias[(i / size_t(P * Q)) % size_t(c.K)];
  CHECK(max_diff(y.to_vector(), expected) < 1e-10);

  Tensor y_nhwc = conv2d(x.contiguous(MemoryFormat::channels_last), w, b, c.p);
  CHECK(max_diff(y_nhwc.to_vector(), expected) < 1e-10);
}

TEST_CASE("conv2d: gradcheck in fp64 (input, weight, bias)") {
  struct Row {
    const char* name;
    Shape x, w;
    Conv2dParams p;
    bool bias;
  };
  const std::vector<Row> rows = {
      {"plain", {2, 3, 5, 6}, {4, 3, 3, 3}, params(1, 1, 0, 0, 1, 1, 1), true},
      {"stride 2 padded", {1, 2, 7, 6}, {3, 2, 3, 3}, params(2, 2, 1, 1, 1, 1, 1), true},
      {"dilation 2", {1, 2, 7, 7}, {2, 2, 3, 2}, params(1, 1, 1, 0, 2, 2, 1), false},
      {"groups 2", {2, 4, 5, 5}, {6, 2, 3, 3}, params(1, 1, 1, 1, 1, 1, 2), true},
      {"depthwise", {1, 3, 6, 5}, {3, 1, 3, 3}, params(1, 2, 1, 1, 1, 1, 3), true},
      {"1x1", {2, 3, 4, 3}, {2, 3, 1, 1}, params(1, 1, 0, 0, 1, 1, 1), true},
  };
  for (const Row& row : rows) {
    CAPTURE(row.name);
    for (AlgoMode mode : {AlgoMode::heuristic, AlgoMode::deterministic}) {
      dispatch::AlgoModeGuard g(mode);
      std::vector<Tensor> inputs = {
          randn(row.x, DType::f64).set_requires_grad(true),
          randn(row.w, DType::f64).set_requires_grad(true),
      };
      if (row.bias) inputs.push_back(randn({row.w[0]}, DType::f64).set_requires_grad(true));
      Conv2dParams p = row.p;
      auto fn = [p](const std::vector<Tensor>& in) {
        return conv2d(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), p);
      };
      std::string report;
      CHECK_MESSAGE(autograd::gradcheck(fn, inputs, 1e-6, 1e-5, 1e-4, &report), report);
    }
  }
  // Each algorithm's backward on its own, forced.
  for (const char* algo : {"im2col_gemm", "direct"}) {
    CAPTURE(algo);
    AlgoSettingsGuard forced(AlgoSettings().force("conv2d", algo));
    std::vector<Tensor> inputs = {randn({1, 2, 6, 5}, DType::f64).set_requires_grad(true),
                                  randn({4, 1, 3, 3}, DType::f64).set_requires_grad(true)};
    Conv2dParams p = params(2, 1, 1, 0, 1, 2, 2);
    std::string report;
    CHECK_MESSAGE(
        autograd::gradcheck(
            [p](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], Tensor(), p); },
            inputs, 1e-6, 1e-5, 1e-4, &report),
        report);
  }
}

TEST_CASE("conv2d: gradients reach only the inputs that require them") {
  Tensor x = randn({1, 2, 5, 5}, DType::f64);
  Tensor w = randn({3, 2, 3, 3}, DType::f64).set_requires_grad(true);
  Tensor b = randn({3}, DType::f64);
  conv2d(x, w, b, params(1, 1, 1, 1, 1, 1, 1)).sum().backward();
  CHECK(w.grad().defined());
  CHECK(w.grad().sizes() == w.sizes());
  CHECK_FALSE(x.grad().defined());
  Tensor y = conv2d(x, w.detach(), b);
  CHECK_FALSE(y.requires_grad());
}

TEST_CASE("conv2d modes: heuristic rules, workspace limit 0, forced errors, benchmark") {
  dispatch::algo_cache().clear();
  Tensor x = randn({2, 16, 12, 12});
  Tensor w = randn({16, 16, 3, 3});
  Tensor dw_w = randn({16, 1, 3, 3});
  ConvProblem regular{Direction::forward,          x,   w, empty({2, 16, 12, 12}),
                      params(1, 1, 1, 1, 1, 1, 1), true};
  ConvProblem depthwise{Direction::forward,           x,   dw_w, empty({2, 16, 12, 12}),
                        params(1, 1, 1, 1, 1, 1, 16), true};
  CHECK(conv2d_choose(regular).name != "direct");
  CHECK(conv2d_choose(depthwise).name == "direct");

  for (Direction d : {Direction::forward, Direction::backward_data, Direction::backward_filter}) {
    AlgoSettingsGuard g(AlgoSettings().with_workspace_limit(0));
    ConvProblem pr = regular;
    pr.direction = d;
    CHECK(conv2d_choose(pr).name == "direct");
  }

  {
    AlgoSettingsGuard g(AlgoSettings().force("conv2d", "fft"));
    CHECK_THROWS_WITH_AS(conv2d(x, w), doctest::Contains("'fft' is not registered"), Error);
  }

  dispatch::AlgoCache& cache = dispatch::algo_cache();
  cache.reset_stats();
  Tensor expected = conv2d(x, w, Tensor(), params(1, 1, 1, 1, 1, 1, 1));
  {
    dispatch::AlgoModeGuard g(AlgoMode::benchmark);
    Tensor y = conv2d(x, w, Tensor(), params(1, 1, 1, 1, 1, 1, 1));
    CHECK(max_abs_diff(y, expected) < 1e-4);
    CHECK(cache.stats().benchmarks == 1);
    auto choice = cache.peek(conv2d_slot(Direction::forward, DeviceType::CPU), conv2d_key(regular));
    REQUIRE(choice);
    CHECK(choice->source == dispatch::ChoiceSource::benchmark);
    conv2d(x, w, Tensor(), params(1, 1, 1, 1, 1, 1, 1));
    CHECK(cache.stats().benchmarks == 1);
  }
}

TEST_CASE("conv2d deterministic mode: bitwise identical results run to run") {
  dispatch::AlgoModeGuard g(AlgoMode::deterministic);
  Tensor x = randn({2, 6, 9, 9}, DType::f32);
  Tensor w = randn({8, 3, 3, 3}, DType::f32);
  Tensor b = randn({8}, DType::f32);
  Conv2dParams p = params(2, 1, 1, 1, 1, 1, 2);
  std::vector<Tensor> first;
  for (int run = 0; run < 2; ++run) {
    dispatch::algo_cache().clear();  // each run chooses afresh, as a new process would
    Tensor xr = x.detach().set_requires_grad(true), wr = w.detach().set_requires_grad(true),
           br = b.detach().set_requires_grad(true);
    Tensor y = conv2d(xr, wr, br, p);
    (y * y).sum().backward();
    std::vector<Tensor> results = {y.detach(), xr.grad(), wr.grad(), br.grad()};
    if (run == 0) {
      first = results;
    } else {
      for (size_t i = 0; i < results.size(); ++i) CHECK(bitwise_equal(results[i], first[i]));
    }
  }
}

TEST_CASE("conv2d: float16 and bfloat16 compute in fp32 and keep their dtype") {
  Tensor x = randn({1, 3, 6, 6});
  Tensor w = randn({4, 3, 3, 3});
  Tensor ref = conv2d(x, w, Tensor(), params(1, 1, 1, 1, 1, 1, 1));
  for (DType t : {DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(t));
    Tensor xh = x.to(t).set_requires_grad(true);
    Tensor wh = w.to(t).set_requires_grad(true);
    Tensor y = conv2d(xh, wh, Tensor(), params(1, 1, 1, 1, 1, 1, 1));
    CHECK(y.dtype() == t);
    CHECK(max_abs_diff(y, ref) < (t == DType::f16 ? 0.05 : 0.3));
    y.sum().backward();
    CHECK(xh.grad().dtype() == t);
    CHECK(wh.grad().dtype() == t);
  }
}

TEST_CASE("conv2d: empty batch and zero channels") {
  Tensor x = randn({0, 3, 5, 5}).set_requires_grad(true);
  Tensor w = randn({4, 3, 3, 3}).set_requires_grad(true);
  Tensor y = conv2d(x, w);
  CHECK(y.sizes() == Shape{0, 4, 3, 3});
  y.sum().backward();
  CHECK(w.grad().sizes() == w.sizes());
  CHECK(w.grad().abs().sum().item() == 0.0);

  Tensor no_channels = conv2d(randn({2, 0, 4, 4}), randn({3, 0, 3, 3}), ones({3}));
  CHECK(no_channels.sizes() == Shape{2, 3, 2, 2});
  CHECK(no_channels.sum().item() == doctest::Approx(2 * 3 * 2 * 2));
}

TEST_CASE("conv2d: argument errors name the problem and the shapes") {
  struct Bad {
    const char* what;
    Shape x, w;
    Conv2dParams p;
    const char* expect;
    DType w_dtype = DType::f32;
    Shape bias = {};
  };
  const std::vector<Bad> cases = {
      {"3-D input",
       {3, 8, 8},
       {4, 3, 3, 3},
       {},
       "input must be 4-D [N, C, H, W], got shape [3, 8, 8]"},
      {"2-D weight", {1, 3, 8, 8}, {4, 27}, {}, "weight must be 4-D"},
      {"channels vs groups",
       {1, 5, 8, 8},
       {4, 5, 3, 3},
       params(1, 1, 0, 0, 1, 1, 2),
       "input channels (5, input shape [1, 5, 8, 8]) are not divisible by groups = 2"},
      {"weight channels",
       {1, 4, 8, 8},
       {4, 3, 3, 3},
       {},
       "weight [4, 3, 3, 3] expects 3 input channels"},
      {"output channels vs groups",
       {1, 4, 8, 8},
       {3, 2, 3, 3},
       params(1, 1, 0, 0, 1, 1, 2),
       "output channels (3"},
      {"kernel too large", {1, 3, 4, 4}, {2, 3, 5, 5}, {}, "larger than the padded input (4 x 4"},
      {"dilated kernel too large",
       {1, 3, 6, 6},
       {2, 3, 3, 3},
       params(1, 1, 0, 0, 3, 3, 1),
       "7 x 7 with dilation [3, 3]"},
      {"zero stride",
       {1, 3, 6, 6},
       {2, 3, 3, 3},
       params(0, 1, 0, 0, 1, 1, 1),
       "stride must be >= 1"},
      {"mixed dtypes",
       {1, 3, 6, 6},
       {2, 3, 3, 3},
       {},
       "input has dtype float32 but weight has float64",
       DType::f64},
      {"bias shape", {1, 3, 6, 6}, {2, 3, 3, 3}, {}, "bias must be [2]", DType::f32, {3}},
  };
  for (const Bad& c : cases) {
    CAPTURE(c.what);
    Tensor x = zeros(c.x), w = zeros(c.w, c.w_dtype);
    Tensor b = c.bias.empty() ? Tensor() : zeros(c.bias);
    try {
      conv2d(x, w, b, c.p);
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK(e.status() == Status::bad_param);
      CHECK_MESSAGE(e.message().find(c.expect) != std::string::npos, e.message());
      CHECK(e.message().find("conv2d") == 0);
    }
  }
  CHECK_THROWS_WITH_AS(conv2d(zeros({1, 3, 6, 6}, DType::i64), zeros({2, 3, 3, 3}, DType::i64)),
                       doctest::Contains("dtype int64 is not supported"), Error);
  if (cuda::is_available())
    CHECK_THROWS_WITH_AS(
        conv2d(zeros({1, 3, 6, 6}), zeros({2, 3, 3, 3}, TensorOptions(Device::cuda()))),
        doctest::Contains("input is on cpu but weight is on cuda:0"), Error);
}

// ---- padding 'same' and 'valid' ---------------------------------------------------------------

namespace {

// x with pads[i] = {before, after} zeros on spatial axis i (a plain copy, outside autograd).
Tensor zero_padded(const Tensor& x, const std::vector<std::array<int64_t, 2>>& pads) {
  Shape sizes = x.sizes();
  for (size_t i = 0; i < pads.size(); ++i) sizes[2 + i] += pads[i][0] + pads[i][1];
  Tensor out = zeros(sizes, x.dtype());
  Tensor inner = out;
  for (size_t i = 0; i < pads.size(); ++i)
    inner = inner.slice(int64_t(2 + i), pads[i][0], pads[i][0] + x.size(int64_t(2 + i)));
  inner.copy_(x);
  return out;
}

Conv2dParams same_params(int64_t dh, int64_t dw) {
  Conv2dParams p;
  p.dilation = {dh, dw};
  p.padding_mode = ConvPaddingMode::same;
  return p;
}

}  // namespace

TEST_CASE("conv2d padding='same': the input's size, extra zero on the bottom/right as PyTorch") {
  struct Row {
    const char* name;
    int64_t R, S, dh, dw;
  };
  // Odd totals (even kernels, 4 -> 1 before and 2 after) and even ones (odd kernels, dilation).
  const std::vector<Row> rows = {{"3x3", 3, 3, 1, 1},
                                 {"4x2 (odd totals)", 4, 2, 1, 1},
                                 {"5x4 dilation 2", 5, 4, 2, 2},
                                 {"2x3 dilation (1, 3)", 2, 3, 1, 3},
                                 {"1x6", 1, 6, 1, 1}};
  for (const Row& row : rows) {
    CAPTURE(row.name);
    Tensor x = randn({2, 3, 7, 6}, DType::f64);
    Tensor w = randn({4, 3, row.R, row.S}, DType::f64);
    Tensor b = randn({4}, DType::f64);
    const int64_t th = row.dh * (row.R - 1), tw = row.dw * (row.S - 1);
    Conv2dParams explicit_p;
    explicit_p.dilation = {row.dh, row.dw};
    Tensor expected =
        conv2d(zero_padded(x, {{th / 2, th - th / 2}, {tw / 2, tw - tw / 2}}), w, b, explicit_p);
    Tensor y = conv2d(x, w, b, same_params(row.dh, row.dw));
    CHECK(y.sizes() == Shape{2, 4, 7, 6});
    CHECK(max_diff(y.to_vector(), expected.to_vector()) < 1e-12);
    // channels_last input, and the fused conv + bias + ReLU op, resolve it the same way.
    Tensor y_nhwc =
        conv2d(x.contiguous(MemoryFormat::channels_last), w, b, same_params(row.dh, row.dw));
    CHECK(max_diff(y_nhwc.to_vector(), expected.to_vector()) < 1e-12);
    Tensor fused = conv2d_bias_relu(x, w, b, same_params(row.dh, row.dw));
    CHECK(max_diff(fused.to_vector(), relu(expected).to_vector()) < 1e-12);
  }
}

TEST_CASE("conv2d padding='valid' ignores the padding sizes; float32 'same' keeps its dtype") {
  Tensor x = randn({1, 2, 6, 5}, DType::f64), w = randn({3, 2, 3, 2}, DType::f64);
  Conv2dParams valid;
  valid.padding = {2, 1};  // ignored
  valid.padding_mode = ConvPaddingMode::valid;
  Tensor y = conv2d(x, w, Tensor(), valid);
  CHECK(y.sizes() == Shape{1, 3, 4, 4});
  CHECK(max_diff(y.to_vector(), conv2d(x, w).to_vector()) == 0);
  Tensor y32 = conv2d(x.to(DType::f32), w.to(DType::f32), Tensor(), same_params(1, 1));
  CHECK(y32.dtype() == DType::f32);
  CHECK(y32.sizes() == Shape{1, 3, 6, 5});
  CHECK(std::string(conv_padding_mode_name(ConvPaddingMode::same)) == "same");
}

TEST_CASE("conv2d padding='same': gradcheck in fp64 through the odd-total input padding") {
  for (bool bias : {false, true}) {
    CAPTURE(bias);
    std::vector<Tensor> inputs = {randn({2, 2, 5, 4}, DType::f64).set_requires_grad(true),
                                  randn({3, 2, 4, 3}, DType::f64).set_requires_grad(true)};
    if (bias) inputs.push_back(randn({3}, DType::f64).set_requires_grad(true));
    auto fn = [](const std::vector<Tensor>& in) {
      return conv2d(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), same_params(1, 2));
    };
    std::string report;
    CHECK_MESSAGE(autograd::gradcheck(fn, inputs, 1e-6, 1e-5, 1e-4, &report), report);
  }
}

TEST_CASE("conv1d and conv3d padding='same' and 'valid' match explicitly padded inputs") {
  Tensor x1 = randn({2, 3, 9}, DType::f64), w1 = randn({2, 3, 4}, DType::f64);
  Conv1dParams same1;
  same1.dilation = 2;
  same1.padding_mode = ConvPaddingMode::same;  // total 6: 3 and 3
  Tensor y1 = conv1d(x1, w1, Tensor(), same1);
  CHECK(y1.sizes() == Shape{2, 2, 9});
  Conv1dParams dilated;
  dilated.dilation = 2;
  CHECK(max_diff(y1.to_vector(), conv1d(zero_padded(x1.unsqueeze(2), {{0, 0}, {3, 3}}).squeeze(2),
                                        w1, Tensor(), dilated)
                                     .to_vector()) < 1e-12);
  same1.dilation = 1;  // total 3: 1 before, 2 after
  CHECK(
      max_diff(conv1d(x1, w1, Tensor(), same1).to_vector(),
               conv1d(zero_padded(x1.unsqueeze(2), {{0, 0}, {1, 2}}).squeeze(2), w1).to_vector()) <
      1e-12);

  Tensor x3 = randn({1, 2, 5, 4, 6}, DType::f64), w3 = randn({3, 2, 2, 3, 4}, DType::f64);
  Tensor b3 = randn({3}, DType::f64);
  Conv3dParams same3;
  same3.padding_mode = ConvPaddingMode::same;  // totals 1, 2, 3
  Tensor y3 = conv3d(x3, w3, b3, same3);
  CHECK(y3.sizes() == Shape{1, 3, 5, 4, 6});
  Tensor expected3 = conv3d(zero_padded(x3, {{0, 1}, {1, 1}, {1, 2}}), w3, b3);
  CHECK(max_diff(y3.to_vector(), expected3.to_vector()) < 1e-12);
  Conv3dParams valid3;
  valid3.padding = {1, 1, 1};
  valid3.padding_mode = ConvPaddingMode::valid;
  CHECK(max_diff(conv3d(x3, w3, b3, valid3).to_vector(), conv3d(x3, w3, b3).to_vector()) == 0);

  std::vector<Tensor> inputs = {x3.clone().set_requires_grad(true),
                                w3.clone().set_requires_grad(true)};
  std::string report;
  CHECK_MESSAGE(
      autograd::gradcheck(
          [same3](const std::vector<Tensor>& in) { return conv3d(in[0], in[1], Tensor(), same3); },
          inputs, 1e-6, 1e-5, 1e-4, &report),
      report);
}

TEST_CASE("padding='same' with a stride is an error naming the op and the stride") {
  Conv2dParams p = same_params(1, 1);
  p.stride = {1, 2};
  CHECK_THROWS_WITH_AS(conv2d(zeros({1, 3, 6, 6}), zeros({2, 3, 3, 3}), Tensor(), p),
                       doctest::Contains("conv2d: padding='same' needs stride 1"), Error);
  CHECK_THROWS_WITH_AS(conv2d_bias_relu(zeros({1, 3, 6, 6}), zeros({2, 3, 3, 3}), Tensor(), p),
                       doctest::Contains("got stride [1, 2]"), Error);
  Conv1dParams p1;
  p1.stride = 2;
  p1.padding_mode = ConvPaddingMode::same;
  CHECK_THROWS_WITH_AS(conv1d(zeros({1, 3, 6}), zeros({2, 3, 3}), Tensor(), p1),
                       doctest::Contains("conv1d: padding='same' needs stride 1"), Error);
  Conv3dParams p3;
  p3.stride = {2, 1, 1};
  p3.padding_mode = ConvPaddingMode::same;
  CHECK_THROWS_WITH_AS(conv3d(zeros({1, 3, 4, 4, 4}), zeros({2, 3, 3, 3, 3}), Tensor(), p3),
                       doctest::Contains("conv3d: padding='same' needs stride 1"), Error);
  // Malformed operands still get conv2d's own messages.
  CHECK_THROWS_WITH_AS(conv2d(zeros({3, 6, 6}), zeros({2, 3, 3, 3}), Tensor(), same_params(1, 1)),
                       doctest::Contains("input must be 4-D"), Error);
}

TEST_CASE("nn::Conv1d/2d/3d with padding(\"same\") and padding(\"valid\")") {
  nn::Conv2d same2(nn::Conv2dOptions(3, 4, {4, 3}).padding("same"));
  Tensor x = randn({2, 3, 7, 5});
  CHECK(same2->forward(x).sizes() == Shape{2, 4, 7, 5});
  std::ostringstream os;
  same2->pretty_print(os);
  CHECK(os.str().find("padding=same") != std::string::npos);
  CHECK(same2->options.padding().mode() == ConvPaddingMode::same);

  nn::Conv2d valid2(nn::Conv2dOptions(3, 4, 3).padding("valid"));
  CHECK(valid2->forward(x).sizes() == Shape{2, 4, 5, 3});
  nn::Conv1d same1(nn::Conv1dOptions(3, 2, 4).padding(ConvPaddingMode::same).dilation(2));
  CHECK(same1->forward(randn({1, 3, 8})).sizes() == Shape{1, 2, 8});
  nn::Conv3d same3(nn::Conv3dOptions(2, 3, {2, 3, 2}).padding("same"));
  CHECK(same3->forward(randn({1, 2, 3, 4, 5})).sizes() == Shape{1, 3, 3, 4, 5});
  // Sizes still work as before.
  CHECK(nn::Conv2dOptions(3, 4, 3).padding({1, 0}).padding()[0] == 1);

  CHECK_THROWS_WITH_AS(nn::Conv2d(nn::Conv2dOptions(3, 4, 3).stride(2).padding("same")),
                       doctest::Contains("padding=\"same\" needs stride 1"), Error);
  CHECK_THROWS_WITH_AS(nn::Conv2dOptions(3, 4, 3).padding("full"),
                       doctest::Contains("must be \"same\", \"valid\" or sizes, got \"full\""),
                       Error);
}
