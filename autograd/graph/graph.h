// The autograd graph layer, below ops: what an op needs to record its backward (nodes, edges,
// saved tensors, record_backward: node.h), the grad-mode guards (grad_mode.h) and the per-tensor
// autograd state (AutogradMeta). The engine that runs the graph is autograd/autograd.h, above ops.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "ember/autograd/graph/grad_mode.h"
#include "ember/autograd/graph/node.h"
#include "ember/tensor/tensor.h"

namespace ember {

struct AutogradMeta {
  bool requires_grad = false;
  bool retains_grad = false;
  Tensor grad;
  std::shared_ptr<autograd::Node> grad_fn;
  uint32_t output_nr = 0;
  std::weak_ptr<autograd::Node> grad_accumulator;   // leaves only
  std::vector<std::pair<int, Tensor::Hook>> hooks;  // leaves: run before accumulation
  std::vector<Tensor::PostAccumulateHook> post_accumulate_hooks;
  int next_hook_id = 0;
};

}  // namespace ember
