// Optimizers, LR schedulers, GradScaler and gradient clipping on the CPU (the fused per-tensor CPU
// kernels of cpu_kernels/optim.cpp):
//  - SGD / Adam / AdamW trajectories over several steps against a hand-written float64 reference of
//    PyTorch's update rules (momentum, dampening, Nesterov, L2 and decoupled weight decay, bias
//    correction, AMSGrad), in float64 and float32, plus literal first steps worked out by hand;
//  - parameter groups, parameters without gradients, relaid gradients, state dicts and their
//  errors;
//  - scheduler LR sequences against values from PyTorch's own (recursive) formulas;
//  - GradScaler skip / backoff / growth and its misuse errors; clip_grad_norm_ for several norms.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/nn/clip_grad.h"
#include "ember/nn/grad_scaler.h"
#include "ember/nn/lr_scheduler.h"
#include "ember/nn/optim.h"
#include "support/errors.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;

namespace {

using Vec = std::vector<double>;

Tensor make_param(const Vec& values, DType dtype = DType::f64) {
  return from_vector(values, {int64_t(values.size())}, TensorOptions(dtype))
      .set_requires_grad(true);
}

void give_grad(Tensor& p, const Vec& g) {
  p.set_grad(from_vector(g, p.sizes(), TensorOptions(p.dtype())));
}

// The gradient fed at step `s`: varied signs and magnitudes, one exact zero.
Vec grad_at(int s, size_t n) {
  Vec g(n);
  for (size_t k = 0; k < n; ++k)
    g[k] = k == 2 ? 0.0 : std::sin(1.3 * double(k) + 0.7 * s) * (1 + 0.5 * s);
  return g;
}

const Vec kStart = {0.5, -1.25, 2.0, 0.0, -0.3, 3.5, 1e-3};

void check_close(const Tensor& actual, const Vec& expect, double rtol, double atol) {
  const Vec got = actual.to_vector();
  REQUIRE(got.size() == expect.size());
  for (size_t k = 0; k < got.size(); ++k)
    CHECK(std::abs(got[k] - expect[k]) <= atol + rtol * std::abs(expect[k]));
}

// ---- float64 references of PyTorch's update rules ---------------------------------------------

struct SgdConfig {
  const char* name;
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
};

struct SgdReference {
  SgdConfig c;
  Vec buf;
  void step(Vec& p, const Vec& g) {
    const bool first = buf.empty();
    if (first) buf.assign(p.size(), 0.0);
    for (size_t k = 0; k < p.size(); ++k) {
      double d = g[k] + c.weight_decay * p[k];
      if (c.momentum != 0) {
        buf[k] = first ? d : c.momentum * buf[k] + (1 - c.dampening) * d;
        d = c.nesterov ? d + c.momentum * buf[k] : buf[k];
      }
      p[k] -= c.lr * d;
    }
  }
};

struct AdamConfig {
  const char* name;
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled, amsgrad;
};

struct AdamReference {
  AdamConfig c;
  Vec m, v, vmax;
  int t = 0;
  void step(Vec& p, const Vec& g) {
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0), vmax.assign(p.size(), 0.0);
    ++t;
    const double bc1 = 1 - std::pow(c.beta1, t), bc2 = 1 - std::pow(c.beta2, t);
    for (size_t k = 0; k < p.size(); ++k) {
      double grad = g[k];
      if (c.decoupled)
        p[k] *= 1 - c.lr * c.weight_decay;
      else
        grad += c.weight_decay * p[k];
      m[k] = c.beta1 * m[k] + (1 - c.beta1) * grad;
      v[k] = c.beta2 * v[k] + (1 - c.beta2) * grad * grad;
      vmax[k] = std::max(vmax[k], v[k]);
      const double second = c.amsgrad ? vmax[k] : v[k];
      p[k] -= c.lr / bc1 * m[k] / (std::sqrt(second) / std::sqrt(bc2) + c.eps);
    }
  }
};

const SgdConfig kSgdConfigs[] = {
    {"plain", 0.1, 0, 0, 0, false},
    {"momentum", 0.05, 0.9, 0, 0, false},
    {"momentum+dampening", 0.05, 0.9, 0.3, 0, false},
    {"nesterov", 0.05, 0.8, 0, 0, true},
    {"weight decay", 0.1, 0, 0, 0.01, false},
    {"nesterov+weight decay", 0.02, 0.9, 0, 0.05, true},
};

const AdamConfig kAdamConfigs[] = {
    {"Adam", 0.01, 0.9, 0.999, 1e-8, 0, false, false},
    {"Adam+L2", 0.02, 0.8, 0.99, 1e-6, 0.1, false, false},
    {"Adam+amsgrad", 0.01, 0.9, 0.95, 1e-8, 0, false, true},
    {"AdamW", 0.01, 0.9, 0.999, 1e-8, 0.05, true, false},
    {"AdamW+amsgrad", 0.05, 0.7, 0.9, 1e-7, 0.2, true, true},
};

std::unique_ptr<optim::Optimizer> make_adam(const AdamConfig& c, std::vector<Tensor> params) {
  if (c.decoupled)
    return std::make_unique<optim::AdamW>(std::move(params), optim::AdamWOptions(c.lr)
                                                                 .betas({c.beta1, c.beta2})
                                                                 .eps(c.eps)
                                                                 .weight_decay(c.weight_decay)
                                                                 .amsgrad(c.amsgrad));
  return std::make_unique<optim::Adam>(std::move(params), optim::AdamOptions(c.lr)
                                                              .betas({c.beta1, c.beta2})
                                                              .eps(c.eps)
                                                              .weight_decay(c.weight_decay)
                                                              .amsgrad(c.amsgrad));
}

}  // namespace

TEST_CASE("SGD trajectories match PyTorch's update rule (float64 and float32)") {
  for (const SgdConfig& c : kSgdConfigs) {
    for (DType dtype : {DType::f64, DType::f32}) {
      CAPTURE(c.name);
      CAPTURE(dtype_name(dtype));
      Tensor p = make_param(kStart, dtype);
      optim::SGD opt({p}, optim::SGDOptions(c.lr)
                              .momentum(c.momentum)
                              .dampening(c.dampening)
                              .weight_decay(c.weight_decay)
                              .nesterov(c.nesterov));
      SgdReference ref{c, {}};
      Vec expect = kStart;
      for (int s = 0; s < 5; ++s) {
        const Vec g = grad_at(s, kStart.size());
        give_grad(p, g);
        opt.step();
        ref.step(expect, g);
        if (dtype == DType::f64)
          check_close(p, expect, 1e-13, 1e-15);
        else
          check_close(p, expect, 2e-6, 2e-6);
      }
    }
  }
}

TEST_CASE("SGD: first steps worked out by hand") {
  Tensor p = make_param({1.0});
  optim::SGD opt({p}, optim::SGDOptions(0.1).momentum(0.9));
  give_grad(p, {0.5});
  opt.step();  // buf = 0.5 (the first step copies the gradient), p = 1 - 0.1 * 0.5
  CHECK(p.item() == doctest::Approx(0.95).epsilon(1e-15));
  opt.step();  // buf = 0.9 * 0.5 + 0.5 = 0.95, p = 0.95 - 0.095
  CHECK(p.item() == doctest::Approx(0.855).epsilon(1e-15));

  Tensor q = make_param({1.0});
  optim::SGD nesterov({q}, optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
  give_grad(q, {0.5});
  nesterov.step();  // buf = 0.5, d = 0.5 + 0.9 * 0.5 = 0.95
  CHECK(q.item() == doctest::Approx(0.905).epsilon(1e-15));
}

TEST_CASE("Adam and AdamW trajectories match PyTorch's update rule (float64 and float32)") {
  for (const AdamConfig& c : kAdamConfigs) {
    for (DType dtype : {DType::f64, DType::f32}) {
      CAPTURE(c.name);
      CAPTURE(dtype_name(dtype));
      Tensor p = make_param(kStart, dtype);
      auto opt = make_adam(c, {p});
      AdamReference ref{c, {}, {}, {}};
      Vec expect = kStart;
      for (int s = 0; s < 6; ++s) {
        const Vec g = grad_at(s, kStart.size());
        give_grad(p, g);
        opt->step();
        ref.step(expect, g);
        if (dtype == DType::f64)
          check_close(p, expect, 1e-12, 1e-14);
        else
          check_close(p, expect, 1e-5, 1e-6);
      }
      // The step count lives in the state as a float32 0-dim tensor.
      for (const auto& [name, t] : opt->state_dict())
        if (name == "state.0.step") CHECK(t.item() == 6);
    }
  }
}

TEST_CASE("Adam: the bias-corrected first step moves each weight by about lr") {
  // m = 0.05, v = 2.5e-4, bias corrections 0.1 and 1e-3: denom = 0.5 + eps, step = 0.1 * 0.05 / 0.1
  Tensor p = make_param({1.0, 1.0});
  optim::Adam opt({p}, optim::AdamOptions(0.1));
  give_grad(p, {0.5, -2.0});
  opt.step();
  CHECK(p.to_vector()[0] == doctest::Approx(1.0 - 0.1 * 0.5 / (0.5 + 1e-8)).epsilon(1e-14));
  CHECK(p.to_vector()[1] == doctest::Approx(1.0 + 0.1 * 2.0 / (2.0 + 1e-8)).epsilon(1e-14));
  // AdamW decays first: p * (1 - lr * wd), then the same Adam step.
  Tensor q = make_param({2.0});
  optim::AdamW w({q}, optim::AdamWOptions(0.1).weight_decay(0.5));
  give_grad(q, {0.5});
  w.step();
  CHECK(q.item() == doctest::Approx(2.0 * 0.95 - 0.1 * 0.5 / (0.5 + 1e-8)).epsilon(1e-14));
}

TEST_CASE("optimizers: groups, parameters without gradients, relaid gradients") {
  Tensor a = make_param({1.0, 2.0}), b = make_param({3.0}), c = make_param({4.0});
  optim::SGD opt(std::vector<optim::ParamGroup<optim::SGDOptions>>{
      {{a, b}, optim::SGDOptions(0.1)}, {{c}, optim::SGDOptions(1.0).momentum(0.5)}});
  CHECK(opt.num_param_groups() == 2);
  CHECK(opt.parameters().size() == 3);
  give_grad(a, {1.0, 1.0});
  give_grad(c, {1.0});
  opt.step();  // b has no gradient: untouched, as in PyTorch
  check_close(a, {0.9, 1.9}, 0, 1e-15);
  CHECK(b.item() == 3.0);
  CHECK(c.item() == 3.0);
  CHECK(opt.state_dict().size() == 2);  // momentum_buffer and step of parameter 2 only
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());

  // A channels_last parameter with a contiguous gradient: the update is per logical element.
  Tensor w =
      randn({2, 3, 2, 2}).contiguous(MemoryFormat::channels_last).detach().set_requires_grad(true);
  const Vec before = w.to_vector();
  Tensor g = randn({2, 3, 2, 2});
  w.set_grad(g);
  optim::SGD sgd({w}, optim::SGDOptions(0.5));
  sgd.step();
  const Vec gv = g.to_vector(), after = w.to_vector();
  for (size_t k = 0; k < before.size(); ++k)
    CHECK(after[k] == doctest::Approx(before[k] - 0.5 * gv[k]));
  CHECK(w.is_contiguous(MemoryFormat::channels_last));

  CHECK(error_of([&] {
          optim::SGD bad({a}, optim::SGDOptions(0.1).nesterov(true));
        }).find("Nesterov") != std::string::npos);
  CHECK(error_of([&] {
          optim::SGD bad({a, a}, optim::SGDOptions(0.1));
        }).find("twice") != std::string::npos);
  CHECK(error_of([&] {
          optim::Adam bad({a}, optim::AdamOptions(0.1).betas({1.0, 0.9}));
        }).find("betas") != std::string::npos);
}

TEST_CASE("optimizer state dict: names, round trip, errors") {
  auto run = [](optim::Optimizer& opt, Tensor& p, int from, int to) {
    for (int s = from; s < to; ++s) {
      give_grad(p, grad_at(s, kStart.size()));
      opt.step();
    }
  };
  Tensor p1 = make_param(kStart);
  optim::AdamW first({p1}, optim::AdamWOptions(0.01).amsgrad(true));
  run(first, p1, 0, 3);
  const nn::NamedTensors state = first.state_dict();
  std::vector<std::string> names;
  for (const auto& [n, t] : state) names.push_back(n);
  CHECK(names == std::vector<std::string>{"state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq",
                                          "state.0.max_exp_avg_sq"});
  const std::string config = first.config_json();
  CHECK(config.find("\"type\":\"AdamW\"") != std::string::npos);

  // A fresh optimizer loaded from it continues exactly like the original.
  Tensor p2 =
      from_vector(p1.to_vector(), p1.sizes(), TensorOptions(DType::f64)).set_requires_grad(true);
  optim::AdamW second({p2}, optim::AdamWOptions(0.5));  // different lr: the config restores 0.01
  second.load_state_dict(state, config);
  CHECK(second.lr() == 0.01);
  CHECK(second.lr_tensor().item() == 0.01);
  run(first, p1, 3, 6);
  run(second, p2, 3, 6);
  CHECK(max_abs_diff(p1, p2) == 0);

  SUBCASE("errors name the entry") {
    optim::AdamW other({make_param(kStart)}, optim::AdamWOptions());
    nn::NamedTensors bad = {{"state.0.exp_avg", zeros({3}, TensorOptions(DType::f64))}};
    CHECK(error_of([&] { other.load_state_dict(bad); }).find("shape [3]") != std::string::npos);
    // A failed load leaves the optimizer as it was, options and learning rate included.
    CHECK(error_of([&] { other.load_state_dict(bad, config); }).find("shape [3]") !=
          std::string::npos);
    CHECK(other.lr() == 1e-3);
    CHECK(other.lr_tensor().item() == 1e-3);
    CHECK_FALSE(other.options().amsgrad());
    bad = {{"state.7.exp_avg", zeros({7}, TensorOptions(DType::f64))}};
    CHECK(error_of([&] { other.load_state_dict(bad); }).find("parameter 7") != std::string::npos);
    bad = {{"state.0.momentum_buffer", zeros({7}, TensorOptions(DType::f64))}};
    CHECK(error_of([&] { other.load_state_dict(bad); }).find("momentum_buffer") !=
          std::string::npos);
    bad = {{"exp_avg", zeros({7}, TensorOptions(DType::f64))}};
    CHECK(error_of([&] { other.load_state_dict(bad); }).find("state.<parameter index>") !=
          std::string::npos);
    optim::SGD sgd({make_param(kStart)}, optim::SGDOptions());
    CHECK(error_of([&] { sgd.load_state_dict({}, config); }).find("AdamW") != std::string::npos);
  }
}

// ---- schedulers (expected values: PyTorch's recursive formulas, see the generator in the report)

namespace {
void check_schedule(optim::LRScheduler& sched, optim::Optimizer& opt, const Vec& expect) {
  for (size_t e = 0; e < expect.size(); ++e) {
    CAPTURE(e);
    if (e > 0) sched.step();
    CHECK(sched.last_epoch() == int64_t(e));
    CHECK(opt.lr() == doctest::Approx(expect[e]).epsilon(1e-12));
    CHECK(opt.lr_tensor().item() == doctest::Approx(expect[e]).epsilon(1e-12));  // the device copy
    CHECK(sched.get_last_lr()[0] == doctest::Approx(expect[e]).epsilon(1e-12));
  }
}
}  // namespace

TEST_CASE("LR schedulers follow PyTorch's sequences") {
  Tensor p = make_param({1.0});
  SUBCASE("StepLR") {
    optim::SGD opt({p}, optim::SGDOptions(0.5));
    optim::StepLR s(opt, 3, 0.1);
    check_schedule(s, opt, {0.5, 0.5, 0.5, 0.05, 0.05, 0.05, 0.005, 0.005, 0.005, 0.0005});
  }
  SUBCASE("MultiStepLR (a repeated milestone counts twice)") {
    optim::SGD opt({p}, optim::SGDOptions(0.5));
    optim::MultiStepLR s(opt, {2, 5, 5}, 0.1);
    check_schedule(s, opt, {0.5, 0.5, 0.05, 0.05, 0.05, 0.0005, 0.0005, 0.0005});
  }
  SUBCASE("CosineAnnealingLR (past T_max it rises again)") {
    optim::SGD opt({p}, optim::SGDOptions(0.5));
    optim::CosineAnnealingLR s(opt, 10, 0.001);
    check_schedule(
        s, opt,
        {0.5, 0.48778860081564085, 0.4523497400965494, 0.3971524204469721, 0.3275997400965494,
         0.2505, 0.17340025990345065, 0.103847579553028, 0.04865025990345065, 0.013211399184359197,
         0.001, 0.013211399184359193, 0.048650259903450795, 0.10384757955302837});
  }
  SUBCASE("LinearLR warm-up") {
    optim::SGD opt({p}, optim::SGDOptions(0.5));
    optim::LinearLR s(opt, 0.25, 1.0, 4);
    check_schedule(s, opt, {0.125, 0.21875, 0.3125, 0.40625, 0.5, 0.5, 0.5});
  }
  SUBCASE("WarmupCosineLR = SequentialLR(LinearLR, CosineAnnealingLR)") {
    optim::SGD opt({p}, optim::SGDOptions(0.5));
    optim::WarmupCosineLR s(opt, 3, 10, 0.1, 0.0);
    check_schedule(
        s, opt,
        {0.05, 0.2, 0.35, 0.5, 0.47524221697560476, 0.4058724504646834, 0.3056302334890786,
         0.19436976651092142, 0.09412754953531663, 0.02475778302439524, 0.0});
  }
  SUBCASE("OneCycleLR cycles the LR and Adam's beta1") {
    optim::Adam opt({p}, optim::AdamOptions(123.0));
    optim::OneCycleLR s(opt, 1.0, 10);
    const Vec lr = {0.040000000000000036,
                    0.52,
                    1.0,
                    0.9504846320134737,
                    0.8117456539497631,
                    0.6112620219362893,
                    0.38874197806371075,
                    0.18825834605023697,
                    0.049519367986526286,
                    4e-06,
                    0.04951936798652623};
    const Vec momentum = {0.95,
                          0.8999999999999999,
                          0.85,
                          0.854951556604879,
                          0.8688255099070633,
                          0.8888739533021842,
                          0.9111260466978157,
                          0.9311744900929366,
                          0.945048443395121,
                          0.95,
                          0.945048443395121};
    check_schedule(s, opt, lr);
    optim::OneCycleLR again(opt, 1.0, 10);
    for (size_t e = 0; e < momentum.size(); ++e) {
      if (e > 0) again.step();
      CHECK(opt.momentum() == doctest::Approx(momentum[e]).epsilon(1e-12));
    }
    CHECK(error_of([&] { again.step(); }).find("total steps is 10") != std::string::npos);
    CHECK(again.last_epoch() == 10);  // the failed step changed nothing
  }
  SUBCASE("OneCycleLR three phases, linear") {
    optim::SGD opt({p}, optim::SGDOptions(0.5).momentum(0.9));
    optim::OneCycleLR s(
        opt, 0.2, 12,
        optim::OneCycleLROptions().pct_start(0.25).three_phase(true).anneal_strategy(
            optim::AnnealStrategy::linear));
    check_schedule(
        s, opt,
        {0.008, 0.10400000000000001, 0.2, 0.10400000000000001, 0.008000000000000007,
         0.006857257142857143, 0.005714514285714286, 0.004571771428571429, 0.0034290285714285718,
         0.0022862857142857147, 0.0011435428571428576, 8.000000000004531e-07});
    CHECK(opt.momentum() == doctest::Approx(0.95));
  }
  SUBCASE("state round trip") {
    optim::SGD opt({p}, optim::SGDOptions(0.5));
    optim::StepLR s(opt, 2, 0.5);
    for (int i = 0; i < 5; ++i) s.step();
    optim::StepLR t(opt, 2, 0.5);
    t.load_state_json(s.state_json());
    CHECK(t.last_epoch() == 5);
    t.step();
    CHECK(opt.lr() == doctest::Approx(0.5 * 0.125));
    optim::CosineAnnealingLR c(opt, 4);
    CHECK(error_of([&] { c.load_state_json(s.state_json()); }).find("StepLR") != std::string::npos);
  }
}

// ---- GradScaler ---------------------------------------------------------------------------------

TEST_CASE("GradScaler: scaling, unscaling, skipped steps, backoff and growth") {
  Tensor p = make_param({1.0, 2.0}, DType::f32);
  optim::Adam opt({p}, optim::AdamOptions(0.1));
  nn::GradScaler scaler(nn::GradScalerOptions().init_scale(1024).growth_interval(3));
  CHECK(scaler.get_scale() == 1024);
  Tensor loss = scalar_tensor(0.5);
  CHECK(scaler.scale(loss).item() == 512);

  // A clean step: gradients are unscaled (1/1024) before the update.
  give_grad(p, {1024.0, -2048.0});
  scaler.unscale_(opt);
  check_close(p.grad(), {1.0, -2.0}, 0, 0);
  CHECK(scaler.found_inf(opt).item() == 0);
  scaler.step(opt);
  scaler.update();
  CHECK(scaler.get_scale() == 1024);
  CHECK(scaler.growth_tracker().item() == 1);
  const Vec after_first = p.to_vector();
  CHECK(after_first[0] == doctest::Approx(0.9).epsilon(1e-6));

  // inf and NaN in the gradients: the step is skipped on the device, the scale backs off.
  for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
    give_grad(p, {bad, 1.0});
    scaler.step(opt);  // unscale_ + skipped step
    CHECK(scaler.found_inf(opt).item() == 1);
    scaler.update();
    check_close(p, after_first, 0, 0);
    for (const auto& [name, t] : opt.state_dict())
      if (name == "state.0.step") CHECK(t.item() == 1);  // the skipped steps did not count
    CHECK(scaler.growth_tracker().item() == 0);
  }
  CHECK(scaler.get_scale() == 256);

  // growth_interval clean steps double the scale.
  for (int i = 0; i < 3; ++i) {
    give_grad(p, {256.0, 256.0});
    scaler.step(opt);
    scaler.update();
  }
  CHECK(scaler.get_scale() == 512);
  CHECK(scaler.growth_tracker().item() == 0);

  // Misuse is reported.
  give_grad(p, {1.0, 1.0});
  scaler.unscale_(opt);
  CHECK(error_of([&] { scaler.unscale_(opt); }).find("already") != std::string::npos);
  scaler.step(opt);
  CHECK(error_of([&] { scaler.step(opt); }).find("already") != std::string::npos);
  scaler.update();
  CHECK(error_of([&] { scaler.update(); }).find("no inf checks") != std::string::npos);

  // State dict round trip; update(new_scale).
  nn::GradScaler restored;
  restored.load_state_dict(scaler.state_dict());
  CHECK(restored.get_scale() == scaler.get_scale());
  restored.update(8.0);
  CHECK(restored.get_scale() == 8.0);
}

TEST_CASE("GradScaler: growth stops at the largest finite scale; disabled is a pass-through") {
  Tensor p = make_param({1.0}, DType::f32);
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  nn::GradScaler big(nn::GradScalerOptions().init_scale(3e38).growth_interval(1));
  big.scale(scalar_tensor(1.0));
  give_grad(p, {1.0});
  big.step(opt);
  big.update();
  CHECK(big.get_scale() == doctest::Approx(3e38));  // 6e38 would overflow float32

  nn::GradScaler off(nn::GradScalerOptions().enabled(false));
  Tensor loss = scalar_tensor(2.0);
  CHECK(off.scale(loss).is_same(loss));
  give_grad(p, {1.0});
  const double before = p.item();
  off.step(opt);
  off.update();
  CHECK(p.item() == doctest::Approx(before - 0.1));
  CHECK(off.get_scale() == 1.0);
}

// ---- clip_grad_norm_ ----------------------------------------------------------------------------

TEST_CASE("clip_grad_norm_: the global norm over tensors and dtypes, clipped on the device") {
  Tensor a = make_param({0, 0}, DType::f32), b = make_param({0}, DType::f64), c = make_param({0});
  auto set = [&] {
    give_grad(a, {3.0, -4.0});
    give_grad(b, {12.0});
  };
  set();
  Tensor norm = nn::clip_grad_norm_({a, b, c}, 6.5);  // c has no gradient
  CHECK(norm.dtype() == DType::f32);
  CHECK(norm.dim() == 0);
  CHECK(norm.item() == doctest::Approx(13.0));
  const double coef = 6.5 / (13.0 + 1e-6);
  check_close(a.grad(), {3 * coef, -4 * coef}, 1e-6, 0);
  check_close(b.grad(), {12 * coef}, 1e-6, 0);

  set();
  CHECK(nn::clip_grad_norm_({a, b}, 100.0).item() == doctest::Approx(13.0));
  check_close(a.grad(), {3.0, -4.0}, 0, 0);  // coefficient clamped to 1

  set();
  CHECK(nn::grad_norm({a, b}, 1.0).item() == doctest::Approx(19.0));
  CHECK(nn::grad_norm({a, b}, INFINITY).item() == doctest::Approx(12.0));
  CHECK(nn::grad_norm({a, b}, 3.0).item() == doctest::Approx(std::cbrt(27.0 + 64.0 + 1728.0)));
  CHECK(nn::clip_grad_norm_({a, b}, 6.0, INFINITY).item() == doctest::Approx(12.0));
  check_close(b.grad(), {12.0 * 6.0 / (12.0 + 1e-6)}, 1e-6, 0);

  give_grad(a, {std::nan(""), 1.0});
  CHECK(std::isnan(nn::clip_grad_norm_({a, b}, 1.0).item()));
  CHECK(std::isnan(b.grad().item()));

  CHECK(nn::clip_grad_norm_({c}, 1.0).item() == 0);  // no gradients at all
  CHECK(error_of([&] { nn::grad_norm({a}, -1.0); }).find("norm_type") != std::string::npos);

  give_grad(a, {3.0, -40.0});
  nn::clip_grad_value_({a}, 5.0);
  check_close(a.grad(), {3.0, -5.0}, 0, 0);
}
