// Cost of one AlgoCache lookup on a warm cache (target <= 100 ns), measured on the CPU:
//   algo_cache_lookup            choose() with a prebuilt key, cycling over 64 keys (the number of
//                                distinct conv keys of a ResNet-50 step, order of magnitude)
//   algo_key_build_conv          conv2d_key() alone: the key-building share of the next case
//   algo_cache_lookup_conv_key   conv2d_key() + choose() for a real ConvProblem: what the op pays
//   algo_cache_lookup_threads    the first case from several threads at once (per-thread ns);
//                                threads: the first argument, else min(8, hardware threads)
// Prints one JSON line per case: {"bench":"algo_cache_lookup","ns_per_lookup":...,...}, with the
// wall time per lookup and the thread's CPU time per lookup (they differ on a shared machine).
#include "ember/dispatch/algo_cache.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "ember/ember.h"
#include "ember/ops/conv.h"

using namespace ember;
using namespace ember::dispatch;

namespace {

struct BenchProblem {
  int64_t size = 0;
  Device device() const { return Device::cpu(); }
  BenchProblem with_scratch_outputs() const { return *this; }
};

using clock_type = std::chrono::steady_clock;

// Keeps the compiler from dropping the lookups whose results nobody reads.
std::atomic<uint64_t> g_sink{0};

double thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e9 + double(ts.tv_nsec);
}

// Wall and CPU time per call. On a shared machine the thread may be descheduled: CPU time is then
// the better estimate of the cost, wall time the one that counts on a dedicated machine.
struct PerCall {
  double wall_ns = 1e30, cpu_ns = 1e30;
};

// `f(i)` returns something derived from the lookup; it is summed locally (no shared writes).
// Best of `reps` repetitions.
template <typename F>
PerCall per_call(int64_t calls, int reps, F&& f) {
  PerCall best;
  for (int r = 0; r < reps; ++r) {
    uint64_t acc = 0;
    double cpu0 = thread_cpu_ns();
    auto t0 = clock_type::now();
    for (int64_t i = 0; i < calls; ++i) acc += f(i);
    double wall = std::chrono::duration<double, std::nano>(clock_type::now() - t0).count();
    double cpu = thread_cpu_ns() - cpu0;
    g_sink.fetch_add(acc, std::memory_order_relaxed);
    best.wall_ns = std::min(best.wall_ns, wall / double(calls));
    best.cpu_ns = std::min(best.cpu_ns, cpu / double(calls));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr int kKeys = 64;
  constexpr int64_t kCalls = 2'000'000;
  const std::string op = "bench_algo_cache_op";
  for (const char* name : {"first", "second", "third"}) {
    Algorithm<BenchProblem> a;
    a.name = name;
    a.heuristic_cost = [name](const BenchProblem& p) {
      return double((p.size * 7 + name[0]) % 5);  // varied choices across keys
    };
    a.run = [](const BenchProblem&, void*) {};
    register_algorithm<BenchProblem>(op, Direction::forward, DeviceType::CPU, std::move(a));
  }
  AlgoSlot& slot = algo_slot(op_id(op), Direction::forward, DeviceType::CPU);
  std::vector<AlgoKey> keys(kKeys);
  std::vector<BenchProblem> problems(kKeys);
  for (int i = 0; i < kKeys; ++i) {
    keys[i] = make_algo_key(op_id(op), Direction::forward, Device::cpu());
    keys[i].rank = 4;
    int64_t sizes[4] = {32, 64 << (i % 4), 56 >> (i % 3), 56 >> (i % 3)};
    for (int d = 0; d < 4; ++d) keys[i].input_sizes[d] = keys[i].output_sizes[d] = sizes[d] + i;
    problems[i].size = i;
  }
  AlgoCache cache;
  for (int i = 0; i < kKeys; ++i) cache.choose(slot, keys[i], problems[i]);  // warm

  PerCall single = per_call(kCalls, 3, [&](int64_t i) {
    int k = int(i & (kKeys - 1));
    return cache.choose(slot, keys[k], problems[k]).name.size();
  });
  std::printf(
      "{\"bench\":\"algo_cache_lookup\",\"ns_per_lookup\":%.1f,\"cpu_ns_per_lookup\":%.1f,"
      "\"keys\":%d,\"threads\":1}\n",
      single.wall_ns, single.cpu_ns, kKeys);

  // The op's real path: key building (sizes, layouts, alignment of three tensors) + lookup.
  Tensor x = randn({8, 64, 28, 28}), w = randn({64, 64, 3, 3}), y = empty({8, 64, 28, 28});
  Conv2dParams p;
  p.padding = {1, 1};
  ConvProblem conv{Direction::forward, x, w, y, p, true};
  AlgoSlot& conv_slot = conv2d_slot(Direction::forward, DeviceType::CPU);
  algo_cache().choose(conv_slot, conv2d_key(conv), conv);
  PerCall key_only = per_call(kCalls / 4, 3, [&](int64_t) { return conv2d_key(conv).rank; });
  std::printf(
      "{\"bench\":\"algo_key_build_conv\",\"ns_per_key\":%.1f,\"cpu_ns_per_key\":%.1f,"
      "\"threads\":1}\n",
      key_only.wall_ns, key_only.cpu_ns);
  PerCall with_key = per_call(kCalls / 4, 3, [&](int64_t) {
    return algo_cache().choose(conv_slot, conv2d_key(conv), conv).name.size();
  });
  std::printf(
      "{\"bench\":\"algo_cache_lookup_conv_key\",\"ns_per_lookup\":%.1f,\"cpu_ns_per_lookup\":%.1f,"
      "\"threads\":1}\n",
      with_key.wall_ns, with_key.cpu_ns);

  unsigned threads = argc > 1 ? unsigned(std::max(1, std::atoi(argv[1])))
                              : std::max(2u, std::min(8u, std::thread::hardware_concurrency()));
  std::vector<PerCall> per_thread(threads);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      per_thread[t] = per_call(kCalls / 4, 3, [&](int64_t i) {
        int k = int((i + t * 17) & (kKeys - 1));
        return cache.choose(slot, keys[k], problems[k]).name.size();
      });
    });
  for (auto& th : pool) th.join();
  PerCall worst{0, 0};
  for (const PerCall& v : per_thread) {
    worst.wall_ns = std::max(worst.wall_ns, v.wall_ns);
    worst.cpu_ns = std::max(worst.cpu_ns, v.cpu_ns);
  }
  std::printf(
      "{\"bench\":\"algo_cache_lookup_threads\",\"ns_per_lookup\":%.1f,\"cpu_ns_per_lookup\":%.1f,"
      "\"threads\":%u,\"hardware_threads\":%u}\n",
      worst.wall_ns, worst.cpu_ns, threads, std::thread::hardware_concurrency());
  AlgoCacheStats s = cache.stats();
  std::fprintf(stderr, "hits %llu misses %llu (sink %llu)\n", (unsigned long long)s.hits,
               (unsigned long long)s.misses, (unsigned long long)g_sink.load());
  return s.misses == uint64_t(kKeys) ? 0 : 1;
}
