// The CPU thread pool behind parallel_for: set_num_threads - 1 persistent workers that sleep on a
// condition variable between loops, woken per loop with a generation counter, taking chunks from an
// atomic counter beside the calling thread. One loop runs at a time; a caller that finds the pool
// busy runs its loop inline rather than waiting. Workers start lazily on the first loop that needs
// them and are replaced when the count changes.
#include "ember/tensor/parallel.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "ember/tensor/error.h"

namespace ember {
namespace {

thread_local bool t_in_parallel_region = false;

int hardware_threads() { return std::max(1, int(std::thread::hardware_concurrency())); }

// EMBER_NUM_THREADS when it is a positive integer; otherwise the hardware's threads (a malformed
// value is reported once on stderr rather than thrown from static initialization).
int default_threads() {
  const char* env = std::getenv("EMBER_NUM_THREADS");
  if (env == nullptr || *env == '\0') return hardware_threads();
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (*end != '\0' || n < 1 || n > 4096) {
    std::fprintf(stderr,
                 "ember: EMBER_NUM_THREADS=%s is not a thread count (a positive integer); using "
                 "%d threads\n",
                 env, hardware_threads());
    return hardware_threads();
  }
  return int(n);
}

// One loop's work as the pool sees it: chunk c of `chunks` equal parts of [begin, end), handed to
// the caller's type-erased body.
struct ChunkBody {
  int64_t begin, n;
  int chunks;
  detail::ChunkFn fn;
  const void* ctx;
  void run(int c) const { fn(ctx, begin + n * c / chunks, begin + n * (c + 1) / chunks); }
};

class Pool {
 public:
  static Pool& instance() {
    // Never destroyed: workers may still sleep on its members while the process exits.
    static Pool* pool = new Pool;
    return *pool;
  }

  int threads() const { return threads_.load(std::memory_order_relaxed); }

  void set_threads(int n) {
    std::lock_guard<std::mutex> run(run_mutex_);  // waits for a loop in flight
    if (n == threads()) return;
    stop_workers();
    threads_.store(n, std::memory_order_relaxed);
  }

  // Runs body(c) for c in [0, chunks) on the workers and the calling thread. Returns false without
  // running anything when another thread's loop holds the pool.
  bool try_run(int chunks, const ChunkBody& body) {
    std::unique_lock<std::mutex> run(run_mutex_, std::try_to_lock);
    if (!run.owns_lock()) return false;
    start_workers();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      body_ = &body;
      chunks_ = chunks;
      next_.store(0, std::memory_order_relaxed);
      pending_ = int(workers_.size());
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    take_chunks();
    std::exception_ptr error;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [&] { return pending_ == 0; });
      body_ = nullptr;
      error = error_;
    }
    if (error) std::rethrow_exception(error);
    return true;
  }

  // In a child after fork() the workers do not exist: forget them without joining.
  void forget_workers_after_fork() {
    auto* orphans = new std::vector<std::thread>(std::move(workers_));  // never destroyed
    (void)orphans;
    workers_.clear();
    stop_ = false;
    pending_ = 0;
    body_ = nullptr;
  }

 private:
  Pool() : threads_(default_threads()) {
    pthread_atfork(nullptr, nullptr, [] { Pool::instance().forget_workers_after_fork(); });
  }

  void start_workers() {
    const int wanted = threads() - 1;
    if (int(workers_.size()) == wanted) return;
    for (int i = int(workers_.size()); i < wanted; ++i) {
      try {
        workers_.emplace_back([this, seen = generation_] { work(seen); });
      } catch (const std::system_error&) {
        break;  // the system refused a thread: the loop runs on fewer
      }
    }
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    stop_ = false;
  }

  void work(uint64_t seen) {
    t_in_parallel_region = true;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      take_chunks();
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  // Runs chunks until none is left; the first exception is kept for the caller.
  void take_chunks() {
    const bool was_inside = t_in_parallel_region;
    t_in_parallel_region = true;
    for (;;) {
      const int c = next_.fetch_add(1, std::memory_order_relaxed);
      if (c >= chunks_) break;
      try {
        body_->run(c);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
    }
    t_in_parallel_region = was_inside;
  }

  std::atomic<int> threads_;
  std::mutex run_mutex_;  // held by the thread whose loop runs, and by set_threads
  std::mutex mutex_;      // guards the loop's fields below
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  const ChunkBody* body_ = nullptr;
  int chunks_ = 0;
  std::atomic<int> next_{0};
  int pending_ = 0;
  std::exception_ptr error_;
};

}  // namespace

void set_num_threads(int n) {
  EMBER_CHECK(n >= 1, "set_num_threads: got ", n,
              "; the thread count must be at least 1 (1 runs every CPU kernel on the calling "
              "thread)");
  Pool::instance().set_threads(n);
}

int get_num_threads() { return Pool::instance().threads(); }

bool in_parallel_region() { return t_in_parallel_region; }

InlineParallelScope::InlineParallelScope() : previous_(t_in_parallel_region) {
  t_in_parallel_region = true;
}
InlineParallelScope::~InlineParallelScope() { t_in_parallel_region = previous_; }

void detail::parallel_for_chunks(int64_t begin, int64_t end, int64_t grain, ChunkFn fn,
                                 const void* ctx) {
  if (end <= begin) return;
  if (grain < 1) grain = 1;
  const int64_t n = end - begin;
  Pool& pool = Pool::instance();
  const int threads = pool.threads();
  const int chunks = n <= grain || t_in_parallel_region
                         ? 1
                         : int(std::min<int64_t>(threads, (n + grain - 1) / grain));
  if (chunks <= 1 || !pool.try_run(chunks, ChunkBody{begin, n, chunks, fn, ctx}))
    fn(ctx, begin, end);
}

}  // namespace ember
