// Nodes, saved tensors, gradient edges and record_backward: how ops attach their backward.
#include "ember/autograd/graph/node.h"

#include <atomic>
#include <cmath>
#include <string>
#include <string_view>

#include "ember/autograd/autograd.h"
#include "ember/ops/ops.h"

namespace ember::autograd {

uint64_t next_sequence_nr() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

namespace {
thread_local const Node* t_current_node = nullptr;

// A view of `data` that carries the history (grad_fn, output_nr).
Tensor with_history(const Tensor& data, std::shared_ptr<Node> fn, uint32_t output_nr) {
  Tensor t = data.detach();
  auto meta = std::make_shared<AutogradMeta>();
  meta->requires_grad = true;
  meta->grad_fn = std::move(fn);
  meta->output_nr = output_nr;
  t.impl()->autograd = std::move(meta);
  return t;
}
}  // namespace

const Node* current_backward_node() { return t_current_node; }
CurrentBackwardNodeGuard::CurrentBackwardNodeGuard(const Node* node) : prev_(t_current_node) {
  t_current_node = node;
}
CurrentBackwardNodeGuard::~CurrentBackwardNodeGuard() { t_current_node = prev_; }

SavedTensor::SavedTensor(const Tensor& t, const char* op, bool is_output) : op_(op) {
  if (!t.defined()) return;
  tensor_ = t.detach();
  version_ = t.version();
  original_ = t.impl_ptr();
  if (!is_output && t.requires_grad()) {
    if (t.is_leaf())
      leaf_ = t;
    else
      edge_ = {t.grad_fn(), t.impl()->autograd->output_nr};
  }
}

Tensor SavedTensor::unpack() const {
  if (!tensor_.defined()) return tensor_;
  if (tensor_.version() != version_) [[unlikely]]
    EMBER_THROW(bad_param, "autograd: a tensor of shape ", tensor_.shape_str(), " saved by ", op_,
                " for backward was modified in place afterwards (version ", tensor_.version(),
                ", saved at version ", version_, "); use an out-of-place op or clone() it first");
  if (!grad_enabled()) return tensor_;
  if (leaf_.defined()) return leaf_;
  if (edge_.valid()) return with_history(tensor_, edge_.fn, edge_.input_nr);
  if (const Node* node = t_current_node) {
    for (size_t i = 0; i < node->output_impls.size(); ++i) {
      const auto& o = node->output_impls[i];
      if (!o.owner_before(original_) && !original_.owner_before(o))
        return with_history(tensor_, const_cast<Node*>(node)->shared_from_this(), uint32_t(i));
    }
  }
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
  CurrentBackwardNodeGuard current(this);
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
  if (grad_enabled()) {
    // A create_graph backward: .grad keeps its history so it can be differentiated again.
    meta.grad = meta.grad.defined() ? add(meta.grad, g) : g.clone(leaf.suggest_memory_format());
  } else if (!meta.grad.defined()) {
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

// "<op>Backward", or `name` itself when it already names a backward node (see node.h).
std::string backward_node_name(std::string_view name) {
  std::string_view stem = name;
  while (!stem.empty() && stem.back() >= '0' && stem.back() <= '9') stem.remove_suffix(1);
  constexpr std::string_view kSuffix = "Backward";
  if (stem.size() >= kSuffix.size() && stem.substr(stem.size() - kSuffix.size()) == kSuffix)
    return std::string(name);
  return std::string(name) + std::string(kSuffix);
}
}  // namespace

std::shared_ptr<Node> record_backward(const char* name, const std::vector<Tensor>& inputs,
                                      const std::vector<Tensor*>& outputs, BackwardFn backward) {
  if (anomaly_enabled())
    for (Tensor* o : outputs) check_finite_output(name, *o);
  auto node = std::make_shared<FunctionNode>(backward_node_name(name), std::move(backward));
  node->sequence_nr = next_sequence_nr();
  node->next_edges.reserve(inputs.size());
  for (const Tensor& in : inputs) node->next_edges.push_back(gradient_edge(in));
  uint32_t nr = 0;
  for (Tensor* o : outputs) {
    node->outputs.push_back({o->sizes(), o->dtype(), o->device()});
    node->output_impls.push_back(o->impl_ptr());
    auto& meta = o->impl()->autograd;
    if (!meta) meta = std::make_shared<AutogradMeta>();
    meta->requires_grad = true;
    meta->grad_fn = node;
    meta->output_nr = nr++;
  }
  return node;
}

std::vector<Tensor> no_double_backward(const char* op, std::vector<Tensor> grads,
                                       const std::vector<Tensor>& incoming, const Node& node) {
  if (!grad_enabled()) return grads;
  std::vector<Edge> edges;
  for (const Tensor& g : incoming)
    if (g.defined() && g.requires_grad()) edges.push_back(gradient_edge(g));
  for (const Edge& e : node.next_edges)
    if (e.valid()) edges.push_back(e);
  if (edges.empty()) return grads;
  std::string name = op;
  auto error = std::make_shared<FunctionNode>(
      name + "BackwardBackward",
      [name](const std::vector<Tensor>&, const Node&) -> std::vector<Tensor> {
        EMBER_THROW(not_supported, name,
                    ": double backward (the gradient of its gradient) is not implemented for "
                    "this op; compute higher-order gradients through ops that support it");
      });
  error->sequence_nr = next_sequence_nr();
  error->next_edges = std::move(edges);
  uint32_t nr = 0;
  for (Tensor& g : grads) {
    if (!g.defined()) continue;
    g = g.detach();
    error->outputs.push_back({g.sizes(), g.dtype(), g.device()});
    error->output_impls.push_back(g.impl_ptr());
    auto meta = std::make_shared<AutogradMeta>();
    meta->requires_grad = true;
    meta->grad_fn = error;
    meta->output_nr = nr++;
    g.impl()->autograd = std::move(meta);
  }
  return grads;
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
