// The AlgoCache on a GPU: no benchmarking while the current stream is capturing a CUDA graph (the
// cached or heuristic choice is used, and the key is benchmarked after the capture), benchmarking
// with CUDA events on scratch outputs (the caller's output untouched), workspace from the CUDA
// allocator, keys / cache stamps that carry the GPU's architecture, and the benchmark hooks the
// CUDA backend registers. The algorithms are fakes registered through the public API: they differ
// only in how much memory they clear.
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <atomic>

#include "ember/dispatch/algo_cache.h"
#include "ember/dispatch/benchmark_hooks.h"
#include "ember/ember.h"
#include "ember/tensor/runtime/cuda_check.h"
#include "ember/tensor/runtime/eager_replay.h"
#include "support/algo_cache_gpu_fakes.h"

using namespace ember;
using namespace ember::dispatch;
using ember::testing::FakeGpuOp;
using ember::testing::make_memset_problem;
using ember::testing::MemsetProblem;

TEST_CASE("algo cache (CUDA): no benchmarking while the stream is capturing" *
          doctest::skip(!cuda::is_available())) {
  FakeGpuOp op;
  AlgoCache cache;
  Device dev = Device::cuda();
  MemsetProblem p = make_memset_problem(1 << 20);
  Stream s = new_stream(dev);
  StreamGuard sg(s);
  AlgoModeGuard mode(AlgoMode::benchmark);

  CHECK_FALSE(current_stream_is_capturing(dev));
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamBeginCapture(cudaStream_t(s.handle), cudaStreamCaptureModeThreadLocal) ==
          cudaSuccess);
  bool capturing = current_stream_is_capturing(dev);
  std::string during_capture = cache.choose(op.slot(), op.key(p), p).name;
  REQUIRE(cudaStreamEndCapture(cudaStream_t(s.handle), &graph) == cudaSuccess);
  cudaGraphDestroy(graph);

  CHECK(capturing);
  CHECK(during_capture == "slow");  // the heuristic: nothing was timed
  AlgoCacheStats st = cache.stats();
  CHECK(st.benchmarks == 0);
  CHECK(st.capture_fallbacks == 1);
  CHECK(*op.runs == 0);
  CHECK(cache.peek(op.slot(), op.key(p))->source == ChoiceSource::heuristic);

  // After the capture the key is benchmarked, with events on the current stream.
  CHECK(cache.choose(op.slot(), op.key(p), p).name == "fast");
  CHECK(cache.stats().benchmarks == 1);
  auto choice = cache.peek(op.slot(), op.key(p));
  REQUIRE(choice);
  CHECK(choice->source == ChoiceSource::benchmark);
  CHECK(choice->time_ms > 0);

  // A benchmarked choice is used as is during a later capture.
  REQUIRE(cudaStreamBeginCapture(cudaStream_t(s.handle), cudaStreamCaptureModeThreadLocal) ==
          cudaSuccess);
  std::string captured_again = cache.choose(op.slot(), op.key(p), p).name;
  REQUIRE(cudaStreamEndCapture(cudaStream_t(s.handle), &graph) == cudaSuccess);
  cudaGraphDestroy(graph);
  CHECK(captured_again == "fast");
  CHECK(cache.stats().benchmarks == 1);
}

TEST_CASE("algo cache (CUDA): benchmarks on scratch outputs and runs with CUDA workspace" *
          doctest::skip(!cuda::is_available())) {
  FakeGpuOp op;
  AlgoCache cache;
  MemsetProblem p = make_memset_problem(8 << 20);
  auto count_sevens = [&p] {
    Tensor host = p.out.cpu();
    const uint8_t* bytes = host.data<uint8_t>();
    int64_t n = 0;
    for (int64_t i = 0; i < host.numel(); ++i) n += bytes[i] == 7;
    return n;
  };
  AlgoModeGuard mode(AlgoMode::benchmark);
  CHECK(cache.choose(op.slot(), op.key(p), p).name == "fast");
  CHECK(*op.runs >= 4);                    // both candidates ran, warm-up included
  CHECK(count_sevens() == p.out.numel());  // timing never touched the caller's output
  cache.run(op.slot(), op.key(p), p);      // "fast", with 1 MiB of CUDA workspace
  CHECK(count_sevens() == p.out.numel() - 256);
}

TEST_CASE("algo cache (CUDA): keys and cache stamps carry the GPU architecture" *
          doctest::skip(!cuda::is_available())) {
  const cuda::DeviceProperties& props = cuda::device_properties(0);
  AlgoKey k = make_algo_key(op_id("fake_gpu_arch"), Direction::forward, Device::cuda());
  CHECK(k.cc_major == props.major);
  CHECK(k.cc_minor == props.minor);
  CHECK(k.sm_count == props.sm_count);
  CHECK(k.to_string().find("cuda cc=") != std::string::npos);
  AlgoCacheStamp stamp = current_algo_cache_stamp();
  CHECK(stamp.gpu_name == props.name);
  CHECK(stamp.cc_major == props.major);
  CHECK(stamp.cuda_runtime_version == props.runtime_version);
  CHECK(stamp.cuda_driver_version == props.driver_version);
}

TEST_CASE("algo cache (CUDA): the CUDA backend registers its benchmark hooks") {
  const BenchmarkHooks hooks = benchmark_hooks(DeviceType::CUDA);
  REQUIRE((hooks.hold_stream != nullptr));
  REQUIRE((hooks.setup_events != nullptr));
  CHECK(hooks.setup_events() == cuda::eager_replay_setup_events());
  if (!cuda::is_available()) return;
  Stream s = new_stream(Device::cuda());
  hooks.hold_stream(s, 20000.0);  // 20 ms of GPU time
  CHECK_FALSE(s.query());         // still held right after the launch
  s.synchronize();
  CHECK(s.query());
}
