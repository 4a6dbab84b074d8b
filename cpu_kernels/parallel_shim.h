// Temporary stand-in for ember/tensor/parallel.h (the thread pool, not yet on this branch): the
// same functions, one thread, so that the GEMM entry compiles against the pool's interface.
#pragma once
#include <cstdint>
#include <functional>

namespace ember {
inline int& shim_thread_count() {
  static int n = 1;
  return n;
}
inline void set_num_threads(int n) { shim_thread_count() = n < 1 ? 1 : n; }
inline int get_num_threads() { return shim_thread_count(); }
inline bool in_parallel_region() { return false; }
inline void parallel_for(int64_t begin, int64_t end, int64_t /*grain*/,
                         const std::function<void(int64_t, int64_t)>& f) {
  if (begin < end) f(begin, end);
}
}  // namespace ember
