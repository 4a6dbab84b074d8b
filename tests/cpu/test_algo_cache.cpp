// The algorithm registry and AlgoCache on the CPU: every mode's semantics, the workspace limit,
// benchmarking on scratch outputs, the dynamic-shape policy, LRU eviction, threads, persistence
// (round trip, foreign / corrupt / truncated files, EMBER_ALGO_CACHE-style save at exit) and the
// decision log. Algorithms here are fakes registered through the public API on ops of their own,
// so each test controls exactly what is "fast", "deterministic" or "applicable".
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "ember/dispatch/algo_cache.h"
#include "ember/ember.h"

using namespace ember;
using namespace ember::dispatch;

namespace {

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

std::function<int(int64_t)> fixed_us(int us) {
  return [us](int64_t) { return us; };
}
// Slow on its first call only (a library's one-time setup), then `then_us`.
std::function<int(int64_t)> slow_first_call_us(int first_us, int then_us) {
  auto calls = std::make_shared<int>(0);
  return [=](int64_t) { return (*calls)++ == 0 ? first_us : then_us; };
}

// A fresh folder for one test case's files, removed at the end of the case (by the process that
// made it, not by forked children).
class TempDir {
 public:
  TempDir() : owner_(::getpid()) {
    static int n = 0;
    dir_ = std::filesystem::temp_directory_path() /
           ("ember_algo_cache_test_" + std::to_string(owner_) + "_" + std::to_string(n++));
    std::filesystem::create_directories(dir_);
  }
  ~TempDir() {
    std::error_code ignored;
    if (::getpid() == owner_) std::filesystem::remove_all(dir_, ignored);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  pid_t owner_;
  std::filesystem::path dir_;
};
std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}
void replace_once(std::string& text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("AlgoKey: zeroed bytes, hash, readable form, distance, workspace buckets") {
  FakeOp op({{"a"}});
  AlgoKey a = op.key(8), b = op.key(8), c = op.key(9);
  CHECK(a == b);
  CHECK(a.hash() == b.hash());
  CHECK(a != c);
  CHECK(a.hash() != c.hash());
  std::string s = a.to_string();
  CHECK(s.find(op.name() + ".forward cpu") == 0);
  CHECK(s.find("in=[8]") != std::string::npos);

  CHECK(size_distance(a, b) == 0);
  CHECK(size_distance(op.key(2), op.key(4)) > 0);
  CHECK(size_distance(op.key(2), op.key(4)) < size_distance(op.key(2), op.key(64)));
  AlgoKey other_params = op.key(8);
  other_params.groups = 2;
  CHECK(std::isinf(size_distance(a, other_params)));

  CHECK(workspace_bucket(0) == 0);
  CHECK(workspace_bucket(1) == 1);
  CHECK(workspace_bucket(1023) == 10);
  CHECK(workspace_bucket(1024) == 11);
  CHECK(workspace_bucket(kNoWorkspaceLimit) == 255);
}

TEST_CASE("AlgoKey: 128 bytes; values beyond its fields flag the key oversize") {
  CHECK(sizeof(AlgoKey) == 128);
  FakeOp op({{"a"}});
  CHECK_FALSE(op.key(int64_t(1) << 30).oversize);
  CHECK(op.key(int64_t(1) << 31).oversize);
  AlgoKey k = op.key(8);
  k.assign(k.padding[0], 32767);
  CHECK_FALSE(k.oversize);
  k.assign(k.padding[1], 32768);
  CHECK(k.oversize);
  CHECK(k.to_string().find("oversize") != std::string::npos);
  // From a tensor: a broadcast view with 2^31 rows (no memory behind it).
  AlgoKey t = make_algo_key(op_id(op.name()), Direction::forward, Device::cpu());
  t.describe(AlgoKey::Operand::input, zeros({1, 3}).expand({int64_t(1) << 31, 3}));
  CHECK(t.oversize);
  AlgoKey small = make_algo_key(op_id(op.name()), Direction::forward, Device::cpu());
  small.describe(AlgoKey::Operand::input, zeros({1, 3}).expand({int64_t(1) << 20, 3}));
  CHECK_FALSE(small.oversize);
  CHECK(small.input_sizes[0] == (1 << 20));
  CHECK(small.input_layout == uint8_t(OperandLayout::strided));
}

TEST_CASE("oversize keys: the heuristic decides every call; nothing is cached or timed") {
  // Timing would pick "quick"; the heuristic ranks "ranked_first" first.
  FakeOp op({{"quick", 2.0},
             {"ranked_first", 1.0, true, 0, std::numeric_limits<int64_t>::max(),
              [](int64_t) { return 2000; }}});
  AlgoCache cache;
  AlgoModeGuard mode(AlgoMode::benchmark);
  CHECK(op.choose(cache, 10) == "quick");  // a normal key is benchmarked
  const int64_t huge = int64_t(1) << 32;
  CHECK(op.choose(cache, huge) == "ranked_first");
  CHECK(op.choose(cache, huge) == "ranked_first");
  cache.reset_stats();
  op.log().runs.clear();
  CHECK(op.choose(cache, huge) == "ranked_first");
  AlgoCacheStats s = cache.stats();
  CHECK(s.misses == 1);
  CHECK(s.hits == 0);
  CHECK(s.benchmarks == 0);
  CHECK(s.heuristic_choices == 1);
  CHECK_FALSE(op.peek(cache, huge));
  CHECK(op.log().runs.empty());  // no candidate was timed
}

TEST_CASE("registry: duplicate names, empty slots and unregistering") {
  FakeOp op({{"a", 2.0}, {"b", 1.0}});
  Algorithm<FakeProblem> dup;
  dup.name = "a";
  dup.run = [](const FakeProblem&, void*) {};
  CHECK_THROWS_AS(
      register_algorithm<FakeProblem>(op.name(), Direction::forward, DeviceType::CPU, dup), Error);
  CHECK(op.slot().names() == std::vector<std::string>{"a", "b"});

  AlgoCache cache;
  CHECK(op.choose(cache, 4) == "b");
  op.unregister(1);  // the cached choice is gone with it
  CHECK(op.choose(cache, 4) == "a");

  AlgoSlot& empty =
      algo_slot(op_id("fake_op_without_algorithms"), Direction::forward, DeviceType::CPU);
  FakeProblem p;
  try {
    cache.choose(
        empty,
        make_algo_key(op_id("fake_op_without_algorithms"), Direction::forward, Device::cpu()), p);
    FAIL("expected not_supported");
  } catch (const Error& e) {
    CHECK(e.status() == Status::not_supported);
    CHECK(e.message().find("no algorithm is registered") != std::string::npos);
  }
}

TEST_CASE("heuristic mode: lowest heuristic cost, no timing, cached") {
  FakeOp op({{"plain"}, {"cheap", 1.0}, {"dear", 5.0}});
  AlgoCache cache;
  AlgoModeGuard mode(AlgoMode::heuristic);
  CHECK(op.choose(cache, 10) == "cheap");
  CHECK(op.choose(cache, 10) == "cheap");
  AlgoCacheStats s = cache.stats();
  CHECK(s.misses == 1);
  CHECK(s.hits == 1);
  CHECK(s.benchmarks == 0);
  CHECK(s.heuristic_choices == 1);
  CHECK(op.log().runs.empty());  // choosing never ran anything
  REQUIRE(op.peek(cache, 10));
  CHECK(op.peek(cache, 10)->source == ChoiceSource::heuristic);
  cache.reset_stats();
  CHECK(cache.stats().hits == 0);
}

TEST_CASE("forced mode: the named algorithm, or a clear error") {
  FakeOp op({{"small_only", 1.0, true, 0, /*max_size=*/10}, {"any", 2.0}, {"racy", 3.0, false}});
  AlgoCache cache;
  {
    AlgoSettingsGuard g(AlgoSettings().force(op.name(), "any"));
    CHECK(op.choose(cache, 5) == "any");
    CHECK(cache.stats().forced_choices == 1);
    CHECK(cache.size() == 0);  // forced choices are not cached
  }
  {
    // op.direction wins over op
    AlgoSettingsGuard g(
        AlgoSettings().force(op.name(), "any").force(op.name() + ".forward", "small_only"));
    CHECK(op.choose(cache, 5) == "small_only");
  }
  {
    AlgoSettingsGuard g(AlgoSettings().force(op.name(), "no_such_algorithm"));
    try {
      op.choose(cache, 5);
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK(e.status() == Status::bad_param);
      CHECK(e.message().find("'no_such_algorithm' is not registered") != std::string::npos);
      CHECK(e.message().find("small_only, any, racy") != std::string::npos);
    }
  }
  {
    AlgoSettingsGuard g(AlgoSettings().force(op.name(), "small_only"));
    try {
      op.choose(cache, 50);
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK(e.message().find("'small_only' does not apply") != std::string::npos);
      CHECK(e.message().find("in=[50]") != std::string::npos);
    }
  }
  {
    AlgoSettingsGuard g(AlgoSettings().with_mode(AlgoMode::deterministic).force(op.name(), "racy"));
    CHECK_THROWS_WITH_AS(op.choose(cache, 5), doctest::Contains("not deterministic"), Error);
  }
}

TEST_CASE("workspace limit: candidates over it are skipped, zero always remains") {
  FakeOp op({{"big_ws", 1.0, true, 4096}, {"mid_ws", 2.0, true, 700}, {"no_ws", 3.0}});
  AlgoCache cache;
  CHECK(op.choose(cache, 1) == "big_ws");
  {
    AlgoSettingsGuard g(AlgoSettings().with_workspace_limit(0));
    CHECK(op.choose(cache, 1) == "no_ws");
  }
  {
    AlgoSettingsGuard g(AlgoSettings().with_workspace_limit(1000));
    CHECK(op.choose(cache, 1) == "mid_ws");
  }
  {
    // 600 shares 1000's bucket [512, 1024): the cached mid_ws (700 B) must not be returned.
    AlgoSettingsGuard g(AlgoSettings().with_workspace_limit(600));
    CHECK(op.choose(cache, 1) == "no_ws");
  }
  {
    AlgoSettingsGuard g(AlgoSettings().with_workspace_limit(1000));
    CHECK(op.choose(cache, 1) == "mid_ws");  // its entry survived the 600-byte call
  }

  // The run path hands the algorithm its workspace (the fake REQUIREs a non-null pointer).
  FakeProblem p;
  cache.run(op.slot(), op.key(1), p);
  CHECK((*p.out)[0] == 0);
}

TEST_CASE("run: the workspace size is asked for once per call, hit or miss") {
  auto queries = std::make_shared<std::atomic<int>>(0);
  FakeOp op({{"big_ws", 1.0, true, 4096, INT64_MAX, {}, false, queries}, {"no_ws", 2.0}});
  AlgoCache cache;
  for (size_t limit : {kNoWorkspaceLimit, size_t(1) << 20}) {
    AlgoSettingsGuard g(AlgoSettings().with_workspace_limit(limit));
    for (int call = 0; call < 3; ++call) {  // a miss (once per limit bucket), then hits
      *queries = 0;
      CHECK(op.run(cache, 7) == 0);
      CHECK(*queries == 1);
    }
  }
  CHECK(cache.stats().misses == 2);
  CHECK(cache.stats().hits == 4);
}

TEST_CASE("deterministic mode: non-deterministic candidates are skipped") {
  FakeOp op({{"atomic_adds", 1.0, /*deterministic=*/false}, {"ordered", 2.0}});
  AlgoCache cache;
  CHECK(op.choose(cache, 3) == "atomic_adds");
  {
    AlgoModeGuard g(AlgoMode::deterministic);
    CHECK(op.choose(cache, 3) == "ordered");  // a separate key: deterministic is part of it
    CHECK(op.peek(cache, 3)->algorithm == "ordered");
  }
  CHECK(op.peek(cache, 3)->algorithm == "atomic_adds");
  // With only non-deterministic candidates, deterministic mode is an error saying why.
  FakeOp racy_only({{"racy", 1.0, false}});
  AlgoModeGuard g(AlgoMode::deterministic);
  CHECK_THROWS_WITH_AS(racy_only.choose(cache, 3), doctest::Contains("racy (not deterministic)"),
                       Error);
}

TEST_CASE("benchmark mode: times every candidate on scratch outputs, keeps the fastest") {
  FakeOp op({{"slow", 1.0, true, 0, INT64_MAX, fixed_us(3000)},
             {"fast", 3.0, true, 0, INT64_MAX, fixed_us(0)},
             {"medium", 2.0, true, 0, INT64_MAX, fixed_us(1000)},
             {"broken", 0.5, true, 0, INT64_MAX, nullptr, /*throws=*/true}});
  AlgoCache cache;
  AlgoModeGuard mode(AlgoMode::benchmark);
  FakeProblem user;
  const void* user_out = user.out.get();
  cache.run(op.slot(), op.key(7), user);

  CHECK((*user.out)[0] == 1);  // "fast" wrote the user's output
  for (const char* name : {"slow", "fast", "medium"}) CHECK(op.log().count(name) >= 2);
  size_t user_writes = 0;
  for (auto& [name, out] : op.log().runs)
    if (out == user_out) {
      ++user_writes;
      CHECK(name == "fast");
    }
  CHECK(user_writes == 1);  // only the real run; every timing run wrote scratch

  AlgoCacheStats s = cache.stats();
  CHECK(s.benchmarks == 1);
  CHECK(s.candidates_timed == 3);
  CHECK(s.candidates_failed == 1);
  CHECK(s.benchmark_ms > 3.0);
  auto choice = op.peek(cache, 7);
  REQUIRE(choice);
  CHECK(choice->algorithm == "fast");
  CHECK(choice->source == ChoiceSource::benchmark);
  CHECK(choice->time_ms < 3.0f);

  CHECK(op.choose(cache, 7) == "fast");
  CHECK(cache.stats().benchmarks == 1);  // a hit
}

TEST_CASE("benchmark mode: a candidate far slower than the fastest so far runs twice (pruned)") {
  // Timed in heuristic order: "fast" first; "close" (1.25x) is timed fully; "slow" (10x, over the
  // bar of 3x "fast" but not hopelessly) is cut after its two warm-up runs and never reaches the
  // refinement round.
  FakeOp op({{"fast", 1.0, true, 0, INT64_MAX, fixed_us(2000)},
             {"slow", 2.0, true, 0, INT64_MAX, fixed_us(20000)},
             {"close", 3.0, true, 0, INT64_MAX, fixed_us(2500)}});
  AlgoCache cache;
  AlgoModeGuard mode(AlgoMode::benchmark);
  FakeProblem user;
  cache.run(op.slot(), op.key(3), user);
  CHECK(op.log().count("slow") == 2);
  CHECK(op.log().count("close") >= 4);
  CHECK(op.log().count("fast") >= 5);  // warm-up, three timed runs, the user's run
  const AlgoCacheStats s = cache.stats();
  CHECK(s.candidates_timed == 3);
  CHECK(s.candidates_pruned == 1);
  CHECK(op.choose(cache, 3) == "fast");
  cache.reset_stats();
  CHECK(cache.stats().candidates_pruned == 0);
}

TEST_CASE("benchmark mode: a candidate hopelessly slower than the fastest runs once (pruned)") {
  // "hopeless" (40x "fast") is over 10x the bar of 3x "fast" after its first warm-up: no second.
  FakeOp op({{"fast", 1.0, true, 0, INT64_MAX, fixed_us(2000)},
             {"hopeless", 2.0, true, 0, INT64_MAX, fixed_us(80000)}});
  AlgoCache cache;
  AlgoModeGuard mode(AlgoMode::benchmark);
  FakeProblem user;
  cache.run(op.slot(), op.key(4), user);
  CHECK(op.log().count("hopeless") == 1);
  CHECK(cache.stats().candidates_pruned == 1);
  CHECK(op.choose(cache, 4) == "fast");
}

TEST_CASE("benchmark mode: a slow first call (one-time setup) does not prune the fastest") {
  // "setup" pays 30 ms once, then runs in 1 ms: its first warm-up is over 3x "fast"'s 2 ms, its
  // second is not, so it is timed and chosen.
  FakeOp op({{"fast", 1.0, true, 0, INT64_MAX, fixed_us(2000)},
             {"setup", 2.0, true, 0, INT64_MAX, slow_first_call_us(30000, 1000)}});
  AlgoCache cache;
  AlgoModeGuard mode(AlgoMode::benchmark);
  FakeProblem user;
  cache.run(op.slot(), op.key(5), user);
  CHECK(cache.stats().candidates_pruned == 0);
  CHECK(op.choose(cache, 5) == "setup");
}

TEST_CASE("benchmark mode: upgrades heuristic entries; all-failing candidates cache nothing") {
  FakeOp op({{"slow", 1.0, true, 0, INT64_MAX, fixed_us(2000)},
             {"fast", 2.0, true, 0, INT64_MAX, fixed_us(0)}});
  AlgoCache cache;
  CHECK(op.choose(cache, 5) == "slow");  // heuristic
  {
    AlgoModeGuard g(AlgoMode::benchmark);
    CHECK(op.choose(cache, 5) == "fast");
    CHECK(cache.stats().benchmarks == 1);
  }
  CHECK(op.choose(cache, 5) == "fast");  // heuristic mode reuses what was measured

  FakeOp failing({{"oom_a", 1.0, true, 0, INT64_MAX, nullptr, true},
                  {"oom_b", 2.0, true, 0, INT64_MAX, nullptr, true}});
  AlgoModeGuard g(AlgoMode::benchmark);
  CHECK(failing.choose(cache, 5) == "oom_a");
  CHECK_FALSE(failing.peek(cache, 5));
  CHECK(cache.stats().candidates_failed == 2);
}

TEST_CASE("dynamic shapes: at most N benchmarked keys, then the nearest key's choice") {
  // "small" is fast up to size 2, "large" beyond; "large" applies only up to size 1000.
  auto small_delay = [](int64_t n) { return n <= 2 ? 0 : 2000; };
  auto large_delay = [](int64_t n) { return n <= 2 ? 2000 : 0; };
  FakeOp op({{"small", 1.0, true, 0, INT64_MAX, small_delay},
             {"large", 2.0, true, 0, /*max_size=*/1000, large_delay}});
  AlgoCache cache;
  cache.set_max_benchmarked_keys_per_op(3);
  AlgoModeGuard mode(AlgoMode::benchmark);
  CHECK(op.choose(cache, 1) == "small");
  CHECK(op.choose(cache, 2) == "small");
  CHECK(op.choose(cache, 64) == "large");
  CHECK(cache.stats().benchmarks == 3);

  CHECK(op.choose(cache, 100) == "large");  // nearest benchmarked key: 64
  CHECK(op.choose(cache, 3) == "small");    // nearest: 2 (log distance)
  CHECK(op.peek(cache, 100)->source == ChoiceSource::nearest);
  CHECK(op.choose(cache, 5000) == "small");  // nearest is 64 -> "large", which does not apply
  CHECK(op.peek(cache, 5000)->source == ChoiceSource::heuristic);

  for (int64_t n = 200; n < 400; ++n) op.choose(cache, n);  // a shape storm
  AlgoCacheStats s = cache.stats();
  CHECK(s.benchmarks == 3);
  CHECK(s.nearest_reuses == 202);
}

TEST_CASE("LRU: bounded entries, least recently used evicted first") {
  FakeOp op({{"a", 1.0}});
  AlgoCache cache(4);
  for (int64_t n = 1; n <= 4; ++n) op.choose(cache, n);
  op.choose(cache, 1);  // 1 is now among the most recent; 2 the least
  op.choose(cache, 5);
  CHECK(cache.size() == 4);
  CHECK(cache.stats().evictions == 1);
  CHECK_FALSE(op.peek(cache, 2));
  for (int64_t n : {1, 3, 4, 5}) CHECK(op.peek(cache, n));

  op.choose(cache, 1);  // used after the last insertion, like 5 (peek does not count as use)
  cache.set_capacity(2);
  CHECK(cache.size() == 2);
  CHECK(op.peek(cache, 1));
  CHECK(op.peek(cache, 5));
  CHECK(cache.stats().evictions == 3);
  cache.clear();
  CHECK(cache.size() == 0);
}

TEST_CASE("lookups: many keys, evictions and clear never return a stale choice") {
  // Sizes up to 1000 take "small", larger ones "large". 3000 keys are more than the shards'
  // direct-mapped front slots (16 x 64), so slots are shared and overwritten.
  FakeOp op({{"small", 1.0, true, 0, 1000}, {"large", 2.0}});
  AlgoCache cache;
  AlgoModeGuard mode(AlgoMode::heuristic);
  auto expected = [](int64_t n) { return std::string(n <= 1000 ? "small" : "large"); };
  for (int round = 0; round < 2; ++round)
    for (int64_t n = 1; n <= 3000; ++n) REQUIRE(op.choose(cache, n) == expected(n));
  CHECK(cache.stats().misses == 3000);
  CHECK(cache.stats().hits == 3000);

  // Evicted entries are chosen afresh (misses), never found through a stale index.
  cache.set_capacity(1);
  cache.reset_stats();
  for (int64_t n = 1; n <= 50; ++n) CHECK(op.choose(cache, n) == expected(n));
  CHECK(cache.stats().misses == 50);
  CHECK(cache.stats().hits == 0);
  CHECK(op.choose(cache, 50) == "small");
  CHECK(cache.stats().hits == 1);
  cache.clear();
  CHECK(op.choose(cache, 50) == "small");
  CHECK(cache.stats().misses == 51);
}

TEST_CASE("lookups: keys differing in any one byte are separate entries") {
  // Every byte of the key but the ones naming the slot (op, direction, device type), the two the
  // cache fills from the settings and the oversize flag (such keys are never filed), changed
  // alone, makes a key of its own: each is a miss, and looked up again after all were filed, each
  // is a hit returning its own choice (sizes up to 60 take "small"). 121 keys also collide in a
  // thread's remembered hits (64 sets of 4).
  FakeOp op({{"small", 1.0, true, 0, /*max_size=*/60}, {"any", 2.0}});
  AlgoCache cache;
  AlgoModeGuard mode(AlgoMode::heuristic);
  const AlgoKey base = op.key(16);
  struct Variant {
    AlgoKey key;
    int64_t size;
  };
  std::vector<Variant> variants;
  for (size_t at = offsetof(AlgoKey, rank); at < sizeof(AlgoKey); ++at) {
    if (at == offsetof(AlgoKey, deterministic) || at == offsetof(AlgoKey, workspace_bucket) ||
        at == offsetof(AlgoKey, oversize))
      continue;
    Variant v{base, int64_t(variants.size())};
    reinterpret_cast<unsigned char*>(&v.key)[at] ^= 0x5A;
    variants.push_back(v);
  }
  REQUIRE(variants.size() == sizeof(AlgoKey) - 7);
  auto choose = [&](const Variant& v) {
    FakeProblem p;
    p.size = v.size;
    return cache.choose(op.slot(), v.key, p).name;
  };
  auto expected = [](const Variant& v) { return std::string(v.size <= 60 ? "small" : "any"); };
  for (const Variant& v : variants) REQUIRE(choose(v) == expected(v));
  CHECK(cache.stats().misses == variants.size());
  CHECK(cache.size() == variants.size());
  for (int round = 0; round < 2; ++round)
    for (const Variant& v : variants) REQUIRE(choose(v) == expected(v));
  CHECK(cache.stats().hits == 2 * variants.size());
  CHECK(cache.stats().misses == variants.size());
}

TEST_CASE("lookups: a thread's remembered hits belong to one cache and one state of it") {
  FakeOp op({{"small", 1.0, true, 0, 10}, {"any", 2.0}});
  AlgoModeGuard mode(AlgoMode::heuristic);
  for (int i = 0; i < 3; ++i) {
    // A new cache (possibly at the address of the one just destroyed) knows nothing.
    AlgoCache cache;
    CHECK(op.choose(cache, 5) == "small");
    CHECK(op.choose(cache, 5) == "small");
    CHECK(cache.stats().misses == 1);
    CHECK(cache.stats().hits == 1);
  }
  AlgoCache a, b;
  CHECK(op.choose(a, 5) == "small");
  CHECK(op.choose(a, 5) == "small");
  CHECK(op.choose(b, 5) == "small");
  CHECK(b.stats().misses == 1);
  CHECK(b.stats().hits == 0);
  for (int i = 0; i < 10; ++i) {  // alternating between caches: each counts its own hits
    op.choose(a, 5);
    op.choose(b, 5);
  }
  CHECK(a.stats().hits == 11);
  CHECK(b.stats().hits == 10);
  // A change by another thread is seen by this thread's next lookup.
  std::thread([&] { a.clear(); }).join();
  CHECK(op.choose(a, 5) == "small");
  CHECK(a.stats().misses == 2);
  // Hits counted by other threads add up exactly; reset_stats() leaves their counters alone.
  a.reset_stats();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) op.choose(a, 5);
    });
  for (auto& th : threads) th.join();
  CHECK(a.stats().hits == 400);
  CHECK(a.stats().misses == 0);
}

TEST_CASE("settings: per-thread guards, global settings seen by every thread") {
  AlgoSettings before = global_algo_settings();
  {
    AlgoModeGuard g(AlgoMode::benchmark);
    CHECK(current_algo_settings().mode == AlgoMode::benchmark);
    AlgoMode seen_elsewhere = AlgoMode::benchmark;
    std::thread([&] { seen_elsewhere = current_algo_settings().mode; }).join();
    CHECK(seen_elsewhere == before.mode);
    {
      AlgoSettingsGuard inner(AlgoSettings().with_workspace_limit(0));
      CHECK(current_algo_settings().workspace_limit_bytes == 0);
      CHECK(current_algo_settings().mode == AlgoMode::heuristic);
    }
    CHECK(current_algo_settings().mode == AlgoMode::benchmark);
  }
  set_global_algo_settings(AlgoSettings(before).with_mode(AlgoMode::deterministic));
  AlgoMode seen = AlgoMode::heuristic;
  std::thread([&] { seen = current_algo_settings().mode; }).join();
  CHECK(seen == AlgoMode::deterministic);
  set_global_algo_settings(before);
  CHECK(current_algo_settings().mode == before.mode);
}

TEST_CASE("threads: 8 threads dispatching at once agree, and each key is benchmarked once") {
  FakeOp ruled({{"below_50", 1.0, true, 0, /*max_size=*/49}, {"any", 2.0}});
  FakeOp timed({{"slow", 1.0, true, 0, INT64_MAX, fixed_us(500)},
                {"fast", 2.0, true, 0, INT64_MAX, fixed_us(0)}});
  AlgoCache small_cache(16);  // fewer entries than keys: evictions race with lookups
  AlgoCache timed_cache;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        int64_t n = 1 + (i * 7 + t) % 100;
        if (ruled.choose(small_cache, n) != (n <= 49 ? "below_50" : "any")) ++wrong;
      }
      AlgoModeGuard g(AlgoMode::benchmark);
      for (int i = 0; i < 100; ++i)
        if (timed.choose(timed_cache, 1 + (i + t) % 5) != "fast") ++wrong;
    });
  for (auto& th : threads) th.join();
  CHECK(wrong == 0);
  AlgoCacheStats small = small_cache.stats();
  CHECK(small.hits + small.misses == 8 * 1000);
  CHECK(small.entries <= 16);
  CHECK(small.evictions > 0);
  AlgoCacheStats timed_stats = timed_cache.stats();
  CHECK(timed_stats.hits + timed_stats.misses == 8 * 100);
  CHECK(timed_stats.benchmarks == 5);  // threads that missed together waited for one benchmark
}

TEST_CASE("persistence: round trip; a second identical run benchmarks nothing") {
  FakeOp op({{"slow", 1.0, true, 0, INT64_MAX, fixed_us(1000)},
             {"fast", 2.0, true, 0, INT64_MAX, fixed_us(0)}});
  TempDir tmp;
  std::string path = tmp.path("round_trip.json");
  AlgoCache cache;
  AlgoModeGuard mode(AlgoMode::benchmark);
  for (int64_t n : {3, 5, 9}) CHECK(op.choose(cache, n) == "fast");
  CHECK(cache.dirty());
  cache.save(path);
  CHECK_FALSE(cache.dirty());
  std::string text = read_text(path);
  CHECK(text.find("\"ember-algo-cache\"") != std::string::npos);
  CHECK(text.find("\"" + op.name() + "\"") != std::string::npos);
  for (auto& entry : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path()))
    CHECK(entry.path().string().find(".tmp.") == std::string::npos);  // no temp file left

  cache.clear();
  cache.reset_stats();
  AlgoCacheLoadResult r = cache.load(path);
  CHECK(r.loaded);
  CHECK(r.entries == 3);
  CHECK(r.warning.empty());
  for (int64_t n : {3, 5, 9}) CHECK(op.choose(cache, n) == "fast");
  AlgoCacheStats s = cache.stats();
  CHECK(s.benchmarks == 0);
  CHECK(s.hits == 3);
  CHECK(s.loaded_entries == 3);
  CHECK_FALSE(cache.dirty());

  // Another cache (another process, in effect) loads the same choices.
  AlgoCache second;
  CHECK(second.load(path).entries == 3);
  CHECK(second.peek(op.slot(), op.key(5))->algorithm == "fast");

  // An entry naming an algorithm or an op this process lacks is skipped; the rest load.
  for (auto [from, to] : {std::pair<std::string, std::string>{"\"fast\"", "\"retired_algorithm\""},
                          {"\"" + op.name() + "\"", "\"retired_op\""}}) {
    std::string edited = text;
    replace_once(edited, from, to);
    write_text(path, edited);
    AlgoCache third;
    AlgoCacheLoadResult partial = third.load(path);
    CHECK(partial.loaded);
    CHECK(partial.entries == 2);
    CHECK(partial.skipped == 1);
  }
  CHECK_FALSE(find_op_id("retired_op"));  // loading does not intern names it does not know

  CHECK_THROWS_WITH_AS(cache.save(tmp.path("no_such_dir/x/cache.json")),
                       doctest::Contains("cannot save"), Error);
}

TEST_CASE("persistence: foreign, corrupt, truncated and missing files are warnings") {
  FakeOp op({{"a", 1.0, true, 0, INT64_MAX, fixed_us(0)}, {"b", 2.0}});
  TempDir tmp;
  std::string path = tmp.path("stamped.json");
  AlgoCache cache;
  {
    AlgoModeGuard mode(AlgoMode::benchmark);
    op.choose(cache, 4);
  }
  cache.save(path);
  const std::string good = read_text(path);
  AlgoCacheStamp stamp = current_algo_cache_stamp();

  struct Case {
    const char* what;
    std::string text;
    const char* expect;
  };
  std::string other_gpu = good, other_version = good;
  replace_once(other_gpu, "\"gpu_name\": \"" + stamp.gpu_name + "\"",
               "\"gpu_name\": \"Imaginary GPU 9000\"");
  replace_once(other_version, "\"ember_version\": \"" + stamp.ember_version + "\"",
               "\"ember_version\": \"0.0.0-other\"");
  std::string wrong_types = good;
  replace_once(wrong_types, "\"groups\": 0", "\"groups\": \"zero\"");
  std::string out_of_range = good;  // a size no key field can hold
  replace_once(out_of_range, "\"groups\": 0", "\"groups\": 4294967296");
  std::vector<Case> cases = {
      {"other GPU", other_gpu, "Imaginary GPU 9000"},
      {"other Ember version", other_version, "0.0.0-other"},
      {"corrupt", "{ this is not json", "corrupt or truncated"},
      {"truncated", good.substr(0, good.size() / 2), "corrupt or truncated"},
      {"empty", "", "corrupt or truncated"},
      {"wrong types", wrong_types, "corrupt"},
      {"value out of range", out_of_range, "corrupt"},
      {"another format", "{\"format\": \"something else\"}", "not an Ember algorithm cache"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    write_text(path, c.text);
    AlgoCache fresh;
    AlgoCacheLoadResult r;
    CHECK_NOTHROW(r = fresh.load(path));
    CHECK_FALSE(r.loaded);
    CHECK(r.entries == 0);
    CHECK(fresh.size() == 0);
    CHECK(r.warning.find(path) != std::string::npos);
    CHECK(r.warning.find(c.expect) != std::string::npos);
  }
  AlgoCache fresh;
  AlgoCacheLoadResult missing = fresh.load(tmp.path("never_written.json"));
  CHECK_FALSE(missing.loaded);
}

TEST_CASE("persistence: the process-wide cache saves at exit and a second run benchmarks nothing") {
  // Each run is a child process (fork), as two runs with EMBER_ALGO_CACHE=path would be.
  FakeOp op({{"slow", 1.0, true, 0, INT64_MAX, fixed_us(1000)},
             {"fast", 2.0, true, 0, INT64_MAX, fixed_us(0)}});
  TempDir tmp;
  std::string path = tmp.path("at_exit.json");
  auto run_child = [&](int expected_benchmarks) {
    std::fflush(stdout);
    std::fflush(stderr);
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      AlgoCache& cache = algo_cache();
      cache.clear();
      cache.reset_stats();
      persist_algo_cache_to(path);
      AlgoModeGuard mode(AlgoMode::benchmark);
      bool ok = op.choose(cache, 11) == "fast" && op.choose(cache, 12) == "fast";
      ok = ok && cache.stats().benchmarks == uint64_t(expected_benchmarks);
      std::exit(ok ? 0 : 3);  // exit, not _exit: the atexit save must run
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  CHECK(run_child(2) == 0);
  REQUIRE(std::filesystem::exists(path));
  AlgoCache reader;
  CHECK(reader.load(path).entries == 2);
  CHECK(run_child(0) == 0);
}

TEST_CASE("EMBER_LOG_ALGOS: one line per decision with key, candidates, times and choice") {
  FakeOp op({{"slow", 1.0, true, 512, INT64_MAX, fixed_us(1000)},
             {"fast", 2.0, true, 0, INT64_MAX, fixed_us(0)},
             {"tiny_only", 0.5, true, 0, 1}});
  std::vector<std::string> lines;
  set_algo_log_sink([&](const std::string& line) { lines.push_back(line); });
  bool was_enabled = algo_log_enabled();
  set_algo_log_enabled(true);
  AlgoCache cache;
  {
    AlgoModeGuard mode(AlgoMode::benchmark);
    op.choose(cache, 6);
    op.choose(cache, 6);  // a hit: no decision, no line
  }
  set_algo_log_enabled(was_enabled);
  set_algo_log_sink(nullptr);
  REQUIRE(lines.size() == 1);
  const std::string& l = lines[0];
  CHECK(l.find(op.name() + ".forward") == 0);
  CHECK(l.find("in=[6]") != std::string::npos);
  CHECK(l.find("benchmark") != std::string::npos);
  CHECK(l.find("slow ") != std::string::npos);
  CHECK(l.find(" ms ws=512 B") != std::string::npos);
  CHECK(l.find("skipped tiny_only (does not apply)") != std::string::npos);
  CHECK(l.find("-> fast") != std::string::npos);
}

TEST_CASE("capture detection is false on the CPU") {
  CHECK_FALSE(current_stream_is_capturing(Device::cpu()));
}
