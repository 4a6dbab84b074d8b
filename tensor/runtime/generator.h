// Random numbers: a counter-based Philox4x32-10 generator (seed, offset) per device. CUDA kernels
// use cuRAND's device Philox; the CPU replicates it bit for bit, so one seed gives the same numbers
// on both (see random_kernel in kernel_interface/ for how elements map to Philox subsequences).
// For CUDA graphs the offset can live on the device: between capture_begin and capture_end every
// draw reads a device base offset plus a host-known increment; before each replay, begin_replay
// sets the base to the host offset and advances the host offset by the replay's increment, so a
// replayed step draws exactly the numbers the same step run eagerly would (and the next one new).
#pragma once
#include <cstdint>
#include <mutex>

#include "ember/tensor/device.h"

namespace ember {

// Where a kernel draws from: Philox (seed, offset), the offset counted in 32-bit values as
// curand_init's `offset`; inside a CUDA graph capture the kernel adds the device value at
// `device_offset` (set before each replay) to `offset`.
struct PhiloxState {
  uint64_t seed = 0;
  uint64_t offset = 0;
  const uint64_t* device_offset = nullptr;
};

inline constexpr uint64_t kDefaultSeed = 67280421310721ull;

class Generator {
 public:
  explicit Generator(Device device, uint64_t seed = kDefaultSeed);
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;
  void manual_seed(uint64_t seed);  // also resets the offset to 0
  uint64_t seed() const;
  uint64_t offset() const;  // host offset (excludes draws made inside a captured region)
  void set_offset(uint64_t offset);
  Device device() const { return device_; }

  // Reserves `increment` 32-bit values per subsequence and returns the state a kernel draws with.
  PhiloxState reserve(uint64_t increment = 4);

  // CUDA only. See the file comment.
  void capture_begin();
  uint64_t capture_end();  // returns the increment one replay consumes
  // Before replaying a graph whose capture consumed `increment`: enqueues (on the current stream,
  // which must not be capturing) the setting of the device base to the host offset, then advances
  // the host offset past the numbers the replay draws. No-op for increment 0.
  void begin_replay(uint64_t increment);
  bool capturing() const { return capturing_; }

 private:
  mutable std::mutex mutex_;
  Device device_;
  uint64_t seed_;
  uint64_t offset_ = 0;
  bool capturing_ = false;
  uint64_t capture_increment_ = 0;
  uint64_t* device_offset_ =
      nullptr;  // device memory, made at the first eager draw or capture_begin
};

Generator& default_generator(Device device);
// Seeds the default generators of the CPU and of every GPU.
void manual_seed(uint64_t seed);

}  // namespace ember
