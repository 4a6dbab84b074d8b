// The algorithm registry: for ops with several implementations (conv forward / backward-data /
// backward-filter, LSTM, softmax variants...), every implementation registers itself, beside its
// kernel, as an Algorithm<Problem> in the slot of (op, direction, device type). The AlgoCache
// (dispatch/algo_cache.h) chooses among a slot's algorithms; nothing here knows any op.
//
// A Problem is the op's own description of one call (tensors and parameters). It must provide
//   Device device() const;                 where it runs (timing method, capture check, workspace)
//   Problem with_scratch_outputs() const;  the same inputs writing into freshly allocated outputs,
//                                          so benchmarking never touches the caller's outputs
// Every decision an algorithm makes in applies()/workspace_bytes() must depend only on what the
// op puts in the AlgoKey (sizes, layouts, dtypes, parameters, alignment): choices are cached by
// the key alone.
#pragma once
#include <array>
#include <atomic>
#include <concepts>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

#include "ember/dispatch/algo_key.h"
#include "ember/dispatch/registry.h"

namespace ember::dispatch {

template <typename P>
concept AlgoProblem = requires(const P& p) {
  { p.device() } -> std::convertible_to<Device>;
  { p.with_scratch_outputs() } -> std::convertible_to<P>;
};

template <typename Problem>
struct Algorithm {
  std::string name;           // user-visible: logs, forced mode, saved cache files
  bool deterministic = true;  // bitwise identical results run to run (no atomics, fixed order)
  // Whether it can run this problem; null means always.
  std::function<bool(const Problem&)> applies;
  // Scratch memory it needs; null means none. A slot must have a zero-workspace algorithm for
  // every problem (the fallback under a workspace limit of 0 or when workspace allocation fails).
  std::function<size_t(const Problem&)> workspace_bytes;
  // The heuristic's estimate (arbitrary units, lower is better); null ranks by registration order
  // after every algorithm that gives an estimate.
  std::function<double(const Problem&)> heuristic_cost;
  // Computes the problem; `workspace` holds workspace_bytes(problem) bytes (null when 0).
  // Runs on the current stream of problem.device() and never synchronizes the host.
  std::function<void(const Problem&, void* workspace)> run;
};

// The algorithms of one (op, direction, device type). Registration appends under a mutex; readers
// never lock: entries are written before the count that publishes them, and never move. An
// unregistered algorithm is disabled rather than removed, so a concurrent reader stays valid.
class AlgoSlot {
 public:
  static constexpr int kMaxAlgorithms = 32;

  AlgoSlot(OpId op, Direction direction, DeviceType device_type, int index);
  AlgoSlot(const AlgoSlot&) = delete;
  AlgoSlot& operator=(const AlgoSlot&) = delete;

  OpId op() const { return op_; }
  Direction direction() const { return direction_; }
  DeviceType device_type() const { return device_type_; }
  // Dense index of this slot among all slots (the cache keeps per-slot state in arrays).
  int index() const { return index_; }
  // "conv2d.forward": the name forced-mode settings and logs use.
  const std::string& name() const { return name_; }

  // Registered algorithms, enabled or not: indices are [0, size()).
  int size() const { return count_.load(std::memory_order_acquire); }
  bool enabled(int i) const { return entries_[i].enabled.load(std::memory_order_acquire); }
  const std::string& algorithm_name(int i) const { return entries_[i].name; }
  bool algorithm_deterministic(int i) const { return entries_[i].deterministic; }
  // The enabled algorithm called `name`, or -1.
  int find(std::string_view name) const;
  // Names of the enabled algorithms, in registration order (for error messages and tests).
  std::vector<std::string> names() const;

  template <typename Problem>
  const Algorithm<Problem>& get(int i) const {
    check_problem_type(typeid(Problem));
    return *static_cast<const Algorithm<Problem>*>(entries_[i].algorithm);
  }
  // The Algorithm<Problem> at i, type-erased (the cache's code is shared by every Problem).
  const void* algorithm_ptr(int i) const { return entries_[i].algorithm; }
  // Throws internal when algorithms of another Problem type were registered here.
  void check_problem_type(const std::type_info& t) const {
    if (problem_type_.load(std::memory_order_acquire) != &t) [[unlikely]]
      check_problem_type_slow(t);
  }

  // Registration (use register_algorithm below). Returns the index; throws bad_param for a
  // duplicate enabled name, a missing run function or a full slot.
  int add(const void* algorithm, const std::type_info& problem_type, std::string name,
          bool deterministic, bool has_run);
  void disable(int i);

 private:
  struct Entry {
    const void* algorithm = nullptr;  // an Algorithm<Problem>, owned (leaked) by the registry
    std::string name;
    bool deterministic = true;
    std::atomic<bool> enabled{false};
  };
  OpId op_;
  Direction direction_;
  DeviceType device_type_;
  int index_;
  std::string name_;
  void check_problem_type_slow(const std::type_info& t) const;
  std::atomic<const std::type_info*> problem_type_{nullptr};
  std::mutex register_mutex_;
  std::atomic<int> count_{0};
  std::array<Entry, kMaxAlgorithms> entries_;
};

inline constexpr int kMaxAlgoSlots = kMaxAlgoOps * kNumDirections * kNumDeviceTypes;

// The slot of (op, direction, device type), created on first use. Lock-free after creation.
AlgoSlot& algo_slot(OpId op, Direction direction, DeviceType device_type);
// Every slot created so far (for introspection, persistence and tests).
std::vector<AlgoSlot*> algo_slots();

// Identifies one registration, to undo it (tests, plugins).
struct AlgorithmHandle {
  AlgoSlot* slot = nullptr;
  int index = -1;
};

template <typename Problem>
AlgorithmHandle register_algorithm(OpId op, Direction direction, DeviceType device_type,
                                   Algorithm<Problem> algorithm) {
  static_assert(AlgoProblem<Problem>,
                "a Problem needs device() and with_scratch_outputs() (see dispatch/algorithm.h)");
  AlgoSlot& slot = algo_slot(op, direction, device_type);
  // Owned here until the slot has taken it (add throws for a duplicate name or a full slot), then
  // leaked on purpose: a registration lives as long as the process (static destructors and the
  // exit-time cache save may still consult it).
  auto stored = std::make_unique<Algorithm<Problem>>(std::move(algorithm));
  int index = slot.add(stored.get(), typeid(Problem), stored->name, stored->deterministic,
                       bool(stored->run));
  (void)stored.release();  // now the slot's
  return {&slot, index};
}
template <typename Problem>
AlgorithmHandle register_algorithm(std::string_view op, Direction direction, DeviceType device_type,
                                   Algorithm<Problem> algorithm) {
  return register_algorithm<Problem>(op_id(op), direction, device_type, std::move(algorithm));
}
// Disables the algorithm: the cache stops choosing it (cached choices of it are re-made).
void unregister_algorithm(const AlgorithmHandle& handle);

// RAII registration for a scope (tests, plugins that can be unloaded).
class ScopedAlgorithmRegistration {
 public:
  ScopedAlgorithmRegistration() = default;
  explicit ScopedAlgorithmRegistration(AlgorithmHandle h) : handle_(h) {}
  ~ScopedAlgorithmRegistration() {
    if (handle_.slot) unregister_algorithm(handle_);
  }
  ScopedAlgorithmRegistration(ScopedAlgorithmRegistration&& o) noexcept
      : handle_(std::exchange(o.handle_, AlgorithmHandle{})) {}
  ScopedAlgorithmRegistration& operator=(ScopedAlgorithmRegistration&& o) noexcept {
    if (this != &o) {
      if (handle_.slot) unregister_algorithm(handle_);
      handle_ = std::exchange(o.handle_, AlgorithmHandle{});
    }
    return *this;
  }
  const AlgorithmHandle& handle() const { return handle_; }

 private:
  AlgorithmHandle handle_;
};

}  // namespace ember::dispatch

// Beside a kernel, at namespace scope: registers an Algorithm<Problem> at library load, e.g.
//   EMBER_REGISTER_ALGORITHM(ConvProblem, "conv2d", forward, CPU, make_direct_forward());
#define EMBER_REGISTER_ALGORITHM(Problem, op_name, direction, device_type, algorithm)         \
  static const ::ember::dispatch::AlgorithmHandle EMBER_CONCAT(ember_algorithm_, __LINE__) =  \
      ::ember::dispatch::register_algorithm<Problem>(op_name,                                 \
                                                     ::ember::dispatch::Direction::direction, \
                                                     ::ember::DeviceType::device_type, algorithm)
