// The algorithm registry and AlgoCache on the CPU, choosing: keys, registration, every mode's
// semantics (heuristic, forced, deterministic, benchmark on scratch outputs with pruning), the
// workspace limit, the dynamic-shape policy, the settings guards and the benchmark hooks.
// Algorithms here are fakes (tests/support/algo_cache_fakes.h) registered through the public API
// on ops of their own, so each test controls exactly what is "fast", "deterministic" or
// "applicable". The cache's storage, threads, persistence and log are in
// test_algo_cache_storage.cpp.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <thread>

#include "ember/dispatch/algo_cache.h"
#include "ember/dispatch/benchmark_hooks.h"
#include "ember/ember.h"
#include "support/algo_cache_fakes.h"

using namespace ember;
using namespace ember::dispatch;
using namespace ember::testing;

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
  // "setup" pays 150 ms once, then runs in 2 ms: its first warm-up is over 3x "fast"'s 10 ms, its
  // second is not (with a margin wide enough for a loaded machine's sleeps), so it is timed and
  // chosen.
  FakeOp op({{"fast", 1.0, true, 0, INT64_MAX, fixed_us(10000)},
             {"setup", 2.0, true, 0, INT64_MAX, slow_first_call_us(150000, 2000)}});
  AlgoCache cache;
  AlgoModeGuard mode(AlgoMode::benchmark);
  FakeProblem user;
  cache.run(op.slot(), op.key(5), user);
  CHECK(cache.stats().candidates_pruned == 0);
  CHECK(op.choose(cache, 5) == "setup");
}

namespace {
std::atomic<int> g_cpu_holds{0};
std::atomic<int> g_cpu_setup_queries{0};
}  // namespace

TEST_CASE("benchmark hooks: registered per device type; CPU timing uses none") {
  const BenchmarkHooks before = benchmark_hooks(DeviceType::CPU);
  BenchmarkHooks hooks;
  hooks.hold_stream = [](const Stream&, double) { ++g_cpu_holds; };
  hooks.setup_events = []() -> int64_t { return ++g_cpu_setup_queries; };
  set_benchmark_hooks(DeviceType::CPU, hooks);
  CHECK((benchmark_hooks(DeviceType::CPU).hold_stream == hooks.hold_stream));
  CHECK((benchmark_hooks(DeviceType::CPU).setup_events == hooks.setup_events));

  FakeOp op({{"slow", 1.0, true, 0, INT64_MAX, fixed_us(1000)},
             {"fast", 2.0, true, 0, INT64_MAX, fixed_us(0)}});
  AlgoCache cache;
  {
    AlgoModeGuard mode(AlgoMode::benchmark);
    CHECK(op.choose(cache, 3) == "fast");
  }
  CHECK(cache.stats().benchmarks == 1);
  CHECK(g_cpu_holds == 0);  // steady_clock timing: nothing to hold, no set-up to skip
  CHECK(g_cpu_setup_queries == 0);
  set_benchmark_hooks(DeviceType::CPU, before);
  CHECK((benchmark_hooks(DeviceType::CPU).hold_stream == before.hold_stream));
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
