// The op path never synchronizes the host or calls cudaMalloc: a forward and backward of a small
// model, captured into a CUDA graph on the current stream (allocations from a private pool),
// replays and gives the eager results.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include "ember.h"

using namespace ember;

TEST_CASE("forward + backward + SGD update can be captured as a CUDA graph" *
          doctest::skip(!cuda::is_available())) {
  Device dev = Device::cuda();
  Stream s = new_stream(dev);
  StreamGuard sg(s);
  auto opts = TensorOptions().with_device(dev);
  manual_seed(3);
  Tensor x = randn({64, 16}, opts), w = (randn({8, 16}, opts) * 0.1).detach().set_requires_grad(true);
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
  cuda::MemPoolId pool = cuda::new_mem_pool_id();
  cudaGraph_t graph = nullptr;
  Tensor captured_loss;
  {
    cuda::MemPoolScope scope(dev.index, pool);
    REQUIRE(cudaStreamBeginCapture(cudaStream_t(s.handle), cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    captured_loss = step();
    REQUIRE(cudaStreamEndCapture(cudaStream_t(s.handle), &graph) == cudaSuccess);
  }
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, cudaStream_t(s.handle)) == cudaSuccess);
  s.synchronize();
  double l1 = captured_loss.item();
  REQUIRE(cudaGraphLaunch(exec, cudaStream_t(s.handle)) == cudaSuccess);
  s.synchronize();
  double l2 = captured_loss.item();
  CHECK(l2 < l1);  // each replay is a real training step
  CHECK(max_abs_diff(w.detach(), w_before) > 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST_CASE("layer_norm forward + backward captured as a CUDA graph replays the eager gradients" *
          doctest::skip(!cuda::is_available())) {
  // The layer-norm backward sums its parameter gradients in per-block partials (a workspace from
  // the caching allocator, launch shapes from an occupancy query): all of it must record into a
  // graph, and a replay must give what the eager step gave, bit for bit.
  Device dev = Device::cuda();
  Stream s = new_stream(dev);
  StreamGuard sg(s);
  auto opts = TensorOptions().with_device(dev);
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
  const Tensor eager_dx = x.grad().clone(), eager_dg = g.grad().clone(), eager_db = b.grad().clone();
  cuda::MemPoolId pool = cuda::new_mem_pool_id();
  cudaGraph_t graph = nullptr;
  {
    cuda::MemPoolScope scope(dev.index, pool);
    REQUIRE(cudaStreamBeginCapture(cudaStream_t(s.handle), cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    step();
    REQUIRE(cudaStreamEndCapture(cudaStream_t(s.handle), &graph) == cudaSuccess);
  }
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, cudaStream_t(s.handle)) == cudaSuccess);
  s.synchronize();
  CHECK(max_abs_diff(x.grad(), eager_dx) == 0);
  CHECK(max_abs_diff(g.grad(), eager_dg) == 0);
  CHECK(max_abs_diff(b.grad(), eager_db) == 0);
  CHECK(max_abs_diff(g.grad(), zeros_like(g)) > 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}
