// Sequential, ModuleList and Functional (see container.h).
#include "ember/nn/container.h"

#include <ostream>

namespace ember::nn {

void FunctionalImpl::pretty_print(std::ostream& os) const {
  if (name_ == "Functional")
    os << "Functional()";
  else
    os << "Functional(" << name_ << ")";
}

void SequentialImpl::append(const std::string& name, std::shared_ptr<Module> module,
                            std::function<Tensor(const Tensor&)> call) {
  register_module(name, module);  // checks the name (unique, no '.')
  entries_.push_back(Entry{std::move(module), std::move(call)});
}

Tensor SequentialImpl::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& e : entries_) y = e.forward(y);
  return y;
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

}  // namespace ember::nn
