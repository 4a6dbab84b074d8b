// The CPU thread pool (tensor/parallel.h): set/get_num_threads, parallel_for's coverage and
// inlining rules, exceptions from chunks, parallel_reduce's thread-count independence, and loops
// started from several user threads at once.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "ember/tensor/error.h"
#include "ember/tensor/parallel.h"

using namespace ember;

namespace {

// Restores the thread count a test changed.
struct ThreadCountGuard {
  int saved = get_num_threads();
  ~ThreadCountGuard() { set_num_threads(saved); }
};

}  // namespace

TEST_CASE("set_num_threads: sets the count, rejects counts below 1") {
  ThreadCountGuard guard;
  set_num_threads(3);
  CHECK(get_num_threads() == 3);
  set_num_threads(1);
  CHECK(get_num_threads() == 1);
  CHECK_THROWS_AS(set_num_threads(0), Error);
  CHECK_THROWS_AS(set_num_threads(-2), Error);
  CHECK(get_num_threads() == 1);
}

TEST_CASE("parallel_for: every index exactly once, chunks of at least grain, for any count") {
  ThreadCountGuard guard;
  for (int threads : {1, 2, 3, 7}) {
    set_num_threads(threads);
    for (int64_t n : {0, 1, 5, 64, 1000, 4097}) {
      for (int64_t grain : {1, 16, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::mutex m;
        std::vector<std::pair<int64_t, int64_t>> chunks;
        parallel_for(10, 10 + n, grain, [&](int64_t lo, int64_t hi) {
          {
            std::lock_guard<std::mutex> lock(m);
            chunks.emplace_back(lo, hi);
          }
          for (int64_t i = lo; i < hi; ++i) hits[size_t(i - 10)]++;
        });
        for (int64_t i = 0; i < n; ++i) REQUIRE(hits[size_t(i)] == 1);
        CHECK(int64_t(chunks.size()) <= threads);
        if (n > 0 && chunks.size() > 1)
          for (auto [lo, hi] : chunks) CHECK(hi - lo >= grain);
      }
    }
  }
}

TEST_CASE("parallel_for: uses several threads, and runs nested loops inline") {
  ThreadCountGuard guard;
  set_num_threads(4);
  std::mutex m;
  std::set<std::thread::id> seen;
  std::atomic<int> nested_off_thread{0};
  CHECK_FALSE(in_parallel_region());
  parallel_for(0, 4, 1, [&](int64_t, int64_t) {
    CHECK(in_parallel_region());
    const auto me = std::this_thread::get_id();
    {
      std::lock_guard<std::mutex> lock(m);
      seen.insert(me);
    }
    parallel_for(0, 100, 1, [&](int64_t lo, int64_t hi) {
      if (std::this_thread::get_id() != me || lo != 0 || hi != 100) nested_off_thread++;
    });
    // Long enough that the other workers take chunks too.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  });
  CHECK_FALSE(in_parallel_region());
  CHECK(nested_off_thread == 0);
  CHECK(seen.size() >= 2);
}

TEST_CASE("InlineParallelScope: loops on that thread run inline") {
  ThreadCountGuard guard;
  set_num_threads(4);
  InlineParallelScope scope;
  int calls = 0;
  parallel_for(0, 1000, 1, [&](int64_t lo, int64_t hi) {
    ++calls;
    CHECK(lo == 0);
    CHECK(hi == 1000);
  });
  CHECK(calls == 1);
}

TEST_CASE("parallel_for: a chunk's exception reaches the caller after all chunks finished") {
  ThreadCountGuard guard;
  set_num_threads(3);
  std::atomic<int64_t> done{0};
  CHECK_THROWS_WITH_AS(parallel_for(0, 300, 1,
                                    [&](int64_t lo, int64_t hi) {
                                      if (lo == 0) throw std::runtime_error("chunk failed");
                                      done += hi - lo;
                                    }),
                       "chunk failed", std::runtime_error);
  CHECK(done == 200);
  // The pool still works afterwards.
  std::atomic<int64_t> total{0};
  parallel_for(0, 300, 1, [&](int64_t lo, int64_t hi) { total += hi - lo; });
  CHECK(total == 300);
}

TEST_CASE("parallel_reduce: bitwise the same sum for every thread count") {
  ThreadCountGuard guard;
  std::vector<float> x(100003);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(double(i) * 0.37) * 1e3);
  auto sum_with = [&](int threads) {
    set_num_threads(threads);
    return parallel_reduce(
        int64_t(0), int64_t(x.size()), 4096, 0.0f,
        [&](int64_t lo, int64_t hi) {
          float s = 0;
          for (int64_t i = lo; i < hi; ++i) s += x[size_t(i)];
          return s;
        },
        [](float a, float b) { return a + b; });
  };
  const float one = sum_with(1);
  for (int threads : {2, 3, 5, 8}) CHECK(sum_with(threads) == one);
  CHECK(parallel_reduce(
            int64_t(5), int64_t(5), 4, 7, [](int64_t, int64_t) { return 1; },
            [](int a, int b) { return a + b; }) == 7);
}

TEST_CASE("parallel_for: loops from several user threads at once all complete") {
  ThreadCountGuard guard;
  set_num_threads(2);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> users;
  for (int u = 0; u < 4; ++u)
    users.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep)
        parallel_for(0, 1000, 10, [&](int64_t lo, int64_t hi) { total += hi - lo; });
    });
  for (std::thread& t : users) t.join();
  CHECK(total == 4 * 50 * 1000);
}
