// The layers and functionals of nn/pooling_more.h, nn/norm_more.h, nn/padding.h and
// nn/upsampling.h on the CPU: outputs against reference numbers from libtorch 1.13.1 (each output
// summarized by its sum and its cosine-weighted sum, which any misplaced or mis-weighted element
// changes), state_dict names, options and printing, and the errors bad input raises. The inputs
// are sin(1.3 i + 0.2) * 2 in row-major order, as the reference program made them.
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>

#include "ember/ember.h"
#include "ember/nn/nn.h"
#include "ember/ops/interpolate.h"
#include "ember/ops/norm_more.h"
#include "ember/ops/pooling_more.h"
#include "support/errors.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;

namespace {

namespace F = nn::functional;
using Sizes = std::vector<int64_t>;
using Scales = std::vector<double>;

// The reference program's input: sin(1.3 i + 0.2) * 2, float32.
Tensor gen(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = std::sin(1.3 * double(i) + 0.2) * 2;
  return from_vector(v, shape).to(DType::f32);
}

// Checks t's shape and its two summaries against libtorch's.
void check_sig(const Tensor& t, const Shape& shape, double sum, double weighted,
               double tol = 2e-5) {
  CHECK(t.sizes() == shape);
  std::vector<double> v = t.contiguous().to(DType::f64).to_vector();
  double s1 = 0, s2 = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    s1 += v[i];
    s2 += v[i] * std::cos(0.37 * double(i));
  }
  CHECK(s1 == doctest::Approx(sum).epsilon(tol).scale(1.0));
  CHECK(s2 == doctest::Approx(weighted).epsilon(tol).scale(1.0));
}

std::vector<std::string> names_of(const nn::NamedTensors& named) {
  std::vector<std::string> out;
  for (auto& [n, t] : named) out.push_back(n);
  return out;
}

std::string printed(const nn::Module& m) {
  std::ostringstream os;
  m.pretty_print(os);
  return os.str();
}

}  // namespace

TEST_CASE("interpolate matches libtorch in every mode") {
  const Tensor x = gen({1, 2, 3, 4});
  const Shape s57 = {1, 2, 5, 7}, s59 = {1, 2, 5, 9}, s23 = {1, 2, 2, 3};
  check_sig(interpolate(x, Sizes{5, 7}), s57, 1.1445784, 4.51548877);
  check_sig(interpolate(x, {}, Scales{1.7, 2.3}), s59, 0.976222008, -3.40502389);
  check_sig(interpolate(x, Sizes{2, 3}), s23, 0.350947335, 4.30438452);
  check_sig(interpolate(x, Sizes{5, 7}, {}, "nearest-exact"), s57, -0.0204087496, 1.74555749);
  check_sig(interpolate(x, {}, Scales{1.7, 2.3}, "nearest-exact"), s59, 1.13939571, -6.28368712);
  check_sig(interpolate(x, Sizes{5, 7}, {}, "bilinear", false), s57, 0.593386869, 2.07951209);
  check_sig(interpolate(x, Sizes{5, 7}, {}, "bilinear", true), s57, 0.807012573, 2.2413268);
  check_sig(interpolate(x, Sizes{2, 3}, {}, "bilinear"), s23, 0.0610887557, -0.149014171);
  check_sig(interpolate(x, {}, Scales{1.7, 2.3}, "bilinear"), s59, 0.889985971, -0.00822971735);
  check_sig(interpolate(x, {}, Scales{1.7, 2.3}, "bilinear", false, true), s59, 0.746975124,
            -0.210724479);
  check_sig(interpolate(x, Sizes{5, 7}, {}, "bicubic"), s57, 0.579853326, 2.13862537);
  check_sig(interpolate(x, Sizes{5, 7}, {}, "bicubic", true), s57, 0.918213546, 2.07598972);
  check_sig(interpolate(x, Sizes{2, 3}, {}, "bicubic"), s23, 0.0845896006, 0.293871814);
  check_sig(interpolate(x, Sizes{2, 3}, {}, "area"), s23, 0.205056369, 3.20631245);

  const Tensor x1 = gen({2, 2, 5});
  check_sig(interpolate(x1, Sizes{8}, {}, "linear"), {2, 2, 8}, -0.034960378, 1.5261214);
  check_sig(interpolate(x1, Sizes{8}, {}, "linear", true), {2, 2, 8}, 0.0232865512, 1.65809221);
  check_sig(interpolate(x1, Sizes{8}), {2, 2, 8}, 3.93962245, 0.380384801);

  const Tensor x3 = gen({1, 1, 2, 3, 3});
  check_sig(interpolate(x3, Sizes{3, 4, 5}, {}, "trilinear"), {1, 1, 3, 4, 5}, 10.4471971,
            0.310323031);
  check_sig(interpolate(x3, Sizes{3, 4, 5}, {}, "trilinear", true), {1, 1, 3, 4, 5}, 8.8990366,
            0.251447591);
  check_sig(interpolate(x3, {}, Scales{2, 1.5, 2}), {1, 1, 4, 4, 6}, 29.2683221, -7.59172993);

  // The module and F::interpolate with options say the same.
  nn::Upsample up(nn::UpsampleOptions().size(Sizes{5, 7}).mode("bicubic").align_corners(true));
  check_sig(up(x), s57, 0.918213546, 2.07598972);
  check_sig(F::interpolate(x, F::InterpolateFuncOptions().scale_factor(Scales{1.7, 2.3})), s59,
            0.976222008, -3.40502389);
  CHECK(contains(printed(*up), "Upsample(size=[5, 7], mode=bicubic, align_corners=true)"));
}

TEST_CASE("interpolate: bad arguments name the op and the shapes") {
  const Tensor x = gen({1, 2, 3, 4});
  CHECK(contains(error_of([&] { interpolate(x, Sizes{5}, {}, "linear"); }), "needs a 3-d input"));
  CHECK(contains(error_of([&] {
                   interpolate(x, Sizes{5, 7}, {}, "nearest", true);
                 }),
                 "align_corners can only be set"));
  CHECK(contains(error_of([&] {
                   interpolate(x, Sizes{5, 7}, Scales{2});
                 }),
                 "only one of size and scale_factor"));
  CHECK(contains(error_of([&] { interpolate(x, std::nullopt); }), "either size or scale_factor"));
  CHECK(contains(error_of([&] { interpolate(x, Sizes{1, 2, 3}); }), "[1, 2, 3, 4]"));
  CHECK(contains(error_of([&] { interpolate(x, Sizes{5, 7}, {}, "cubic"); }), "unknown mode"));
  CHECK(contains(error_of([&] { interpolate(gen({2, 3}), Sizes{4}); }), "interpolate"));
  CHECK(contains(error_of([&] {
                   interpolate(x.to(DType::u8), Sizes{5, 7}, {}, "bilinear");
                 }),
                 "needs a floating input"));
  CHECK(interpolate(x.to(DType::u8), Sizes{5, 7}).dtype() == DType::u8);
  CHECK(contains(error_of([&] {
                   nn::Upsample(nn::UpsampleOptions().size(Sizes{2}).mode("area"))(gen({1, 1, 4}));
                 }),
                 "Upsample"));
}

TEST_CASE("adaptive max pooling matches libtorch, indices included") {
  auto [v2, i2] = adaptive_max_pool2d_with_indices(gen({1, 2, 5, 7}), {3, 4});
  check_sig(v2, {1, 2, 3, 4}, 43.9434303, 5.63410262);
  check_sig(i2, {1, 2, 3, 4}, 409, -41.8664944);
  CHECK(i2.dtype() == DType::i64);
  auto [v1, i1] = adaptive_max_pool1d_with_indices(gen({2, 3, 10}), {4});
  check_sig(v1, {2, 3, 4}, 30.9647951, 6.90158305);
  check_sig(i1, {2, 3, 4}, 106, 3.11334996);
  auto [v3, i3] = adaptive_max_pool3d_with_indices(gen({1, 1, 4, 5, 6}), {2, 3, 4});
  check_sig(v3, {1, 1, 2, 3, 4}, 44.1529717, 4.96681339);
  check_sig(i3, {1, 1, 2, 3, 4}, 1456, 269.944723);

  nn::AdaptiveMaxPool2d pool(nn::AdaptiveMaxPool2dOptions({3, 4}));
  auto [mv, mi] = pool->forward_with_indices(gen({1, 2, 5, 7}));
  CHECK(mi.equal(i2));
  CHECK(pool(gen({2, 5, 7})).sizes() == Shape{2, 3, 4});  // unbatched
  CHECK(contains(printed(*pool), "AdaptiveMaxPool2d(output_size=[3, 4])"));
  // Ties go to the first maximum in window order, as PyTorch.
  Tensor flat = zeros({1, 1, 2, 2});
  CHECK(adaptive_max_pool2d_with_indices(flat, {1}).indices.item() == 0);
  CHECK(contains(error_of([&] { adaptive_max_pool2d(gen({2, 3}), {1}); }), "[2, 3]"));
  CHECK(contains(error_of([&] { adaptive_max_pool2d(gen({1, 2, 3, 4}), {0, 1}); }), "output_size"));
}

TEST_CASE("LP pooling matches libtorch") {
  const Tensor x = gen({1, 2, 5, 7});
  check_sig(lp_pool2d(x, 2, {2, 3}, {1}), {1, 2, 4, 5}, 138.096622, 9.75242788, 1e-4);
  check_sig(lp_pool1d(abs(gen({2, 3, 10})), 1.5, {3}, {2}), {2, 3, 4}, 66.5744998, 6.4990529, 1e-4);
  nn::LPPool2d pool(nn::LPPool2dOptions(2, {2, 3}).stride(1));
  CHECK(pool(x).allclose(lp_pool2d(x, 2, {2, 3}, {1})));
  CHECK(contains(printed(*pool), "LPPool2d(norm_type=2.0, kernel_size=[2, 3], stride=[1, 1]"));
  nn::LPPool1d pool1(2.0, 3);
  CHECK(pool1(gen({2, 9})).sizes() == Shape{2, 3});
  CHECK(contains(error_of([&] { lp_pool2d(x, 0, {2}); }), "norm_type"));
}

TEST_CASE("fold and unfold match libtorch and are adjoint") {
  const Tensor x = gen({1, 2, 4, 5});
  const Tensor u = unfold(x, {2, 3}, {1, 2}, {1}, {2, 1});
  check_sig(u, {1, 12, 9}, -2.03488782, 0.123172188);
  check_sig(fold(u, {4, 5}, {2, 3}, {1, 2}, {1}, {2, 1}), {1, 2, 4, 5}, -2.03488782, 1.88163625);
  check_sig(unfold(x, {2}), {1, 8, 12}, -11.7139201, 0.183677738);

  nn::Unfold um(nn::UnfoldOptions({2, 3}).dilation({1, 2}).padding(1).stride({2, 1}));
  nn::Fold fm(nn::FoldOptions({4, 5}, {2, 3}).dilation({1, 2}).padding(1).stride({2, 1}));
  CHECK(um(x).equal(u));
  CHECK(fm(u).allclose(fold(u, {4, 5}, {2, 3}, {1, 2}, {1}, {2, 1})));
  CHECK(um(gen({2, 4, 5})).sizes() == Shape{12, 9});  // unbatched
  CHECK(contains(printed(*fm), "Fold(output_size=[4, 5], kernel_size=[2, 3], dilation=[1, 2]"));
  CHECK(contains(error_of([&] { fold(u, {4, 5}, {1, 5}); }), "divisible"));
  CHECK(contains(error_of([&] {
                   fold(gen({1, 12, 8}), {4, 5}, {2, 3}, {1, 2}, {1}, {2, 1});
                 }),
                 "holds 8 blocks"));
  CHECK(contains(error_of([&] { unfold(x, {5}); }), "does not fit"));
}

TEST_CASE("max unpooling inverts max pooling's placement") {
  const Tensor x = gen({1, 2, 4, 5});
  // Named tensors, not structured bindings: clang 14 rejects lambdas that capture bindings.
  const auto pooled = max_pool2d_with_indices(x, {2});
  const Tensor v = pooled.values, i = pooled.indices;
  check_sig(max_unpool2d(v, i, {2}, {}, {0}, Sizes{4, 5}), {1, 2, 4, 5}, 6.0259531, -0.209233677);
  nn::MaxUnpool2d unpool(2);
  CHECK(unpool->forward(v, i, Sizes{1, 2, 4, 5})
            .equal(max_unpool2d(v, i, {2}, {}, {0}, Sizes{4, 5})));
  auto [v4, i4] = max_pool2d_with_indices(gen({1, 1, 4, 4}), {2});
  CHECK(unpool->forward(v4, i4).sizes() == Shape{1, 1, 4, 4});  // the default output size
  CHECK(contains(error_of([&] {
                   max_unpool2d(v, i, {2}, {}, {0}, Sizes{9, 5});
                 }),
                 "within stride"));
  CHECK(contains(error_of([&] { max_unpool2d(v, add(i, 100.0), {2}); }), "invalid max index"));
  CHECK(contains(error_of([&] { max_unpool2d(v, i.to(DType::i32), {2}); }), "int64"));
}

TEST_CASE("max pooling 1d and 3d with indices, and unpooling them") {
  // 1-d: the same positions as 2-d pooling of a height-1 plane.
  const Tensor x1 = gen({2, 3, 9});
  auto [v1, i1] = max_pool1d_with_indices(x1, {3}, {2}, {1});
  auto ref = max_pool2d_with_indices(x1.unsqueeze(2), {1, 3}, {1, 2}, {0, 1});
  CHECK(v1.equal(ref.values.squeeze(2)));
  CHECK(i1.equal(ref.indices.squeeze(2)));
  // 3-d: each index points at its value in the flattened plane; unpooling puts it back.
  const Tensor x3 = gen({1, 2, 4, 4, 6});
  nn::MaxPool3d pool(2);
  auto [v3, i3] = pool->forward_with_indices(x3);
  CHECK(v3.equal(pool(x3)));
  CHECK(gather(x3.reshape({1, 2, -1}), 2, i3.reshape({1, 2, -1})).equal(v3.reshape({1, 2, -1})));
  const Tensor back = nn::MaxUnpool3d(2)->forward(v3, i3);
  CHECK(back.sizes() == x3.sizes());
  CHECK(gather(back.reshape({1, 2, -1}), 2, i3.reshape({1, 2, -1})).equal(v3.reshape({1, 2, -1})));
  CHECK(sum(abs(back)).item() == doctest::Approx(sum(abs(v3)).item()));
  auto [mv, mi] = nn::MaxPool1d(3)->forward_with_indices(x1);
  CHECK(mi.equal(max_pool1d_with_indices(x1, {3}).indices));
  CHECK(nn::MaxUnpool1d(3)->forward(mv, mi).sizes() == Shape{2, 3, 9});
}

TEST_CASE("pooling layers wrap the ops") {
  const Tensor x1 = gen({2, 3, 9}), x3 = gen({1, 2, 4, 6, 5});
  CHECK(nn::MaxPool1d(nn::MaxPool1dOptions(3).stride(2))(x1).equal(max_pool1d(x1, {3}, {2})));
  CHECK(nn::MaxPool3d(2)(x3).equal(max_pool3d(x3, {2})));
  CHECK(nn::AvgPool1d(3)(x1).allclose(avg_pool1d(x1, {3})));
  CHECK(nn::AvgPool3d(nn::AvgPool3dOptions(2).padding(1).count_include_pad(false))(x3).allclose(
      avg_pool3d(x3, {2}, {}, {1}, false, false)));
  CHECK(nn::AdaptiveAvgPool1d(4)(x1).allclose(adaptive_avg_pool1d(x1, {4})));
  CHECK(nn::AdaptiveAvgPool3d(nn::AdaptiveAvgPool3dOptions({1, 2, 3}))(x3).sizes() ==
        Shape{1, 2, 1, 2, 3});
  CHECK(nn::AdaptiveMaxPool1d(4)(x1).equal(adaptive_max_pool1d(x1, {4})));
  CHECK(nn::AdaptiveMaxPool3d(2)(x3).equal(adaptive_max_pool3d(x3, {2})));
  nn::MaxPool1d mp(3);
  CHECK(mp->parameters().empty());
  CHECK(contains(printed(*mp), "MaxPool1d(kernel_size=[3], stride=[3], padding=[0]"));
  auto copy = mp.clone();
  CHECK(copy->options.kernel_size()[0] == 3);
}

TEST_CASE("padding layers: sizes, values and printing") {
  const Tensor x = gen({1, 1, 3, 3});
  CHECK(nn::ZeroPad2d(1)(x).sizes() == Shape{1, 1, 5, 5});
  CHECK(nn::ZeroPad2d(nn::ZeroPad2dOptions({1, 0, 2, 0}))(x).equal(pad(x, {1, 0, 2, 0})));
  CHECK(nn::ZeroPad1d(2)(gen({2, 3})).sizes() == Shape{2, 7});
  CHECK(nn::ZeroPad3d(nn::ZeroPad3dOptions({1, 1, 0, 0, 2, 0}))(gen({1, 2, 2, 2})).sizes() ==
        Shape{1, 4, 2, 4});
  Tensor c = nn::ConstantPad1d(nn::ConstantPad1dOptions(2, 3.5))(gen({1, 2}));
  CHECK(c.to_vector() ==
        std::vector<double>{3.5, 3.5, gen({2}).to_vector()[0], gen({2}).to_vector()[1], 3.5, 3.5});
  CHECK(nn::ConstantPad2d(1, -1.0)(x).sizes() == Shape{1, 1, 5, 5});
  CHECK(nn::ConstantPad3d(1, 0.5)(gen({1, 1, 1, 1})).sizes() == Shape{1, 3, 3, 3});
  CHECK(nn::ReflectionPad2d(nn::ReflectionPad2dOptions({1, 2, 2, 1}))(x).equal(
      pad(x, {1, 2, 2, 1}, "reflect")));
  CHECK(nn::ReflectionPad1d(1)(gen({1, 3})).to_vector()[0] == gen({3}).to_vector()[1]);
  CHECK(nn::ReflectionPad3d(1)(gen({1, 2, 2, 2})).sizes() == Shape{1, 4, 4, 4});
  CHECK(nn::ReplicationPad2d(2)(x).equal(pad(x, {2, 2, 2, 2}, "replicate")));
  CHECK(nn::ReplicationPad1d(nn::ReplicationPad1dOptions({0, 2}))(gen({1, 3})).to_vector()[4] ==
        gen({3}).to_vector()[2]);
  CHECK(nn::ReplicationPad3d(1)(gen({1, 1, 2, 2, 2})).sizes() == Shape{1, 1, 4, 4, 4});
  CHECK(nn::CircularPad2d(1)(x).equal(pad(x, {1, 1, 1, 1}, "circular")));
  CHECK(nn::CircularPad1d(nn::CircularPad1dOptions({1, 0}))(gen({1, 3})).to_vector()[0] ==
        gen({3}).to_vector()[2]);
  CHECK(nn::CircularPad3d(1)(gen({1, 2, 2, 2})).sizes() == Shape{1, 4, 4, 4});
  CHECK(contains(printed(*nn::ReflectionPad2d(nn::ReflectionPad2dOptions({1, 2, 2, 1}))),
                 "ReflectionPad2d(padding=[1, 2, 2, 1])"));
  CHECK(contains(printed(*nn::ConstantPad1d(2, 3.5)), "ConstantPad1d(padding=[2, 2], value=3.5)"));
  CHECK(contains(error_of([&] { nn::ReflectionPad2d(3)(x); }), "reflect"));
  CHECK(contains(error_of([&] { nn::ZeroPad3d(1)(gen({2, 2})); }), "ZeroPad3d"));
}

TEST_CASE("PixelShuffle and PixelUnshuffle round trip") {
  const Tensor x = gen({2, 8, 3, 2});
  nn::PixelShuffle ps(2);
  nn::PixelUnshuffle pu(2);
  CHECK(ps(x).sizes() == Shape{2, 2, 6, 4});
  CHECK(ps(x).equal(pixel_shuffle(x, 2)));
  CHECK(pu(ps(x)).equal(x));
  CHECK(contains(printed(*ps), "PixelShuffle(upscale_factor=2)"));
}

TEST_CASE("InstanceNorm: running statistics and state_dict as libtorch") {
  nn::InstanceNorm2d in(
      nn::InstanceNormOptions(2).track_running_stats(true).affine(true).momentum(0.2));
  CHECK(names_of(in->named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK(names_of(in->named_buffers()) ==
        std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"});
  const Tensor x = gen({3, 2, 3, 4});
  check_sig(in(x), {3, 2, 3, 4}, 1.3737008e-07, 1.78851193, 1e-4);
  in(add(mul(x, 2.0), 1.0));
  check_sig(in->running_mean, {2}, 0.411434896, 0.404840761);
  check_sig(in->running_var, {2}, 5.38903046, 5.20654804);
  in->eval();
  check_sig(in(x), {3, 2, 3, 4}, -8.57401301, 0.876879324);
  CHECK(in(gen({2, 3, 4})).sizes() == Shape{2, 3, 4});  // unbatched

  // Defaults: no parameters, no buffers; input statistics in eval too.
  nn::InstanceNorm1d plain(3);
  CHECK(plain->state_dict().empty());
  plain->eval();
  const Tensor x1 = gen({2, 3, 6});
  CHECK(plain(x1).allclose(instance_norm(x1)));
  CHECK(nn::InstanceNorm3d(2)(gen({1, 2, 2, 3, 2})).sizes() == Shape{1, 2, 2, 3, 2});
  CHECK(contains(printed(*plain),
                 "InstanceNorm1d(3, eps=1e-05, momentum=0.1, affine=false, "
                 "track_running_stats=false)"));
  CHECK(contains(error_of([&] { nn::InstanceNorm2d(nn::InstanceNormOptions(4).affine(true))(x); }),
                 "num_features (4)"));
  CHECK(contains(error_of([&] { nn::InstanceNorm2d(2)(gen({2, 3})); }), "InstanceNorm2d"));
  // A state dict made by one loads into another.
  nn::InstanceNorm2d other(nn::InstanceNormOptions(2).track_running_stats(true).affine(true));
  other->load_state_dict(in->state_dict());
  CHECK(other->running_var.allclose(in->running_var));
}

TEST_CASE("BatchNorm3d") {
  nn::BatchNorm3d bn(3);
  CHECK(names_of(bn->state_dict()) == std::vector<std::string>{"weight", "bias", "running_mean",
                                                               "running_var",
                                                               "num_batches_tracked"});
  const Tensor x = gen({2, 3, 2, 2, 3});
  CHECK(bn(x).allclose(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true)));
  CHECK(bn->num_batches_tracked.item() == 1);
  CHECK(contains(error_of([&] { bn(gen({2, 3, 4, 4})); }), "BatchNorm3d: expected a 5-D"));
  CHECK(contains(printed(*bn), "BatchNorm3d(3, eps=1e-05"));
}

TEST_CASE("RMSNorm and rms_norm (PyTorch 2.4 semantics)") {
  // x = [1, 2, 3, 4]: mean square 7.5.
  const Tensor x = from_vector({1, 2, 3, 4}, {1, 4});
  const double r = 1 / std::sqrt(7.5 + 1e-6);
  Tensor y = rms_norm(x, {4}, from_vector({1, 1, 2, 2}, {4}), 1e-6);
  CHECK(y.to_vector()[3] == doctest::Approx(8 * r));
  CHECK(y.to_vector()[0] == doctest::Approx(r));
  // eps unset: float32's machine epsilon.
  const Tensor zero = zeros({2, 3});
  CHECK(rms_norm(add(zero, 1e-4), {3}).to_vector()[0] ==
        doctest::Approx(1e-4 / std::sqrt(1e-8 + 1.1920928955078125e-07)).epsilon(1e-4));

  nn::RMSNorm norm(nn::RMSNormOptions({3, 4}).eps(1e-5));
  CHECK(names_of(norm->state_dict()) == std::vector<std::string>{"weight"});
  CHECK(norm->weight.sizes() == Shape{3, 4});
  const Tensor x3 = gen({2, 3, 4});
  CHECK(norm(x3).allclose(rms_norm(x3, {3, 4}, Tensor(), 1e-5)));
  CHECK(nn::RMSNorm(nn::RMSNormOptions({4}).elementwise_affine(false))->parameters().empty());
  CHECK(contains(printed(*norm), "RMSNorm([3, 4], eps=1e-05, elementwise_affine=true)"));
  CHECK(rms_norm(x3.to(DType::bf16), {4}).dtype() == DType::bf16);
  CHECK(contains(error_of([&] { norm(gen({2, 4, 3})); }), "[2, 4, 3]"));
}
