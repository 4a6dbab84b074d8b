// The CPU backend's one thread pool and its loops: set_num_threads / get_num_threads (default
// EMBER_NUM_THREADS, else the hardware's threads), parallel_for over an index range cut into
// chunks, and parallel_reduce, whose chunking depends only on the grain so that its result is
// bitwise the same for any thread count. Small ranges (at most `grain` items), nested calls and
// threads inside an InlineParallelScope (the data loader's workers) run inline on the calling
// thread: one pool, never more busy threads than set_num_threads allows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ember {

// Sets how many threads CPU kernels use (the calling thread counts as one). n must be >= 1.
void set_num_threads(int n);
// The current count: set_num_threads's value, else EMBER_NUM_THREADS, else the hardware's.
int get_num_threads();
// True inside a parallel_for body or an InlineParallelScope: parallel loops run inline there.
bool in_parallel_region();

// While alive, parallel loops started on this thread run inline on it. Threads that already work
// in parallel with others (a data loader's workers) hold one, so they never wait on or crowd the
// pool.
class InlineParallelScope {
 public:
  InlineParallelScope();
  ~InlineParallelScope();
  InlineParallelScope(const InlineParallelScope&) = delete;
  InlineParallelScope& operator=(const InlineParallelScope&) = delete;

 private:
  bool previous_;
};

// Calls f(lo, hi) over disjoint chunks covering [begin, end), at most one chunk per thread and
// each of at least `grain` items (grain >= 1). Runs f(begin, end) inline when the range has at
// most `grain` items, one thread is set, the pool is busy with another caller's loop, or the
// caller is inside a parallel region. The first exception thrown by a chunk is rethrown here
// after every chunk has finished.
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f);

namespace detail {
// parallel_for's loop over a type-erased, non-owning body: fn(ctx, lo, hi). No allocation per
// call (a std::function holding a lambda with several captures would allocate).
using ChunkFn = void (*)(const void* ctx, int64_t lo, int64_t hi);
void parallel_for_chunks(int64_t begin, int64_t end, int64_t grain, ChunkFn fn, const void* ctx);
}  // namespace detail

template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  detail::parallel_for_chunks(
      begin, end, grain,
      [](const void* ctx, int64_t lo, int64_t hi) { (*static_cast<const F*>(ctx))(lo, hi); }, &f);
}

// Reduces [begin, end) cut into fixed chunks of `grain` items: each chunk by f(lo, hi) -> T,
// then the partials left to right with combine(T, T) -> T, starting from identity. The chunks do
// not depend on the thread count, so neither does the result (bitwise).
template <typename T, typename F, typename C>
T parallel_reduce(int64_t begin, int64_t end, int64_t grain, T identity, const F& f,
                  const C& combine) {
  if (end <= begin) return identity;
  if (grain < 1) grain = 1;
  const int64_t chunks = (end - begin + grain - 1) / grain;
  if (chunks == 1) return combine(identity, f(begin, end));
  std::vector<T> partial(size_t(chunks), identity);
  parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t lo = begin + c * grain;
      const int64_t hi = lo + grain < end ? lo + grain : end;
      partial[size_t(c)] = f(lo, hi);
    }
  });
  T total = identity;
  for (const T& p : partial) total = combine(total, p);
  return total;
}

}  // namespace ember
