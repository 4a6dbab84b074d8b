// nn layers on CUDA against the CPU: the same weights and inputs give the same outputs, parameter
// gradients and running statistics (fp32, and channels_last for the conv net); losses; autocast
// dtypes on the GPU; checkpoints saved from GPU tensors. Every case skips without a GPU.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>

#include "ember/ember.h"
#include "ember/nn/nn.h"

using namespace ember;

namespace {

struct ConvNetImpl : nn::Module {
  ConvNetImpl() : nn::Module("ConvNet") {
    conv1 = register_module(
        "conv1", nn::Conv2d(nn::Conv2dOptions(3, 8, 3).stride(2).padding(1).bias(false)));
    bn1 = register_module("bn1", nn::BatchNorm2d(8));
    conv2 = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(8, 8, 3).padding(1).groups(2)));
    gn = register_module("gn", nn::GroupNorm(4, 8));
    conv1d = register_module("conv1d", nn::Conv1d(nn::Conv1dOptions(8, 6, 3).padding(1)));
    ln = register_module("ln", nn::LayerNorm(nn::LayerNormOptions({6})));
    head =
        register_module("head", nn::Sequential(nn::Linear(6, 10), nn::GELU(), nn::Linear(10, 5)));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = bn1->forward_relu(conv1->forward(x));
    h = bn1->forward_add_relu(conv2->forward(h), h);
    h = nn::SiLU()(gn->forward(h));
    h = conv1d->forward(h.mean({2}));              // [N, 6, W']
    h = ln->forward(h.transpose(1, 2)).mean({1});  // [N, 6]
    return head->forward(nn::LeakyReLU()(h));
  }
  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  nn::BatchNorm2d bn1{nullptr};
  nn::GroupNorm gn{nullptr};
  nn::Conv1d conv1d{nullptr};
  nn::LayerNorm ln{nullptr};
  nn::Sequential head{nullptr};
};
EMBER_MODULE(ConvNet);

struct RunResult {
  Tensor out;
  std::vector<Tensor> grads;
  nn::NamedTensors state;
};

RunResult run(ConvNet& net, const Tensor& x, const Tensor& target) {
  net->zero_grad();
  Tensor out = net->forward(x);
  nn::cross_entropy(out, target, CrossEntropyOptions().with_label_smoothing(0.1)).backward();
  RunResult r{out.detach().cpu(), {}, {}};
  for (auto& p : net->parameters()) r.grads.push_back(p.grad().cpu());
  for (auto& [n, t] : net->state_dict()) r.state.emplace_back(n, t.cpu());
  return r;
}

}  // namespace

TEST_CASE("nn modules on CUDA match the CPU: forward, backward, running statistics" *
          doctest::skip(!cuda::is_available())) {
  const bool saved_tf32 = conv_allow_tf32();
  set_conv_allow_tf32(false);  // compare full fp32 convolutions
  for (bool channels_last : {false, true}) {
    CAPTURE(channels_last);
    manual_seed(21);
    ConvNet cpu_net;
    ConvNet gpu_net;
    gpu_net->load_state_dict(cpu_net->state_dict());
    gpu_net->to(Device::cuda());
    if (channels_last) gpu_net->to(MemoryFormat::channels_last);
    Tensor x = randn({4, 3, 9, 9});
    Tensor target = from_vector({0, 4, 2, 1}, {4}, TensorOptions(DType::i64));
    RunResult a = run(cpu_net, x, target);
    Tensor xg = x.cuda();
    if (channels_last) xg = xg.contiguous(MemoryFormat::channels_last);
    RunResult b = run(gpu_net, xg, target.cuda());
    CHECK(allclose(b.out, a.out, 1e-4, 1e-5));
    REQUIRE(a.grads.size() == b.grads.size());
    for (size_t i = 0; i < a.grads.size(); ++i) {
      CAPTURE(i);
      CHECK(allclose(b.grads[i], a.grads[i], 1e-3, 1e-5));
    }
    for (size_t i = 0; i < a.state.size(); ++i) {
      CAPTURE(a.state[i].first);
      CHECK(
          allclose(b.state[i].second.to(DType::f64), a.state[i].second.to(DType::f64), 1e-4, 1e-6));
    }
    // eval uses the running statistics on both devices.
    cpu_net->eval();
    gpu_net->eval();
    CHECK(allclose(gpu_net->forward(xg).cpu(), cpu_net->forward(x), 1e-4, 1e-5));
  }
  set_conv_allow_tf32(saved_tf32);
}

TEST_CASE("Conv3d and ConvTranspose2d on CUDA match the CPU" *
          doctest::skip(!cuda::is_available())) {
  const bool saved_tf32 = conv_allow_tf32();
  set_conv_allow_tf32(false);
  manual_seed(13);
  nn::Sequential cpu_net(
      nn::ConvTranspose2d(
          nn::ConvTranspose2dOptions(3, 4, 3).stride(2).padding(1).output_padding(1)),
      nn::ReLU(), nn::Conv2d(4, 2, 3));
  nn::Sequential gpu_net(
      nn::ConvTranspose2d(
          nn::ConvTranspose2dOptions(3, 4, 3).stride(2).padding(1).output_padding(1)),
      nn::ReLU(), nn::Conv2d(4, 2, 3));
  gpu_net->load_state_dict(cpu_net->state_dict());
  gpu_net->to(Device::cuda());
  nn::Conv3d c3(nn::Conv3dOptions(2, 3, {2, 3, 3}).padding({0, 1, 1}));
  nn::Conv3d c3_gpu(nn::Conv3dOptions(2, 3, {2, 3, 3}).padding({0, 1, 1}));
  c3_gpu->load_state_dict(c3->state_dict());
  c3_gpu->to(Device::cuda());
  Tensor x = randn({2, 3, 5, 5}), v = randn({2, 2, 4, 6, 6});
  Tensor y = cpu_net->forward(x), yg = gpu_net->forward(x.cuda());
  CHECK(allclose(yg.cpu(), y, 1e-4, 1e-5));
  Tensor z = c3->forward(v), zg = c3_gpu->forward(v.cuda());
  CHECK(allclose(zg.cpu(), z, 1e-4, 1e-5));
  (square(y).sum() + z.sum()).backward();
  (square(yg).sum() + zg.sum()).backward();
  auto pc = cpu_net->parameters(), pg = gpu_net->parameters();
  for (size_t i = 0; i < pc.size(); ++i)
    CHECK(allclose(pg[i].grad().cpu(), pc[i].grad(), 1e-3, 1e-4));
  CHECK(allclose(c3_gpu->weight.grad().cpu(), c3->weight.grad(), 1e-3, 1e-4));
  set_conv_allow_tf32(saved_tf32);
}

TEST_CASE("Embedding and losses on CUDA match the CPU" * doctest::skip(!cuda::is_available())) {
  manual_seed(5);
  nn::Embedding emb(nn::EmbeddingOptions(7, 4).padding_idx(0));
  nn::Embedding emb_gpu(nn::EmbeddingOptions(7, 4).padding_idx(0));
  emb_gpu->load_state_dict(emb->state_dict());
  emb_gpu->to(Device::cuda());
  Tensor idx = from_vector({0, 3, 6, 0, 2, 3}, {2, 3}, TensorOptions(DType::i64));
  Tensor w = randn({2, 3, 4});
  (emb->forward(idx) * w).sum().backward();
  (emb_gpu->forward(idx.cuda()) * w.cuda()).sum().backward();
  CHECK(allclose(emb_gpu->weight.grad().cpu(), emb->weight.grad(), 1e-5, 1e-6));

  using Loss = std::function<Tensor(const Tensor&, const Tensor&)>;
  std::vector<std::pair<const char*, Loss>> losses = {
      {"mse", [](const Tensor& a, const Tensor& b) { return nn::mse_loss(a, b); }},
      {"l1",
       [](const Tensor& a, const Tensor& b) { return nn::l1_loss(a, b, nn::LossReduction::sum); }},
      {"bce",
       [](const Tensor& a, const Tensor& b) {
         Tensor pw = full({5}, 2.0, TensorOptions().with_device(a.device()));
         return nn::binary_cross_entropy_with_logits(
             a, b, nn::BCEWithLogitsOptions().with_pos_weight(pw));
       }},
  };
  for (auto& [name, loss] : losses) {
    CAPTURE(name);
    Tensor a = (randn({3, 5}) * 3.0).set_requires_grad(true),
           b = rand({3, 5}).set_requires_grad(true);
    Tensor ag = a.detach().cuda().set_requires_grad(true),
           bg = b.detach().cuda().set_requires_grad(true);
    Tensor lc = loss(a, b), lg = loss(ag, bg);
    CHECK(lg.item() == doctest::Approx(lc.item()).epsilon(1e-5));
    lc.backward();
    lg.backward();
    CHECK(allclose(ag.grad().cpu(), a.grad(), 1e-4, 1e-6));
    CHECK(allclose(bg.grad().cpu(), b.grad(), 1e-4, 1e-6));
  }
}

TEST_CASE("autocast on CUDA: bf16 and fp16 layers, float32 losses and gradients" *
          doctest::skip(!cuda::is_available())) {
  manual_seed(8);
  for (DType low : {DType::bf16, DType::f16}) {
    CAPTURE(dtype_name(low));
    ConvNet net;
    net->to(Device::cuda());
    Tensor x = randn({4, 3, 9, 9}).cuda();
    Tensor target = from_vector({0, 4, 2, 1}, {4}, TensorOptions(DType::i64)).cuda();
    Tensor ref = net->forward(x).detach();
    nn::AutocastGuard guard(low);
    Tensor out = net->forward(x);
    CHECK(out.dtype() == low);
    CHECK(allclose(out.to(DType::f32), ref, 0.1, 0.1));
    Tensor loss = nn::cross_entropy(out, target);
    CHECK(loss.dtype() == DType::f32);
    loss.backward();
    for (auto& p : net->parameters()) {
      CHECK(p.grad().dtype() == DType::f32);
      CHECK(isfinite(p.grad()).to(DType::f32).mean().item() == 1.0);
    }
  }
}

TEST_CASE("checkpoints from GPU tensors round trip" * doctest::skip(!cuda::is_available())) {
  manual_seed(2);
  ConvNet net;
  net->to(Device::cuda());
  net->forward(randn({2, 3, 9, 9}).cuda());
  auto path = (std::filesystem::temp_directory_path() /
               ("ember_nn_cuda_" + std::to_string(::getpid()) + ".safetensors"))
                  .string();
  nn::save_state_dict(*net, path);
  ConvNet back;
  nn::load_state_dict(*back, path);
  std::filesystem::remove(path);
  auto a = net->state_dict(), b = back->state_dict();
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i].first);
    CHECK(max_abs_diff(a[i].second.cpu(), b[i].second) == 0);
  }
}
