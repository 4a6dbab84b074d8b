// The algorithm registry's slots: creation on first use, lock-free reads, registration and
// disabling of algorithms.
#include "ember/dispatch/algorithm.h"

#include <sstream>

namespace ember::dispatch {

AlgoSlot::AlgoSlot(OpId op, Direction direction, DeviceType device_type, int index)
    : op_(op), direction_(direction), device_type_(device_type), index_(index) {
  name_ = op_name(op) + "." + direction_name(direction);
}

int AlgoSlot::find(std::string_view name) const {
  int n = size();
  for (int i = 0; i < n; ++i)
    if (enabled(i) && entries_[i].name == name) return i;
  return -1;
}

std::vector<std::string> AlgoSlot::names() const {
  std::vector<std::string> out;
  int n = size();
  for (int i = 0; i < n; ++i)
    if (enabled(i)) out.push_back(entries_[i].name);
  return out;
}

void AlgoSlot::check_problem_type_slow(const std::type_info& t) const {
  const std::type_info* mine = problem_type_.load(std::memory_order_acquire);
  EMBER_INTERNAL_ASSERT(mine != nullptr && (mine == &t || *mine == t), "algorithm slot ", name_,
                        " (", device_type_name(device_type_), ") holds problems of type ",
                        mine ? mine->name() : "(none registered)", ", asked for ", t.name());
}

int AlgoSlot::add(const void* algorithm, const std::type_info& problem_type, std::string name,
                  bool deterministic, bool has_run) {
  std::lock_guard<std::mutex> lock(register_mutex_);
  const char* device = device_type_name(device_type_);
  EMBER_CHECK(!name.empty(), "register_algorithm: an algorithm of ", name_, " (", device,
              ") has an empty name; give it the name users will see in logs and settings");
  EMBER_CHECK(has_run, "register_algorithm: algorithm '", name, "' of ", name_, " (", device,
              ") has no run function");
  EMBER_CHECK(find(name) < 0, "register_algorithm: ", name_, " (", device,
              ") already has an algorithm named '", name, "'; names must be unique per op");
  const std::type_info* mine = problem_type_.load(std::memory_order_acquire);
  EMBER_CHECK(mine == nullptr || *mine == problem_type, "register_algorithm: ", name_, " (", device,
              ") holds algorithms of problem type ", mine ? mine->name() : "", "; '", name,
              "' takes ", problem_type.name());
  int n = count_.load(std::memory_order_relaxed);
  EMBER_CHECK(n < kMaxAlgorithms, "register_algorithm: ", name_, " (", device, ") already has ",
              kMaxAlgorithms, " registrations (raise AlgoSlot::kMaxAlgorithms)");
  if (!mine) problem_type_.store(&problem_type, std::memory_order_release);
  Entry& e = entries_[n];
  e.algorithm = algorithm;
  e.name = std::move(name);
  e.deterministic = deterministic;
  e.enabled.store(true, std::memory_order_release);
  count_.store(n + 1, std::memory_order_release);  // publishes the entry written above
  return n;
}

void AlgoSlot::disable(int i) {
  std::lock_guard<std::mutex> lock(register_mutex_);
  EMBER_INTERNAL_ASSERT(i >= 0 && i < size(), "algorithm index ", i, " out of range for ", name_);
  entries_[i].enabled.store(false, std::memory_order_release);
}

namespace {
struct SlotTable {
  std::mutex mutex;  // creation only
  std::atomic<AlgoSlot*> slots[kMaxAlgoOps][kNumDirections][kNumDeviceTypes] = {};
  std::vector<AlgoSlot*> created;
  int next_index = 0;
};
SlotTable& slot_table() {
  static SlotTable* table = new SlotTable();  // leaked: outlives static destructors
  return *table;
}
}  // namespace

AlgoSlot& algo_slot(OpId op, Direction direction, DeviceType device_type) {
  EMBER_INTERNAL_ASSERT(
      op < kMaxAlgoOps && int(direction) < kNumDirections && int(device_type) < kNumDeviceTypes,
      "bad slot coordinates");
  SlotTable& t = slot_table();
  std::atomic<AlgoSlot*>& cell = t.slots[op][int(direction)][int(device_type)];
  if (AlgoSlot* s = cell.load(std::memory_order_acquire)) [[likely]]
    return *s;
  std::lock_guard<std::mutex> lock(t.mutex);
  if (AlgoSlot* s = cell.load(std::memory_order_acquire)) return *s;
  auto* s = new AlgoSlot(op, direction, device_type, t.next_index++);
  t.created.push_back(s);
  cell.store(s, std::memory_order_release);
  return *s;
}

std::vector<AlgoSlot*> algo_slots() {
  SlotTable& t = slot_table();
  std::lock_guard<std::mutex> lock(t.mutex);
  return t.created;
}

void unregister_algorithm(const AlgorithmHandle& handle) {
  if (!handle.slot) return;
  handle.slot->disable(handle.index);
}

}  // namespace ember::dispatch
