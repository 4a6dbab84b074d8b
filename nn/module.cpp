// nn::Module: registration, traversal, placement, state dicts and printing. Hooks and clone live
// in module_hooks_clone.cpp.
#include "ember/nn/module.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <ostream>
#include <set>
#include <sstream>

namespace ember::nn {

namespace {
void check_name(const std::string& name, const char* what) {
  EMBER_CHECK(!name.empty() && name.find('.') == std::string::npos, "register_", what, ": name '",
              name, "' must be non-empty and contain no '.'");
}
std::string join_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}
}  // namespace

Tensor Module::register_parameter(const std::string& name, Tensor value, bool requires_grad) {
  check_name(name, "parameter");
  for (auto& [n, t] : params_)
    EMBER_CHECK(n != name, type_name_, ": parameter '", name, "' is already registered");
  if (value.defined()) {
    value = value.detach();
    if (requires_grad) value.set_requires_grad(true);
  }
  params_.emplace_back(name, value);
  return params_.back().second;
}

Tensor Module::register_buffer(const std::string& name, Tensor value) {
  check_name(name, "buffer");
  for (auto& [n, t] : buffers_)
    EMBER_CHECK(n != name, type_name_, ": buffer '", name, "' is already registered");
  buffers_.emplace_back(name, value.defined() ? value.detach() : value);
  return buffers_.back().second;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_name(name, "module");
  EMBER_CHECK(module != nullptr, type_name_, ": submodule '", name, "' is null");
  for (auto& [n, m] : children_)
    EMBER_CHECK(n != name, type_name_, ": submodule '", name, "' is already registered");
  children_.emplace_back(name, std::move(module));
}

void Module::replace_child(const std::string& name, std::shared_ptr<Module> module) {
  EMBER_CHECK(module != nullptr, type_name_, ": replace_module: the module for '", name,
              "' is null");
  for (auto& [n, m] : children_)
    if (n == name) {
      m = std::move(module);
      return;
    }
  EMBER_THROW(bad_param, type_name_, ": replace_module: no submodule named '", name,
              "'; register it with register_module first");
}

void Module::unregister_module(const std::string& name) {
  auto it = std::find_if(children_.begin(), children_.end(),
                         [&](const auto& entry) { return entry.first == name; });
  EMBER_CHECK(it != children_.end(), type_name_, ": unregister_module: no submodule named '", name,
              "'");
  children_.erase(it);
}

std::shared_ptr<Module> Module::shared_self() const {
  // Modules made through holders are owned by a shared_ptr; one on the stack gets a non-owning
  // pointer (valid while the caller holds the module).
  try {
    return const_cast<Module*>(this)->shared_from_this();
  } catch (const std::bad_weak_ptr&) {
    return std::shared_ptr<Module>(const_cast<Module*>(this), [](Module*) {});
  }
}

void Module::collect_modules(const std::string& prefix, bool remove_duplicate,
                             std::vector<const Module*>& memo, NamedModules& out) const {
  if (std::find(memo.begin(), memo.end(), this) != memo.end()) return;
  if (remove_duplicate) memo.push_back(this);
  out.emplace_back(prefix, shared_self());
  for (auto& [n, m] : children_)
    m->collect_modules(join_name(prefix, n), remove_duplicate, memo, out);
}

NamedModules Module::named_modules(const std::string& prefix, bool include_self,
                                   bool remove_duplicate) const {
  NamedModules out;
  std::vector<const Module*> memo;
  collect_modules(prefix, remove_duplicate, memo, out);
  if (!include_self) out.erase(out.begin());
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules(bool include_self) const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [n, m] : named_modules("", include_self)) out.push_back(m);
  return out;
}

NamedModules Module::named_children() const {
  NamedModules out;
  std::vector<const Module*> memo;
  for (auto& [n, m] : children_) {
    if (std::find(memo.begin(), memo.end(), m.get()) != memo.end()) continue;
    memo.push_back(m.get());
    out.emplace_back(n, m);
  }
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [n, m] : named_children()) out.push_back(m);
  return out;
}

NamedTensors Module::collect_tensors(bool params, bool recurse, bool remove_duplicate) const {
  NamedTensors out;
  std::vector<const TensorImpl*> memo;
  NamedModules mods =
      recurse ? named_modules("", true, remove_duplicate) : NamedModules{{"", shared_self()}};
  for (auto& [prefix, m] : mods) {
    for (auto& [n, t] : params ? m->params_ : m->buffers_) {
      if (!t.defined()) continue;
      if (std::find(memo.begin(), memo.end(), t.impl()) != memo.end()) continue;
      if (remove_duplicate) memo.push_back(t.impl());
      out.emplace_back(join_name(prefix, n), t);
    }
  }
  return out;
}

NamedTensors Module::named_parameters(bool recurse, bool remove_duplicate) const {
  return collect_tensors(/*params=*/true, recurse, remove_duplicate);
}

NamedTensors Module::named_buffers(bool recurse, bool remove_duplicate) const {
  return collect_tensors(/*params=*/false, recurse, remove_duplicate);
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  apply([&](const std::string&, Module& m) { fn(m); });
}

void Module::apply(const std::function<void(const Module&)>& fn) const {
  apply([&](const std::string&, const Module& m) { fn(m); });
}

void Module::apply(const std::function<void(const std::string&, Module&)>& fn,
                   const std::string& name_prefix) {
  fn(name_prefix, *this);
  for (auto& [n, m] : children_) m->apply(fn, join_name(name_prefix, n));
}

void Module::apply(const std::function<void(const std::string&, const Module&)>& fn,
                   const std::string& name_prefix) const {
  fn(name_prefix, *this);
  for (auto& [n, m] : children_)
    static_cast<const Module&>(*m).apply(fn, join_name(name_prefix, n));
}

void Module::apply(const std::function<void(const std::shared_ptr<Module>&)>& fn) const {
  apply([&](const std::string&, const std::shared_ptr<Module>& m) { fn(m); });
}

void Module::apply(
    const std::function<void(const std::string&, const std::shared_ptr<Module>&)>& fn,
    const std::string& name_prefix) const {
  fn(name_prefix, shared_self());
  for (auto& [n, m] : children_)
    static_cast<const Module&>(*m).apply(fn, join_name(name_prefix, n));
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters())
    if (!trainable_only || t.requires_grad()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, m] : children_) m->train(on);
}

void Module::apply_to_tensors(const std::function<Tensor(const Tensor&)>& convert) {
  autograd::NoGradGuard ng;
  for (auto& [prefix, m] : named_modules()) {
    for (auto* list : {&m->params_, &m->buffers_}) {
      for (auto& [n, t] : *list) {
        if (!t.defined()) continue;
        Tensor c = convert(t);
        if (c.is_same(t)) continue;
        t.set_data(c);
        if (t.grad().defined()) {
          Tensor g = convert(t.grad());
          t.mutable_grad() = g.sizes() == t.sizes() ? g.detach() : Tensor();
        }
      }
    }
  }
}

void Module::to(Device device) {
  apply_to_tensors(
      [&](const Tensor& t) { return t.device() == device ? t : t.detach().to(device); });
}
void Module::to(DType dtype) {
  apply_to_tensors([&](const Tensor& t) {
    return (!is_floating(t.dtype()) || t.dtype() == dtype) ? t : t.detach().to(dtype);
  });
}
void Module::to(Device device, DType dtype) {
  to(device);
  to(dtype);
}
void Module::to(MemoryFormat format) {
  apply_to_tensors([&](const Tensor& t) {
    if (t.dim() != 4 && t.dim() != 5) return t;
    return t.is_contiguous(format) ? t : t.detach().contiguous(format);
  });
}

void Module::zero_grad(bool set_to_none) {
  autograd::NoGradGuard ng;
  for (Tensor& p : parameters()) {
    if (!p.grad().defined()) continue;
    if (set_to_none)
      p.mutable_grad() = Tensor();
    else
      p.mutable_grad().zero_();
  }
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  // Every name a shared module is reachable by, as PyTorch's state_dict.
  for (auto& entry : named_modules("", true, /*remove_duplicate=*/false)) {
    // no structured binding: clang 14 cannot capture one
    const std::string& prefix = entry.first;
    auto& m = entry.second;
    auto name = [&](const std::string& n) { return prefix.empty() ? n : prefix + "." + n; };
    for (auto& [n, t] : m->params_)
      if (t.defined()) out.emplace_back(name(n), t.detach());
    for (auto& [n, t] : m->buffers_)
      if (t.defined()) out.emplace_back(name(n), t.detach());
  }
  return out;
}

namespace {

// A floating checkpoint entry loaded into an integer tensor (a counter such as BatchNorm's
// num_batches_tracked) must hold finite values in the integer's range: anything else is a damaged
// or foreign file, and copying it would silently store a clamped value.
void check_fits_integer_entry(const std::string& name, const Tensor& value, DType target) {
  if (!is_floating(value.dtype()) || !is_integral(target) || target == DType::boolean) return;
  const Tensor host = value.detach().to(Device::cpu()).to(DType::f64).contiguous();
  const double* p = host.data_ptr<double>();
  double lo = 0, hi = 0;
  switch (target) {
    case DType::u8:
      lo = 0, hi = 255;
      break;
    case DType::i32:
      lo = -2147483648.0, hi = 2147483647.0;
      break;
    default:
      lo = -9223372036854775808.0, hi = 9223372036854774784.0;
      break;  // largest below 2^63
  }
  for (int64_t i = 0; i < host.numel(); ++i) {
    EMBER_CHECK(std::isfinite(p[i]) && p[i] >= lo && p[i] <= hi, "load_state_dict: entry '", name,
                "' holds ", p[i], " (element ", i, ") but the model's tensor has dtype ",
                dtype_name(target),
                ", which cannot represent it: the checkpoint is damaged or "
                "was written for another model");
  }
}

}  // namespace

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  std::map<std::string, Tensor> own;
  for (auto& [n, t] : state_dict()) own[n] = t;
  std::set<std::string> seen;
  std::vector<std::string> unexpected;
  for (auto& [n, v] : state) {
    auto it = own.find(n);
    if (it == own.end()) {
      unexpected.push_back(n);
      continue;
    }
    EMBER_CHECK(v.defined(), "load_state_dict: entry '", n, "' is an undefined tensor");
    EMBER_CHECK(it->second.sizes() == v.sizes(), "load_state_dict: size mismatch for '", n,
                "': the checkpoint has shape ", v.shape_str(), " but the model has ",
                it->second.shape_str());
    check_fits_integer_entry(n, v, it->second.dtype());
    seen.insert(n);
  }
  std::vector<std::string> missing;
  for (auto& [n, t] : own)
    if (!seen.count(n)) missing.push_back(n);
  if (strict && (!missing.empty() || !unexpected.empty())) {
    auto join = [](const std::vector<std::string>& v) {
      std::string s;
      for (size_t i = 0; i < v.size() && i < 20; ++i) s += (i ? ", " : "") + v[i];
      if (v.size() > 20) s += ", ... (" + std::to_string(v.size()) + " in all)";
      return s.empty() ? std::string("none") : s;
    };
    EMBER_THROW(bad_param, "load_state_dict (", type_name_, "): missing keys: ", join(missing),
                "; unexpected keys: ", join(unexpected),
                ". Pass strict=false to load the matching entries only");
  }
  autograd::NoGradGuard ng;
  for (auto& [n, v] : state) {
    auto it = own.find(n);
    if (it != own.end()) it->second.copy_(v);
  }
}

void Module::pretty_print(std::ostream& os) const { os << type_name_; }

void Module::print_tree(std::ostream& os, int indent) const {
  pretty_print(os);
  if (children_.empty()) return;
  os << "(\n";
  for (auto& [n, m] : children_) {
    os << std::string(size_t(indent + 2), ' ') << "(" << n << "): ";
    m->print_tree(os, indent + 2);
    os << "\n";
  }
  os << std::string(size_t(indent), ' ') << ")";
}

std::string Module::str() const {
  std::ostringstream os;
  print_tree(os, 0);
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.str(); }

}  // namespace ember::nn
