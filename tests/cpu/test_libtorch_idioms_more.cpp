// More libtorch snippets (the second half of the idioms suite, beside test_libtorch_idioms.cpp),
// each written as libtorch would write it with only the namespace changed (torch:: -> ember::),
// each asserting values: indexing with Slice / None / Ellipsis / tensors / masks, masks and
// nonzero, bitwise and logical operators, raw access (data_ptr, accessor, options, from_blob),
// factories, the scatter / gather family, sorting and scans, shape manipulation, custom autograd
// functions and higher-order gradients, and module hooks, clone, apply and ModuleDict.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/nn/nn.h"
#include "support/compare.h"

namespace {

using Values = std::vector<double>;

Values values(const ember::Tensor& t) { return t.to_vector(); }
using ember::testing::near_values;

// y = x^3 with a hand-written backward, as a libtorch custom function.
struct Cube : ember::autograd::Function<Cube> {
  static ember::Tensor forward(ember::autograd::AutogradContext* ctx, const ember::Tensor& x) {
    ctx->save_for_backward({x});
    return x * x * x;
  }
  static ember::autograd::variable_list backward(ember::autograd::AutogradContext* ctx,
                                                 ember::autograd::variable_list grad_outputs) {
    auto x = ctx->get_saved_variables()[0];
    return {grad_outputs[0] * 3 * x * x};
  }
};

// A straight-through estimator: round in forward, identity gradient in backward.
struct RoundSTE : ember::autograd::Function<RoundSTE> {
  static ember::Tensor forward(ember::autograd::AutogradContext*, const ember::Tensor& x) {
    return x.round();
  }
  static ember::autograd::variable_list backward(ember::autograd::AutogradContext*,
                                                 ember::autograd::variable_list grad_outputs) {
    return {grad_outputs[0]};
  }
};

}  // namespace

TEST_CASE("libtorch idioms: indexing") {
  using namespace ember::indexing;
  auto x = ember::arange(24).reshape({2, 3, 4});
  SUBCASE("an integer then a slice") {
    CHECK(values(x.index({1, Slice(1, 3)})) == Values{16, 17, 18, 19, 20, 21, 22, 23});
  }
  SUBCASE("a stepped slice") {
    CHECK(values(x.index({0, 0, Slice(None, None, 2)})) == Values{0, 2});
  }
  SUBCASE("Ellipsis keeps the leading dims") {
    CHECK(x.index({Ellipsis, 0}).sizes() == ember::Shape{2, 3});
    CHECK(values(x.index({Ellipsis, 0})) == Values{0, 4, 8, 12, 16, 20});
  }
  SUBCASE("None adds a dim") { CHECK(x.index({None, 0}).sizes() == ember::Shape{1, 3, 4}); }
  SUBCASE("negative indices count from the end") {
    CHECK(values(x.index({-1, -1, -1})) == Values{23});
  }
  SUBCASE("an integer-tensor index picks rows") {
    auto idx = ember::tensor({2, 0});
    CHECK(values(x.index({0, idx})) == Values{8, 9, 10, 11, 0, 1, 2, 3});
  }
  SUBCASE("two index tensors pick elements pairwise") {
    auto m = ember::arange(9).reshape({3, 3});
    CHECK(values(m.index({ember::tensor({0, 1, 2}), ember::tensor({2, 1, 0})})) == Values{2, 4, 6});
  }
  SUBCASE("a boolean mask selects elements") {
    auto v = ember::tensor({1.0, -2.0, 3.0, -4.0});
    CHECK(values(v.index({v > 0})) == Values{1, 3});
  }
  SUBCASE("index_put_ with a slice and a scalar") {
    auto z = ember::zeros({2, 4});
    z.index_put_({Slice(), Slice(1, 3)}, 5);
    CHECK(values(z) == Values{0, 5, 5, 0, 0, 5, 5, 0});
  }
  SUBCASE("index_put_ through a mask zeroes negatives") {
    auto v = ember::tensor({1.0, -2.0, 3.0, -4.0});
    v.index_put_({v < 0}, 0);
    CHECK(values(v) == Values{1, 0, 3, 0});
  }
  SUBCASE("index_put_ with accumulate adds repeated indices") {
    auto acc = ember::zeros({3});
    acc.index_put_({ember::tensor({0, 0, 2})}, ember::ones({3}), /*accumulate=*/true);
    CHECK(values(acc) == Values{2, 0, 1});
  }
  SUBCASE("gradients flow through advanced indexing") {
    auto w = ember::ones({4}, ember::requires_grad());
    w.index({ember::tensor({1, 1, 3})}).sum().backward();
    CHECK(values(w.grad()) == Values{0, 2, 0, 1});
  }
}

TEST_CASE("libtorch idioms: masks and selection") {
  auto x = ember::tensor({{1.0, -1.0}, {0.5, -3.0}});
  SUBCASE("masked_fill replaces where the mask is set") {
    CHECK(values(x.masked_fill(x < 0, 0)) == Values{1, 0, 0.5, 0});
  }
  SUBCASE("masked_fill_ in place with -inf, as attention masks do") {
    auto scores = ember::zeros({2, 2});
    auto causal = ember::ones({2, 2}).triu(1).to(ember::kBool);
    scores.masked_fill_(causal, -INFINITY);
    CHECK(std::isinf(scores.index({0, 1}).item<float>()));
    CHECK(scores.index({1, 0}).item<float>() == 0);
  }
  SUBCASE("masked_select flattens the picked values") {
    CHECK(values(x.masked_select(x > 0)) == Values{1, 0.5});
  }
  SUBCASE("nonzero lists coordinates") {
    auto nz = ember::tensor({0, 3, 0, 7}).nonzero();
    CHECK(nz.sizes() == ember::Shape{2, 1});
    CHECK(values(nz) == Values{1, 3});
  }
  SUBCASE("where with a scalar on one side") {
    CHECK(values(ember::where(x > 0, x, ember::zeros_like(x))) == Values{1, 0, 0.5, 0});
  }
  SUBCASE("counting with a comparison and sum") { CHECK((x > 0).sum().item<int64_t>() == 2); }
  SUBCASE("any and all") {
    CHECK((x > 0).any().item<bool>());
    CHECK_FALSE((x > 0).all().item<bool>());
  }
  SUBCASE("isnan finds missing values") {
    auto v = ember::tensor({1.0, std::nan(""), 2.0});
    CHECK(values(v.isnan().to(ember::kInt64)) == Values{0, 1, 0});
  }
}

TEST_CASE("libtorch idioms: bitwise, logical and modular arithmetic") {
  auto a = ember::tensor({true, true, false});
  auto b = ember::tensor({true, false, false});
  SUBCASE("& | ^ ~ on bool tensors") {
    CHECK(values(a & b) == Values{1, 0, 0});
    CHECK(values(a | b) == Values{1, 1, 0});
    CHECK(values(a ^ b) == Values{0, 1, 0});
    CHECK(values(~a) == Values{0, 0, 1});
  }
  SUBCASE("bitwise ops on integers") {
    auto i = ember::tensor({12, 10});
    CHECK(values(i & 6) == Values{4, 2});
    CHECK(values(i | 1) == Values{13, 11});
  }
  SUBCASE("logical_and of comparisons") {
    auto x = ember::arange(6);
    CHECK(values(ember::logical_and(x > 1, x < 4).to(ember::kInt64)) == Values{0, 0, 1, 1, 0, 0});
  }
  SUBCASE("% follows the divisor's sign, fmod the dividend's") {
    auto x = ember::tensor({-3, 4});
    CHECK(values(x % 3) == Values{0, 1});
    CHECK(values(ember::tensor({-5.0, 5.0}) % 3) == Values{1, 2});
    CHECK(values(ember::fmod(ember::tensor({-5.0, 5.0}), 3)) == Values{-2, 2});
  }
  SUBCASE("even numbers through % and ==") {
    auto x = ember::arange(5);
    CHECK(values((x % 2 == 0).to(ember::kInt64)) == Values{1, 0, 1, 0, 1});
  }
}

TEST_CASE("libtorch idioms: raw access and factories") {
  SUBCASE("data_ptr<float> writes through") {
    auto x = ember::zeros({3});
    float* p = x.data_ptr<float>();
    p[1] = 2.5f;
    CHECK(values(x) == Values{0, 2.5, 0});
  }
  SUBCASE("accessor<float, 2> loops") {
    auto x = ember::arange(6, ember::kFloat32).reshape({2, 3});
    auto acc = x.accessor<float, 2>();
    double total = 0;
    for (int64_t i = 0; i < acc.size(0); ++i)
      for (int64_t j = 0; j < acc.size(1); ++j) total += acc[i][j];
    CHECK(total == 15);
  }
  SUBCASE("options() makes a like-typed tensor") {
    auto x = ember::ones({2}, ember::kFloat64);
    auto y = ember::zeros({3}, x.options());
    CHECK(y.dtype() == ember::kFloat64);
  }
  SUBCASE("from_blob wraps a buffer without copying") {
    std::vector<float> buffer = {1, 2, 3, 4};
    auto x = ember::from_blob(buffer.data(), {2, 2});
    buffer[3] = 40;
    CHECK(values(x) == Values{1, 2, 3, 40});
  }
  SUBCASE("from_blob with a deleter calls it when the tensor goes") {
    bool freed = false;
    {
      auto* data = new float[2]{1, 2};
      auto x = ember::from_blob(data, {2}, [&](void* p) {
        delete[] static_cast<float*>(p);
        freed = true;
      });
      CHECK(x.sum().item<float>() == 3);
    }
    CHECK(freed);
  }
  SUBCASE("tensor from a nested initializer list") {
    auto x = ember::tensor({{1, 2}, {3, 4}});
    CHECK(x.sizes() == ember::Shape{2, 2});
    CHECK(x.dtype() == ember::kInt64);
  }
  SUBCASE("linspace and logspace") {
    CHECK(near_values(ember::linspace(0, 1, 5), {0, 0.25, 0.5, 0.75, 1}));
    CHECK(near_values(ember::logspace(0, 2, 3), {1, 10, 100}));
  }
  SUBCASE("eye") { CHECK(values(ember::eye(2)) == Values{1, 0, 0, 1}); }
  SUBCASE("full_like and randn_like keep the shape") {
    auto x = ember::zeros({2, 3});
    CHECK(values(ember::full_like(x, 3)) == Values(6, 3.0));
    CHECK(ember::randn_like(x).sizes() == x.sizes());
  }
  SUBCASE("item<T> of a one-element tensor") {
    CHECK(ember::tensor({7}).item<int64_t>() == 7);
    CHECK_THROWS_AS(ember::ones({2}).item<float>(), ember::Error);
  }
}

TEST_CASE("libtorch idioms: scatter, gather and friends") {
  SUBCASE("one-hot through scatter_") {
    auto labels = ember::tensor({2, 0});
    auto onehot = ember::zeros({2, 3}).scatter_(1, labels.unsqueeze(1), 1.0);
    CHECK(values(onehot) == Values{0, 0, 1, 1, 0, 0});
  }
  SUBCASE("scatter_add sums into buckets") {
    auto buckets = ember::zeros({3}).scatter_add(0, ember::tensor({0, 2, 0}),
                                                 ember::tensor({1.0f, 2.0f, 3.0f}));
    CHECK(values(buckets) == Values{4, 0, 2});
  }
  SUBCASE("scatter_reduce with amax") {
    auto out = ember::zeros({2}).scatter_reduce(0, ember::tensor({0, 0, 1}),
                                                ember::tensor({5.0f, 7.0f, 1.0f}), "amax",
                                                /*include_self=*/false);
    CHECK(values(out) == Values{7, 1});
  }
  SUBCASE("index_add_ accumulates rows") {
    auto x = ember::zeros({2, 2});
    x.index_add_(0, ember::tensor({1, 1}), ember::ones({2, 2}));
    CHECK(values(x) == Values{0, 0, 2, 2});
  }
  SUBCASE("index_fill_ sets columns") {
    auto x = ember::ones({2, 3});
    x.index_fill_(1, ember::tensor({0, 2}), -1);
    CHECK(values(x) == Values{-1, 1, -1, -1, 1, -1});
  }
  SUBCASE("gather the logits of the targets") {
    auto logits = ember::tensor({{0.1, 0.9}, {0.8, 0.2}});
    auto picked = logits.gather(1, ember::tensor({{1}, {0}}));
    CHECK(near_values(picked, {0.9, 0.8}));
  }
  SUBCASE("take_along_dim with argsort's indices sorts") {
    auto x = ember::tensor({{3.0, 1.0, 2.0}});
    CHECK(values(x.take_along_dim(x.argsort(1), 1)) == Values{1, 2, 3});
  }
}

TEST_CASE("libtorch idioms: sorting, top-k and scans") {
  auto x = ember::tensor({3.0, 1.0, 4.0, 1.5, 9.0});
  SUBCASE("sort returns values and indices") {
    auto [sorted, idx] = x.sort();
    CHECK(values(sorted) == Values{1, 1.5, 3, 4, 9});
    CHECK(values(idx) == Values{1, 3, 0, 2, 4});
  }
  SUBCASE("descending sort") {
    auto [sorted, idx] = x.sort(0, /*descending=*/true);
    CHECK(values(sorted) == Values{9, 4, 3, 1.5, 1});
  }
  SUBCASE("topk") {
    auto [top, idx] = x.topk(2);
    CHECK(values(top) == Values{9, 4});
    CHECK(values(idx) == Values{4, 2});
  }
  SUBCASE("cumsum and cumprod") {
    CHECK(values(ember::arange(1, 5).cumsum(0)) == Values{1, 3, 6, 10});
    CHECK(values(ember::arange(1, 5).cumprod(0)) == Values{1, 2, 6, 24});
  }
  SUBCASE("median and kthvalue") {
    CHECK(x.median().item<double>() == 3);
    CHECK(std::get<0>(x.kthvalue(2)).item<double>() == 1.5);
  }
  SUBCASE("norm and amax over a dim") {
    auto m = ember::tensor({{3.0, 4.0}, {-6.0, 8.0}});
    CHECK(near_values(m.norm(2, {1}), {5, 10}));
    CHECK(values(m.amax(1)) == Values{4, 8});
  }
}

TEST_CASE("libtorch idioms: shape manipulation") {
  auto x = ember::arange(6).reshape({2, 3});
  SUBCASE("flip and roll") {
    CHECK(values(x.flip({1})) == Values{2, 1, 0, 5, 4, 3});
    CHECK(values(x.roll({1}, {1})) == Values{2, 0, 1, 5, 3, 4});
  }
  SUBCASE("repeat and repeat_interleave") {
    CHECK(values(ember::tensor({1, 2}).repeat({2})) == Values{1, 2, 1, 2});
    CHECK(values(ember::tensor({1, 2}).repeat_interleave(2)) == Values{1, 1, 2, 2});
  }
  SUBCASE("unflatten and movedim") {
    CHECK(ember::arange(24).unflatten(0, {2, 3, 4}).movedim(0, 2).sizes() == ember::Shape{3, 4, 2});
  }
  SUBCASE("unbind iterates over a dim") {
    auto rows = x.unbind(0);
    REQUIRE(rows.size() == 2);
    CHECK(values(rows[1]) == Values{3, 4, 5});
  }
  SUBCASE("view_as and expand_as") {
    auto y = ember::zeros({3, 2});
    CHECK(x.view_as(y).sizes() == ember::Shape{3, 2});
    CHECK(ember::ones({1, 3}).expand_as(x).sizes() == x.sizes());
  }
  SUBCASE("tril and triu") {
    auto m = ember::ones({3, 3});
    CHECK(m.tril().sum().item<float>() == 6);
    CHECK(m.triu(1).sum().item<float>() == 3);
  }
}

TEST_CASE("libtorch idioms: custom functions and higher-order gradients") {
  SUBCASE("a custom function's backward") {
    auto x = ember::tensor({2.0}, ember::requires_grad());
    Cube::apply(x).sum().backward();
    CHECK(near_values(x.grad(), {12}));
  }
  SUBCASE("a straight-through estimator") {
    auto x = ember::tensor({0.4, 1.6}, ember::requires_grad());
    auto y = RoundSTE::apply(x);
    CHECK(values(y) == Values{0, 2});
    (y * 3).sum().backward();
    CHECK(values(x.grad()) == Values{3, 3});
  }
  SUBCASE("a second derivative through autograd::grad with create_graph") {
    auto x = ember::tensor({1.5}, ember::requires_grad());
    auto y = x.pow(3);
    auto dy = ember::autograd::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
    auto d2y = ember::autograd::grad({dy}, {x})[0];
    CHECK(near_values(d2y, {9}));
  }
  SUBCASE("a gradient penalty") {
    auto w = ember::tensor({1.0, -2.0}, ember::requires_grad());
    auto x = ember::tensor({0.5, 0.5}, ember::requires_grad());
    auto out = (w * x).sum();
    auto gx = ember::autograd::grad({out}, {x}, {}, std::nullopt, true)[0];
    auto penalty = gx.pow(2).sum();  // = |w|^2
    penalty.backward();
    CHECK(near_values(w.grad(), {2, -4}));
  }
}

TEST_CASE("libtorch idioms: module hooks, clone, apply and ModuleDict") {
  SUBCASE("a forward hook sees the output") {
    ember::nn::Linear lin(2, 2);
    double seen = 0;
    lin->register_forward_hook([&](ember::nn::Module&, const ember::Tensor&,
                                   const ember::Tensor& out) { seen = double(out.numel()); });
    lin(ember::ones({3, 2}));  // hooks run on calls, not on ->forward (as PyTorch's __call__)
    CHECK(seen == 6);
  }
  SUBCASE("clone is a deep copy") {
    ember::nn::Linear lin(2, 1);
    auto copy = std::dynamic_pointer_cast<ember::nn::LinearImpl>(lin->clone());
    REQUIRE(copy);
    {
      ember::autograd::NoGradGuard no_grad;
      copy->weight.fill_(0);
    }
    CHECK(lin->weight.abs().sum().item<float>() > 0);
    CHECK(copy->weight.abs().sum().item<float>() == 0);
  }
  SUBCASE("apply initializes every Linear") {
    ember::nn::Sequential net(ember::nn::Linear(2, 3), ember::nn::ReLU(), ember::nn::Linear(3, 1));
    net->apply([](ember::nn::Module& m) {
      if (auto* lin = dynamic_cast<ember::nn::LinearImpl*>(&m)) {
        ember::autograd::NoGradGuard no_grad;
        lin->weight.fill_(0.5);
      }
    });
    for (auto& [name, p] : net->named_parameters())
      if (name.find("weight") != std::string::npos)
        CHECK(p.sum().item<float>() == doctest::Approx(0.5 * double(p.numel())));
  }
  SUBCASE("ModuleDict holds named heads") {
    ember::nn::ModuleDict heads;
    heads->insert("cls", ember::nn::Linear(4, 2));
    heads->insert("reg", ember::nn::Linear(4, 1));
    CHECK(heads->size() == 2);
    CHECK(heads->contains("reg"));
    auto reg = heads["reg"]->as<ember::nn::LinearImpl>();
    REQUIRE(reg != nullptr);
    CHECK(reg->forward(ember::ones({1, 4})).sizes() == ember::Shape{1, 1});
  }
}
