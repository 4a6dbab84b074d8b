// conv2d on CUDA: every CUDA algorithm of every direction, reached through forced mode, against the
// CPU in fp64 on a sweep (odd H and W, C and K not multiples of 8, stride 2, dilation 2, groups,
// depthwise, the 3-channel stem, 1x1 (strided, padded, many pixels), batch 1; NCHW,
// channels_last and non-contiguous inputs; fp32 with and without TF32, bf16, f16, f64), with
// coverage of every registered algorithm; then deterministic mode (bitwise repeatability), the
// workspace limit, benchmark mode, the op with autograd against the CPU, conv2d_bias_relu on both
// of its CUDA paths, the one memory-format rule of conv2d, conv2d_bias_relu and conv_transpose2d
// (outputs and gradients), and device errors. Tolerances are relative to the largest reference
// value, set by dtype. Skips without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ember/dispatch/algo_cache.h"
#include "ember/ember.h"
#include "ember/ops/conv.h"
#include "ember/ops/conv_fused.h"
#include "support/compare.h"
#include "support/conv_cases.h"

using namespace ember;
using dispatch::AlgoMode;
using dispatch::AlgoSettings;
using dispatch::AlgoSettingsGuard;
using dispatch::Direction;

namespace {

using testing::ConvCase;
using testing::params;

int64_t out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
  return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
}

const std::vector<ConvCase>& sweep() {
  static const std::vector<ConvCase> cases = {
      {"3x3 C8 K16 odd W", 2, 8, 7, 6, 16, 3, 3, params(1, 1, 1, 1, 1, 1, 1)},
      {"3x3 stride 2, C5 K6", 1, 5, 7, 7, 6, 3, 3, params(2, 2, 1, 1, 1, 1, 1)},
      {"dilation 2, C4 K8", 1, 4, 9, 9, 8, 3, 3, params(1, 1, 2, 2, 2, 2, 1)},
      {"groups 2", 2, 6, 5, 5, 4, 3, 3, params(1, 1, 1, 1, 1, 1, 2)},
      {"depthwise C16", 2, 16, 6, 7, 16, 3, 3, params(1, 1, 1, 1, 1, 1, 16)},
      {"depthwise stride 2, C8", 1, 8, 9, 9, 8, 3, 3, params(2, 2, 1, 1, 1, 1, 8)},
      {"depthwise x2 multiplier", 1, 4, 6, 6, 8, 3, 3, params(1, 1, 1, 1, 1, 1, 4)},
      {"1x1 C16 K24", 2, 16, 5, 5, 24, 1, 1, params(1, 1, 0, 0, 1, 1, 1)},
      {"1x1 stride 2", 2, 8, 7, 7, 16, 1, 1, params(2, 2, 0, 0, 1, 1, 1)},
      {"1x1 odd channels", 1, 7, 5, 3, 9, 1, 1, params(1, 1, 0, 0, 1, 1, 1)},
      {"stem 7x7 stride 2, C3", 2, 3, 15, 13, 16, 7, 7, params(2, 2, 3, 3, 1, 1, 1)},
      {"asymmetric", 2, 8, 10, 7, 8, 3, 2, params(2, 1, 0, 1, 1, 2, 1)},
      {"5x5 C24 K40 batch 1", 1, 24, 6, 5, 40, 5, 5, params(1, 1, 2, 2, 1, 1, 1)},
      {"3x3 K136 (wide tiles)", 1, 16, 6, 6, 136, 3, 3, params(1, 1, 1, 1, 1, 1, 1)},
      {"3x3 C136 K136 (big tiles)", 1, 136, 5, 5, 136, 3, 3, params(1, 1, 1, 1, 1, 1, 1)},
      {"3x3 many pixels (split-K)", 4, 32, 19, 17, 64, 3, 3, params(1, 1, 1, 1, 1, 1, 1)},
      {"kernel = padded input", 1, 2, 3, 4, 2, 5, 6, params(1, 1, 1, 1, 1, 1, 1)},
      // 16-byte gather/scatter of strided 1x1 (C a multiple of 8), and the per-element paths.
      {"1x1 stride 2, C16 K8 odd H", 2, 16, 9, 8, 8, 1, 1, params(2, 2, 0, 0, 1, 1, 1)},
      {"1x1 stride (2, 3), C5 K7", 1, 5, 7, 8, 7, 1, 1, params(2, 3, 0, 0, 1, 1, 1)},
      // Fewer channels than one 16-byte vector holds even in fp32 (the gather is per element).
      {"1x1 stride 2, C3 K4", 1, 3, 5, 6, 4, 1, 1, params(2, 2, 0, 0, 1, 1, 1)},
      {"1x1 padding 1", 2, 8, 5, 6, 8, 1, 1, params(1, 1, 1, 1, 1, 1, 1)},
      // Enough pixels for split-K filter gradients (image slices in gemm_1x1's NCHW form; pixel
      // slices with a remainder in im2col_gemm, which splits from 256K pixels per output tile)
      // and, for the stem, rows padded from 147 to 152.
      {"1x1 many pixels C8 K12", 2, 8, 40, 40, 12, 1, 1, params(1, 1, 0, 0, 1, 1, 1)},
      {"1x1 C8 K12 one 513x512 image (im2col split-K)", 1, 8, 513, 512, 12, 1, 1,
       params(1, 1, 0, 0, 1, 1, 1)},
      {"stem 7x7 stride 2, C3 batch 1, many pixels", 1, 3, 96, 95, 16, 7, 7,
       params(2, 2, 3, 3, 1, 1, 1)},
      // The halo filter gradient (64-channel chunks of 'same' 3-wide rows): two channel chunks,
      // K masked past 64, taps crossing rows and images, two splits with a partial last k-tile;
      // then dilated rows (the halo shifted by whole image rows). The first also splits the
      // forward and stride-1 backward-data reductions (implicit_gemm_*_splitk: 18+ k-tiles).
      {"3x3 C128 K72 two images (halo wgrad)", 2, 128, 20, 19, 72, 3, 3,
       params(1, 1, 1, 1, 1, 1, 1)},
      {"3x3 C64 K64 dilation (2, 1)", 1, 64, 9, 10, 64, 3, 3, params(1, 1, 2, 1, 2, 1, 1)},
      // The halo forward / backward-data kernel (strips of 256 linear pixels x 64 channels, 64
      // channels reduced per stage; "3x3 C128 K72" above runs its forward with masked columns):
      // odd H/W, the strip crossing rows, images and the padding borders, two channel blocks
      // forward and one backward; then two 64-column tiles and a second strip ending past the
      // last pixel; then one-pixel images (every tap but the centre is padding).
      {"3x3 C128 K64 7x9 two images (halo fprop)", 2, 128, 7, 9, 64, 3, 3,
       params(1, 1, 1, 1, 1, 1, 1)},
      {"3x3 C64 K128 13x11 two images (halo fprop)", 2, 64, 13, 11, 128, 3, 3,
       params(1, 1, 1, 1, 1, 1, 1)},
      {"3x3 C64 K64 1x1 image (halo fprop)", 3, 64, 1, 1, 64, 3, 3, params(1, 1, 1, 1, 1, 1, 1)},
      // Strided backward-data phases with two channel blocks of K = 128: 1, 2, 2 and 4 taps,
      // rows 5 / 4 by 4 / 4 (split-K applies to the forward only: 18 k-tiles).
      {"3x3 stride 2, C64 K128", 1, 64, 9, 8, 128, 3, 3, params(2, 2, 1, 1, 1, 1, 1)},
      // A 2x2 filter with stride 3: along each axis two phases have one tap each and the third
      // none (its pixels of dx are zero), and phases have 3 or 2 rows.
      {"2x2 stride 3, C16 K24", 2, 16, 8, 7, 24, 2, 2, params(3, 3, 0, 0, 1, 1, 1)},
  };
  return cases;
}

enum class Layout { nchw, channels_last, strided };
const char* layout_name(Layout l) {
  return l == Layout::nchw ? "nchw" : l == Layout::channels_last ? "channels_last" : "strided";
}

// Random values made on the CPU in fp32 from `seed`, rounded to `dtype`, on `device`, laid out
// as asked (strided: a slice of a wider tensor along W).
Tensor random_tensor(const Shape& shape, DType dtype, Device device, Layout layout, uint64_t seed) {
  Generator gen(Device::cpu(), seed);
  Shape alloc = shape;
  if (layout == Layout::strided) alloc[3] += 3;
  Tensor t = randn(alloc, TensorOptions(DType::f32), &gen).to(device, dtype);
  if (layout == Layout::strided) return t.slice(3, 1, 1 + shape[3]);
  if (layout == Layout::channels_last) return t.contiguous(MemoryFormat::channels_last);
  return t;
}

// A tensor to be overwritten, filled with a large value so accumulating algorithms fail.
Tensor garbage(const Shape& shape, DType dtype, Layout layout) {
  Tensor t = full(shape, 1e3, TensorOptions(dtype).with_device(Device::cuda()));
  return layout == Layout::channels_last ? t.contiguous(MemoryFormat::channels_last) : t;
}

// Relative to the largest reference value; a NaN output fails (support/compare.h).
using testing::rel_err_to_max;

// Relative to the largest reference value; TF32 keeps 10 mantissa bits, bf16 8.
double tolerance(DType dtype, bool tf32_math) {
  switch (dtype) {
    case DType::f64:
      return 1e-10;
    case DType::f32:
      return tf32_math ? 5e-3 : 5e-5;
    case DType::f16:
      return 1e-2;
    default:
      return 4e-2;
  }
}

std::string force_key(Direction d) { return std::string("conv2d.") + dispatch::direction_name(d); }

const dispatch::Algorithm<ConvProblem>& cuda_algorithm(Direction d, const std::string& name) {
  dispatch::AlgoSlot& slot = conv2d_slot(d, DeviceType::CUDA);
  const int i = slot.find(name);
  REQUIRE(i >= 0);
  return slot.get<ConvProblem>(i);
}

// The three tensors of a problem on the GPU and its fp64 reference results on the CPU.
struct Operands {
  Tensor x, w, dy;               // CUDA, in the case's dtype and layout
  Tensor ref_y, ref_dx, ref_dw;  // CPU fp64
};

Operands make_operands(const ConvCase& c, DType dtype, Layout layout) {
  const int64_t P = out_size(c.H, c.R, c.p.stride[0], c.p.padding[0], c.p.dilation[0]);
  const int64_t Q = out_size(c.W, c.S, c.p.stride[1], c.p.padding[1], c.p.dilation[1]);
  Operands o;
  o.x = random_tensor({c.N, c.C, c.H, c.W}, dtype, Device::cuda(), layout, 11);
  o.w = random_tensor({c.K, c.C / c.p.groups, c.R, c.S}, dtype, Device::cuda(),
                      layout == Layout::channels_last ? Layout::channels_last : Layout::nchw, 12);
  o.dy = random_tensor({c.N, c.K, P, Q}, dtype, Device::cuda(), layout, 13);
  // The reference sees exactly the rounded values the GPU sees, in fp64 on the CPU.
  Tensor x = o.x.to(Device::cpu(), DType::f64).contiguous();
  Tensor w = o.w.to(Device::cpu(), DType::f64).contiguous();
  Tensor dy = o.dy.to(Device::cpu(), DType::f64).contiguous();
  o.ref_y = empty({c.N, c.K, P, Q}, DType::f64);
  o.ref_dx = empty(x.sizes(), DType::f64);
  o.ref_dw = empty(w.sizes(), DType::f64);
  conv2d_run({Direction::forward, x, w, o.ref_y, c.p, false});
  conv2d_run({Direction::backward_data, o.ref_dx, w, dy, c.p, false});
  conv2d_run({Direction::backward_filter, x, o.ref_dw, dy, c.p, false});
  return o;
}

// The problem of direction d with its written tensor replaced by garbage in `layout`.
ConvProblem problem_for(Direction d, const Operands& o, const ConvCase& c, Layout layout,
                        bool tf32) {
  const Layout written = layout == Layout::strided ? Layout::nchw : layout;
  ConvProblem pr{d, o.x, o.w, o.dy, c.p, tf32};
  if (d == Direction::forward) pr.output = garbage(o.dy.sizes(), o.dy.dtype(), written);
  if (d == Direction::backward_data) pr.input = garbage(o.x.sizes(), o.x.dtype(), written);
  if (d == Direction::backward_filter)
    pr.weight = garbage(o.w.sizes(), o.w.dtype(),
                        layout == Layout::channels_last ? Layout::channels_last : Layout::nchw);
  return pr;
}

const Tensor& reference_for(Direction d, const Operands& o) {
  return d == Direction::forward ? o.ref_y : d == Direction::backward_data ? o.ref_dx : o.ref_dw;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  Tensor ha = a.contiguous().cpu(), hb = b.contiguous().cpu();
  return ha.sizes() == hb.sizes() && std::memcmp(ha.data_ptr(), hb.data_ptr(), ha.nbytes()) == 0;
}

struct Mode {
  DType dtype;
  bool tf32;
};
const std::vector<Mode>& modes() {
  static const std::vector<Mode> m = {{DType::f32, false},
                                      {DType::f32, true},
                                      {DType::bf16, true},
                                      {DType::f16, true},
                                      {DType::f64, false}};
  return m;
}

constexpr Direction kDirections[] = {Direction::forward, Direction::backward_data,
                                     Direction::backward_filter};

}  // namespace

TEST_CASE("conv2d CUDA: every algorithm of every direction matches the CPU fp64 reference" *
          doctest::skip(!cuda::is_available())) {
  std::map<std::string, int> runs;  // "direction/algorithm" -> problems it ran
  for (const ConvCase& c : sweep()) {
    const std::string case_name = c.name;  // std::string: doctest prints a const char* as a pointer
    CAPTURE(case_name);
    for (const Mode& m : modes()) {
      const std::string dtype_str = dtype_name(m.dtype);
      CAPTURE(dtype_str);
      CAPTURE(m.tf32);
      for (Layout layout : {Layout::nchw, Layout::channels_last, Layout::strided}) {
        const std::string layout_str = layout_name(layout);
        CAPTURE(layout_str);
        const Operands o = make_operands(c, m.dtype, layout);
        for (Direction d : kDirections) {
          const std::string direction_str = dispatch::direction_name(d);
          CAPTURE(direction_str);
          for (const std::string& name : conv2d_slot(d, DeviceType::CUDA).names()) {
            CAPTURE(name);
            ConvProblem pr = problem_for(d, o, c, layout, m.tf32);
            const auto& algo = cuda_algorithm(d, name);
            if (algo.applies && !algo.applies(pr)) continue;
            AlgoSettingsGuard forced(AlgoSettings().force(force_key(d), name));
            CHECK(conv2d_choose(pr).name == name);
            conv2d_run(pr);
            // Winograd computes in strict fp32 whatever the TF32 setting.
            const bool tf32_math = m.tf32 && name != "winograd";
            CHECK(rel_err_to_max(pr.written(), reference_for(d, o)) <=
                  tolerance(m.dtype, tf32_math));
            ++runs[std::string(dispatch::direction_name(d)) + "/" + name];
          }
        }
      }
    }
  }
  // The sweep reaches every registered CUDA algorithm in every direction it has.
  for (Direction d : kDirections)
    for (const std::string& name : conv2d_slot(d, DeviceType::CUDA).names()) {
      const std::string direction_str = dispatch::direction_name(d);
      CAPTURE(name);
      CAPTURE(direction_str);
      CHECK(runs[std::string(dispatch::direction_name(d)) + "/" + name] > 0);
    }
  CHECK(conv2d_slot(Direction::forward, DeviceType::CUDA).names().size() >= 6);
}

TEST_CASE("conv2d CUDA: deterministic algorithms are bitwise repeatable" *
          doctest::skip(!cuda::is_available())) {
  const ConvCase c = {"split-K sized", 4, 32, 19, 17, 64, 3, 3, params(1, 1, 1, 1, 1, 1, 1)};
  for (DType dtype : {DType::f32, DType::bf16}) {
    const std::string dtype_str = dtype_name(dtype);
    CAPTURE(dtype_str);
    const Operands o = make_operands(c, dtype, Layout::channels_last);
    for (Direction d : kDirections) {
      dispatch::AlgoSlot& slot = conv2d_slot(d, DeviceType::CUDA);
      for (const std::string& name : slot.names()) {
        CAPTURE(name);
        if (!slot.algorithm_deterministic(slot.find(name))) continue;
        ConvProblem first = problem_for(d, o, c, Layout::channels_last, true);
        if (cuda_algorithm(d, name).applies && !cuda_algorithm(d, name).applies(first)) continue;
        AlgoSettings settings = AlgoSettings().with_mode(AlgoMode::deterministic);
        settings.force(force_key(d), name);
        AlgoSettingsGuard guard(settings);
        ConvProblem second = problem_for(d, o, c, Layout::channels_last, true);
        conv2d_run(first);
        conv2d_run(second);
        CHECK(bitwise_equal(first.written(), second.written()));
      }
    }
  }
  // The non-deterministic split-K variant is refused in deterministic mode, never replaced.
  ConvProblem pr =
      problem_for(Direction::backward_filter, make_operands(c, DType::bf16, Layout::channels_last),
                  c, Layout::channels_last, true);
  AlgoSettings settings = AlgoSettings().with_mode(AlgoMode::deterministic);
  settings.force("conv2d.backward_filter", "implicit_gemm_atomic");
  AlgoSettingsGuard guard(settings);
  CHECK_THROWS_AS(conv2d_run(pr), Error);
}

TEST_CASE("conv2d CUDA: the op end to end in deterministic mode is bitwise repeatable" *
          doctest::skip(!cuda::is_available())) {
  dispatch::AlgoModeGuard mode(AlgoMode::deterministic);
  Generator gen(Device::cpu(), 3);
  Tensor x = randn({4, 16, 15, 15}, TensorOptions(), &gen)
                 .to(Device::cuda(), DType::bf16)
                 .contiguous(MemoryFormat::channels_last);
  Tensor w = randn({32, 16, 3, 3}, TensorOptions(), &gen).to(Device::cuda(), DType::bf16);
  Tensor b = randn({32}, TensorOptions(), &gen).to(Device::cuda(), DType::bf16);
  std::vector<Tensor> first;
  for (int run = 0; run < 2; ++run) {
    dispatch::algo_cache().clear();
    Tensor xr = x.detach().set_requires_grad(true), wr = w.detach().set_requires_grad(true),
           br = b.detach().set_requires_grad(true);
    Tensor y = conv2d(xr, wr, br, params(1, 1, 1, 1, 1, 1, 1));
    (y * y).sum().backward();
    std::vector<Tensor> results = {y.detach(), xr.grad(), wr.grad(), br.grad()};
    if (run == 0) {
      first = results;
      continue;
    }
    for (size_t i = 0; i < results.size(); ++i) CHECK(bitwise_equal(results[i], first[i]));
  }
}

TEST_CASE("conv2d CUDA: workspace limit 0 and benchmark mode" *
          doctest::skip(!cuda::is_available())) {
  const ConvCase c = {"3x3", 2, 16, 9, 9, 32, 3, 3, params(1, 1, 1, 1, 1, 1, 1)};
  const Operands o = make_operands(c, DType::f32, Layout::channels_last);
  for (Direction d : kDirections) {
    const std::string direction_str = dispatch::direction_name(d);
    CAPTURE(direction_str);
    ConvProblem pr = problem_for(d, o, c, Layout::channels_last, false);
    {
      AlgoSettingsGuard g(AlgoSettings().with_workspace_limit(0));
      const auto& chosen = conv2d_choose(pr);
      CHECK((!chosen.workspace_bytes || chosen.workspace_bytes(pr) == 0));
      conv2d_run(pr);
      CHECK(rel_err_to_max(pr.written(), reference_for(d, o)) <= tolerance(DType::f32, false));
    }
    {
      dispatch::AlgoModeGuard g(AlgoMode::benchmark);
      ConvProblem fresh = problem_for(d, o, c, Layout::channels_last, false);
      conv2d_run(fresh);
      CHECK(rel_err_to_max(fresh.written(), reference_for(d, o)) <= tolerance(DType::f32, false));
      auto choice =
          dispatch::algo_cache().peek(conv2d_slot(d, DeviceType::CUDA), conv2d_key(fresh));
      REQUIRE(choice);
      CHECK(choice->source == dispatch::ChoiceSource::benchmark);
    }
  }
}

TEST_CASE("conv2d CUDA: the op and its gradients match the CPU (NCHW and channels_last)" *
          doctest::skip(!cuda::is_available())) {
  struct Row {
    const char* name;
    Shape x, w;
    Conv2dParams p;
  };
  const std::vector<Row> rows = {
      {"3x3 padded", {2, 8, 9, 7}, {16, 8, 3, 3}, params(1, 1, 1, 1, 1, 1, 1)},
      {"stride 2, odd channels", {1, 5, 8, 8}, {7, 5, 3, 3}, params(2, 2, 1, 1, 1, 1, 1)},
      {"depthwise", {2, 16, 6, 6}, {16, 1, 3, 3}, params(1, 1, 1, 1, 1, 1, 16)},
      {"1x1", {2, 16, 5, 5}, {8, 16, 1, 1}, params(1, 1, 0, 0, 1, 1, 1)},
  };
  for (const Row& row : rows)
    for (DType dtype : {DType::f32, DType::bf16})
      for (MemoryFormat format : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
        const std::string row_name = row.name, dtype_str = dtype_name(dtype),
                          format_str = memory_format_name(format);
        CAPTURE(row_name);
        CAPTURE(dtype_str);
        CAPTURE(format_str);
        Generator gen(Device::cpu(), 7);
        Tensor x = randn(row.x, TensorOptions(), &gen).to(Device::cuda(), dtype).contiguous(format);
        Tensor w = randn(row.w, TensorOptions(), &gen).to(Device::cuda(), dtype);
        Tensor b = randn({row.w[0]}, TensorOptions(), &gen).to(Device::cuda(), dtype);
        std::vector<Tensor> gpu = {x.set_requires_grad(true), w.set_requires_grad(true),
                                   b.set_requires_grad(true)};
        std::vector<Tensor> cpu;
        for (const Tensor& t : gpu)
          cpu.push_back(t.detach().to(Device::cpu(), DType::f64).set_requires_grad(true));
        Tensor y_gpu = conv2d(gpu[0], gpu[1], gpu[2], row.p);
        Tensor y_cpu = conv2d(cpu[0], cpu[1], cpu[2], row.p);
        CHECK(y_gpu.device() == Device::cuda());
        CHECK(rel_err_to_max(y_gpu, y_cpu) <= tolerance(dtype, true));
        Tensor seed = rand(y_cpu.sizes(), TensorOptions(DType::f64), &gen);
        (y_cpu * seed).sum().backward();
        (y_gpu * seed.to(Device::cuda(), dtype)).sum().backward();
        for (size_t i = 0; i < gpu.size(); ++i) {
          CAPTURE(i);
          REQUIRE(gpu[i].grad().defined());
          CHECK(rel_err_to_max(gpu[i].grad(), cpu[i].grad()) <= 2 * tolerance(dtype, true));
        }
      }
}

TEST_CASE("conv2d_bias_relu CUDA: fused epilogue and separate pass match the CPU composite" *
          doctest::skip(!cuda::is_available())) {
  struct Row {
    const char* name;
    Shape x, w;
    Conv2dParams p;
    DType dtype;
    MemoryFormat format;
    const char* forward_algorithm;  // forced for the convolution
  };
  const std::vector<Row> rows = {
      {"implicit gemm epilogue, bf16 NHWC",
       {2, 16, 9, 9},
       {24, 16, 3, 3},
       params(1, 1, 1, 1, 1, 1, 1),
       DType::bf16,
       MemoryFormat::channels_last,
       "implicit_gemm"},
      {"implicit gemm epilogue, tf32 NCHW (staged)",
       {1, 8, 7, 6},
       {8, 8, 3, 3},
       params(2, 1, 1, 1, 1, 1, 1),
       DType::f32,
       MemoryFormat::contiguous,
       "implicit_gemm"},
      {"separate pass after im2col_gemm",
       {2, 6, 7, 7},
       {4, 3, 3, 3},
       params(1, 1, 1, 1, 1, 1, 2),
       DType::f32,
       MemoryFormat::contiguous,
       "im2col_gemm"},
      {"separate pass after direct, f64",
       {1, 3, 6, 5},
       {5, 3, 3, 3},
       params(1, 1, 0, 1, 1, 1, 1),
       DType::f64,
       MemoryFormat::channels_last,
       "direct"},
  };
  const bool saved_tf32 = conv_allow_tf32();
  for (const Row& row : rows)
    for (bool with_bias : {true, false}) {
      const std::string row_name = row.name;
      CAPTURE(row_name);
      CAPTURE(with_bias);
      set_conv_allow_tf32(row.dtype == DType::f32);
      Generator gen(Device::cpu(), 21);
      Tensor x =
          randn(row.x, TensorOptions(), &gen).to(Device::cuda(), row.dtype).contiguous(row.format);
      Tensor w = randn(row.w, TensorOptions(), &gen).to(Device::cuda(), row.dtype);
      Tensor b = with_bias ? randn({row.w[0]}, TensorOptions(), &gen).to(Device::cuda(), row.dtype)
                           : Tensor();
      x.set_requires_grad(true);
      w.set_requires_grad(true);
      if (with_bias) b.set_requires_grad(true);
      // Built whole (a push_back onto the two-element list trips GCC 12's -Warray-bounds).
      const std::vector<Tensor> gpu =
          with_bias ? std::vector<Tensor>{x, w, b} : std::vector<Tensor>{x, w};
      std::vector<Tensor> cpu;
      for (const Tensor& t : gpu)
        cpu.push_back(t.detach().to(Device::cpu(), DType::f64).set_requires_grad(true));
      // The CPU composite first: the forced algorithm below exists on CUDA only.
      Tensor y_cpu = conv2d_bias_relu(cpu[0], cpu[1], with_bias ? cpu[2] : Tensor(), row.p);
      Tensor seed = rand(y_cpu.sizes(), TensorOptions(DType::f64), &gen);
      (y_cpu * seed).sum().backward();
      Tensor y_gpu;
      {
        AlgoSettingsGuard forced(AlgoSettings().force("conv2d.forward", row.forward_algorithm));
        y_gpu = conv2d_bias_relu(gpu[0], gpu[1], with_bias ? gpu[2] : Tensor(), row.p);
        // The row reaches the intended path (forced mode throws when the algorithm does not apply).
        CHECK(conv2d_choose(ConvProblem{Direction::forward, gpu[0].detach(), gpu[1].detach(),
                                        y_gpu.detach(), row.p, row.dtype == DType::f32})
                  .name == row.forward_algorithm);
      }
      CHECK(y_gpu.suggest_memory_format() == x.suggest_memory_format());
      CHECK(rel_err_to_max(y_gpu, y_cpu) <= tolerance(row.dtype, row.dtype == DType::f32));
      CHECK(ember::min(y_gpu.cpu().to(DType::f64)).item() >= 0.0);
      (y_gpu * seed.to(Device::cuda(), row.dtype)).sum().backward();
      for (size_t i = 0; i < gpu.size(); ++i) {
        CAPTURE(i);
        REQUIRE(gpu[i].grad().defined());
        CHECK(rel_err_to_max(gpu[i].grad(), cpu[i].grad()) <=
              2 * tolerance(row.dtype, row.dtype == DType::f32));
      }
    }
  set_conv_allow_tf32(saved_tf32);
}

// The forward of conv2d_bias_relu, and of conv2d with a bias, asks the algorithm cache once: the
// chosen algorithm runs with the epilogue (in its kernel, or followed by the epilogue pass) and
// with the workspace the cache allocated for it.
TEST_CASE("conv2d_bias_relu CUDA: the forward with its epilogue is one algorithm-cache lookup" *
          doctest::skip(!cuda::is_available())) {
  dispatch::AlgoModeGuard heuristic(AlgoMode::heuristic);
  for (DType dtype : {DType::bf16, DType::f64}) {
    CAPTURE(dtype_name(dtype));
    Generator gen(Device::cpu(), 5);
    Tensor x = randn({2, 16, 9, 9}, TensorOptions(), &gen)
                   .to(Device::cuda(), dtype)
                   .contiguous(MemoryFormat::channels_last);
    Tensor w = randn({24, 16, 3, 3}, TensorOptions(), &gen).to(Device::cuda(), dtype);
    Tensor b = randn({24}, TensorOptions(), &gen).to(Device::cuda(), dtype);
    const Conv2dParams p = params(1, 1, 1, 1, 1, 1, 1);
    conv2d_bias_relu(x, w, b, p);  // the choice is made and cached
    dispatch::AlgoCache& cache = dispatch::algo_cache();
    const dispatch::AlgoCacheStats before = cache.stats();
    conv2d_bias_relu(x, w, b, p);
    conv2d(x, w, b, p);
    const dispatch::AlgoCacheStats after = cache.stats();
    CHECK(after.hits + after.misses - before.hits - before.misses == 2);
  }
}

// One rule (conv_result_memory_format, PyTorch's) for the output and the input and weight
// gradients of conv2d, conv2d_bias_relu and conv_transpose2d: channels_last when the input or the
// weight is channels_last.
TEST_CASE(
    "conv2d, conv2d_bias_relu, conv_transpose2d CUDA: outputs and gradients share one "
    "memory-format rule" *
    doctest::skip(!cuda::is_available())) {
  struct Layouts {
    Layout x, w;
    bool channels_last;
  };
  using ConvOp = Tensor (*)(const Tensor& x, const Tensor& w, const Tensor& b);
  struct Op {
    const char* name;
    Shape w;  // conv: [K, C, R, S]; transposed: [Cin, Cout, R, S]
    int64_t out_channels;
    ConvOp run;
  };
  const Op ops[] = {
      {"conv2d",
       {16, 8, 3, 3},
       16,
       [](const Tensor& x, const Tensor& w, const Tensor& b) {
         return conv2d(x, w, b, params(1, 1, 1, 1, 1, 1, 1));
       }},
      {"conv2d_bias_relu",
       {16, 8, 3, 3},
       16,
       [](const Tensor& x, const Tensor& w, const Tensor& b) {
         return conv2d_bias_relu(x, w, b, params(1, 1, 1, 1, 1, 1, 1));
       }},
      {"conv_transpose2d",
       {8, 6, 3, 3},
       6,
       [](const Tensor& x, const Tensor& w, const Tensor& b) {
         ConvTranspose2dParams p;
         p.stride = {2, 2};
         p.padding = {1, 1};
         p.output_padding = {1, 0};
         return conv_transpose2d(x, w, b, p);
       }},
  };
  for (const Layouts& l : {Layouts{Layout::channels_last, Layout::channels_last, true},
                           Layouts{Layout::channels_last, Layout::nchw, true},
                           Layouts{Layout::nchw, Layout::channels_last, true},
                           Layouts{Layout::nchw, Layout::nchw, false}}) {
    const std::string x_str = layout_name(l.x), w_str = layout_name(l.w);
    CAPTURE(x_str);
    CAPTURE(w_str);
    const MemoryFormat expected =
        l.channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous;
    for (const Op& op : ops) {
      const std::string op_str = op.name;
      CAPTURE(op_str);
      for (DType dtype : {DType::f32, DType::bf16}) {
        const std::string dtype_str = dtype_name(dtype);
        CAPTURE(dtype_str);
        Tensor x = random_tensor({2, 8, 9, 7}, dtype, Device::cuda(), l.x, 51);
        Tensor w = random_tensor(op.w, dtype, Device::cuda(), l.w, 52);
        Tensor b = random_tensor({op.out_channels}, dtype, Device::cuda(), Layout::nchw, 53);
        CHECK(conv_result_memory_format(x, w) == expected);
        x.set_requires_grad(true);
        w.set_requires_grad(true);
        Tensor y = op.run(x, w, b);
        CHECK(y.is_contiguous(expected));
        Tensor seed = random_tensor(y.sizes(), dtype, Device::cuda(), Layout::nchw, 54);
        // autograd::grad hands back the op's own gradients (.grad would follow each leaf's layout).
        const std::vector<Tensor> grads = autograd::grad({y}, {x, w}, {seed});
        CHECK(grads[0].is_contiguous(expected));
        CHECK(grads[1].is_contiguous(expected));
        // The values match the CPU in fp64, whatever the layouts.
        Tensor xc = x.detach().to(Device::cpu(), DType::f64).set_requires_grad(true);
        Tensor wc = w.detach().to(Device::cpu(), DType::f64).set_requires_grad(true);
        Tensor yc = op.run(xc, wc, b.to(Device::cpu(), DType::f64));
        const std::vector<Tensor> grads_cpu =
            autograd::grad({yc}, {xc, wc}, {seed.to(Device::cpu(), DType::f64)});
        CHECK(rel_err_to_max(y, yc) <= tolerance(dtype, true));
        CHECK(rel_err_to_max(grads[0], grads_cpu[0]) <= 2 * tolerance(dtype, true));
        CHECK(rel_err_to_max(grads[1], grads_cpu[1]) <= 2 * tolerance(dtype, true));
      }
    }
  }
}

TEST_CASE("conv2d CUDA: device and dtype errors name the tensors" *
          doctest::skip(!cuda::is_available())) {
  Tensor x = zeros({1, 3, 6, 6}, TensorOptions(Device::cuda()));
  Tensor w = zeros({2, 3, 3, 3}, TensorOptions(Device::cuda()));
  CHECK_THROWS_WITH_AS(conv2d(x, w, zeros({2})), doctest::Contains("bias is on cpu"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, w.to(DType::bf16)), doctest::Contains("input has dtype float32"),
                       Error);
  CHECK_THROWS_WITH_AS(conv2d_bias_relu(x, w.cpu()), doctest::Contains("weight is on cpu"), Error);
}

// The heuristic (no timing) sends the bf16 3x3 backward-filter of ResNet's long reductions to the
// halo wgrad kernel (the fastest there) and leaves the 7x7 layer to the others.
TEST_CASE("conv2d CUDA: the heuristic ranks implicit_gemm_wgrad_halo first on long reductions" *
          doctest::skip(!cuda::is_available())) {
  dispatch::AlgoModeGuard heuristic(AlgoMode::heuristic);
  auto pick = [](int64_t n, int64_t c, int64_t hw) {
    const Device gpu = Device::cuda();
    Tensor x = empty({n, c, hw, hw}, DType::bf16, gpu, MemoryFormat::channels_last);
    Tensor w = empty({c, c, 3, 3}, DType::bf16, gpu, MemoryFormat::channels_last);
    Tensor dy = empty({n, c, hw, hw}, DType::bf16, gpu, MemoryFormat::channels_last);
    ConvProblem pr{Direction::backward_filter, x, w, dy, params(1, 1, 1, 1, 1, 1, 1), true};
    return conv2d_choose(pr).name;
  };
  CHECK(pick(64, 64, 56).rfind("implicit_gemm_wgrad_halo", 0) == 0);
  CHECK(pick(64, 128, 28).rfind("implicit_gemm_wgrad_halo", 0) == 0);
  CHECK(pick(64, 512, 7).rfind("implicit_gemm_wgrad_halo", 0) != 0);
}

// The heuristic's im2col_gemm estimate on NCHW activations (one GEMM per image with P*Q columns):
// at 7x7 (49 columns) cuBLAS runs it far below implicit_gemm's speed in fp32, so the heuristic
// must not rank it first there; at 28x28 (784 columns) the estimate is unchanged.
TEST_CASE("conv2d CUDA: the heuristic does not send small NCHW fp32 images to im2col_gemm" *
          doctest::skip(!cuda::is_available())) {
  dispatch::AlgoModeGuard heuristic(AlgoMode::heuristic);
  const Device gpu = Device::cuda();
  for (Direction d : {Direction::forward, Direction::backward_data}) {
    Tensor x = empty({64, 512, 7, 7}, DType::f32, gpu);
    Tensor w = empty({512, 512, 3, 3}, DType::f32, gpu);
    Tensor dy = empty({64, 512, 7, 7}, DType::f32, gpu);
    ConvProblem pr{d, x, w, dy, params(1, 1, 1, 1, 1, 1, 1), true};
    CHECK(conv2d_choose(pr).name != "im2col_gemm");
  }
}

// The heuristic's picks on the CIFAR ResNet-18 layers (batch 128, bf16 channels_last) where
// the GEMM algorithms run faster than the implicit-GEMM kernels that the model ranked first before
// its calibration (cuda_kernels/conv/im2col.cu, implicit_gemm_wgrad.cu).
TEST_CASE("conv2d CUDA: the heuristic sends small bf16 images and 1x1 stride-2 wgrad to GEMMs" *
          doctest::skip(!cuda::is_available())) {
  dispatch::AlgoModeGuard heuristic(AlgoMode::heuristic);
  const Device gpu = Device::cuda();
  const MemoryFormat cl = MemoryFormat::channels_last;
  auto pick = [&](Direction d, int64_t c, int64_t hw, int64_t k, int64_t r, int64_t stride) {
    const int64_t out = (hw + 2 * (r / 2) - r) / stride + 1;
    Tensor x = empty({128, c, hw, hw}, DType::bf16, gpu, cl);
    Tensor w = empty({k, c, r, r}, DType::bf16, gpu, cl);
    Tensor dy = empty({128, k, out, out}, DType::bf16, gpu, cl);
    const int64_t pad = r / 2;
    ConvProblem pr{d, x, w, dy, params(stride, stride, pad, pad, 1, 1, 1), true};
    return conv2d_choose(pr).name;
  };
  CHECK(pick(Direction::forward, 512, 4, 512, 3, 1) == "im2col_gemm");
  CHECK(pick(Direction::backward_filter, 256, 8, 256, 3, 1) == "im2col_gemm");
  CHECK(pick(Direction::backward_filter, 64, 32, 128, 1, 2) == "gemm_1x1");
  // Long reductions keep the halo wgrad kernel (the calibration scales it with the others).
  CHECK(pick(Direction::backward_filter, 64, 32, 64, 3, 1).rfind("implicit_gemm_wgrad_halo", 0) ==
        0);
}

// The implicit-GEMM kernels on grids large enough for their big tiles and long pipelines, the
// auto-picking algorithms and the large fixed tiles (mma.sync and wgmma). Without wgmma, on
// 132 SMs, the fprop tile heuristic picks: 256x128 for the forward of "C8 K128" (M = 29696),
// the stride-1 backward_data of "C128 K8" (a forward convolution of dy with the flipped filter)
// and the strided backward_data of "C128 K16 stride 2" (four phases); 128x64 for the
// backward_data of "C8 K128" and the forward of "C128 K8"; 128x128 for both directions of "C72
// K128" (bf16: two channel blocks per tap, the second part zero). backward_filter runs 128x128
// tiles over many split-K slices ("C8 K128": one partial column tile) and over columns spanning
// taps with dilation 2; 64x128 tiles for "C128 K8". (The sweep's "1x1 padding 1" makes the
// stride-1 backward_data's forward padding dil*(R-1) - pad negative.)
TEST_CASE("conv2d CUDA: implicit_gemm large tiles and long pipelines match the CPU fp64 reference" *
          doctest::skip(!cuda::is_available())) {
  const std::vector<ConvCase> cases = {
      {"C8 K128 2x116x128", 2, 8, 116, 128, 128, 3, 3, params(1, 1, 1, 1, 1, 1, 1)},
      {"C128 K8 2x116x128", 2, 128, 116, 128, 8, 3, 3, params(1, 1, 1, 1, 1, 1, 1)},
      {"C128 K16 stride 2", 2, 128, 116, 128, 16, 3, 3, params(2, 2, 1, 1, 1, 1, 1)},
      {"C72 K128 100x100", 1, 72, 100, 100, 128, 3, 3, params(1, 1, 1, 1, 1, 1, 1)},
      {"C128 K128 dilation 2", 2, 128, 24, 24, 128, 3, 3, params(1, 1, 2, 2, 2, 2, 1)},
  };
  for (const ConvCase& c : cases) {
    const std::string case_name = c.name;
    CAPTURE(case_name);
    for (const Mode m : {Mode{DType::bf16, true}, Mode{DType::f32, true}}) {
      const std::string dtype_str = dtype_name(m.dtype);
      CAPTURE(dtype_str);
      const Operands o = make_operands(c, m.dtype, Layout::channels_last);
      for (Direction d : kDirections) {
        const std::string direction_str = dispatch::direction_name(d);
        CAPTURE(direction_str);
        for (const char* algorithm :
             {"implicit_gemm", "implicit_gemm_atomic", "implicit_gemm_256x128",
              "implicit_gemm_128x128", "implicit_gemm_wgmma_256x128", "implicit_gemm_wgmma_128x128",
              "implicit_gemm_wgmma_128x64", "implicit_gemm_wgmma_ws_256x128",
              "implicit_gemm_wgmma_ws_128x128", "implicit_gemm_halo"}) {
          const std::string name = algorithm;
          if (conv2d_slot(d, DeviceType::CUDA).find(name) < 0) continue;
          CAPTURE(name);
          ConvProblem pr = problem_for(d, o, c, Layout::channels_last, m.tf32);
          // The auto-picking algorithms apply to every case; a fixed tile to the vector-path
          // ones, the wgmma tiles only where the build and the GPU have wgmma, the halo kernel
          // to 3x3 stride-1 'same' layers reducing over multiples of 64 channels.
          const bool fixed_tile = name != "implicit_gemm" && name != "implicit_gemm_atomic";
          if (fixed_tile && !cuda_algorithm(d, name).applies(pr)) continue;
          REQUIRE(cuda_algorithm(d, name).applies(pr));
          AlgoSettingsGuard forced(AlgoSettings().force(force_key(d), name));
          conv2d_run(pr);
          CHECK(rel_err_to_max(pr.written(), reference_for(d, o)) <= tolerance(m.dtype, m.tf32));
        }
      }
    }
  }
}
