// Higher-order gradients (create_graph in backward and autograd::grad), custom autograd
// functions (autograd::Function<T>) and the order of retain_grad among tensor hooks.
#include <doctest/doctest.h>

#include <cmath>

#include "ember/ember.h"

using namespace ember;
using autograd::AutogradContext;
using autograd::variable_list;

namespace {
Tensor vec(std::vector<double> v) {
  Tensor t = empty({int64_t(v.size())}, DType::f64, Device::cpu());
  auto* p = static_cast<double*>(t.data_ptr());
  for (size_t i = 0; i < v.size(); ++i) p[i] = v[i];
  return t;
}
Tensor leaf(std::vector<double> v) { return vec(std::move(v)).set_requires_grad(true); }
}  // namespace

// ---- create_graph -------------------------------------------------------------------------------

TEST_CASE("create_graph: d2/dx2 of x^3 is 6x, through grad and through backward") {
  Tensor x = leaf({2.0, -1.5, 0.5});
  Tensor y = sum(mul(mul(x, x), x));
  Tensor g = autograd::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  REQUIRE(g.requires_grad());
  REQUIRE(g.grad_fn() != nullptr);
  CHECK(max_abs_diff(g, mul(square(x), 3.0)) < 1e-12);
  Tensor g2 = autograd::grad({sum(g)}, {x}, {}, /*retain_graph=*/true)[0];
  CHECK(max_abs_diff(g2, mul(x, 6.0)) < 1e-12);
  // Third derivative: 6.
  Tensor h = autograd::grad({sum(g)}, {x}, {}, std::nullopt, true)[0];
  Tensor g3 = autograd::grad({sum(h)}, {x})[0];
  CHECK(max_abs_diff(g3, full({3}, 6.0, TensorOptions(DType::f64))) < 1e-12);

  // backward(create_graph): .grad keeps its history (and the graph is retained by default).
  Tensor z = sum(mul(mul(x, x), x));
  z.backward(Tensor(), std::nullopt, /*create_graph=*/true);
  Tensor gx = x.grad();
  REQUIRE(gx.requires_grad());
  CHECK(max_abs_diff(gx, mul(square(x), 3.0)) < 1e-12);
  x.set_grad(Tensor());
  sum(gx).backward();
  CHECK(max_abs_diff(x.grad(), mul(x, 6.0)) < 1e-12);

  Tensor z2 = sum(mul(mul(x, x), x));
  z2.backward(Tensor(), std::nullopt, true);
  z2.backward();  // retain_graph defaulted to create_graph: a second backward works
  // x.grad's history saved x: a reference cycle, as in PyTorch. Resetting the .grad breaks it.
  x.set_grad(Tensor());
}

TEST_CASE("create_graph: without it gradients carry no history") {
  Tensor x = leaf({1.0, 2.0});
  Tensor g = autograd::grad({sum(mul(x, x))}, {x})[0];
  CHECK_FALSE(g.requires_grad());
}

TEST_CASE("create_graph: Hessian-vector products") {
  // f(x) = 0.5 x^T A x + sum(w * exp(x)): H = A + diag(w * exp(x)).
  Tensor a = vec({2, 1, 0, 1, 3, -1, 0, -1, 4}).reshape({3, 3});
  Tensor w = vec({0.5, -0.25, 1.0});
  Tensor x = leaf({0.3, -0.7, 1.1});
  Tensor v = vec({1.0, -2.0, 0.5});
  Tensor f = add(mul(sum(mul(x, matmul(a, x))), 0.5), sum(mul(w, exp(x))));
  Tensor g = autograd::grad({f}, {x}, {}, std::nullopt, true)[0];
  Tensor hv = autograd::grad({sum(mul(g, v))}, {x})[0];
  Tensor expected = add(matmul(a, v), mul(mul(w, exp(x.detach())), v));
  CHECK(max_abs_diff(hv, expected) < 1e-12);
  // The same through grad_outputs = v (the vector-Jacobian product of the gradient), on a fresh
  // graph: the product above freed the first one.
  Tensor f2 = add(mul(sum(mul(x, matmul(a, x))), 0.5), sum(mul(w, exp(x))));
  Tensor g2 = autograd::grad({f2}, {x}, {}, std::nullopt, true)[0];
  Tensor hv2 = autograd::grad({g2}, {x}, {v})[0];
  CHECK(max_abs_diff(hv2, expected) < 1e-12);
}

TEST_CASE("create_graph: gradient penalty training step matches finite differences") {
  // WGAN-GP: loss = mean(D(x)) + lambda * mean((|dD/dx| - 1)^2) with D a small MLP through
  // kernel-backed ops (linear, silu, gelu, tanh), all parameters differentiated through the
  // input gradient.
  Generator gen(Device::cpu(), 11);
  const TensorOptions f64(DType::f64);
  std::vector<Tensor> params = {
      mul(rand({6, 3}, f64, &gen), 0.8).detach(), mul(rand({6}, f64, &gen), 0.2).detach(),
      mul(rand({4, 6}, f64, &gen), 0.6).detach(), mul(rand({4}, f64, &gen), 0.2).detach(),
      mul(rand({1, 4}, f64, &gen), 0.7).detach(), mul(rand({1}, f64, &gen), 0.1).detach()};
  for (Tensor& p : params) p.set_requires_grad(true);
  Tensor x_data = sub(mul(rand({5, 3}, f64, &gen), 2.0), 1.0);
  const double lambda = 10.0;

  auto loss_of = [&](const std::vector<Tensor>& p) {
    Tensor x = x_data.detach().set_requires_grad(true);
    Tensor h = silu(linear(x, p[0], p[1]));
    h = gelu(linear(h, p[2], p[3]));
    Tensor d = tanh(linear(h, p[4], p[5]));
    Tensor gx = autograd::grad({sum(d)}, {x}, {}, std::nullopt, true)[0];
    Tensor norm = sqrt(add(sum(square(gx), {1}), 1e-12));
    Tensor penalty = mean(square(sub(norm, 1.0)));
    return add(mean(d), mul(penalty, lambda));
  };

  Tensor loss = loss_of(params);
  loss.backward();
  const double eps = 1e-6;
  for (size_t k = 0; k < params.size(); ++k) {
    CAPTURE(k);
    REQUIRE(params[k].grad().defined());
    std::vector<double> analytic = params[k].grad().to_vector();
    auto* data = static_cast<double*>(params[k].data_ptr());
    for (int64_t e = 0; e < params[k].numel(); ++e) {
      const double orig = data[e];
      data[e] = orig + eps;
      const double plus = loss_of(params).item();
      data[e] = orig - eps;
      const double minus = loss_of(params).item();
      data[e] = orig;
      const double numeric = (plus - minus) / (2 * eps);
      CHECK(std::abs(numeric - analytic[size_t(e)]) <= 1e-6 + 1e-5 * std::abs(numeric));
    }
  }

  // One SGD step along the gradient lowers the loss.
  const double before = loss.item();
  {
    autograd::NoGradGuard no_grad;
    for (Tensor& p : params) add_(p, p.grad(), -1e-3);
  }
  CHECK(loss_of(params).item() < before);
}

TEST_CASE("autograd::grad: allow_unused gives an undefined gradient, else an Error") {
  Tensor x = leaf({1.0, 2.0});
  Tensor unused = leaf({3.0});
  Tensor y = sum(mul(x, x));
  CHECK_THROWS_AS(autograd::grad({y}, {x, unused}, {}, true), Error);
  auto g = autograd::grad({y}, {x, unused}, {}, std::nullopt, false, /*allow_unused=*/true);
  CHECK(g[0].defined());
  CHECK_FALSE(g[1].defined());
  // With create_graph as well: the used input's gradient has history, the unused one is undefined.
  Tensor y2 = sum(mul(x, x));
  auto g2 = autograd::grad({y2}, {x, unused}, {}, std::nullopt, true, true);
  CHECK(g2[0].requires_grad());
  CHECK_FALSE(g2[1].defined());
}

// ---- custom functions ---------------------------------------------------------------------------

namespace {

struct MulConstant : autograd::Function<MulConstant> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, double c, std::string tag) {
    ctx->saved_data["c"] = c;
    ctx->saved_data["tag"] = tag;
    return mul(x, c);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    CHECK(ctx->saved_data["tag"].toStringRef() == "scale");
    return {mul(g[0], ctx->saved_data["c"].toDouble()), Tensor(), Tensor()};
  }
};

struct MyMul : autograd::Function<MyMul> {
  static inline bool saw_needs_y = true;
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& y) {
    ctx->save_for_backward({x, y});
    return mul(x, y);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    variable_list saved = ctx->get_saved_variables();
    saw_needs_y = ctx->needs_input_grad(1);
    Tensor gx = ctx->needs_input_grad(0) ? mul(g[0], saved[1]) : Tensor();
    Tensor gy = ctx->needs_input_grad(1) ? mul(g[0], saved[0]) : Tensor();
    return {gx, gy};
  }
};

// exp that saves its output: differentiable again through the saved output's history.
struct MyExp : autograd::Function<MyExp> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x) {
    Tensor y = exp(x);
    ctx->save_for_backward({y});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {mul(g[0], ctx->get_saved_variables()[0])};
  }
};

// Adds 1 in place and returns its input (mark_dirty).
struct AddOneInPlace : autograd::Function<AddOneInPlace> {
  static Tensor forward(AutogradContext* ctx, Tensor x) {
    add_(x, 1.0);
    ctx->mark_dirty({x});
    return x;
  }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0]}; }
};

// Row maxima and their positions as a float tensor marked non-differentiable.
struct MaxWithIndex : autograd::Function<MaxWithIndex> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x) {
    ValuesIndices m = max(x, 1);
    Tensor index = m.indices.to(DType::f64);
    ctx->mark_non_differentiable({index});
    ctx->save_for_backward({m.indices.to(DType::f64)});
    ctx->saved_data["cols"] = x.size(1);
    return {m.values, index};
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    Tensor idx = ctx->get_saved_variables()[0].to(DType::i64);
    const int64_t cols = ctx->saved_data["cols"].toInt();
    Tensor onehot =
        eq(arange(double(cols), TensorOptions(DType::i64)).reshape({1, cols}), idx.unsqueeze(1))
            .to(DType::f64);
    return {mul(onehot, g[0].unsqueeze(1))};
  }
};

// Two outputs; with materialize_grads off, the unused one's gradient arrives undefined.
struct SplitTwo : autograd::Function<SplitTwo> {
  static inline bool second_defined = true;
  static variable_list forward(AutogradContext* ctx, const Tensor& x) {
    ctx->set_materialize_grads(false);
    return {mul(x, 2.0), mul(x, 3.0)};
  }
  static variable_list backward(AutogradContext*, variable_list g) {
    second_defined = g[1].defined();
    Tensor r = mul(g[0], 2.0);
    if (g[1].defined()) r = add(r, mul(g[1], 3.0));
    return {r};
  }
};

}  // namespace

TEST_CASE("Function: non-tensor arguments pass through, saved_data keeps them") {
  Tensor x = leaf({1.0, -2.0});
  Tensor y = MulConstant::apply(x, 2.5, std::string("scale"));
  CHECK(y.requires_grad());
  CHECK(y.grad_fn()->name().find("MulConstant") != std::string::npos);
  sum(y).backward();
  CHECK(max_abs_diff(x.grad(), vec({2.5, 2.5})) < 1e-15);
}

TEST_CASE("Function: save_for_backward and needs_input_grad") {
  Tensor x = leaf({1.0, 2.0, 3.0});
  Tensor y = vec({4.0, 5.0, 6.0});  // needs no gradient
  Tensor z = MyMul::apply(x, y);
  sum(z).backward();
  CHECK_FALSE(MyMul::saw_needs_y);
  CHECK(max_abs_diff(x.grad(), y) < 1e-15);

  // No input requires grad: the output has no history.
  Tensor plain = MyMul::apply(y, y);
  CHECK_FALSE(plain.requires_grad());

  // A saved input modified in place afterwards is caught when backward unpacks it.
  Tensor a = leaf({1.0});
  Tensor b = mul(a, 1.0);
  Tensor c = MyMul::apply(b, a);
  {
    autograd::NoGradGuard no_grad;
    add_(b, 1.0);
  }
  CHECK_THROWS_AS(sum(c).backward(), Error);
}

TEST_CASE("Function: double backward through a custom backward written with ops") {
  Tensor x = leaf({0.5, -1.0});
  Tensor y = sum(MyMul::apply(x, mul(x, x)));  // x^3
  Tensor g = autograd::grad({y}, {x}, {}, std::nullopt, true)[0];
  CHECK(max_abs_diff(g, mul(square(x), 3.0)) < 1e-12);
  Tensor g2 = autograd::grad({sum(g)}, {x})[0];
  CHECK(max_abs_diff(g2, mul(x, 6.0)) < 1e-12);

  // A saved output unpacks with the function's own node as history.
  Tensor e = sum(MyExp::apply(x));
  Tensor ge = autograd::grad({e}, {x}, {}, std::nullopt, true)[0];
  Tensor ge2 = autograd::grad({sum(ge)}, {x})[0];
  CHECK(max_abs_diff(ge2, exp(x.detach())) < 1e-12);
  CHECK(autograd::gradgradcheck([](const std::vector<Tensor>& in) { return MyExp::apply(in[0]); },
                                {x}));
}

TEST_CASE("Function: mark_dirty moves the in-place result's history onto the node") {
  Tensor x = leaf({1.0, 2.0});
  Tensor a = mul(x, 3.0);  // non-leaf
  const uint64_t version = a.version();
  Tensor b = AddOneInPlace::apply(a);
  CHECK(b.impl() == a.impl());
  CHECK(a.version() > version);
  CHECK(max_abs_diff(a, vec({4.0, 7.0})) < 1e-15);
  CHECK(a.grad_fn()->name().find("AddOneInPlace") != std::string::npos);
  sum(mul(b, b)).backward();
  // d/dx sum((3x + 1)^2) = 6 (3x + 1)
  CHECK(max_abs_diff(x.grad(), vec({24.0, 42.0})) < 1e-12);

  // A leaf that requires grad cannot be modified in place.
  Tensor l = leaf({1.0});
  CHECK_THROWS_AS(AddOneInPlace::apply(l), Error);
}

TEST_CASE("Function: mark_non_differentiable outputs do not require grad") {
  Tensor x = vec({1.0, 5.0, 2.0, 7.0, 3.0, 0.0}).reshape({2, 3}).set_requires_grad(true);
  variable_list out = MaxWithIndex::apply(x);
  CHECK(out[0].requires_grad());
  CHECK_FALSE(out[1].requires_grad());
  CHECK(max_abs_diff(out[1], vec({1.0, 0.0})) < 1e-15);
  sum(out[0]).backward();
  CHECK(max_abs_diff(x.grad(), vec({0, 1, 0, 1, 0, 0}).reshape({2, 3})) < 1e-15);
}

TEST_CASE("Function: set_materialize_grads(false) hands undefined gradients through") {
  Tensor x = leaf({1.0});
  variable_list out = SplitTwo::apply(x);
  sum(out[0]).backward();
  CHECK_FALSE(SplitTwo::second_defined);
  CHECK(max_abs_diff(x.grad(), vec({2.0})) < 1e-15);
}

TEST_CASE("Function: a backward returning the wrong number of gradients is an Error") {
  struct Wrong : autograd::Function<Wrong> {
    static Tensor forward(AutogradContext*, const Tensor& x, double) { return mul(x, 2.0); }
    static variable_list backward(AutogradContext*, variable_list g) { return {g[0]}; }
  };
  Tensor x = leaf({1.0});
  Tensor y = Wrong::apply(x, 1.0);
  CHECK_THROWS_AS(sum(y).backward(), Error);
}

TEST_CASE("Function: gradients are summed to the input's shape and cast to its dtype") {
  struct Broadcasting : autograd::Function<Broadcasting> {
    static Tensor forward(AutogradContext*, const Tensor& x) { return mul(x, 1.0); }
    static variable_list backward(AutogradContext*, variable_list g) {
      // A [2, 3] gradient for a [3] input (summed down), in float32, plus a trailing undefined
      // gradient (allowed, as in libtorch).
      return {g[0].expand({2, 3}).to(DType::f32), Tensor()};
    }
  };
  Tensor x = leaf({1.0, 2.0, 3.0});
  sum(Broadcasting::apply(x)).backward();
  CHECK(x.grad().dtype() == DType::f64);
  CHECK(max_abs_diff(x.grad(), vec({2.0, 2.0, 2.0})) < 1e-15);

  struct WrongShape : autograd::Function<WrongShape> {
    static Tensor forward(AutogradContext*, const Tensor& x) { return mul(x, 1.0); }
    static variable_list backward(AutogradContext*, variable_list) {
      return {zeros({4}, TensorOptions(DType::f64))};
    }
  };
  Tensor y = leaf({1.0, 2.0, 3.0});
  CHECK_THROWS_AS(sum(WrongShape::apply(y)).backward(), Error);
}

TEST_CASE("create_graph and custom functions leave no reference cycles") {
  std::weak_ptr<autograd::Node> op_node, fn_node, dirty_node;
  {
    Tensor x = leaf({0.5, 1.5});
    Tensor y = sigmoid(x);  // saves its output
    op_node = y.grad_fn();
    Tensor e = MyExp::apply(x);  // a custom function saving its output
    fn_node = e.grad_fn();
    Tensor d = AddOneInPlace::apply(mul(x, 2.0));
    dirty_node = d.grad_fn();
    Tensor g =
        autograd::grad({add(add(sum(y), sum(e)), sum(square(d)))}, {x}, {}, std::nullopt, true)[0];
    Tensor gg = autograd::grad({sum(g)}, {x})[0];
    CHECK(gg.defined());
    sum(sigmoid(x)).backward(Tensor(), std::nullopt, true);  // .grad with history, then dropped
  }
  CHECK(op_node.expired());
  CHECK(fn_node.expired());
  CHECK(dirty_node.expired());
}

// ---- retain_grad --------------------------------------------------------------------------------

TEST_CASE("retain_grad runs after every other hook, whenever they were registered") {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = mul(x, 2.0);
  y.register_hook([](const Tensor& g) { return mul(g, 10.0); });  // before retain_grad
  y.retain_grad();
  y.register_hook([](const Tensor& g) { return add(g, 1.0); });  // after retain_grad
  sum(y).backward();
  // The retained gradient is what both hooks let through: 1 * 10 + 1.
  CHECK(max_abs_diff(y.grad(), vec({11.0, 11.0})) < 1e-15);
  CHECK(max_abs_diff(x.grad(), vec({22.0, 22.0})) < 1e-15);
}

TEST_CASE("retain_grad accumulates over backwards and keeps history under create_graph") {
  Tensor x = leaf({3.0});
  Tensor y = mul(x, x);
  y.retain_grad();
  Tensor z = mul(y, y);
  z.backward(Tensor(), true);
  CHECK(max_abs_diff(y.grad(), vec({18.0})) < 1e-12);  // dz/dy = 2y = 18
  z.backward(Tensor(), std::nullopt, true);
  CHECK(max_abs_diff(y.grad(), vec({36.0})) < 1e-12);
  // y.grad's history (dz/dy = 2y) saved y, x.grad's saved x: break both cycles, as in PyTorch.
  y.set_grad(Tensor());
  x.set_grad(Tensor());
}
