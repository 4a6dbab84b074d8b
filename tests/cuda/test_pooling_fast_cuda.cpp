// CUDA tests of max pooling's index encodings (kernel_interface/pooling.h): int64 flat positions,
// uint8 window taps (what autograd records; packed two a byte where the chosen forward runs on
// whole vectors) and none (no-grad forward). The CPU reference, the generic kernels
// (cuda_kernels/pooling/pooling.cu, reached through NCHW tensors) and the channels_last algorithms
// (cuda_kernels/pooling/: the window loop and the unrolled 3x3 forward, the per-pixel, 2x2-tile
// and disjoint-window backward), each run as the algorithm cache's heuristic chooses it, must
// choose the same elements in every encoding, give bit-identical values
// and gradients to one another, and gradients within tolerance of the CPU's fp64 ones; over
// awkward shapes (C = 1, 5, 12, 24, 67, padding, dilation, ceil_mode; heights 13, 10 and 7 leave
// the tiles backward's last band of two tiles 1, 2 and 3 of its 4 pixel rows), ties and NaN, bf16
// and f32 (C = 12 fills f32's 16-byte vectors, not bf16's). Also: average pooling's fast paths
// (the backward by tiles in blocks sharing their windows' quotients) are bit-identical to the
// generic kernels (power-of-two window counts divide by multiplication there), and global average
// pooling's NHWC backward takes dense, strided, misaligned and broadcast output gradients (vector
// or element loads). Skips without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ember/cuda_kernels/pooling/pooling.h"
#include "ember/dispatch/algo_cache.h"
#include "ember/ops/pooling.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "support/compare.h"
#include "support/gpu_parity.h"

using namespace ember;

namespace {

const Device kGpu = Device::cuda();

using ember::testing::cpu_f64;
using ember::testing::misaligned_channels_last;
using ember::testing::rel_err;

double tolerance(DType d) { return d == DType::f32 ? 2e-5 : ember::testing::parity_tolerance(d); }

int64_t at(const IntList& v, int dim) { return v.size() == 1 ? v[0] : v[size_t(dim)]; }

// A 2-D pooling window: per-dim lists as the ops take them.
struct Window2d {
  IntList kernel, stride, padding, dilation;
  bool ceil_mode;
};

const std::vector<Window2d> kWindows = {
    {{3}, {2}, {1}, {1}, false},          // ResNet's stem pool
    {{2, 3}, {1, 2}, {1}, {2, 1}, true},  // dilation, ceil_mode, unequal dims
    {{3}, {2}, {0}, {1}, true},           // ceil_mode windows hanging past the input
    {{3}, {1}, {1}, {2}, false},          // dilation 2 in both dims, stride 1
    {{1}, {1}, {0}, {1}, false},          // one tap
    {{2}, {2}, {0}, {1}, false},          // disjoint windows; the last row and column in none
    {{2}, {3, 2}, {1}, {2}, true},        // dilated taps skipping rows / columns between them
};

// With uint8 taps (or none: average pooling) and channels filling 16-byte vectors, the backward
// runs by whole windows where they tile the input (kernel == stride, no padding or dilation), else
// by 2x2 input tiles where a tile meets at most two windows per dim (cuda_kernels/pooling/);
// otherwise, and with int64 positions, per input pixel.
const char* backward_kernel(const Window2d& w, int64_t channels, DType dtype) {
  const int64_t vector = dtype == DType::f32 ? 4 : 8;
  if (channels % vector != 0) return "window_nhwc";
  bool disjoint = true, tiles = true;
  for (int dim = 0; dim < 2; ++dim) {
    disjoint = disjoint && at(w.kernel, dim) == at(w.stride, dim) && at(w.padding, dim) == 0 &&
               at(w.dilation, dim) == 1;
    tiles = tiles && (at(w.kernel, dim) - 1) * at(w.dilation, dim) + 2 <= 2 * at(w.stride, dim);
  }
  return disjoint ? "window_disjoint_nhwc" : tiles ? "window_tiles_nhwc" : "window_nhwc";
}

// The algorithm the cache's heuristic (the default settings) picks for `a` in `direction`.
std::string chosen(const PoolArgs& a, dispatch::Direction direction) {
  dispatch::AlgoSettingsGuard heuristic{dispatch::AlgoSettings{}};
  return pool_choose(pool_problem(direction, a)).name;
}
// The same run (heuristic settings) through the cache.
void run_chosen(const PoolArgs& a, dispatch::Direction direction) {
  dispatch::AlgoSettingsGuard heuristic{dispatch::AlgoSettings{}};
  pool_run(pool_problem(direction, a));
}

// Max pooling's forward over 3x3 windows runs unrolled (window_3x3_nhwc) when the channels fill
// 16-byte vectors (4 f32, 8 bf16) and the indices are uint8 taps (packed or not) or none.
bool forward_3x3(const Window2d& w, int64_t channels, DType dtype) {
  const int64_t vector = dtype == DType::f32 ? 4 : 8;
  return at(w.kernel, 0) == 3 && at(w.kernel, 1) == 3 && channels % vector == 0;
}

// The PoolArgs ops/pooling.cpp builds for max pooling x into y with window w, with indices of
// `index_dtype` in y's layout (none when `with_indices` is false); `packed`: uint8 taps two a
// byte, [N, C / 2, H, W] channels_last.
PoolArgs max_args(const Tensor& x, const Tensor& y, const Window2d& w, DType index_dtype,
                  bool with_indices, bool packed = false) {
  PoolArgs a;
  a.mode = PoolMode::max;
  a.batch = x.size(0);
  a.channels = x.size(1);
  for (int i = 0; i < 2; ++i) {
    a.in_size[1 + i] = x.size(2 + i);
    a.out_size[1 + i] = y.size(2 + i);
    a.kernel[1 + i] = at(w.kernel, i);
    a.stride[1 + i] = at(w.stride, i);
    a.padding[1 + i] = at(w.padding, i);
    a.dilation[1 + i] = at(w.dilation, i);
  }
  a.channels_last = a.channels > 1 && x.stride(1) == 1;
  a.input = x;
  a.output = y;
  a.packed_taps = packed;
  Shape index_shape = y.sizes();
  if (packed) index_shape[1] /= 2;
  if (with_indices)
    a.indices = empty(index_shape, index_dtype, y.device(), y.suggest_memory_format());
  const Tensor* tensors[2] = {&x, &y};
  int64_t* strides[2] = {a.in_strides, a.out_strides};
  for (int t = 0; t < 2; ++t) {
    strides[t][0] = tensors[t]->stride(0);
    strides[t][1] = tensors[t]->stride(1);
    strides[t][2] = 0;
    strides[t][3] = tensors[t]->stride(2);
    strides[t][4] = tensors[t]->stride(3);
  }
  return a;
}

// Runs max pooling's forward algorithm of x's device on x with window w: the output in x's layout
// and the indices in `index_dtype` (undefined when `with_indices` is false).
ValuesIndices max_forward(const Tensor& x, const Window2d& w, DType index_dtype, bool with_indices,
                          bool packed = false) {
  Tensor shape_of;
  {
    autograd::NoGradGuard no_grad;
    shape_of = max_pool2d(x, w.kernel, w.stride, w.padding, w.dilation, w.ceil_mode);
  }
  Tensor y = empty(shape_of.sizes(), x.dtype(), x.device(), x.suggest_memory_format());
  PoolArgs a = max_args(x, y, w, index_dtype, with_indices, packed);
  run_chosen(a, dispatch::Direction::forward);
  return {a.output, a.indices};
}

// Max pooling's backward algorithm: dL/dx for output gradient dy, in x's layout (the kernels read
// dy at the output's offsets, so in x's layout too, as ops/pooling.cpp arranges).
Tensor max_backward(const Tensor& x, const Tensor& indices, const Tensor& dy, const Window2d& w,
                    bool packed = false) {
  Tensor dx = empty(x.sizes(), x.dtype(), x.device(), x.suggest_memory_format());
  PoolArgs b = max_args(dx, dy.contiguous(x.suggest_memory_format()), w, indices.dtype(), false);
  b.indices = indices;
  b.packed_taps = packed;
  run_chosen(b, dispatch::Direction::backward);
  return dx;
}

// Every element equal (NaN matching NaN), whatever the dtypes and layouts.
bool same_values(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  const std::vector<double> va = a.cpu().to_vector(), vb = b.cpu().to_vector();
  for (size_t i = 0; i < va.size(); ++i)
    if (!(va[i] == vb[i] || (std::isnan(va[i]) && std::isnan(vb[i])))) return false;
  return true;
}

// uint8 window taps of `taps` (CPU) as the flat input positions h * W + w they name.
std::vector<double> taps_to_flat(const Tensor& taps, const Window2d& w, int64_t in_w) {
  const std::vector<double> t = taps.cpu().to_vector();
  const int64_t out_h = taps.size(2), out_w = taps.size(3);
  const int64_t kw = at(w.kernel, 1);
  std::vector<double> flat(t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    const int64_t ow = int64_t(i) % out_w, oh = int64_t(i) / out_w % out_h;
    const int64_t tap = int64_t(t[i]);
    const int64_t h = oh * at(w.stride, 0) - at(w.padding, 0) + tap / kw * at(w.dilation, 0);
    const int64_t col = ow * at(w.stride, 1) - at(w.padding, 1) + tap % kw * at(w.dilation, 1);
    flat[i] = double(h * in_w + col);
  }
  return flat;
}

// Packed taps ([N, C / 2, H, W] bytes, channels_last) as the [N, C, H, W] taps they hold, in
// logical order: channel c's tap is the low (c even) or high nibble of byte (n, c / 2, h, w).
std::vector<double> unpack_taps(const Tensor& packed) {
  const std::vector<double> bytes = packed.cpu().to_vector();
  const int64_t n = packed.size(0), half = packed.size(1), hw = packed.size(2) * packed.size(3);
  std::vector<double> taps(size_t(n * 2 * half * hw));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < 2 * half; ++c)
      for (int64_t p = 0; p < hw; ++p) {
        const auto byte = uint32_t(bytes[size_t((i * half + c / 2) * hw + p)]);
        taps[size_t((i * 2 * half + c) * hw + p)] = double((byte >> (4 * (c % 2))) & 0xfu);
      }
  return taps;
}

// Inputs with plain values, ties (integers in [0, 3)) and NaNs (some windows holding two).
std::vector<Tensor> max_inputs(const Shape& shape, DType dtype) {
  Tensor plain = (randn(shape, TensorOptions(DType::f32)) * 2).to(kGpu, dtype);
  Tensor ties = randint(0, 3, shape).to(kGpu, dtype);
  std::vector<double> values = randn(shape, TensorOptions(DType::f32)).to_vector();
  for (size_t i = 0; i < values.size(); i += 7) values[i] = NAN;
  for (size_t i = 1; i < values.size(); i += 13) values[i] = NAN;
  Tensor nans = from_vector(values, shape).to(kGpu, dtype);
  return {plain, ties, nans};
}

}  // namespace

TEST_CASE(
    "max pooling indices: uint8 taps, int64 positions and none agree on CPU, generic and "
    "fast CUDA kernels" *
    doctest::skip(!cuda::is_available())) {
  using dispatch::Direction;
  const MemoryFormat cl = MemoryFormat::channels_last;
  for (DType dtype : {DType::f32, DType::bf16}) {
    // C = 12 fills f32's 16-byte vectors but not bf16's: bf16 takes the general kernels.
    for (int64_t channels : {1, 5, 12, 24, 67}) {
      for (Shape hw : {Shape{13, 11}, Shape{10, 8}, Shape{7, 9}}) {
        const Shape shape = {2, channels, hw[0], hw[1]};
        std::vector<Tensor> inputs = max_inputs(shape, dtype);
        for (size_t input = 0; input < inputs.size(); ++input) {
          for (size_t wi = 0; wi < kWindows.size(); ++wi) {
            const Window2d& w = kWindows[wi];
            CAPTURE(dtype_name(dtype));
            CAPTURE(channels);
            CAPTURE(shape_str(hw));
            CAPTURE(input);
            CAPTURE(wi);
            const Tensor fast_x = inputs[input].contiguous(cl);
            const Tensor generic_x = inputs[input].contiguous();
            const Tensor cpu_x = cpu_f64(inputs[input]);
            // Which CUDA kernel each layout reaches (C = 1 is both layouts at once: fast).
            {
              ValuesIndices probe = max_forward(fast_x, w, DType::u8, true);
              PoolArgs a = max_args(fast_x, probe.values, w, DType::u8, true);
              // 3x3 windows with uint8 taps or none and vectors: the unrolled forward.
              const bool unrolled = forward_3x3(w, channels, dtype);
              const std::string forward_kernel = unrolled ? "window_3x3_nhwc" : "window_nhwc";
              CHECK(chosen(a, Direction::forward) == forward_kernel);
              CHECK(chosen(max_args(fast_x, probe.values, w, DType::u8, false),
                           Direction::forward) == forward_kernel);
              // Backward: dL/dx, dL/dy in the same layouts; int64 positions never go by windows
              // or tiles.
              CHECK(chosen(a, Direction::backward) == backward_kernel(w, channels, dtype));
              PoolArgs flat = max_args(fast_x, probe.values, w, DType::i64, true);
              CHECK(chosen(flat, Direction::backward) == "window_nhwc");
              CHECK(chosen(flat, Direction::forward) == "window_nhwc");
              if (channels > 1) {
                PoolArgs g = max_args(generic_x, probe.values.contiguous(), w, DType::u8, true);
                CHECK(chosen(g, Direction::forward) == "generic");
              }
            }
            const ValuesIndices cpu_flat = max_forward(cpu_x, w, DType::i64, true);
            const ValuesIndices cpu_taps = max_forward(cpu_x, w, DType::u8, true);
            CHECK(same_values(cpu_taps.values, cpu_flat.values));
            CHECK(taps_to_flat(cpu_taps.indices, w, hw[1]) == cpu_flat.indices.to_vector());
            const Tensor dy = (randn(cpu_flat.values.sizes(), TensorOptions(DType::f32)))
                                  .to(kGpu, dtype)
                                  .contiguous(cl);
            const Tensor cpu_dx = max_backward(cpu_x, cpu_flat.indices, cpu_f64(dy), w);
            CHECK(rel_err(max_backward(cpu_x, cpu_taps.indices, cpu_f64(dy), w), cpu_dx) == 0);
            Tensor first_dx;  // every CUDA dx must equal this one bit for bit
            for (bool fast : {true, false}) {
              CAPTURE(fast);
              const Tensor& x = fast ? fast_x : generic_x;
              const Tensor x_dy = dy.contiguous(x.suggest_memory_format());
              for (DType index_dtype : {DType::i64, DType::u8}) {
                CAPTURE(dtype_name(index_dtype));
                const ValuesIndices r = max_forward(x, w, index_dtype, true);
                CHECK(same_values(r.values, cpu_flat.values));
                CHECK(same_values(r.indices,
                                  index_dtype == DType::u8 ? cpu_taps.indices : cpu_flat.indices));
                const Tensor dx = max_backward(x, r.indices, x_dy, w);
                CHECK(rel_err(dx, cpu_dx) <= 4 * tolerance(dtype));
                if (!first_dx.defined()) first_dx = dx;
                CHECK(same_values(dx, first_dx));
              }
              // No indices at all (a no-grad forward): the same values.
              CHECK(same_values(max_forward(x, w, DType::u8, false).values, cpu_flat.values));
              if (!fast) continue;
              // Packed taps: where the forward runs on whole vectors of an even channel count
              // (every window here has at most 16 taps), as ops/pooling.cpp asks the cache.
              const int64_t vector = dtype == DType::f32 ? 4 : 8;
              const bool packable = channels % vector == 0;
              {
                dispatch::AlgoSettingsGuard heuristic{dispatch::AlgoSettings{}};
                PoolProblem unallocated = pool_problem(
                    Direction::forward, max_args(x, cpu_flat.values.to(kGpu, dtype).contiguous(cl),
                                                 w, DType::u8, false));
                unallocated.indices = PoolIndices::taps_u8;
                CHECK(pool_forward_packs_taps(unallocated) == packable);
              }
              if (!packable) continue;
              const ValuesIndices p = max_forward(x, w, DType::u8, true, /*packed=*/true);
              CHECK(same_values(p.values, cpu_flat.values));
              CHECK(unpack_taps(p.indices) == cpu_taps.indices.to_vector());
              CHECK(same_values(max_backward(x, p.indices, x_dy, w, true), first_dx));
              // A gradient one element off alignment: the per-pixel kernel, a tap at a time.
              const Tensor off = misaligned_channels_last(x_dy);
              PoolArgs b = max_args(x, off, w, DType::u8, false, true);
              b.indices = p.indices;
              CHECK(chosen(b, Direction::backward) == "window_nhwc");
              CHECK(cuda::pool_nhwc_vector(pool_problem(Direction::backward, b)) == 1);
              CHECK(same_values(max_backward(x, p.indices, off, w, true), first_dx));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("max pooling through autograd: compact taps give the int64 path's gradients" *
          doctest::skip(!cuda::is_available())) {
  const MemoryFormat cl = MemoryFormat::channels_last;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (MemoryFormat format : {cl, MemoryFormat::contiguous}) {
      for (int64_t channels : {8, 67}) {
        for (size_t wi = 0; wi < kWindows.size(); ++wi) {
          const Window2d& w = kWindows[wi];
          CAPTURE(dtype_name(dtype));
          CAPTURE(format == cl);
          CAPTURE(channels);
          CAPTURE(wi);
          std::vector<Tensor> inputs = max_inputs({2, channels, 13, 11}, dtype);
          for (const Tensor& input : inputs) {
            Tensor x = input.contiguous(format).detach().set_requires_grad(true);
            Tensor y = max_pool2d(x, w.kernel, w.stride, w.padding, w.dilation, w.ceil_mode);
            Tensor dy =
                randn(y.sizes(), TensorOptions(DType::f32)).to(kGpu, dtype).contiguous(format);
            y.backward(dy);
            // The int64 indices a user asks for, fed to the backward kernel by hand.
            ValuesIndices with = max_pool2d_with_indices(
                input.contiguous(format), w.kernel, w.stride, w.padding, w.dilation, w.ceil_mode);
            CHECK(with.indices.dtype() == DType::i64);
            CHECK(same_values(y, with.values));
            REQUIRE(x.grad().defined());
            CHECK(
                same_values(x.grad(), max_backward(input.contiguous(format), with.indices, dy, w)));
            // And the CPU's fp64 gradient.
            Tensor c = cpu_f64(input).set_requires_grad(true);
            max_pool2d(c, w.kernel, w.stride, w.padding, w.dilation, w.ceil_mode)
                .backward(cpu_f64(dy));
            CHECK(rel_err(x.grad(), c.grad()) <= 4 * tolerance(dtype));
          }
        }
      }
    }
  }
}

TEST_CASE("max pooling's tap encoding follows the forward the cache chose, in every mode" *
          doctest::skip(!cuda::is_available())) {
  // The forward packs its uint8 taps where the algorithm chosen for it can (window_3x3_nhwc and
  // window_nhwc on whole vectors); the backward's problem carries the encoding, so every mode and
  // forced choice must give the heuristic's gradients, or, forcing a backward that cannot read
  // what the forward wrote, an error.
  using dispatch::AlgoMode;
  using dispatch::AlgoSettings;
  const MemoryFormat cl = MemoryFormat::channels_last;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (const Window2d& w : {kWindows[0], kWindows[5]}) {  // 3x3 stride 2; 2x2 disjoint
      CAPTURE(dtype_name(dtype));
      CAPTURE(shape_str(w.kernel));
      const Tensor input = max_inputs({2, 64, 13, 11}, dtype)[0].contiguous(cl);
      Tensor dy;
      auto grad_of = [&](const AlgoSettings& settings) {
        dispatch::AlgoSettingsGuard guard(settings);
        Tensor x = input.detach().set_requires_grad(true);
        Tensor y = max_pool2d(x, w.kernel, w.stride, w.padding, w.dilation, w.ceil_mode);
        if (!dy.defined())
          dy = randn(y.sizes(), TensorOptions(DType::f32)).to(kGpu, dtype).contiguous(cl);
        y.backward(dy);
        return x.grad();
      };
      const Tensor expect = grad_of(AlgoSettings{});
      for (const AlgoSettings& settings :
           {AlgoSettings{}.with_mode(AlgoMode::benchmark),
            AlgoSettings{}.with_mode(AlgoMode::deterministic),
            AlgoSettings{}.force("pooling", "generic"),
            AlgoSettings{}.force("pooling.forward", "generic"),
            AlgoSettings{}.force("pooling.forward", "window_nhwc"),
            AlgoSettings{}.force("pooling.backward", "window_nhwc")}) {
        const std::string how = settings.forced.empty() ? dispatch::algo_mode_name(settings.mode)
                                                        : settings.forced.begin()->first + "=" +
                                                              settings.forced.begin()->second;
        CAPTURE(how);
        CHECK(same_values(grad_of(settings), expect));
      }
      // The heuristic's forward packs here; the generic backward reads a byte per tap.
      CHECK_THROWS(grad_of(AlgoSettings{}.force("pooling.backward", "generic")));
    }
  }
}

TEST_CASE("max pooling through autograd: 1-D, 3-D, unbatched and windows over 256 taps" *
          doctest::skip(!cuda::is_available())) {
  // Each runs on the GPU and on the CPU (fp64); values and gradients must agree.
  auto check = [](const std::function<Tensor(const Tensor&)>& f, const Tensor& input, double tol) {
    Tensor g = input.detach().set_requires_grad(true);
    Tensor c = cpu_f64(input).set_requires_grad(true);
    Tensor out_g = f(g);
    Tensor out_c = f(c);
    REQUIRE(out_g.sizes() == out_c.sizes());
    CHECK(rel_err(out_g, out_c) == 0);
    Tensor dy = randn(out_g.sizes(), TensorOptions(DType::f32))
                    .to(kGpu, input.dtype())
                    .contiguous(out_g.suggest_memory_format());
    out_g.backward(dy);
    out_c.backward(cpu_f64(dy));
    CHECK(rel_err(g.grad(), c.grad()) <= 4 * tol);
  };
  for (DType dtype : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(dtype));
    const double tol = tolerance(dtype);
    Tensor s = (randn({3, 5, 101}, TensorOptions(DType::f32)) * 2).to(kGpu, dtype);
    check([](const Tensor& t) { return max_pool1d(t, {4}, {3}, {2}); }, s, tol);
    check([](const Tensor& t) { return max_pool1d(t, {3}, {2}, {1}, {3}, true); }, s, tol);
    Tensor v = (randn({2, 6, 7, 8, 9}, TensorOptions(DType::f32)) * 2).to(kGpu, dtype);
    for (MemoryFormat format : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
      Tensor in = v.contiguous(format);
      check([](const Tensor& t) { return max_pool3d(t, {3}, {2}, {1}); }, in, tol);
      check(
          [](const Tensor& t) {
            return max_pool3d(t, {2, 3, 3}, {1, 2, 2}, {1}, {2, 1, 1}, true);
          },
          in, tol);
    }
    // Unbatched [C, H, W].
    Tensor u = (randn({5, 9, 10}, TensorOptions(DType::f32)) * 2).to(kGpu, dtype);
    check([](const Tensor& t) { return max_pool2d(t, {3}, {2}, {1}); }, u, tol);
    // 17 x 17 = 289 taps: too many for uint8, so autograd keeps int64 positions.
    Tensor big = (randn({2, 8, 20, 19}, TensorOptions(DType::f32)) * 2).to(kGpu, dtype);
    check([](const Tensor& t) { return max_pool2d(t, {17}, {2}, {8}); },
          big.contiguous(MemoryFormat::channels_last), tol);
    check([](const Tensor& t) { return max_pool2d(t, {17}, {2}, {8}); }, big, tol);
  }
}

TEST_CASE("average pooling: the channels_last fast path is bit-identical to the generic kernels" *
          doctest::skip(!cuda::is_available())) {
  // 2x2 windows (count 4: multiplied by the reciprocal), 3x3 without padding counts (4, 6, 9),
  // ceil_mode windows cut by the input's end (counts 1, 2, 3, ...). The 3x3 forwards run unrolled
  // when the channels fill vectors (C = 8, 24, 128), and the backward of the stride-2 and 1x1
  // windows by 2x2 input tiles: 2x2 windows cut by the end (ceil_mode) or by uncounted padding,
  // and 1x1 stride-2 windows leaving odd rows and columns in no window (zero gradients), on odd
  // and even input sizes; the 3x3 stride-1 and 4x2 stride-(3, 1) backwards per pixel. The tiles'
  // blocks hold 1, 2 or 16 vectors of a pixel's channels (the largest power of two up to 16
  // dividing C / vector: C = 8 and 24 give 1 in bf16, 2 in f32; C = 128 gives 16, in 1 chunk in
  // bf16 and 2 in f32) by 32, 16 or 2 tile columns by 4 tile rows: 37x45 (19x23 tiles) spans
  // several blocks down and, with 2 or 16 vectors, across, the last ones cut.
  const std::vector<std::function<Tensor(const Tensor&)>> pools = {
      [](const Tensor& t) { return avg_pool2d(t, {2}, {2}); },
      [](const Tensor& t) { return avg_pool2d(t, {3}, {2}, {1}, false, false); },
      [](const Tensor& t) { return avg_pool2d(t, {3}, {2}, {1}, true, true); },
      [](const Tensor& t) { return avg_pool2d(t, {3}, {1}, {1}, false, false); },
      [](const Tensor& t) { return avg_pool2d(t, {3}, {2}, {0}, true, true); },
      [](const Tensor& t) {
        return avg_pool2d(t, {4, 2}, {3, 1}, {0, 1}, true, false);
      },
      [](const Tensor& t) { return avg_pool2d(t, {2}, {2}, {0}, true, true); },
      [](const Tensor& t) { return avg_pool2d(t, {2}, {2}, {1}, false, false); },
      [](const Tensor& t) { return avg_pool2d(t, {1}, {2}); },
  };
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int64_t channels : {8, 24, 67, 128}) {
      for (Shape hw : {Shape{13, 11}, Shape{10, 8}, Shape{37, 45}}) {
        Tensor x =
            (randn({2, channels, hw[0], hw[1]}, TensorOptions(DType::f32)) * 3).to(kGpu, dtype);
        for (size_t i = 0; i < pools.size(); ++i) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(channels);
          CAPTURE(shape_str(hw));
          CAPTURE(i);
          Tensor fast_x =
              x.contiguous(MemoryFormat::channels_last).detach().set_requires_grad(true);
          Tensor generic_x = x.contiguous().detach().set_requires_grad(true);
          Tensor fast_y = pools[i](fast_x);
          Tensor generic_y = pools[i](generic_x);
          CHECK(same_values(fast_y, generic_y));
          Tensor dy = randn(fast_y.sizes(), TensorOptions(DType::f32)).to(kGpu, dtype);
          fast_y.backward(dy.contiguous(MemoryFormat::channels_last));
          generic_y.backward(dy.contiguous());
          CHECK(same_values(fast_x.grad(), generic_x.grad()));
        }
      }
    }
  }
}

TEST_CASE("average pooling divides by the window's count exactly as IEEE division does" *
          doctest::skip(!cuda::is_available())) {
  // The fast kernels divide by a count that is not a power of two with its rounded reciprocal and
  // one fma correction (CountDivisor in cuda_kernels/pooling/pooling_nhwc.cuh), the generic
  // kernels with IEEE division. The backward of disjoint 1 x k windows gives each input pixel
  // dy / k, so every gradient below must come out bit-identical both ways: random float32 bit
  // patterns (every exponent: subnormal quotients, huge values, inf, NaN; the fast kernels divide
  // outside 2^-64..2^100) and random mantissas in [1, 2) (the correction's case); counts over 2^16
  // take the division (a few rows of them).
  std::mt19937 rng(15);
  constexpr int64_t kRows = 1 << 15, kChannels = 8;  // 2^18 gradients per count
  std::vector<double> values(size_t(kRows * kChannels));
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t bits = uint32_t(rng());
    if (i % 2 == 1) bits = (bits & 0x807fffffu) | 0x3f800000u;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    values[i] = double(f);
  }
  const Tensor dy = from_vector(values, {1, kChannels, kRows, 1}).to(kGpu, DType::f32);
  for (int64_t k : {3, 5, 6, 7, 9, 25, 49, 65537}) {
    CAPTURE(k);
    const int64_t rows = k < 1000 ? kRows : 8;
    const Tensor x = zeros({1, kChannels, rows, k}, TensorOptions(DType::f32).with_device(kGpu));
    const Tensor dy_rows = dy.narrow(2, 0, rows);
    auto grad_of = [&](MemoryFormat format) {
      Tensor xg = x.contiguous(format).detach().set_requires_grad(true);
      avg_pool2d(xg, {1, k}, {1, k}).backward(dy_rows.contiguous(format));
      return xg.grad();
    };
    CHECK(same_values(grad_of(MemoryFormat::channels_last), grad_of(MemoryFormat::contiguous)));
  }
}

TEST_CASE("global average pooling backward: dense, strided, broadcast and misaligned gradients" *
          doctest::skip(!cuda::is_available())) {
  // The NHWC backward loads dy[n, :] as 16-byte vectors when its channels are contiguous and
  // aligned, else element by element (cuda_kernels/pooling/pooling_global.cu); both must give
  // dy / plane.
  using dispatch::Direction;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (Shape s : {Shape{3, 16, 5, 7}, Shape{2, 24, 1, 1}, Shape{1, 8, 7, 7}}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(shape_str(s));
      const int64_t n = s[0], c = s[1], plane = s[2] * s[3];
      const Tensor wide = randn({n, 2 * c + 8, 1, 1}, TensorOptions(DType::f32)).to(kGpu, dtype);
      // Dense (vectors), every other channel (stride 2), one element past alignment, broadcast.
      const std::vector<Tensor> grads = {
          wide.narrow(1, 0, c).contiguous(),
          wide.narrow(1, 0, 2 * c).reshape({n, c, 2, 1}).narrow(2, 0, 1),
          wide.narrow(1, 1, c),
          wide.narrow(1, 0, 1).expand({n, c, 1, 1}),
      };
      for (size_t gi = 0; gi < grads.size(); ++gi) {
        CAPTURE(gi);
        const Tensor& dy = grads[gi];
        Tensor dx = empty(s, dtype, kGpu, MemoryFormat::channels_last);
        PoolArgs a;
        a.mode = PoolMode::adaptive_avg;
        a.batch = n;
        a.channels = c;
        a.in_size[1] = s[2];
        a.in_size[2] = s[3];
        a.channels_last = true;
        a.input = dx;
        a.output = dy;
        a.in_strides[0] = dx.stride(0);
        a.in_strides[1] = dx.stride(1);
        a.in_strides[3] = dx.stride(2);
        a.in_strides[4] = dx.stride(3);
        a.out_strides[0] = dy.stride(0);
        a.out_strides[1] = dy.stride(1);
        a.out_strides[3] = dy.stride(2);
        a.out_strides[4] = dy.stride(3);
        CHECK(chosen(a, Direction::backward) == "global_nhwc");
        run_chosen(a, Direction::backward);
        // dy / plane rounded once to dtype, broadcast over the plane.
        const Tensor expect = (cpu_f64(dy) / double(plane)).to(dtype).expand(s);
        CHECK(same_values(dx, expect));
      }
    }
  }
}
