// Sequential, ModuleList, ModuleDict and Functional (see container.h).
#include "ember/nn/container.h"

#include <algorithm>
#include <ostream>

namespace ember::nn {

void FunctionalImpl::pretty_print(std::ostream& os) const {
  if (name_ == "Functional")
    os << "Functional()";
  else
    os << "Functional(" << name_ << ")";
}

void SequentialImpl::append(const std::string& name, std::shared_ptr<Module> module,
                            TensorForward forward) {
  register_module(name, module);  // checks the name (unique, no '.')
  entries_.push_back(Entry{name, std::move(module), forward});
}

Tensor SequentialImpl::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& e : entries_) y = e.module->call_forward(y, e.forward);
  return y;
}

// The entries rebuilt empty (clone copies their tensors in by name afterwards).
std::shared_ptr<Module> SequentialImpl::clone_instance() const {
  auto copy = std::make_shared<SequentialImpl>();
  for (auto& e : entries_) copy->append(e.name, e.module->clone_instance(), e.forward);
  return copy;
}

const std::shared_ptr<Module>& SequentialImpl::ptr(size_t i) const {
  EMBER_CHECK(i < entries_.size(), "Sequential: index ", i, " is out of range for ",
              entries_.size(), " modules");
  return entries_[i].module;
}

const std::shared_ptr<Module>& ModuleListImpl::ptr(size_t i) const {
  EMBER_CHECK(i < modules_.size(), "ModuleList: index ", i, " is out of range for ",
              modules_.size(), " modules");
  return modules_[i];
}

std::shared_ptr<Module> ModuleListImpl::clone_instance() const {
  auto copy = std::make_shared<ModuleListImpl>();
  for (auto& m : modules_) {
    std::shared_ptr<Module> fresh = m->clone_instance();
    copy->register_module(std::to_string(copy->modules_.size()), fresh);
    copy->modules_.push_back(std::move(fresh));
  }
  return copy;
}

void ModuleDictImpl::insert_module(const std::string& key, std::shared_ptr<Module> module) {
  auto it = std::find_if(items_.begin(), items_.end(),
                         [&](const Item& item) { return item.first == key; });
  if (it != items_.end()) {
    replace_module(key, module);
    it->second = std::move(module);
    return;
  }
  register_module(key, module);  // checks the key (non-empty, no '.')
  items_.emplace_back(key, std::move(module));
}

void ModuleDictImpl::update(const std::vector<Item>& items) {
  for (auto& [key, module] : items) {
    EMBER_CHECK(module != nullptr, "ModuleDict::update: the module for '", key, "' is null");
    insert_module(key, module);
  }
}

std::shared_ptr<Module> ModuleDictImpl::pop(const std::string& key) {
  std::shared_ptr<Module> module = (*this)[key];
  unregister_module(key);
  items_.erase(std::find_if(items_.begin(), items_.end(),
                            [&](const Item& item) { return item.first == key; }));
  return module;
}

void ModuleDictImpl::clear() {
  for (auto& [key, module] : items_) unregister_module(key);
  items_.clear();
}

bool ModuleDictImpl::contains(const std::string& key) const {
  return std::any_of(items_.begin(), items_.end(),
                     [&](const Item& item) { return item.first == key; });
}

std::vector<std::string> ModuleDictImpl::keys() const {
  std::vector<std::string> out;
  for (auto& [key, module] : items_) out.push_back(key);
  return out;
}

std::vector<std::shared_ptr<Module>> ModuleDictImpl::values() const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [key, module] : items_) out.push_back(module);
  return out;
}

const std::shared_ptr<Module>& ModuleDictImpl::operator[](const std::string& key) const {
  for (auto& item : items_)
    if (item.first == key) return item.second;
  std::string known;
  for (auto& [k, m] : items_) known += (known.empty() ? "" : ", ") + k;
  EMBER_THROW(bad_param, "ModuleDict: no key '", key,
              "' (keys: ", known.empty() ? std::string("none") : known, ")");
}

std::shared_ptr<Module> ModuleDictImpl::clone_instance() const {
  auto copy = std::make_shared<ModuleDictImpl>();
  for (auto& [key, module] : items_) copy->insert_module(key, module->clone_instance());
  return copy;
}

}  // namespace ember::nn
