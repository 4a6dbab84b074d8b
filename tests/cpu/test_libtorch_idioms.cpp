// Typical libtorch snippets, each written as libtorch would write it with only the namespace
// changed (torch:: -> ember::), each asserting values: tensor arithmetic, views, reductions,
// autograd, module manipulation and training-loop pieces (optimizer, scheduler, no_grad,
// eval/train, state_dict save and load through Ember's checkpoint functions). The assertions read
// values with Ember's to_vector()/item(); the snippets are the part a libtorch user would write.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/nn/nn.h"
#include "support/compare.h"
#include "support/temp_dir.h"

namespace {

using Values = std::vector<double>;

Values values(const ember::Tensor& t) { return t.to_vector(); }
using ember::testing::near_values;

// A libtorch-style model: submodules as holder members, registered in the constructor.
struct NetImpl : ember::nn::Module {
  NetImpl(int64_t in, int64_t hidden, int64_t out)
      : fc1(register_module("fc1", ember::nn::Linear(in, hidden))),
        fc2(register_module("fc2", ember::nn::Linear(hidden, out))) {}
  ember::Tensor forward(ember::Tensor x) {
    x = ember::relu(fc1->forward(x));
    return fc2->forward(x);
  }
  ember::nn::Linear fc1, fc2;
};
EMBER_MODULE(Net);

}  // namespace

TEST_CASE("libtorch idioms: creating tensors and arithmetic") {
  SUBCASE("ones, scalar arithmetic") {
    auto x = ember::ones({2, 3});
    auto y = x * 2 + 1;
    CHECK(values(y) == Values(6, 3.0));
  }
  SUBCASE("zeros then fill_") {
    auto x = ember::zeros({3});
    x.fill_(4);
    CHECK(values(x) == Values{4, 4, 4});
  }
  SUBCASE("full") {
    auto x = ember::full({2, 2}, 7.0);
    CHECK(x.sum().item<double>() == 28);
  }
  SUBCASE("arange and view") {
    auto a = ember::arange(6).view({2, 3});
    CHECK(a.sizes() == ember::Shape{2, 3});
    CHECK(values(a.select(0, 1)) == Values{3, 4, 5});
  }
  SUBCASE("arange with a step") {
    auto a = ember::arange(0, 1, 0.25);
    CHECK(near_values(a, {0, 0.25, 0.5, 0.75}));
  }
  SUBCASE("tensor-tensor arithmetic") {
    auto a = ember::arange(1, 4);
    auto b = ember::full({3}, 2.0);
    CHECK(values(a + b) == Values{3, 4, 5});
    CHECK(values(a - b) == Values{-1, 0, 1});
    CHECK(values(a * b) == Values{2, 4, 6});
    CHECK(near_values(a / b, {0.5, 1, 1.5}));
  }
  SUBCASE("scalar on the left") {
    auto a = ember::arange(1, 4);
    CHECK(values(10 - a) == Values{9, 8, 7});
    CHECK(near_values(1 / a, {1, 0.5, 1.0 / 3}));
  }
  SUBCASE("broadcasting") {
    auto col = ember::arange(2).view({2, 1});
    auto row = ember::arange(3).view({1, 3});
    auto grid = col * 10 + row;
    CHECK(grid.sizes() == ember::Shape{2, 3});
    CHECK(values(grid) == Values{0, 1, 2, 10, 11, 12});
  }
  SUBCASE("compound assignment") {
    auto x = ember::ones({2});
    x += ember::ones({2});
    x *= 3;
    x += 1;
    CHECK(values(x) == Values{7, 7});
  }
  SUBCASE("unary minus, abs, pow, sqrt") {
    auto x = ember::arange(-2, 3);
    CHECK(values(-x) == Values{2, 1, 0, -1, -2});
    CHECK(values(x.abs()) == Values{2, 1, 0, 1, 2});
    CHECK(values(x.pow(2)) == Values{4, 1, 0, 1, 4});
    CHECK(near_values(x.pow(2).sqrt(), {2, 1, 0, 1, 2}));
  }
  SUBCASE("exp and log") {
    auto x = ember::arange(1, 4);
    CHECK(near_values(x.exp().log(), {1, 2, 3}));
    CHECK(near_values(ember::exp(ember::zeros({1})), {1}));
  }
  SUBCASE("activations as functions") {
    auto x = ember::arange(-1, 2);
    CHECK(values(ember::relu(x)) == Values{0, 0, 1});
    CHECK(near_values(ember::sigmoid(ember::zeros({1})), {0.5}));
    CHECK(near_values(ember::tanh(x), {std::tanh(-1.0), 0, std::tanh(1.0)}));
  }
  SUBCASE("clamp") {
    auto x = ember::arange(-2, 3);
    CHECK(values(ember::clamp(x, -1, 1)) == Values{-1, -1, 0, 1, 1});
  }
  SUBCASE("comparisons and where") {
    auto a = ember::arange(4);
    auto b = ember::full({4}, 1.5);
    auto mask = a > b;
    CHECK(values(mask) == Values{0, 0, 1, 1});
    CHECK(values(ember::where(mask, a, b)) == Values{1.5, 1.5, 2, 3});
    CHECK(values(ember::eq(a, a)) == Values{1, 1, 1, 1});
  }
  SUBCASE("maximum and minimum") {
    auto a = ember::arange(4);
    auto b = 3 - a;
    CHECK(values(ember::maximum(a, b)) == Values{3, 2, 2, 3});
    CHECK(values(ember::minimum(a, b)) == Values{0, 1, 1, 0});
  }
  SUBCASE("zeros_like and ones_like") {
    auto x = ember::randn({2, 5});
    CHECK(ember::zeros_like(x).sum().item<double>() == 0);
    CHECK(ember::ones_like(x).sum().item<double>() == 10);
  }
  SUBCASE("manual_seed makes randn repeatable") {
    ember::manual_seed(42);
    auto a = ember::randn({8});
    ember::manual_seed(42);
    auto b = ember::randn({8});
    CHECK(ember::allclose(a, b));
  }
  SUBCASE("rand stays in [0, 1)") {
    auto u = ember::rand({1000});
    CHECK(ember::min(u).item<double>() >= 0);
    CHECK(ember::max(u).item<double>() < 1);
  }
  SUBCASE("clone is a copy, detach shares") {
    auto x = ember::zeros({2});
    auto c = x.clone();
    auto d = x.detach();
    x.fill_(1);
    CHECK(values(c) == Values{0, 0});
    CHECK(values(d) == Values{1, 1});
  }
}

TEST_CASE("libtorch idioms: shapes and views") {
  auto x = ember::arange(6).view({2, 3});
  SUBCASE("sizes, dim, numel, size(-1)") {
    CHECK(x.dim() == 2);
    CHECK(x.numel() == 6);
    CHECK(x.size(0) == 2);
    CHECK(x.size(-1) == 3);
  }
  SUBCASE("view(-1)") { CHECK(x.view({-1}).sizes() == ember::Shape{6}); }
  SUBCASE("reshape") { CHECK(values(x.reshape({3, 2}).select(0, 2)) == Values{4, 5}); }
  SUBCASE("t and transpose") {
    CHECK(values(x.t().contiguous()) == Values{0, 3, 1, 4, 2, 5});
    CHECK(x.transpose(0, 1).sizes() == ember::Shape{3, 2});
    CHECK(!x.t().is_contiguous());
  }
  SUBCASE("permute") {
    auto y = ember::zeros({2, 3, 4}).permute({2, 0, 1});
    CHECK(y.sizes() == ember::Shape{4, 2, 3});
  }
  SUBCASE("unsqueeze and squeeze") {
    CHECK(x.unsqueeze(0).sizes() == ember::Shape{1, 2, 3});
    CHECK(x.unsqueeze(0).squeeze(0).sizes() == ember::Shape{2, 3});
    CHECK(ember::zeros({1, 3, 1}).squeeze().sizes() == ember::Shape{3});
  }
  SUBCASE("flatten") {
    CHECK(ember::zeros({2, 3, 4}).flatten(1).sizes() == ember::Shape{2, 12});
    CHECK(x.flatten().sizes() == ember::Shape{6});
  }
  SUBCASE("narrow, slice and select") {
    CHECK(values(x.narrow(1, 1, 2)) == Values{1, 2, 4, 5});
    CHECK(values(x.slice(1, 0, 3, 2)) == Values{0, 2, 3, 5});
    CHECK(values(x.select(1, 0)) == Values{0, 3});
  }
  SUBCASE("expand") {
    auto row = ember::arange(3).view({1, 3});
    CHECK(values(row.expand({2, 3})) == Values{0, 1, 2, 0, 1, 2});
  }
  SUBCASE("cat and stack") {
    CHECK(ember::cat({x, x}, 0).sizes() == ember::Shape{4, 3});
    CHECK(ember::cat({x, x}, 1).sizes() == ember::Shape{2, 6});
    CHECK(ember::stack({x, x}).sizes() == ember::Shape{2, 2, 3});
  }
  SUBCASE("chunk and split") {
    auto parts = ember::chunk(x, 3, 1);
    REQUIRE(parts.size() == 3);
    CHECK(values(parts[2]) == Values{2, 5});
    auto pieces = ember::split(ember::arange(5), 2);
    REQUIRE(pieces.size() == 3);
    CHECK(values(pieces[2]) == Values{4});
  }
  SUBCASE("index_select and gather") {
    auto idx = ember::arange(2, ember::dtype(ember::DType::i64));
    CHECK(values(ember::index_select(x, 1, idx)) == Values{0, 1, 3, 4});
    auto g = ember::gather(x, 1, ember::zeros({2, 1}, ember::dtype(ember::DType::i64)));
    CHECK(values(g) == Values{0, 3});
  }
  SUBCASE("contiguous") { CHECK(x.t().contiguous().is_contiguous()); }
}

TEST_CASE("libtorch idioms: reductions and linear algebra") {
  auto x = ember::arange(6).view({2, 3});
  SUBCASE("sum and mean over everything") {
    CHECK(x.sum().item<double>() == 15);
    CHECK(x.mean().item<double>() == doctest::Approx(2.5));
  }
  SUBCASE("sum and mean over a dim") {
    CHECK(values(x.sum({1})) == Values{3, 12});
    CHECK(near_values(x.mean({0}), {1.5, 2.5, 3.5}));
    CHECK(x.sum({1}, true).sizes() == ember::Shape{2, 1});
  }
  SUBCASE("free-function reductions") {
    CHECK(ember::sum(x).item<double>() == 15);
    CHECK(ember::prod(x + 1).item<double>() == 720);
    CHECK(values(ember::amax(x, {1})) == Values{2, 5});
    CHECK(values(ember::amin(x, {0})) == Values{0, 1, 2});
  }
  SUBCASE("max and argmax over a dim") {
    auto [values_, indices] = ember::max(x, 1);
    CHECK(values(values_) == Values{2, 5});
    CHECK(values(indices) == Values{2, 2});
    CHECK(values(ember::argmax(x, 1)) == Values{2, 2});
    CHECK(values(ember::argmin(x, 0)) == Values{0, 0, 0});
  }
  SUBCASE("max and min of everything") {
    CHECK(ember::max(x).item<double>() == 5);
    CHECK(ember::min(x).item<double>() == 0);
  }
  SUBCASE("var and std (unbiased by default)") {
    auto v = ember::arange(1, 5);
    CHECK(ember::var(v).item<double>() == doctest::Approx(5.0 / 3));
    CHECK(ember::std(v).item<double>() == doctest::Approx(std::sqrt(5.0 / 3)));
  }
  SUBCASE("logsumexp") {
    auto z = ember::zeros({2, 4});
    CHECK(near_values(ember::logsumexp(z, {1}), {std::log(4.0), std::log(4.0)}));
  }
  SUBCASE("softmax rows sum to one") {
    auto p = ember::softmax(ember::randn({3, 5}), 1);
    CHECK(near_values(p.sum({1}), {1, 1, 1}));
    CHECK(near_values(ember::log_softmax(ember::zeros({1, 4}), 1), Values(4, -std::log(4.0))));
  }
  SUBCASE("matmul, mm, bmm") {
    auto a = ember::ones({2, 3});
    auto b = ember::ones({3, 4});
    CHECK(values(ember::matmul(a, b)) == Values(8, 3.0));
    CHECK(values(a.matmul(b).sum({0})) == Values(4, 6.0));
    CHECK(ember::mm(a, b).sizes() == ember::Shape{2, 4});
    CHECK(ember::bmm(ember::ones({5, 2, 3}), ember::ones({5, 3, 1})).sizes() ==
          ember::Shape{5, 2, 1});
  }
  SUBCASE("matrix-vector through matmul") {
    auto m = ember::arange(6).view({2, 3});
    auto v = ember::ones({3});
    CHECK(values(ember::matmul(m, v)) == Values{3, 12});
  }
  SUBCASE("addmm") {
    auto out = ember::addmm(ember::ones({2, 2}), ember::ones({2, 3}), ember::ones({3, 2}));
    CHECK(values(out) == Values(4, 4.0));
  }
  SUBCASE("allclose with a tolerance") {
    CHECK(ember::allclose(ember::ones({3}), ember::ones({3}) + 1e-7));
    CHECK(!ember::allclose(ember::ones({3}), ember::ones({3}) + 1e-2));
  }
}

TEST_CASE("libtorch idioms: autograd") {
  SUBCASE("backward of a sum of squares") {
    auto x = ember::arange(1, 4).requires_grad_();
    auto y = (x * x).sum();
    y.backward();
    CHECK(values(x.grad()) == Values{2, 4, 6});
  }
  SUBCASE("requires_grad through options") {
    auto w = ember::ones({2}, ember::TensorOptions().with_requires_grad());
    CHECK(w.requires_grad());
    CHECK(w.is_leaf());
  }
  SUBCASE("gradients accumulate across backward calls") {
    auto x = ember::ones({2}).requires_grad_();
    (x * 3).sum().backward();
    (x * 3).sum().backward();
    CHECK(values(x.grad()) == Values{6, 6});
  }
  SUBCASE("no_grad block") {
    auto x = ember::ones({2}).requires_grad_();
    {
      ember::autograd::NoGradGuard no_grad;
      auto y = x * 2;
      CHECK(!y.requires_grad());
    }
    CHECK((x * 2).requires_grad());
  }
  SUBCASE("detach stops the gradient") {
    auto x = ember::full({1}, 3.0).requires_grad_();
    auto y = x * x.detach();
    y.backward();
    CHECK(values(x.grad()) == Values{3});
  }
  SUBCASE("grad_fn and is_leaf") {
    auto x = ember::ones({2}).requires_grad_();
    auto y = x + 1;
    CHECK(x.is_leaf());
    CHECK(!y.is_leaf());
    CHECK(y.grad_fn() != nullptr);
  }
  SUBCASE("backward with an explicit gradient") {
    auto x = ember::ones({3}).requires_grad_();
    auto y = x * 2;
    y.backward(ember::arange(3));
    CHECK(values(x.grad()) == Values{0, 2, 4});
  }
  SUBCASE("autograd::grad leaves .grad alone") {
    auto x = ember::full({2}, 2.0).requires_grad_();
    auto y = x.pow(3).sum();
    auto grads = ember::autograd::grad({y}, {x});
    CHECK(values(grads[0]) == Values{12, 12});
    CHECK(!x.grad().defined());
  }
  SUBCASE("retain_grad on an intermediate") {
    auto x = ember::ones({2}).requires_grad_();
    auto h = x * 5;
    h.retain_grad();
    (h * h).sum().backward();
    CHECK(values(h.grad()) == Values{10, 10});
  }
  SUBCASE("a tensor hook scales the gradient") {
    auto x = ember::ones({2}).requires_grad_();
    x.register_hook([](const ember::Tensor& g) { return g * 10; });
    x.sum().backward();
    CHECK(values(x.grad()) == Values{10, 10});
  }
  SUBCASE("retain_graph for a second backward") {
    auto x = ember::ones({1}).requires_grad_();
    auto y = (x * 4).exp();
    y.backward({}, /*retain_graph=*/true);
    y.backward();
    CHECK(x.grad().item<double>() == doctest::Approx(2 * 4 * std::exp(4.0)).epsilon(1e-4));
  }
}

TEST_CASE("libtorch idioms: modules") {
  SUBCASE("Linear's parameters") {
    ember::nn::Linear fc(4, 2);
    CHECK(fc->weight.sizes() == ember::Shape{2, 4});
    CHECK(fc->bias.sizes() == ember::Shape{2});
    CHECK(fc->parameters().size() == 2);
  }
  SUBCASE("named_parameters") {
    Net net(3, 5, 2);
    std::vector<std::string> names;
    for (const auto& pair : net->named_parameters()) names.push_back(pair.first);
    CHECK(names == std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"});
  }
  SUBCASE("a custom module's forward") {
    Net net(3, 5, 2);
    auto out = net->forward(ember::randn({7, 3}));
    CHECK(out.sizes() == ember::Shape{7, 2});
  }
  SUBCASE("Sequential") {
    ember::nn::Sequential seq(ember::nn::Linear(2, 3), ember::nn::ReLU(), ember::nn::Linear(3, 1));
    CHECK(seq->forward(ember::ones({4, 2})).sizes() == ember::Shape{4, 1});
    CHECK(seq->size() == 3);
  }
  SUBCASE("Sequential push_back") {
    ember::nn::Sequential seq;
    seq->push_back(ember::nn::Linear(2, 2));
    seq->push_back(ember::nn::Tanh());
    CHECK(seq->size() == 2);
    CHECK(ember::max(seq->forward(ember::full({1, 2}, 100.0)).abs()).item<double>() <= 1);
  }
  SUBCASE("ModuleList iteration") {
    ember::nn::ModuleList layers(ember::nn::Linear(2, 2), ember::nn::Linear(2, 2));
    int count = 0;
    for (const auto& module : *layers) count += int(module->parameters().size());
    CHECK(count == 4);
  }
  SUBCASE("ModuleDict lookup") {
    ember::nn::ModuleDict dict;
    dict->insert("enc", ember::nn::Linear(4, 2));
    dict->insert("dec", ember::nn::Linear(2, 4));
    CHECK(dict->contains("dec"));
    auto* encoder = dict["enc"]->as<ember::nn::Linear>();
    REQUIRE(encoder != nullptr);
    CHECK(encoder->options.out_features() == 2);
    CHECK(dict["enc"]->as<ember::nn::Conv2d>() == nullptr);
  }
  SUBCASE("train and eval") {
    Net net(2, 2, 2);
    CHECK(net->is_training());
    net->eval();
    CHECK(!net->is_training());
    CHECK(!net->fc1->is_training());
    net->train();
    CHECK(net->fc2->is_training());
  }
  SUBCASE("Dropout is the identity in eval") {
    ember::nn::Dropout dropout(0.5);
    dropout->eval();
    auto x = ember::ones({10});
    CHECK(values(dropout->forward(x)) == Values(10, 1.0));
  }
  SUBCASE("BatchNorm2d: training statistics, then eval") {
    ember::nn::BatchNorm2d bn(3);
    auto x = ember::randn({4, 3, 5, 5}) * 3 + 2;
    auto y = bn->forward(x);
    CHECK(std::abs(y.mean().item<double>()) < 1e-4);
    CHECK(bn->num_batches_tracked.item<double>() == 1);
    bn->eval();
    auto z = bn->forward(ember::zeros({1, 3, 2, 2}));
    CHECK(z.sizes() == ember::Shape{1, 3, 2, 2});
  }
  SUBCASE("Conv2d with options") {
    ember::nn::Conv2d conv(ember::nn::Conv2dOptions(3, 8, 3).stride(1).padding(1));
    CHECK(conv->forward(ember::randn({2, 3, 16, 16})).sizes() == ember::Shape{2, 8, 16, 16});
    ember::nn::Conv2d down(ember::nn::Conv2dOptions(3, 4, 3).stride(2).bias(false));
    CHECK(down->forward(ember::randn({1, 3, 9, 9})).sizes() == ember::Shape{1, 4, 4, 4});
    CHECK(!down->bias.defined());
  }
  SUBCASE("pooling") {
    ember::nn::MaxPool2d pool(ember::nn::MaxPool2dOptions(2).stride(2));
    auto x = ember::arange(16).view({1, 1, 4, 4});
    CHECK(values(pool->forward(x)) == Values{5, 7, 13, 15});
    ember::nn::AdaptiveAvgPool2d gap(1);
    CHECK(gap->forward(x).item<double>() == doctest::Approx(7.5));
  }
  SUBCASE("Embedding") {
    ember::nn::Embedding emb(10, 4);
    auto idx = ember::arange(3, ember::dtype(ember::DType::i64)).view({1, 3});
    CHECK(emb->forward(idx).sizes() == ember::Shape{1, 3, 4});
  }
  SUBCASE("LayerNorm normalizes the last dim") {
    ember::nn::LayerNorm ln(ember::nn::LayerNormOptions({4}));
    auto y = ln->forward(ember::arange(8).view({2, 4}));
    CHECK(near_values(y.mean({1}), {0, 0}, 1e-5));
  }
  SUBCASE("freezing parameters") {
    Net net(2, 3, 1);
    for (auto& p : net->fc1->parameters()) p.requires_grad_(false);
    int64_t trainable = 0;
    for (const auto& p : net->parameters())
      if (p.requires_grad()) trainable += p.numel();
    CHECK(trainable == 3 + 1);
  }
  SUBCASE("apply to re-initialize weights") {
    Net net(2, 3, 1);
    net->apply([](ember::nn::Module& m) {
      if (auto* linear = dynamic_cast<ember::nn::LinearImpl*>(&m)) {
        ember::nn::init::constant_(linear->weight, 0.1);
        ember::nn::init::zeros_(linear->bias);
      }
    });
    CHECK(net->fc1->weight.sum().item<double>() == doctest::Approx(0.6));
    CHECK(net->fc2->bias.sum().item<double>() == 0);
  }
  SUBCASE("clone a module") {
    ember::nn::Linear fc(3, 3);
    auto copy = std::dynamic_pointer_cast<ember::nn::LinearImpl>(fc->clone());
    REQUIRE(copy != nullptr);
    CHECK(ember::allclose(copy->weight, fc->weight));
    ember::nn::init::zeros_(copy->weight);
    CHECK(fc->weight.abs().sum().item<double>() > 0);
  }
  SUBCASE("named_modules and children") {
    Net net(2, 3, 1);
    std::vector<std::string> names;
    for (const auto& item : net->named_modules()) names.push_back(item.first);
    CHECK(names == std::vector<std::string>{"", "fc1", "fc2"});
    CHECK(net->children().size() == 2);
  }
  SUBCASE("register_buffer") {
    struct CounterImpl : ember::nn::Module {
      CounterImpl() { steps = register_buffer("steps", ember::zeros({1})); }
      ember::Tensor steps;
    };
    auto counter = std::make_shared<CounterImpl>();
    counter->steps += 1;
    CHECK(counter->buffers().size() == 1);
    CHECK(counter->named_buffers()[0].second.item<double>() == 1);
    CHECK(counter->parameters().empty());
  }
  SUBCASE("zero_grad on the module") {
    ember::nn::Linear fc(2, 1);
    fc->forward(ember::ones({1, 2})).sum().backward();
    CHECK(fc->weight.grad().defined());
    fc->zero_grad();
    CHECK(!fc->weight.grad().defined());
  }
  SUBCASE("register_parameter and non-recursive queries") {
    struct ScaleImpl : ember::nn::Module {
      ScaleImpl() { scale = register_parameter("scale", ember::ones({1})); }
      ember::Tensor scale;
    };
    auto scale = std::make_shared<ScaleImpl>();
    CHECK(scale->parameters(/*recurse=*/false).size() == 1);
    CHECK(scale->scale.requires_grad());
    CHECK(scale->named_parameters()[0].first == "scale");
  }
  SUBCASE("an empty holder, assigned later") {
    ember::nn::Linear fc{nullptr};
    CHECK(fc.is_empty());
    fc = ember::nn::Linear(2, 2);
    CHECK(!fc.is_empty());
    CHECK(fc.ptr()->parameters().size() == 2);
  }
  SUBCASE("indexing a Sequential") {
    ember::nn::Sequential seq(ember::nn::Linear(2, 3), ember::nn::ReLU());
    CHECK(seq[0]->as<ember::nn::Linear>()->options.out_features() == 3);
    CHECK(seq->ptr(1)->type_name() == "ReLU");
  }
  SUBCASE("modules() counts every module") {
    ember::nn::Sequential seq(ember::nn::Linear(2, 3), ember::nn::ReLU(), ember::nn::Linear(3, 1));
    CHECK(seq->modules().size() == 4);
    CHECK(seq->modules(/*include_self=*/false).size() == 3);
  }
  SUBCASE("counting parameters") {
    Net net(3, 4, 2);
    int64_t count = 0;
    for (const auto& p : net->parameters()) count += p.numel();
    CHECK(count == 3 * 4 + 4 + 4 * 2 + 2);
  }
  SUBCASE("replace a submodule") {
    Net net(2, 3, 1);
    net->fc2 = net->replace_module("fc2", ember::nn::Linear(3, 5).ptr());
    CHECK(net->forward(ember::ones({1, 2})).sizes() == ember::Shape{1, 5});
  }
  SUBCASE("printing a model") {
    Net net(2, 3, 1);
    std::ostringstream os;
    os << *net;
    CHECK(os.str().find("(fc1): Linear(in_features=2, out_features=3, bias=true)") !=
          std::string::npos);
  }
  SUBCASE("to(device) on the CPU") {
    Net net(2, 3, 1);
    net->to(ember::Device("cpu"));
    CHECK(net->fc1->weight.device() == ember::Device::cpu());
  }
  SUBCASE("functional forms") {
    namespace F = ember::nn::functional;
    auto x = ember::arange(-2, 2);
    CHECK(values(F::relu(x)) == Values{0, 0, 0, 1});
    CHECK(near_values(F::leaky_relu(x, 0.5), {-1, -0.5, 0, 1}));
    CHECK(F::mse_loss(ember::ones({3}), ember::zeros({3})).item<double>() == 1);
  }
}

TEST_CASE("libtorch idioms: losses and a training loop") {
  SUBCASE("cross_entropy of uniform logits is log(C)") {
    auto logits = ember::zeros({4, 5});
    auto target = ember::zeros({4}, ember::dtype(ember::DType::i64));
    auto loss = ember::nn::functional::cross_entropy(logits, target);
    CHECK(loss.item<double>() == doctest::Approx(std::log(5.0)));
  }
  SUBCASE("loss modules") {
    ember::nn::MSELoss mse;
    ember::nn::L1Loss l1;
    auto a = ember::full({2}, 3.0), b = ember::ones({2});
    CHECK(mse->forward(a, b).item<double>() == 4);
    CHECK(l1->forward(a, b).item<double>() == 2);
    ember::nn::CrossEntropyLoss ce;
    CHECK(ce->forward(ember::zeros({2, 2}), ember::zeros({2}, ember::dtype(ember::DType::i64)))
              .item<double>() == doctest::Approx(std::log(2.0)));
  }
  SUBCASE("accuracy from argmax") {
    auto logits = ember::arange(6).view({3, 2});
    auto target = ember::ones({3}, ember::dtype(ember::DType::i64));
    auto correct = ember::eq(ember::argmax(logits, 1), target).sum().item<int64_t>();
    CHECK(correct == 3);
  }
  SUBCASE("one SGD step by hand") {
    auto w = ember::ones({2}).requires_grad_();
    ember::optim::SGD optimizer({w}, ember::optim::SGDOptions(0.1));
    optimizer.zero_grad();
    auto loss = (w * ember::arange(1, 3)).sum();
    loss.backward();
    optimizer.step();
    CHECK(near_values(w, {0.9, 0.8}));
  }
  SUBCASE("SGD with momentum and weight decay") {
    auto w = ember::ones({1}).requires_grad_();
    ember::optim::SGD optimizer({w}, ember::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1));
    for (int i = 0; i < 2; ++i) {
      optimizer.zero_grad();
      w.sum().backward();
      optimizer.step();
    }
    // step 1: g = 1 + 1 = 2, buf = 2, w = 0.8; step 2: g = 1.8, buf = 0.9 * 2 + 1.8 = 3.6,
    // w = 0.8 - 0.36 = 0.44
    CHECK(w.item<double>() == doctest::Approx(0.44));
  }
  SUBCASE("Adam's first step moves each weight by about lr") {
    auto w = ember::zeros({3}).requires_grad_();
    ember::optim::Adam optimizer({w}, ember::optim::AdamOptions(0.01));
    (w * ember::arange(1, 4)).sum().backward();
    optimizer.step();
    CHECK(near_values(w, {-0.01, -0.01, -0.01}, 1e-4));
  }
  SUBCASE("zero_grad clears the gradients") {
    ember::nn::Linear fc(2, 2);
    ember::optim::SGD optimizer(fc->parameters(), ember::optim::SGDOptions(0.1));
    fc->forward(ember::ones({1, 2})).sum().backward();
    optimizer.zero_grad();
    for (const auto& p : fc->parameters()) CHECK(!p.grad().defined());
  }
  SUBCASE("StepLR halves the rate every two epochs") {
    auto w = ember::ones({1}).requires_grad_();
    ember::optim::SGD optimizer({w}, ember::optim::SGDOptions(1.0));
    ember::optim::StepLR scheduler(optimizer, /*step_size=*/2, /*gamma=*/0.5);
    std::vector<double> rates;
    for (int epoch = 0; epoch < 5; ++epoch) {
      rates.push_back(optimizer.lr());
      optimizer.step();
      scheduler.step();
    }
    CHECK(rates == std::vector<double>{1, 1, 0.5, 0.5, 0.25});
  }
  SUBCASE("a linear regression trains to its target") {
    ember::manual_seed(0);
    ember::nn::Linear model(1, 1);
    ember::optim::SGD optimizer(model->parameters(), ember::optim::SGDOptions(0.1));
    auto x = ember::arange(-1, 1, 0.125).view({-1, 1});
    auto y = x * 2 + 1;
    for (int epoch = 0; epoch < 300; ++epoch) {
      optimizer.zero_grad();
      auto loss = ember::nn::functional::mse_loss(model->forward(x), y);
      loss.backward();
      optimizer.step();
    }
    CHECK(model->weight.item<double>() == doctest::Approx(2).epsilon(1e-3));
    CHECK(model->bias.item<double>() == doctest::Approx(1).epsilon(1e-3));
  }
  SUBCASE("a classifier: loss goes down; eval under no_grad") {
    ember::manual_seed(1);
    Net net(2, 16, 2);
    ember::optim::Adam optimizer(net->parameters(), ember::optim::AdamOptions(0.05));
    auto x = ember::randn({64, 2});
    auto target = ember::cast(ember::gt(x.select(1, 0), ember::zeros({64})), ember::DType::i64);
    double first = 0, last = 0;
    net->train();
    for (int step = 0; step < 60; ++step) {
      optimizer.zero_grad();
      auto loss = ember::nn::functional::cross_entropy(net->forward(x), target);
      loss.backward();
      optimizer.step();
      (step == 0 ? first : last) = loss.item<double>();
    }
    CHECK(last < first * 0.5);
    net->eval();
    ember::autograd::NoGradGuard no_grad;
    auto prediction = ember::argmax(net->forward(x), 1);
    CHECK(!prediction.requires_grad());
    CHECK(ember::eq(prediction, target).sum().item<double>() >= 54);
  }
  SUBCASE("gradient clipping") {
    auto w = ember::ones({4}).requires_grad_();
    (w * 10).sum().backward();
    auto total = ember::nn::clip_grad_norm_({w}, 1.0);
    CHECK(total.item<double>() == doctest::Approx(20));
    CHECK(w.grad().pow(2).sum().sqrt().item<double>() == doctest::Approx(1).epsilon(1e-4));
  }
  SUBCASE("gradient accumulation over micro-batches") {
    ember::nn::Linear fc(2, 1);
    auto x = ember::ones({4, 2});
    fc->forward(x).sum().backward();
    auto full = fc->weight.grad().clone();
    fc->zero_grad();
    for (int i = 0; i < 4; ++i) fc->forward(x.narrow(0, i, 1)).sum().backward();
    CHECK(ember::allclose(fc->weight.grad(), full));
  }
}

TEST_CASE("libtorch idioms: saving and loading") {
  ember::test::TempDir dir("libtorch_idioms");
  SUBCASE("state_dict round trip through a file") {
    Net net(3, 4, 2);
    ember::nn::save_state_dict(*net, dir.file("net.safetensors"));
    Net restored(3, 4, 2);
    ember::nn::load_state_dict(*restored, dir.file("net.safetensors"));
    auto x = ember::randn({5, 3});
    CHECK(ember::allclose(net->forward(x), restored->forward(x)));
  }
  SUBCASE("in-memory state_dict copy") {
    Net a(2, 2, 2), b(2, 2, 2);
    b->load_state_dict(a->state_dict());
    CHECK(ember::allclose(a->fc2->weight, b->fc2->weight));
  }
  SUBCASE("a checkpoint with tensors by name") {
    ember::nn::save_checkpoint(dir.file("t.safetensors"), {{"x", ember::arange(3)}});
    auto loaded = ember::nn::load_checkpoint(dir.file("t.safetensors"));
    REQUIRE(loaded.tensors.size() == 1);
    CHECK(loaded.tensors[0].first == "x");
    CHECK(values(loaded.tensors[0].second) == Values{0, 1, 2});
  }
  SUBCASE("optimizer state round trip") {
    auto w = ember::ones({2}).requires_grad_();
    ember::optim::SGD optimizer({w}, ember::optim::SGDOptions(0.1).momentum(0.9));
    w.sum().backward();
    optimizer.step();
    auto w2 = w.detach().clone().requires_grad_();
    ember::optim::SGD resumed({w2}, ember::optim::SGDOptions(0.1).momentum(0.9));
    resumed.load_state_dict(optimizer.state_dict(), optimizer.config_json());
    w.mutable_grad() = ember::ones({2});
    w2.mutable_grad() = ember::ones({2});
    optimizer.step();
    resumed.step();
    CHECK(ember::allclose(w, w2));
  }
  SUBCASE("a strict load names the missing keys") {
    Net net(2, 2, 2);
    auto state = net->state_dict();
    state.pop_back();
    CHECK_THROWS_WITH_AS(net->load_state_dict(state), doctest::Contains("fc2.bias"), ember::Error);
    net->load_state_dict(state, /*strict=*/false);
  }
}
