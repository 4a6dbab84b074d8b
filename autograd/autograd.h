// The autograd engine's entry points: backward over several roots, grad() without touching .grad,
// final callbacks. What ops need to record a backward is the graph layer's (autograd/graph/).
#pragma once
#include <vector>

#include "ember/autograd/graph/graph.h"
#include "ember/tensor/tensor.h"

namespace ember {

namespace autograd {

// Runs backward from `roots` (each with its gradient, or ones for one-element roots given an
// undefined gradient) and accumulates into the .grad of every leaf reached.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots = {},
              bool retain_graph = false);

// Returns d(sum of outputs . grad_outputs)/d(inputs) without accumulating into .grad. An input
// not reached gets an undefined Tensor, or an error unless allow_unused.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool allow_unused = false);

// Queues `fn` to run once, on this thread, after the backward pass that is running now has
// finished every node (data parallel uses it to finish gradient synchronization). Called outside a
// backward pass it throws.
void queue_final_callback(std::function<void()> fn);

}  // namespace autograd
}  // namespace ember
