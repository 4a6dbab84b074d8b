// CUDA tests of activations, softmax / log_softmax (every registered algorithm), cross_entropy /
// nll_loss, pooling, dropout and the NCHW <-> NHWC kernel: parity with the CPU reference (fp64 on
// the same rounded inputs) over awkward shapes (1, 33, 1025, 50000 columns, odd channels,
// misaligned views, channels_last, bf16), the device-side reporting of
// out-of-range targets, the CPU / CUDA identity of dropout masks, and pooling's channels_last
// algorithms (cuda_kernels/pooling/): which one the algorithm cache's heuristic picks, and CPU
// parity of their results, gradients and max indices on awkward channels_last shapes. Skips
// without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ember/cuda_kernels/pooling/pooling.h"
#include "ember/dispatch/algo_cache.h"
#include "ember/ops/activation.h"
#include "ember/ops/dropout.h"
#include "ember/ops/layout.h"
#include "ember/ops/pooling.h"
#include "ember/ops/softmax.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "ember/tensor/runtime/device_errors.h"
#include "support/compare.h"
#include "support/errors.h"
#include "support/gpu_parity.h"
#include "support/op_table.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
using ember::testing::Layout;

namespace {

const Device kGpu = Device::cuda();

using ember::testing::rel_err;
// fp32 tighter than the shared bound: these ops are one pass of exact-ish arithmetic.
double tolerance(DType d) { return d == DType::f32 ? 2e-5 : ember::testing::parity_tolerance(d); }

using ember::testing::gpu_randn;
using ember::testing::misaligned_channels_last;
// Parity of f on the GPU (optionally under forced settings, or with the output gradient handed to
// backward in a given memory format) with the CPU fp64 reference.
using ember::testing::check_gpu_parity;

}  // namespace

TEST_CASE("activations: vector and strided paths, large and misaligned" *
          doctest::skip(!cuda::is_available())) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    for (int64_t n : {1, 7, 4099, (1 << 20) + 5}) {
      CAPTURE(n);
      Tensor x = gpu_randn({n}, dtype, 3);
      const double tol = tolerance(dtype);
      check_gpu_parity([](const Tensor& t) { return gelu(t); }, x, tol);
      check_gpu_parity([](const Tensor& t) { return gelu(t, GeluApproximation::tanh); }, x, tol);
      check_gpu_parity([](const Tensor& t) { return silu(t); }, x, tol);
      check_gpu_parity([](const Tensor& t) { return elu(t, 0.7); }, x, tol);
      if (n > 2) {  // offset by one element: the strided path
        check_gpu_parity(
            [](const Tensor& t) { return leaky_relu(t.narrow(0, 1, t.size(0) - 1), 0.3); }, x, tol);
      }
    }
  }
  Tensor img = gpu_randn({3, 5, 7, 9}, DType::bf16).contiguous(MemoryFormat::channels_last);
  CHECK(silu(img).is_contiguous(MemoryFormat::channels_last));
}

TEST_CASE("softmax: every algorithm on awkward row lengths, forward and backward" *
          doctest::skip(!cuda::is_available())) {
  using dispatch::Direction;
  struct Case {
    int64_t rows, cols;
  };
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (Case cs : {Case{5, 1}, Case{37, 33}, Case{9, 128}, Case{6, 1024}, Case{7, 1025},
                    Case{3, 50000}, Case{300, 4000}}) {
      for (bool log : {false, true}) {
        Tensor x = gpu_randn({cs.rows, cs.cols}, dtype, 4);
        // Each algorithm of each direction that applies, forced for that direction only.
        for (Direction direction : {Direction::forward, Direction::backward}) {
          SoftmaxProblem probe;
          probe.direction = direction;
          probe.input = x;
          probe.output = x;
          probe.outer = cs.rows;
          probe.dim_size = cs.cols;
          auto& slot = softmax_slot(direction, DeviceType::CUDA);
          for (const std::string& name : slot.names()) {
            const auto& algo = slot.get<SoftmaxProblem>(slot.find(name));
            if (algo.applies && !algo.applies(probe)) continue;
            CAPTURE(name);
            CAPTURE(dispatch::direction_name(direction));
            CAPTURE(dtype_name(dtype));
            CAPTURE(cs.rows);
            CAPTURE(cs.cols);
            CAPTURE(log);
            const dispatch::AlgoSettings forced = dispatch::current_algo_settings().force(
                std::string("softmax.") + dispatch::direction_name(direction), name);
            check_gpu_parity(
                [log](const Tensor& t) { return log ? log_softmax(t, 1) : softmax(t, 1); }, x,
                tolerance(dtype), forced);
            // A dense view starting one element in (misaligned rows: the scalar paths), where
            // the algorithm takes misaligned rows.
            SoftmaxProblem shifted = probe;
            shifted.input = shifted.output = x.flatten().narrow(0, 1, (cs.rows - 1) * cs.cols);
            shifted.outer = cs.rows - 1;
            if (cs.rows > 1 && (!algo.applies || algo.applies(shifted)))
              check_gpu_parity(
                  [log](const Tensor& t) {
                    const int64_t rows = t.size(0) - 1, cols = t.size(1);
                    Tensor v = t.flatten().narrow(0, 1, rows * cols).view({rows, cols});
                    return log ? log_softmax(v, 1) : softmax(v, 1);
                  },
                  x, tolerance(dtype), forced);
          }
        }
      }
    }
  }
}

TEST_CASE("softmax: non-last dims (column algorithm), channels_last, f64, -inf" *
          doctest::skip(!cuda::is_available())) {
  Tensor x = gpu_randn({4, 37, 19}, DType::f32, 3);
  check_gpu_parity([](const Tensor& t) { return softmax(t, 1); }, x, 2e-5);
  check_gpu_parity([](const Tensor& t) { return log_softmax(t, 0); }, x, 2e-5);
  Tensor img = gpu_randn({2, 19, 5, 7}, DType::bf16).contiguous(MemoryFormat::channels_last);
  Tensor y = softmax(img, 1);
  CHECK(y.is_contiguous(MemoryFormat::channels_last));
  check_gpu_parity([](const Tensor& t) { return softmax(t, 1); }, img, 5e-2);
  check_gpu_parity([](const Tensor& t) { return log_softmax(t, -1); },
                   gpu_randn({3, 2000}, DType::f64), 1e-12);
  Tensor masked = from_vector({-INFINITY, 0, -INFINITY, 1}, {1, 4}).to(kGpu);
  std::vector<double> v = softmax(masked, 1).to_vector();
  CHECK(v[0] == 0);
  CHECK(v[1] == doctest::Approx(1 / (1 + std::exp(1.0))));
}

TEST_CASE("softmax: the algorithm cache picks by shape" * doctest::skip(!cuda::is_available())) {
  using dispatch::Direction;
  auto pick = [](int64_t rows, int64_t cols, int64_t inner) {
    SoftmaxProblem p;
    p.input = empty({rows * cols * inner}, DType::f32, kGpu);
    p.output = p.input;
    p.outer = rows;
    p.dim_size = cols;
    p.inner = inner;
    dispatch::AlgoModeGuard heuristic(dispatch::AlgoMode::heuristic);
    return softmax_choose(p).name;
  };
  CHECK(pick(4096, 512, 1) == "warp_per_row");
  CHECK(pick(4096, 8192, 1) == "block_smem");
  CHECK(pick(2, 1 << 20, 1) == "multi_block");
  CHECK(pick(16, 64, 7) == "column");
}

TEST_CASE("cross_entropy: parity over shapes, options and dtypes" *
          doctest::skip(!cuda::is_available())) {
  struct Case {
    int64_t n, c;
  };
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (Case cs : {Case{3, 1}, Case{17, 33}, Case{5, 1025}, Case{2, 50000}, Case{64, 1000}}) {
      for (int variant = 0; variant < 4; ++variant) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(cs.n);
        CAPTURE(cs.c);
        CAPTURE(variant);
        Tensor x = gpu_randn({cs.n, cs.c}, dtype, 3);
        Tensor t = randint(0, cs.c, {cs.n});
        if (cs.n > 2) t.narrow(0, 1, 1).fill_(-100);  // one ignored row
        Tensor w = rand({cs.c}) + 0.5;
        check_gpu_parity(
            [&](const Tensor& in) {
              CrossEntropyOptions o;
              if (variant == 1) o.with_label_smoothing(0.1).with_reduction(LossReduction::sum);
              if (variant == 2)
                o.with_weight(w.to(in.device())).with_reduction(LossReduction::none);
              if (variant == 3) o.with_weight(w.to(in.device())).with_label_smoothing(0.25);
              return cross_entropy(in, t.to(in.device()), o);
            },
            x, tolerance(dtype));
      }
    }
  }
  // Spatial targets, both layouts; nll_loss.
  Tensor x = gpu_randn({3, 7, 5, 4}, DType::f32, 2);
  Tensor t = randint(0, 7, {3, 5, 4});
  for (Tensor in : {x, x.contiguous(MemoryFormat::channels_last)}) {
    check_gpu_parity(
        [&](const Tensor& v) {
          return cross_entropy(v, t.to(v.device()),
                               CrossEntropyOptions().with_label_smoothing(0.1));
        },
        in, 2e-5);
    check_gpu_parity(
        [&](const Tensor& v) {
          return nll_loss(log_softmax(v, 1), t.to(v.device()),
                          NllLossOptions().with_reduction(LossReduction::none));
        },
        in, 2e-5);
  }
}

TEST_CASE("cross_entropy: out-of-range targets are reported at the next sync point" *
          doctest::skip(!cuda::is_available())) {
  cuda::check_device_errors(0);  // start clean
  Tensor x = gpu_randn({4, 5}, DType::f32);
  Tensor bad = from_vector({0, 7, 1, 2}, {4}, TensorOptions(DType::i64).with_device(kGpu));
  Tensor loss = cross_entropy(x, bad);  // no host sync, no throw here
  std::string message = error_of([&] { (void)loss.item(); });
  CHECK(message.find("class index out of range") != std::string::npos);
  CHECK(message.find("7") != std::string::npos);
  // The flag was reset: later work is fine.
  Tensor ok = from_vector({0, 4, 1, 2}, {4}, TensorOptions(DType::i64).with_device(kGpu));
  CHECK(std::isfinite(cross_entropy(x, ok).item()));
  Tensor bad_nll = from_vector({0, -3, 1, 2}, {4}, TensorOptions(DType::i64).with_device(kGpu));
  Tensor l2 = nll_loss(x, bad_nll);
  CHECK(error_of([&] { (void)l2.item(); }).find("-3") != std::string::npos);
}

TEST_CASE("pooling: parity on ResNet-like and odd shapes, both layouts, bf16" *
          doctest::skip(!cuda::is_available())) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (bool channels_last : {false, true}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(channels_last);
      Tensor x = gpu_randn({4, 67, 29, 31}, dtype, 2);
      if (channels_last) x = x.contiguous(MemoryFormat::channels_last);
      const double tol = tolerance(dtype);
      check_gpu_parity([](const Tensor& t) { return max_pool2d(t, {3}, {2}, {1}); }, x, tol);
      check_gpu_parity(
          [](const Tensor& t) {
            return max_pool2d(t, {2, 3}, {1, 2}, {1}, {2, 1}, true);
          },
          x, tol);
      check_gpu_parity([](const Tensor& t) { return avg_pool2d(t, {3}, {2}, {1}, true, false); }, x,
                       tol);
      check_gpu_parity([](const Tensor& t) { return adaptive_avg_pool2d(t, {7, 5}); }, x, tol);
      check_gpu_parity([](const Tensor& t) { return global_avg_pool2d(t); }, x, tol);
      Tensor y = max_pool2d(x, {3}, {2}, {1});
      CHECK(
          y.is_contiguous(channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous));
    }
  }
  Tensor v = gpu_randn({2, 3, 9, 10, 11}, DType::f32);
  check_gpu_parity([](const Tensor& t) { return max_pool3d(t, {3}, {2}, {1}); }, v, 2e-5);
  check_gpu_parity(
      [](const Tensor& t) {
        return avg_pool3d(t, {2, 3, 3}, {2}, {0, 1, 1});
      },
      v, 2e-5);
  Tensor s = gpu_randn({3, 5, 101}, DType::f32);
  check_gpu_parity([](const Tensor& t) { return max_pool1d(t, {4}, {3}, {2}); }, s, 2e-5);
  check_gpu_parity([](const Tensor& t) { return adaptive_avg_pool1d(t, {13}); }, s, 2e-5);
  auto [values, indices] = max_pool2d_with_indices(gpu_randn({2, 3, 8, 8}, DType::f32), {2});
  CHECK(indices.device() == kGpu);
  CHECK(indices.dtype() == DType::i64);
}

namespace {

// Max pooling on the GPU keeps exactly the CPU's values and indices (first maximum, last NaN).
void check_max_indices(const Tensor& x, const IntList& k, const IntList& s, const IntList& p,
                       const IntList& d = {1}, bool ceil_mode = false) {
  ValuesIndices on_gpu = max_pool2d_with_indices(x, k, s, p, d, ceil_mode);
  ValuesIndices on_cpu = max_pool2d_with_indices(ember::testing::cpu_f64(x), k, s, p, d, ceil_mode);
  CHECK(max_abs_diff(on_gpu.indices.cpu().to(DType::f64), on_cpu.indices.to(DType::f64)) == 0);
  CHECK(rel_err(on_gpu.values, on_cpu.values) == 0);
}

// The PoolArgs ops/pooling.cpp builds for pooling x (rank 4 or 5) into y with kernel k, stride s
// and padding p in every spatial dim (int64 indices allocated for max pooling), to ask which
// algorithm the cache picks.
PoolArgs pool_args(PoolMode mode, const Tensor& x, const Tensor& y, int64_t k, int64_t s,
                   int64_t p) {
  PoolArgs a;
  a.mode = mode;
  a.batch = x.size(0);
  a.channels = x.size(1);
  a.in_strides[0] = x.stride(0);
  a.in_strides[1] = x.stride(1);
  a.out_strides[0] = y.stride(0);
  a.out_strides[1] = y.stride(1);
  const int64_t spatial = x.dim() - 2;
  for (int64_t i = 0; i < spatial; ++i) {
    const int64_t at = 3 - spatial + i;
    a.in_size[at] = x.size(2 + i);
    a.out_size[at] = y.size(2 + i);
    a.kernel[at] = k;
    a.stride[at] = s;
    a.padding[at] = p;
    a.in_strides[2 + at] = x.stride(2 + i);
    a.out_strides[2 + at] = y.stride(2 + i);
  }
  a.channels_last = a.channels > 1 && x.stride(1) == 1;
  a.input = x;
  a.output = y;
  if (mode == PoolMode::max)
    a.indices = empty(y.sizes(), DType::i64, y.device(), y.suggest_memory_format());
  return a;
}

// The names of the CUDA pooling algorithms (cuda_kernels/pooling/pooling.h).
namespace PoolAlgo {
constexpr const char* generic = "generic";
constexpr const char* window_nhwc = "window_nhwc";
constexpr const char* window_3x3_nhwc = "window_3x3_nhwc";
constexpr const char* window_tiles_nhwc = "window_tiles_nhwc";
constexpr const char* window_avg_tiles_nhwc = "window_avg_tiles_nhwc";
constexpr const char* window_disjoint_nhwc = "window_disjoint_nhwc";
constexpr const char* global_nhwc = "global_nhwc";
constexpr const char* global_nchw = "global_nchw";
}  // namespace PoolAlgo

}  // namespace

TEST_CASE("pooling fast paths: which kernel applies" * doctest::skip(!cuda::is_available())) {
  using dispatch::Direction;
  const MemoryFormat cl = MemoryFormat::channels_last;
  // The heuristic's choice (the default settings) and the channels_last kernels' vector width.
  struct Plan {
    std::string kernel;
    int vector;
  };
  auto plan = [](const PoolArgs& a, Direction direction) {
    dispatch::AlgoSettingsGuard heuristic{dispatch::AlgoSettings{}};
    const PoolProblem p = pool_problem(direction, a);
    return Plan{pool_choose(p).name, cuda::pool_nhwc_vector(p)};
  };
  auto is = [](const Plan& p, const char* kernel, int vector) {
    return p.kernel == kernel && p.vector == vector;
  };
  // ResNet's stem pool shape class: 3x3 stride 2 padding 1, 16-byte vectors.
  for (DType dtype : {DType::bf16, DType::f32}) {
    CAPTURE(dtype_name(dtype));
    const int vector = dtype == DType::bf16 ? 8 : 4;
    Tensor x = gpu_randn({2, 64, 15, 15}, dtype).contiguous(cl);
    Tensor y = empty({2, 64, 8, 8}, dtype, kGpu, cl);
    for (PoolMode mode : {PoolMode::max, PoolMode::avg}) {
      PoolArgs a = pool_args(mode, x, y, 3, 2, 1);
      // 3x3 windows: the unrolled forward, except max pooling with int64 positions.
      CHECK(is(plan(a, Direction::forward),
               mode == PoolMode::max ? PoolAlgo::window_nhwc : PoolAlgo::window_3x3_nhwc, vector));
      // Backward: input = dL/dx (channels_last), output = dL/dy. By 2x2 input tiles for
      // average pooling (a block's windows divided into shared memory) and uint8 taps; int64
      // positions keep the per-pixel kernel.
      const char* tiles =
          mode == PoolMode::max ? PoolAlgo::window_tiles_nhwc : PoolAlgo::window_avg_tiles_nhwc;
      PoolArgs b = pool_args(mode, empty_like(x), empty_like(y), 3, 2, 1);
      CHECK(is(plan(b, Direction::backward), mode == PoolMode::max ? PoolAlgo::window_nhwc : tiles,
               vector));
      if (mode == PoolMode::max) {
        b.indices = empty(y.sizes(), DType::u8, kGpu, cl);
        CHECK(is(plan(b, Direction::backward), PoolAlgo::window_tiles_nhwc, vector));
        // uint8 taps or none: the unrolled forward, one 16-byte vector per thread.
        a.indices = empty(y.sizes(), DType::u8, kGpu, cl);
        CHECK(is(plan(a, Direction::forward), PoolAlgo::window_3x3_nhwc, vector));
        a.indices = Tensor();
        CHECK(is(plan(a, Direction::forward), PoolAlgo::window_3x3_nhwc, vector));
      }
      // Windows tiling the input (2x2 stride 2, 3x2 stride 3x2): a thread per window; with
      // padding they overlap the edge, so by tiles.
      Tensor x16 = empty({2, 64, 16, 16}, dtype, kGpu, cl);
      PoolArgs d = pool_args(mode, x16, empty_like(y), 2, 2, 0);
      if (mode == PoolMode::max) d.indices = empty(y.sizes(), DType::u8, kGpu, cl);
      CHECK(is(plan(d, Direction::backward), PoolAlgo::window_disjoint_nhwc, vector));
      d.kernel[1] = d.stride[1] = 3;
      CHECK(is(plan(d, Direction::backward), PoolAlgo::window_disjoint_nhwc, vector));
      d.kernel[1] = d.stride[1] = 2;
      d.padding[2] = 1;
      CHECK(is(plan(d, Direction::backward), tiles, vector));
      // 3x3 stride 1: a tile meets three window rows, so the per-pixel kernel.
      CHECK(is(plan(pool_args(mode, empty_like(x), empty_like(x), 3, 1, 1), Direction::backward),
               PoolAlgo::window_nhwc, vector));
      // Average tiles whose grid would pass CUDA's limit of 65535 blocks along z (images times
      // chunks of up to 16 vectors of channels): per pixel.
      if (mode == PoolMode::avg) {
        Tensor many = empty({70000, 8, 3, 3}, dtype, kGpu, cl);
        PoolArgs m = pool_args(mode, many, empty({70000, 8, 2, 2}, dtype, kGpu, cl), 3, 2, 1);
        CHECK(is(plan(m, Direction::backward), PoolAlgo::window_nhwc, vector));
      }
      // An NCHW gradient of the output: the generic kernel.
      CHECK(plan(pool_args(mode, empty_like(x), y.contiguous(), 3, 2, 1), Direction::backward)
                .kernel == PoolAlgo::generic);
    }
    // Channels not a multiple of the vector, or a misaligned start: one element per access.
    // 12 channels fill f32's vectors (4), not bf16's (8): bf16's 3x3 max forward is general.
    Tensor twelve = gpu_randn({2, 12, 15, 15}, dtype).contiguous(cl);
    PoolArgs twelve_max =
        pool_args(PoolMode::max, twelve, empty({2, 12, 8, 8}, dtype, kGpu, cl), 3, 2, 1);
    twelve_max.indices = empty({2, 12, 8, 8}, DType::u8, kGpu, cl);
    CHECK(is(plan(twelve_max, Direction::forward),
             dtype == DType::f32 ? PoolAlgo::window_3x3_nhwc : PoolAlgo::window_nhwc,
             dtype == DType::f32 ? 4 : 1));
    Tensor odd = gpu_randn({2, 67, 15, 15}, dtype).contiguous(cl);
    CHECK(is(plan(pool_args(PoolMode::max, odd, empty({2, 67, 8, 8}, dtype, kGpu, cl), 3, 2, 1),
                  Direction::forward),
             PoolAlgo::window_nhwc, 1));
    Tensor shifted = misaligned_channels_last(gpu_randn({2, 64, 15, 15}, dtype));
    REQUIRE(shifted.is_contiguous(cl));
    CHECK(is(plan(pool_args(PoolMode::avg, shifted, y, 3, 2, 1), Direction::forward),
             PoolAlgo::window_nhwc, 1));
    // Not dense channels_last (NCHW, a narrowed W), 3-D pooling, adaptive to 2x2: no fast path.
    CHECK(
        plan(pool_args(PoolMode::max, x.contiguous(), y.contiguous(), 3, 2, 1), Direction::forward)
            .kernel == PoolAlgo::generic);
    CHECK(plan(pool_args(PoolMode::max, x.narrow(3, 1, 13), empty({2, 64, 8, 7}, dtype, kGpu, cl),
                         3, 2, 1),
               Direction::forward)
              .kernel == PoolAlgo::generic);
    Tensor v = gpu_randn({2, 16, 5, 6, 7}, dtype).contiguous(cl);
    CHECK(plan(pool_args(PoolMode::max, v, empty({2, 16, 3, 3, 4}, dtype, kGpu, cl), 3, 2, 1),
               Direction::forward)
              .kernel == PoolAlgo::generic);
    CHECK(plan(pool_args(PoolMode::adaptive_avg, x, empty({2, 64, 2, 2}, dtype, kGpu, cl), 1, 1, 0),
               Direction::forward)
              .kernel == PoolAlgo::generic);
    // Global average pooling (ResNet's head): channels_last forward and backward, NCHW backward;
    // the NCHW forward keeps pooling.cu's own plane kernel, odd channels the generic one.
    Tensor g = gpu_randn({2, 2048, 7, 7}, dtype).contiguous(cl);
    Tensor pooled = empty({2, 2048, 1, 1}, dtype, kGpu, cl);
    CHECK(is(plan(pool_args(PoolMode::adaptive_avg, g, pooled, 1, 1, 0), Direction::forward),
             PoolAlgo::global_nhwc, vector));
    CHECK(is(plan(pool_args(PoolMode::adaptive_avg, empty_like(g), pooled, 1, 1, 0),
                  Direction::backward),
             PoolAlgo::global_nhwc, vector));
    CHECK(is(plan(pool_args(PoolMode::adaptive_avg, g.contiguous(), pooled, 1, 1, 0),
                  Direction::backward),
             PoolAlgo::global_nchw, vector));
    CHECK(plan(pool_args(PoolMode::adaptive_avg, g.contiguous(), pooled.contiguous(), 1, 1, 0),
               Direction::forward)
              .kernel == PoolAlgo::generic);
    CHECK(
        plan(pool_args(PoolMode::adaptive_avg, odd, empty({2, 67, 1, 1}, dtype, kGpu, cl), 1, 1, 0),
             Direction::forward)
            .kernel == PoolAlgo::generic);
  }
  // float16 and float64 stay on the generic kernels.
  for (DType dtype : {DType::f16, DType::f64}) {
    Tensor x = gpu_randn({2, 64, 15, 15}, dtype).contiguous(cl);
    CHECK(plan(pool_args(PoolMode::max, x, empty({2, 64, 8, 8}, dtype, kGpu, cl), 3, 2, 1),
               Direction::forward)
              .kernel == PoolAlgo::generic);
  }
}

TEST_CASE("pooling fast paths: channels_last windows match the CPU, values, indices, gradients" *
          doctest::skip(!cuda::is_available())) {
  const MemoryFormat cl = MemoryFormat::channels_last;
  const std::vector<std::function<Tensor(const Tensor&)>> windows = {
      [](const Tensor& t) { return max_pool2d(t, {3}, {2}, {1}); },
      [](const Tensor& t) {
        return max_pool2d(t, {2, 3}, {1, 2}, {1}, {2, 1}, true);
      },
      [](const Tensor& t) { return max_pool2d(t, {3}, {2}, {0}, {1}, true); },
      [](const Tensor& t) { return avg_pool2d(t, {3}, {2}, {1}, true, false); },
      [](const Tensor& t) { return avg_pool2d(t, {3}, {2}, {1}); },
      [](const Tensor& t) { return avg_pool2d(t, {2}, {2}); },
      // Disjoint windows, partial ones at the edge (ceil_mode) and uncovered rows / columns.
      [](const Tensor& t) { return avg_pool2d(t, {2}, {2}, {0}, true, false); },
      [](const Tensor& t) {
        return avg_pool2d(t, {3, 2}, {3, 2}, {0}, true, true);
      },
      [](const Tensor& t) { return max_pool2d(t, {2}, {2}); },
      [](const Tensor& t) { return max_pool2d(t, {3}, {3}, {0}, {1}, true); },
  };
  for (DType dtype : {DType::f32, DType::bf16}) {
    const double tol = tolerance(dtype);
    // C = 8, 24, 72: 16-byte vectors in both dtypes; 67: one element per access.
    for (int64_t channels : {8, 24, 72, 67}) {
      for (Shape hw : {Shape{13, 11}, Shape{8, 8}}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(channels);
        CAPTURE(shape_str(hw));
        Tensor x = gpu_randn({2, channels, hw[0], hw[1]}, dtype, 2).contiguous(cl);
        for (size_t i = 0; i < windows.size(); ++i) {
          CAPTURE(i);
          check_gpu_parity(windows[i], x, tol, std::nullopt, cl);
        }
        check_max_indices(x, {3}, {2}, {1});
        check_max_indices(x, {2, 3}, {1, 2}, {1}, {2, 1}, true);
        // Integers in [0, 3): ties in every window, so the first maximum must win on both sides.
        Tensor ties = randint(0, 3, {2, channels, hw[0], hw[1]}).to(kGpu, dtype).contiguous(cl);
        check_max_indices(ties, {3}, {2}, {1});
        check_gpu_parity(windows[0], ties, tol, std::nullopt, cl);
        check_gpu_parity(windows[8], ties, tol, std::nullopt, cl);  // disjoint windows
      }
    }
    // A misaligned channels_last view (one element per access) and the generic fallbacks: a
    // narrowed (non-dense) input, an NCHW output gradient for average pooling, 3-D pooling.
    CAPTURE(dtype_name(dtype));
    Tensor shifted = misaligned_channels_last(gpu_randn({2, 24, 13, 11}, dtype));
    check_gpu_parity(windows[0], shifted, tol, std::nullopt, cl);
    check_gpu_parity(windows[3], shifted, tol, std::nullopt, cl);
    Tensor x = gpu_randn({2, 24, 13, 11}, dtype, 2).contiguous(cl);
    check_gpu_parity([](const Tensor& t) { return max_pool2d(t.narrow(3, 1, 9), {3}, {2}, {1}); },
                     x, tol, std::nullopt, cl);
    check_gpu_parity(windows[4], x, tol, std::nullopt, MemoryFormat::contiguous);
    Tensor v = gpu_randn({2, 16, 5, 6, 7}, dtype).contiguous(cl);
    check_gpu_parity([](const Tensor& t) { return max_pool3d(t, {3}, {2}, {1}); }, v, tol,
                     std::nullopt, cl);
    check_gpu_parity(
        [](const Tensor& t) {
          return avg_pool3d(t, {1, 3, 3}, {1, 2, 2}, {0, 1, 1});
        },
        v, tol, std::nullopt, cl);
  }
}

TEST_CASE("pooling fast paths: NaN inside max and average windows" *
          doctest::skip(!cuda::is_available())) {
  const Shape shape = {2, 16, 9, 9};
  std::vector<double> values = randn(shape, TensorOptions(DType::f32)).to_vector();
  auto at = [](int64_t n, int64_t c, int64_t h, int64_t w) {
    return size_t(((n * 16 + c) * 9 + h) * 9 + w);
  };
  // Two NaNs in one 3x3 window (the second also in its right neighbour's), two in corners.
  for (size_t i : {at(0, 3, 2, 2), at(0, 3, 2, 3), at(1, 5, 0, 0), at(1, 9, 8, 8)}) values[i] = NAN;
  for (DType dtype : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(dtype));
    Tensor x = from_vector(values, shape).to(kGpu, dtype).contiguous(MemoryFormat::channels_last);
    check_max_indices(x, {3}, {2}, {1});
    check_max_indices(x, {3}, {2}, {1}, {2});
    const MemoryFormat cl = MemoryFormat::channels_last;
    check_gpu_parity([](const Tensor& t) { return max_pool2d(t, {3}, {2}, {1}); }, x,
                     tolerance(dtype), std::nullopt, cl);
    check_gpu_parity([](const Tensor& t) { return avg_pool2d(t, {3}, {2}, {1}); }, x,
                     tolerance(dtype), std::nullopt, cl);
    check_gpu_parity([](const Tensor& t) { return global_avg_pool2d(t); }, x, tolerance(dtype),
                     std::nullopt, cl);
  }
}

TEST_CASE("pooling fast paths: global average pooling, channels_last and NCHW gradients" *
          doctest::skip(!cuda::is_available())) {
  // ResNet's head; a large plane with few (n, channel) items (rows split over 256 y threads);
  // small and 1x1 planes; an NCHW tail (numel % 8 != 0) and planes shorter than a vector.
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (Shape s : {Shape{2, 2048, 7, 7}, Shape{1, 24, 64, 64}, Shape{3, 8, 5, 5},
                    Shape{2, 72, 1, 1}, Shape{3, 5, 7, 7}, Shape{2, 3, 1, 3}}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(shape_str(s));
      const double tol = tolerance(dtype);
      Tensor x = gpu_randn(s, dtype, 2);
      for (MemoryFormat format : {MemoryFormat::channels_last, MemoryFormat::contiguous}) {
        Tensor in = x.contiguous(format);
        check_gpu_parity([](const Tensor& t) { return global_avg_pool2d(t); }, in, tol,
                         std::nullopt, format);
        check_gpu_parity(
            [](const Tensor& t) {
              return adaptive_avg_pool2d(t, {1, 1});
            },
            in, tol, std::nullopt, MemoryFormat::contiguous);
      }
    }
  }
}

TEST_CASE("dropout: CUDA and CPU draw the same mask" * doctest::skip(!cuda::is_available())) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    for (int64_t n : {1, 5, 4097, 1000003}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(n);
      Tensor x = gpu_randn({n}, dtype);
      Generator gg(kGpu, 77), gc(Device::cpu(), 77);
      DropoutResult rg = dropout_with_mask(x, 0.4, true, &gg);
      DropoutResult rc = dropout_with_mask(x.cpu(), 0.4, true, &gc);
      CHECK(max_abs_diff(rg.mask.cpu().to(DType::f32), rc.mask.to(DType::f32)) == 0);
      CHECK(rel_err(rg.output, rc.output) <= tolerance(dtype));
      // Misaligned input (scalar path) and the backward.
      if (n > 2) {
        Generator g1(kGpu, 3), g2(Device::cpu(), 3);
        check_gpu_parity(
            [&](const Tensor& t) {
              return dropout(t.narrow(0, 1, t.size(0) - 1), 0.2, true, t.is_cuda() ? &g1 : &g2);
            },
            x, tolerance(dtype));
      }
    }
  }
}

TEST_CASE("layout: the tiled NCHW <-> NHWC kernel, every element size" *
          doctest::skip(!cuda::is_available())) {
  for (DType dtype : {DType::u8, DType::f16, DType::f32, DType::f64}) {
    for (Shape s :
         {Shape{2, 3, 4, 5}, Shape{3, 67, 33, 17}, Shape{1, 1000, 7, 7}, Shape{2, 5, 3, 4, 6}}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(shape_str(s));
      Tensor x = randint(0, 100, s, TensorOptions(DType::i64)).to(kGpu, dtype);
      Tensor y = nchw_to_nhwc(x);
      CHECK(y.is_contiguous(MemoryFormat::channels_last));
      CHECK(max_abs_diff(y.cpu(), x.cpu()) == 0);
      Tensor back = empty(s, dtype, kGpu);
      CHECK(try_fast_layout_copy(back, y));
      CHECK(max_abs_diff(back.cpu(), x.cpu()) == 0);
    }
  }
}

TEST_CASE("activations: every op on the op-specialized vector path, f16, grads of their own" *
          doctest::skip(!cuda::is_available())) {
  // n = 8 * k + 3: whole 16-byte vectors for every dtype plus a tail; dense and aligned, so the
  // contiguous kernel runs (leaky_relu included, which the test above runs strided only).
  for (DType dtype : {DType::f16, DType::bf16, DType::f32, DType::f64}) {
    for (int64_t n : {8, 8 * 5000 + 3}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(n);
      Tensor x = gpu_randn({n}, dtype, 4);
      const double tol = tolerance(dtype);
      check_gpu_parity([](const Tensor& t) { return leaky_relu(t, 0.3); }, x, tol);
      check_gpu_parity([](const Tensor& t) { return elu(t, 1.3); }, x, tol);
      check_gpu_parity([](const Tensor& t) { return gelu(t); }, x, tol);
      check_gpu_parity([](const Tensor& t) { return gelu(t, GeluApproximation::tanh); }, x, tol);
      check_gpu_parity([](const Tensor& t) { return silu(t); }, x, tol);
    }
  }
}

TEST_CASE("softmax: -inf masks inside vectors and late maxima, every forward algorithm" *
          doctest::skip(!cuda::is_available())) {
  // The online statistics take a whole 16-byte vector at a time: vectors that are all -inf,
  // partly -inf, or whose max exceeds everything before it (ascending rows) must all give the
  // CPU's result. Every row keeps finite entries.
  using dispatch::Direction;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int64_t cols : {64, 1024, 6000, 50000}) {
      const int64_t rows = 6;
      Tensor base = gpu_randn({rows, cols}, DType::f32, 2);
      // Ascending ramp on top (the max keeps moving right), -inf on columns c % 16 in [3, 13).
      Tensor ramp = arange(double(cols), TensorOptions(DType::f32)).reshape({1, cols}).to(kGpu) *
                    (8.0 / double(cols));
      std::vector<double> mask(size_t(cols), 0.0);
      for (int64_t c = 0; c < cols; ++c)
        if (c % 16 >= 3 && c % 16 < 13) mask[size_t(c)] = -INFINITY;
      Tensor m = from_vector(mask, {1, cols}).to(kGpu, DType::f32);
      Tensor x = (base + ramp + m).to(dtype);
      SoftmaxProblem probe;
      probe.direction = Direction::forward;
      probe.input = x;
      probe.output = x;
      probe.outer = rows;
      probe.dim_size = cols;
      auto& slot = softmax_slot(Direction::forward, DeviceType::CUDA);
      for (const std::string& name : slot.names()) {
        const auto& algo = slot.get<SoftmaxProblem>(slot.find(name));
        if (algo.applies && !algo.applies(probe)) continue;
        CAPTURE(name);
        CAPTURE(dtype_name(dtype));
        CAPTURE(cols);
        const dispatch::AlgoSettings forced =
            dispatch::current_algo_settings().force("softmax.forward", name);
        check_gpu_parity([](const Tensor& t) { return softmax(t, 1); }, x, tolerance(dtype),
                         forced);
      }
      // The fused cross-entropy forward shares the statistics; targets on finite columns.
      std::vector<double> target(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) target[size_t(r)] = double((r * 16 + 1) % cols);
      Tensor t = from_vector(target, {rows}, TensorOptions(DType::i64));
      check_gpu_parity([&](const Tensor& in) { return cross_entropy(in, t.to(in.device())); }, x,
                       tolerance(dtype));
    }
  }
}
