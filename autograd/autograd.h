// The autograd engine's entry points: backward over several roots, grad() without touching .grad,
// final callbacks. What ops need to record a backward is the graph layer's (autograd/graph/).
#pragma once
#include <optional>
#include <vector>

#include "ember/autograd/graph/graph.h"
#include "ember/tensor/tensor.h"

namespace ember {

namespace autograd {

// Runs backward from `roots` (each with its gradient, or ones for one-element roots given an
// undefined gradient) and accumulates into the .grad of every leaf reached. With create_graph the
// backward formulas run with grad mode on, so the accumulated gradients have a grad_fn and can be
// differentiated again; retain_graph defaults to create_graph (as in PyTorch). Then a .grad whose
// history saved that same tensor (x.grad of x*x) holds it in a reference cycle, as in PyTorch: set
// the .grad to an undefined Tensor when done with it, or take gradients with grad() instead.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots = {},
              std::optional<bool> retain_graph = std::nullopt, bool create_graph = false);

// Returns d(sum of outputs . grad_outputs)/d(inputs) without accumulating into .grad. An input
// not reached gets an undefined Tensor, or an error unless allow_unused. create_graph and
// retain_graph as for backward() (libtorch's argument order).
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {},
                         std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
                         bool allow_unused = false);

// Queues `fn` to run once, on this thread, after the backward pass that is running now has
// finished every node (data parallel uses it to finish gradient synchronization). Called outside a
// backward pass it throws.
void queue_final_callback(std::function<void()> fn);

}  // namespace autograd
}  // namespace ember
