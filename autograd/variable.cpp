// The autograd methods of Tensor: requires_grad, .grad, grad_fn, hooks, retain_grad, backward.
#include "ember/autograd/autograd.h"
#include "ember/ops/ops.h"

namespace ember {

namespace {
AutogradMeta& meta_of(const Tensor& t) {
  auto& m = t.impl()->autograd;
  if (!m) m = std::make_shared<AutogradMeta>();
  return *m;
}
const Tensor kUndefined;
const std::shared_ptr<autograd::Node> kNoNode;
}  // namespace

bool Tensor::requires_grad() const {
  return impl_ && impl_->autograd && impl_->autograd->requires_grad;
}

Tensor& Tensor::set_requires_grad(bool r) {
  EMBER_CHECK(defined(), "requires_grad_: the tensor is undefined");
  if (!r && !impl_->autograd) return *this;
  auto& m = meta_of(*this);
  EMBER_CHECK(r || !m.grad_fn,
              "requires_grad_(false) is only allowed on leaf tensors; this tensor "
              "was computed by ",
              m.grad_fn ? m.grad_fn->name() : "", ": use .detach() instead");
  EMBER_CHECK(!r || is_floating(dtype()),
              "requires_grad_: only floating-point tensors can require "
              "gradients, but this tensor has dtype ",
              dtype_name(dtype()));
  m.requires_grad = r;
  return *this;
}

const Tensor& Tensor::grad() const {
  return impl_ && impl_->autograd ? impl_->autograd->grad : kUndefined;
}
Tensor& Tensor::mutable_grad() { return meta_of(*this).grad; }
void Tensor::set_grad(const Tensor& g) {
  EMBER_CHECK(!g.defined() || g.sizes() == sizes(), "set_grad: gradient of shape ", g.shape_str(),
              " does not match the tensor's shape ", shape_str());
  meta_of(*this).grad = g;
}
const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  return impl_ && impl_->autograd ? impl_->autograd->grad_fn : kNoNode;
}
bool Tensor::is_leaf() const { return grad_fn() == nullptr; }

void Tensor::retain_grad() {
  EMBER_CHECK(requires_grad(), "retain_grad: the tensor does not require grad");
  if (is_leaf()) return;  // leaves keep .grad anyway
  auto& m = meta_of(*this);
  if (m.retains_grad) return;
  m.retains_grad = true;
  std::weak_ptr<TensorImpl> weak = impl_;
  // Runs after the node's other hooks on this output, whenever they were registered.
  m.grad_fn->retain_grad_hooks.emplace_back(m.output_nr, [weak](const Tensor& g) {
    if (auto impl = weak.lock()) {
      Tensor& slot = impl->autograd->grad;
      slot = slot.defined() ? slot + g : g.clone();
    }
  });
}

void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph,
                      bool create_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph, create_graph);
}

int Tensor::register_hook(Hook hook) {
  EMBER_CHECK(requires_grad(),
              "register_hook: cannot register a hook on a tensor that does not "
              "require grad");
  auto& m = meta_of(*this);
  int id = m.next_hook_id++;
  if (is_leaf()) {
    m.hooks.emplace_back(id, std::move(hook));
  } else {
    m.grad_fn->pre_hooks.emplace_back(m.output_nr, std::move(hook));
    m.grad_fn->pre_hook_ids.emplace_back(id, uint32_t(m.grad_fn->pre_hooks.size() - 1));
  }
  return id;
}

void Tensor::remove_hook(int handle) {
  auto& m = meta_of(*this);
  if (is_leaf()) {
    std::erase_if(m.hooks, [&](const auto& h) { return h.first == handle; });
    return;
  }
  for (auto& [id, index] : m.grad_fn->pre_hook_ids)
    if (id == handle) m.grad_fn->pre_hooks[index].second = [](const Tensor&) { return Tensor(); };
}

void Tensor::register_post_accumulate_grad_hook(PostAccumulateHook hook) {
  EMBER_CHECK(requires_grad() && is_leaf(),
              "register_post_accumulate_grad_hook: only leaf tensors "
              "that require grad accumulate gradients");
  meta_of(*this).post_accumulate_hooks.push_back(std::move(hook));
}

}  // namespace ember
