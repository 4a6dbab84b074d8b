// CUDA vs CPU for what the op table's value-and-gradient parity does not see in the ops of
// ops/pooling_more.h and ops/interpolate.h: the int64 indices of max pooling (1-d, 3-d) and
// adaptive max pooling, max unpooling of them, and the layers of nn/pooling_more.h,
// nn/norm_more.h and nn/upsampling.h moved to the GPU. Skips without a GPU.
#include <doctest/doctest.h>

#include "ember/ember.h"
#include "ember/nn/nn.h"
#include "ember/ops/interpolate.h"
#include "ember/ops/pooling_more.h"

using namespace ember;

namespace {
Tensor cpu_randn(const Shape& shape, uint64_t seed) {
  Generator gen(Device::cpu(), seed);
  return randn(shape, TensorOptions(DType::f32), &gen);
}
}  // namespace

TEST_CASE("pooling indices on CUDA equal the CPU's" * doctest::skip(!cuda::is_available())) {
  const Tensor x1 = cpu_randn({2, 3, 11}, 1), x3 = cpu_randn({2, 3, 5, 6, 7}, 2);
  const Tensor x2 = cpu_randn({2, 3, 9, 13}, 3);
  auto a = max_pool1d_with_indices(x1, {3}, {2}, {1});
  auto b = max_pool1d_with_indices(x1.to(Device::cuda()), {3}, {2}, {1});
  CHECK(b.indices.to(Device::cpu()).equal(a.indices));
  a = max_pool3d_with_indices(x3, {2, 3, 2}, {2}, {1, 1, 0}, {1}, true);
  b = max_pool3d_with_indices(x3.to(Device::cuda()), {2, 3, 2}, {2}, {1, 1, 0}, {1}, true);
  CHECK(b.indices.to(Device::cpu()).equal(a.indices));
  CHECK(b.values.to(Device::cpu()).equal(a.values));
  for (const IntList& out : {IntList{1}, IntList{4, 5}, IntList{9, 13}, IntList{12, 20}}) {
    CAPTURE(out.size());
    a = adaptive_max_pool2d_with_indices(x2, out);
    b = adaptive_max_pool2d_with_indices(x2.to(Device::cuda()), out);
    CHECK(b.indices.device() == Device::cuda());
    CHECK(b.indices.to(Device::cpu()).equal(a.indices));
    CHECK(b.values.to(Device::cpu()).equal(a.values));
  }
  a = adaptive_max_pool3d_with_indices(x3, {2, 3, 4});
  b = adaptive_max_pool3d_with_indices(x3.to(Device::cuda()), {2, 3, 4});
  CHECK(b.indices.to(Device::cpu()).equal(a.indices));
  // Unpooling the CUDA indices on CUDA puts the values where the CPU does.
  a = max_pool2d_with_indices(x2, {2}, {2});
  b = max_pool2d_with_indices(x2.to(Device::cuda()), {2}, {2});
  CHECK(max_unpool2d(b.values, b.indices, {2}, {}, {0}, IntList{9, 13})
            .to(Device::cpu())
            .equal(max_unpool2d(a.values, a.indices, {2}, {}, {0}, IntList{9, 13})));
}

TEST_CASE("vision ops on CUDA: empty batches and bf16" * doctest::skip(!cuda::is_available())) {
  const Tensor empty = zeros({0, 3, 4, 5}, TensorOptions(DType::f32).with_device(Device::cuda()));
  CHECK(interpolate(empty, std::vector<int64_t>{8, 10}, {}, "bilinear").sizes() ==
        Shape{0, 3, 8, 10});
  CHECK(adaptive_max_pool2d(empty, {2, 2}).sizes() == Shape{0, 3, 2, 2});
  CHECK(unfold(empty, {2}).sizes() == Shape{0, 12, 12});
  const Tensor x = cpu_randn({2, 3, 6, 7}, 4).to(DType::bf16);
  for (const char* mode : {"nearest", "bilinear", "bicubic"}) {
    CAPTURE(mode);
    Tensor g = interpolate(x.to(Device::cuda()), std::vector<int64_t>{9, 5}, {}, mode);
    Tensor c = interpolate(x, std::vector<int64_t>{9, 5}, {}, mode);
    CHECK(g.dtype() == DType::bf16);
    CHECK(g.to(Device::cpu()).to(DType::f32).allclose(c.to(DType::f32), 2e-2, 2e-2));
  }
}

TEST_CASE("the new layers run on CUDA as on the CPU" * doctest::skip(!cuda::is_available())) {
  const Tensor x = cpu_randn({2, 4, 6, 5}, 5);
  nn::InstanceNorm2d in(nn::InstanceNormOptions(4).affine(true).track_running_stats(true));
  nn::InstanceNorm2d in_gpu(nn::InstanceNormOptions(4).affine(true).track_running_stats(true));
  in_gpu->to(Device::cuda());
  CHECK(in_gpu(x.to(Device::cuda())).to(Device::cpu()).allclose(in(x), 1e-4, 1e-5));
  CHECK(in_gpu->running_var.to(Device::cpu()).allclose(in->running_var, 1e-4, 1e-6));
  nn::RMSNorm rms(nn::RMSNormOptions({6, 5}));
  const Tensor y = rms(x);
  rms->to(Device::cuda());
  CHECK(rms(x.to(Device::cuda())).to(Device::cpu()).allclose(y, 1e-4, 1e-6));
  nn::Upsample up(nn::UpsampleOptions().scale_factor(std::vector<double>{1.5}).mode("bilinear"));
  CHECK(up(x.to(Device::cuda())).to(Device::cpu()).allclose(up(x), 1e-4, 1e-6));
  nn::Fold fold(nn::FoldOptions({6, 5}, 2));
  nn::Unfold unfold_layer(2);
  const Tensor cols = unfold_layer(x);
  CHECK(unfold_layer(x.to(Device::cuda())).to(Device::cpu()).equal(cols));
  CHECK(fold(cols.to(Device::cuda())).to(Device::cpu()).allclose(fold(cols), 1e-5, 1e-6));
  nn::ReflectionPad2d pad_layer(2);
  CHECK(pad_layer(x.to(Device::cuda())).to(Device::cpu()).equal(pad_layer(x)));
  nn::LPPool2d lp(2.0, 2);
  CHECK(lp(x.to(Device::cuda())).to(Device::cpu()).allclose(lp(x), 1e-4, 1e-5));
}
