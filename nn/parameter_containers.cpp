// ParameterList and ParameterDict (see parameter_containers.h).
#include "ember/nn/parameter_containers.h"

#include <algorithm>
#include <ostream>

#include "ember/autograd/graph/grad_mode.h"

namespace ember::nn {

namespace {
void print_param(std::ostream& os, const std::string& name, const Tensor& t) {
  os << "  (" << name << "): Parameter containing: [" << dtype_name(t.dtype()) << " of size "
     << t.shape_str() << (t.device().is_cpu() ? "" : " on " + t.device().str()) << "]\n";
}
}  // namespace

ParameterListImpl::ParameterListImpl(const std::vector<Tensor>& params) : Module("ParameterList") {
  extend(params);
}

Tensor ParameterListImpl::append(const Tensor& param) {
  EMBER_CHECK(param.defined(), "ParameterList::append: the tensor is undefined");
  return append(param, param.requires_grad());
}

Tensor ParameterListImpl::append(const Tensor& param, bool requires_grad) {
  EMBER_CHECK(param.defined(), "ParameterList::append: the tensor is undefined");
  Tensor handle = register_parameter(std::to_string(params_.size()), param, requires_grad);
  params_.push_back(handle);
  return handle;
}

void ParameterListImpl::extend(const std::vector<Tensor>& params) {
  for (const Tensor& p : params) append(p);
}

const Tensor& ParameterListImpl::operator[](size_t i) const {
  EMBER_CHECK(i < params_.size(), "ParameterList: index ", i, " is out of range for ",
              params_.size(), " parameters");
  return params_[i];
}

std::shared_ptr<Module> ParameterListImpl::clone_instance() const {
  auto copy = std::make_shared<ParameterListImpl>();
  for (const Tensor& p : params_) copy->append(p.detach().clone(), p.requires_grad());
  return copy;
}

void ParameterListImpl::pretty_print(std::ostream& os) const {
  os << "ParameterList(\n";
  for (size_t i = 0; i < params_.size(); ++i) print_param(os, std::to_string(i), params_[i]);
  os << ")";
}

ParameterDictImpl::ParameterDictImpl(const std::vector<Item>& items) : Module("ParameterDict") {
  for (const auto& [key, param] : items) insert(key, param);
}

Tensor ParameterDictImpl::insert(const std::string& key, const Tensor& param) {
  EMBER_CHECK(param.defined(), "ParameterDict::insert: the tensor for '", key, "' is undefined");
  return insert(key, param, param.requires_grad());
}

Tensor ParameterDictImpl::insert(const std::string& key, const Tensor& param, bool requires_grad) {
  EMBER_CHECK(param.defined(), "ParameterDict::insert: the tensor for '", key, "' is undefined");
  auto it = std::find_if(items_.begin(), items_.end(),
                         [&](const Item& item) { return item.first == key; });
  if (it != items_.end()) {
    autograd::NoGradGuard no_grad;
    it->second.set_data(param.detach());
    it->second.set_requires_grad(requires_grad);
    return it->second;
  }
  Tensor handle = register_parameter(key, param, requires_grad);
  items_.emplace_back(key, handle);
  return handle;
}

bool ParameterDictImpl::contains(const std::string& key) const {
  return std::any_of(items_.begin(), items_.end(),
                     [&](const Item& item) { return item.first == key; });
}

std::vector<std::string> ParameterDictImpl::keys() const {
  std::vector<std::string> out;
  for (const auto& item : items_) out.push_back(item.first);
  return out;
}

std::vector<Tensor> ParameterDictImpl::values() const {
  std::vector<Tensor> out;
  for (const auto& item : items_) out.push_back(item.second);
  return out;
}

const Tensor& ParameterDictImpl::operator[](const std::string& key) const {
  for (const auto& item : items_)
    if (item.first == key) return item.second;
  std::string listed;
  for (const auto& item : items_) listed += (listed.empty() ? "" : ", ") + item.first;
  EMBER_THROW(bad_param, "ParameterDict: no parameter '", key, "'; the keys are [", listed, "]");
}

std::shared_ptr<Module> ParameterDictImpl::clone_instance() const {
  auto copy = std::make_shared<ParameterDictImpl>();
  for (const auto& [key, p] : items_) copy->insert(key, p.detach().clone(), p.requires_grad());
  return copy;
}

void ParameterDictImpl::pretty_print(std::ostream& os) const {
  os << "ParameterDict(\n";
  for (const auto& [key, p] : items_) print_param(os, key, p);
  os << ")";
}

}  // namespace ember::nn
