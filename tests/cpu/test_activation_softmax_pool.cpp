// CPU tests of activations, softmax / log_softmax, cross_entropy / nll_loss, pooling, dropout and
// the NCHW <-> NHWC conversion: values against hand
// computations and against compositions of primitive ops, PyTorch's loss semantics (ignore_index,
// label smoothing, weighted mean), layouts (channels_last, transposed), and bad input.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ember/dispatch/algo_cache.h"
#include "ember/ops/activation.h"
#include "ember/ops/dropout.h"
#include "ember/ops/layout.h"
#include "ember/ops/pooling.h"
#include "ember/ops/softmax.h"
#include "support/errors.h"
#include "support/op_table.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
using ember::testing::Layout;

namespace {

Tensor vec(std::vector<double> v, Shape s, DType d = DType::f64) {
  return from_vector(v, s, TensorOptions(d));
}
Tensor longs(std::vector<double> v, Shape s) {
  return from_vector(v, s, TensorOptions(DType::i64));
}

}  // namespace

TEST_CASE("activations: values at hand-computed points, layout, errors") {
  Tensor x = vec({-2, -0.5, 0, 1, 3}, {5});
  CHECK(allclose(leaky_relu(x, 0.1), vec({-0.2, -0.05, 0, 1, 3}, {5})));
  CHECK(allclose(elu(x, 2.0), vec({2 * std::expm1(-2.0), 2 * std::expm1(-0.5), 0, 1, 3}, {5})));
  // GELU(1) = Phi(1); the tanh form differs from it in the 4th digit.
  CHECK(gelu(vec({1}, {1})).item() == doctest::Approx(0.8413447460685429).epsilon(1e-12));
  CHECK(gelu(vec({1}, {1}), GeluApproximation::tanh).item() ==
        doctest::Approx(0.8411919906082768).epsilon(1e-12));
  CHECK(silu(vec({1}, {1})).item() == doctest::Approx(0.7310585786300049).epsilon(1e-12));
  // Derivatives at 0 follow PyTorch: leaky_relu takes the slope, elu alpha.
  Tensor z = zeros({1}, TensorOptions(DType::f64)).set_requires_grad(true);
  leaky_relu(z, 0.2).sum().backward();
  CHECK(z.grad().item() == doctest::Approx(0.2));
  Tensor z2 = zeros({1}, TensorOptions(DType::f64)).set_requires_grad(true);
  elu(z2, 1.5).sum().backward();
  CHECK(z2.grad().item() == doctest::Approx(1.5));
  // bf16 and channels_last pass through with the layout kept.
  Tensor img = randn({2, 3, 4, 5}).contiguous(MemoryFormat::channels_last);
  Tensor y = silu(img.to(DType::bf16));
  CHECK(y.dtype() == DType::bf16);
  CHECK(y.is_contiguous(MemoryFormat::channels_last));
  CHECK(max_abs_diff(y.to(DType::f32), img * sigmoid(img)) < 2e-2);
  // Strided input.
  Tensor t = randn({6, 4}).t();
  CHECK(max_abs_diff(gelu(t), gelu(t.contiguous())) == 0);
  CHECK(contains(error_of([] { (void)gelu(ones({3}, TensorOptions(DType::i64))); }), "floating"));
}

TEST_CASE("softmax: matches exp / logsumexp over every dim and dense layout") {
  Tensor x = randn({3, 4, 5, 6}, TensorOptions(DType::f64));
  for (int64_t dim = -4; dim < 4; ++dim) {
    CAPTURE(dim);
    Tensor ref = log_softmax_reference(x, dim);
    CHECK(max_abs_diff(log_softmax(x, dim), ref) < 1e-12);
    CHECK(max_abs_diff(softmax(x, dim), exp(ref)) < 1e-12);
  }
  // channels_last input, softmax over channels: no copy, output keeps the layout.
  Tensor cl = x.contiguous(MemoryFormat::channels_last);
  Tensor y = softmax(cl, 1);
  CHECK(y.is_contiguous(MemoryFormat::channels_last));
  CHECK(max_abs_diff(y, softmax(x, 1)) < 1e-12);
  // Transposed and sliced (non-dense) views.
  Tensor t = x.permute({3, 1, 0, 2});
  CHECK(max_abs_diff(softmax(t, 2), softmax(t.contiguous(), 2)) < 1e-12);
  Tensor s = x.slice(3, 0, 6, 2);
  CHECK(max_abs_diff(log_softmax(s, 3), log_softmax(s.contiguous(), 3)) < 1e-12);
  // A dim of size 1, 0-d and empty tensors.
  CHECK(max_abs_diff(softmax(x.narrow(1, 0, 1), 1),
                     ones({3, 1, 5, 6}, TensorOptions(DType::f64))) == 0);
  CHECK(softmax(scalar_tensor(3.0), 0).item() == 1.0);
  CHECK(softmax(empty({0, 4}), 1).numel() == 0);
}

TEST_CASE("softmax: extreme values, -inf rows, bf16, errors") {
  Tensor x = vec({1000, 0, -1000, -std::numeric_limits<double>::infinity()}, {1, 4});
  std::vector<double> y = softmax(x, 1).to_vector();
  CHECK(y[0] == doctest::Approx(1.0));
  CHECK(y[3] == 0.0);
  CHECK(std::isfinite(log_softmax(x, 1).to_vector()[2]));
  // A row of -inf is NaN, as in PyTorch.
  Tensor all_inf =
      full({2, 3}, -std::numeric_limits<double>::infinity(), TensorOptions(DType::f64));
  CHECK(std::isnan(softmax(all_inf, 1).to_vector()[0]));
  Tensor b = randn({7, 33}).to(DType::bf16);
  CHECK(max_abs_diff(softmax(b, 1).to(DType::f32), softmax(b.to(DType::f32), 1)) < 1e-2);
  CHECK(contains(error_of([] { (void)softmax(ones({2, 3}), 2); }), "softmax"));
  CHECK(contains(error_of([] { (void)log_softmax(ones({2}, TensorOptions(DType::i32)), 0); }),
                 "log_softmax"));
}

TEST_CASE("softmax: the CPU slot is in the algorithm cache and can be forced") {
  auto& slot = softmax_slot(dispatch::Direction::forward, DeviceType::CPU);
  CHECK(slot.find("rowwise") >= 0);
  dispatch::AlgoSettingsGuard guard(dispatch::current_algo_settings().force("softmax", "rowwise"));
  CHECK(max_abs_diff(softmax(ones({2, 4}), 1), full({2, 4}, 0.25)) == 0);
}

TEST_CASE("cross_entropy: hand-computed losses and PyTorch's reduction semantics") {
  Tensor x = vec({1, 2, 3, 1, 0, -1}, {2, 3});
  Tensor t = longs({2, 0}, {2});
  const double lse0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  const double lse1 = std::log(std::exp(1.0) + std::exp(0.0) + std::exp(-1.0));
  const double l0 = lse0 - 3, l1 = lse1 - 1;
  CHECK(cross_entropy(x, t).item() == doctest::Approx((l0 + l1) / 2).epsilon(1e-6));
  CHECK(cross_entropy(x, t, CrossEntropyOptions().with_reduction(LossReduction::sum)).item() ==
        doctest::Approx(l0 + l1).epsilon(1e-6));
  std::vector<double> none =
      cross_entropy(x, t, CrossEntropyOptions().with_reduction(LossReduction::none)).to_vector();
  CHECK(none[0] == doctest::Approx(l0).epsilon(1e-6));
  CHECK(none[1] == doctest::Approx(l1).epsilon(1e-6));

  // Weighted mean divides by the weights of the non-ignored targets.
  Tensor w = vec({0.5, 2.0, 4.0}, {3});
  Tensor t3 = longs({2, 0, -100}, {3});
  Tensor x3 = cat({x, vec({5, 5, 5}, {1, 3})}, 0);
  const double weighted = (4.0 * l0 + 0.5 * l1) / (4.0 + 0.5);
  CHECK(cross_entropy(x3, t3, CrossEntropyOptions().with_weight(w)).item() ==
        doctest::Approx(weighted).epsilon(1e-6));
  // Label smoothing s: (1 - s) * nll + s / C * sum_c w[c] (lse - x[c]), same divisor.
  const double s = 0.3;
  auto smooth = [&](double lse, std::vector<double> row) {
    double acc = 0;
    for (int c = 0; c < 3; ++c) acc += w.to_vector()[size_t(c)] * (lse - row[size_t(c)]);
    return acc;
  };
  const double expect = ((1 - s) * (4.0 * l0 + 0.5 * l1) +
                         s / 3 * (smooth(lse0, {1, 2, 3}) + smooth(lse1, {1, 0, -1}))) /
                        4.5;
  CHECK(
      cross_entropy(x3, t3, CrossEntropyOptions().with_weight(w).with_label_smoothing(s)).item() ==
      doctest::Approx(expect).epsilon(1e-6));
  // Every target ignored: the mean is NaN, the sum 0.
  Tensor ignored = longs({-100, -100}, {2});
  CHECK(std::isnan(cross_entropy(x, ignored).item()));
  CHECK(
      cross_entropy(x, ignored, CrossEntropyOptions().with_reduction(LossReduction::sum)).item() ==
      0);
  // A custom ignore_index, and the gradient of an ignored row is zero.
  Tensor xg = x.clone().set_requires_grad(true);
  cross_entropy(xg, longs({2, 1}, {2}), CrossEntropyOptions().with_ignore_index(1)).backward();
  std::vector<double> g = xg.grad().to_vector();
  CHECK(g[3] == 0);
  CHECK(g[4] == 0);
  CHECK(g[5] == 0);
  CHECK(g[2] == doctest::Approx(std::exp(3 - lse0) - 1).epsilon(1e-6));
}

TEST_CASE("cross_entropy: layouts, unbatched input, nll_loss equivalence, low precision") {
  Tensor x = randn({2, 5, 3, 4}, TensorOptions(DType::f64));
  Tensor t = randint(0, 5, {2, 3, 4});
  auto none = CrossEntropyOptions().with_reduction(LossReduction::none);
  Tensor ref = cross_entropy(x, t, none);
  // Against the definition: -log_softmax gathered at the target.
  Tensor lp = log_softmax(x, 1);
  Tensor picked = gather(lp, 1, t.unsqueeze(1)).squeeze(1);
  CHECK(max_abs_diff(ref, neg(picked)) < 1e-12);
  CHECK(max_abs_diff(cross_entropy(x.contiguous(MemoryFormat::channels_last), t, none), ref) <
        1e-12);
  CHECK(max_abs_diff(nll_loss(lp, t, NllLossOptions().with_reduction(LossReduction::none)), ref) <
        1e-12);
  // Unbatched [C] with a 0-d target.
  Tensor row = vec({0.5, -1, 2}, {3});
  Tensor loss = cross_entropy(row, longs({2}, {1}).squeeze(0));
  CHECK(loss.dim() == 0);
  CHECK(loss.item() == doctest::Approx(-log_softmax(row, 0).to_vector()[2]).epsilon(1e-9));
  // bf16 logits: loss in bf16, close to the float result.
  Tensor xb = randn({6, 10});
  Tensor tb = randint(0, 10, {6});
  Tensor lb = cross_entropy(xb.to(DType::bf16), tb);
  CHECK(lb.dtype() == DType::bf16);
  CHECK(std::abs(lb.item() - cross_entropy(xb, tb).item()) < 3e-2);
}

TEST_CASE("cross_entropy / nll_loss: bad input is a clear error") {
  Tensor x = randn({3, 4});
  CHECK(contains(error_of([&] { (void)cross_entropy(x, longs({0, 4, 1}, {3})); }), "out of range"));
  CHECK(contains(error_of([&] { (void)cross_entropy(x, longs({0, -1, 1}, {3})); }), "-1"));
  CHECK(contains(error_of([&] { (void)nll_loss(x, longs({0, 9, 1}, {3})); }), "nll_loss"));
  CHECK(contains(error_of([&] {
                   (void)cross_entropy(x, longs({0, 1}, {2}));
                 }),
                 "expected target [3]"));
  CHECK(contains(error_of([&] {
                   (void)cross_entropy(x, vec({0, 1, 2}, {3}, DType::f32));
                 }),
                 "class indices"));
  CHECK(contains(
      error_of([&] {
        (void)cross_entropy(x, longs({0, 1, 2}, {3}), CrossEntropyOptions().with_weight(ones({5})));
      }),
      "weight must be [4]"));
  CHECK(contains(error_of([&] {
                   (void)cross_entropy(x, longs({0, 1, 2}, {3}),
                                       CrossEntropyOptions().with_label_smoothing(1.5));
                 }),
                 "label_smoothing"));
}

TEST_CASE("pooling: hand-computed values, indices, sizes, layouts") {
  Tensor x = arange(16, TensorOptions(DType::f64)).reshape({1, 1, 4, 4});
  auto [values, indices] = max_pool2d_with_indices(x, {2});
  CHECK(values.to_vector() == std::vector<double>{5, 7, 13, 15});
  CHECK(indices.to_vector() == std::vector<double>{5, 7, 13, 15});
  // Padding: the padded border never wins; stride 1 with padding 1 keeps the size.
  CHECK(max_pool2d(x, {3}, {1}, {1}).sizes() == Shape{1, 1, 4, 4});
  // ceil_mode adds the partial window; the one starting in the padding is dropped.
  CHECK(max_pool2d(x, {2}, {3}, {0}, {1}, true).sizes() == Shape{1, 1, 2, 2});
  CHECK(max_pool2d(ones({1, 1, 5, 5}), {2}, {2}, {1}, {1}, true).sizes() == Shape{1, 1, 3, 3});
  // Average with and without the padding in the divisor.
  Tensor one = ones({1, 1, 3, 3}, TensorOptions(DType::f64));
  CHECK(avg_pool2d(one, {3}, {1}, {1}).to_vector()[0] == doctest::Approx(4.0 / 9));
  CHECK(avg_pool2d(one, {3}, {1}, {1}, false, false).to_vector()[0] == doctest::Approx(1.0));
  // Adaptive: 5 -> 3 averages [0, 2), [1, 4), [3, 5).
  Tensor r = arange(5, TensorOptions(DType::f64)).reshape({1, 1, 5});
  CHECK(adaptive_avg_pool1d(r, {3}).to_vector() == std::vector<double>{0.5, 2, 3.5});
  // Global average, channels_last kept, 3-D and unbatched inputs.
  Tensor img = randn({2, 3, 5, 6}, TensorOptions(DType::f64));
  Tensor cl = img.contiguous(MemoryFormat::channels_last);
  CHECK(max_abs_diff(global_avg_pool2d(img), mean(img, {2, 3}, true)) < 1e-12);
  Tensor pooled_cl = max_pool2d(cl, {3}, {2}, {1});
  CHECK(pooled_cl.is_contiguous(MemoryFormat::channels_last));
  CHECK(max_abs_diff(pooled_cl, max_pool2d(img, {3}, {2}, {1})) == 0);
  CHECK(max_abs_diff(avg_pool2d(cl, {2}), avg_pool2d(img, {2})) < 1e-12);
  CHECK(max_abs_diff(max_pool2d(img.select(0, 1), {2}), max_pool2d(img, {2}).select(0, 1)) == 0);
  Tensor vol = randn({1, 2, 4, 4, 4}, TensorOptions(DType::f64));
  CHECK(max_abs_diff(avg_pool3d(vol, {1, 2, 2}).select(2, 0), avg_pool2d(vol.select(2, 0), {2})) <
        1e-12);
}

TEST_CASE("pooling: the CPU slots are in the algorithm cache, in every mode") {
  using dispatch::Direction;
  for (Direction d : {Direction::forward, Direction::backward})
    CHECK(pool_slot(d, DeviceType::CPU).names() == std::vector<std::string>{"direct"});
  // Max pooling's taps written by the forward and read by the backward: the same gradients
  // whichever way the cache chooses.
  Tensor x = randn({2, 4, 7, 7}, TensorOptions(DType::f64)).contiguous(MemoryFormat::channels_last);
  auto grad_of = [&](const dispatch::AlgoSettings& settings) {
    dispatch::AlgoSettingsGuard guard(settings);
    Tensor xg = x.clone().set_requires_grad(true);
    (max_pool2d(xg, {3}, {2}, {1}) * x.narrow(2, 0, 4).narrow(3, 0, 4)).sum().backward();
    return xg.grad();
  };
  const Tensor expect = grad_of(dispatch::AlgoSettings{});
  using dispatch::AlgoMode;
  for (const dispatch::AlgoSettings& s :
       {dispatch::AlgoSettings{}.with_mode(AlgoMode::benchmark),
        dispatch::AlgoSettings{}.with_mode(AlgoMode::deterministic),
        dispatch::AlgoSettings{}.force("pooling", "direct")})
    CHECK(max_abs_diff(grad_of(s), expect) == 0);
  // Packed taps are the CUDA kernels' alone.
  PoolProblem p;
  p.args.input = x;
  p.indices = PoolIndices::taps_packed;
  CHECK(pool_slot(Direction::forward, DeviceType::CPU).get<PoolProblem>(0).applies(p) == false);
}

TEST_CASE("pooling: bad arguments") {
  Tensor x = randn({1, 2, 5, 5});
  CHECK(contains(error_of([&] { (void)max_pool2d(x, {2}, {2}, {2}); }), "at most half"));
  CHECK(contains(error_of([&] { (void)max_pool2d(x, {7}); }), "too small"));
  CHECK(contains(error_of([&] { (void)avg_pool2d(x, {2, 2, 2}); }), "1 or 2 values"));
  CHECK(contains(error_of([&] { (void)max_pool2d(randn({5, 5}), {2}); }), "max_pool2d"));
  CHECK(contains(error_of([&] { (void)adaptive_avg_pool2d(x, {0, 2}); }), "positive"));
  CHECK(contains(error_of([&] { (void)max_pool2d(x, {0}); }), "positive"));
}

TEST_CASE("dropout: Philox mask, scaling, gradient, eval mode") {
  Tensor x = randn({37, 11});
  Generator g1(Device::cpu(), 123), g2(Device::cpu(), 123);
  DropoutResult r = dropout_with_mask(x, 0.25, true, &g1);
  // The same draws as bernoulli(1 - p) from the same generator state.
  Tensor expect_mask = bernoulli(x, 0.75, &g2);
  CHECK(max_abs_diff(r.mask.to(DType::f32), expect_mask) == 0);
  CHECK(max_abs_diff(r.output, x * r.mask.to(DType::f32) / 0.75) < 1e-6);
  const double kept = sum(r.mask.to(DType::f32)).item() / double(x.numel());
  CHECK(kept > 0.65);
  CHECK(kept < 0.85);
  // Reproducible from the seed; the next call draws a new mask.
  Generator g3(Device::cpu(), 123);
  CHECK(max_abs_diff(dropout(x, 0.25, true, &g3), r.output) == 0);
  CHECK(max_abs_diff(dropout(x, 0.25, true, &g3), r.output) > 0);
  // Gradient: mask / (1 - p).
  Tensor xg = x.clone().set_requires_grad(true);
  Generator g4(Device::cpu(), 123);
  dropout(xg, 0.25, true, &g4).sum().backward();
  CHECK(max_abs_diff(xg.grad(), r.mask.to(DType::f32) / 0.75) < 1e-6);
  // Eval mode and p = 0 are the identity; p = 1 zeroes.
  CHECK(dropout(x, 0.5, false).is_same(x));
  CHECK(max_abs_diff(dropout(x, 1.0), zeros_like(x)) == 0);
  CHECK(contains(error_of([&] { (void)dropout(x, 1.5); }), "p must be in [0, 1]"));
  // Non-contiguous input: mask in logical order.
  Generator g5(Device::cpu(), 9), g6(Device::cpu(), 9);
  Tensor xt = x.t();
  CHECK(max_abs_diff(dropout(xt, 0.5, true, &g5), dropout(xt.contiguous(), 0.5, true, &g6)) == 0);
}

TEST_CASE("layout: nchw <-> nhwc conversion and the fast copy path") {
  for (Shape s : {Shape{2, 3, 4, 5}, Shape{1, 17, 33, 2}, Shape{2, 3, 2, 3, 4}}) {
    CAPTURE(shape_str(s));
    Tensor x = randn(s);
    Tensor y = nchw_to_nhwc(x);
    CHECK(y.is_contiguous(MemoryFormat::channels_last));
    CHECK(max_abs_diff(y, x) == 0);
    Tensor back = nhwc_to_nchw(y);
    CHECK(back.is_contiguous());
    CHECK(max_abs_diff(back, x) == 0);
    Tensor dst = empty(s, DType::f32, Device::cpu(), MemoryFormat::channels_last);
    CHECK(try_fast_layout_copy(dst, x));
    CHECK(max_abs_diff(dst, x) == 0);
  }
  Tensor x = randn({2, 3, 4, 5});
  Tensor already = x.contiguous(MemoryFormat::channels_last);
  CHECK(nchw_to_nhwc(already).is_same(already));
  // Not this path: same layout, different dtype, non-dense source.
  CHECK_FALSE(try_fast_layout_copy(empty({2, 3, 4, 5}), x));
  CHECK_FALSE(try_fast_layout_copy(
      empty({2, 3, 4, 5}, DType::f64, Device::cpu(), MemoryFormat::channels_last), x));
  CHECK_FALSE(try_fast_layout_copy(
      empty({2, 3, 2, 5}, DType::f32, Device::cpu(), MemoryFormat::channels_last),
      x.narrow(2, 0, 2)));
  Tensor xg = x.clone().set_requires_grad(true);
  (nchw_to_nhwc(xg) * 3.0).sum().backward();
  CHECK(max_abs_diff(xg.grad(), full({2, 3, 4, 5}, 3.0)) == 0);
}
