// GraphedStep: one call turns a training-step callable into CUDA graphs. For each input shape
// signature (shapes and dtypes of the inputs: batch size, sequence length, resolution) it runs
// the step eagerly `warmup_steps` times, then captures it once into a graph that reads static
// input buffers and writes static outputs, and from then on copies the inputs in and replays.
// Graphs live in an LRU cache (max_graphs), share one memory pool (they replay one at a time on
// one stream), and a step that cannot be captured (a host sync such as item(), an allocation the
// allocator refuses) falls back to eager for that signature with one message naming the cause.
// EMBER_LOG_GRAPHS=1 logs captures, replays and evictions to stderr.
//
// The step must do its work through tensors (parameters, gradients and optimizer state updated in
// place, LR and loss scale in device memory): host-side effects inside it run only while eager.
// Outputs of a replay are the graph's static tensors: read or copy them before the next call.
#pragma once
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ember/tensor/runtime/cuda_graph.h"
#include "ember/tensor/tensor.h"

namespace ember::nn {

// The options of GraphedStep (see the file comment).
struct GraphedStepOptions {
  int warmup_steps = 3;   // eager runs per signature before capture (creates grads, states)
  size_t max_graphs = 8;  // LRU bound on cached graphs
  bool enabled = true;    // false: always eager (e.g. --graphs off), same call site
  // Bucketing for sequence models: round dim `bucket_dim` of input `bucket_input` up to a
  // multiple of `bucket_multiple` by zero padding (0 = off). The step sees padded inputs.
  int bucket_input = -1;
  int64_t bucket_dim = 1;
  int64_t bucket_multiple = 0;
};

// Counts of what GraphedStep did: eager runs (warm-up and fallback), graph captures, replays,
// LRU evictions and signatures that fell back to eager.
struct GraphedStepStats {
  uint64_t eager_steps = 0;  // steps run eagerly (warm-up and fallback)
  uint64_t captures = 0;     // graphs captured
  uint64_t replays = 0;      // steps run by replaying a graph
  uint64_t evictions = 0;    // graphs dropped by the LRU limit
  uint64_t fallbacks = 0;    // input signatures that fell back to eager steps
};

// Runs a training step through cached CUDA graphs, one per input signature (see the file comment).
class GraphedStep {
 public:
  // The step: inputs (e.g. {x, y}) -> outputs (e.g. {loss}); it updates the model in place.
  using StepFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;
  // Wraps `step`; nothing runs or is captured until the first call.
  GraphedStep(StepFn step, GraphedStepOptions options = {});
  ~GraphedStep();

  // Runs one step on `inputs` (all on one CUDA device for graphs; CPU inputs run eagerly).
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs);

  // The counters so far.
  const GraphedStepStats& stats() const { return stats_; }
  // How many signatures are cached now (graphs or eager fallbacks), at most max_graphs.
  size_t cached_graphs() const { return graphs_.size(); }
  // Why a signature fell back to eager ("" when none did).
  const std::string& last_fallback_reason() const { return last_fallback_; }

 private:
  struct Entry;
  std::string signature(const std::vector<Tensor>& inputs) const;
  std::vector<Tensor> pad_to_bucket(const std::vector<Tensor>& inputs) const;
  std::vector<Tensor> capture(Entry& e, const std::vector<Tensor>& inputs);
  void evict_if_needed();

  StepFn step_;
  GraphedStepOptions options_;
  GraphedStepStats stats_;
  std::map<std::string, std::unique_ptr<Entry>> graphs_;
  std::list<std::string> lru_;  // most recent first
  cuda::MemPoolId pool_ = 0;
  int pool_device_ = 0;
  std::string last_fallback_;
  bool log_ = false;
};

}  // namespace ember::nn
