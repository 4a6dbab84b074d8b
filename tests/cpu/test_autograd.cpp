// Autograd engine semantics: accumulation, retain_graph, grad(), hooks, guards, version counters,
// anomaly mode, in-place ops on non-leaves.
#include <doctest/doctest.h>

#include "ember/ember.h"

using namespace ember;

namespace {
Tensor vec(std::vector<double> v) {
  return from_vector(v, {int64_t(v.size())}, TensorOptions(DType::f64));
}
}  // namespace

TEST_CASE("backward accumulates into leaves across calls") {
  Tensor x = vec({1, 2, 3}).set_requires_grad(true);
  Tensor y = (x * x).sum();
  y.backward(Tensor(), true);
  CHECK(x.grad().to_vector() == std::vector<double>{2, 4, 6});
  y.backward();
  CHECK(x.grad().to_vector() == std::vector<double>{4, 8, 12});
  CHECK(x.is_leaf());
  CHECK_FALSE(y.is_leaf());
  CHECK(y.grad_fn()->name() == "sumBackward");
}

TEST_CASE("record_backward names its node <name>Backward unless the name already is one") {
  Tensor x = vec({1, 2}).set_requires_grad(true);
  for (auto [given, expected] :
       std::vector<std::pair<std::string, std::string>>{{"MyOp", "MyOpBackward"},
                                                        {"MyOpBackward", "MyOpBackward"},
                                                        {"MyOpBackward0", "MyOpBackward0"},
                                                        {"Backwards", "BackwardsBackward"}}) {
    Tensor y = x.detach().clone();
    auto node = autograd::record_backward(
        given.c_str(), {x}, {&y},
        [](const std::vector<Tensor>& g, const auto&) { return std::vector<Tensor>{g[0]}; });
    CHECK(node->name() == expected);
    CHECK(y.grad_fn()->name() == expected);
  }
}

TEST_CASE("a second backward without retain_graph is an error naming the op") {
  Tensor x = vec({1, 2}).set_requires_grad(true);
  Tensor y = exp(x).sum();
  y.backward();
  try {
    y.backward();
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("retain_graph") != std::string::npos);
  }
}

TEST_CASE("diamond graphs sum both paths") {
  Tensor x = vec({0.5, -1.0}).set_requires_grad(true);
  Tensor a = x * 2.0, b = x * x;
  Tensor y = (a * b).sum();  // y = 2x^3 -> dy/dx = 6x^2
  y.backward();
  auto g = x.grad().to_vector();
  CHECK(g[0] == doctest::Approx(1.5));
  CHECK(g[1] == doctest::Approx(6.0));
}

TEST_CASE("backward with an explicit gradient; non-scalar without one is an error") {
  Tensor x = vec({1, 2, 3}).set_requires_grad(true);
  Tensor y = x * 3.0;
  CHECK_THROWS_AS(y.backward(), Error);
  y.backward(vec({1, 0, 2}));
  CHECK(x.grad().to_vector() == std::vector<double>{3, 0, 6});
}

TEST_CASE("autograd::grad returns gradients without touching .grad") {
  Tensor x = vec({1, 2}).set_requires_grad(true);
  Tensor w = vec({3, 4}).set_requires_grad(true);
  Tensor h = x * w;  // a non-leaf input
  Tensor y = (h * h).sum();
  auto g = autograd::grad({y}, {x, h});
  CHECK(g[0].to_vector() == std::vector<double>{18, 64});  // 2 h w
  CHECK(g[1].to_vector() == std::vector<double>{6, 16});   // 2 h
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(w.grad().defined());
  Tensor unused = vec({1}).set_requires_grad(true);
  Tensor y2 = (x * 2.0).sum();
  CHECK_THROWS_AS(autograd::grad({y2}, {unused}), Error);
  Tensor y3 = (x * 2.0).sum();
  auto g2 = autograd::grad({y3}, {unused}, {}, false, false, true);
  CHECK_FALSE(g2[0].defined());
}

TEST_CASE("no_grad and inference guards stop recording") {
  Tensor x = vec({1, 2}).set_requires_grad(true);
  {
    autograd::NoGradGuard ng;
    Tensor y = x * 2.0;
    CHECK_FALSE(y.requires_grad());
    {
      autograd::EnableGradGuard eg;
      CHECK((x * 2.0).requires_grad());
    }
  }
  {
    autograd::InferenceModeGuard im;
    CHECK_FALSE((x + x).requires_grad());
  }
  CHECK((x + x).requires_grad());
}

TEST_CASE("detach shares storage and drops history") {
  Tensor x = vec({1, 2}).set_requires_grad(true);
  Tensor y = x * 2.0;
  Tensor d = y.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.data_ptr() == y.data_ptr());
}

TEST_CASE("tensor hooks see and replace gradients; post-accumulate hooks run after .grad is set") {
  Tensor x = vec({1, 2}).set_requires_grad(true);
  std::vector<double> seen;
  x.register_hook([&](const Tensor& g) {
    seen = g.to_vector();
    return g * 10.0;
  });
  int post_calls = 0;
  x.register_post_accumulate_grad_hook([&](Tensor& leaf) {
    ++post_calls;
    CHECK(leaf.grad().defined());
  });
  Tensor h = x * 3.0;
  std::vector<double> seen_h;
  int id = h.register_hook([&](const Tensor& g) {
    seen_h = g.to_vector();
    return Tensor();
  });
  (h * h).sum().backward();
  CHECK(seen_h == std::vector<double>{6, 12});
  CHECK(seen == std::vector<double>{18, 36});
  CHECK(x.grad().to_vector() == std::vector<double>{180, 360});
  CHECK(post_calls == 1);
  h.remove_hook(id);
}

TEST_CASE("retain_grad keeps the gradient of a non-leaf") {
  Tensor x = vec({1, 2}).set_requires_grad(true);
  Tensor h = x * 2.0;
  h.retain_grad();
  (h * h).sum().backward();
  CHECK(h.grad().to_vector() == std::vector<double>{4, 8});
}

TEST_CASE("modifying a saved tensor in place is detected at backward, naming the op") {
  Tensor x = vec({1, 2}).set_requires_grad(true);
  Tensor h = x * 1.0;
  Tensor y = (h * h).sum();  // mul saves h
  {
    autograd::NoGradGuard ng;
    add_(h, 1.0);
  }
  try {
    y.backward();
    FAIL("expected an error");
  } catch (const Error& e) {
    std::string m = e.what();
    CAPTURE(m);
    CHECK(m.find("mul") != std::string::npos);
    CHECK(m.find("modified in place") != std::string::npos);
  }
}

TEST_CASE("in-place ops on non-leaves are differentiable; on leaves that require grad, an error") {
  Tensor x = vec({1, -2, 3}).set_requires_grad(true);
  CHECK_THROWS_AS(add_(x, 1.0), Error);
  Tensor h = x * 2.0;
  mul_(h, h);  // h = (2x)^2
  relu_(h);
  h.sum().backward();
  CHECK(x.grad().to_vector() == std::vector<double>{8, -16, 24});
  CHECK(h.version() > 0);
}

TEST_CASE("anomaly mode names the op that produced NaN") {
  autograd::AnomalyModeGuard guard;
  Tensor x = vec({-1, 2}).set_requires_grad(true);
  try {
    Tensor y = log(x);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("log") != std::string::npos);
  }
  // NaN appearing only in backward: sqrt at 0 has an infinite derivative.
  Tensor z = vec({0.0, 1.0}).set_requires_grad(true);
  Tensor s = sqrt(z).sum();
  try {
    s.backward();
    FAIL("expected an error");
  } catch (const Error& e) {
    CAPTURE(e.what());
    CHECK(std::string(e.what()).find("sqrtBackward") != std::string::npos);
  }
}

TEST_CASE("integer tensors cannot require grad") {
  Tensor i = arange(3, TensorOptions(DType::i64));
  CHECK_THROWS_AS(i.set_requires_grad(true), Error);
}

TEST_CASE("gradients of broadcast inputs are reduced to their shapes and dtypes") {
  Tensor a = ones({3, 4}, TensorOptions(DType::f32)).set_requires_grad(true);
  Tensor b = ones({4}, TensorOptions(DType::f64)).set_requires_grad(true);
  Tensor y = (a * b).sum();
  CHECK(y.dtype() == DType::f64);
  y.backward();
  CHECK(a.grad().dtype() == DType::f32);
  CHECK(b.grad().sizes() == Shape{4});
  CHECK(b.grad().to_vector() == std::vector<double>{3, 3, 3, 3});
}
