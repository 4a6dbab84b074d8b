// nn::Module: registration, traversal, placement, state dicts and printing.
#include "ember/nn/module.h"

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

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  if (!recurse) {
    for (auto& p : params_)
      if (p.second.defined()) out.push_back(p);
    return out;
  }
  for (auto& [prefix, m] : named_modules())
    for (auto& [n, t] : m->params_)
      if (t.defined()) out.emplace_back(prefix.empty() ? n : prefix + "." + n, t);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  if (!recurse) {
    for (auto& b : buffers_)
      if (b.second.defined()) out.push_back(b);
    return out;
  }
  for (auto& [prefix, m] : named_modules())
    for (auto& [n, t] : m->buffers_)
      if (t.defined()) out.emplace_back(prefix.empty() ? n : prefix + "." + n, t);
  return out;
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

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [n, m] : children_) out.push_back(m);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  return children_;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules(
    const std::string& prefix) const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  // The root is included with an empty name; const_cast because shared_from_this is non-const
  // only for modules owned by a shared_ptr (all modules made through holders are).
  std::shared_ptr<Module> self;
  try {
    self = const_cast<Module*>(this)->shared_from_this();
  } catch (const std::bad_weak_ptr&) {
    self = std::shared_ptr<Module>(const_cast<Module*>(this), [](Module*) {});
  }
  out.emplace_back(prefix, self);
  for (auto& [n, m] : children_) {
    auto sub = m->named_modules(prefix.empty() ? n : prefix + "." + n);
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
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
  for (auto& entry : named_modules()) {  // no structured binding: clang 14 cannot capture one
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
