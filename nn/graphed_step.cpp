// GraphedStep: warm-up, capture, replay and the shape-keyed LRU cache of graphs.
#include "ember/nn/graphed_step.h"

#include <cstdio>
#include <sstream>

#include "ember/autograd/autograd.h"
#include "ember/ops/ops.h"

namespace ember::nn {

struct GraphedStep::Entry {
  int eager_runs = 0;
  bool eager_only = false;  // capture failed: this signature always runs eagerly
  cuda::Graph graph;
  std::vector<Tensor> static_inputs, static_outputs;
};

GraphedStep::GraphedStep(StepFn step, GraphedStepOptions options)
    : step_(std::move(step)), options_(options) {
  log_ = cuda::log_graphs();
  EMBER_CHECK(options_.warmup_steps >= 1,
              "GraphedStep: warmup_steps must be >= 1 (the first eager "
              "step creates gradients and optimizer state), got ",
              options_.warmup_steps);
  EMBER_CHECK(options_.max_graphs >= 1, "GraphedStep: max_graphs must be >= 1");
}

GraphedStep::~GraphedStep() {
  graphs_.clear();
  if (pool_ != 0) {
    try {
      // Cached graphs are gone: their private pool can give its memory back.
      cuda::release_mem_pool(pool_device_, pool_);
    } catch (...) {
    }
  }
}

std::string GraphedStep::signature(const std::vector<Tensor>& inputs) const {
  std::ostringstream os;
  for (const Tensor& t : inputs) {
    os << dtype_name(t.dtype()) << shape_str(t.sizes());
    if (t.suggest_memory_format() == MemoryFormat::channels_last) os << "cl";
    os << ";";
  }
  return os.str();
}

std::vector<Tensor> GraphedStep::pad_to_bucket(const std::vector<Tensor>& inputs) const {
  if (options_.bucket_multiple <= 0 || options_.bucket_input < 0 ||
      size_t(options_.bucket_input) >= inputs.size())
    return inputs;
  std::vector<Tensor> out = inputs;
  Tensor& t = out[size_t(options_.bucket_input)];
  const int64_t d = wrap_dim(options_.bucket_dim, t.dim(), "GraphedStep bucketing");
  const int64_t n = t.size(d), m = options_.bucket_multiple;
  const int64_t padded = (n + m - 1) / m * m;
  if (padded == n) return out;
  Shape shape = t.sizes();
  shape[size_t(d)] = padded;
  Tensor p = zeros(shape, TensorOptions(t.dtype()).with_device(t.device()));
  p.narrow(d, 0, n).copy_(t);
  t = p;
  return out;
}

void GraphedStep::evict_if_needed() {
  while (graphs_.size() > options_.max_graphs && !lru_.empty()) {
    const std::string victim = lru_.back();
    lru_.pop_back();
    graphs_.erase(victim);
    ++stats_.evictions;
    if (log_) std::fprintf(stderr, "[ember graphs] evicted graph for %s\n", victim.c_str());
  }
}

std::vector<Tensor> GraphedStep::capture(Entry& e, const std::vector<Tensor>& inputs) {
  const Device device = inputs.front().device();
  // Static inputs live outside the pool: they outlive any one capture.
  e.static_inputs.clear();
  for (const Tensor& t : inputs) e.static_inputs.push_back(t.detach().clone());
  try {
    cuda::GraphCapture capture(e.graph, device, pool_);
    pool_ = e.graph.pool();
    pool_device_ = device.index;
    e.static_outputs = step_(e.static_inputs);
    capture.end();
  } catch (const Error& err) {
    e.graph.reset();
    e.static_outputs.clear();
    e.static_inputs.clear();
    e.eager_only = true;
    ++stats_.fallbacks;
    last_fallback_ = err.message();
    std::fprintf(stderr,
                 "[ember graphs] the step for inputs %s cannot be captured as a CUDA graph; it "
                 "runs eagerly from now on. Cause: %s\n",
                 signature(inputs).c_str(), err.message().c_str());
    ++stats_.eager_steps;
    return step_(inputs);
  }
  ++stats_.captures;
  if (log_)
    std::fprintf(stderr, "[ember graphs] captured graph for %s\n", signature(inputs).c_str());
  // Capturing recorded the work without running it: run this step now.
  e.graph.replay();
  ++stats_.replays;
  return e.static_outputs;
}

std::vector<Tensor> GraphedStep::operator()(const std::vector<Tensor>& raw_inputs) {
  EMBER_CHECK(!raw_inputs.empty(), "GraphedStep: the step needs at least one input tensor");
  std::vector<Tensor> inputs = pad_to_bucket(raw_inputs);
  const Device device = inputs.front().device();
  for (const Tensor& t : inputs)
    EMBER_CHECK(t.device() == device, "GraphedStep: inputs are on ", device.str(), " and ",
                t.device().str(), "; a step's inputs must share one device");
  if (!options_.enabled || !device.is_cuda()) {
    ++stats_.eager_steps;
    return step_(inputs);
  }
  const std::string key = signature(inputs);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    it = graphs_.emplace(key, std::make_unique<Entry>()).first;
    lru_.push_front(key);
    evict_if_needed();
    it = graphs_.find(key);
  } else {
    lru_.remove(key);
    lru_.push_front(key);
  }
  Entry& e = *it->second;
  if (e.eager_only || e.eager_runs < options_.warmup_steps) {
    ++e.eager_runs;
    ++stats_.eager_steps;
    return step_(inputs);
  }
  if (!e.graph.captured()) return capture(e, inputs);
  {
    autograd::NoGradGuard ng;
    for (size_t i = 0; i < inputs.size(); ++i) e.static_inputs[i].copy_(inputs[i]);
  }
  e.graph.replay();
  ++stats_.replays;
  if (log_ && stats_.replays % 1000 == 1)
    std::fprintf(stderr, "[ember graphs] replays so far: %llu\n",
                 (unsigned long long)stats_.replays);
  return e.static_outputs;
}

}  // namespace ember::nn
