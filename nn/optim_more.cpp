// The element-wise optimizers of nn/optim_more.h: each optimizer's options checked, turned into
// the kernel's settings and into PyTorch-style group JSON; one shared step that gathers every
// parameter's gradient and state into the lists of kernel_interface/optim_more.h.
#include "ember/nn/optim_more.h"

#include <map>
#include <nlohmann/json.hpp>
#include <type_traits>

namespace ember::optim {

namespace {

using json = nlohmann::json;
using Algo = ember::ElementwiseOptimizer;

void check_range(bool ok, const char* op, size_t group, const char* what, double value,
                 const char* range) {
  EMBER_CHECK(ok, op, ": group ", group, ": ", what, " ", value, " must be ", range);
}

void check_betas(const std::pair<double, double>& b, const char* op, size_t group) {
  EMBER_CHECK(b.first >= 0 && b.first < 1 && b.second >= 0 && b.second < 1, op, ": group ", group,
              ": betas (", b.first, ", ", b.second, ") must each be in [0, 1)");
}

json betas_json(double beta1, const std::pair<double, double>& b) {
  return json::array({beta1, b.second});
}

std::pair<double, double> betas_from(const json& j, const char* op, size_t group) {
  const json& b = j.at("betas");
  EMBER_CHECK(b.is_array() && b.size() == 2, op, ".load_state_dict: group ", group,
              ": betas must be a list of two numbers, got ", b.dump());
  return {b[0].get<double>(), b[1].get<double>()};
}

// ---- per-optimizer traits: name, algorithm, checks, settings, JSON ----

const char* name_of(const RMSpropOptions&) { return "RMSprop"; }
const char* name_of(const AdagradOptions&) { return "Adagrad"; }
const char* name_of(const AdadeltaOptions&) { return "Adadelta"; }
const char* name_of(const AdamaxOptions&) { return "Adamax"; }
const char* name_of(const NAdamOptions&) { return "NAdam"; }
const char* name_of(const RAdamOptions&) { return "RAdam"; }

void check_common(double lr, double eps, double weight_decay, const char* op, size_t g) {
  check_range(lr >= 0, op, g, "learning rate", lr, "non-negative");
  check_range(eps >= 0, op, g, "eps", eps, "non-negative");
  check_range(weight_decay >= 0, op, g, "weight_decay", weight_decay, "non-negative");
}

void check(const RMSpropOptions& o, size_t g) {
  check_common(o.lr(), o.eps(), o.weight_decay(), "RMSprop", g);
  check_range(o.momentum() >= 0, "RMSprop", g, "momentum", o.momentum(), "non-negative");
  check_range(o.alpha() >= 0, "RMSprop", g, "alpha", o.alpha(), "non-negative");
}
void check(const AdagradOptions& o, size_t g) {
  check_common(o.lr(), o.eps(), o.weight_decay(), "Adagrad", g);
  check_range(o.lr_decay() >= 0, "Adagrad", g, "lr_decay", o.lr_decay(), "non-negative");
  check_range(o.initial_accumulator_value() >= 0, "Adagrad", g, "initial_accumulator_value",
              o.initial_accumulator_value(), "non-negative");
}
void check(const AdadeltaOptions& o, size_t g) {
  check_common(o.lr(), o.eps(), o.weight_decay(), "Adadelta", g);
  check_range(o.rho() >= 0 && o.rho() <= 1, "Adadelta", g, "rho", o.rho(), "in [0, 1]");
}
void check(const AdamaxOptions& o, size_t g) {
  check_common(o.lr(), o.eps(), o.weight_decay(), "Adamax", g);
  check_betas(o.betas(), "Adamax", g);
}
void check(const NAdamOptions& o, size_t g) {
  check_common(o.lr(), o.eps(), o.weight_decay(), "NAdam", g);
  check_betas(o.betas(), "NAdam", g);
  check_range(o.momentum_decay() >= 0, "NAdam", g, "momentum_decay", o.momentum_decay(),
              "non-negative");
}
void check(const RAdamOptions& o, size_t g) {
  check_common(o.lr(), o.eps(), o.weight_decay(), "RAdam", g);
  check_betas(o.betas(), "RAdam", g);
}

Algo algorithm_of(const RMSpropOptions&) { return Algo::rmsprop; }
Algo algorithm_of(const AdagradOptions&) { return Algo::adagrad; }
Algo algorithm_of(const AdadeltaOptions&) { return Algo::adadelta; }
Algo algorithm_of(const AdamaxOptions&) { return Algo::adamax; }
Algo algorithm_of(const NAdamOptions&) { return Algo::nadam; }
Algo algorithm_of(const RAdamOptions&) { return Algo::radam; }

// The momentum kept on the device (0 for the optimizers without one).
double momentum_of(const RMSpropOptions& o) { return o.momentum(); }
double momentum_of(const AdagradOptions&) { return 0; }
double momentum_of(const AdadeltaOptions&) { return 0; }
template <typename O>
double momentum_of(const O& o) {
  return o.betas().first;
}

ElementwiseGroupSettings settings_of(const RMSpropOptions& o) {
  ElementwiseGroupSettings s;
  s.alpha = o.alpha(), s.eps = o.eps(), s.weight_decay = o.weight_decay();
  s.centered = o.centered(), s.maximize = o.maximize();
  return s;
}
ElementwiseGroupSettings settings_of(const AdagradOptions& o) {
  ElementwiseGroupSettings s;
  s.lr_decay = o.lr_decay(), s.eps = o.eps(), s.weight_decay = o.weight_decay();
  s.initial_accumulator_value = o.initial_accumulator_value(), s.maximize = o.maximize();
  return s;
}
ElementwiseGroupSettings settings_of(const AdadeltaOptions& o) {
  ElementwiseGroupSettings s;
  s.alpha = o.rho(), s.eps = o.eps(), s.weight_decay = o.weight_decay();
  s.maximize = o.maximize();
  return s;
}
ElementwiseGroupSettings settings_of(const AdamaxOptions& o) {
  ElementwiseGroupSettings s;
  s.alpha = o.betas().second, s.eps = o.eps(), s.weight_decay = o.weight_decay();
  s.maximize = o.maximize();
  return s;
}
ElementwiseGroupSettings settings_of(const NAdamOptions& o) {
  ElementwiseGroupSettings s;
  s.alpha = o.betas().second, s.eps = o.eps(), s.weight_decay = o.weight_decay();
  s.momentum_decay = o.momentum_decay(), s.decoupled_weight_decay = o.decoupled_weight_decay();
  s.maximize = o.maximize();
  return s;
}
ElementwiseGroupSettings settings_of(const RAdamOptions& o) {
  ElementwiseGroupSettings s;
  s.alpha = o.betas().second, s.eps = o.eps(), s.weight_decay = o.weight_decay();
  s.decoupled_weight_decay = o.decoupled_weight_decay(), s.maximize = o.maximize();
  return s;
}

// Group JSON (PyTorch's param_group keys, without lr and params); `momentum` is the device
// scalar's host value, which set_momentum may have changed since construction.
json to_json(const RMSpropOptions& o, double momentum) {
  return {{"alpha", o.alpha()},   {"eps", o.eps()},           {"weight_decay", o.weight_decay()},
          {"momentum", momentum}, {"centered", o.centered()}, {"maximize", o.maximize()}};
}
json to_json(const AdagradOptions& o, double) {
  return {{"lr_decay", o.lr_decay()},
          {"weight_decay", o.weight_decay()},
          {"initial_accumulator_value", o.initial_accumulator_value()},
          {"eps", o.eps()},
          {"maximize", o.maximize()}};
}
json to_json(const AdadeltaOptions& o, double) {
  return {{"rho", o.rho()},
          {"eps", o.eps()},
          {"weight_decay", o.weight_decay()},
          {"maximize", o.maximize()}};
}
json to_json(const AdamaxOptions& o, double beta1) {
  return {{"betas", betas_json(beta1, o.betas())},
          {"eps", o.eps()},
          {"weight_decay", o.weight_decay()},
          {"maximize", o.maximize()}};
}
json to_json(const NAdamOptions& o, double beta1) {
  return {{"betas", betas_json(beta1, o.betas())},
          {"eps", o.eps()},
          {"weight_decay", o.weight_decay()},
          {"momentum_decay", o.momentum_decay()},
          {"decoupled_weight_decay", o.decoupled_weight_decay()},
          {"maximize", o.maximize()}};
}
json to_json(const RAdamOptions& o, double beta1) {
  return {{"betas", betas_json(beta1, o.betas())},
          {"eps", o.eps()},
          {"weight_decay", o.weight_decay()},
          {"decoupled_weight_decay", o.decoupled_weight_decay()},
          {"maximize", o.maximize()}};
}

void from_json(RMSpropOptions& o, const json& j, size_t) {
  o.alpha(j.at("alpha").get<double>())
      .eps(j.at("eps").get<double>())
      .weight_decay(j.at("weight_decay").get<double>())
      .momentum(j.at("momentum").get<double>())
      .centered(j.at("centered").get<bool>())
      .maximize(j.value("maximize", false));
}
void from_json(AdagradOptions& o, const json& j, size_t) {
  o.lr_decay(j.at("lr_decay").get<double>())
      .weight_decay(j.at("weight_decay").get<double>())
      .initial_accumulator_value(j.at("initial_accumulator_value").get<double>())
      .eps(j.at("eps").get<double>())
      .maximize(j.value("maximize", false));
}
void from_json(AdadeltaOptions& o, const json& j, size_t) {
  o.rho(j.at("rho").get<double>())
      .eps(j.at("eps").get<double>())
      .weight_decay(j.at("weight_decay").get<double>())
      .maximize(j.value("maximize", false));
}
void from_json(AdamaxOptions& o, const json& j, size_t g) {
  o.betas(betas_from(j, "Adamax", g))
      .eps(j.at("eps").get<double>())
      .weight_decay(j.at("weight_decay").get<double>())
      .maximize(j.value("maximize", false));
}
void from_json(NAdamOptions& o, const json& j, size_t g) {
  o.betas(betas_from(j, "NAdam", g))
      .eps(j.at("eps").get<double>())
      .weight_decay(j.at("weight_decay").get<double>())
      .momentum_decay(j.at("momentum_decay").get<double>())
      .decoupled_weight_decay(j.value("decoupled_weight_decay", false))
      .maximize(j.value("maximize", false));
}
void from_json(RAdamOptions& o, const json& j, size_t g) {
  o.betas(betas_from(j, "RAdam", g))
      .eps(j.at("eps").get<double>())
      .weight_decay(j.at("weight_decay").get<double>())
      .decoupled_weight_decay(j.value("decoupled_weight_decay", false))
      .maximize(j.value("maximize", false));
}

}  // namespace

// ---- ElementwiseOptimizerOf -----------------------------------------------------------------

template <typename Options>
std::string ElementwiseOptimizerOf<Options>::name() const {
  return name_of(Options());
}

template <typename Options>
void ElementwiseOptimizerOf<Options>::init(std::vector<ParamGroup<Options>> groups) {
  EMBER_CHECK(!groups.empty(), name_of(Options()), ": no parameter groups given");
  for (auto& g : groups) add_param_group(std::move(g.params), g.options);
}

template <typename Options>
void ElementwiseOptimizerOf<Options>::add_param_group(std::vector<Tensor> params,
                                                      const Options& options) {
  check(options, groups_.size());
  add_group(std::move(params), options.lr(), momentum_of(options));
  options_.push_back(options);
  if constexpr (std::is_same_v<Options, AdagradOptions>) {
    // PyTorch's Adagrad makes its state at construction: step 0, sum = initial_accumulator_value.
    autograd::NoGradGuard no_grad;
    const Group& group = groups_.back();
    for (size_t i = 0; i < group.params.size(); ++i) {
      state(group.first_index + i, "step");
      state(group.first_index + i, "sum").fill_(options.initial_accumulator_value());
    }
  }
}

template <typename Options>
void ElementwiseOptimizerOf<Options>::validate_momentum(double momentum) const {
  const Algo algo = algorithm_of(Options());
  EMBER_CHECK(algo != Algo::adagrad && algo != Algo::adadelta, name(), ".set_momentum: ", name(),
              " has no momentum");
  if (algo != Algo::rmsprop)
    EMBER_CHECK(momentum < 1, name(), ".set_momentum: beta1 ", momentum, " must be below 1");
}

template <typename Options>
std::vector<std::string> ElementwiseOptimizerOf<Options>::state_names(size_t g) const {
  const Options& o = options_[g];
  switch (algorithm_of(o)) {
    case Algo::rmsprop: {
      std::vector<std::string> names = {"step", "square_avg"};
      if (groups_[g].momentum != 0) names.push_back("momentum_buffer");
      if (settings_of(o).centered) names.push_back("grad_avg");
      return names;
    }
    case Algo::adagrad:
      return {"step", "sum"};
    case Algo::adadelta:
      return {"step", "square_avg", "acc_delta"};
    case Algo::adamax:
      return {"step", "exp_avg", "exp_inf"};
    case Algo::nadam:
      return {"step", "mu_product", "exp_avg", "exp_avg_sq"};
    case Algo::radam:
      return {"step", "exp_avg", "exp_avg_sq"};
  }
  return {};
}

template <typename Options>
void ElementwiseOptimizerOf<Options>::step_group(size_t g, const std::vector<size_t>& with_grad,
                                                 const Tensor& found_inf) {
  const Group& group = groups_[g];
  const Options& o = options_[g];
  const ElementwiseGroupSettings s = settings_of(o);
  const Algo algo = algorithm_of(o);
  // The kernel's state lists, in kernel_interface/optim_more.h's order.
  std::vector<std::string> lists;
  switch (algo) {
    case Algo::rmsprop:
      lists = {"square_avg"};
      if (s.centered) lists.push_back("grad_avg");
      if (group.momentum != 0) lists.push_back("momentum_buffer");
      break;
    case Algo::adagrad:
      lists = {"sum"};
      break;
    case Algo::adadelta:
      lists = {"square_avg", "acc_delta"};
      break;
    case Algo::adamax:
      lists = {"exp_avg", "exp_inf"};
      break;
    case Algo::nadam:
    case Algo::radam:
      lists = {"exp_avg", "exp_avg_sq"};
      break;
  }
  std::map<DType, ElementwiseOptimizerArgs> by_dtype;
  for (size_t i : with_grad) {
    const Tensor& p = group.params[i];
    const size_t index = group.first_index + i;
    ElementwiseOptimizerArgs& a = by_dtype[p.dtype()];
    a.params.push_back(p);
    a.grads.push_back(grad_for_update(p));
    a.steps.push_back(state(index, "step"));
    if (algo == Algo::nadam) {
      const bool fresh = !has_state(index, "mu_product");
      Tensor mu_product = state(index, "mu_product");
      if (fresh) mu_product.fill_(1.0);
      a.mu_products.push_back(mu_product);
    }
    for (size_t l = 0; l < lists.size(); ++l) {
      const bool fresh = !has_state(index, lists[l]);
      Tensor t = state(index, lists[l]);
      if (fresh && algo == Algo::adagrad && s.initial_accumulator_value != 0)
        t.fill_(s.initial_accumulator_value);
      a.states[l].push_back(t);
    }
  }
  const Device device = group.lr_device.device();
  for (auto& [dtype, a] : by_dtype) {
    a.algorithm = algo;
    a.lr = group.lr_device;
    a.momentum = group.momentum_device;
    a.found_inf = found_inf;
    a.alpha = s.alpha;
    a.eps = s.eps;
    a.weight_decay = s.weight_decay;
    a.lr_decay = s.lr_decay;
    a.momentum_decay = s.momentum_decay;
    a.maximize = s.maximize;
    a.decoupled_weight_decay = s.decoupled_weight_decay;
    a.centered = s.centered;
    a.use_momentum = algo == Algo::rmsprop && group.momentum != 0;
    elementwise_optimizer_kernel().get(device.type, dtype)(a);
  }
}

template <typename Options>
std::string ElementwiseOptimizerOf<Options>::group_options_json(size_t g) const {
  return to_json(options_[g], groups_[g].momentum).dump();
}

template <typename Options>
void ElementwiseOptimizerOf<Options>::load_group_options_json(size_t g, const std::string& text) {
  const json j = json::parse(text);
  Options o = options_[g];
  try {
    from_json(o, j, g);
  } catch (const json::exception& e) {
    EMBER_THROW(bad_param, name(), ".load_state_dict: parameter group ", g, " options ", text,
                " are incomplete (", e.what(), ")");
  }
  check(o, g);
  options_[g] = o;
  const Algo algo = algorithm_of(o);
  if (algo != Algo::adagrad && algo != Algo::adadelta) set_momentum(g, momentum_of(o));
}

template class ElementwiseOptimizerOf<RMSpropOptions>;
template class ElementwiseOptimizerOf<AdagradOptions>;
template class ElementwiseOptimizerOf<AdadeltaOptions>;
template class ElementwiseOptimizerOf<AdamaxOptions>;
template class ElementwiseOptimizerOf<NAdamOptions>;
template class ElementwiseOptimizerOf<RAdamOptions>;

}  // namespace ember::optim
