// Normalization ops on CUDA against the CPU fp64 reference (same rounded inputs): batch norm and
// its fused tails over awkward shapes (odd channel counts 3, 7, 65; batch 1; one spatial position;
// 2-D to 5-D; NCHW and channels_last; misaligned base pointers; large splits), float32 / bfloat16 /
// float16 with float32 or same-dtype parameters, running statistics, numerical stability with a
// large mean, run-to-run determinism; layer / group / instance norm; device and dtype errors. Skips
// without a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/ops/norm.h"
#include "support/compare.h"
#include "support/op_table.h"

using namespace ember;
using ember::testing::Layout;

namespace {

using ember::testing::cpu_f64;
using ember::testing::parity_tolerance;
using ember::testing::rel_err;

Tensor leaf(const Tensor& t) { return t.detach().set_requires_grad(true); }

// `t` on the GPU as `dtype`, channels_last when asked (4-D / 5-D), starting `offset` elements into
// its buffer (offset 1 makes the base pointer unaligned for 16-byte vectors).
Tensor to_gpu(const Tensor& t, DType dtype, bool channels_last, int64_t offset = 0) {
  Tensor g = t.to(Device::cuda(), dtype);
  if (channels_last && (t.dim() == 4 || t.dim() == 5))
    g = g.contiguous(MemoryFormat::channels_last);
  if (offset == 0) return g;
  Tensor buffer = empty({t.numel() + offset}, dtype, Device::cuda());
  Tensor view;
  if (channels_last && t.dim() == 4) {
    const Shape& s = t.sizes();
    view = buffer.narrow(0, offset, t.numel()).view({s[0], s[2], s[3], s[1]}).permute({0, 3, 1, 2});
  } else {
    view = buffer.narrow(0, offset, t.numel()).view(t.sizes());
  }
  view.copy_(g);
  return view;
}

enum class Tail { none, relu, add_relu };
const char* tail_name(Tail t) {
  return t == Tail::none ? "bn" : t == Tail::relu ? "bn_relu" : "bn_add_relu";
}

struct BnInputs {
  Tensor x, residual, weight, bias, running_mean, running_var, grad_out;
};

struct BnResult {
  Tensor y;
  std::vector<Tensor> grads;  // x, weight, bias, residual
};

BnResult run_bn(Tail tail, bool training, const BnInputs& in) {
  BnInputs l = in;
  l.x = leaf(in.x);
  l.weight = leaf(in.weight);
  l.bias = leaf(in.bias);
  if (tail == Tail::add_relu) l.residual = leaf(in.residual);
  Tensor y;
  switch (tail) {
    case Tail::none:
      y = batch_norm(l.x, l.weight, l.bias, in.running_mean, in.running_var, training, 0.1, 1e-5);
      break;
    case Tail::relu:
      y = batch_norm_relu(l.x, l.weight, l.bias, in.running_mean, in.running_var, training, 0.1,
                          1e-5);
      break;
    case Tail::add_relu:
      y = batch_norm_add_relu(l.x, l.residual, l.weight, l.bias, in.running_mean, in.running_var,
                              training, 0.1, 1e-5);
      break;
  }
  (y * in.grad_out).sum().backward();
  return {y,
          {l.x.grad(), l.weight.grad(), l.bias.grad(),
           tail == Tail::add_relu ? l.residual.grad() : Tensor()}};
}

struct BnCase {
  Shape shape;
  bool channels_last = false;
  DType dtype = DType::f32;
  DType param_dtype = DType::f32;
  Tail tail = Tail::none;
  bool training = true;
  int64_t offset = 0;
  double mean_shift = 0.7;
};

void check_bn_parity(const BnCase& k, uint64_t seed = 7, const std::string& forced_algorithm = "") {
  CAPTURE(shape_str(k.shape));
  CAPTURE(k.channels_last);
  const std::string dtype_label = dtype_name(k.dtype),
                    param_dtype_label = dtype_name(k.param_dtype);
  const std::string tail_label = tail_name(k.tail);
  CAPTURE(dtype_label);
  CAPTURE(param_dtype_label);
  CAPTURE(tail_label);
  CAPTURE(k.training);
  CAPTURE(k.offset);
  const int64_t C = k.shape[1];
  Generator gen(Device::cpu(), seed);
  const TensorOptions f64(DType::f64);
  Tensor x = randn(k.shape, f64, &gen) * 1.5 + k.mean_shift;
  Tensor residual = randn(k.shape, f64, &gen);
  Tensor grad_out = randn(k.shape, f64, &gen);
  Tensor weight = rand({C}, f64, &gen) + 0.5, bias = randn({C}, f64, &gen) * 0.2;
  Tensor rm = randn({C}, f64, &gen) * 0.2, rv = rand({C}, f64, &gen) + 0.5;

  BnInputs gpu{to_gpu(x, k.dtype, k.channels_last, k.offset),
               to_gpu(residual, k.dtype, k.channels_last),
               to_gpu(weight, k.param_dtype, false),
               to_gpu(bias, k.param_dtype, false),
               to_gpu(rm, k.param_dtype, false),
               to_gpu(rv, k.param_dtype, false),
               to_gpu(grad_out, k.dtype, false)};
  BnInputs cpu{cpu_f64(gpu.x),       cpu_f64(gpu.residual),     cpu_f64(gpu.weight),
               cpu_f64(gpu.bias),    cpu_f64(gpu.running_mean), cpu_f64(gpu.running_var),
               cpu_f64(gpu.grad_out)};
  const BnResult g = [&] {
    if (forced_algorithm.empty()) return run_bn(k.tail, k.training, gpu);
    dispatch::AlgoSettingsGuard guard(
        dispatch::current_algo_settings().force("batch_norm", forced_algorithm));
    return run_bn(k.tail, k.training, gpu);
  }();
  const BnResult c = run_bn(k.tail, k.training, cpu);

  const double tol = parity_tolerance(k.dtype);
  REQUIRE(g.y.sizes() == k.shape);
  CHECK(g.y.device() == Device::cuda());
  CHECK(g.y.dtype() == k.dtype);
  if (k.channels_last && k.shape.size() >= 4) CHECK(g.y.is_contiguous(MemoryFormat::channels_last));
  CHECK(rel_err(g.y, c.y) <= tol);
  const double param_tol = std::max(parity_tolerance(k.param_dtype), 1e-5);
  CHECK(rel_err(gpu.running_mean, cpu.running_mean) <= param_tol);
  CHECK(rel_err(gpu.running_var, cpu.running_var) <= param_tol);
  // With a ReLU tail, elements within 1e-3 of the kink are left out of the elementwise gradients
  // (x's and the residual's): there the float32 output and the fp64 reference may fall on
  // different sides, and the gradient of either side is right. The parameter gradients keep them.
  Tensor away_from_kink;
  if (k.tail != Tail::none) {
    autograd::NoGradGuard no_grad;
    const Tensor y_abs = abs(c.y.detach());
    away_from_kink = (y_abs > full_like(y_abs, 1e-3)).to(DType::f64);
  }
  for (size_t i = 0; i < g.grads.size(); ++i) {
    CAPTURE(i);
    REQUIRE(g.grads[i].defined() == c.grads[i].defined());
    if (!g.grads[i].defined()) continue;
    CHECK(g.grads[i].device() == Device::cuda());
    const bool elementwise = i == 0 || i == 3;
    if (elementwise && away_from_kink.defined()) {
      autograd::NoGradGuard no_grad;
      CHECK(rel_err(cpu_f64(g.grads[i]) * away_from_kink, c.grads[i] * away_from_kink) <= 4 * tol);
      continue;
    }
    // Parameter gradients are sums over N*S values: allow for float32 summation over many terms.
    CHECK(rel_err(g.grads[i], c.grads[i]) <= 4 * tol);
  }
}

// Runs `fn` on GPU inputs and on their CPU fp64 twins; compares outputs and gradients.
void check_fn_parity(const std::string& name, const std::vector<Shape>& shapes,
                     const std::function<Tensor(const std::vector<Tensor>&)>& fn, DType dtype,
                     Layout layout = Layout::contiguous) {
  CAPTURE(name);
  CAPTURE(dtype_name(dtype));
  CAPTURE(int(layout));
  ember::testing::OpCase c{name, shapes, fn, -2.0, 2.5};
  auto gpu = ember::testing::make_inputs(c, dtype, Device::cuda(), 99, layout, true);
  std::vector<Tensor> cpu;
  for (const Tensor& g : gpu) cpu.push_back(leaf(cpu_f64(g)));
  Tensor out_gpu = fn(gpu), out_cpu = fn(cpu);
  REQUIRE(out_gpu.sizes() == out_cpu.sizes());
  CHECK(out_gpu.device() == Device::cuda());
  CHECK(rel_err(out_gpu, out_cpu) <= parity_tolerance(dtype));
  Generator gen(Device::cpu(), 5);
  Tensor w = rand(out_cpu.sizes(), TensorOptions(DType::f64), &gen);
  Tensor w_gpu = w.to(Device::cuda(), out_gpu.dtype());
  (out_cpu * cpu_f64(w_gpu)).sum().backward();
  (out_gpu * w_gpu).sum().backward();
  for (size_t i = 0; i < gpu.size(); ++i) {
    CAPTURE(i);
    REQUIRE(gpu[i].grad().defined() == cpu[i].grad().defined());
    if (gpu[i].grad().defined())
      CHECK(rel_err(gpu[i].grad(), cpu[i].grad()) <= 4 * parity_tolerance(dtype));
  }
}

}  // namespace

TEST_CASE("batch_norm on CUDA matches the CPU over awkward shapes, layouts and dtypes" *
          doctest::skip(!cuda::is_available())) {
  const std::vector<Shape> shapes = {{2, 3, 5, 7},  {1, 7, 3, 3},  {4, 65, 1, 1},  {3, 8, 4, 4},
                                     {2, 64, 9, 9}, {5, 7},        {6, 3, 10},     {2, 3, 2, 3, 4},
                                     {3, 16, 1, 5}, {2, 33, 6, 6}, {2, 4, 3, 3, 2}};
  int runs = 0;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const Shape& shape : shapes) {
      for (bool channels_last : {false, true}) {
        if (channels_last && shape.size() < 4) continue;
        for (Tail tail : {Tail::none, Tail::relu, Tail::add_relu}) {
          for (bool training : {true, false}) {
            BnCase k;
            k.shape = shape;
            k.channels_last = channels_last;
            k.dtype = k.param_dtype = dtype;
            k.tail = tail;
            k.training = training;
            check_bn_parity(k);
            ++runs;
          }
        }
      }
    }
  }
  CHECK(runs > 300);
}

TEST_CASE("batch_norm on CUDA: many splits per channel, unaligned pointers, float32 parameters" *
          doctest::skip(!cuda::is_available())) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (bool channels_last : {false, true}) {
      BnCase k;
      k.shape = {32, 24, 20, 20};  // 12800 values per channel: several splits in both layouts
      k.channels_last = channels_last;
      k.dtype = dtype;
      k.param_dtype = DType::f32;  // mixed precision, as under autocast
      check_bn_parity(k);
      k.tail = Tail::add_relu;
      check_bn_parity(k);
      // 262144 values over 8 channels: more splits (256 channels-inner) than the finalize
      // kernels' 128 walkers, so each walker merges several.
      k.shape = {64, 8, 64, 64};
      k.tail = Tail::relu;
      check_bn_parity(k);
      // Base pointer one element into its buffer: the scalar (non-vector) paths.
      k.tail = Tail::none;
      k.shape = {3, 8, 4, 4};
      k.offset = 1;
      check_bn_parity(k);
      k.tail = Tail::relu;
      k.training = false;
      check_bn_parity(k);
    }
  }
}

TEST_CASE("batch_norm on CUDA keeps accurate statistics when the mean dwarfs the spread" *
          doctest::skip(!cuda::is_available())) {
  // A float32 sum and sum of squares would lose the variance here (mean^2 / var = 1e6); Welford
  // with Chan merges keeps it to float32 rounding.
  for (bool channels_last : {false, true}) {
    BnCase k;
    k.shape = {64, 4, 32, 32};
    k.channels_last = channels_last;
    k.mean_shift = 1000.0;
    check_bn_parity(k);
  }
}

TEST_CASE("batch_norm on CUDA is deterministic run to run" * doctest::skip(!cuda::is_available())) {
  for (bool channels_last : {false, true}) {
    CAPTURE(channels_last);
    Generator gen(Device::cpu(), 3);
    Tensor x64 = randn({64, 32, 16, 16}, TensorOptions(DType::f64), &gen);
    Tensor x = to_gpu(x64, DType::f32, channels_last);
    Tensor gy =
        to_gpu(randn({64, 32, 16, 16}, TensorOptions(DType::f64), &gen), DType::f32, channels_last);
    auto once = [&] {
      Tensor xl = leaf(x), w = leaf(ones({32}, TensorOptions().with_device(Device::cuda())));
      Tensor y = batch_norm(xl, w, Tensor(), Tensor(), Tensor(), true);
      (y * gy).sum().backward();
      return std::vector<Tensor>{y, xl.grad(), w.grad()};
    };
    std::vector<Tensor> a = once(), b = once();
    for (size_t i = 0; i < a.size(); ++i) CHECK(max_abs_diff(a[i], b[i]) == 0);
  }
}

TEST_CASE("layer_norm, group_norm and instance_norm on CUDA match the CPU" *
          doctest::skip(!cuda::is_available())) {
  using V = const std::vector<Tensor>&;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    struct Ln {
      Shape x, normalized;
    };
    for (const Ln& ln : std::vector<Ln>{{{7, 33}, {33}},
                                        {{4, 1024}, {1024}},
                                        {{3, 5, 64}, {64}},
                                        {{2, 4, 6}, {4, 6}},
                                        {{16, 1000}, {1000}},
                                        {{5, 8}, {8}},
                                        {{3, 4100}, {4100}}}) {
      const Shape norm = ln.normalized;
      check_fn_parity(
          "layer_norm " + shape_str(ln.x), {ln.x, norm, norm},
          [norm](V x) { return layer_norm(x[0], norm, x[1], x[2]); }, dtype);
      check_fn_parity(
          "layer_norm noaffine " + shape_str(ln.x), {ln.x},
          [norm](V x) { return layer_norm(x[0], norm); }, dtype);
    }
    struct Gn {
      Shape x;
      int64_t groups;
    };
    for (const Gn& gn : std::vector<Gn>{{{2, 6, 5, 5}, 3},
                                        {{3, 8, 7}, 4},
                                        {{2, 64, 16, 16}, 32},
                                        {{4, 6}, 3},
                                        {{1, 7, 3, 3}, 7},
                                        {{2, 12, 8, 8}, 1}}) {
      const int64_t groups = gn.groups, C = gn.x[1];
      for (Layout layout : {Layout::contiguous, Layout::channels_last})
        check_fn_parity(
            "group_norm " + shape_str(gn.x), {gn.x, {C}, {C}},
            [groups](V x) { return group_norm(x[0], groups, x[1], x[2]); }, dtype, layout);
    }
    check_fn_parity(
        "instance_norm", {{3, 5, 4, 6}, {5}, {5}},
        [](V x) {
          Tensor rm = zeros({5}, TensorOptions(x[0].dtype()).with_device(x[0].device()));
          Tensor rv = ones({5}, TensorOptions(x[0].dtype()).with_device(x[0].device()));
          return instance_norm(x[0], x[1], x[2], rm, rv, true, 0.1, 1e-5);
        },
        dtype);
  }
}

TEST_CASE("normalization on CUDA: mixed devices and float64 are clear errors" *
          doctest::skip(!cuda::is_available())) {
  const TensorOptions gpu = TensorOptions().with_device(Device::cuda());
  Tensor x = randn({4, 3, 2, 2}, gpu);
  try {
    (void)batch_norm(x, ones({3}), Tensor(), Tensor(), Tensor(), true);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.status() == Status::bad_param);
    CHECK(std::string(e.what()).find("cuda:0") != std::string::npos);
    CHECK(std::string(e.what()).find("cpu") != std::string::npos);
  }
  try {
    (void)batch_norm_add_relu(x, randn({4, 3, 2, 2}), Tensor(), Tensor(), Tensor(), Tensor(), true);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("residual") != std::string::npos);
  }
  try {
    (void)layer_norm(x, {2, 2}, ones({2, 2}));
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("cpu") != std::string::npos);
  }
  try {
    (void)batch_norm(x.to(DType::f64), Tensor(), Tensor(), Tensor(), Tensor(), true);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.status() == Status::not_supported);
    CHECK(std::string(e.what()).find("float64") != std::string::npos);
  }
}

TEST_CASE("layer_norm on CUDA: warp-per-row limits, unaligned rows and parameters, large mean" *
          doctest::skip(!cuda::is_available())) {
  // Row lengths at and just past each warp-per-row instantiation (float32: 256 and 1024 values;
  // 16-bit: 512 and 1024), 13 rows (not a multiple of the 4 rows of a block), and a mean of 100
  // over a unit spread (the statistics are centered, never a sum of squares).
  struct Case {
    int64_t D;
    int64_t x_offset, param_offset;  // elements into a larger buffer: 1 makes the pointer unaligned
    double shift;
  };
  // Parameters in float32 and, for 16-bit inputs, in the input's dtype (read as such by the
  // kernels, no conversion).
  struct Dtypes {
    DType x, params;
  };
  for (const Dtypes dt : {Dtypes{DType::f32, DType::f32}, Dtypes{DType::bf16, DType::f32},
                          Dtypes{DType::f16, DType::f32}, Dtypes{DType::bf16, DType::bf16},
                          Dtypes{DType::f16, DType::f16}}) {
    const DType dtype = dt.x;
    for (const Case& cs : {Case{256, 0, 0, 0}, Case{260, 0, 0, 0}, Case{512, 0, 0, 0},
                           Case{520, 0, 0, 0}, Case{1024, 0, 0, 0}, Case{1032, 0, 0, 0},
                           Case{1024, 0, 1, 0}, Case{1024, 1, 0, 0}, Case{1000, 0, 0, 100}}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(dtype_name(dt.params));
      CAPTURE(cs.D);
      CAPTURE(cs.x_offset);
      CAPTURE(cs.param_offset);
      const int64_t rows = 13, D = cs.D;
      Generator gen(Device::cpu(), 11);
      Tensor x64 = randn({rows, D}, TensorOptions(DType::f64), &gen) + cs.shift;
      Tensor w64 = randn({D}, TensorOptions(DType::f64), &gen);
      Tensor b64 = randn({D}, TensorOptions(DType::f64), &gen);
      Tensor x = to_gpu(x64, dtype, false, cs.x_offset);
      Tensor w = to_gpu(w64, dt.params, false, cs.param_offset);
      Tensor b = to_gpu(b64, dt.params, false, cs.param_offset);
      Tensor xg = leaf(x), wg = leaf(w), bg = leaf(b);
      Tensor y = layer_norm(xg, {D}, wg, bg);
      Tensor xc = leaf(cpu_f64(x)), wc = leaf(cpu_f64(w)), bc = leaf(cpu_f64(b));
      Tensor yc = layer_norm(xc, {D}, wc, bc);
      CHECK(rel_err(y, yc) <= parity_tolerance(dtype));
      Tensor gy64 = randn({rows, D}, TensorOptions(DType::f64), &gen);
      (y * gy64.to(Device::cuda(), dtype)).sum().backward();
      (yc * cpu_f64(gy64.to(Device::cuda(), dtype))).sum().backward();
      CHECK(rel_err(xg.grad(), xc.grad()) <= 4 * parity_tolerance(dtype));
      CHECK(rel_err(wg.grad(), wc.grad()) <= 4 * parity_tolerance(dtype));
      CHECK(rel_err(bg.grad(), bc.grad()) <= 4 * parity_tolerance(dtype));
    }
  }
}

TEST_CASE("layer_norm on CUDA: parameter gradients summed in the data pass, many rows" *
          doctest::skip(!cuda::is_available())) {
  // The backward sums dy and dy * xhat per feature in shared memory, each row group over at least
  // 8 rows, and merges the blocks' partials: row counts that leave a short last block, an
  // unvectorized row (33), rows too long for the accumulators (7000 floats: channel_grad_sums
  // instead), and weight / bias gradients without an input gradient (channel_grad_sums).
  struct Case {
    int64_t rows, D;
    bool input_grad;
  };
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (const Case& cs : {Case{600, 1024, true}, Case{333, 33, true}, Case{17, 768, true},
                           Case{40, 7000, true}, Case{600, 1024, false}}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(cs.rows);
      CAPTURE(cs.D);
      CAPTURE(cs.input_grad);
      Generator gen(Device::cpu(), 5);
      Tensor x64 = randn({cs.rows, cs.D}, TensorOptions(DType::f64), &gen);
      Tensor w64 = randn({cs.D}, TensorOptions(DType::f64), &gen);
      Tensor b64 = randn({cs.D}, TensorOptions(DType::f64), &gen);
      Tensor gy64 = randn({cs.rows, cs.D}, TensorOptions(DType::f64), &gen);
      Tensor x = to_gpu(x64, dtype, false, 0);
      Tensor xg = cs.input_grad ? leaf(x) : x, wg = leaf(to_gpu(w64, DType::f32, false, 0)),
             bg = leaf(to_gpu(b64, DType::f32, false, 0));
      Tensor xc = cs.input_grad ? leaf(cpu_f64(x)) : cpu_f64(x), wc = leaf(cpu_f64(wg.detach())),
             bc = leaf(cpu_f64(bg.detach()));
      Tensor gy = gy64.to(Device::cuda(), dtype);
      (layer_norm(xg, {cs.D}, wg, bg) * gy).sum().backward();
      (layer_norm(xc, {cs.D}, wc, bc) * cpu_f64(gy)).sum().backward();
      if (cs.input_grad) CHECK(rel_err(xg.grad(), xc.grad()) <= 4 * parity_tolerance(dtype));
      CHECK(rel_err(wg.grad(), wc.grad()) <= 4 * parity_tolerance(dtype));
      CHECK(rel_err(bg.grad(), bc.grad()) <= 4 * parity_tolerance(dtype));
    }
  }
}

// ---- the training forward's algorithms (issue 5 item 7) ---------------------------------------

namespace {

// A training-forward problem with fresh tensors of `shape` (the op builds the same one).
BatchNormForwardProblem bn_forward_problem(const Shape& shape, DType dtype, bool channels_last) {
  Tensor x = empty(shape, dtype, Device::cuda());
  if (channels_last) x = x.contiguous(MemoryFormat::channels_last);
  BatchNormForwardProblem p;
  p.x = x;
  p.y = empty_like(x);
  p.layout.N = shape[0];
  p.layout.C = shape[1];
  p.layout.S = shape_numel(shape) / (shape[0] * shape[1]);
  p.layout.channels_inner = channels_last || p.layout.S == 1;
  p.save_mean = empty({shape[1]}, DType::f32, Device::cuda());
  p.save_invstd = empty({shape[1]}, DType::f32, Device::cuda());
  return p;
}

}  // namespace

TEST_CASE(
    "batch_norm training forward: every algorithm of the slot matches the CPU, then backward still "
    "does" *
    doctest::skip(!cuda::is_available())) {
  // Each algorithm forced in turn over awkward shapes: odd N * H * W, batch 1, channel counts
  // that fill no vector, many splits, both layouts, every tail.
  struct Shaped {
    Shape shape;
    bool channels_last;
  };
  const std::vector<Shaped> shapes = {
      {{3, 24, 5, 7}, true},
      {{1, 24, 5, 7}, true},
      {{2, 40, 1, 1}, false},
      {{3, 8, 2, 4}, false},
      {{1, 5, 4, 6}, false},
      {{32, 24, 20, 20}, true},
      {{32, 24, 20, 20}, false},
      {{2, 3, 5, 7}, true},
      {{2, 7, 3, 3}, false},
      {{3, 65, 1, 1}, false},
      // single_read's wide bands (more than 64 channels: merged block by block, two barriers):
      // 128 channels (float32 rows of 32 vectors, a warp's lanes all different vectors; 16-bit
      // rows of 16), and 200 (float32 in a band of 64 vectors of which 50 exist; 16-bit 32 of 25).
      {{16, 128, 8, 8}, true},
      {{4, 200, 6, 5}, true}};
  const auto& slot = batch_norm_forward_slot(DeviceType::CUDA);
  for (const std::string& algo : slot.names()) {
    CAPTURE(algo);
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      for (const Shaped& s : shapes) {
        for (Tail tail : {Tail::none, Tail::relu, Tail::add_relu}) {
          BnCase k;
          k.shape = s.shape;
          k.channels_last = s.channels_last;
          k.dtype = dtype;
          // Mixed precision (float32 parameters and running statistics), except the ReLU tail,
          // which keeps them in the input's dtype (running statistics stored as 16-bit floats).
          k.param_dtype = tail == Tail::relu ? dtype : DType::f32;
          k.tail = tail;
          const BatchNormForwardProblem probe = bn_forward_problem(s.shape, dtype, s.channels_last);
          const auto& candidate = slot.get<BatchNormForwardProblem>(slot.find(algo));
          if (candidate.applies && !candidate.applies(probe)) continue;
          // Forced for the GPU run only (the CPU reference has its own slot).
          check_bn_parity(k, 7, algo);
        }
      }
    }
  }
}

TEST_CASE("batch_norm training forward: single_read on tensors whose band is narrower than a row" *
          doctest::skip(!cuda::is_available())) {
  // float32 channels_last activations larger than the blocks' shared memory, so single_read walks
  // them in waves (on an H200's 132 SMs): 64x32x64x64 (262144 rows of 128 bytes) in two waves of
  // 64-byte bands (16 channels: every block merges them); 32x256x32x32 (32768 rows of 1 KB) in two
  // waves of 512-byte bands (128 channels: merged block by block, two barriers per wave).
  BnCase wide;
  wide.shape = {32, 256, 32, 32};
  wide.channels_last = true;
  check_bn_parity(wide, 13, "single_read");
  BnCase k;
  k.shape = {64, 32, 64, 64};
  k.channels_last = true;
  check_bn_parity(k, 11, "single_read");
  // Deterministic: the same bits run to run.
  Generator gen(Device::cpu(), 3);
  Tensor x = (randn(k.shape, TensorOptions(DType::f64), &gen) * 2.0 + 0.5)
                 .to(Device::cuda(), DType::f32)
                 .contiguous(MemoryFormat::channels_last);
  dispatch::AlgoSettingsGuard guard(
      dispatch::current_algo_settings().force("batch_norm", "single_read"));
  const TensorOptions on_gpu = TensorOptions(DType::f32).with_device(Device::cuda());
  Tensor rm = zeros({32}, on_gpu), rv = ones({32}, on_gpu);
  const Tensor y1 = batch_norm(x, Tensor(), Tensor(), rm, rv, true);
  const Tensor y2 = batch_norm(x, Tensor(), Tensor(), rm, rv, true);
  CHECK(max_abs_diff(y1, y2) == 0.0);
}

TEST_CASE("batch_norm training forward: the slot's algorithms, heuristic and benchmark choices" *
          doctest::skip(!cuda::is_available())) {
  const auto& slot = batch_norm_forward_slot(DeviceType::CUDA);
  std::vector<std::string> names = slot.names();
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"single_read", "two_pass"});
  // The heuristic: single_read where the activation fits on chip in a few waves (CIFAR
  // ResNet-18's first stage), two_pass where single_read does not apply (channels-outer).
  const BatchNormForwardProblem problem = bn_forward_problem({128, 64, 32, 32}, DType::bf16, true);
  CHECK(batch_norm_forward_choose(problem).name == "single_read");
  CHECK(batch_norm_forward_choose(bn_forward_problem({128, 64, 32, 32}, DType::bf16, false)).name ==
        "two_pass");
  // Forcing an algorithm the slot does not have is an error, never silently replaced.
  {
    dispatch::AlgoSettingsGuard guard(
        dispatch::current_algo_settings().force("batch_norm", "persistent"));
    CHECK_THROWS_AS(batch_norm_forward_choose(problem), Error);
  }
  // Benchmark mode times the candidates on scratch outputs: the running statistics are updated
  // once, by the chosen algorithm only (check_bn_parity compares them with the CPU's single
  // update).
  dispatch::algo_cache().clear();
  dispatch::AlgoModeGuard benchmark(dispatch::AlgoMode::benchmark);
  for (bool channels_last : {true, false}) {
    BnCase k;
    k.shape = {16, 32, 12, 12};
    k.channels_last = channels_last;
    k.dtype = DType::bf16;
    k.tail = Tail::add_relu;
    check_bn_parity(k);
  }
}
