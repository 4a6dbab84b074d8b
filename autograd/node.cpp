// Nodes, saved tensors, gradient edges and record_backward: how ops attach their backward.
#include "ember/autograd/graph/node.h"

#include <atomic>
#include <cmath>

#include "ember/autograd/autograd.h"
#include "ember/ops/ops.h"

namespace ember::autograd {

uint64_t next_sequence_nr() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

SavedTensor::SavedTensor(const Tensor& t, const char* op) : op_(op) {
  if (!t.defined()) return;
  tensor_ = t.detach();
  version_ = t.version();
}

const Tensor& SavedTensor::unpack() const {
  if (tensor_.defined() && tensor_.version() != version_) [[unlikely]]
    EMBER_THROW(bad_param, "autograd: a tensor of shape ", tensor_.shape_str(), " saved by ", op_,
                " for backward was modified in place afterwards (version ", tensor_.version(),
                ", saved at version ", version_, "); use an out-of-place op or clone() it first");
  return tensor_;
}

std::vector<Tensor> FunctionNode::apply(std::vector<Tensor>&& grads) {
  EMBER_CHECK(fn_ != nullptr, "autograd: trying to backward through ", name_,
              " a second time, after its saved tensors were freed; pass retain_graph=true to the "
              "first backward() if you need to backward twice");
  // Outputs that received no gradient get zeros, so formulas never see undefined gradients.
  for (size_t i = 0; i < grads.size(); ++i)
    if (!grads[i].defined() && i < outputs.size())
      grads[i] =
          zeros(outputs[i].sizes, TensorOptions(outputs[i].dtype).with_device(outputs[i].device));
  return fn_(grads, *this);
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  auto impl = leaf_.lock();
  if (!impl || !grads[0].defined()) return {};
  Tensor leaf(impl);
  Tensor g = grads[0];
  auto& meta = *impl->autograd;
  for (auto& [id, hook] : meta.hooks) {
    Tensor r = hook(g);
    if (r.defined()) g = r;
  }
  if (g.dtype() != leaf.dtype()) g = g.to(leaf.dtype());
  if (!meta.grad.defined()) {
    // Steal a fresh gradient buffer that nobody else references; otherwise copy it.
    bool exclusive = g.impl_ptr().use_count() <= 2 && g.storage().use_count() == 1 &&
                     g.is_contiguous(leaf.suggest_memory_format()) && g.sizes() == leaf.sizes();
    meta.grad = exclusive ? g.detach() : g.clone(leaf.suggest_memory_format()).detach();
  } else {
    meta.grad.bump_version();
    add_(meta.grad, g);
  }
  for (auto& hook : meta.post_accumulate_hooks) hook(leaf);
  return {};
}

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  auto& meta = t.impl()->autograd;
  if (meta->grad_fn) return {meta->grad_fn, meta->output_nr};
  std::shared_ptr<Node> acc = meta->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    acc->outputs.push_back({t.sizes(), t.dtype(), t.device()});
    acc->sequence_nr = UINT64_MAX;  // leaves accumulate as soon as they are ready
    meta->grad_accumulator = acc;
  }
  return {acc, 0};
}

namespace {
void check_finite_output(const char* name, const Tensor& t) {
  if (!is_floating(t.dtype()) || t.numel() == 0) return;
  NoGradGuard ng;
  bool ok = isfinite(t).to(DType::f32).sum().item() == double(t.numel());
  EMBER_CHECK(ok, "anomaly mode: ", name, " produced NaN or Inf in an output of shape ",
              t.shape_str());
}
}  // namespace

std::shared_ptr<Node> record_backward(const char* name, const std::vector<Tensor>& inputs,
                                      const std::vector<Tensor*>& outputs, BackwardFn backward) {
  if (anomaly_enabled())
    for (Tensor* o : outputs) check_finite_output(name, *o);
  auto node = std::make_shared<FunctionNode>(std::string(name) + "Backward", std::move(backward));
  node->sequence_nr = next_sequence_nr();
  node->next_edges.reserve(inputs.size());
  for (const Tensor& in : inputs) node->next_edges.push_back(gradient_edge(in));
  uint32_t nr = 0;
  for (Tensor* o : outputs) {
    node->outputs.push_back({o->sizes(), o->dtype(), o->device()});
    auto& meta = o->impl()->autograd;
    if (!meta) meta = std::make_shared<AutogradMeta>();
    meta->requires_grad = true;
    meta->grad_fn = node;
    meta->output_nr = nr++;
  }
  return node;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.sizes() == shape) return grad;
  const int64_t lead = grad.dim() - int64_t(shape.size());
  EMBER_INTERNAL_ASSERT(lead >= 0, "sum_to: ", grad.shape_str(), " -> ", shape_str(shape));
  Shape dims;
  for (int64_t d = 0; d < grad.dim(); ++d) {
    if (d < lead)
      dims.push_back(d);
    else if (shape[size_t(d - lead)] == 1 && grad.size(d) != 1)
      dims.push_back(d);
  }
  Tensor r = dims.empty() ? grad : sum(grad, dims, true);
  if (lead > 0)
    r = r.reshape(shape);
  else if (r.sizes() != shape)
    r = r.reshape(shape);
  return r;
}

}  // namespace ember::autograd
