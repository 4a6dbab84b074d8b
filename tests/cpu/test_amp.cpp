// Autocast on the CPU: the guard's thread-local scoping, the casting policy of autocast_input(s),
// and the dtypes each layer and loss produces and receives under bf16 and fp16 scopes (the policy
// table of nn/amp.h), with gradients reaching the float32 parameters in float32.
#include <doctest/doctest.h>

#include <thread>

#include "ember/ember.h"
#include "ember/nn/nn.h"

using namespace ember;
using nn::OpClass;

TEST_CASE("AutocastGuard: scoped, nested, thread-local") {
  CHECK_FALSE(nn::autocast_enabled());
  {
    nn::AutocastGuard bf16(DType::bf16);
    CHECK(nn::autocast_enabled());
    CHECK(nn::autocast_dtype() == DType::bf16);
    {
      nn::AutocastGuard f16(DType::f16);
      CHECK(nn::autocast_dtype() == DType::f16);
      {
        nn::AutocastGuard off(DType::f16, false);
        CHECK_FALSE(nn::autocast_enabled());
      }
      CHECK(nn::autocast_enabled());
      CHECK(nn::autocast_dtype() == DType::f16);
    }
    CHECK(nn::autocast_dtype() == DType::bf16);
    bool other_thread_enabled = true;
    std::thread([&] { other_thread_enabled = nn::autocast_enabled(); }).join();
    CHECK_FALSE(other_thread_enabled);
  }
  CHECK_FALSE(nn::autocast_enabled());
  CHECK_THROWS_WITH_AS(nn::AutocastGuard{DType::f32}, doctest::Contains("bfloat16 or float16"),
                       Error);
}

TEST_CASE("autocast_input: which tensors are cast, and to what") {
  Tensor f32 = randn({2, 2}), f64 = randn({2, 2}, TensorOptions(DType::f64));
  Tensor bf16 = f32.to(DType::bf16), f16 = f32.to(DType::f16),
         idx = zeros({2}, TensorOptions(DType::i64));
  CHECK(
      nn::autocast_input(f32, OpClass::low_precision).is_same(f32));  // outside a scope: untouched
  nn::AutocastGuard guard(DType::bf16);
  CHECK(nn::autocast_input(f32, OpClass::low_precision).dtype() == DType::bf16);
  CHECK(nn::autocast_input(f16, OpClass::low_precision).dtype() == DType::bf16);
  CHECK(nn::autocast_input(bf16, OpClass::low_precision).is_same(bf16));
  CHECK(nn::autocast_input(f64, OpClass::low_precision).is_same(f64));  // float64 is never lowered
  CHECK(nn::autocast_input(idx, OpClass::low_precision).is_same(idx));
  CHECK(nn::autocast_input(bf16, OpClass::fp32).dtype() == DType::f32);
  CHECK(nn::autocast_input(f32, OpClass::fp32).is_same(f32));
  CHECK(nn::autocast_input(f64, OpClass::fp32).is_same(f64));
  CHECK_FALSE(nn::autocast_input(Tensor(), OpClass::fp32).defined());

  auto promoted = nn::autocast_inputs({bf16, f32, idx, Tensor()}, OpClass::promote);
  CHECK(promoted[0].dtype() == DType::f32);
  CHECK(promoted[1].is_same(f32));
  CHECK(promoted[2].is_same(idx));
  CHECK_FALSE(promoted[3].defined());
  auto mixed_low = nn::autocast_inputs({bf16, f16}, OpClass::promote);
  CHECK(mixed_low[0].dtype() == DType::f32);
  CHECK(mixed_low[1].dtype() == DType::f32);
  auto same_low = nn::autocast_inputs({bf16, bf16}, OpClass::promote);
  CHECK(same_low[1].is_same(bf16));

  // The cast is differentiable: the float32 source gets a float32 gradient.
  Tensor leaf = randn({3}).set_requires_grad(true);
  Tensor low = nn::autocast_input(leaf, OpClass::low_precision);
  (low * 2.0).sum().backward();
  CHECK(leaf.grad().dtype() == DType::f32);
  CHECK(leaf.grad().to_vector() == std::vector<double>{2, 2, 2});
}

TEST_CASE("the layer policy under bf16 and fp16") {
  manual_seed(9);
  for (DType low : {DType::bf16, DType::f16}) {
    CAPTURE(dtype_name(low));
    nn::Linear fc(8, 4);
    nn::Conv2d conv(nn::Conv2dOptions(3, 4, 3).padding(1));
    nn::Conv1d conv1(3, 2, 3);
    nn::BatchNorm2d bn(4);
    nn::LayerNorm ln(nn::LayerNormOptions({4}));
    nn::GroupNorm gn(2, 4);
    nn::Embedding emb(10, 4);
    Tensor x = randn({2, 8}), img = randn({2, 3, 5, 5});
    Tensor ref_fc = fc->forward(x);

    nn::AutocastGuard guard(low);
    Tensor y = fc->forward(x);
    CHECK(y.dtype() == low);                  // matmul in low precision
    CHECK(fc->weight.dtype() == DType::f32);  // parameters stay float32
    CHECK(allclose(y.to(DType::f32), ref_fc, 0.05, 0.05));
    Tensor c = conv->forward(img);
    CHECK(c.dtype() == low);
    CHECK(conv1->forward(randn({2, 3, 6})).dtype() == low);
    CHECK(nn::Conv3d(2, 2, 1)(randn({1, 2, 2, 2, 2})).dtype() == low);
    CHECK(nn::ConvTranspose2d(3, 2, 2)(img).dtype() == low);
    CHECK(nn::MaxPool2d(2)(c).dtype() == low);  // pooling keeps its dtype
    CHECK(bn->forward(c).dtype() == low);       // statistics in float32 inside the op
    CHECK(nn::ReLU()(c).dtype() == low);        // activations keep their dtype
    CHECK(ln->forward(y).dtype() == DType::f32);
    CHECK(gn->forward(c).dtype() == DType::f32);
    CHECK(nn::Softmax(1)(y).dtype() == DType::f32);
    CHECK(emb->forward(zeros({3}, TensorOptions(DType::i64))).dtype() == DType::f32);
    Tensor t = from_vector({1, 3}, {2}, TensorOptions(DType::i64));
    CHECK(nn::cross_entropy(y, t).dtype() == DType::f32);
    CHECK(nn::mse_loss(y, zeros({2, 4})).dtype() == DType::f32);
    CHECK(nn::l1_loss(y, y.detach()).dtype() == DType::f32);
    CHECK(nn::binary_cross_entropy_with_logits(y, zeros({2, 4})).dtype() == DType::f32);
    CHECK(nn::nll_loss(log_softmax(y.to(DType::f32), 1), t).dtype() == DType::f32);
    // The op-level losses follow the same policy as nn's (PyTorch casts them at the op).
    Tensor ce = cross_entropy(y, t);
    CHECK(ce.dtype() == DType::f32);
    CHECK(ce.item() == doctest::Approx(nn::cross_entropy(y, t).item()));
    CHECK(nll_loss(log_softmax(y, 1), t).dtype() == DType::f32);
    CHECK(cross_entropy(y.to(DType::f64), t).dtype() == DType::f64);  // float64 stays
  }
  Tensor low_logits = randn({2, 4}).to(DType::bf16);
  CHECK(cross_entropy(low_logits, from_vector({1, 3}, {2}, TensorOptions(DType::i64))).dtype() ==
        DType::bf16);  // no autocast: the input's dtype
}

TEST_CASE("a training step under autocast: float32 gradients close to the float32 step") {
  manual_seed(4);
  nn::Sequential net(nn::Linear(6, 16), nn::ReLU(), nn::Linear(16, 3));
  Tensor x = randn({32, 6});
  Tensor target = randint(0, 3, {32});

  auto grads = [&](bool amp) {
    net->zero_grad();
    nn::AutocastGuard guard(DType::bf16, amp);
    Tensor logits = net->forward(x);
    CHECK(logits.dtype() == (amp ? DType::bf16 : DType::f32));
    Tensor loss = nn::cross_entropy(logits, target);
    CHECK(loss.dtype() == DType::f32);
    loss.backward();
    std::vector<Tensor> g;
    for (auto& p : net->parameters()) g.push_back(p.grad().clone());
    return g;
  };
  auto full = grads(false);
  auto mixed = grads(true);
  REQUIRE(full.size() == mixed.size());
  for (size_t i = 0; i < full.size(); ++i) {
    CAPTURE(i);
    CHECK(mixed[i].dtype() == DType::f32);
    const double scale = amax(abs(full[i])).item();
    CHECK(max_abs_diff(mixed[i], full[i]) < 0.05 * scale + 1e-3);
  }
}
