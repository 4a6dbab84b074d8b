// nn::Module, the base of every layer and model, as in libtorch's C++ frontend: named parameters,
// buffers and submodules; train/eval; to(device / dtype / memory format); state_dict and
// load_state_dict with clear errors; parameter counts and printing. Layers are used through
// holders declared with EMBER_MODULE (e.g. `nn::Linear fc = nn::Linear(4, 2); fc->forward(x)`).
#pragma once
#include <iosfwd>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ember/autograd/autograd.h"
#include "ember/ops/ops.h"

namespace ember::nn {

// Ordered name -> tensor pairs, as in PyTorch's OrderedDict state_dict (names like
// "layer1.0.conv1.weight").
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string type_name = "Module") : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& type_name() const { return type_name_; }

  // ---- registration (call from the constructor of a derived module) ----
  // Return a handle to the registered tensor (it shares data with the module's entry).
  Tensor register_parameter(const std::string& name, Tensor value, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor value);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  // Overload for holders (EMBER_MODULE types).
  template <typename Holder, typename = typename Holder::ImplType>
  Holder register_module(const std::string& name, Holder holder) {
    add_child(name, holder.ptr());
    return holder;
  }

  // ---- queries (depth first, registration order, like PyTorch) ----
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules(
      const std::string& prefix = "") const;
  int64_t num_parameters(bool trainable_only = false) const;

  // ---- modes and placement ----
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves parameters and buffers (in place: every handle sees the new data). dtype changes only
  // floating tensors; memory_format changes only 4-D/5-D tensors (e.g. conv weights).
  void to(Device device);
  void to(DType dtype);
  void to(Device device, DType dtype);
  void to(MemoryFormat format);
  void zero_grad(bool set_to_none = true);

  // ---- state ----
  NamedTensors state_dict() const;  // parameters then buffers, per module, like PyTorch
  // Copies values in (converting dtype and device to the module's). strict: missing or
  // unexpected keys are errors listing them; a shape mismatch is always an error naming the key.
  void load_state_dict(const NamedTensors& state, bool strict = true);

  // One line for this module ("Linear(in_features=4, out_features=2, bias=true)"); printing a
  // model nests children as PyTorch does.
  virtual void pretty_print(std::ostream& os) const;
  std::string str() const;

 protected:
  bool training_ = true;

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void apply_to_tensors(const std::function<Tensor(const Tensor&)>& convert);
  void print_tree(std::ostream& os, int indent) const;

  std::string type_name_;
  NamedTensors params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

std::ostream& operator<<(std::ostream& os, const Module& m);

// A value-semantics handle to a module implementation, like libtorch's ModuleHolder:
// `Linear fc(4, 2)` constructs LinearImpl; `fc->forward(x)` or `fc(x)` calls it; `Linear
// fc{nullptr}` is empty until assigned.
template <typename Impl>
class ModuleHolder {
 public:
  using ImplType = Impl;
  ModuleHolder(std::nullptr_t) {}  // NOLINT
  // Constructs Impl from the arguments; never taken for a copy of another holder.
  template <typename... Args>
  requires(!(sizeof...(Args) == 1 && (std::is_base_of_v<ModuleHolder, std::remove_cvref_t<Args>> &&
                                      ...))) explicit ModuleHolder(Args&&... args)
      : impl_(std::make_shared<Impl>(std::forward<Args>(args)...)) {}
  ModuleHolder(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}  // NOLINT
  Impl* operator->() const { return impl_.get(); }
  Impl& operator*() const { return *impl_; }
  const std::shared_ptr<Impl>& ptr() const { return impl_; }
  bool is_empty() const { return impl_ == nullptr; }
  template <typename... Args>
  auto operator()(Args&&... args) const {
    return impl_->forward(std::forward<Args>(args)...);
  }

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace ember::nn

// Declares `Name` as a ModuleHolder of `Name##Impl`.
#define EMBER_MODULE(Name)                                     \
  class Name : public ::ember::nn::ModuleHolder<Name##Impl> {  \
   public:                                                     \
    using ::ember::nn::ModuleHolder<Name##Impl>::ModuleHolder; \
  }
