// The op path never synchronizes the host or calls cudaMalloc: training steps (a small model with
// an SGD update; a layer norm) captured into CUDA graphs on a fresh stream (allocations from a
// private pool) replay and give the eager results.
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include "ember/ember.h"

using namespace ember;

namespace {

// `record()` captured on stream s into a CUDA graph (its allocations from a private pool) and
// instantiated; launch() replays it on s.
struct CapturedGraph {
  cudaStream_t stream;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;

  template <typename Record>
  CapturedGraph(Stream& s, Device dev, Record record) : stream(cudaStream_t(s.handle)) {
    cuda::MemPoolScope scope(dev.index, cuda::new_mem_pool_id());
    REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    record();
    REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  }
  ~CapturedGraph() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
  void launch() { REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess); }
};

// The GPU, a fresh stream made current, and options for tensors on that GPU.
struct OnFreshStream {
  Device dev = Device::cuda();
  Stream s = new_stream(dev);
  StreamGuard guard{s};
  TensorOptions opts = TensorOptions().with_device(dev);
};

}  // namespace

TEST_CASE_FIXTURE(OnFreshStream, "forward + backward + SGD update can be captured as a CUDA graph" *
                                     doctest::skip(!cuda::is_available())) {
  manual_seed(3);
  Tensor x = randn({64, 16}, opts),
         w = (randn({8, 16}, opts) * 0.1).detach().set_requires_grad(true);
  Tensor b = zeros({8}, opts).set_requires_grad(true);
  Tensor target = randn({64, 8}, opts);
  auto step = [&] {
    Tensor y = tanh(linear(x, w, b));
    Tensor loss = mean(square(y - target));
    loss.backward();
    autograd::NoGradGuard ng;
    sub_(w, w.grad(), 0.1);
    sub_(b, b.grad(), 0.1);
    w.mutable_grad().zero_();
    b.mutable_grad().zero_();
    return loss;
  };
  // Warm up eagerly (creates .grad buffers, cuBLAS handle and workspace).
  step();
  step();
  s.synchronize();
  Tensor w_before = w.detach().clone();
  Tensor captured_loss;
  CapturedGraph graph(s, dev, [&] { captured_loss = step(); });
  graph.launch();
  s.synchronize();
  double l1 = captured_loss.item();
  graph.launch();
  s.synchronize();
  double l2 = captured_loss.item();
  CHECK(l2 < l1);  // each replay is a real training step
  CHECK(max_abs_diff(w.detach(), w_before) > 0);
}

TEST_CASE_FIXTURE(
    OnFreshStream,
    "layer_norm forward + backward captured as a CUDA graph replays the eager gradients" *
        doctest::skip(!cuda::is_available())) {
  // The layer-norm backward sums its parameter gradients in per-block partials (a workspace from
  // the caching allocator, launch shapes from an occupancy query): all of it must record into a
  // graph, and a replay must give what the eager step gave, bit for bit.
  manual_seed(5);
  const int64_t rows = 300, D = 256;
  Tensor x = randn({rows, D}, opts).set_requires_grad(true);
  Tensor g = (ones({D}, opts) + randn({D}, opts) * 0.1).detach().set_requires_grad(true);
  Tensor b = (randn({D}, opts) * 0.1).detach().set_requires_grad(true);
  Tensor target = randn({rows, D}, opts);
  auto step = [&] {
    for (Tensor* t : {&x, &g, &b})
      if (t->grad().defined()) t->mutable_grad().zero_();
    Tensor loss = mean(square(layer_norm(x, {D}, g, b) - target));
    loss.backward();
  };
  step();
  s.synchronize();
  const Tensor eager_dx = x.grad().clone(), eager_dg = g.grad().clone(),
               eager_db = b.grad().clone();
  CapturedGraph graph(s, dev, step);
  graph.launch();
  s.synchronize();
  CHECK(max_abs_diff(x.grad(), eager_dx) == 0);
  CHECK(max_abs_diff(g.grad(), eager_dg) == 0);
  CHECK(max_abs_diff(b.grad(), eager_db) == 0);
  CHECK(max_abs_diff(g.grad(), zeros_like(g)) > 0);
}
