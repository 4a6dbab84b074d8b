// The autograd graph: a Node is the backward of one op; its edges point at the nodes that produced
// its inputs (or at a leaf's grad accumulator). Ops record nodes with record_backward(), giving the
// backward formula as a lambda right beside the forward (see ops/elementwise.cpp for the pattern).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ember/tensor/tensor.h"

namespace ember::autograd {

class Node;

struct Edge {
  std::shared_ptr<Node> fn;  // null: this input needs no gradient
  uint32_t input_nr = 0;     // which input slot of fn receives the gradient
  bool valid() const { return fn != nullptr; }
};

// Shape, dtype and device of a forward output, to make zero gradients for outputs that got none.
struct OutputMeta {
  Shape sizes;
  DType dtype = DType::f32;
  Device device;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  virtual ~Node() = default;
  virtual std::string name() const = 0;
  // grads: one per forward output (undefined where no gradient flowed). Returns one gradient per
  // next edge (undefined where the input needs none).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  // Frees saved tensors after a backward without retain_graph.
  virtual void release() {}

  std::vector<Edge> next_edges;
  std::vector<OutputMeta> outputs;
  uint64_t sequence_nr = 0;  // creation order: later nodes run first
  // Hooks on the gradient of one output (registered through Tensor::register_hook on a non-leaf).
  std::vector<std::pair<uint32_t, std::function<Tensor(const Tensor&)>>> pre_hooks;
  std::vector<std::pair<int, uint32_t>> pre_hook_ids;  // hook handle -> index bookkeeping
  // retain_grad() of one output: runs after every pre-hook of that output, so the retained .grad
  // is the gradient the hooks finally let through (PyTorch 2 order).
  std::vector<std::pair<uint32_t, std::function<void(const Tensor&)>>> retain_grad_hooks;
  // The forward outputs, held weakly: a saved output unpacked during a create_graph backward gets
  // this node as its grad_fn (saving it strongly would make a reference cycle).
  std::vector<std::weak_ptr<TensorImpl>> output_impls;

  bool needs_input_grad(size_t i) const { return i < next_edges.size() && next_edges[i].valid(); }
};

uint64_t next_sequence_nr();

// A tensor saved for backward, with the version it had: unpacking after an in-place write throws
// an Error naming the op. The value is stored detached; its history is kept beside it (the grad
// edge of a saved input, the tensor itself for a leaf, a weak reference for a saved output) so
// that under grad mode (a backward with create_graph) unpack() returns it with that history and
// the backward formula is itself differentiable. Outputs are never held strongly (no cycle).
class SavedTensor {
 public:
  SavedTensor() = default;
  // `is_output`: t is an output of the node that saves it (custom functions say so; ops save
  // outputs before recording, when they have no history yet, so the default finds them too).
  SavedTensor(const Tensor& t, const char* op, bool is_output = false);
  // The saved value: detached when grad mode is off (the usual first-order backward), with its
  // autograd history when grad mode is on.
  Tensor unpack() const;
  bool defined() const { return tensor_.defined(); }
  void reset() {
    tensor_ = Tensor();
    leaf_ = Tensor();
    edge_ = {};
  }

 private:
  Tensor tensor_;
  uint64_t version_ = 0;
  const char* op_ = "";
  Edge edge_;    // the saved tensor's grad_fn when it was a non-leaf requiring grad
  Tensor leaf_;  // the saved tensor itself when it was a leaf requiring grad
  std::weak_ptr<TensorImpl> original_;  // recognises a saved output of the unpacking node
};

// The node whose backward is running on this thread (set by Node implementations around their
// formula), so that SavedTensor::unpack can give saved outputs that node as grad_fn.
const Node* current_backward_node();
class CurrentBackwardNodeGuard {
 public:
  explicit CurrentBackwardNodeGuard(const Node* node);
  ~CurrentBackwardNodeGuard();
  CurrentBackwardNodeGuard(const CurrentBackwardNodeGuard&) = delete;
  CurrentBackwardNodeGuard& operator=(const CurrentBackwardNodeGuard&) = delete;

 private:
  const Node* prev_;
};

using BackwardFn =
    std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs, const Node& node)>;

// A node whose backward is a lambda (all ops use it).
class FunctionNode : public Node {
 public:
  FunctionNode(std::string name, BackwardFn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  void release() override { fn_ = nullptr; }

 private:
  std::string name_;
  BackwardFn fn_;
};

// Accumulates into a leaf's .grad, then runs its post-accumulate hooks.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::weak_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {}
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::shared_ptr<TensorImpl> leaf() const { return leaf_.lock(); }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

// True when grad mode is on and any of `inputs` requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);
// The edge that a gradient for `t` flows along (its grad_fn, or its leaf accumulator).
Edge gradient_edge(const Tensor& t);
// Records a backward node for `outputs` computed from `inputs`. Call only when needs_grad(inputs);
// outputs become non-leaf tensors that require grad. Returns the node. `name` is the op's name:
// the node is called "<name>Backward" (as PyTorch names a Function's node), unless `name` already
// ends in "Backward" or "Backward<digits>" (e.g. "MyOpBackward0"), which is taken as given.
std::shared_ptr<Node> record_backward(const char* name, const std::vector<Tensor>& inputs,
                                      const std::vector<Tensor*>& outputs, BackwardFn backward);

// For a backward formula computed by kernels that record no history. Under grad mode (a
// create_graph backward) where the incoming gradients or the inputs of `node` (the node running
// the formula) require grad, returns `grads` attached to a node that throws an Error naming `op`
// if a higher-order gradient ever flows back through them; otherwise returns `grads` unchanged.
std::vector<Tensor> no_double_backward(const char* op, std::vector<Tensor> grads,
                                       const std::vector<Tensor>& incoming, const Node& node);

// Sums `grad` down to `shape` (the reverse of broadcasting), used by every broadcasting op.
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace ember::autograd
