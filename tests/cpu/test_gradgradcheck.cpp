// Second derivatives over the op table (fp64, CPU): gradgradcheck on every row that has a double
// backward, and the first-order gradients of a create_graph backward (the differentiable
// formulas) against the plain backward's (the kernels).
#include <doctest/doctest.h>

#include "support/op_table.h"

using namespace ember;
using ember::testing::Layout;

TEST_CASE("gradgradcheck: every op in the table") {
  // channels_last changes the kernels' paths only for rows with a 4-D input.
  for (Layout layout : {Layout::contiguous, Layout::channels_last}) {
    for (const auto& c : ember::testing::op_cases()) {
      if (!c.fp64_gradcheck || !c.gradgradcheck) continue;
      bool has_4d = false;
      for (const Shape& shape : c.shapes) has_4d = has_4d || shape.size() == 4;
      if (layout == Layout::channels_last && !has_4d) continue;
      CAPTURE(c.name);
      CAPTURE(int(layout));
      auto inputs = ember::testing::make_inputs(c, DType::f64, Device::cpu(), 1234, layout, true);
      std::string report;
      bool ok = false;
      try {
        ok = autograd::gradgradcheck(c.fn, inputs, Tensor(), 1e-6, 1e-5, 1e-4, &report);
      } catch (const Error& e) {
        report = e.what();
      }
      CHECK_MESSAGE(ok, report);
    }
  }
}

TEST_CASE("create_graph: first-order gradients equal the plain backward's over the table") {
  for (Layout layout : {Layout::contiguous, Layout::channels_last}) {
    for (const auto& c : ember::testing::op_cases()) {
      if (!c.fp64_gradcheck || !c.gradgradcheck) continue;
      CAPTURE(c.name);
      CAPTURE(int(layout));
      auto inputs = ember::testing::make_inputs(c, DType::f64, Device::cpu(), 99, layout, true);
      Tensor out = c.fn(inputs);
      Tensor v = rand(out.sizes(), TensorOptions(DType::f64));
      std::vector<Tensor> plain = autograd::grad({out}, inputs, {v}, true, false, true);
      std::vector<Tensor> graph = autograd::grad({out}, inputs, {v}, true, true, true);
      REQUIRE(plain.size() == graph.size());
      for (size_t i = 0; i < plain.size(); ++i) {
        CAPTURE(i);
        REQUIRE(plain[i].defined() == graph[i].defined());
        if (!plain[i].defined()) continue;
        REQUIRE(plain[i].sizes() == graph[i].sizes());
        const double diff = max(abs(sub(plain[i].detach(), graph[i].detach()))).item();
        CHECK(diff <= 1e-10);
      }
    }
  }
}

namespace {
// x^3 whose backward uses a detached x: the first-order gradient is right, its derivative
// with respect to x is lost, so gradgradcheck must fail where gradcheck passes.
struct CubeDetachedBackward : autograd::Function<CubeDetachedBackward> {
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x) {
    ctx->save_for_backward({x});
    return mul(mul(x, x), x);
  }
  static autograd::variable_list backward(autograd::AutogradContext* ctx,
                                          autograd::variable_list g) {
    Tensor x = ctx->get_saved_variables()[0].detach();
    return {mul(g[0], mul(square(x), 3.0))};
  }
};
}  // namespace

TEST_CASE("gradgradcheck: detects a wrong double backward") {
  auto fn = [](const std::vector<Tensor>& x) { return CubeDetachedBackward::apply(x[0]); };
  Tensor x = rand({3}, TensorOptions(DType::f64)).set_requires_grad(true);
  CHECK(autograd::gradcheck(fn, {x}));
  CHECK_FALSE(autograd::gradgradcheck(fn, {x}));
}

TEST_CASE("double backward through an op without one raises an Error naming it") {
  for (const auto& c : ember::testing::op_cases()) {
    if (c.name != "lstm") continue;
    auto inputs =
        ember::testing::make_inputs(c, DType::f64, Device::cpu(), 7, Layout::contiguous, true);
    Tensor out = c.fn(inputs);
    // First order under create_graph works; differentiating its result again reaches the kernel.
    std::vector<Tensor> g =
        autograd::grad({out}, {inputs[0]}, {ones_like(out)}, std::nullopt, true);
    REQUIRE(g[0].requires_grad());
    try {
      autograd::grad({sum(square(g[0]))}, {inputs[0]}, {}, std::nullopt, false, true);
      FAIL("expected an Error");
    } catch (const Error& e) {
      const std::string what = e.what();
      CHECK(what.find("lstm") != std::string::npos);
      CHECK(what.find("double backward") != std::string::npos);
    }
  }
}
