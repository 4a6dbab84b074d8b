// Fake algorithms for the AlgoCache suites (tests/cpu/test_algo_cache.cpp and
// test_algo_cache_storage.cpp): a FakeOp registers, on an op of its own, algorithms whose cost,
// speed, workspace, determinism and applicability each test sets, through the public API.
#pragma once
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ember/dispatch/algo_cache.h"
#include "ember/ember.h"

namespace ember::testing {

using namespace ember::dispatch;

// A problem of one size writing one int; the int says which algorithm wrote it.
struct FakeProblem {
  int64_t size = 1;
  std::shared_ptr<std::vector<int>> out = std::make_shared<std::vector<int>>(1, -1);
  Device device() const { return Device::cpu(); }
  FakeProblem with_scratch_outputs() const {
    FakeProblem s = *this;
    s.out = std::make_shared<std::vector<int>>(out->size(), -1);
    return s;
  }
};

struct FakeAlgorithm {
  std::string name;
  std::optional<double> cost{};  // heuristic_cost; none: rank by registration order
  bool deterministic = true;
  size_t workspace = 0;
  int64_t max_size = std::numeric_limits<int64_t>::max();  // applies to sizes <= max_size
  std::function<int(int64_t size)> delay_us{};             // how slow it is at a size
  bool throws = false;                                     // fails like an out-of-memory
  // Counts calls of workspace_bytes (how often the cache asked for the workspace size).
  std::shared_ptr<std::atomic<int>> workspace_queries{};
};

// Every run of every fake: which algorithm, and where it wrote.
struct RunLog {
  std::mutex mutex;
  std::vector<std::pair<std::string, const void*>> runs;
  void add(const std::string& name, const void* out) {
    std::lock_guard<std::mutex> lock(mutex);
    runs.emplace_back(name, out);
  }
  size_t count(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex);
    size_t n = 0;
    for (auto& r : runs) n += r.first == name;
    return n;
  }
};

// An op of its own (fresh name per instance) with fake algorithms, unregistered on destruction.
class FakeOp {
 public:
  explicit FakeOp(std::vector<FakeAlgorithm> fakes) : name_(next_name()) {
    for (size_t i = 0; i < fakes.size(); ++i) {
      FakeAlgorithm f = fakes[i];
      Algorithm<FakeProblem> a;
      a.name = f.name;
      a.deterministic = f.deterministic;
      a.applies = [f](const FakeProblem& p) { return p.size <= f.max_size; };
      if (f.workspace)
        a.workspace_bytes = [f](const FakeProblem&) {
          if (f.workspace_queries) ++*f.workspace_queries;
          return f.workspace;
        };
      if (f.cost) a.heuristic_cost = [f](const FakeProblem&) { return *f.cost; };
      auto log = log_;
      int marker = int(i);
      a.run = [f, log, marker](const FakeProblem& p, void* workspace) {
        if (f.throws) EMBER_THROW(alloc_failed, "fake out of memory in ", f.name);
        if (f.workspace) REQUIRE(workspace != nullptr);
        if (f.delay_us) std::this_thread::sleep_for(std::chrono::microseconds(f.delay_us(p.size)));
        (*p.out)[0] = marker;
        log->add(f.name, p.out.get());
      };
      regs_.emplace_back(register_algorithm<FakeProblem>(name_, Direction::forward, DeviceType::CPU,
                                                         std::move(a)));
    }
  }
  const std::string& name() const { return name_; }
  AlgoSlot& slot() const { return algo_slot(op_id(name_), Direction::forward, DeviceType::CPU); }
  AlgoKey key(int64_t size) const {
    AlgoKey k = make_algo_key(op_id(name_), Direction::forward, Device::cpu());
    k.rank = 1;
    k.assign(k.input_sizes[0], size);
    k.assign(k.output_sizes[0], size);
    return k;
  }
  std::string choose(AlgoCache& cache, int64_t size) const {
    FakeProblem p;
    p.size = size;
    return cache.choose(slot(), key(size), p).name;
  }
  // Runs through the cache; returns the index of the algorithm that wrote the output.
  int run(AlgoCache& cache, int64_t size) const {
    FakeProblem p;
    p.size = size;
    cache.run(slot(), key(size), p);
    return (*p.out)[0];
  }
  std::optional<CachedChoice> peek(AlgoCache& cache, int64_t size) const {
    return cache.peek(slot(), key(size));
  }
  RunLog& log() { return *log_; }
  void unregister(size_t i) { regs_[i] = ScopedAlgorithmRegistration(); }

 private:
  static std::string next_name() {
    static std::atomic<int> n{0};
    return "fake_op_" + std::to_string(n++);
  }
  std::string name_;
  std::shared_ptr<RunLog> log_ = std::make_shared<RunLog>();
  std::vector<ScopedAlgorithmRegistration> regs_;
};

inline std::function<int(int64_t)> fixed_us(int us) {
  return [us](int64_t) { return us; };
}
// Slow on its first call only (a library's one-time setup), then `then_us`.
inline std::function<int(int64_t)> slow_first_call_us(int first_us, int then_us) {
  auto calls = std::make_shared<int>(0);
  return [=](int64_t) { return (*calls)++ == 0 ? first_us : then_us; };
}

}  // namespace ember::testing
