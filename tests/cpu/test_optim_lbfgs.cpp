// LBFGS (nn/optim_lbfgs.h) on the CPU: trajectories of a two-tensor test function against
// libtorch's / PyTorch's LBFGS (tests/data/optim/lbfgs_trajectories.h), with and without the
// strong-Wolfe line search; convergence on Rosenbrock; the state round trip and errors.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "data/optim/lbfgs_trajectories.h"
#include "ember/ember.h"
#include "ember/nn/optim_lbfgs.h"
#include "support/errors.h"

using namespace ember;
using ember::testing::error_of;

namespace {

using Vec = std::vector<double>;

// The generators' objective: Rosenbrock in a, a weighted quadratic in b, a coupling term.
Tensor objective(const Tensor& a, const Tensor& b) {
  const TensorOptions f64(DType::f64);
  const Tensor w = from_vector({1.0, 2.0, 3.0}, {3}, f64),
               c = from_vector({0.0, 0.5, 1.0}, {3}, f64);
  const Tensor a0 = a.narrow(0, 0, 1), a1 = a.narrow(0, 1, 1), b0 = b.narrow(0, 0, 1);
  const Tensor t1 = 1.0 - a0, t2 = a1 - a0 * a0, d = b - c, ab = a0 * b0;
  return sum(t1 * t1 + 100.0 * (t2 * t2) + 0.1 * (ab * ab)) + sum(w * d * d);
}

optim::LBFGSOptions options_of(const std::string& config) {
  if (config == "default") return optim::LBFGSOptions(1).max_iter(5);
  if (config == "strong_wolfe")
    return optim::LBFGSOptions(1).max_iter(5).history_size(3).line_search_fn("strong_wolfe");
  if (config == "strong_wolfe_lr")
    return optim::LBFGSOptions(0.5).max_iter(8).line_search_fn("strong_wolfe");
  FAIL("unknown LBFGS configuration ", config);
  return optim::LBFGSOptions();
}

struct Problem {
  Tensor a = from_vector({-1.5, 2.0}, {2}, TensorOptions(DType::f64)).set_requires_grad(true);
  Tensor b = from_vector({1.0, -1.0, 2.0}, {3}, TensorOptions(DType::f64)).set_requires_grad(true);
};

// One step(closure); returns a[0], a[1], b[0], b[1], b[2] and the loss step() returned.
Vec lbfgs_step(optim::LBFGS& opt, Problem& pr) {
  Tensor loss = opt.step([&] {
    opt.zero_grad();
    Tensor l = objective(pr.a, pr.b);
    l.backward();
    return l;
  });
  Vec out = pr.a.to_vector();
  for (double v : pr.b.to_vector()) out.push_back(v);
  out.push_back(loss.item());
  return out;
}

}  // namespace

TEST_CASE("LBFGS follows PyTorch's trajectories (fixed step and strong Wolfe)") {
  REQUIRE(!kLbfgsTrajectories.empty());
  for (const LbfgsTrajectory& ref : kLbfgsTrajectories) {
    CAPTURE(ref.config);
    Problem pr;
    optim::LBFGS opt({pr.a, pr.b}, options_of(ref.config));
    REQUIRE(ref.values.size() == 24);
    for (size_t s = 0; s < 4; ++s) {
      CAPTURE(s);
      const Vec got = lbfgs_step(opt, pr);
      for (size_t k = 0; k < 6; ++k) {
        CAPTURE(k);
        const double expect = ref.values[6 * s + k];
        CHECK(std::abs(got[k] - expect) <= 1e-9 + 1e-8 * std::abs(expect));
      }
    }
  }
}

TEST_CASE("LBFGS with strong Wolfe minimizes Rosenbrock") {
  Tensor x = from_vector({-1.2, 1.0}, {2}, TensorOptions(DType::f64)).set_requires_grad(true);
  optim::LBFGS opt({x}, optim::LBFGSOptions(1).max_iter(100).line_search_fn("strong_wolfe"));
  auto f = [&] {
    opt.zero_grad();
    const Tensor x0 = x.narrow(0, 0, 1), x1 = x.narrow(0, 1, 1);
    const Tensor t1 = 1.0 - x0, t2 = x1 - x0 * x0;
    Tensor l = sum(t1 * t1 + 100.0 * (t2 * t2));
    l.backward();
    return l;
  };
  for (int s = 0; s < 3; ++s) opt.step(f);
  const Vec got = x.to_vector();
  CHECK(got[0] == doctest::Approx(1.0).epsilon(1e-3));
  CHECK(got[1] == doctest::Approx(1.0).epsilon(1e-3));
  CHECK(opt.func_evals() > 0);
}

TEST_CASE("LBFGS state round trip and errors") {
  Problem p1;
  optim::LBFGS first({p1.a, p1.b}, options_of("strong_wolfe"));
  lbfgs_step(first, p1);
  const nn::NamedTensors state = first.state_dict();
  const std::string config = first.config_json();
  CHECK(!state.empty());
  Problem p2;
  p2.a.detach().copy_(p1.a.detach());
  p2.b.detach().copy_(p1.b.detach());
  optim::LBFGS second({p2.a, p2.b}, optim::LBFGSOptions(0.3));
  second.load_state_dict(state, config);
  CHECK(second.lr() == 1.0);
  CHECK(second.options().line_search_fn() == std::optional<std::string>("strong_wolfe"));
  CHECK(second.n_iter() == first.n_iter());
  const Vec a = lbfgs_step(first, p1), b = lbfgs_step(second, p2);
  CHECK(a == b);

  CHECK(error_of([&] { first.optim::Optimizer::step(); }).find("closure") != std::string::npos);
  CHECK(error_of([&] {
          optim::LBFGS bad({p1.a}, optim::LBFGSOptions().line_search_fn("backtracking"));
        }).find("strong_wolfe") != std::string::npos);
  CHECK(error_of([&] {
          optim::LBFGS bad({p1.a}, optim::LBFGSOptions(-1));
        }).find("learning rate") != std::string::npos);
  CHECK(error_of([&] {
          optim::LBFGS bad({p1.a}, optim::LBFGSOptions().history_size(0));
        }).find("history_size") != std::string::npos);
  CHECK(error_of([&] { second.load_state_dict(state, ""); }).find("config") != std::string::npos);
}
