// The optimizers of nn/optim_more.h (RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam) and the
// maximize option of SGD / Adam / AdamW, on the CPU:
//  - trajectories of 8 steps against reference values from PyTorch (tests/data/optim/
//    optim_trajectories.h, written by libtorch 1.13 for SGD/Adam/AdamW/RMSprop/Adagrad, and by
//    gen_optim_reference.py under torch 2.x for every optimizer);
//  - Adadelta, Adamax, NAdam and RAdam also against straightforward float64 implementations of
//    PyTorch's documented algorithms written here (another code path than the kernel), in float64
//    and float32;
//  - state dict names and round trips, parameter groups with different options, found_inf skips,
//    and option errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/optim/optim_trajectories.h"
#include "ember/ember.h"
#include "ember/nn/optim.h"
#include "ember/nn/optim_more.h"
#include "support/errors.h"

using namespace ember;
using ember::testing::error_of;

namespace {

using Vec = std::vector<double>;
using OptimizerPtr = std::unique_ptr<optim::Optimizer>;

const Vec kStart = {0.5, -1.25, 2.0, 0.0, -0.3, 3.5, 1e-3};
constexpr int kSteps = 8;

// The gradient at step s, as the generators compute it: a fixed wave plus 0.5 * param.
Vec grad_at(int s, const Vec& p) {
  Vec g(p.size());
  for (size_t k = 0; k < g.size(); ++k)
    g[k] = (k == 2 ? 0.0 : std::sin(1.3 * double(k) + 0.7 * s) * (1 + 0.5 * s)) + 0.5 * p[k];
  return g;
}

// A float64 reference step: updates p from the (true) gradient g.
using ReferenceStep = std::function<void(Vec& p, const Vec& g)>;

Vec signed_grad(const Vec& g, bool maximize) {
  Vec d = g;
  if (maximize)
    for (double& x : d) x = -x;
  return d;
}

// PyTorch's documented Adadelta.
ReferenceStep adadelta_reference(double lr, double rho, double eps, double wd, bool maximize) {
  auto v = std::make_shared<Vec>(), u = std::make_shared<Vec>();
  return [=](Vec& p, const Vec& g0) {
    if (v->empty()) v->assign(p.size(), 0), u->assign(p.size(), 0);
    const Vec g1 = signed_grad(g0, maximize);
    for (size_t k = 0; k < p.size(); ++k) {
      const double g = g1[k] + wd * p[k];
      (*v)[k] = (*v)[k] * rho + g * g * (1 - rho);
      const double dx = std::sqrt((*u)[k] + eps) / std::sqrt((*v)[k] + eps) * g;
      (*u)[k] = (*u)[k] * rho + dx * dx * (1 - rho);
      p[k] -= lr * dx;
    }
  };
}

// PyTorch's documented Adamax.
ReferenceStep adamax_reference(double lr, double b1, double b2, double eps, double wd,
                               bool maximize) {
  auto m = std::make_shared<Vec>(), u = std::make_shared<Vec>();
  auto t = std::make_shared<int>(0);
  return [=](Vec& p, const Vec& g0) {
    if (m->empty()) m->assign(p.size(), 0), u->assign(p.size(), 0);
    ++*t;
    const Vec g1 = signed_grad(g0, maximize);
    for (size_t k = 0; k < p.size(); ++k) {
      const double g = g1[k] + wd * p[k];
      (*m)[k] = b1 * (*m)[k] + (1 - b1) * g;
      (*u)[k] = std::max(b2 * (*u)[k], std::abs(g) + eps);
      p[k] -= lr * (*m)[k] / ((1 - std::pow(b1, *t)) * (*u)[k]);
    }
  };
}

// PyTorch's documented NAdam. The running product of the mu_t is kept in float32, as PyTorch's
// "mu_product" state tensor is.
ReferenceStep nadam_reference(double lr, double b1, double b2, double eps, double wd, double psi,
                              bool decoupled, bool maximize) {
  auto m = std::make_shared<Vec>(), v = std::make_shared<Vec>();
  auto t = std::make_shared<int>(0);
  auto product = std::make_shared<float>(1.0f);
  return [=](Vec& p, const Vec& g0) {
    if (m->empty()) m->assign(p.size(), 0), v->assign(p.size(), 0);
    const int step = ++*t;
    const double mu = b1 * (1 - 0.5 * std::pow(0.96, step * psi));
    const double mu_next = b1 * (1 - 0.5 * std::pow(0.96, (step + 1) * psi));
    *product = float(*product * float(mu));
    const double prod_t = *product, prod_next = prod_t * mu_next;
    const Vec g1 = signed_grad(g0, maximize);
    for (size_t k = 0; k < p.size(); ++k) {
      double g = g1[k];
      if (decoupled)
        p[k] *= 1 - lr * wd;
      else
        g += wd * p[k];
      (*m)[k] = b1 * (*m)[k] + (1 - b1) * g;
      (*v)[k] = b2 * (*v)[k] + (1 - b2) * g * g;
      const double m_hat = mu_next * (*m)[k] / (1 - prod_next) + (1 - mu) * g / (1 - prod_t);
      const double v_hat = (*v)[k] / (1 - std::pow(b2, step));
      p[k] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  };
}

// PyTorch's documented RAdam.
ReferenceStep radam_reference(double lr, double b1, double b2, double eps, double wd,
                              bool decoupled, bool maximize) {
  auto m = std::make_shared<Vec>(), v = std::make_shared<Vec>();
  auto t = std::make_shared<int>(0);
  return [=](Vec& p, const Vec& g0) {
    if (m->empty()) m->assign(p.size(), 0), v->assign(p.size(), 0);
    const int step = ++*t;
    const double rho_inf = 2 / (1 - b2) - 1;
    const double rho_t = rho_inf - 2 * step * std::pow(b2, step) / (1 - std::pow(b2, step));
    const Vec g1 = signed_grad(g0, maximize);
    for (size_t k = 0; k < p.size(); ++k) {
      double g = g1[k];
      if (decoupled)
        p[k] *= 1 - lr * wd;
      else
        g += wd * p[k];
      (*m)[k] = b1 * (*m)[k] + (1 - b1) * g;
      (*v)[k] = b2 * (*v)[k] + (1 - b2) * g * g;
      const double m_hat = (*m)[k] / (1 - std::pow(b1, step));
      if (rho_t > 5) {
        const double l = std::sqrt(1 - std::pow(b2, step)) / (std::sqrt((*v)[k]) + eps);
        const double r = std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf /
                                   ((rho_inf - 4) * (rho_inf - 2) * rho_t));
        p[k] -= lr * m_hat * r * l;
      } else {
        p[k] -= lr * m_hat;
      }
    }
  };
}

struct Config {
  const char* optimizer;
  const char* config;
  bool maximize;  // the optimizer ascends (the generators pass it the same way)
  std::function<OptimizerPtr(std::vector<Tensor>)> make;
  std::function<ReferenceStep()> reference;  // empty: only the PyTorch trajectory
};

template <typename O, typename Options>
std::function<OptimizerPtr(std::vector<Tensor>)> maker(Options options) {
  return [options](std::vector<Tensor> params) -> OptimizerPtr {
    return std::make_unique<O>(std::move(params), options);
  };
}

// Every configuration the generators know (the same names and options there).
const std::vector<Config>& configs() {
  using namespace optim;
  static const std::vector<Config> all = {
      {"SGD",
       "momentum_wd_maximize",
       true,
       maker<SGD>(SGDOptions(0.05).momentum(0.9).dampening(0.1).weight_decay(0.01).maximize(true)),
       {}},
      {"SGD",
       "nesterov_maximize",
       true,
       maker<SGD>(SGDOptions(0.05).momentum(0.8).nesterov(true).weight_decay(0.02).maximize(true)),
       {}},
      {"Adam",
       "amsgrad",
       false,
       maker<Adam>(AdamOptions(0.01).betas({0.9, 0.99}).weight_decay(0.1).amsgrad(true)),
       {}},
      {"Adam",
       "amsgrad_maximize",
       true,
       maker<Adam>(AdamOptions(0.02).amsgrad(true).maximize(true)),
       {}},
      {"AdamW",
       "amsgrad_maximize",
       true,
       maker<AdamW>(
           AdamWOptions(0.01).betas({0.8, 0.95}).weight_decay(0.05).amsgrad(true).maximize(true)),
       {}},
      {"RMSprop", "default", false, maker<RMSprop>(RMSpropOptions(0.01)), {}},
      {"RMSprop",
       "centered_momentum_wd",
       false,
       maker<RMSprop>(
           RMSpropOptions(0.01).alpha(0.9).eps(1e-6).weight_decay(0.1).momentum(0.5).centered(
               true)),
       {}},
      {"RMSprop",
       "momentum_maximize",
       true,
       maker<RMSprop>(RMSpropOptions(0.005).momentum(0.9).maximize(true)),
       {}},
      {"RMSprop", "centered", false, maker<RMSprop>(RMSpropOptions(0.02).centered(true)), {}},
      {"Adagrad", "default", false, maker<Adagrad>(AdagradOptions(0.1)), {}},
      {"Adagrad",
       "decay_wd_init",
       false,
       maker<Adagrad>(
           AdagradOptions(0.1).lr_decay(0.05).weight_decay(0.1).initial_accumulator_value(0.5).eps(
               1e-8)),
       {}},
      {"Adagrad", "maximize", true, maker<Adagrad>(AdagradOptions(0.05).maximize(true)), {}},
      {"Adadelta", "default", false, maker<Adadelta>(AdadeltaOptions()),
       [] { return adadelta_reference(1.0, 0.9, 1e-6, 0, false); }},
      {"Adadelta", "wd_maximize", true,
       maker<Adadelta>(AdadeltaOptions(0.5).rho(0.8).eps(1e-5).weight_decay(0.1).maximize(true)),
       [] { return adadelta_reference(0.5, 0.8, 1e-5, 0.1, true); }},
      {"Adamax", "default", false, maker<Adamax>(AdamaxOptions(0.02)),
       [] { return adamax_reference(0.02, 0.9, 0.999, 1e-8, 0, false); }},
      {"Adamax", "wd_maximize", true,
       maker<Adamax>(
           AdamaxOptions(0.05).betas({0.8, 0.95}).eps(1e-6).weight_decay(0.1).maximize(true)),
       [] { return adamax_reference(0.05, 0.8, 0.95, 1e-6, 0.1, true); }},
      {"NAdam", "default", false, maker<NAdam>(NAdamOptions(0.02)),
       [] { return nadam_reference(0.02, 0.9, 0.999, 1e-8, 0, 4e-3, false, false); }},
      {"NAdam", "wd", false,
       maker<NAdam>(NAdamOptions(0.02).betas({0.85, 0.99}).weight_decay(0.1).momentum_decay(8e-3)),
       [] { return nadam_reference(0.02, 0.85, 0.99, 1e-8, 0.1, 8e-3, false, false); }},
      {"NAdam", "decoupled_maximize", true,
       maker<NAdam>(
           NAdamOptions(0.02).weight_decay(0.1).decoupled_weight_decay(true).maximize(true)),
       [] { return nadam_reference(0.02, 0.9, 0.999, 1e-8, 0.1, 4e-3, true, true); }},
      {"RAdam", "default", false, maker<RAdam>(RAdamOptions(0.05)),
       [] { return radam_reference(0.05, 0.9, 0.999, 1e-8, 0, false, false); }},
      {"RAdam", "wd", false,
       maker<RAdam>(RAdamOptions(0.05).betas({0.8, 0.95}).eps(1e-6).weight_decay(0.1)),
       [] { return radam_reference(0.05, 0.8, 0.95, 1e-6, 0.1, false, false); }},
      {"RAdam", "decoupled_maximize", true,
       maker<RAdam>(
           RAdamOptions(0.05).weight_decay(0.1).decoupled_weight_decay(true).maximize(true)),
       [] { return radam_reference(0.05, 0.9, 0.999, 1e-8, 0.1, true, true); }},
  };
  return all;
}

const Config* find_config(const std::string& optimizer, const std::string& config) {
  for (const Config& c : configs())
    if (optimizer == c.optimizer && config == c.config) return &c;
  return nullptr;
}

Tensor make_param(const Vec& values, DType dtype) {
  return from_vector(values, {int64_t(values.size())}, TensorOptions(dtype))
      .set_requires_grad(true);
}

// Runs `steps` steps of `opt` on `p` (gradients from the float64 values of p), appending the
// parameter after each step to `out`.
void run_steps(optim::Optimizer& opt, Tensor& p, int from, int to, Vec* out = nullptr) {
  for (int s = from; s < to; ++s) {
    const Vec g = grad_at(s, p.to_vector());
    p.set_grad(from_vector(g, p.sizes(), TensorOptions(p.dtype())));
    opt.step();
    if (out != nullptr) {
      const Vec now = p.to_vector();
      out->insert(out->end(), now.begin(), now.end());
    }
  }
}

void check_close(const Vec& got, const Vec& expect, double rtol, double atol) {
  REQUIRE(got.size() == expect.size());
  for (size_t k = 0; k < got.size(); ++k) {
    CAPTURE(k);
    CAPTURE(got[k]);
    CAPTURE(expect[k]);
    CHECK(std::abs(got[k] - expect[k]) <= atol + rtol * std::abs(expect[k]));
  }
}

}  // namespace

TEST_CASE("optimizers follow PyTorch's reference trajectories") {
  REQUIRE(!kOptimTrajectories.empty());
  for (const OptimTrajectory& ref : kOptimTrajectories) {
    CAPTURE(ref.optimizer);
    CAPTURE(ref.config);
    const Config* c = find_config(ref.optimizer, ref.config);
    REQUIRE_MESSAGE(c != nullptr, "no test configuration for this reference trajectory");
    REQUIRE(ref.params.size() == size_t(kSteps) * kStart.size());
    Tensor p = make_param(kStart, DType::f64);
    OptimizerPtr opt = c->make({p});
    CHECK(opt->name() == std::string(ref.optimizer));
    Vec got;
    run_steps(*opt, p, 0, kSteps, &got);
    check_close(got, ref.params, 1e-11, 1e-13);
  }
}

TEST_CASE("Adadelta, Adamax, NAdam, RAdam follow PyTorch's documented algorithms") {
  for (const Config& c : configs()) {
    if (!c.reference) continue;
    for (DType dtype : {DType::f64, DType::f32}) {
      CAPTURE(c.optimizer);
      CAPTURE(c.config);
      CAPTURE(dtype_name(dtype));
      Tensor p = make_param(kStart, dtype);
      OptimizerPtr opt = c.make({p});
      ReferenceStep reference = c.reference();
      Vec expect = kStart;
      for (int s = 0; s < kSteps; ++s) {
        // Both see the gradient of the float64 reference's parameter, so the float32 run
        // measures the update's rounding, not a drifting gradient.
        const Vec g = grad_at(s, expect);
        p.set_grad(from_vector(g, p.sizes(), TensorOptions(dtype)));
        opt->step();
        reference(expect, g);
        if (dtype == DType::f64)
          check_close(p.to_vector(), expect, 1e-12, 1e-14);
        else
          check_close(p.to_vector(), expect, 2e-5, 2e-5);
      }
    }
  }
}

TEST_CASE("optimizer defaults are PyTorch's") {
  CHECK(optim::RMSpropOptions().lr() == 1e-2);
  CHECK(optim::RMSpropOptions().alpha() == 0.99);
  CHECK(optim::RMSpropOptions().eps() == 1e-8);
  CHECK(optim::AdagradOptions().lr() == 1e-2);
  CHECK(optim::AdagradOptions().eps() == 1e-10);
  CHECK(optim::AdadeltaOptions().lr() == 1.0);
  CHECK(optim::AdadeltaOptions().rho() == 0.9);
  CHECK(optim::AdadeltaOptions().eps() == 1e-6);
  CHECK(optim::AdamaxOptions().lr() == 2e-3);
  CHECK(optim::NAdamOptions().lr() == 2e-3);
  CHECK(optim::NAdamOptions().momentum_decay() == 4e-3);
  CHECK(optim::RAdamOptions().lr() == 1e-3);
  CHECK(optim::RAdamOptions().betas().second == 0.999);
}

TEST_CASE("optimizer state dicts: PyTorch's names and an exact resume") {
  struct Expected {
    const char* optimizer;
    const char* config;
    std::vector<std::string> names;
  };
  const std::vector<Expected> cases = {
      {"RMSprop",
       "centered_momentum_wd",
       {"step", "square_avg", "grad_avg", "momentum_buffer"}},  // in creation order
      {"RMSprop", "default", {"step", "square_avg"}},
      {"Adagrad", "decay_wd_init", {"step", "sum"}},
      {"Adadelta", "default", {"step", "square_avg", "acc_delta"}},
      {"Adamax", "default", {"step", "exp_avg", "exp_inf"}},
      {"NAdam", "wd", {"step", "mu_product", "exp_avg", "exp_avg_sq"}},
      {"RAdam", "wd", {"step", "exp_avg", "exp_avg_sq"}},
      {"SGD", "nesterov_maximize", {"momentum_buffer", "step"}},
  };
  for (const Expected& e : cases) {
    CAPTURE(e.optimizer);
    CAPTURE(e.config);
    const Config* c = find_config(e.optimizer, e.config);
    REQUIRE(c != nullptr);
    Tensor p1 = make_param(kStart, DType::f64);
    OptimizerPtr first = c->make({p1});
    run_steps(*first, p1, 0, 3);
    const nn::NamedTensors state = first->state_dict();
    std::vector<std::string> names;
    for (const auto& [n, t] : state) names.push_back(n.substr(std::string("state.0.").size()));
    std::vector<std::string> sorted_names = names, sorted_expect = e.names;
    std::sort(sorted_names.begin(), sorted_names.end());
    std::sort(sorted_expect.begin(), sorted_expect.end());
    CHECK(sorted_names == sorted_expect);
    for (const auto& [n, t] : state)
      if (n == "state.0.step") CHECK(t.item() == 3);
    const std::string config = first->config_json();
    CHECK(config.find(std::string("\"type\":\"") + e.optimizer + "\"") != std::string::npos);

    // A fresh optimizer with other options, loaded, continues exactly like the original.
    Tensor p2 = make_param(p1.to_vector(), DType::f64);
    OptimizerPtr second = c->make({p2});
    second->set_lr(0.5);
    second->load_state_dict(state, config);
    CHECK(second->lr() == first->lr());
    Vec a, b;
    run_steps(*first, p1, 3, 6, &a);
    run_steps(*second, p2, 3, 6, &b);
    CHECK(a == b);
  }
}

TEST_CASE("element-wise optimizers: groups, found_inf, momentum switching") {
  Tensor a = make_param({1.0, 2.0}, DType::f64), b = make_param({3.0}, DType::f32);
  optim::RMSprop opt(std::vector<optim::ParamGroup<optim::RMSpropOptions>>{
      {{a}, optim::RMSpropOptions(0.1)}, {{b}, optim::RMSpropOptions(0.2).momentum(0.5)}});
  CHECK(opt.num_param_groups() == 2);
  a.set_grad(from_vector({1.0, -1.0}, {2}, TensorOptions(DType::f64)));
  b.set_grad(from_vector({2.0}, {1}, TensorOptions(DType::f32)));
  // A skipped step (GradScaler found an inf) changes nothing, not even the step counts.
  opt.step(ones({}, TensorOptions(DType::f32)).reshape({1}));
  CHECK(a.to_vector() == Vec{1.0, 2.0});
  CHECK(b.item() == 3.0);
  opt.step(zeros({1}, TensorOptions(DType::f32)));
  // v = 0.01 g^2, p -= lr g / (sqrt(v) + eps) = lr * sign(g) * 10 (up to eps).
  CHECK(a.to_vector()[0] == doctest::Approx(1.0 - 0.1 * 10).epsilon(1e-7));
  CHECK(a.to_vector()[1] == doctest::Approx(2.0 + 0.1 * 10).epsilon(1e-7));
  CHECK(b.item() == doctest::Approx(3.0 - 0.2 * 10).epsilon(1e-6));
  size_t entries = 0;
  for (const auto& [n, t] : opt.state_dict()) {
    if (n.find(".step") != std::string::npos) CHECK(t.item() == 1);
    ++entries;
  }
  CHECK(entries == 5);  // a: step, square_avg; b: step, square_avg, momentum_buffer
  // Turning group 0's momentum on (what a scheduler cycling momentum does) adds its buffer.
  opt.set_momentum(0, 0.9);
  opt.step();
  CHECK(opt.state_dict().size() == 6);

  // Adagrad makes its state at construction, as PyTorch does.
  Tensor c = make_param({1.0}, DType::f64);
  optim::Adagrad adagrad({c}, optim::AdagradOptions().initial_accumulator_value(0.25));
  const nn::NamedTensors st = adagrad.state_dict();
  REQUIRE(st.size() == 2);
  for (const auto& [n, t] : st) CHECK(t.item() == (n == "state.0.sum" ? 0.25 : 0.0));
  CHECK(error_of([&] { adagrad.set_momentum(0, 0.5); }).find("no momentum") != std::string::npos);
}

TEST_CASE("element-wise optimizers reject bad options") {
  Tensor p = make_param({1.0}, DType::f64);
  using namespace optim;
  CHECK(error_of([&] { RMSprop o({p}, RMSpropOptions(-1)); }).find("learning rate") !=
        std::string::npos);
  CHECK(error_of([&] { RMSprop o({p}, RMSpropOptions().alpha(-0.1)); }).find("alpha") !=
        std::string::npos);
  CHECK(error_of([&] { RMSprop o({p}, RMSpropOptions().momentum(-0.1)); }).find("momentum") !=
        std::string::npos);
  CHECK(error_of([&] { Adagrad o({p}, AdagradOptions().lr_decay(-1)); }).find("lr_decay") !=
        std::string::npos);
  CHECK(error_of([&] {
          Adagrad o({p}, AdagradOptions().initial_accumulator_value(-1));
        }).find("initial_accumulator_value") != std::string::npos);
  CHECK(error_of([&] { Adadelta o({p}, AdadeltaOptions().rho(1.5)); }).find("rho") !=
        std::string::npos);
  CHECK(error_of([&] { Adadelta o({p}, AdadeltaOptions().eps(-1)); }).find("eps") !=
        std::string::npos);
  CHECK(error_of([&] {
          Adamax o({p}, AdamaxOptions().betas({0.9, 1.0}));
        }).find("betas") != std::string::npos);
  CHECK(error_of([&] { NAdam o({p}, NAdamOptions().momentum_decay(-1)); }).find("momentum_decay") !=
        std::string::npos);
  CHECK(error_of([&] { RAdam o({p}, RAdamOptions().weight_decay(-1)); }).find("weight_decay") !=
        std::string::npos);
  CHECK(error_of([&] {
          RAdam o(std::vector<ParamGroup<RAdamOptions>>{});
        }).find("no parameter groups") != std::string::npos);
  NAdam n({p}, NAdamOptions());
  CHECK(error_of([&] { n.set_momentum(0, 1.0); }).find("below 1") != std::string::npos);
  // A config of another optimizer does not load.
  Adamax m({p}, AdamaxOptions());
  CHECK(error_of([&] { m.load_state_dict({}, n.config_json()); }).find("NAdam") !=
        std::string::npos);
}
