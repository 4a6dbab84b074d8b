// nn::Module's forward hooks (registration, removal, running them around a forward) and clone
// (a fresh module of the same type with every tensor copied in by name).
#include <algorithm>
#include <typeinfo>

#include "ember/nn/module.h"

namespace ember::nn {

namespace detail {
// A module's hooks in registration order; ids are unique per table so a handle removes exactly
// its own hook.
struct HookTable {
  uint64_t next_id = 1;
  std::vector<std::pair<uint64_t, ForwardPreHook>> pre;
  std::vector<std::pair<uint64_t, ForwardHook>> post;
  bool empty() const { return pre.empty() && post.empty(); }
};
}  // namespace detail

void RemovableHandle::remove() {
  auto table = table_.lock();
  if (!table) return;
  auto drop = [this](auto& list) {
    list.erase(std::remove_if(list.begin(), list.end(),
                              [this](const auto& entry) { return entry.first == id_; }),
               list.end());
  };
  drop(table->pre);
  drop(table->post);
}

RemovableHandle Module::add_forward_pre_hook(ForwardPreHook hook) {
  EMBER_CHECK(hook != nullptr, type_name_, ": register_forward_pre_hook: the hook is empty");
  if (!hooks_) hooks_ = std::make_shared<detail::HookTable>();
  const uint64_t id = hooks_->next_id++;
  hooks_->pre.emplace_back(id, std::move(hook));
  return RemovableHandle(hooks_, id);
}

RemovableHandle Module::add_forward_hook(ForwardHook hook) {
  EMBER_CHECK(hook != nullptr, type_name_, ": register_forward_hook: the hook is empty");
  if (!hooks_) hooks_ = std::make_shared<detail::HookTable>();
  const uint64_t id = hooks_->next_id++;
  hooks_->post.emplace_back(id, std::move(hook));
  return RemovableHandle(hooks_, id);
}

bool Module::has_forward_hooks() const { return hooks_ && !hooks_->empty(); }

Tensor Module::call_forward_with_hooks(const Tensor& x, TensorForward forward) {
  // Copies, so that a hook may remove itself (or register another) while they run; as in
  // PyTorch, hooks registered during this call run from the next call on.
  auto keep_alive = hooks_;
  auto pre = keep_alive->pre;
  auto post = keep_alive->post;
  Tensor input = x;
  for (auto& [id, hook] : pre)
    if (auto replaced = hook(*this, input)) input = std::move(*replaced);
  Tensor output = forward(*this, input);
  for (auto& [id, hook] : post)
    if (auto replaced = hook(*this, input, output)) output = std::move(*replaced);
  return output;
}

std::shared_ptr<Module> Module::clone(const std::optional<Device>& device) const {
  autograd::NoGradGuard no_grad;
  std::shared_ptr<Module> copy = clone_instance();
  EMBER_CHECK(copy != nullptr && typeid(*copy) == typeid(*this), "clone: ", type_name_,
              "::clone_instance() returned ", copy ? "a module of another type" : "null",
              "; it must return a new module of the same C++ type (override clone_instance in "
              "every derived class)");
  copy->copy_state_from(*this, device);
  return copy;
}

std::shared_ptr<Module> Module::clone_instance() const {
  if (instance_maker_) return instance_maker_(*this);
  if (typeid(*this) == typeid(Module)) return std::make_shared<Module>(type_name_);
  EMBER_THROW(not_supported, "clone: cannot rebuild a module of type ", type_name_, " (C++ type ",
              typeid(*this).name(),
              "). Give it a default constructor or a constructor taking its public `options` "
              "member and create it through its EMBER_MODULE holder or register_module, or "
              "override `std::shared_ptr<nn::Module> clone_instance() const` to return a new "
              "instance built with the same arguments (clone then copies every parameter, "
              "buffer and submodule into it by name)");
}

namespace {
// Copies `source`'s entries into `own` by name: same-named tensors get new storage holding the
// source's values (every handle to the own tensor sees it); names the fresh module lacks (tensors
// registered after construction) are appended.
void copy_tensors(NamedTensors& own, const NamedTensors& source,
                  const std::optional<Device>& device, const std::string& type_name,
                  const char* what) {
  // Plain references, not structured bindings: clang 14 cannot capture those in a lambda.
  for (const auto& own_entry : own) {
    const std::string& name = own_entry.first;
    bool found = std::any_of(source.begin(), source.end(),
                             [&](const auto& entry) { return entry.first == name; });
    EMBER_CHECK(found, "clone: the rebuilt ", type_name, " has a ", what, " '", name,
                "' that the original lacks; override clone_instance to build it as the original "
                "was built");
  }
  for (const auto& source_entry : source) {
    const std::string& name = source_entry.first;
    const Tensor& src = source_entry.second;
    Tensor value;
    if (src.defined()) {
      Tensor data = src.detach();
      value = device && data.device() != *device ? data.to(*device) : data.clone();
      if (src.requires_grad()) value.set_requires_grad(true);
    }
    auto it = std::find_if(own.begin(), own.end(),
                           [&](const auto& entry) { return entry.first == name; });
    if (it == own.end()) {
      own.emplace_back(name, value);
    } else if (it->second.defined() && value.defined()) {
      it->second.set_data(value);
      it->second.set_requires_grad(src.requires_grad());
    } else {
      it->second = value;
    }
  }
}
}  // namespace

void Module::copy_state_from(const Module& source, const std::optional<Device>& device) {
  copy_tensors(params_, source.params_, device, type_name_, "parameter");
  copy_tensors(buffers_, source.buffers_, device, type_name_, "buffer");
  training_ = source.training_;
  for (const auto& own_child : children_) {
    const std::string& name = own_child.first;
    bool found = std::any_of(source.children_.begin(), source.children_.end(),
                             [&](const auto& entry) { return entry.first == name; });
    EMBER_CHECK(found, "clone: the rebuilt ", type_name_, " has a submodule '", name,
                "' that the original lacks; override clone_instance to build it as the original "
                "was built");
  }
  for (const auto& source_child : source.children_) {
    const std::string& name = source_child.first;
    const auto& src_child = source_child.second;
    auto it = std::find_if(children_.begin(), children_.end(),
                           [&](const auto& entry) { return entry.first == name; });
    if (it == children_.end()) {
      children_.emplace_back(name, src_child->clone(device));  // registered after construction
      continue;
    }
    EMBER_CHECK(typeid(*it->second) == typeid(*src_child), "clone: the rebuilt ", type_name_,
                "'s submodule '", name, "' is a ", it->second->type_name(),
                " but the original's is a ", src_child->type_name());
    it->second->copy_state_from(*src_child, device);
  }
}

}  // namespace ember::nn
