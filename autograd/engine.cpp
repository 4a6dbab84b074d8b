// The backward engine: counts dependencies from the roots, then runs nodes in dependency order
// (ready nodes by decreasing sequence number), summing the gradients that reach each input slot.
#include <algorithm>
#include <map>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "ember/autograd/autograd.h"
#include "ember/ops/ops.h"

namespace ember::autograd {

namespace {

// Callbacks queued during the backward pass running on this thread (see queue_final_callback).
thread_local std::vector<std::function<void()>>* t_final_callbacks = nullptr;

struct NodeTask {
  Node* node;
  bool operator<(const NodeTask& o) const { return node->sequence_nr < o.node->sequence_nr; }
};

void check_finite_grad(const Node& node, const Tensor& g) {
  if (!g.defined() || !is_floating(g.dtype()) || g.numel() == 0) return;
  bool ok = isfinite(g).to(DType::f32).sum().item() == double(g.numel());
  EMBER_CHECK(ok, "anomaly mode: ", node.name(), " returned NaN or Inf in a gradient of shape ",
              g.shape_str());
}

void accumulate(Tensor& slot, const Tensor& g) {
  if (!g.defined()) return;
  slot = slot.defined() ? add(slot, g) : g;
}

// Runs the graph. With `capture` set (autograd::grad), gradients reaching the captured
// (node, input slot) pairs are stored there instead of flowing on, and leaves accumulate nothing.
void run_graph(const std::vector<Edge>& roots, std::vector<Tensor> root_grads, bool retain_graph,
               std::map<std::pair<Node*, uint32_t>, Tensor>* capture);

// Sets grad mode for the backward pass and restores the caller's on exit.
class GradModeScope {
 public:
  explicit GradModeScope(bool enabled) : prev_(grad_enabled()) { set_grad_enabled(enabled); }
  ~GradModeScope() { set_grad_enabled(prev_); }
  GradModeScope(const GradModeScope&) = delete;
  GradModeScope& operator=(const GradModeScope&) = delete;

 private:
  bool prev_;
};

void run_engine(const std::vector<Edge>& roots, std::vector<Tensor> root_grads, bool retain_graph,
                bool create_graph, std::map<std::pair<Node*, uint32_t>, Tensor>* capture) {
  std::vector<std::function<void()>> callbacks;
  auto* outer = t_final_callbacks;
  t_final_callbacks = &callbacks;
  try {
    // Backward formulas record a graph of their own only with create_graph: then saved tensors
    // unpack with their history and the gradients produced can be differentiated again.
    GradModeScope mode(create_graph);
    run_graph(roots, std::move(root_grads), retain_graph, capture);
  } catch (...) {
    t_final_callbacks = outer;
    throw;
  }
  t_final_callbacks = outer;
  for (auto& callback : callbacks) callback();
}

void run_graph(const std::vector<Edge>& roots, std::vector<Tensor> root_grads, bool retain_graph,
               std::map<std::pair<Node*, uint32_t>, Tensor>* capture) {
  // Dependencies: how many edges point at each node among nodes reachable from the roots.
  std::unordered_map<Node*, int> deps;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (const Edge& e : roots)
    if (e.valid() && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      deps[e.fn.get()] += 1;
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }

  // For grad(): only nodes from which a captured node is reachable need to run.
  std::unordered_set<Node*> needed;
  if (capture) {
    std::unordered_set<Node*> targets;
    for (auto& [key, _] : *capture) targets.insert(key.first);
    std::unordered_map<Node*, bool> memo;
    std::function<bool(Node*)> reaches = [&](Node* n) -> bool {
      auto it = memo.find(n);
      if (it != memo.end()) return it->second;
      memo[n] = false;
      bool r = targets.count(n) > 0;
      for (const Edge& e : n->next_edges)
        if (e.valid() && reaches(e.fn.get())) r = true;
      memo[n] = r;
      return r;
    };
    for (Node* n : seen)
      if (reaches(n)) needed.insert(n);
  }

  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::priority_queue<NodeTask> ready;
  auto deliver = [&](const Edge& e, const Tensor& g) {
    Node* n = e.fn.get();
    auto& buf = buffers[n];
    if (buf.size() < n->outputs.size()) buf.resize(std::max<size_t>(n->outputs.size(), 1));
    if (buf.size() <= e.input_nr) buf.resize(e.input_nr + 1);
    accumulate(buf[e.input_nr], g);
  };
  for (size_t i = 0; i < roots.size(); ++i)
    if (roots[i].valid()) deliver(roots[i], root_grads[i]);
  for (const Edge& e : roots) {
    if (!e.valid()) continue;
    Node* n = e.fn.get();
    if (deps[n] == 0) {
      deps[n] = -1;  // queued
      ready.push({n});
    }
  }

  while (!ready.empty()) {
    Node* node = ready.top().node;
    ready.pop();
    std::vector<Tensor> grads = std::move(buffers[node]);
    buffers.erase(node);
    grads.resize(std::max<size_t>(node->outputs.size(), grads.size()));
    // Hooks registered on non-leaf tensors see (and may replace) their gradient.
    for (auto& [slot, hook] : node->pre_hooks) {
      if (slot < grads.size() && grads[slot].defined()) {
        Tensor r = hook(grads[slot]);
        if (r.defined()) grads[slot] = r;
      }
    }
    for (auto& [slot, retain] : node->retain_grad_hooks)
      if (slot < grads.size() && grads[slot].defined()) retain(grads[slot]);
    std::vector<Tensor> out;
    bool run = !capture || needed.count(node);
    if (capture) {
      for (uint32_t s = 0; s < grads.size(); ++s) {
        auto it = capture->find({node, s});
        if (it != capture->end()) accumulate(it->second, grads[s]);
      }
      if (dynamic_cast<AccumulateGrad*>(node)) run = false;
    }
    if (run) {
      out = node->apply(std::move(grads));
      if (!retain_graph) node->release();
      if (anomaly_enabled())
        for (const Tensor& g : out) check_finite_grad(*node, g);
    }
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.valid()) continue;
      if (run && i < out.size()) deliver(e, out[i]);
      if (--deps[e.fn.get()] == 0) ready.push({e.fn.get()});
    }
  }
}

Tensor default_root_grad(const Tensor& root, const Tensor& given, const char* what) {
  if (given.defined()) {
    EMBER_CHECK(given.sizes() == root.sizes(), what, ": gradient of shape ", given.shape_str(),
                " does not match the output's shape ", root.shape_str());
    return given;
  }
  EMBER_CHECK(root.numel() == 1, what,
              ": a gradient can be created implicitly only for an output "
              "with one element, but the output has shape ",
              root.shape_str(), "; pass a gradient tensor of that shape");
  return ones_like(root);
}

}  // namespace

void queue_final_callback(std::function<void()> fn) {
  EMBER_CHECK(t_final_callbacks != nullptr,
              "queue_final_callback: no backward pass is running on "
              "this thread; call it from a hook during backward");
  t_final_callbacks->push_back(std::move(fn));
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots,
              std::optional<bool> retain_graph, bool create_graph) {
  std::vector<Edge> edges;
  std::vector<Tensor> grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    EMBER_CHECK(r.requires_grad(), "backward: output ", i, " of shape ", r.shape_str(),
                " does not require grad and has no grad_fn; did you forget requires_grad_() on "
                "an input, or run the forward under NoGradGuard?");
    edges.push_back(gradient_edge(r));
    grads.push_back(
        default_root_grad(r, i < grad_roots.size() ? grad_roots[i] : Tensor(), "backward"));
  }
  run_engine(edges, std::move(grads), retain_graph.value_or(create_graph), create_graph, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, std::optional<bool> retain_graph,
                         bool create_graph, bool allow_unused) {
  std::vector<Edge> edges;
  std::vector<Tensor> grads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    EMBER_CHECK(outputs[i].requires_grad(), "grad: output ", i, " does not require grad");
    edges.push_back(gradient_edge(outputs[i]));
    grads.push_back(default_root_grad(
        outputs[i], i < grad_outputs.size() ? grad_outputs[i] : Tensor(), "grad"));
  }
  std::map<std::pair<Node*, uint32_t>, Tensor> capture;
  std::vector<Edge> input_edges;
  for (size_t i = 0; i < inputs.size(); ++i) {
    EMBER_CHECK(inputs[i].requires_grad(), "grad: input ", i, " of shape ", inputs[i].shape_str(),
                " does not require grad");
    input_edges.push_back(gradient_edge(inputs[i]));
    capture[{input_edges.back().fn.get(), input_edges.back().input_nr}] = Tensor();
  }
  run_engine(edges, std::move(grads), retain_graph.value_or(create_graph), create_graph, &capture);
  std::vector<Tensor> result;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor g = capture[{input_edges[i].fn.get(), input_edges[i].input_nr}];
    EMBER_CHECK(g.defined() || allow_unused, "grad: input ", i, " of shape ", inputs[i].shape_str(),
                " was not used to compute the outputs; pass allow_unused=true to get an undefined "
                "gradient for it");
    result.push_back(g);
  }
  return result;
}

}  // namespace ember::autograd
