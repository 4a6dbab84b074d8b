// nn::Module, the base of every layer and model, as in libtorch's C++ frontend: named parameters,
// buffers and submodules; traversal in PyTorch's order (named_modules, named_children, apply);
// train/eval; to(device / dtype / memory format); state_dict and load_state_dict with clear
// errors; clone (a deep copy); forward pre-hooks and hooks; parameter counts and printing. Layers
// are used through holders declared with EMBER_MODULE (e.g. `nn::Linear fc = nn::Linear(4, 2);
// fc(x)`).
//
// Hooks run where PyTorch's __call__ runs them: on a call through the holder (`fc(x)`) and on
// every step of a Sequential; a direct `fc->forward(x)` runs no hooks (as `m.forward(x)` in
// Python). They apply to the one-tensor form `Tensor forward(const Tensor&)`; calling a module
// that has hooks with another forward signature (e.g. LSTM's) through its holder is an error.
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "ember/autograd/autograd.h"
#include "ember/ops/ops.h"

namespace ember::nn {

// Ordered name -> tensor pairs, as in PyTorch's OrderedDict state_dict (names like
// "layer1.0.conv1.weight").
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module;
// Ordered name -> submodule pairs, as named_children() / named_modules() return them.
using NamedModules = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;

// PyTorch's hook signatures for the one-tensor forward: a pre-hook sees (module, input) and may
// return a replacement input; a forward hook sees (module, input, output) and may return a
// replacement output. std::nullopt keeps the value. Hooks given as callables returning void or
// Tensor are accepted too (void keeps the value).
using ForwardPreHook = std::function<std::optional<Tensor>(Module&, const Tensor& input)>;
using ForwardHook =
    std::function<std::optional<Tensor>(Module&, const Tensor& input, const Tensor& output)>;

namespace detail {
struct HookTable;
// Wraps a callable returning void, Tensor or std::optional<Tensor> as a hook of type Hook.
template <typename Hook, typename F, typename... Args>
Hook make_hook(F&& f) {
  using R = std::invoke_result_t<F&, Args...>;
  if constexpr (std::is_void_v<R>) {
    return [f = std::forward<F>(f)](Args... args) mutable -> std::optional<Tensor> {
      f(args...);
      return std::nullopt;
    };
  } else {
    static_assert(std::is_convertible_v<R, std::optional<Tensor>>,
                  "a forward hook returns void, Tensor or std::optional<Tensor>");
    return Hook(std::forward<F>(f));
  }
}
template <typename M>
concept BuiltFromOptions = requires(const M& m) {
  m.options;
}
&&std::is_constructible_v<M,
                          const std::remove_cvref_t<decltype(std::declval<const M&>().options)>&>;
template <typename M>
concept ConstructibleLike = BuiltFromOptions<M> || std::is_default_constructible_v<M>;
// A fresh module of M's type built as m was: from m.options, else default constructed.
template <typename M>
std::shared_ptr<Module> construct_like(const M& m);
}  // namespace detail

// Undoes a hook registration, as torch.utils.hooks.RemovableHandle: remove() takes the hook off
// its module (a no-op when it is already gone or the module was destroyed).
class RemovableHandle {
 public:
  RemovableHandle() = default;  // a handle of no hook: remove() does nothing
  // The handle of hook `id` in a module's hook table (the register_*hook functions make these).
  RemovableHandle(std::weak_ptr<detail::HookTable> table, uint64_t id)
      : table_(std::move(table)), id_(id) {}
  // Unregisters the hook; safe to call twice or after the module is gone.
  void remove();
  // The hook's registration number, unique within its module (0 for an empty handle).
  uint64_t id() const { return id_; }

 private:
  std::weak_ptr<detail::HookTable> table_;
  uint64_t id_ = 0;
};

// The base of every layer and model (torch.nn.Module): holds named parameters, buffers and
// submodules, and the train/eval flag; see the top of this file. Modules live in shared_ptrs
// (usually through a holder) and are not copyable; clone() makes a deep copy.
class Module : public std::enable_shared_from_this<Module> {
 public:
  // type_name is the class name printed by operator<< and error messages (e.g. "Linear").
  explicit Module(std::string type_name = "Module") : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The name given at construction, as PyTorch's type(m).__name__ (e.g. "Conv2d").
  const std::string& type_name() const { return type_name_; }
  // This module as T (an implementation type, or a holder type for its Impl), or null when it is
  // not one: `module->as<nn::Linear>()` gives a LinearImpl*, as in libtorch.
  template <typename T>
  auto* as() noexcept {
    if constexpr (requires { typename T::ImplType; })
      return dynamic_cast<typename T::ImplType*>(this);
    else
      return dynamic_cast<T*>(this);
  }
  template <typename T>
  const auto* as() const noexcept {
    return const_cast<Module*>(this)->as<T>();
  }

  // ---- registration (call from the constructor of a derived module) ----
  // Return a handle to the registered tensor (it shares data with the module's entry).
  Tensor register_parameter(const std::string& name, Tensor value, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor value);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    if (module) module->template remember_type<M>();
    add_child(name, module);
    return module;
  }
  // Overload for holders (EMBER_MODULE types).
  template <typename Holder, typename = typename Holder::ImplType>
  Holder register_module(const std::string& name, Holder holder) {
    register_module(name, holder.ptr());
    return holder;
  }
  // Swaps the submodule registered as `name` for `module` (same position), as libtorch's
  // replace_module; unregister_module removes it. Both throw when no such submodule exists.
  template <typename M>
  std::shared_ptr<M> replace_module(const std::string& name, std::shared_ptr<M> module) {
    if (module) module->template remember_type<M>();
    replace_child(name, module);
    return module;
  }
  void unregister_module(const std::string& name);

  // ---- queries (pre-order, registration order, like PyTorch) ----
  // Parameters and buffers of this module and (recurse) its descendants; remove_duplicate lists a
  // tensor held by several modules (a shared submodule) once, under its first name, as PyTorch.
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true, bool remove_duplicate = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true, bool remove_duplicate = true) const;
  // The direct submodules, in registration order; one registered under two names appears once.
  std::vector<std::shared_ptr<Module>> children() const;
  NamedModules named_children() const;
  // This module (name `prefix`, when include_self) and every descendant, pre-order as PyTorch's
  // named_modules: names join with '.', a module reachable twice appears once (remove_duplicate).
  NamedModules named_modules(const std::string& prefix = "", bool include_self = true,
                             bool remove_duplicate = true) const;
  std::vector<std::shared_ptr<Module>> modules(bool include_self = true) const;
  int64_t num_parameters(bool trainable_only = false) const;

  // ---- apply: fn on this module, then on every descendant, pre-order (libtorch's order; Python's
  // Module.apply visits the children first). A shared submodule is visited each time it is
  // reached ----
  void apply(const std::function<void(Module&)>& fn);
  void apply(const std::function<void(const Module&)>& fn) const;
  void apply(const std::function<void(const std::string&, Module&)>& fn,
             const std::string& name_prefix = "");
  void apply(const std::function<void(const std::string&, const Module&)>& fn,
             const std::string& name_prefix = "") const;
  void apply(const std::function<void(const std::shared_ptr<Module>&)>& fn) const;
  void apply(const std::function<void(const std::string&, const std::shared_ptr<Module>&)>& fn,
             const std::string& name_prefix = "") const;

  // ---- clone ----
  // A deep copy of this module tree, as libtorch's clone: the same type and options, parameters
  // and buffers copied into new storage (onto `device` when given), requires_grad and the training
  // flag as here. Gradients and hooks are not copied. A module reachable twice is copied twice.
  // How the copy is built: clone_instance() makes a fresh module of the same type (its
  // constructor registers the same tensors and children), then every tensor is copied in by name,
  // recursively; children registered after construction (container entries) are cloned anew.
  std::shared_ptr<Module> clone(const std::optional<Device>& device = std::nullopt) const;
  // A fresh module of this type built as this one was (values are overwritten by clone). The
  // built-in layers define it with EMBER_CLONEABLE; a user module gets it from its holder when it
  // has a default constructor or one taking its `options` member; otherwise override it.
  virtual std::shared_ptr<Module> clone_instance() const;

  // ---- hooks (see the file comment for which calls run them) ----
  template <typename F>
  RemovableHandle register_forward_pre_hook(F&& hook) {
    return add_forward_pre_hook(
        detail::make_hook<ForwardPreHook, F, Module&, const Tensor&>(std::forward<F>(hook)));
  }
  template <typename F>
  RemovableHandle register_forward_hook(F&& hook) {
    return add_forward_hook(
        detail::make_hook<ForwardHook, F, Module&, const Tensor&, const Tensor&>(
            std::forward<F>(hook)));
  }
  bool has_forward_hooks() const;
  // Runs `forward` on x with this module's hooks around it (the holder's call operator and
  // Sequential go through here).
  using TensorForward = Tensor (*)(Module&, const Tensor&);
  Tensor call_forward(const Tensor& x, TensorForward forward) {
    return hooks_ ? call_forward_with_hooks(x, forward) : forward(*this, x);
  }

  // Records how to rebuild a module of type M (used by clone_instance when no override exists):
  // the holders and register_module call it with the static type they know.
  template <typename M>
  void remember_type() {
    if constexpr (std::is_base_of_v<Module, M> && !std::is_abstract_v<M>) {
      if (instance_maker_ || typeid(*this) != typeid(M)) return;
      if constexpr (detail::ConstructibleLike<M>)
        instance_maker_ = [](const Module& self) {
          return detail::construct_like<M>(static_cast<const M&>(self));
        };
    }
  }

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
  void replace_child(const std::string& name, std::shared_ptr<Module> module);
  void apply_to_tensors(const std::function<Tensor(const Tensor&)>& convert);
  void print_tree(std::ostream& os, int indent) const;
  void collect_modules(const std::string& prefix, bool remove_duplicate,
                       std::vector<const Module*>& memo, NamedModules& out) const;
  NamedTensors collect_tensors(bool params, bool recurse, bool remove_duplicate) const;
  std::shared_ptr<Module> shared_self() const;
  void copy_state_from(const Module& source, const std::optional<Device>& device);
  RemovableHandle add_forward_pre_hook(ForwardPreHook hook);
  RemovableHandle add_forward_hook(ForwardHook hook);
  Tensor call_forward_with_hooks(const Tensor& x, TensorForward forward);

  std::string type_name_;
  NamedTensors params_, buffers_;
  NamedModules children_;
  std::shared_ptr<detail::HookTable> hooks_;  // null until a hook is registered
  std::function<std::shared_ptr<Module>(const Module&)> instance_maker_;
};

namespace detail {
template <typename M>
std::shared_ptr<Module> construct_like(const M& m) {
  if constexpr (BuiltFromOptions<M>)
    return std::make_shared<M>(m.options);
  else
    return std::make_shared<M>();
}
}  // namespace detail

// Prints the module tree as PyTorch's repr: each module's pretty_print, children indented by name.
std::ostream& operator<<(std::ostream& os, const Module& m);

// A value-semantics handle to a module implementation, like libtorch's ModuleHolder:
// `Linear fc(4, 2)` constructs LinearImpl; `fc->forward(x)` or `fc(x)` calls it; `Linear
// fc{nullptr}` is empty until assigned.
template <typename Impl>
class ModuleHolder {
 public:
  using ImplType = Impl;  // the implementation type held (e.g. LinearImpl for Linear)
  // An empty holder (`nn::Linear fc{nullptr}`), to assign later; is_empty() is true.
  ModuleHolder(std::nullptr_t) {}  // NOLINT
  // Constructs Impl from the arguments; never taken for a copy of another holder.
  template <typename... Args>
  requires(!(sizeof...(Args) == 1 && (std::is_base_of_v<ModuleHolder, std::remove_cvref_t<Args>> &&
                                      ...))) explicit ModuleHolder(Args&&... args)
      : impl_(std::make_shared<Impl>(std::forward<Args>(args)...)) {
    impl_->template remember_type<Impl>();
  }
  ModuleHolder(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {  // NOLINT
    if (impl_) impl_->template remember_type<Impl>();
  }
  Impl* operator->() const { return impl_.get(); }
  Impl& operator*() const { return *impl_; }
  const std::shared_ptr<Impl>& ptr() const { return impl_; }
  bool is_empty() const { return impl_ == nullptr; }
  // Forwards to the module's operator[] (Sequential, ModuleList, ModuleDict), as libtorch's.
  template <typename Key>
  decltype(auto) operator[](Key&& key) const {
    return (*impl_)[std::forward<Key>(key)];
  }
  // Calls forward with the module's hooks around it (one-tensor forwards; see module.h's top).
  template <typename... Args>
  auto operator()(Args&&... args) const {
    if constexpr (sizeof...(Args) == 1 && (std::is_convertible_v<Args&&, const Tensor&> && ...) &&
                  requires(Impl & m, const Tensor& x) {
                    { m.forward(x) } -> std::same_as<Tensor>;
                  }) {
      return impl_->call_forward(std::forward<Args>(args)..., [](Module& m, const Tensor& x) {
        return static_cast<Impl&>(m).forward(x);
      });
    } else {
      EMBER_CHECK(!impl_->has_forward_hooks(), impl_->type_name(),
                  ": forward hooks run only around a `Tensor forward(const Tensor&)` call; this "
                  "call has another signature. Remove the hooks or call forward directly");
      return impl_->forward(std::forward<Args>(args)...);
    }
  }

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace ember::nn

// Declares `Name` as a ModuleHolder of `Name##Impl`; `Name::clone(device)` returns a `Name`
// holding a deep copy.
#define EMBER_MODULE(Name)                                                           \
  class Name : public ::ember::nn::ModuleHolder<Name##Impl> {                        \
   public:                                                                           \
    using ::ember::nn::ModuleHolder<Name##Impl>::ModuleHolder;                       \
    Name clone(const std::optional<::ember::Device>& device = std::nullopt) const {  \
      return Name(std::static_pointer_cast<Name##Impl>(this->ptr()->clone(device))); \
    }                                                                                \
  }

// Inside a module class: defines clone_instance() as a fresh `Impl` built from `options` (or
// default constructed), so clone() copies the module. A class derived from Impl that does not
// define its own falls back to what its holder recorded.
#define EMBER_CLONEABLE(Impl)                                                          \
  std::shared_ptr<::ember::nn::Module> clone_instance() const override {               \
    if (typeid(*this) != typeid(Impl)) return ::ember::nn::Module::clone_instance();   \
    return ::ember::nn::detail::construct_like<Impl>(static_cast<const Impl&>(*this)); \
  }                                                                                    \
  static_assert(true, "")
