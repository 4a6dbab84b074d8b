// Fake GPU algorithms for the AlgoCache's CUDA suites (tests/cuda/test_algo_cache_cuda.cpp and
// test_algo_adaptive_cuda.cpp): a FakeGpuOp registers, on an op of its own, "slow" (clears the
// whole output 20 times; the heuristic's pick) and "fast" (clears 256 bytes, asks for 1 MiB of
// workspace), so that a benchmark shows in the choice and in the runs counted.
#pragma once
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "ember/dispatch/algo_cache.h"
#include "ember/ember.h"
#include "ember/tensor/runtime/cuda_check.h"

namespace ember::testing {

using namespace ember::dispatch;

// Clears bytes of `out` (a uint8 CUDA tensor) on the current stream: the fakes' "work".
struct MemsetProblem {
  Tensor out;
  Device device() const { return out.device(); }
  MemsetProblem with_scratch_outputs() const {
    MemsetProblem s = *this;
    s.out = empty_like(out);
    return s;
  }
};

inline void clear_async(const Tensor& t, size_t bytes) {
  auto stream = static_cast<cudaStream_t>(current_stream(t.device()).handle);
  EMBER_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, bytes, stream));
}

struct FakeGpuOp {
  std::string name;
  std::vector<ScopedAlgorithmRegistration> regs;
  std::shared_ptr<std::atomic<int>> runs = std::make_shared<std::atomic<int>>(0);

  FakeGpuOp() {
    static int n = 0;
    name = "fake_gpu_op_" + std::to_string(n++);
    Algorithm<MemsetProblem> slow;
    slow.name = "slow";
    slow.heuristic_cost = [](const MemsetProblem&) { return 1.0; };
    auto runs_slow = runs;
    slow.run = [runs_slow](const MemsetProblem& p, void*) {
      for (int i = 0; i < 20; ++i) clear_async(p.out, size_t(p.out.numel()));
      ++*runs_slow;
    };
    Algorithm<MemsetProblem> fast;
    fast.name = "fast";
    fast.heuristic_cost = [](const MemsetProblem&) { return 2.0; };
    fast.workspace_bytes = [](const MemsetProblem&) { return size_t(1) << 20; };
    auto runs_fast = runs;
    fast.run = [runs_fast](const MemsetProblem& p, void* workspace) {
      REQUIRE(workspace != nullptr);
      clear_async(p.out, 256);
      ++*runs_fast;
    };
    regs.emplace_back(
        register_algorithm<MemsetProblem>(name, Direction::forward, DeviceType::CUDA, slow));
    regs.emplace_back(
        register_algorithm<MemsetProblem>(name, Direction::forward, DeviceType::CUDA, fast));
  }
  AlgoSlot& slot() const { return algo_slot(op_id(name), Direction::forward, DeviceType::CUDA); }
  AlgoKey key(const MemsetProblem& p) const {
    AlgoKey k = make_algo_key(op_id(name), Direction::forward, p.device());
    k.describe(AlgoKey::Operand::output, p.out);
    return k;
  }
  std::string choose(AlgoCache& cache, const MemsetProblem& p) const {
    return cache.choose(slot(), key(p), p).name;
  }
};

// A problem whose output is `bytes` bytes of 7s on the first GPU.
inline MemsetProblem make_memset_problem(int64_t bytes) {
  return {full({bytes}, 7, TensorOptions(DType::u8).with_device(Device::cuda()))};
}

}  // namespace ember::testing
