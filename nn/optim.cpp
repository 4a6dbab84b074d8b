// The optimizers of nn/optim.h (parameter groups, device-resident learning rates, state dicts) and
// the definitions of the kernel tables of kernel_interface/optim.h, whose kernels live in
// cpu_kernels/optim.cpp and cuda_kernels/optim/optim.cu.
#include "ember/nn/optim.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "ember/kernel_interface/optim.h"
#include "ember/tensor/json_depth.h"
#include "ember/tensor/runtime/cuda_graph.h"

namespace ember {
EMBER_DEFINE_KERNEL(sgd_kernel, SgdKernel)
EMBER_DEFINE_KERNEL(adam_kernel, AdamKernel)
EMBER_DEFINE_KERNEL(unscale_kernel, UnscaleKernel)
EMBER_DEFINE_KERNEL(update_scale_kernel, UpdateScaleKernel)
EMBER_DEFINE_KERNEL(grad_norm_kernel, GradNormKernel)
EMBER_DEFINE_KERNEL(clip_by_norm_kernel, ClipByNormKernel)

GradsByDtype group_grads_by_dtype(const std::vector<Tensor>& parameters, const char* op,
                                  const char* mixed_devices_hint) {
  GradsByDtype grads;
  bool have_device = false;
  for (const Tensor& p : parameters) {
    EMBER_CHECK(p.defined(), op, ": a parameter is an undefined tensor");
    if (!p.grad().defined()) continue;
    Tensor param = p;  // a handle, to replace its gradient
    if (!is_dense_layout(param.grad())) param.set_grad(param.grad().contiguous());
    const Tensor& g = param.grad();
    EMBER_CHECK(is_floating(g.dtype()), op, ": a gradient has dtype ", dtype_name(g.dtype()));
    if (!have_device) {
      grads.device = g.device();
      have_device = true;
    }
    EMBER_CHECK(g.device() == grads.device, op, ": gradients live on ", grads.device.str(), " and ",
                g.device().str(), "; ", mixed_devices_hint);
    grads.lists[g.dtype()].push_back(g);
  }
  return grads;
}

}  // namespace ember

namespace ember::optim {

namespace {

using json = nlohmann::json;

void check_not_capturing(Device device, const char* what) {
  EMBER_CHECK(!cuda::current_stream_capturing(device), what, ": the current stream of ",
              device.str(),
              " is capturing a CUDA graph; change learning rates, momentum and "
              "optimizer state between replays (outside the captured region), not inside it");
}

}  // namespace

// ---- Optimizer --------------------------------------------------------------------------------

void Optimizer::add_group(std::vector<Tensor> params, double lr, double momentum) {
  const std::string op = name() + ": parameter group " + std::to_string(groups_.size());
  EMBER_CHECK(!params.empty(), op, " is empty; give it at least one parameter");
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    EMBER_CHECK(p.defined(), op, ": parameter ", i, " is an undefined tensor");
    EMBER_CHECK(is_floating(p.dtype()), op, ": parameter ", i, " has dtype ", dtype_name(p.dtype()),
                "; only floating tensors can be optimized");
    EMBER_CHECK(p.is_leaf(), op, ": parameter ", i, " (shape ", p.shape_str(),
                ") is not a leaf "
                "tensor (it was computed from other tensors); optimize the leaf it came from");
    EMBER_CHECK(is_dense_layout(p), op, ": parameter ", i, " (shape ", p.shape_str(), ", strides ",
                shape_str(p.strides()),
                ") is not dense; optimizers update whole dense tensors, so "
                "pass the tensor this view was taken from");
    for (const Group& other : groups_)
      for (const Tensor& q : other.params)
        EMBER_CHECK(!q.is_same(p), op, ": parameter ", i, " is already in another parameter group");
    for (size_t j = 0; j < i; ++j)
      EMBER_CHECK(!params[j].is_same(p), op, ": parameter ", i, " appears twice (also as ", j, ")");
  }
  Group group;
  group.first_index = state_.size();
  group.lr = lr;
  group.momentum = momentum;
  state_.resize(state_.size() + params.size());
  group.params = std::move(params);
  place_group_scalars(group, group.params[0].device());
  groups_.push_back(std::move(group));
}

void Optimizer::place_group_scalars(Group& group, Device device) {
  if (group.lr_device.defined() && group.lr_device.device() == device) return;
  check_not_capturing(device,
                      (name() + ".step (moving the learning rate to a new device)").c_str());
  group.lr_device = full({}, group.lr, TensorOptions(DType::f64).with_device(device));
  group.momentum_device = full({}, group.momentum, TensorOptions(DType::f64).with_device(device));
}

const std::vector<Tensor>& Optimizer::params(size_t group) const {
  EMBER_CHECK(group < groups_.size(), name(), ": no parameter group ", group, " (there are ",
              groups_.size(), ")");
  return groups_[group].params;
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (const Group& g : groups_) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

double Optimizer::lr(size_t group) const {
  params(group);  // range check
  return groups_[group].lr;
}

void Optimizer::set_lr(size_t group, double lr) {
  params(group);
  EMBER_CHECK(lr >= 0, name(), ".set_lr: learning rate ", lr, " is negative");
  Group& g = groups_[group];
  check_not_capturing(g.lr_device.device(), (name() + ".set_lr").c_str());
  g.lr = lr;
  g.lr_device.fill_(lr);
}

void Optimizer::set_lr(double lr) {
  for (size_t g = 0; g < groups_.size(); ++g) set_lr(g, lr);
}

const Tensor& Optimizer::lr_tensor(size_t group) const {
  params(group);
  return groups_[group].lr_device;
}

double Optimizer::momentum(size_t group) const {
  params(group);
  return groups_[group].momentum;
}

void Optimizer::set_momentum(size_t group, double momentum) {
  params(group);
  EMBER_CHECK(momentum >= 0, name(), ".set_momentum: ", momentum, " is negative");
  validate_momentum(momentum);
  Group& g = groups_[group];
  check_not_capturing(g.momentum_device.device(), (name() + ".set_momentum").c_str());
  g.momentum = momentum;
  g.momentum_device.fill_(momentum);
}

void Optimizer::step() { step_impl(Tensor()); }

void Optimizer::step(const Tensor& found_inf) {
  EMBER_CHECK(found_inf.defined(), name(),
              ".step(found_inf): found_inf is undefined; call step() "
              "to step unconditionally");
  step_impl(found_inf);
}

void Optimizer::step_impl(const Tensor& found_inf) {
  autograd::NoGradGuard no_grad;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    Group& group = groups_[gi];
    std::vector<size_t> with_grad;
    for (size_t i = 0; i < group.params.size(); ++i)
      if (group.params[i].grad().defined()) with_grad.push_back(i);
    if (with_grad.empty()) continue;
    const Device device = group.params[with_grad[0]].device();
    for (size_t i : with_grad) {
      const Tensor& p = group.params[i];
      const Tensor& g = p.grad();
      // The messages are only built when a check fails; this loop runs per parameter each step.
      const size_t index = group.first_index + i;
      EMBER_CHECK(p.device() == device, name(), ".step: parameter ", index, " is on ",
                  p.device().str(), " but others of its group are on ", device.str(),
                  "; put parameters of different devices in different parameter groups");
      EMBER_CHECK(is_dense_layout(p), name(), ".step: parameter ", index, " (shape ", p.shape_str(),
                  ") is no longer dense");
      EMBER_CHECK(g.device() == device && g.dtype() == p.dtype() && g.sizes() == p.sizes(), name(),
                  ".step: parameter ", index, " (", p.shape_str(), ", ", dtype_name(p.dtype()),
                  ", ", p.device().str(), ") has a gradient of shape ", g.shape_str(), ", dtype ",
                  dtype_name(g.dtype()), " on ", g.device().str(),
                  "; gradients must match their parameters");
    }
    if (found_inf.defined())
      EMBER_CHECK(
          found_inf.device() == device && found_inf.dtype() == DType::f32 && found_inf.numel() == 1,
          name(), ".step: found_inf must be a float32 one-element tensor on ", device.str(),
          ", got ", found_inf.shape_str(), " ", dtype_name(found_inf.dtype()), " on ",
          found_inf.device().str());
    place_group_scalars(group, device);
    step_group(gi, with_grad, found_inf);
    for (size_t i : with_grad) group.params[i].bump_version();
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  autograd::NoGradGuard no_grad;
  for (Group& g : groups_)
    for (Tensor& p : g.params) {
      if (!p.grad().defined()) continue;
      if (set_to_none)
        p.set_grad(Tensor());
      else
        p.mutable_grad().zero_();
    }
}

Tensor Optimizer::state(size_t index, const std::string& state_name) {
  EMBER_INTERNAL_ASSERT(index < state_.size());
  const Tensor* param = nullptr;
  for (const Group& g : groups_)
    if (index >= g.first_index && index < g.first_index + g.params.size())
      param = &g.params[index - g.first_index];
  EMBER_INTERNAL_ASSERT(param != nullptr);
  const bool is_step = is_scalar_state(state_name);
  ParamState& entries = state_[index];
  auto it = std::find_if(entries.begin(), entries.end(),
                         [&](const auto& e) { return e.first == state_name; });
  if (it != entries.end()) {
    Tensor& t = it->second;
    const bool placed = t.device() == param->device() &&
                        (is_step || (t.dtype() == param->dtype() && same_layout(t, *param)));
    if (!placed) {
      check_not_capturing(param->device(), (name() + ".step (moving optimizer state)").c_str());
      Tensor moved = is_step ? empty({}, DType::f32, param->device())
                             : empty_with_layout_of(*param, param->dtype());
      moved.copy_(t);
      t = moved;
    }
    return t;
  }
  check_not_capturing(param->device(), (name() + ".step (creating optimizer state)").c_str());
  Tensor fresh = is_step ? empty({}, DType::f32, param->device())
                         : empty_with_layout_of(*param, param->dtype());
  fresh.zero_();
  entries.emplace_back(state_name, fresh);
  return entries.back().second;
}

bool Optimizer::has_state(size_t index, const std::string& state_name) const {
  EMBER_INTERNAL_ASSERT(index < state_.size());
  for (const auto& entry : state_[index])
    if (entry.first == state_name) return true;
  return false;
}

Tensor Optimizer::grad_for_update(const Tensor& param) {
  const Tensor& g = param.grad();
  if (same_layout(g, param) && is_dense_layout(g)) return g;
  Tensor relaid = empty_with_layout_of(param, g.dtype());
  relaid.copy_(g);
  return relaid;
}

NamedTensors Optimizer::state_dict() const {
  NamedTensors out;
  for (size_t i = 0; i < state_.size(); ++i)
    for (const auto& [n, t] : state_[i])
      out.emplace_back("state." + std::to_string(i) + "." + n, t);
  return out;
}

std::string Optimizer::config_json() const {
  json groups = json::array();
  for (size_t g = 0; g < groups_.size(); ++g) {
    json entry = json::parse(group_options_json(g));
    entry["lr"] = groups_[g].lr;
    std::vector<size_t> indices;
    for (size_t i = 0; i < groups_[g].params.size(); ++i)
      indices.push_back(groups_[g].first_index + i);
    entry["params"] = indices;
    groups.push_back(entry);
  }
  // The parameters that have state, so that a strict load can tell a missing entry from a
  // parameter that never took a step.
  std::vector<size_t> stateful;
  for (size_t i = 0; i < state_.size(); ++i)
    if (!state_[i].empty()) stateful.push_back(i);
  return json{{"type", name()}, {"param_groups", groups}, {"stateful", stateful}}.dump();
}

namespace {
// load_state_dict's strict check: the entries `seen` against the optimizer's groups (`layout`:
// each group's parameter count and state names) and the parsed config (null when none).
void check_complete(const std::string& op, const std::string& name,
                    const std::vector<std::pair<size_t, std::vector<std::string>>>& layout,
                    const std::set<std::pair<size_t, std::string>>& seen, const json& config) {
  // Which parameters must have state: those the saving optimizer listed, else (a config without
  // the list, or none) those that have any entry, and at least one when the optimizer keeps state.
  std::set<size_t> expected;
  const bool listed = config.is_object() && config.contains("stateful");
  if (listed) {
    for (const json& i : config["stateful"]) expected.insert(size_t(i.get<uint64_t>()));
  } else {
    for (const auto& [index, state_name] : seen) expected.insert(index);
  }
  std::string missing;
  size_t count = 0, index = 0;
  bool keeps_state = false;
  for (const auto& [size, names] : layout)
    for (size_t i = 0; i < size; ++i, ++index) {
      keeps_state = keeps_state || !names.empty();
      for (const std::string& n : names) {
        const bool have = seen.count({index, n}) > 0;
        if (!have && expected.count(index)) {
          if (count++ < 10)
            missing += (missing.empty() ? "" : ", ") + ("state." + std::to_string(index) + "." + n);
        } else if (have && !expected.count(index)) {
          EMBER_THROW(bad_param, op, ": unexpected entry 'state.", index, ".", n, "': the config ",
                      "says parameter ", index,
                      " had no state; pass strict=false to load it anyway");
        }
      }
    }
  if (count > 10) missing += ", ... (" + std::to_string(count) + " in all)";
  EMBER_CHECK(missing.empty(), op, ": missing state entries: ", missing, ". The state is ",
              "partial, so resuming would diverge; pass strict=false to recreate the missing ",
              "state as zeros");
  EMBER_CHECK(listed || !keeps_state || !seen.empty(), op, ": no optimizer state was given (and ",
              "no config listing which parameters have state); loading it would wipe this ", name,
              "'s state. Pass the saved state_dict() and config_json(), or strict=false to reset");
}
}  // namespace

void Optimizer::load_state_dict(const NamedTensors& saved, const std::string& config, bool strict) {
  const std::string op = name() + ".load_state_dict";
  // ---- validate the config's layout ----
  json parsed;
  if (!config.empty()) {
    EMBER_CHECK(json_nesting_depth(config) <= kMaxJsonDepth, op, ": the optimizer config nests ",
                "deeper than ", kMaxJsonDepth, " levels; it is corrupt");
    try {
      parsed = json::parse(config);
    } catch (const json::exception& e) {
      EMBER_THROW(bad_param, op, ": the optimizer config is not valid JSON (", e.what(), ")");
    }
    EMBER_CHECK(parsed.is_object() && parsed.contains("type") && parsed.contains("param_groups") &&
                    parsed["param_groups"].is_array(),
                op, ": the optimizer config must be an object with \"type\" and \"param_groups\"");
    EMBER_CHECK(parsed["type"] == name(), op, ": the state was saved by a ", parsed["type"].dump(),
                " optimizer, this is ", name());
    const json& groups = parsed["param_groups"];
    EMBER_CHECK(groups.size() == groups_.size(), op, ": the state has ", groups.size(),
                " parameter groups, this optimizer ", groups_.size());
    for (size_t g = 0; g < groups_.size(); ++g) {
      const json& entry = groups[g];
      EMBER_CHECK(entry.is_object() && entry.contains("params") && entry["params"].is_array() &&
                      entry.contains("lr") && entry["lr"].is_number(),
                  op, ": parameter group ", g, " of the state lacks \"params\" or \"lr\"");
      EMBER_CHECK(entry["params"].size() == groups_[g].params.size(), op, ": parameter group ", g,
                  " has ", entry["params"].size(), " parameters in the state but ",
                  groups_[g].params.size(), " here");
    }
    if (parsed.contains("stateful")) {
      const json& st = parsed["stateful"];
      EMBER_CHECK(st.is_array(), op,
                  ": the config's \"stateful\" is not a list of parameter indices");
      for (const json& i : st)
        EMBER_CHECK(i.is_number_unsigned() && i.get<uint64_t>() < state_.size(), op,
                    ": the config's \"stateful\" lists ", i.dump(),
                    ", not a parameter index below ", state_.size());
    }
  }
  // The state names allowed depend on the options (amsgrad, momentum), which the config may
  // change: apply the config first and restore the previous one if anything does not fit.
  autograd::NoGradGuard no_grad;
  const std::string previous_config = config_json();
  auto apply_config = [&](const json& groups) {
    for (size_t g = 0; g < groups_.size(); ++g) {
      json options = groups[g];
      options.erase("params");
      load_group_options_json(g, options.dump());
      set_lr(g, groups[g]["lr"].get<double>());
    }
  };
  struct Entry {
    size_t index;
    std::string name;
    Tensor value;
  };
  std::vector<Entry> entries;
  std::vector<ParamState> fresh(state_.size());
  try {
    if (!config.empty()) apply_config(parsed["param_groups"]);
    std::set<std::pair<size_t, std::string>> seen;
    for (const auto& [key, value] : saved) {
      const std::string prefix = "state.";
      const size_t dot = key.find('.', prefix.size());
      bool digits = key.rfind(prefix, 0) == 0 && dot != std::string::npos && dot > prefix.size();
      for (size_t k = prefix.size(); digits && k < dot; ++k)
        digits = std::isdigit(uint8_t(key[k])) != 0;
      EMBER_CHECK(digits && dot + 1 < key.size(), op, ": unexpected entry '", key,
                  "'; optimizer state entries are named \"state.<parameter index>.<name>\"");
      size_t index = 0;
      const auto [end, ec] = std::from_chars(key.data() + prefix.size(), key.data() + dot, index);
      EMBER_CHECK(ec == std::errc() && end == key.data() + dot && index < state_.size(), op,
                  ": entry '", key, "' names parameter ",
                  key.substr(prefix.size(), dot - prefix.size()), " but this optimizer has ",
                  state_.size(), " parameters");
      const std::string state_name = key.substr(dot + 1);
      size_t g = 0;
      while (index >= groups_[g].first_index + groups_[g].params.size()) ++g;
      const std::vector<std::string> names = state_names(g);
      EMBER_CHECK(std::find(names.begin(), names.end(), state_name) != names.end(), op,
                  ": unexpected entry '", key, "': ", name(), " with these options keeps no '",
                  state_name, "' state for parameter ", index);
      EMBER_CHECK(value.defined(), op, ": entry '", key, "' is an undefined tensor");
      const Tensor& p = groups_[g].params[index - groups_[g].first_index];
      if (is_scalar_state(state_name)) {
        EMBER_CHECK(value.numel() == 1, op, ": entry '", key, "' must hold one value, got shape ",
                    value.shape_str());
      } else {
        EMBER_CHECK(value.sizes() == p.sizes(), op, ": entry '", key, "' has shape ",
                    value.shape_str(), " but parameter ", index, " has shape ", p.shape_str());
        EMBER_CHECK(is_floating(value.dtype()), op, ": entry '", key, "' has dtype ",
                    dtype_name(value.dtype()), "; optimizer state is floating");
      }
      EMBER_CHECK(seen.insert({index, state_name}).second, op, ": entry '", key, "' appears twice");
      entries.push_back({index, state_name, value});
    }
    if (strict) {
      std::vector<std::pair<size_t, std::vector<std::string>>> layout;  // (size, state names)
      for (size_t g = 0; g < groups_.size(); ++g)
        layout.emplace_back(groups_[g].params.size(), state_names(g));
      check_complete(op, name(), layout, seen, parsed);
    }
    // Copies into new tensors first: nothing of the optimizer changes until all of them exist.
    for (const Entry& e : entries) {
      size_t g = 0;
      while (e.index >= groups_[g].first_index + groups_[g].params.size()) ++g;
      const Tensor& p = groups_[g].params[e.index - groups_[g].first_index];
      const bool scalar = is_scalar_state(e.name);
      Tensor target =
          scalar ? empty({}, DType::f32, p.device()) : empty_with_layout_of(p, p.dtype());
      target.copy_(scalar ? e.value.reshape({}) : e.value);
      fresh[e.index].emplace_back(e.name, target);
    }
  } catch (...) {
    if (!config.empty()) apply_config(json::parse(previous_config)["param_groups"]);
    throw;
  }
  state_.swap(fresh);
}

// ---- SGD ----------------------------------------------------------------------------------------

namespace {
void check_sgd_options(const SGDOptions& o, size_t group) {
  EMBER_CHECK(o.lr() >= 0, "SGD: group ", group, ": learning rate ", o.lr(), " is negative");
  EMBER_CHECK(o.momentum() >= 0, "SGD: group ", group, ": momentum ", o.momentum(), " is negative");
  EMBER_CHECK(o.weight_decay() >= 0, "SGD: group ", group, ": weight_decay ", o.weight_decay(),
              " is negative");
  EMBER_CHECK(!o.nesterov() || (o.momentum() > 0 && o.dampening() == 0), "SGD: group ", group,
              ": Nesterov momentum needs momentum > 0 and dampening 0 (got momentum ", o.momentum(),
              ", dampening ", o.dampening(), ")");
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options) {
  add_param_group(std::move(params), options);
}

SGD::SGD(const std::vector<ParamGroup<SGDOptions>>& groups) {
  EMBER_CHECK(!groups.empty(), "SGD: no parameter groups given");
  for (const auto& g : groups) add_param_group(g.params, g.options);
}

void SGD::add_param_group(std::vector<Tensor> params, const SGDOptions& options) {
  check_sgd_options(options, groups_.size());
  add_group(std::move(params), options.lr(), options.momentum());
  options_.push_back(options);
}

std::vector<std::string> SGD::state_names(size_t g) const {
  if (groups_[g].momentum == 0) return {};
  return {"momentum_buffer", "step"};
}

void SGD::step_group(size_t g, const std::vector<size_t>& with_grad, const Tensor& found_inf) {
  const Group& group = groups_[g];
  const SGDOptions& o = options_[g];
  const bool use_momentum = group.momentum != 0;
  std::map<DType, SgdKernelArgs> by_dtype;
  for (size_t i : with_grad) {
    const Tensor& p = group.params[i];
    SgdKernelArgs& a = by_dtype[p.dtype()];
    a.params.push_back(p);
    a.grads.push_back(grad_for_update(p));
    if (use_momentum) {
      a.momentum_buffers.push_back(state(group.first_index + i, "momentum_buffer"));
      a.steps.push_back(state(group.first_index + i, "step"));
    }
  }
  const Device device = group.lr_device.device();
  for (auto& [dtype, a] : by_dtype) {
    a.lr = group.lr_device;
    a.momentum = group.momentum_device;
    a.found_inf = found_inf;
    a.dampening = o.dampening();
    a.weight_decay = o.weight_decay();
    a.nesterov = o.nesterov();
    a.maximize = o.maximize();
    sgd_kernel().get(device.type, dtype)(a);
  }
}

std::string SGD::group_options_json(size_t g) const {
  const SGDOptions& o = options_[g];
  return json{{"momentum", groups_[g].momentum},
              {"dampening", o.dampening()},
              {"weight_decay", o.weight_decay()},
              {"nesterov", o.nesterov()},
              {"maximize", o.maximize()}}
      .dump();
}

void SGD::load_group_options_json(size_t g, const std::string& text) {
  const json j = json::parse(text);
  SGDOptions o = options_[g];
  try {
    o.dampening(j.at("dampening").get<double>())
        .weight_decay(j.at("weight_decay").get<double>())
        .nesterov(j.at("nesterov").get<bool>())
        .maximize(j.value("maximize", false))
        .momentum(j.at("momentum").get<double>());
  } catch (const json::exception& e) {
    EMBER_THROW(bad_param, "SGD.load_state_dict: parameter group ", g, " options ", text,
                " are incomplete (", e.what(), ")");
  }
  check_sgd_options(o, g);
  options_[g] = o;
  set_momentum(g, o.momentum());
}

// ---- Adam / AdamW -------------------------------------------------------------------------------

namespace {
void check_adam_options(const AdamOptions& o, size_t group, const char* op) {
  EMBER_CHECK(o.lr() >= 0, op, ": group ", group, ": learning rate ", o.lr(), " is negative");
  EMBER_CHECK(o.eps() >= 0, op, ": group ", group, ": eps ", o.eps(), " is negative");
  EMBER_CHECK(
      o.betas().first >= 0 && o.betas().first < 1 && o.betas().second >= 0 && o.betas().second < 1,
      op, ": group ", group, ": betas (", o.betas().first, ", ", o.betas().second,
      ") must each be in [0, 1)");
  EMBER_CHECK(o.weight_decay() >= 0, op, ": group ", group, ": weight_decay ", o.weight_decay(),
              " is negative");
}

AdamOptions as_adam_options(const AdamWOptions& w) {
  return AdamOptions(w.lr())
      .betas(w.betas())
      .eps(w.eps())
      .weight_decay(w.weight_decay())
      .amsgrad(w.amsgrad())
      .maximize(w.maximize());
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options) {
  add_param_group(std::move(params), options);
}

Adam::Adam(const std::vector<ParamGroup<AdamOptions>>& groups) {
  EMBER_CHECK(!groups.empty(), "Adam: no parameter groups given");
  for (const auto& g : groups) add_param_group(g.params, g.options);
}

void Adam::add_param_group(std::vector<Tensor> params, const AdamOptions& options) {
  check_adam_options(options, groups_.size(), decoupled_ ? "AdamW" : "Adam");
  add_group(std::move(params), options.lr(), options.betas().first);
  options_.push_back(options);
}

void Adam::validate_momentum(double beta1) const {
  EMBER_CHECK(beta1 < 1, name(), ".set_momentum: beta1 ", beta1, " must be below 1");
}

std::vector<std::string> Adam::state_names(size_t g) const {
  if (options_[g].amsgrad()) return {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"step", "exp_avg", "exp_avg_sq"};
}

void Adam::step_group(size_t g, const std::vector<size_t>& with_grad, const Tensor& found_inf) {
  const Group& group = groups_[g];
  const AdamOptions& o = options_[g];
  std::map<DType, AdamKernelArgs> by_dtype;
  for (size_t i : with_grad) {
    const Tensor& p = group.params[i];
    const size_t index = group.first_index + i;
    AdamKernelArgs& a = by_dtype[p.dtype()];
    a.params.push_back(p);
    a.grads.push_back(grad_for_update(p));
    a.steps.push_back(state(index, "step"));
    a.exp_avgs.push_back(state(index, "exp_avg"));
    a.exp_avg_sqs.push_back(state(index, "exp_avg_sq"));
    if (o.amsgrad()) a.max_exp_avg_sqs.push_back(state(index, "max_exp_avg_sq"));
  }
  const Device device = group.lr_device.device();
  for (auto& [dtype, a] : by_dtype) {
    a.lr = group.lr_device;
    a.beta1 = group.momentum_device;
    a.found_inf = found_inf;
    a.beta2 = o.betas().second;
    a.eps = o.eps();
    a.weight_decay = o.weight_decay();
    a.decoupled_weight_decay = decoupled_;
    a.amsgrad = o.amsgrad();
    a.maximize = o.maximize();
    adam_kernel().get(device.type, dtype)(a);
  }
}

std::string Adam::group_options_json(size_t g) const {
  const AdamOptions& o = options_[g];
  return json{{"betas", json::array({groups_[g].momentum, o.betas().second})},
              {"eps", o.eps()},
              {"weight_decay", o.weight_decay()},
              {"amsgrad", o.amsgrad()},
              {"maximize", o.maximize()}}
      .dump();
}

void Adam::load_group_options_json(size_t g, const std::string& text) {
  const json j = json::parse(text);
  AdamOptions o = options_[g];
  try {
    const json& betas = j.at("betas");
    EMBER_CHECK(betas.is_array() && betas.size() == 2, name(), ".load_state_dict: group ", g,
                ": betas must be a list of two numbers, got ", betas.dump());
    o.betas({betas[0].get<double>(), betas[1].get<double>()})
        .eps(j.at("eps").get<double>())
        .weight_decay(j.at("weight_decay").get<double>())
        .amsgrad(j.at("amsgrad").get<bool>())
        .maximize(j.value("maximize", false));
  } catch (const json::exception& e) {
    EMBER_THROW(bad_param, name(), ".load_state_dict: parameter group ", g, " options ", text,
                " are incomplete (", e.what(), ")");
  }
  check_adam_options(o, g, name().c_str());
  options_[g] = o;
  set_momentum(g, o.betas().first);
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options) : Adam(true) {
  add_param_group(std::move(params), options);
}

AdamW::AdamW(const std::vector<ParamGroup<AdamWOptions>>& groups) : Adam(true) {
  EMBER_CHECK(!groups.empty(), "AdamW: no parameter groups given");
  for (const auto& g : groups) add_param_group(g.params, g.options);
}

void AdamW::add_param_group(std::vector<Tensor> params, const AdamWOptions& options) {
  Adam::add_param_group(std::move(params), as_adam_options(options));
}

}  // namespace ember::optim
