// The AlgoCache's adaptive mode on a GPU (issue 32): nothing is timed while a CUDA graph is
// captured (a new key takes a class-mate's choice or the heuristic's, a pending entry keeps its
// choice, even right after tune_pending()), and the entries are timed at their next lookup after
// the capture; the same for real convolutions captured by nn::GraphedStep in adaptive mode, whose
// steps still equal eager ones.
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "ember/dispatch/algo_cache.h"
#include "ember/ember.h"
#include "ember/nn/graphed_step.h"
#include "ember/ops/conv.h"
#include "ember/tensor/runtime/cuda_check.h"
#include "support/algo_cache_gpu_fakes.h"

using namespace ember;
using namespace ember::dispatch;
using ember::testing::FakeGpuOp;
using ember::testing::make_memset_problem;
using ember::testing::MemsetProblem;

namespace {

// Adaptive mode whose steady pool refills only at tune_pending().
AlgoSettings adaptive_settings(double initial_budget_ms) {
  AlgoSettings s;
  s.mode = AlgoMode::adaptive;
  s.adaptive.initial_budget_ms = initial_budget_ms;
  s.adaptive.step_budget_ms = 1e6;
  s.adaptive.timing_share = 0;
  return s;
}

}  // namespace

TEST_CASE("adaptive mode (CUDA): nothing is timed during a capture; timed after it" *
          doctest::skip(!cuda::is_available())) {
  FakeGpuOp op;
  AlgoCache cache;
  Device dev = Device::cuda();
  Stream s = new_stream(dev);
  StreamGuard sg(s);
  AlgoSettingsGuard mode(adaptive_settings(1e6));
  const MemsetProblem timed = make_memset_problem(1 << 20),
                      mate = make_memset_problem((1 << 20) - 4096),
                      other = make_memset_problem(1 << 22);

  CHECK(op.choose(cache, timed) == "fast");  // eager: timed
  CHECK(cache.stats().benchmarks == 1);
  const AlgoCacheStats before = cache.stats();
  const int runs_before = *op.runs;

  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamBeginCapture(cudaStream_t(s.handle), cudaStreamCaptureModeThreadLocal) ==
          cudaSuccess);
  const bool capturing = current_stream_is_capturing(dev);
  const std::string borrowed = op.choose(cache, mate);    // a class-mate was timed: borrowed
  const std::string heuristic = op.choose(cache, other);  // no class-mate: the heuristic
  cache.tune_pending();  // a step boundary inside the capture changes nothing
  const std::string kept = op.choose(cache, other);
  REQUIRE(cudaStreamEndCapture(cudaStream_t(s.handle), &graph) == cudaSuccess);
  cudaGraphDestroy(graph);

  CHECK(capturing);
  CHECK(borrowed == "fast");
  CHECK(heuristic == "slow");
  CHECK(kept == "slow");
  AlgoCacheStats st = cache.stats();
  CHECK(st.benchmarks == before.benchmarks);
  CHECK(st.candidates_timed == before.candidates_timed);
  CHECK(st.capture_fallbacks >= before.capture_fallbacks + 3);
  CHECK(*op.runs == runs_before);  // no algorithm ran
  CHECK(cache.peek(op.slot(), op.key(mate))->source == ChoiceSource::borrowed);
  CHECK(cache.peek(op.slot(), op.key(other))->source == ChoiceSource::heuristic);

  // After the capture both entries are timed at their next lookup (tune_pending granted budget).
  CHECK(op.choose(cache, other) == "fast");
  CHECK(op.choose(cache, mate) == "fast");
  CHECK(cache.stats().benchmarks == before.benchmarks + 2);
  CHECK(cache.stats().retimed == 2);
  CHECK(cache.peek(op.slot(), op.key(other))->source == ChoiceSource::benchmark);
}

TEST_CASE("adaptive mode (CUDA): GraphedStep captures convolutions without timing" *
          doctest::skip(!cuda::is_available())) {
  Device dev = Device::cuda();
  algo_cache().clear();
  // No warm-up pool: every key is decided by the heuristic and waits for a step boundary.
  AlgoSettingsGuard mode(adaptive_settings(0));
  Generator gen(Device::cpu(), 3);
  auto make_weight = [&] {
    Tensor w = (randn({8, 4, 3, 3}, TensorOptions(), &gen) * 0.2).to(dev).detach();
    w.set_requires_grad(true);
    return w;
  };
  Tensor w_graphed = make_weight();
  Tensor w_eager = w_graphed.detach().clone().set_requires_grad(true);
  auto step_of = [](Tensor& w) {
    return [&w](const std::vector<Tensor>& in) -> std::vector<Tensor> {
      Conv2dParams p;
      p.padding = {1, 1};
      Tensor loss = mean(square(conv2d(in[0], w, {}, p)));
      loss.backward();
      autograd::NoGradGuard ng;
      sub_(w, w.grad(), 0.1);
      w.mutable_grad().zero_();
      return {loss};
    };
  };
  nn::GraphedStep graphed(step_of(w_graphed));
  auto eager = step_of(w_eager);
  Tensor x = randn({2, 4, 12, 12}, TensorOptions(), &gen).to(dev);

  for (int i = 0; i < 3; ++i) {  // GraphedStep's eager warm-up steps
    graphed({x});
    eager({x});
  }
  algo_cache().tune_pending();  // the untimed entries would be timed at their next lookup...
  const AlgoCacheStats before = algo_cache().stats();
  double lg = graphed({x})[0].item();  // ...but that lookup is inside the capture
  const AlgoCacheStats after = algo_cache().stats();
  CHECK(graphed.stats().captures == 1);
  CHECK(graphed.stats().fallbacks == 0);
  CHECK(after.benchmarks == before.benchmarks);
  CHECK(after.candidates_timed == before.candidates_timed);
  CHECK(after.capture_fallbacks > before.capture_fallbacks);

  double le = eager({x})[0].item();  // eager, after the capture: the pending keys are timed now
  CHECK(algo_cache().stats().benchmarks > before.benchmarks);
  CHECK(lg == doctest::Approx(le).epsilon(1e-2));  // other algorithms, TF32: close, not equal
  for (int i = 0; i < 3; ++i)
    CHECK(graphed({x})[0].item() == doctest::Approx(eager({x})[0].item()).epsilon(1e-2));
  algo_cache().clear();
}
