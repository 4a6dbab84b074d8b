// The AlgoCache on the CPU, remembering: LRU eviction, lookups that never return a stale choice
// (many keys, one-byte differences, per-thread remembered hits), threads dispatching at once,
// persistence (round trip, foreign / corrupt / truncated files, EMBER_ALGO_CACHE-style save at
// exit), the decision log and the capture check. Algorithms here are fakes
// (tests/support/algo_cache_fakes.h); choosing is tested in test_algo_cache.cpp.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "ember/dispatch/algo_cache.h"
#include "ember/ember.h"
#include "support/algo_cache_fakes.h"

using namespace ember;
using namespace ember::dispatch;
using namespace ember::testing;

namespace {

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
