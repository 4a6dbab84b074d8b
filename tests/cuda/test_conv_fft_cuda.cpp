// conv2d on CUDA, the "fft" algorithm (cuda_kernels/conv/fft.cu) forced in every direction against
// the CPU fp64 reference on random inputs: odd sizes, 7x7 / 9x9 / 11x11 (and 1-row) kernels,
// batch 1, fp32 (with and without TF32), bf16 and f16, NCHW / channels_last / strided operands;
// a problem large enough to run in several image chunks against im2col_gemm on the GPU; the op
// with autograd through fft; cuFFT plans made outside CUDA graph capture only (a size without
// plans is left to another algorithm inside a capture; one warmed up eagerly captures and replays).
// Then padding='same' on the GPU. Skips without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ember/dispatch/algo_cache.h"
#include "ember/ember.h"
#include "ember/ops/conv.h"
#include "support/compare.h"

using namespace ember;
using dispatch::AlgoSettings;
using dispatch::AlgoSettingsGuard;
using dispatch::Direction;

namespace {

enum class Layout { nchw, channels_last, strided };

// Random fp32 values made on the CPU from `seed`, rounded to `dtype`, on the GPU, laid out as asked
// (strided: a slice of a wider tensor along W).
Tensor random_cuda(const Shape& shape, DType dtype, Layout layout, uint64_t seed) {
  Generator gen(Device::cpu(), seed);
  Shape alloc = shape;
  if (layout == Layout::strided) alloc[3] += 2;
  Tensor t = randn(alloc, TensorOptions(DType::f32), &gen).to(Device::cuda(), dtype);
  if (layout == Layout::strided) return t.slice(3, 1, 1 + shape[3]);
  if (layout == Layout::channels_last) return t.contiguous(MemoryFormat::channels_last);
  return t;
}

// Relative to the largest reference value; a NaN output fails (support/compare.h).
using testing::rel_err_to_max;

// Relative to the largest reference value. fft multiplies spectra in strict fp32 whatever the TF32
// setting; 16-bit operands round their inputs and outputs.
double tolerance(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 2e-5;
    case DType::f16:
      return 1e-2;
    default:
      return 4e-2;
  }
}

std::string force_key(Direction d) { return std::string("conv2d.") + dispatch::direction_name(d); }

struct FftCase {
  const char* name;
  int64_t N, C, H, W, K, R, S, ph, pw;
};

Conv2dParams padding(int64_t ph, int64_t pw) {
  Conv2dParams p;
  p.padding = {ph, pw};
  return p;
}

}  // namespace

TEST_CASE("conv2d CUDA fft: every direction matches the CPU fp64 reference" *
          doctest::skip(!cuda::is_available())) {
  const std::vector<FftCase> cases = {
      {"7x7 odd sizes, C3 K5", 2, 3, 13, 11, 5, 7, 7, 3, 3},
      {"9x9 batch 1, no padding", 1, 4, 17, 15, 6, 9, 9, 0, 0},
      {"11x11 batch 1, C5 K7", 1, 5, 19, 21, 7, 11, 11, 5, 4},
      {"7x5 asymmetric padding", 3, 6, 9, 12, 2, 7, 5, 1, 2},
      {"1 x 9 (one row, conv1d)", 2, 3, 1, 23, 4, 1, 9, 0, 4},
  };
  struct Mode {
    DType dtype;
    bool tf32;
  };
  const std::vector<Mode> modes = {
      {DType::f32, false}, {DType::f32, true}, {DType::bf16, true}, {DType::f16, true}};
  for (const FftCase& c : cases) {
    CAPTURE(c.name);
    const Conv2dParams p = padding(c.ph, c.pw);
    const int64_t P = c.H + 2 * c.ph - c.R + 1, Q = c.W + 2 * c.pw - c.S + 1;
    for (const Mode& m : modes) {
      CAPTURE(dtype_name(m.dtype));
      CAPTURE(m.tf32);
      for (Layout layout : {Layout::nchw, Layout::channels_last, Layout::strided}) {
        CAPTURE(int(layout));
        const Layout dense = layout == Layout::strided ? Layout::nchw : layout;
        Tensor x = random_cuda({c.N, c.C, c.H, c.W}, m.dtype, layout, 21);
        Tensor w = random_cuda({c.K, c.C, c.R, c.S}, m.dtype, dense, 22);
        Tensor dy = random_cuda({c.N, c.K, P, Q}, m.dtype, layout, 23);
        // The reference sees exactly the rounded values the GPU sees.
        Tensor xr = x.to(Device::cpu(), DType::f64).contiguous();
        Tensor wr = w.to(Device::cpu(), DType::f64).contiguous();
        Tensor dyr = dy.to(Device::cpu(), DType::f64).contiguous();
        Tensor ref_y = empty({c.N, c.K, P, Q}, DType::f64), ref_dx = empty(xr.sizes(), DType::f64),
               ref_dw = empty(wr.sizes(), DType::f64);
        conv2d_run({Direction::forward, xr, wr, ref_y, p, false});
        conv2d_run({Direction::backward_data, ref_dx, wr, dyr, p, false});
        conv2d_run({Direction::backward_filter, xr, ref_dw, dyr, p, false});

        // Written tensors start as garbage, so an accumulating kernel would fail.
        auto garbage = [&](const Shape& s) {
          Tensor t = full(s, 1e3, TensorOptions(m.dtype).with_device(Device::cuda()));
          return dense == Layout::channels_last ? t.contiguous(MemoryFormat::channels_last) : t;
        };
        const ConvProblem problems[] = {
            {Direction::forward, x, w, garbage(dy.sizes()), p, m.tf32},
            {Direction::backward_data, garbage(x.sizes()), w, dy, p, m.tf32},
            {Direction::backward_filter, x, garbage(w.sizes()), dy, p, m.tf32},
        };
        const Tensor* refs[] = {&ref_y, &ref_dx, &ref_dw};
        for (int i = 0; i < 3; ++i) {
          const ConvProblem& pr = problems[i];
          CAPTURE(dispatch::direction_name(pr.direction));
          AlgoSettingsGuard forced(AlgoSettings().force(force_key(pr.direction), "fft"));
          CHECK(conv2d_choose(pr).name == "fft");
          conv2d_run(pr);
          CHECK(rel_err_to_max(pr.written(), *refs[i]) <= tolerance(m.dtype));
        }
      }
    }
  }
}

TEST_CASE("conv2d CUDA fft: applies only to stride 1, dilation 1, one group, large kernels" *
          doctest::skip(!cuda::is_available())) {
  auto applies = [](const Shape& x, const Shape& w, const Conv2dParams& p) {
    Tensor xt = zeros(x, TensorOptions(Device::cuda()));
    Tensor wt = zeros(w, TensorOptions(Device::cuda()));
    const int64_t P = (x[2] + 2 * p.padding[0] - p.dilation[0] * (w[2] - 1) - 1) / p.stride[0] + 1;
    const int64_t Q = (x[3] + 2 * p.padding[1] - p.dilation[1] * (w[3] - 1) - 1) / p.stride[1] + 1;
    Tensor yt = zeros({x[0], w[0], P, Q}, TensorOptions(Device::cuda()));
    dispatch::AlgoSlot& slot = conv2d_slot(Direction::forward, DeviceType::CUDA);
    const auto& fft = slot.get<ConvProblem>(slot.find("fft"));
    return fft.applies(ConvProblem{Direction::forward, xt, wt, yt, p, true});
  };
  CHECK(applies({1, 3, 16, 16}, {4, 3, 7, 7}, padding(3, 3)));
  CHECK_FALSE(applies({1, 3, 16, 16}, {4, 3, 3, 3}, padding(1, 1)));  // small kernel
  Conv2dParams strided = padding(3, 3);
  strided.stride = {2, 2};
  CHECK_FALSE(applies({1, 3, 16, 16}, {4, 3, 7, 7}, strided));
  Conv2dParams dilated = padding(3, 3);
  dilated.dilation = {2, 1};
  CHECK_FALSE(applies({1, 3, 16, 16}, {4, 3, 7, 7}, dilated));
  Conv2dParams grouped = padding(3, 3);
  grouped.groups = 3;
  CHECK_FALSE(applies({1, 3, 16, 16}, {3, 1, 7, 7}, grouped));
}

TEST_CASE("conv2d CUDA fft: several image chunks match im2col_gemm on the GPU" *
          doctest::skip(!cuda::is_available())) {
  // 130 images of 16 x 100 x 100 with a 9x9 kernel: a 108 x 108 grid, 118 images per chunk
  // (256 MiB budget), so two chunks, the second shorter (its own cuFFT plans), and a filter
  // gradient accumulated over both.
  const Conv2dParams p = padding(4, 4);
  Tensor x = random_cuda({130, 16, 100, 100}, DType::f32, Layout::channels_last, 31);
  Tensor w = random_cuda({16, 16, 9, 9}, DType::f32, Layout::nchw, 32);
  Tensor dy = random_cuda({130, 16, 100, 100}, DType::f32, Layout::channels_last, 33);
  for (Direction d : {Direction::forward, Direction::backward_data, Direction::backward_filter}) {
    CAPTURE(dispatch::direction_name(d));
    auto problem = [&] {
      ConvProblem pr{d, x, w, dy, p, false};
      if (d == Direction::forward) pr.output = empty_like(dy);
      if (d == Direction::backward_data) pr.input = empty_like(x);
      if (d == Direction::backward_filter) pr.weight = empty_like(w);
      return pr;
    };
    const ConvProblem by_fft = problem(), by_gemm = problem();
    {
      AlgoSettingsGuard forced(AlgoSettings().force(force_key(d), "fft"));
      conv2d_run(by_fft);
    }
    {
      AlgoSettingsGuard forced(AlgoSettings().force(force_key(d), "im2col_gemm"));
      conv2d_run(by_gemm);
    }
    CHECK(rel_err_to_max(by_fft.written(), by_gemm.written()) <= 1e-4);
  }
}

TEST_CASE("conv2d CUDA fft: the op with autograd, forced, matches the CPU" *
          doctest::skip(!cuda::is_available())) {
  Tensor x = random_cuda({1, 3, 15, 13}, DType::f32, Layout::channels_last, 41);
  Tensor w = random_cuda({4, 3, 11, 11}, DType::f32, Layout::channels_last, 42);
  Tensor b = random_cuda({4}, DType::f32, Layout::nchw, 43);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor y;
  {
    // Forced on the GPU only: the CPU reference below has no "fft".
    AlgoSettingsGuard forced(AlgoSettings().force("conv2d", "fft"));
    y = conv2d(x, w, b, padding(5, 5));
    sum(y * y).backward();
  }

  Tensor xc = x.detach().cpu().set_requires_grad(true),
         wc = w.detach().cpu().set_requires_grad(true);
  Tensor bc = b.detach().cpu().set_requires_grad(true);
  Tensor yc = conv2d(xc, wc, bc, padding(5, 5));
  sum(yc * yc).backward();
  CHECK(rel_err_to_max(y, yc) <= 1e-4);
  CHECK(rel_err_to_max(x.grad(), xc.grad()) <= 1e-4);
  CHECK(rel_err_to_max(w.grad(), wc.grad()) <= 1e-4);
  CHECK(rel_err_to_max(b.grad(), bc.grad()) <= 1e-4);
}

TEST_CASE("conv2d CUDA fft: cuFFT plans are made outside CUDA graph capture only" *
          doctest::skip(!cuda::is_available())) {
  const Device dev = Device::cuda();
  Stream stream = new_stream(dev);  // the legacy default stream cannot be captured
  StreamGuard stream_guard(stream);
  // A 60 x 40 transform grid and batches of 3, 5 and 15 planes, which no other case in the suite
  // makes, so none of its plans exists yet.
  const Conv2dParams p = padding(3, 3);
  Tensor x = random_cuda({1, 3, 53, 31}, DType::f32, Layout::nchw, 71);
  Tensor w = random_cuda({5, 3, 7, 7}, DType::f32, Layout::nchw, 72);
  auto forward_into = [&](const Tensor& y) {
    return ConvProblem{Direction::forward, x, w, y, p, false};
  };
  Tensor y_chosen = empty({1, 5, 53, 31}, DType::f32, dev);
  dispatch::AlgoSlot& slot = conv2d_slot(Direction::forward, DeviceType::CUDA);
  const auto& fft = slot.get<ConvProblem>(slot.find("fft"));
  REQUIRE(fft.applies(forward_into(y_chosen)));
  {
    cuda::Graph graph;
    cuda::GraphCapture capture(graph, dev);
    // Making the plans here would allocate inside the capture: fft does not apply, and the
    // heuristic chooses another algorithm instead of failing.
    CHECK_FALSE(fft.applies(forward_into(y_chosen)));
    CHECK(conv2d_choose(forward_into(y_chosen)).name != "fft");
    // A cached choice of fft would ask for its workspace, which needs the plans: a clear error.
    CHECK_THROWS_WITH_AS(fft.workspace_bytes(forward_into(y_chosen)),
                         doctest::Contains("CUDA graph capture"), Error);
    // Leaving the scope without end() aborts the (empty) capture.
  }

  // The steady-state path: run once eagerly (the plans are made), then capture and replay. fft is
  // forced only in this scope: the CPU reference below has no fft algorithm.
  Tensor y_eager = empty({1, 5, 53, 31}, DType::f32, dev);
  Tensor y_replayed = full({1, 5, 53, 31}, 1e3, TensorOptions(DType::f32).with_device(dev));
  cuda::Graph graph;
  {
    AlgoSettingsGuard forced(AlgoSettings().force("conv2d.forward", "fft"));
    conv2d_run(forward_into(y_eager));
    {
      cuda::GraphCapture capture(graph, dev);
      CHECK(fft.applies(forward_into(y_replayed)));
      conv2d_run(forward_into(y_replayed));
      capture.end();
    }
    graph.replay();
  }
  CHECK(rel_err_to_max(y_replayed, y_eager) <= 1e-6);
  Tensor reference = conv2d(x.cpu().to(DType::f64), w.cpu().to(DType::f64), Tensor(), p);
  CHECK(rel_err_to_max(y_replayed, reference) <= tolerance(DType::f32));
}

TEST_CASE("conv2d CUDA: padding='same' with an even kernel matches the CPU" *
          doctest::skip(!cuda::is_available())) {
  Conv2dParams p;
  p.padding_mode = ConvPaddingMode::same;
  Tensor x =
      random_cuda({2, 5, 9, 8}, DType::f32, Layout::channels_last, 61).set_requires_grad(true);
  Tensor w =
      random_cuda({6, 5, 4, 3}, DType::f32, Layout::channels_last, 62).set_requires_grad(true);
  Tensor y = conv2d(x, w, Tensor(), p);
  CHECK(y.sizes() == Shape{2, 6, 9, 8});
  CHECK(y.is_contiguous(MemoryFormat::channels_last));
  sum(y * y).backward();
  Tensor xc = x.detach().cpu().set_requires_grad(true),
         wc = w.detach().cpu().set_requires_grad(true);
  Tensor yc = conv2d(xc, wc, Tensor(), p);
  sum(yc * yc).backward();
  CHECK(rel_err_to_max(y, yc) <= 5e-3);
  CHECK(rel_err_to_max(x.grad(), xc.grad()) <= 5e-3);
  CHECK(rel_err_to_max(w.grad(), wc.grad()) <= 5e-3);
}
