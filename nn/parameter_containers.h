// ParameterList and ParameterDict, as libtorch's torch::nn::ParameterList / ParameterDict: modules
// that only hold parameters, registered under "0", "1", ... (the list) or under their keys (the
// dict, in insertion order), so named_parameters / state_dict list them as PyTorch does. As in
// libtorch, a tensor keeps its requires_grad when added (make it trainable with
// requires_grad_() first, or pass requires_grad = true). Neither has a forward.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "ember/nn/module.h"

namespace ember::nn {

// Parameters in order, registered as "0", "1", ...
class ParameterListImpl : public Module {
 public:
  ParameterListImpl() : Module("ParameterList") {}
  // The tensors in order, as append for each.
  explicit ParameterListImpl(const std::vector<Tensor>& params);
  // Registers `param` as parameter str(size()) and returns the registered handle.
  Tensor append(const Tensor& param);
  Tensor append(const Tensor& param, bool requires_grad);
  // Appends every tensor in order.
  void extend(const std::vector<Tensor>& params);
  size_t size() const { return params_.size(); }
  bool empty() const { return params_.empty(); }
  // The i-th parameter; throws when out of range.
  const Tensor& operator[](size_t i) const;
  const Tensor& at(size_t i) const { return (*this)[i]; }
  auto begin() const { return params_.begin(); }
  auto end() const { return params_.end(); }
  std::shared_ptr<Module> clone_instance() const override;
  void pretty_print(std::ostream& os) const override;

 private:
  std::vector<Tensor> params_;
};
EMBER_MODULE(ParameterList);

// Parameters under string keys, registered under their keys in insertion order.
class ParameterDictImpl : public Module {
 public:
  using Item = std::pair<std::string, Tensor>;  // a key and its parameter
  ParameterDictImpl() : Module("ParameterDict") {}
  // The items in order, as insert for each.
  explicit ParameterDictImpl(const std::vector<Item>& items);
  // Registers `param` under `key` and returns the registered handle. An existing key keeps its
  // place and takes the new values (set_data, as libtorch).
  Tensor insert(const std::string& key, const Tensor& param);
  Tensor insert(const std::string& key, const Tensor& param, bool requires_grad);
  bool contains(const std::string& key) const;
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  std::vector<std::string> keys() const;  // in insertion order
  std::vector<Tensor> values() const;     // in insertion order
  const std::vector<Item>& items() const { return items_; }
  // The parameter under `key`; throws (listing the keys) when absent.
  const Tensor& operator[](const std::string& key) const;
  const Tensor& get(const std::string& key) const { return (*this)[key]; }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  std::shared_ptr<Module> clone_instance() const override;
  void pretty_print(std::ostream& os) const override;

 private:
  std::vector<Item> items_;
};
EMBER_MODULE(ParameterDict);

}  // namespace ember::nn
