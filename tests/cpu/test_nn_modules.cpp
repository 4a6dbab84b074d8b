// nn layers on the CPU: registration order and state_dict names (PyTorch's), load_state_dict
// errors, to(dtype), train/eval, PyTorch's default initialization (statistics of many draws),
// nn::init, options builders and printing, layer forwards against the ops they wrap, containers,
// and the losses (hand-computed values and fp64 gradcheck of the op-table rows).
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>

#include "ember/ember.h"
#include "ember/nn/nn.h"
#include "support/op_table.h"

using namespace ember;

namespace {

std::vector<std::string> names_of(const nn::NamedTensors& named) {
  std::vector<std::string> out;
  for (auto& [n, t] : named) out.push_back(n);
  return out;
}

struct Moments {
  double mean = 0, var = 0, min = 0, max = 0;
};
Moments moments(const Tensor& t) {
  std::vector<double> v = t.to_vector();
  Moments m{0, 0, v[0], v[0]};
  for (double x : v) {
    m.mean += x;
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
  }
  m.mean /= double(v.size());
  for (double x : v) m.var += (x - m.mean) * (x - m.mean);
  m.var /= double(v.size());
  return m;
}

// A small model with nested modules, a ModuleList and buffers, as users write them.
struct BlockImpl : nn::Module {
  BlockImpl() : nn::Module("Block") {
    conv = register_module("conv", nn::Conv2d(nn::Conv2dOptions(2, 4, 3).padding(1).bias(false)));
    bn = register_module("bn", nn::BatchNorm2d(4));
    heads = register_module("heads", nn::ModuleList(nn::Linear(4, 3), nn::Linear(3, 2)));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = bn->forward(conv->forward(x)).relu().mean({2, 3});
    for (auto& m : *heads) h = std::dynamic_pointer_cast<nn::LinearImpl>(m)->forward(h);
    return h;
  }
  nn::Conv2d conv{nullptr};
  nn::BatchNorm2d bn{nullptr};
  nn::ModuleList heads{nullptr};
};
EMBER_MODULE(Block);

std::string printed(const nn::Module& m) {
  std::ostringstream os;
  m.pretty_print(os);
  return os.str();
}

}  // namespace

TEST_CASE("state_dict names and order follow PyTorch") {
  nn::Sequential seq(nn::Conv2d(3, 4, 3), nn::BatchNorm2d(4));
  CHECK(names_of(seq->state_dict()) ==
        std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                 "1.running_var", "1.num_batches_tracked"});
  CHECK(names_of(seq->named_parameters()) ==
        std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias"});
  CHECK(names_of(seq->named_buffers()) ==
        std::vector<std::string>{"1.running_mean", "1.running_var", "1.num_batches_tracked"});
  auto sd = seq->state_dict();
  CHECK(sd[6].second.dtype() == DType::i64);
  CHECK(sd[6].second.dim() == 0);

  Block block;
  CHECK(names_of(block->state_dict()) ==
        std::vector<std::string>{"conv.weight", "bn.weight", "bn.bias", "bn.running_mean",
                                 "bn.running_var", "bn.num_batches_tracked", "heads.0.weight",
                                 "heads.0.bias", "heads.1.weight", "heads.1.bias"});
  CHECK(block->num_parameters() == 4 * 2 * 9 + 4 + 4 + (4 * 3 + 3) + (3 * 2 + 2));
  CHECK(block->forward(randn({2, 2, 5, 5})).sizes() == Shape{2, 2});
}

TEST_CASE("load_state_dict: round trip and clear errors") {
  Block a, b;
  b->load_state_dict(a->state_dict());
  for (size_t i = 0; i < a->state_dict().size(); ++i)
    CHECK(max_abs_diff(a->state_dict()[i].second, b->state_dict()[i].second) == 0);

  auto missing = a->state_dict();
  missing.pop_back();
  auto message = [&](const nn::NamedTensors& sd) {
    try {
      b->load_state_dict(sd);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message(missing).find("missing keys: heads.1.bias") != std::string::npos);

  auto unexpected = a->state_dict();
  unexpected.emplace_back("heads.2.weight", zeros({1}));
  CHECK(message(unexpected).find("unexpected keys: heads.2.weight") != std::string::npos);

  auto misshaped = a->state_dict();
  misshaped[0].second = zeros({4, 2, 3, 1});
  std::string m = message(misshaped);
  CHECK(m.find("conv.weight") != std::string::npos);
  CHECK(m.find("[4, 2, 3, 1]") != std::string::npos);

  // Non-strict loading takes the matching entries; shapes are still checked.
  Block c;
  c->load_state_dict(missing, false);
  CHECK(max_abs_diff(c->heads->at<nn::LinearImpl>(0).weight,
                     a->heads->at<nn::LinearImpl>(0).weight) == 0);
}

TEST_CASE("Module::to(dtype) converts floating parameters and buffers in place") {
  nn::Sequential seq(nn::Linear(3, 2), nn::BatchNorm1d(2));
  Tensor w = seq->at<nn::LinearImpl>(0).weight;  // a handle taken before the move
  seq->to(DType::f64);
  CHECK(w.dtype() == DType::f64);
  CHECK(seq->at<nn::BatchNormImplBase>(1).running_var.dtype() == DType::f64);
  CHECK(seq->at<nn::BatchNormImplBase>(1).num_batches_tracked.dtype() == DType::i64);
  Tensor y = seq->forward(randn({4, 3}, TensorOptions(DType::f64)));
  CHECK(y.dtype() == DType::f64);
  y.sum().backward();
  CHECK(w.grad().dtype() == DType::f64);
}

TEST_CASE("BatchNorm: train uses and tracks batch statistics, eval uses running statistics") {
  nn::BatchNorm2d bn(nn::BatchNormOptions(2).momentum(0.25));
  Tensor x = randn({4, 2, 3, 3}) * 2.0 + 1.0;
  Tensor y = bn->forward(x);
  Tensor batch_mean = x.mean({0, 2, 3});
  Tensor batch_var = var(x, {0, 2, 3}, 1);
  CHECK(allclose(bn->running_mean, batch_mean * 0.25, 1e-4, 1e-5));
  CHECK(allclose(bn->running_var, batch_var * 0.25 + 0.75, 1e-4, 1e-5));
  CHECK(bn->num_batches_tracked.item() == 1);
  CHECK(std::abs(y.mean().item()) < 1e-5);  // normalized with the batch's own statistics

  bn->eval();
  Tensor ye = bn->forward(x);
  Tensor expect = (x - bn->running_mean.reshape({1, 2, 1, 1})) /
                  sqrt(bn->running_var.reshape({1, 2, 1, 1}) + 1e-5);
  CHECK(allclose(ye, expect, 1e-4, 1e-5));
  CHECK(bn->num_batches_tracked.item() == 1);  // eval does not count

  // momentum = None: a cumulative average of the batch statistics.
  nn::BatchNorm1d cumulative(nn::BatchNormOptions(3).momentum(std::nullopt));
  Tensor a = randn({5, 3}), b = randn({5, 3});
  cumulative->forward(a);
  cumulative->forward(b);
  CHECK(allclose(cumulative->running_mean, (a.mean({0}) + b.mean({0})) * 0.5, 1e-4, 1e-5));
  CHECK(cumulative->num_batches_tracked.item() == 2);

  // Without tracked statistics eval normalizes with the batch's.
  nn::BatchNorm1d untracked(nn::BatchNormOptions(3).track_running_stats(false).affine(false));
  CHECK(untracked->state_dict().empty());
  untracked->eval();
  CHECK(std::abs(untracked->forward(a * 3.0 + 2.0).mean().item()) < 1e-5);

  CHECK_THROWS_WITH_AS(bn->forward(randn({2, 3, 4, 4})), doctest::Contains("expected 2 channels"),
                       Error);
  CHECK_THROWS_WITH_AS(bn->forward(randn({2, 2, 4})), doctest::Contains("4-D"), Error);
}

TEST_CASE("Dropout: active in training, the identity in eval") {
  nn::Dropout drop(0.25);
  Tensor x = ones({4000});
  Tensor y = drop->forward(x);
  std::vector<double> v = y.to_vector();
  double zeros_seen = 0;
  for (double e : v) {
    CHECK((e == 0 || std::abs(e - 1 / 0.75) < 1e-6));
    zeros_seen += e == 0;
  }
  CHECK(zeros_seen / 4000 == doctest::Approx(0.25).epsilon(0.1));
  nn::Sequential net(nn::Linear(3, 3), nn::Dropout(0.9));
  net->eval();
  CHECK_FALSE(net->ptr(1)->is_training());
  CHECK(drop->is_training());
  drop->eval();
  CHECK(drop->forward(x).is_same(x));
  CHECK_THROWS_WITH_AS(nn::Dropout(1.5), doctest::Contains("[0, 1]"), Error);
}

TEST_CASE("fused BatchNorm tails match the composed forms") {
  nn::BatchNorm2d bn(3);
  Tensor x = randn({2, 3, 4, 4}), r = randn({2, 3, 4, 4});
  bn->eval();
  CHECK(allclose(bn->forward_relu(x), bn->forward(x).relu(), 1e-5, 1e-6));
  CHECK(allclose(bn->forward_add_relu(x, r), (bn->forward(x) + r).relu(), 1e-5, 1e-6));
}

TEST_CASE("default initialization matches PyTorch's distributions") {
  manual_seed(7);
  SUBCASE("Linear: weight and bias ~ U(-1/sqrt(in), 1/sqrt(in))") {
    nn::Linear fc(400, 300);
    const double bound = 1.0 / std::sqrt(400.0);
    Moments w = moments(fc->weight);
    CHECK(w.min >= -bound);
    CHECK(w.max <= bound);
    CHECK(w.max > 0.99 * bound);
    CHECK(std::abs(w.mean) < 0.01 * bound);
    CHECK(w.var == doctest::Approx(bound * bound / 3).epsilon(0.02));
    Moments b = moments(fc->bias);
    CHECK(b.min >= -bound);
    CHECK(b.max <= bound);
    CHECK(b.var == doctest::Approx(bound * bound / 3).epsilon(0.25));
  }
  SUBCASE("Conv2d: fan_in = in / groups * kh * kw") {
    nn::Conv2d conv(nn::Conv2dOptions(64, 128, 3).groups(2));
    const double bound = 1.0 / std::sqrt(32.0 * 9.0);
    Moments w = moments(conv->weight);
    CHECK(conv->weight.sizes() == Shape{128, 32, 3, 3});
    CHECK(w.min >= -bound);
    CHECK(w.max <= bound);
    CHECK(w.var == doctest::Approx(bound * bound / 3).epsilon(0.03));
    Moments b = moments(conv->bias);
    CHECK(b.max <= bound);
    CHECK(b.min >= -bound);
  }
  SUBCASE("ConvTranspose2d: weight [in, out / groups, k, k], fan_in = out / groups * k * k") {
    nn::ConvTranspose2d deconv(nn::ConvTranspose2dOptions(64, 32, 3).groups(2));
    CHECK(deconv->weight.sizes() == Shape{64, 16, 3, 3});
    const double bound = 1.0 / std::sqrt(16.0 * 9.0);
    Moments w = moments(deconv->weight);
    CHECK(w.max <= bound);
    CHECK(w.max > 0.99 * bound);
    CHECK(w.var == doctest::Approx(bound * bound / 3).epsilon(0.05));
    nn::Conv3d conv3(nn::Conv3dOptions(4, 8, {3, 1, 2}));
    CHECK(conv3->weight.sizes() == Shape{8, 4, 3, 1, 2});
    CHECK(moments(conv3->weight).max <= 1.0 / std::sqrt(4.0 * 6.0));
  }
  SUBCASE("norm layers: weight 1, bias 0, running stats 0 and 1") {
    nn::BatchNorm2d bn(5);
    CHECK(moments(bn->weight).min == 1);
    CHECK(moments(bn->weight).max == 1);
    CHECK(moments(bn->bias).max == 0);
    CHECK(moments(bn->running_mean).max == 0);
    CHECK(moments(bn->running_var).min == 1);
    nn::LayerNorm ln(nn::LayerNormOptions({4, 5}));
    CHECK(ln->weight.sizes() == Shape{4, 5});
    CHECK(moments(ln->weight).min == 1);
    nn::GroupNorm gn(2, 6);
    CHECK(moments(gn->bias).max == 0);
  }
  SUBCASE("Embedding ~ N(0, 1), padding row zero") {
    nn::Embedding emb(nn::EmbeddingOptions(1000, 200).padding_idx(-1));
    CHECK(*emb->options.padding_idx() == 999);
    Moments m = moments(emb->weight.narrow(0, 0, 999));
    CHECK(std::abs(m.mean) < 0.01);
    CHECK(m.var == doctest::Approx(1.0).epsilon(0.02));
    CHECK(moments(emb->weight.select(0, 999)).max == 0);
    CHECK(moments(emb->weight.select(0, 999)).min == 0);
  }
}

TEST_CASE("nn::init: gains, fans and the initializers") {
  using nn::init::Nonlinearity;
  CHECK(nn::init::calculate_gain(Nonlinearity::relu) == doctest::Approx(std::sqrt(2.0)));
  CHECK(nn::init::calculate_gain(Nonlinearity::tanh) == doctest::Approx(5.0 / 3));
  CHECK(nn::init::calculate_gain(Nonlinearity::leaky_relu) ==
        doctest::Approx(std::sqrt(2.0 / (1 + 1e-4))));
  CHECK(nn::init::calculate_gain(Nonlinearity::leaky_relu, 0.0) == doctest::Approx(std::sqrt(2.0)));
  CHECK(nn::init::calculate_gain(Nonlinearity::selu) == doctest::Approx(0.75));
  CHECK(nn::init::calculate_gain(Nonlinearity::conv2d) == 1.0);
  Tensor w = empty({300, 200, 3});
  CHECK(nn::init::calculate_fans(w).fan_in == 600);
  CHECK(nn::init::calculate_fans(w).fan_out == 900);
  Tensor v = empty({5});
  CHECK_THROWS_AS(nn::init::calculate_fans(v), Error);

  nn::init::kaiming_normal_(w, 0, nn::init::FanMode::fan_in, Nonlinearity::relu);
  CHECK(std::sqrt(moments(w).var) == doctest::Approx(std::sqrt(2.0 / 600)).epsilon(0.02));
  nn::init::kaiming_normal_(w, 0, nn::init::FanMode::fan_out, Nonlinearity::relu);
  CHECK(std::sqrt(moments(w).var) == doctest::Approx(std::sqrt(2.0 / 900)).epsilon(0.02));
  nn::init::kaiming_uniform_(w, 0, nn::init::FanMode::fan_in, Nonlinearity::relu);
  CHECK(moments(w).max <= std::sqrt(6.0 / 600));
  CHECK(moments(w).max > 0.99 * std::sqrt(6.0 / 600));
  nn::init::xavier_uniform_(w, 2.0);
  const double xb = 2.0 * std::sqrt(6.0 / 1500);
  CHECK(moments(w).max <= xb);
  CHECK(moments(w).max > 0.99 * xb);
  nn::init::xavier_normal_(w);
  CHECK(std::sqrt(moments(w).var) == doctest::Approx(std::sqrt(2.0 / 1500)).epsilon(0.02));
  nn::init::normal_(w, 3.0, 0.5);
  CHECK(moments(w).mean == doctest::Approx(3.0).epsilon(0.01));
  nn::init::uniform_(w, -2, -1);
  CHECK(moments(w).min >= -2);
  CHECK(moments(w).max <= -1);
  nn::init::constant_(w, 0.25);
  CHECK(moments(w).min == 0.25);
  nn::init::ones_(w);
  CHECK(moments(w).var == 0);
  Tensor ints = zeros({3}, TensorOptions(DType::i64));
  CHECK_THROWS_WITH_AS(nn::init::normal_(ints), doctest::Contains("floating"), Error);

  // Same seed, same weights.
  manual_seed(11);
  nn::Linear a(8, 8);
  manual_seed(11);
  nn::Linear b(8, 8);
  CHECK(max_abs_diff(a->weight, b->weight) == 0);
}

TEST_CASE("options builders and pretty_print follow libtorch and PyTorch") {
  auto o = nn::Conv2dOptions(3, 64, 3).stride(2).bias(false).padding({1, 0});
  CHECK(o.in_channels() == 3);
  CHECK(o.kernel_size() == nn::ExpandingArray<2>({3, 3}));
  CHECK(o.stride()[1] == 2);
  CHECK(o.padding()[0] == 1);
  CHECK(o.padding()[1] == 0);
  CHECK_FALSE(o.bias());

  struct Row {
    std::shared_ptr<nn::Module> module;
    std::string expected;
  };
  std::vector<Row> rows = {
      {nn::Conv2d(nn::Conv2dOptions(3, 64, 3).stride(2).bias(false)).ptr(),
       "Conv2d(3, 64, kernel_size=[3, 3], stride=[2, 2], bias=false)"},
      {nn::Conv2d(nn::Conv2dOptions(4, 8, {3, 1}).padding(1).dilation(2).groups(2)).ptr(),
       "Conv2d(4, 8, kernel_size=[3, 1], stride=[1, 1], padding=[1, 1], dilation=[2, 2], "
       "groups=2)"},
      {nn::Conv1d(2, 3, 5).ptr(), "Conv1d(2, 3, kernel_size=[5], stride=[1])"},
      {nn::Conv3d(2, 4, 3).ptr(), "Conv3d(2, 4, kernel_size=[3, 3, 3], stride=[1, 1, 1])"},
      {nn::ConvTranspose2d(
           nn::ConvTranspose2dOptions(4, 6, 3).stride(2).padding(1).output_padding(1))
           .ptr(),
       "ConvTranspose2d(4, 6, kernel_size=[3, 3], stride=[2, 2], padding=[1, 1], "
       "output_padding=[1, 1])"},
      {nn::Linear(4, 2).ptr(), "Linear(in_features=4, out_features=2, bias=true)"},
      {nn::BatchNorm2d(64).ptr(),
       "BatchNorm2d(64, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)"},
      {nn::BatchNorm1d(nn::BatchNormOptions(8).momentum(std::nullopt)).ptr(),
       "BatchNorm1d(8, eps=1e-05, momentum=None, affine=true, track_running_stats=true)"},
      {nn::LayerNorm(nn::LayerNormOptions({10})).ptr(),
       "LayerNorm([10], eps=1e-05, elementwise_affine=true)"},
      {nn::GroupNorm(2, 4).ptr(), "GroupNorm(2, 4, eps=1e-05, affine=true)"},
      {nn::Embedding(nn::EmbeddingOptions(10, 3).padding_idx(0)).ptr(),
       "Embedding(10, 3, padding_idx=0)"},
      {nn::ReLU().ptr(), "ReLU()"},
      {nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2)).ptr(),
       "LeakyReLU(negative_slope=0.2)"},
      {nn::ELU().ptr(), "ELU(alpha=1.0)"},
      {nn::GELU(nn::GELUOptions().approximate(GeluApproximation::tanh)).ptr(),
       "GELU(approximate='tanh')"},
      {nn::SiLU().ptr(), "SiLU()"},
      {nn::Sigmoid().ptr(), "Sigmoid()"},
      {nn::Tanh().ptr(), "Tanh()"},
      {nn::Softmax(1).ptr(), "Softmax(dim=1)"},
      {nn::Flatten().ptr(), "Flatten(start_dim=1, end_dim=-1)"},
      {nn::Dropout().ptr(), "Dropout(p=0.5)"},
      {nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)).ptr(),
       "MaxPool2d(kernel_size=[3, 3], stride=[2, 2], padding=[1, 1], dilation=[1, 1], "
       "ceil_mode=false)"},
      {nn::AvgPool2d(2).ptr(), "AvgPool2d(kernel_size=[2, 2], stride=[2, 2], padding=[0, 0])"},
      {nn::AdaptiveAvgPool2d(1).ptr(), "AdaptiveAvgPool2d(output_size=[1, 1])"},
      {nn::Identity().ptr(), "Identity()"},
      {nn::CrossEntropyLoss(nn::CrossEntropyLossOptions().label_smoothing(0.1)).ptr(),
       "CrossEntropyLoss(ignore_index=-100, label_smoothing=0.1, reduction=mean)"},
  };
  for (auto& r : rows) CHECK(printed(*r.module) == r.expected);

  nn::Sequential seq(nn::Linear(4, 2), nn::ReLU());
  CHECK(seq->str() ==
        "Sequential(\n  (0): Linear(in_features=4, out_features=2, bias=true)\n  (1): ReLU()\n)");
}

TEST_CASE("layer forwards match the ops they wrap") {
  manual_seed(3);
  SUBCASE("Linear") {
    nn::Linear fc(5, 3);
    Tensor x = randn({2, 4, 5});
    CHECK(allclose(fc->forward(x), matmul(x, fc->weight.t()) + fc->bias, 1e-5, 1e-6));
    nn::Linear nobias(nn::LinearOptions(5, 3).bias(false));
    CHECK(nobias->named_parameters().size() == 1);
    CHECK(allclose(nobias->forward(x), matmul(x, nobias->weight.t()), 1e-5, 1e-6));
  }
  SUBCASE("Conv1d is a conv2d over a height-1 image") {
    nn::Conv1d conv(nn::Conv1dOptions(4, 6, 3).stride(2).padding(1).dilation(2).groups(2));
    Tensor x = randn({2, 4, 11});
    Conv2dParams p;
    p.stride = {1, 2};
    p.padding = {0, 1};
    p.dilation = {1, 2};
    p.groups = 2;
    Tensor ref = conv2d(x.unsqueeze(2), conv->weight.unsqueeze(2), conv->bias, p).squeeze(2);
    Tensor y = conv->forward(x);
    CHECK(y.sizes() == Shape{2, 6, 5});
    CHECK(allclose(y, ref, 1e-5, 1e-6));
    CHECK(allclose(conv->forward(x.select(0, 1)), ref.select(0, 1), 1e-5, 1e-6));  // unbatched
    // Its weight gradient flows back through the unsqueeze.
    conv->forward(x).sum().backward();
    CHECK(conv->weight.grad().sizes() == conv->weight.sizes());
  }
  SUBCASE("Conv1d: a hand-computed value") {
    nn::Conv1d conv(nn::Conv1dOptions(1, 1, 2).bias(false));
    {
      autograd::NoGradGuard ng;
      conv->weight.copy_(from_vector({1, -1}, {1, 1, 2}));
    }
    CHECK(conv->forward(from_vector({1, 4, 9, 16}, {1, 1, 4})).to_vector() ==
          std::vector<double>{-3, -5, -7});
  }
  SUBCASE("Conv2d, batched and unbatched") {
    nn::Conv2d conv(nn::Conv2dOptions(3, 4, 3).stride(2).padding(1));
    Tensor x = randn({2, 3, 7, 7});
    Conv2dParams p;
    p.stride = {2, 2};
    p.padding = {1, 1};
    Tensor ref = conv2d(x, conv->weight, conv->bias, p);
    CHECK(allclose(conv->forward(x), ref, 1e-5, 1e-6));
    CHECK(allclose(conv->forward(x.select(0, 0)), ref.select(0, 0), 1e-5, 1e-6));
  }
  SUBCASE("Conv3d") {
    nn::Conv3d conv(nn::Conv3dOptions(2, 4, {2, 3, 3}).stride({1, 2, 2}).padding({0, 1, 1}));
    Tensor x = randn({2, 2, 4, 5, 5});
    Conv3dParams p;
    p.stride = {1, 2, 2};
    p.padding = {0, 1, 1};
    Tensor ref = conv3d(x, conv->weight, conv->bias, p);
    CHECK(ref.sizes() == Shape{2, 4, 3, 3, 3});
    CHECK(allclose(conv->forward(x), ref, 1e-5, 1e-6));
    CHECK(allclose(conv->forward(x.select(0, 1)), ref.select(0, 1), 1e-5, 1e-6));
  }
  SUBCASE("ConvTranspose2d: a hand-computed value and the adjoint of Conv2d") {
    nn::ConvTranspose2d up(nn::ConvTranspose2dOptions(1, 1, 2).stride(2).bias(false));
    {
      autograd::NoGradGuard ng;
      up->weight.copy_(from_vector({1, 2, 3, 4}, {1, 1, 2, 2}));
    }
    CHECK(up->forward(from_vector({1, 10}, {1, 1, 1, 2})).to_vector() ==
          std::vector<double>{1, 2, 10, 20, 3, 4, 30, 40});
    // <deconv(x), y> == <x, conv(y)> with the same weight and geometry.
    nn::ConvTranspose2d deconv(
        nn::ConvTranspose2dOptions(4, 6, 3).stride(2).padding(1).output_padding(1).groups(2).bias(
            false));
    Tensor x = randn({2, 4, 5, 5}, TensorOptions(DType::f64));
    deconv->to(DType::f64);
    Tensor y = deconv->forward(x);
    CHECK(y.sizes() == Shape{2, 6, 10, 10});
    Tensor probe = randn(y.sizes(), TensorOptions(DType::f64));
    Conv2dParams p;
    p.stride = {2, 2};
    p.padding = {1, 1};
    p.groups = 2;
    Tensor back = conv2d(probe, deconv->weight, Tensor(), p);
    CHECK(sum(y * probe).item() == doctest::Approx(sum(x * back).item()).epsilon(1e-9));
    ConvTranspose2dParams tp;
    tp.stride = {2, 2};
    tp.padding = {1, 1};
    tp.output_padding = {1, 1};
    tp.groups = 2;
    CHECK(allclose(y, conv_transpose2d(x, deconv->weight, Tensor(), tp)));
    CHECK_THROWS_WITH_AS(nn::ConvTranspose2d(nn::ConvTranspose2dOptions(2, 2, 3).output_padding(1)),
                         doctest::Contains("output_padding"), Error);
  }
  SUBCASE("LayerNorm and GroupNorm") {
    nn::LayerNorm ln(nn::LayerNormOptions({6}));
    Tensor x = randn({3, 6});
    Tensor ref = (x - x.mean({1}, true)) / sqrt(var(x, {1}, 0, true) + 1e-5);
    CHECK(allclose(ln->forward(x), ref, 1e-4, 1e-5));
    nn::GroupNorm gn(2, 4);
    Tensor g = randn({2, 4, 3});
    Tensor gr = g.reshape({2, 2, 6});
    Tensor gref =
        ((gr - gr.mean({2}, true)) / sqrt(var(gr, {2}, 0, true) + 1e-5)).reshape({2, 4, 3});
    CHECK(allclose(gn->forward(g), gref, 1e-4, 1e-5));
  }
  SUBCASE("activations") {
    Tensor x = randn({4, 5});
    CHECK(allclose(nn::ReLU()(x), relu(x)));
    CHECK(
        allclose(nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.3))(x), leaky_relu(x, 0.3)));
    CHECK(allclose(nn::ELU(nn::ELUOptions().alpha(0.7))(x), elu(x, 0.7)));
    CHECK(allclose(nn::GELU()(x), gelu(x)));
    CHECK(allclose(nn::SiLU()(x), silu(x)));
    CHECK(allclose(nn::Sigmoid()(x), sigmoid(x)));
    CHECK(allclose(nn::Tanh()(x), tanh(x)));
    CHECK(allclose(nn::Softmax(1)(x), softmax(x, 1)));
    CHECK(allclose(nn::LogSoftmax(0)(x), log_softmax(x, 0)));
    CHECK(nn::Flatten()(randn({2, 3, 4})).sizes() == Shape{2, 12});
    CHECK(nn::Flatten(nn::FlattenOptions().start_dim(0).end_dim(1))(randn({2, 3, 4})).sizes() ==
          Shape{6, 4});
  }
  SUBCASE("pooling") {
    Tensor x = randn({2, 3, 7, 6});
    CHECK(allclose(nn::MaxPool2d(nn::MaxPool2dOptions({3, 2}).stride(2).padding(1))(x),
                   max_pool2d(x, {3, 2}, {2, 2}, {1, 1})));
    CHECK(
        allclose(nn::AvgPool2d(nn::AvgPool2dOptions(2).ceil_mode(true).count_include_pad(false))(x),
                 avg_pool2d(x, {2, 2}, {2, 2}, {0}, true, false)));
    Tensor g = nn::AdaptiveAvgPool2d(1)(x);
    CHECK(g.sizes() == Shape{2, 3, 1, 1});
    CHECK(allclose(g, x.mean({2, 3}, true), 1e-5, 1e-6));
    // A hand-computed 2x2 max and average.
    Tensor small = from_vector({1, 5, 2, 0, 3, 4, 8, 6, 7}, {1, 1, 3, 3});
    CHECK(nn::MaxPool2d(2)(small).to_vector() == std::vector<double>{5});
    CHECK(nn::MaxPool2d(nn::MaxPool2dOptions(2).stride(1))(small).to_vector() ==
          std::vector<double>{5, 5, 8, 7});
    CHECK(nn::AvgPool2d(nn::AvgPool2dOptions(2).stride(1))(small).to_vector() ==
          std::vector<double>{2.25, 3.5, 4.25, 5});
  }
  SUBCASE("Embedding: lookup, and no gradient into the padding row") {
    nn::Embedding emb(nn::EmbeddingOptions(5, 3).padding_idx(1));
    Tensor idx = from_vector({0, 1, 4, 1}, {2, 2}, TensorOptions(DType::i64));
    Tensor y = emb->forward(idx);
    CHECK(y.sizes() == Shape{2, 2, 3});
    CHECK(allclose(y.select(0, 1).select(0, 0), emb->weight.select(0, 4)));
    (y * 2.0).sum().backward();
    std::vector<double> g = emb->weight.grad().to_vector();
    for (int c = 0; c < 3; ++c) {
      CHECK(g[0 * 3 + c] == 2);
      CHECK(g[1 * 3 + c] == 0);  // padding row: looked up twice, no gradient
      CHECK(g[4 * 3 + c] == 2);
    }
    CHECK_THROWS_WITH_AS(emb->forward(randn({2})), doctest::Contains("int64 or int32"), Error);
  }
}

TEST_CASE("Sequential and ModuleList") {
  nn::Sequential seq;
  CHECK(seq->empty());
  Tensor x = randn({2, 3});
  CHECK(seq->forward(x).is_same(x));
  seq->push_back(nn::Linear(3, 4));
  seq->push_back(nn::Functional([](const Tensor& t) { return t * 2.0; }));
  seq->push_back([](const Tensor& t) { return t - 1.0; });
  seq->push_back("act", std::make_shared<nn::TanhImpl>());
  CHECK(seq->size() == 4);
  auto& fc = seq->at<nn::LinearImpl>(0);
  CHECK(allclose(seq->forward(x), tanh(fc.forward(x) * 2.0 - 1.0)));
  CHECK(names_of(seq->named_parameters()) == std::vector<std::string>{"0.weight", "0.bias"});
  CHECK(seq->named_children()[3].first == "act");
  CHECK_THROWS_WITH_AS(seq->at<nn::ReLUImpl>(3), doctest::Contains("Tanh"), Error);
  CHECK_THROWS_WITH_AS(seq->ptr(9), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(seq->push_back("act", nn::ReLU()), doctest::Contains("already registered"),
                       Error);
  CHECK_THROWS_WITH_AS(seq->push_back(nn::Linear(nullptr)), doctest::Contains("empty"), Error);

  // Training mode reaches every child.
  nn::Sequential net(nn::Linear(2, 2), nn::Sequential(nn::BatchNorm1d(2)));
  net->eval();
  CHECK_FALSE(net->ptr(1)->children()[0]->is_training());
  net->train();
  CHECK(net->ptr(1)->children()[0]->is_training());
  CHECK(names_of(net->state_dict())[2] == "1.0.weight");

  nn::ModuleList list(nn::Linear(2, 3), nn::ReLU());
  list->push_back(std::make_shared<nn::LinearImpl>(3, 1));
  CHECK(list->size() == 3);
  CHECK(list->at<nn::LinearImpl>(2).options.out_features() == 1);
  CHECK(names_of(list->named_parameters()) ==
        std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
}

TEST_CASE("zero_grad and a training step through modules") {
  manual_seed(5);
  nn::Sequential net(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 3));
  Tensor x = randn({16, 4});
  Tensor target = randint(0, 3, {16});
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    net->zero_grad();
    Tensor loss = nn::cross_entropy(net->forward(x), target);
    loss.backward();
    {
      autograd::NoGradGuard ng;
      for (Tensor& p : net->parameters()) sub_(p, p.grad(), 0.5);
    }
    (step == 0 ? first : last) = loss.item();
  }
  CHECK(last < 0.7 * first);
  net->zero_grad();
  CHECK_FALSE(net->parameters()[0].grad().defined());
}

TEST_CASE("losses: hand-computed values for every reduction") {
  using nn::LossReduction;
  Tensor in = from_vector({1, 2, 3}, {3}), tg = from_vector({1, 0, 0}, {3});
  CHECK(nn::mse_loss(in, tg).item() == doctest::Approx(13.0 / 3));
  CHECK(nn::mse_loss(in, tg, LossReduction::sum).item() == doctest::Approx(13.0));
  CHECK(nn::mse_loss(in, tg, LossReduction::none).to_vector() == std::vector<double>{0, 4, 9});
  CHECK(nn::l1_loss(in, tg).item() == doctest::Approx(5.0 / 3));
  CHECK(nn::l1_loss(in, tg, LossReduction::sum).item() == doctest::Approx(5.0));
  CHECK_THROWS_WITH_AS(nn::mse_loss(in, zeros({3, 1})),
                       doctest::Contains("must have the input's shape"), Error);

  // bce_with_logits: (1 - y) x + (1 + (p - 1) y) softplus(-x)
  Tensor x = from_vector({0, 2, -1}, {3}), y = from_vector({1, 0, 0.5}, {3});
  const double ln2 = std::log(2.0), sp2 = std::log1p(std::exp(-2.0)),
               sp1 = std::log1p(std::exp(1.0));
  std::vector<double> plain{ln2, 2 + sp2, -0.5 + sp1};
  Tensor none = nn::binary_cross_entropy_with_logits(
      x, y, nn::BCEWithLogitsOptions().with_reduction(LossReduction::none));
  for (int i = 0; i < 3; ++i)
    CHECK(none.to_vector()[size_t(i)] == doctest::Approx(plain[size_t(i)]));
  CHECK(nn::binary_cross_entropy_with_logits(x, y).item() ==
        doctest::Approx((plain[0] + plain[1] + plain[2]) / 3));
  Tensor pw = from_vector({2.0}, {1});
  CHECK(nn::binary_cross_entropy_with_logits(
            x, y, nn::BCEWithLogitsOptions().with_pos_weight(pw).with_reduction(LossReduction::sum))
            .item() == doctest::Approx(2 * ln2 + 2 + sp2 + (-0.5 + 1.5 * sp1)));
  // Stable for large logits, and the gradient is exact at x = 0.
  Tensor big = from_vector({100, -100}, {2}).set_requires_grad(true);
  Tensor l = nn::binary_cross_entropy_with_logits(
      big, from_vector({0, 1}, {2}), nn::BCEWithLogitsOptions().with_reduction(LossReduction::sum));
  CHECK(l.item() == doctest::Approx(200.0));
  Tensor zero = zeros({1}).set_requires_grad(true);
  nn::binary_cross_entropy_with_logits(zero, ones({1})).backward();
  CHECK(zero.grad().item() == doctest::Approx(-0.5));

  // cross_entropy and nll_loss (through the fused ops), with weights, smoothing, ignore_index.
  Tensor logits = from_vector({1, 2, 3, 1, 1, 1}, {2, 3});
  Tensor t = from_vector({2, -100}, {2}, TensorOptions(DType::i64));
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  CHECK(nn::cross_entropy(logits, t).item() == doctest::Approx(lse - 3));
  CHECK(nn::cross_entropy(logits, t, CrossEntropyOptions().with_label_smoothing(0.1)).item() ==
        doctest::Approx(0.9 * (lse - 3) + 0.1 / 3 * (3 * lse - 6)));
  nn::CrossEntropyLoss ce_sum(
      nn::CrossEntropyLossOptions().reduction(LossReduction::sum).ignore_index(-1));
  Tensor t2 = from_vector({2, 0}, {2}, TensorOptions(DType::i64));
  CHECK(ce_sum(logits, t2).item() == doctest::Approx(lse - 3 + std::log(3.0)));
  Tensor logp = from_vector({-1, -2, -3, -0.5, -1, -2}, {2, 3});
  Tensor t3 = from_vector({0, 2}, {2}, TensorOptions(DType::i64));
  CHECK(nn::nll_loss(logp, t3).item() == doctest::Approx(1.5));
  nn::NLLLoss weighted(nn::NLLLossOptions().weight(from_vector({1, 1, 3}, {3})));
  CHECK(weighted(logp, t3).item() == doctest::Approx(7.0 / 4));
  CHECK(names_of(weighted->state_dict()) == std::vector<std::string>{"weight"});
  nn::MSELoss mse(nn::MSELossOptions().reduction(LossReduction::sum));
  CHECK(mse(in, tg).item() == doctest::Approx(13.0));
  nn::L1Loss l1;
  CHECK(l1(in, tg).item() == doctest::Approx(5.0 / 3));
  nn::BCEWithLogitsLoss bce(nn::BCEWithLogitsLossOptions().pos_weight(pw));
  CHECK(bce(x, y).item() == doctest::Approx((2 * ln2 + 2 + sp2 + (-0.5 + 1.5 * sp1)) / 3));
}

TEST_CASE("losses: gradcheck of the module-level cross_entropy wrapper") {
  // (The mse / l1 / bce rows of support/op_table_nn.cpp run in test_gradcheck.cpp.)
  // cross_entropy through the module-level wrapper, with smoothing and weights.
  Tensor logits = randn({4, 5}, TensorOptions(DType::f64)).set_requires_grad(true);
  Tensor target = from_vector({1, 4, 0, 2}, {4}, TensorOptions(DType::i64));
  auto fn = [&](const std::vector<Tensor>& in) {
    return nn::cross_entropy(in[0], target,
                             CrossEntropyOptions().with_label_smoothing(0.2).with_weight(
                                 from_vector({1, 2, 0.5, 1, 3}, {5}, TensorOptions(DType::f64))));
  };
  std::string report;
  CHECK_MESSAGE(autograd::gradcheck(fn, {logits}, 1e-6, 1e-5, 1e-4, &report), report);
}
