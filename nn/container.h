// Containers, as torch.nn.Sequential / ModuleList / ModuleDict: Sequential chains any modules that
// have a `Tensor forward(const Tensor&)` (type-erased: it keeps each module and a call to its
// forward, run with the module's hooks); ModuleList and ModuleDict hold modules for the owner to
// call; Functional wraps a function as a module so that stateless steps (a view, an op) can sit
// inside a Sequential. Children are named "0", "1", ... unless a name is given, so state_dict
// names are PyTorch's ("0.weight", "1.running_mean").
#pragma once
#include <concepts>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "ember/nn/module.h"

namespace ember::nn {

namespace detail {
// The module implementation type behind M: a holder (nn::Linear), or std::shared_ptr<Impl>.
template <typename M>
struct ImplOf;
template <typename Impl>
struct ImplOf<std::shared_ptr<Impl>> {
  using type = Impl;
  static std::shared_ptr<Impl> get(const std::shared_ptr<Impl>& p) { return p; }
};
template <typename M>
requires requires { typename M::ImplType; }
struct ImplOf<M> {
  using type = typename M::ImplType;
  static std::shared_ptr<type> get(const M& holder) { return holder.ptr(); }
};

template <typename M>
concept ModuleLike = requires {
  typename ImplOf<std::decay_t<M>>::type;
}
&&std::is_base_of_v<Module, typename ImplOf<std::decay_t<M>>::type>;

template <typename Impl>
concept HasTensorForward = requires(Impl& m, const Tensor& x) {
  { m.forward(x) } -> std::convertible_to<Tensor>;
};
}  // namespace detail

// Wraps `Tensor f(const Tensor&)` as a module without parameters.
class FunctionalImpl : public Module {
 public:
  using Function = std::function<Tensor(const Tensor&)>;  // what it wraps
  // f is called by forward; name is what printing shows (e.g. "Functional(flatten)").
  explicit FunctionalImpl(Function f, std::string name = "Functional")
      : Module("Functional"), function_(std::move(f)), name_(std::move(name)) {}
  // x -> f(x), whatever shapes f maps between.
  Tensor forward(const Tensor& x) { return function_(x); }
  void pretty_print(std::ostream& os) const override;
  std::shared_ptr<Module> clone_instance() const override {
    return std::make_shared<FunctionalImpl>(function_, name_);
  }

 private:
  Function function_;
  std::string name_;
};
EMBER_MODULE(Functional);

// A chain of modules run one after another, as torch.nn.Sequential: forward(x) passes x through
// each in order. Children are named by position unless push_back is given a name.
class SequentialImpl : public Module {
 public:
  // Empty; push_back adds modules.
  SequentialImpl() : Module("Sequential") {}
  // Sequential(Conv2d(3, 8, 3), BatchNorm2d(8), ReLU())
  template <detail::ModuleLike... Ms>
  explicit SequentialImpl(Ms&&... modules) : Module("Sequential") {
    (push_back(std::forward<Ms>(modules)), ...);
  }

  // Appends a holder or a shared_ptr to a module whose forward takes one Tensor, named by its
  // position.
  template <detail::ModuleLike M>
  void push_back(M&& module) {
    push_back(std::to_string(entries_.size()), std::forward<M>(module));
  }
  template <detail::ModuleLike M>
  void push_back(const std::string& name, M&& module) {
    using Impl = typename detail::ImplOf<std::decay_t<M>>::type;
    static_assert(detail::HasTensorForward<Impl>,
                  "Sequential::push_back: the module needs a `Tensor forward(const Tensor&)`");
    std::shared_ptr<Impl> impl = detail::ImplOf<std::decay_t<M>>::get(module);
    EMBER_CHECK(impl != nullptr, "Sequential::push_back: module '", name,
                "' is empty (a null holder)");
    impl->template remember_type<Impl>();
    append(name, impl,
           [](Module& m, const Tensor& x) -> Tensor { return static_cast<Impl&>(m).forward(x); });
  }
  // Appends a function as a Functional module.
  void push_back(FunctionalImpl::Function f) { push_back(Functional(std::move(f))); }

  // Runs the modules in order, each with its hooks. An empty Sequential returns its input.
  Tensor forward(const Tensor& x);
  std::shared_ptr<Module> clone_instance() const override;

  // The number of modules.
  size_t size() const { return entries_.size(); }
  // Whether it holds no module.
  bool empty() const { return entries_.empty(); }
  // The i-th module; at<T>(i) casts it, throwing when it is not a T.
  const std::shared_ptr<Module>& ptr(size_t i) const;
  const std::shared_ptr<Module>& operator[](size_t i) const { return ptr(i); }
  template <typename T>
  T& at(size_t i) const {
    auto* m = dynamic_cast<T*>(ptr(i).get());
    EMBER_CHECK(m != nullptr, "Sequential::at: module ", i, " is a ", ptr(i)->type_name(),
                ", not the requested type");
    return *m;
  }

 private:
  void append(const std::string& name, std::shared_ptr<Module> module, TensorForward forward);

  struct Entry {
    std::string name;
    std::shared_ptr<Module> module;
    TensorForward forward;  // calls the module's own forward (its type is known at push_back)
  };
  std::vector<Entry> entries_;
};
EMBER_MODULE(Sequential);

// A list of submodules (any Module) registered as "0", "1", ...; it has no forward of its own.
class ModuleListImpl : public Module {
 public:
  // Empty; push_back adds modules.
  ModuleListImpl() : Module("ModuleList") {}
  // ModuleList(Linear(4, 4), Linear(4, 2)): holders or shared_ptrs of any modules, in order.
  template <detail::ModuleLike... Ms>
  explicit ModuleListImpl(Ms&&... modules) : Module("ModuleList") {
    (push_back(std::forward<Ms>(modules)), ...);
  }
  // Appends a module (a holder or a shared_ptr), registered under its position; errors on an
  // empty holder.
  template <detail::ModuleLike M>
  void push_back(M&& module) {
    auto impl = detail::ImplOf<std::decay_t<M>>::get(module);
    EMBER_CHECK(impl != nullptr, "ModuleList::push_back: the module is empty (a null holder)");
    impl->template remember_type<typename detail::ImplOf<std::decay_t<M>>::type>();
    std::shared_ptr<Module> base = impl;
    register_module(std::to_string(modules_.size()), base);
    modules_.push_back(std::move(base));
  }
  std::shared_ptr<Module> clone_instance() const override;

  // The number of modules.
  size_t size() const { return modules_.size(); }
  // Whether it holds no module.
  bool empty() const { return modules_.empty(); }
  // The i-th module (errors when i >= size()); at<T>(i) casts it, throwing when it is not a T.
  const std::shared_ptr<Module>& ptr(size_t i) const;
  const std::shared_ptr<Module>& operator[](size_t i) const { return ptr(i); }
  template <typename T>
  T& at(size_t i) const {
    auto* m = dynamic_cast<T*>(ptr(i).get());
    EMBER_CHECK(m != nullptr, "ModuleList::at: module ", i, " is a ", ptr(i)->type_name(),
                ", not the requested type");
    return *m;
  }
  // Iteration over the modules (shared_ptr<Module>) in order: `for (auto& m : *list)`.
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};
EMBER_MODULE(ModuleList);

// An ordered dict of submodules, as torch.nn.ModuleDict / libtorch's ModuleDict: entries keep
// insertion order, each is registered under its key (so state_dict names are "key.weight"); it has
// no forward of its own. Setting an existing key replaces its module in place.
class ModuleDictImpl : public Module {
 public:
  using Item = std::pair<std::string, std::shared_ptr<Module>>;  // a key and its module
  // Empty; insert adds modules.
  ModuleDictImpl() : Module("ModuleDict") {}
  // The items in order, as update(items).
  explicit ModuleDictImpl(const std::vector<Item>& items) : Module("ModuleDict") { update(items); }

  // Adds (or replaces) `key`; accepts a holder or a shared_ptr to a module.
  template <detail::ModuleLike M>
  void insert(const std::string& key, M&& module) {
    auto impl = detail::ImplOf<std::decay_t<M>>::get(module);
    EMBER_CHECK(impl != nullptr, "ModuleDict::insert: the module for '", key,
                "' is empty (a null holder)");
    impl->template remember_type<typename detail::ImplOf<std::decay_t<M>>::type>();
    insert_module(key, impl);
  }
  // Inserts every item in order (existing keys are replaced in place).
  void update(const std::vector<Item>& items);
  // Another ModuleDict's items (a template so that a braced list always means the vector).
  template <typename Dict>
  requires std::same_as<Dict, ModuleDictImpl>
  void update(const Dict& other) { update(other.items()); }
  // Removes `key` and returns its module; throws when absent.
  std::shared_ptr<Module> pop(const std::string& key);
  void clear();  // removes every entry

  bool contains(const std::string& key) const;  // whether `key` is present
  // The number of entries.
  size_t size() const { return items_.size(); }
  // Whether it has no entry.
  bool empty() const { return items_.empty(); }
  std::vector<std::string> keys() const;                // the keys, in insertion order
  std::vector<std::shared_ptr<Module>> values() const;  // the modules, in insertion order
  // (key, module) pairs, in order.
  const std::vector<Item>& items() const { return items_; }
  // The module under `key`; throws (listing the keys) when absent. at<T> casts it.
  const std::shared_ptr<Module>& operator[](const std::string& key) const;
  template <typename T>
  T& at(const std::string& key) const {
    auto* m = dynamic_cast<T*>((*this)[key].get());
    EMBER_CHECK(m != nullptr, "ModuleDict::at: module '", key, "' is a ", (*this)[key]->type_name(),
                ", not the requested type");
    return *m;
  }
  // Iteration over the (key, module) items in insertion order.
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  std::shared_ptr<Module> clone_instance() const override;

 private:
  void insert_module(const std::string& key, std::shared_ptr<Module> module);
  std::vector<Item> items_;
};
EMBER_MODULE(ModuleDict);

}  // namespace ember::nn
