// CUDA kernels vs the CPU reference kernels, called straight through the kernel tables of
// kernel_interface/ (no op-level promotion or autograd): elementwise (unary, binary, where, copy)
// over awkward sizes (1, 7, 1023, 4097, 2^20 + 3 elements) and layouts (transposed, broadcast rows,
// broadcast scalars, views misaligned by one element, transposed outputs); reductions over
// [outer, reduce, inner] shapes from reduce = 1 to rows of 2^21; GEMM with transposes, padded
// leading dims, batches, alpha/beta and k = 0; the index kernels, and their device-side
// out-of-range error. Inputs are multiples of a power of two, so sums and products are exact in
// every dtype and most results must match bit for bit; tolerances cover transcendental functions
// and the final rounding. Where the CPU kernel rejects a dtype (not_supported), the CUDA kernel
// must reject it too. Every case skips without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ember/dispatch/algo_cache.h"
#include "ember/kernel_interface/elementwise.h"
#include "ember/kernel_interface/gemm.h"
#include "ember/kernel_interface/indexing.h"
#include "ember/kernel_interface/reduce.h"
#include "ember/ops/ops.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "ember/tensor/runtime/device_errors.h"

using namespace ember;

namespace {

const Device kGpu = Device::cuda(0);
const Device kCpu = Device::cpu();
constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                             DType::i32, DType::i64, DType::u8,  DType::boolean};
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Range {
  double lo = -4, hi = 4;
  double quantum = 1.0 / 32;  // floating values are multiples of it (0: not rounded)
  bool nonzero = false;       // replace zeros by 1 (divisors)
  bool specials = false;      // NaN, inf, -inf, -0 at four spread positions (floating dtypes)
};

// Deterministic values of `dtype`'s kind: floating ones rounded to `quantum`, integers in range
// (uint8 clamped to [0, 255]), bool 0/1.
std::vector<double> make_values(int64_t n, DType dtype, Range r, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(r.lo, r.hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) {
    const double u = dist(rng);
    if (dtype == DType::boolean)
      x = u > (r.lo + r.hi) / 2 ? 1 : 0;
    else if (is_floating(dtype))
      x = r.quantum > 0 ? std::round(u / r.quantum) * r.quantum : u;
    else if (dtype == DType::u8)
      x = std::min(255.0, std::max(0.0, std::round(u)));
    else
      x = std::round(u);
    if (r.nonzero && x == 0) x = 1;
  }
  if (r.specials && is_floating(dtype) && n >= 4) {
    const double specials[] = {kNaN, kInf, -kInf, -0.0};
    for (int i = 0; i < 4; ++i) v[size_t(i * (n / 4))] = specials[i];
  }
  return v;
}

// The same values on the CPU and the GPU, as a view `view` of a dense base.
struct Pair {
  Tensor cpu, gpu;
};
using ViewFn = std::function<Tensor(const Tensor&)>;
Pair make_pair(const Shape& base, DType dtype, Range r, uint32_t seed, const ViewFn& view = {}) {
  Tensor host =
      from_vector(make_values(shape_numel(base), dtype, r, seed), base, TensorOptions(dtype));
  Tensor dev = host.to(kGpu);
  if (!view) return {host, dev};
  return {view(host), view(dev)};
}

// How a logical [rows, cols] operand is laid out in memory.
enum class Layout { contiguous, transposed, misaligned, broadcast_row, broadcast_scalar };
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous:
      return "contiguous";
    case Layout::transposed:
      return "transposed";
    case Layout::misaligned:
      return "misaligned (offset 1)";
    case Layout::broadcast_row:
      return "broadcast row";
    case Layout::broadcast_scalar:
      return "broadcast scalar";
  }
  return "?";
}
Pair make_operand(Layout l, int64_t rows, int64_t cols, DType dtype, Range r, uint32_t seed) {
  switch (l) {
    case Layout::contiguous:
      return make_pair({rows, cols}, dtype, r, seed);
    case Layout::transposed:
      return make_pair({cols, rows}, dtype, r, seed, [](const Tensor& t) { return t.t(); });
    case Layout::misaligned:
      return make_pair({rows * cols + 1}, dtype, r, seed, [=](const Tensor& t) {
        return t.narrow(0, 1, rows * cols).view({rows, cols});
      });
    case Layout::broadcast_row:
      return make_pair({1, cols}, dtype, r, seed);
    case Layout::broadcast_scalar:
      return make_pair({}, dtype, r, seed);
  }
  return {};
}
Tensor make_output(Device dev, int64_t rows, int64_t cols, DType dtype, bool transposed) {
  return transposed ? empty({cols, rows}, dtype, dev).t() : empty({rows, cols}, dtype, dev);
}

// Relative tolerance of one result rounded to `t` (a couple of ulps for the CUDA math library).
double tolerance(DType t) {
  switch (t) {
    case DType::f64:
      return 1e-12;
    case DType::f32:
      return 4e-6;
    case DType::f16:
      return 2e-3;
    case DType::bf16:
      return 1.6e-2;
    default:
      return 0;
  }
}

// Every element equal within atol + rtol * |expected| (NaN matches NaN); reports the first miss.
void check_close(const Tensor& gpu, const Tensor& cpu, double rtol, double atol = 0) {
  REQUIRE(gpu.device() == kGpu);
  REQUIRE(gpu.sizes() == cpu.sizes());
  REQUIRE(gpu.dtype() == cpu.dtype());
  const std::vector<double> got = gpu.cpu().to_vector(), want = cpu.to_vector();
  int64_t misses = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    const bool same =
        (std::isnan(g) && std::isnan(w)) || g == w || std::abs(g - w) <= atol + rtol * std::abs(w);
    if (!same && misses++ == 0) first = int64_t(i);
  }
  CHECK_MESSAGE(misses == 0, misses, " of ", got.size(), " elements differ; first at flat index ",
                first, ": cuda ", first >= 0 ? got[size_t(first)] : 0.0, " vs cpu ",
                first >= 0 ? want[size_t(first)] : 0.0);
}

// Runs `run(device)` on the CPU; if the CPU kernel rejects the dtype, the CUDA kernel must too and
// nullopt is returned, else the CPU result.
std::optional<Tensor> cpu_reference(const std::function<Tensor(Device)>& run) {
  try {
    return run(kCpu);
  } catch (const Error& e) {
    if (e.status() != Status::not_supported) throw;
    CHECK_THROWS_AS(run(kGpu), Error);
    return std::nullopt;
  }
}

void compare_on_both(const std::function<Tensor(Device)>& run, double rtol, double atol = 0) {
  if (std::optional<Tensor> want = cpu_reference(run)) check_close(run(kGpu), *want, rtol, atol);
}

// ---- elementwise ------------------------------------------------------------------------------

struct UnaryCase {
  UnaryOp op;
  const char* name;
  Range range;
  UnaryParams params;
  bool writes_bool = false;
};
std::vector<UnaryCase> unary_cases() {
  const Range any{-4, 4}, positive{0.125, 4}, special{-4, 4, 1.0 / 32, false, true};
  return {
      {UnaryOp::neg, "neg", any, {}},
      {UnaryOp::exp, "exp", any, {}},
      {UnaryOp::log, "log", positive, {}},
      {UnaryOp::sqrt, "sqrt", {0, 4}, {}},
      {UnaryOp::rsqrt, "rsqrt", positive, {}},
      {UnaryOp::abs, "abs", special, {}},
      {UnaryOp::tanh, "tanh", any, {}},
      {UnaryOp::sigmoid, "sigmoid", special, {}},
      {UnaryOp::relu, "relu", special, {}},
      {UnaryOp::sin, "sin", any, {}},
      {UnaryOp::cos, "cos", any, {}},
      {UnaryOp::sign, "sign", special, {}},
      {UnaryOp::reciprocal, "reciprocal", any, {}},
      {UnaryOp::square, "square", any, {}},
      {UnaryOp::log1p, "log1p", {-0.5, 4}, {}},
      {UnaryOp::expm1, "expm1", any, {}},
      {UnaryOp::floor, "floor", {-4, 4, 1.0 / 4}, {}},
      {UnaryOp::ceil, "ceil", {-4, 4, 1.0 / 4}, {}},
      {UnaryOp::round, "round (half to even)", {-4, 4, 1.0 / 4}, {}},
      {UnaryOp::logical_not, "logical_not", any, {}, true},
      {UnaryOp::isnan, "isnan", special, {}, true},
      {UnaryOp::isfinite, "isfinite", special, {}, true},
      {UnaryOp::clamp, "clamp [-1, 2]", special, {-1, 2}},
      {UnaryOp::clamp, "clamp max only", any, {kNaN, 1.5}},
      {UnaryOp::pow_scalar, "pow 2", any, {2, 0}},
      {UnaryOp::pow_scalar, "pow 2.5", {0, 4}, {2.5, 0}},
      {UnaryOp::pow_scalar, "pow -0.5", positive, {-0.5, 0}},
      {UnaryOp::add_scalar, "add 3", any, {3, 0}},
      {UnaryOp::mul_scalar, "mul -2", any, {-2, 0}},
      {UnaryOp::rsub_scalar, "rsub 1", any, {1, 0}},
      {UnaryOp::rdiv_scalar, "rdiv 1", positive, {1, 0}},
  };
}

Tensor run_unary(Device dev, const Tensor& in, const Tensor& out, UnaryOp op, UnaryParams p) {
  ElementwiseIter it = make_elementwise_iter("test_unary", out, {in});
  unary_kernel().get(dev.type, in.dtype())(it, op, p);
  return out;
}

TEST_CASE("unary kernels match the CPU for every op, dtype and layout" *
          doctest::skip(!cuda::is_available())) {
  const int64_t rows = 33, cols = 65;  // 2145 elements: whole 16-byte vectors plus a tail
  for (DType dtype : kDTypes) {
    for (const UnaryCase& c : unary_cases()) {
      for (Layout in_layout : {Layout::contiguous, Layout::transposed, Layout::misaligned}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(c.name);
        CAPTURE(layout_name(in_layout));
        const bool out_transposed = in_layout == Layout::misaligned;
        const Pair in = make_operand(in_layout, rows, cols, dtype, c.range, 11);
        const DType out_dtype = c.writes_bool ? DType::boolean : dtype;
        compare_on_both(
            [&](Device d) {
              return run_unary(d, d.is_cuda() ? in.gpu : in.cpu,
                               make_output(d, rows, cols, out_dtype, out_transposed), c.op,
                               c.params);
            },
            tolerance(out_dtype));
      }
    }
  }
}

TEST_CASE("fill writes every element for awkward sizes and layouts" *
          doctest::skip(!cuda::is_available())) {
  for (DType dtype : kDTypes) {
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(1023), int64_t(4097), int64_t(1 << 20) + 3}) {
      for (bool misaligned : {false, true}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(n);
        CAPTURE(misaligned);
        compare_on_both(
            [&](Device d) {
              Tensor base = empty({n + 1}, dtype, d);
              Tensor out = base.narrow(0, misaligned ? 1 : 0, n);
              ElementwiseIter it = make_elementwise_iter("test_fill", out, {});
              unary_kernel().get(d.type, dtype)(it, UnaryOp::fill, {1.5, 0});
              return out;
            },
            0);
      }
    }
  }
}

struct BinaryCase {
  BinaryOp op;
  const char* name;
  Range a, b;
  double alpha = 1;
  bool floating_only = false;  // the CPU has integer variants the CUDA backend leaves to ops/
};
std::vector<BinaryCase> binary_cases() {
  const Range any{-4, 4}, special{-4, 4, 1.0 / 32, false, true}, divisor{-4, 4, 1.0 / 32, true};
  return {
      {BinaryOp::add, "add alpha 2", special, any, 2},
      {BinaryOp::sub, "sub", any, any},
      {BinaryOp::mul, "mul", special, any},
      {BinaryOp::div, "div", any, divisor},
      {BinaryOp::pow, "pow", {0.125, 4}, {-2, 2}, 1, true},
      {BinaryOp::maximum, "maximum", special, any},
      {BinaryOp::minimum, "minimum", any, special},
      {BinaryOp::atan2, "atan2", any, any},
      {BinaryOp::remainder, "remainder", {-40, 40, 1.0 / 8}, divisor},
      {BinaryOp::eq, "eq", {-2, 2, 1.0 / 2}, {-2, 2, 1.0 / 2}},
      {BinaryOp::ne, "ne", {-2, 2, 1.0 / 2}, {-2, 2, 1.0 / 2}},
      {BinaryOp::lt, "lt", special, {-2, 2, 1.0 / 2}},
      {BinaryOp::le, "le", {-2, 2, 1.0 / 2}, {-2, 2, 1.0 / 2}},
      {BinaryOp::gt, "gt", {-2, 2, 1.0 / 2}, special},
      {BinaryOp::ge, "ge", {-2, 2, 1.0 / 2}, {-2, 2, 1.0 / 2}},
      {BinaryOp::logical_and, "logical_and", {-1, 1, 1}, {-1, 1, 1}},
      {BinaryOp::logical_or, "logical_or", {-1, 1, 1}, {-1, 1, 1}},
      {BinaryOp::relu_backward, "relu_backward", any, any},
      {BinaryOp::sigmoid_backward, "sigmoid_backward", any, {0, 1}},
      {BinaryOp::tanh_backward, "tanh_backward", any, {-1, 1}},
  };
}

Tensor run_binary(Device dev, const Tensor& a, const Tensor& b, const Tensor& out, BinaryOp op,
                  double alpha) {
  ElementwiseIter it = make_elementwise_iter("test_binary", out, {a, b});
  binary_kernel().get(dev.type, a.dtype())(it, op, alpha);
  return out;
}

void compare_binary(const BinaryCase& c, DType dtype, Layout la, Layout lb, bool out_transposed,
                    int64_t rows, int64_t cols) {
  CAPTURE(layout_name(la));
  CAPTURE(layout_name(lb));
  CAPTURE(out_transposed);
  const Pair a = make_operand(la, rows, cols, dtype, c.a, 21);
  const Pair b = make_operand(lb, rows, cols, dtype, c.b, 22);
  const DType out_dtype = binary_op_writes_bool(c.op) ? DType::boolean : dtype;
  compare_on_both(
      [&](Device d) {
        const bool g = d.is_cuda();
        return run_binary(d, g ? a.gpu : a.cpu, g ? b.gpu : b.cpu,
                          make_output(d, rows, cols, out_dtype, out_transposed), c.op, c.alpha);
      },
      tolerance(out_dtype));
}

TEST_CASE("binary kernels match the CPU for every op, dtype and layout" *
          doctest::skip(!cuda::is_available())) {
  for (DType dtype : kDTypes) {
    for (const BinaryCase& c : binary_cases()) {
      if (c.floating_only && !is_floating(dtype)) continue;
      CAPTURE(dtype_name(dtype));
      CAPTURE(c.name);
      compare_binary(c, dtype, Layout::contiguous, Layout::contiguous, false, 33, 65);
      compare_binary(c, dtype, Layout::transposed, Layout::broadcast_row, false, 33, 65);
      compare_binary(c, dtype, Layout::misaligned, Layout::broadcast_scalar, true, 33, 65);
      compare_binary(c, dtype, Layout::broadcast_scalar, Layout::contiguous, false, 33, 65);
    }
  }
}

TEST_CASE("binary add over awkward sizes: vector tails, misaligned views, broadcasts" *
          doctest::skip(!cuda::is_available())) {
  const BinaryCase add{BinaryOp::add, "add", {-4, 4}, {-4, 4}, 1};
  const BinaryCase lt{BinaryOp::lt, "lt", {-2, 2, 1.0 / 2}, {-2, 2, 1.0 / 2}};
  for (DType dtype : kDTypes) {
    const BinaryCase& c = dtype == DType::boolean ? lt : add;
    CAPTURE(dtype_name(dtype));
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(1023), int64_t(4097), int64_t(1 << 20) + 3}) {
      CAPTURE(n);
      compare_binary(c, dtype, Layout::contiguous, Layout::contiguous, false, 1, n);
      compare_binary(c, dtype, Layout::misaligned, Layout::contiguous, false, 1, n);
      compare_binary(c, dtype, Layout::contiguous, Layout::misaligned, false, 1, n);
      compare_binary(c, dtype, Layout::contiguous, Layout::broadcast_scalar, false, 1, n);
    }
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{7, 13}, {129, 257}, {1031, 1029}}) {
      CAPTURE(rows);
      compare_binary(c, dtype, Layout::transposed, Layout::contiguous, false, rows, cols);
      compare_binary(c, dtype, Layout::contiguous, Layout::broadcast_row, true, rows, cols);
    }
  }
}

TEST_CASE("where matches the CPU with broadcast and strided operands" *
          doctest::skip(!cuda::is_available())) {
  for (DType dtype : kDTypes) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {1, 4097}, {33, 65}}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(cols);
      const Pair cond = make_operand(Layout::broadcast_row, rows, cols, DType::boolean, {}, 31);
      const Pair a = make_operand(Layout::transposed, rows, cols, dtype, {}, 32);
      const Pair b = make_operand(Layout::broadcast_scalar, rows, cols, dtype, {}, 33);
      compare_on_both(
          [&](Device d) {
            const bool g = d.is_cuda();
            Tensor out = make_output(d, rows, cols, dtype, false);
            ElementwiseIter it = make_elementwise_iter(
                "test_where", out, {g ? cond.gpu : cond.cpu, g ? a.gpu : a.cpu, g ? b.gpu : b.cpu});
            where_kernel().get(d.type, dtype)(it);
            return out;
          },
          0);
    }
  }
}

TEST_CASE("copy converts between every pair of dtypes and layouts like the CPU" *
          doctest::skip(!cuda::is_available())) {
  for (DType to : kDTypes) {
    for (DType from : kDTypes) {
      CAPTURE(dtype_name(from));
      CAPTURE(dtype_name(to));
      // NaN/inf to an integer is undefined on the CPU: specials only towards floating and bool.
      Range r{-300, 300, 0};  // unrounded: exercises the rounding of every conversion
      r.specials = is_floating(to) || to == DType::boolean;
      auto run_copy = [&](Layout l, int64_t rows, int64_t cols, bool out_transposed) {
        CAPTURE(layout_name(l));
        CAPTURE(cols);
        const Pair in = make_operand(l, rows, cols, from, r, 41);
        compare_on_both(
            [&](Device d) {
              Tensor out = make_output(d, rows, cols, to, out_transposed);
              ElementwiseIter it =
                  make_elementwise_iter("test_copy", out, {d.is_cuda() ? in.gpu : in.cpu});
              copy_kernel().get(d.type, to)(it);
              return out;
            },
            0);
      };
      run_copy(Layout::contiguous, 1, 4097, false);
      run_copy(Layout::misaligned, 1, 1023, false);
      run_copy(Layout::transposed, 33, 65, false);
      run_copy(Layout::contiguous, 33, 65, true);
      run_copy(Layout::broadcast_row, 7, 13, false);
      const bool fast_pair = (to == DType::f32 || to == DType::f16 || to == DType::bf16) &&
                             (from == DType::f32 || from == DType::f16 || from == DType::bf16);
      if (fast_pair || to == from) run_copy(Layout::contiguous, 1, (1 << 20) + 3, false);
    }
  }
}

// ---- reductions -------------------------------------------------------------------------------

struct ReduceTolerance {
  double rtol, atol;
};
ReduceTolerance reduce_tolerance(ReduceOp op, DType dtype, int64_t reduce) {
  if (!is_floating(dtype) || op == ReduceOp::argmax || op == ReduceOp::argmin) return {0, 0};
  const double out_rtol = tolerance(dtype);  // the final rounding to f16/bf16
  const bool reduced = dtype == DType::f16 || dtype == DType::bf16;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::max:
    case ReduceOp::min:
    case ReduceOp::amax_abs:
      return {reduced ? out_rtol : 1e-12, 0};  // exact inputs, exact float sums
    case ReduceOp::mean:
      return {std::max(out_rtol, 2e-7), 0};
    case ReduceOp::prod:
      return {std::max(out_rtol, dtype == DType::f64 ? 1e-12 : 4e-7 * double(reduce)), 0};
    case ReduceOp::var:
      return {std::max(out_rtol, dtype == DType::f64 ? 1e-10 : 1e-4), 1e-6};
    default:
      return {out_rtol, 0};
  }
}

Tensor run_reduce(Device dev, const Tensor& in, ReduceShape s, ReduceOp op, Tensor* indices) {
  const DType out_dtype =
      op == ReduceOp::argmax || op == ReduceOp::argmin ? DType::i64 : in.dtype();
  Tensor out = empty({s.outer, s.inner}, out_dtype, dev);
  reduce_kernel().get(dev.type, in.dtype())(out, indices, in, s, op, 1);
  return out;
}

TEST_CASE("reductions match the CPU over [outer, reduce, inner] shapes" *
          doctest::skip(!cuda::is_available())) {
  const ReduceShape shapes[] = {{1, 1, 1},       {3, 1, 5},    {1, 7, 1},     {5, 33, 1},
                                {4, 1000, 1},    {64, 600, 1}, {3, 4097, 1},  {2, (1 << 20) + 3, 1},
                                {1, 1 << 21, 1}, {7, 5, 3},    {1, 4096, 16}, {3, 100, 1024},
                                {1, 10000, 7},   {2, 0, 3},    {0, 5, 2}};
  const ReduceOp ops[] = {ReduceOp::sum, ReduceOp::mean,   ReduceOp::max,
                          ReduceOp::min, ReduceOp::argmax, ReduceOp::argmin,
                          ReduceOp::var, ReduceOp::prod,   ReduceOp::amax_abs};
  for (const ReduceShape& s : shapes) {
    for (DType dtype : kDTypes) {
      CAPTURE(s.outer);
      CAPTURE(s.reduce);
      CAPTURE(s.inner);
      CAPTURE(dtype_name(dtype));
      const bool long_rows = s.reduce > 4097;
      for (bool specials : {false, true}) {
        Range r{-4, 4};
        r.specials = specials;
        const Pair in = make_pair({s.outer * s.reduce * s.inner}, dtype, r, 51);
        const Pair near_one = make_pair({s.outer * s.reduce * s.inner}, dtype, {0.5, 1.5}, 52);
        for (ReduceOp op : ops) {
          if (op == ReduceOp::prod && long_rows) continue;  // fp32 vs fp64 accumulation drift
          const bool needs_elements = op == ReduceOp::max || op == ReduceOp::min ||
                                      op == ReduceOp::argmax || op == ReduceOp::argmin;
          if (needs_elements && s.reduce == 0) continue;
          if (op == ReduceOp::mean && s.reduce == 0 && !is_floating(dtype))
            continue;  // NaN in an int
          if (specials && (op == ReduceOp::prod || op == ReduceOp::var || op == ReduceOp::mean))
            continue;
          CAPTURE(int(op));
          CAPTURE(specials);
          const Pair& x = op == ReduceOp::prod ? near_one : in;
          const ReduceTolerance tol = reduce_tolerance(op, dtype, s.reduce);
          const bool with_indices = op == ReduceOp::max || op == ReduceOp::min;
          Tensor cpu_idx = with_indices ? empty({s.outer, s.inner}, DType::i64, kCpu) : Tensor();
          Tensor gpu_idx = with_indices ? empty({s.outer, s.inner}, DType::i64, kGpu) : Tensor();
          std::optional<Tensor> want = cpu_reference([&](Device d) {
            return run_reduce(d, d.is_cuda() ? x.gpu : x.cpu, s, op,
                              with_indices ? (d.is_cuda() ? &gpu_idx : &cpu_idx) : nullptr);
          });
          if (!want) continue;
          check_close(run_reduce(kGpu, x.gpu, s, op, with_indices ? &gpu_idx : nullptr), *want,
                      tol.rtol, tol.atol);
          if (with_indices) check_close(gpu_idx, cpu_idx, 0);
        }
      }
    }
  }
}

TEST_CASE("reductions are deterministic run to run" * doctest::skip(!cuda::is_available())) {
  // Unrounded inputs, so the summation order matters: split rows and split columns.
  for (ReduceShape s : {ReduceShape{1, 1 << 21, 1}, ReduceShape{1, 4096, 16}}) {
    const Pair in = make_pair({s.outer * s.reduce * s.inner}, DType::f32, {-1, 1, 0}, 61);
    const std::vector<double> first =
        run_reduce(kGpu, in.gpu, s, ReduceOp::sum, nullptr).cpu().to_vector();
    for (int rep = 0; rep < 3; ++rep)
      CHECK(run_reduce(kGpu, in.gpu, s, ReduceOp::sum, nullptr).cpu().to_vector() == first);
  }
}

// ---- GEMM -------------------------------------------------------------------------------------

struct GemmCase {
  int64_t m, n, k;
  bool trans_a, trans_b;
  int64_t batch = 1, pad = 0;  // pad: extra columns in every stored row (ld > minimal)
  double alpha = 1, beta = 0;
};

// Stored operand [batch, rows, cols + pad] with ld = cols + pad; the same values on both devices.
struct GemmOperand {
  Pair data;
  int64_t ld, batch_stride;
};
GemmOperand gemm_operand(int64_t batch, int64_t rows, int64_t cols, int64_t pad, DType dtype,
                         Range r, uint32_t seed) {
  const int64_t ld = std::max<int64_t>(cols + pad, 1);
  return {make_pair({batch, rows, ld}, dtype, r, seed), ld, rows * ld};
}

void compare_gemm(const GemmCase& c, DType dtype, bool tf32, Range r, double rtol,
                  double atol = 0) {
  CAPTURE(c.m);
  CAPTURE(c.n);
  CAPTURE(c.k);
  CAPTURE(c.trans_a);
  CAPTURE(c.trans_b);
  CAPTURE(c.batch);
  CAPTURE(dtype_name(dtype));
  CAPTURE(tf32);
  const GemmOperand a = c.trans_a ? gemm_operand(c.batch, c.k, c.m, c.pad, dtype, r, 71)
                                  : gemm_operand(c.batch, c.m, c.k, c.pad, dtype, r, 71);
  const GemmOperand b = c.trans_b ? gemm_operand(c.batch, c.n, c.k, c.pad, dtype, r, 72)
                                  : gemm_operand(c.batch, c.k, c.n, c.pad, dtype, r, 72);
  const GemmOperand out = gemm_operand(c.batch, c.m, c.n, c.pad, dtype, r, 73);
  Tensor c_cpu = out.data.cpu.clone(), c_gpu = out.data.gpu.clone();
  if (c.beta == 0) {  // beta == 0 must not read C: NaN there must not leak into the result
    c_cpu.fill_(kNaN);
    c_gpu.fill_(kNaN);
  }
  for (Device d : {kCpu, kGpu}) {
    const bool g = d.is_cuda();
    GemmArgs args;
    args.trans_a = c.trans_a;
    args.trans_b = c.trans_b;
    args.m = c.m;
    args.n = c.n;
    args.k = c.k;
    args.alpha = c.alpha;
    args.beta = c.beta;
    args.a = (g ? a.data.gpu : a.data.cpu).data_ptr();
    args.lda = a.ld;
    args.stride_a = a.batch_stride;
    args.b = (g ? b.data.gpu : b.data.cpu).data_ptr();
    args.ldb = b.ld;
    args.stride_b = b.batch_stride;
    args.c = (g ? c_gpu : c_cpu).data_ptr();
    args.ldc = out.ld;
    args.stride_c = out.batch_stride;
    args.batch = c.batch;
    args.dtype = dtype;
    args.device = d;
    args.allow_tf32 = tf32;
    gemm_kernel().get(d.type, dtype)(args);
  }
  check_close(c_gpu, c_cpu, rtol, atol);
}

TEST_CASE("gemm on cuBLAS matches the CPU: transposes, padding, batches, alpha/beta, k = 0" *
          doctest::skip(!cuda::is_available())) {
  const GemmCase cases[] = {{1, 1, 1, false, false},
                            {7, 5, 3, true, false, 1, 1},
                            {64, 48, 32, false, true, 1, 0, 0.5, 0.25},
                            {127, 65, 129, true, true, 1, 3, 1, 1},
                            {256, 256, 256, false, false},
                            {33, 17, 64, false, false, 4, 2, 1, 0.5},
                            {1, 300, 200, true, false},
                            {300, 1, 200, false, true, 2},
                            {5, 6, 0, false, false, 2, 1, 1, 0.5},
                            {5, 6, 0, true, true, 1, 0, 1, 0},
                            {0, 4, 5, false, false},
                            {4, 0, 5, false, false}};
  // Multiples of 1/32 in [-1, 1] with k <= 256: every product and partial sum is exact in fp32
  // (and in tf32's inputs), so fp32/tf32/f16/bf16 must agree with the CPU up to the final rounding.
  const Range exact{-1, 1, 1.0 / 32};
  for (const GemmCase& c : cases) {
    compare_gemm(c, DType::f32, false, exact, 1e-6);
    compare_gemm(c, DType::f32, true, exact, 1e-6);
    compare_gemm(c, DType::f64, false, exact, 1e-12);
    compare_gemm(c, DType::f16, false, exact, tolerance(DType::f16));
    compare_gemm(c, DType::bf16, false, exact, tolerance(DType::bf16));
  }
  // Unrounded inputs: fp32 to rounding error, tf32 to its 10-bit mantissa (atol ~ sqrt(k) ulps).
  const Range raw{-1, 1, 0};
  compare_gemm({96, 80, 512, false, true}, DType::f32, false, raw, 1e-4, 1e-4);
  compare_gemm({96, 80, 512, false, true}, DType::f32, true, raw, 1e-2, 2e-2);
}

// ---- indexing ---------------------------------------------------------------------------------

Pair index_tensor(int64_t n, int64_t size, DType dtype, uint32_t seed) {
  return make_pair({n}, dtype, {0, double(size - 1), 0}, seed);  // duplicates included
}

TEST_CASE("index_select and index_add match the CPU" * doctest::skip(!cuda::is_available())) {
  struct Case {
    int64_t outer, size, inner, nidx;
    DType dtype, index_dtype;
  };
  const Case select_cases[] = {
      {1, 10, 1, 25, DType::f32, DType::i64},     {3, 50, 7, 40, DType::f16, DType::i32},
      {2, 1000, 64, 300, DType::f32, DType::i64}, {4, 17, 3, 9, DType::boolean, DType::i64},
      {2, 33, 5, 12, DType::i64, DType::i32},     {1, 5, 2, 7, DType::u8, DType::i64},
      {2, 20, 6, 11, DType::bf16, DType::i64},    {3, 8, 5, 0, DType::f64, DType::i64}};
  for (const Case& c : select_cases) {
    CAPTURE(c.outer);
    CAPTURE(c.size);
    CAPTURE(c.inner);
    CAPTURE(dtype_name(c.dtype));
    const Pair in = make_pair({c.outer, c.size, c.inner}, c.dtype, {}, 81);
    const Pair idx = index_tensor(c.nidx, c.size, c.index_dtype, 82);
    compare_on_both(
        [&](Device d) {
          const bool g = d.is_cuda();
          Tensor out = empty({c.outer, c.nidx, c.inner}, c.dtype, d);
          index_select_kernel().get(d.type, c.dtype)(
              out, g ? in.gpu : in.cpu, g ? idx.gpu : idx.cpu, c.outer, c.size, c.inner);
          return out;
        },
        0);
  }
  // Multiples of 1/8 in [-2, 2]: sums of the few duplicates stay exact even in bf16, so the
  // order of the atomic adds cannot change the result.
  const Range small{-2, 2, 1.0 / 8};
  for (DType dtype : kDTypes) {
    for (const Case& c :
         {Case{1, 10, 1, 50, dtype, DType::i64}, Case{3, 50, 7, 40, dtype, DType::i32},
          Case{2, 100, 64, 300, dtype, DType::i64}}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(c.size);
      const Pair base = make_pair({c.outer, c.size, c.inner}, dtype, small, 83);
      const Pair src = make_pair({c.outer, c.nidx, c.inner}, dtype, small, 84);
      const Pair idx = index_tensor(c.nidx, c.size, c.index_dtype, 85);
      compare_on_both(
          [&](Device d) {
            const bool g = d.is_cuda();
            Tensor out = (g ? base.gpu : base.cpu).clone();
            index_add_kernel().get(d.type, dtype)(out, g ? idx.gpu : idx.cpu, g ? src.gpu : src.cpu,
                                                  c.outer, c.size, c.inner);
            return out;
          },
          0);
    }
  }
}

TEST_CASE("gather and scatter_add match the CPU along every dim, strided inputs included" *
          doctest::skip(!cuda::is_available())) {
  const Shape data_shape = {5, 6, 7};
  const Range small{-2, 2, 1.0 / 8};
  for (int64_t dim = 0; dim < 3; ++dim) {
    for (DType dtype :
         {DType::f32, DType::f16, DType::bf16, DType::i64, DType::i32, DType::boolean}) {
      for (bool strided : {false, true}) {
        CAPTURE(dim);
        CAPTURE(dtype_name(dtype));
        CAPTURE(strided);
        Shape index_shape = {4, 5, 3};  // smaller than the data in every dim
        index_shape[size_t(dim)] = 9;   // more indices than the dim holds: duplicates
        // The data as a permuted view of a dense [7, 6, 5] base when strided.
        auto data_view = [&](const Tensor& t) { return strided ? t.permute({2, 1, 0}) : t; };
        const Shape data_base = strided ? Shape{7, 6, 5} : data_shape;
        const Pair data = make_pair(data_base, dtype, small, 91, data_view);
        const Pair idx =
            make_pair(index_shape, DType::i64, {0, double(data_shape[size_t(dim)] - 1), 0}, 92);
        compare_on_both(
            [&](Device d) {
              const bool g = d.is_cuda();
              Tensor out = empty(index_shape, dtype, d);
              gather_kernel().get(d.type, dtype)(out, g ? data.gpu : data.cpu,
                                                 g ? idx.gpu : idx.cpu, dim);
              return out;
            },
            0);
        const Pair src = make_pair(index_shape, dtype, small, 93);
        compare_on_both(
            [&](Device d) {
              const bool g = d.is_cuda();
              Tensor out = (g ? data.gpu : data.cpu).clone();
              scatter_add_kernel().get(d.type, dtype)(out, g ? idx.gpu : idx.cpu,
                                                      g ? src.gpu : src.cpu, dim);
              return out;
            },
            0);
      }
    }
  }
}

TEST_CASE("out-of-range indices are reported through the device error flag" *
          doctest::skip(!cuda::is_available())) {
  cuda::synchronize(0);  // start clean (throws if an earlier test left an error)
  const Tensor in =
      from_vector(make_values(40, DType::f32, {}, 95), {4, 10}, TensorOptions(DType::f32)).to(kGpu);
  SUBCASE("index_select, index == size") {
    const Tensor idx = from_vector({0, 3, 10, 2}, {4}, TensorOptions(DType::i64)).to(kGpu);
    Tensor out = empty({4, 4}, DType::f32, kGpu);
    index_select_kernel().get(DeviceType::CUDA, DType::f32)(out, in, idx, 4, 10, 1);
    CHECK_THROWS_WITH_AS(cuda::synchronize(0),  // a sync point: it reads the flag
                         doctest::Contains("index 10 is out of bounds for a dimension of size 10"),
                         Error);
  }
  SUBCASE("gather, negative index") {
    const Tensor idx = from_vector({1, -1, 2, 0}, {4, 1}, TensorOptions(DType::i32)).to(kGpu);
    Tensor out = empty({4, 1}, DType::f32, kGpu);
    gather_kernel().get(DeviceType::CUDA, DType::f32)(out, in, idx, 1);
    CHECK_THROWS_WITH_AS(cuda::synchronize(0),  // a sync point: it reads the flag
                         doctest::Contains("index -1 is out of bounds for a dimension of size 10"),
                         Error);
  }
  SUBCASE("scatter_add and index_add skip the bad index") {
    Tensor out = zeros({4, 10}, TensorOptions(DType::f32).with_device(kGpu));
    const Tensor idx = from_vector({0, 11, 1, 2}, {4, 1}, TensorOptions(DType::i64)).to(kGpu);
    const Tensor src = ones({4, 1}, TensorOptions(DType::f32).with_device(kGpu));
    scatter_add_kernel().get(DeviceType::CUDA, DType::f32)(out, idx, src, 1);
    CHECK_THROWS_WITH_AS(cuda::synchronize(0),  // a sync point: it reads the flag
                         doctest::Contains("index 11 is out of bounds for a dimension of size 10"),
                         Error);
    const std::vector<double> v = out.cpu().to_vector();
    CHECK(v[0] == 1);   // row 0, index 0
    CHECK(v[10] == 0);  // row 1: its index 11 was skipped
    CHECK(v[21] == 1);  // row 2, index 1
    Tensor out4 = zeros({4}, TensorOptions(DType::f32).with_device(kGpu));
    const Tensor idx4 = from_vector({4, 1}, {2}, TensorOptions(DType::i64)).to(kGpu);
    index_add_kernel().get(DeviceType::CUDA, DType::f32)(
        out4, idx4, ones({2}, TensorOptions(DType::f32).with_device(kGpu)), 1, 4, 1);
    CHECK_THROWS_WITH_AS(cuda::synchronize(0),  // a sync point: it reads the flag
                         doctest::Contains("index 4 is out of bounds for a dimension of size 4"),
                         Error);
    CHECK(out4.cpu().to_vector() == std::vector<double>{0, 1, 0, 0});
  }
  CHECK_NOTHROW(cuda::check_device_errors(0));  // reading the flag resets it
}

}  // namespace

TEST_CASE("embedding backward in deterministic mode: matches the CPU and repeats bitwise" *
          doctest::skip(!cuda::is_available())) {
  dispatch::AlgoModeGuard deterministic(dispatch::AlgoMode::deterministic);
  Generator gen(Device::cpu(), 21);
  struct Sizes {
    int64_t rows, distinct, lookups, dim;
  };
  // Few rows x lookups (the row-scan kernel: 50 rows, 280 lookups of 12 rows, many repeats), and
  // more than 2^24 of them (the sorted-runs kernel: 5000 rows, 4000 lookups).
  for (const Sizes& z : {Sizes{50, 12, 280, 33}, Sizes{5000, 5000, 4000, 8}}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      const std::string dtype_label = dtype_name(dtype);
      CAPTURE(dtype_label);
      CAPTURE(z.rows);
      const Tensor weight = randn({z.rows, z.dim}, TensorOptions(), &gen).to(dtype);
      const Tensor indices = randint(0, z.distinct, {z.lookups}, TensorOptions(DType::i64), &gen);
      const Tensor upstream = randn({z.lookups, z.dim}, TensorOptions(), &gen).to(dtype);
      auto grad_on = [&](Device d) {
        Tensor w = weight.to(d).detach().set_requires_grad(true);
        sum(embedding(w, indices.to(d)) * upstream.to(d)).backward();
        return w.grad().cpu().to(DType::f64);
      };
      const Tensor cpu = grad_on(Device::cpu());
      const Tensor first = grad_on(Device::cuda()), second = grad_on(Device::cuda());
      CHECK(max_abs_diff(first, second) == 0.0);
      const double tol = dtype == DType::f32 ? 1e-5 : 0.1;
      CHECK(max_abs_diff(first, cpu) <= tol * (1.0 + ember::max(cpu.abs()).item()));
    }
  }
}
