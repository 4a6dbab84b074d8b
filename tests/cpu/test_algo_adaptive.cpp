// The AlgoCache's adaptive mode on the CPU (issue 32): size classes, borrowing a timed
// class-mate's choice and replacing it once the exact key is timed, top-k timing, the per-op key
// budget and the timing budget, no timing during a (fake) capture, determinism of deterministic
// mode beside it, the decision log and persistence of timed entries only. Algorithms are the fakes
// of tests/support/algo_cache_fakes.h, on ops of their own.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ember/dispatch/algo_cache.h"
#include "ember/ember.h"
#include "support/algo_cache_fakes.h"

using namespace ember;
using namespace ember::dispatch;
using namespace ember::testing;

namespace {

// Adaptive settings with a large warm-up pool and a steady pool that refills only at
// tune_pending() (timing_share 0), so that the tests decide when re-timing may happen.
AlgoSettings adaptive(int top_k = 3, int keys = 32, double initial_ms = 1e6, double step_ms = 1e6,
                      double share = 0) {
  AlgoSettings s;
  s.mode = AlgoMode::adaptive;
  s.adaptive.top_k = top_k;
  s.adaptive.max_timed_keys_per_op = keys;
  s.adaptive.initial_budget_ms = initial_ms;
  s.adaptive.step_budget_ms = step_ms;
  s.adaptive.timing_share = share;
  return s;
}

// "a" is fast at sizes up to 5, "b" beyond; both apply everywhere.
FakeOp two_regimes() {
  auto a_delay = [](int64_t n) { return n <= 5 ? 0 : 400; };
  auto b_delay = [](int64_t n) { return n <= 5 ? 400 : 0; };
  return FakeOp({{"a", 1.0, true, 0, INT64_MAX, a_delay}, {"b", 2.0, true, 0, INT64_MAX, b_delay}});
}

struct FakeCapture {
  FakeCapture() { set_fake_capture_for_testing(true); }
  ~FakeCapture() { set_fake_capture_for_testing(false); }
};

struct LogCapture {
  std::vector<std::string> lines;
  LogCapture() {
    set_algo_log_sink([this](const std::string& l) { lines.push_back(l); });
    set_algo_log_enabled(true);
  }
  ~LogCapture() {
    set_algo_log_enabled(false);
    set_algo_log_sink(nullptr);
  }
  size_t count(const std::string& s) const {
    size_t n = 0;
    for (const std::string& l : lines) n += l.find(s) != std::string::npos;
    return n;
  }
};

}  // namespace

TEST_CASE("adaptive: mode name and size classes") {
  CHECK(algo_mode_from_name("adaptive") == AlgoMode::adaptive);
  CHECK(std::string(algo_mode_name(AlgoMode::adaptive)) == "adaptive");
  CHECK(std::string(choice_source_name(ChoiceSource::borrowed)) == "borrowed");

  FakeOp op({{"a"}});
  CHECK(size_class_key(op.key(5)) == size_class_key(op.key(8)));
  CHECK(size_class_key(op.key(8)) != size_class_key(op.key(9)));
  CHECK(size_class_key(op.key(24)) == size_class_key(op.key(32)));
  CHECK(size_class_key(op.key(33)) == size_class_key(op.key(40)));
  CHECK(size_class_key(op.key(32)) != size_class_key(op.key(33)));

  // A conv-like key [N, C, H, W]: batch and spatial dims are rounded, channels and weights not.
  AlgoKey k = op.key(1);
  k.rank = 4;
  const int32_t in[4] = {96, 48, 24, 30}, w[4] = {64, 48, 3, 3};
  for (int i = 0; i < 4; ++i) {
    k.input_sizes[i] = in[i];
    k.output_sizes[i] = in[i];
    k.weight_sizes[i] = w[i];
  }
  const AlgoKey c = size_class_key(k);
  CHECK(c.input_sizes[0] == 128);
  CHECK(c.input_sizes[1] == 48);
  CHECK(c.input_sizes[2] == 32);
  CHECK(c.input_sizes[3] == 32);
  CHECK(c.weight_sizes[0] == 64);
  CHECK(c.weight_sizes[2] == 3);
}

TEST_CASE("adaptive: a class-mate's choice is borrowed, then replaced when the key is timed") {
  FakeOp op = two_regimes();
  AlgoCache cache;
  AlgoSettingsGuard guard(adaptive());

  CHECK(op.choose(cache, 5) == "a");  // timed: no class-mate yet
  CHECK(op.peek(cache, 5)->source == ChoiceSource::benchmark);
  CHECK(cache.stats().benchmarks == 1);

  CHECK(op.choose(cache, 7) == "a");  // class of 8: borrowed from 5, not timed
  CHECK(op.peek(cache, 7)->source == ChoiceSource::borrowed);
  CHECK(cache.stats().benchmarks == 1);
  CHECK(cache.stats().borrowed == 1);
  CHECK(op.choose(cache, 6) == "a");  // borrowed too
  CHECK(op.choose(cache, 7) == "a");  // the steady pool is empty: stays borrowed
  CHECK(cache.stats().benchmarks == 1);

  CHECK(op.choose(cache, 9) == "b");  // another class (16): timed
  CHECK(cache.stats().benchmarks == 2);

  // A step boundary grants the steady pool: the borrowed entries are timed at their next lookup.
  CHECK(cache.tune_pending() == 2);
  CHECK(op.choose(cache, 7) == "b");
  CHECK(op.peek(cache, 7)->source == ChoiceSource::benchmark);
  CHECK(op.choose(cache, 6) == "b");
  AlgoCacheStats s = cache.stats();
  CHECK(s.benchmarks == 4);
  CHECK(s.retimed == 2);
  CHECK(cache.tune_pending() == 0);
  op.choose(cache, 7);
  CHECK(cache.stats().benchmarks == 4);  // a hit on a timed entry
}

TEST_CASE("adaptive: only the cost model's top k candidates are timed") {
  FakeOp op({{"c1", 1.0, true, 0, INT64_MAX, fixed_us(300)},
             {"c2", 2.0, true, 0, INT64_MAX, fixed_us(100)},
             {"c3", 3.0, true, 0, INT64_MAX, fixed_us(0)},
             {"c4", 4.0, true, 0, INT64_MAX, fixed_us(0)}});
  AlgoCache cache;
  AlgoSettingsGuard guard(adaptive(/*top_k=*/2));
  CHECK(op.choose(cache, 10) == "c2");  // c3 and c4 are faster but outside the top 2
  CHECK(op.log().count("c3") == 0);
  CHECK(op.log().count("c4") == 0);
  AlgoCacheStats s = cache.stats();
  CHECK(s.candidates_timed == 2);
  CHECK(s.candidates_beyond_top_k == 2);

  AlgoSettingsGuard all(adaptive(/*top_k=*/10));
  std::string fastest = op.choose(cache, 1000);
  CHECK((fastest == "c3" || fastest == "c4"));
}

TEST_CASE("adaptive: the per-op key budget bounds the keys timed in a shape storm") {
  FakeOp op = two_regimes();
  AlgoCache cache;
  AlgoSettingsGuard guard(adaptive(3, /*keys=*/3));
  for (int64_t n = 1; n <= 300; ++n) op.choose(cache, n);
  for (int64_t n = 1; n <= 300; n += 7) op.choose(cache, n);
  cache.tune_pending();
  for (int64_t n = 1; n <= 300; ++n) op.choose(cache, n);
  AlgoCacheStats s = cache.stats();
  CHECK(s.benchmarks == 3);
  CHECK(s.budget_fallbacks > 0);
  CHECK(s.borrowed > 0);
  // Every key is cached, timed or not.
  for (int64_t n = 1; n <= 300; ++n) CHECK(op.peek(cache, n).has_value());
}

TEST_CASE("adaptive: the timing budget bounds timing; heuristic entries are timed later") {
  FakeOp op({{"slow", 1.0, true, 0, INT64_MAX, fixed_us(2000)},
             {"fast", 2.0, true, 0, INT64_MAX, fixed_us(1000)}});
  AlgoCache cache;
  // A 1 ms warm-up pool and an empty steady pool: one key is timed (its timing overruns it).
  AlgoSettingsGuard guard(adaptive(3, 32, /*initial_ms=*/1, /*step_ms=*/1e6, /*share=*/0));
  CHECK(op.choose(cache, 4) == "fast");
  CHECK(op.choose(cache, 100) == "slow");  // another class, budget spent: the heuristic
  CHECK(op.peek(cache, 100)->source == ChoiceSource::heuristic);
  CHECK(op.choose(cache, 1000) == "slow");
  AlgoCacheStats s = cache.stats();
  CHECK(s.benchmarks == 1);
  CHECK(s.budget_fallbacks == 2);

  cache.tune_pending();  // a step boundary: the heuristic entries are timed at their next use
  CHECK(op.choose(cache, 100) == "fast");
  CHECK(op.peek(cache, 100)->source == ChoiceSource::benchmark);
  CHECK(cache.stats().retimed >= 1);
}

TEST_CASE("adaptive: the steady pool refills with wall time (timing_share)") {
  FakeOp op = two_regimes();
  AlgoCache cache;
  AlgoSettingsGuard guard(adaptive(3, 32, 1e6, /*step_ms=*/50, /*share=*/1.0));
  CHECK(op.choose(cache, 5) == "a");
  CHECK(op.choose(cache, 7) == "a");                          // borrowed
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // 5 ms of wall time: 5 ms of pool
  CHECK(op.choose(cache, 7) == "b");                          // re-timed without a tune_pending
  CHECK(cache.stats().retimed == 1);
}

TEST_CASE("adaptive and benchmark: nothing is timed while a capture is under way") {
  FakeOp op = two_regimes();
  AlgoCache cache;
  AlgoSettingsGuard guard(adaptive());
  {
    FakeCapture capture;
    CHECK(current_stream_is_capturing(Device::cpu()));
    CHECK(op.choose(cache, 7) == "a");  // no class-mate: the heuristic, untimed
    CHECK(op.peek(cache, 7)->source == ChoiceSource::heuristic);
    cache.tune_pending();
    CHECK(op.choose(cache, 7) == "a");  // pending, but capturing: kept
    {
      AlgoModeGuard benchmark(AlgoMode::benchmark);
      CHECK(op.choose(cache, 100) == "a");
    }
    AlgoCacheStats s = cache.stats();
    CHECK(s.benchmarks == 0);
    CHECK(s.candidates_timed == 0);
    CHECK(s.capture_fallbacks >= 3);
  }
  CHECK_FALSE(current_stream_is_capturing(Device::cpu()));
  CHECK(op.choose(cache, 7) == "b");  // after the capture: timed at the next lookup
  CHECK(op.peek(cache, 7)->source == ChoiceSource::benchmark);
}

TEST_CASE("deterministic mode stays deterministic beside adaptive mode") {
  auto make = [] {
    return FakeOp({{"racy", 0.5, /*deterministic=*/false, 0, INT64_MAX, fixed_us(0)},
                   {"det_slow_cheap", 1.0, true, 0, INT64_MAX, fixed_us(500)},
                   {"det_fast", 2.0, true, 0, INT64_MAX, fixed_us(0)}});
  };
  FakeOp op = make();
  AlgoCache warmed, fresh;
  {
    AlgoSettingsGuard guard(adaptive());
    for (int64_t n : {8, 7, 30}) op.choose(warmed, n);  // timed and borrowed entries
  }
  AlgoModeGuard det(AlgoMode::deterministic);
  for (int64_t n : {8, 7, 30, 31}) {
    const std::string a = op.choose(warmed, n), b = op.choose(fresh, n);
    CHECK(a == "det_slow_cheap");  // the heuristic among deterministic candidates
    CHECK(a == b);
    CHECK(op.peek(warmed, n)->source == ChoiceSource::heuristic);
  }
  CHECK(fresh.stats().benchmarks == 0);
  CHECK(fresh.stats().borrowed == 0);
}

TEST_CASE("adaptive: EMBER_LOG_ALGOS says how each decision was made") {
  FakeOp op({{"slow", 1.0, true, 0, INT64_MAX, fixed_us(2000)},
             {"fast", 2.0, true, 0, INT64_MAX, fixed_us(0)},
             {"third", 3.0, true, 0, INT64_MAX, fixed_us(0)}});
  AlgoCache cache;
  LogCapture log;
  {
    AlgoSettingsGuard guard(adaptive(/*top_k=*/2, 32, /*initial_ms=*/1, 1e6, 0));
    op.choose(cache, 5);     // timed, overruns the 1 ms pool
    op.choose(cache, 7);     // borrowed from 5
    op.choose(cache, 1000);  // another class, budget spent: heuristic
    {
      FakeCapture capture;
      op.choose(cache, 3000);  // capturing
    }
    cache.tune_pending();
    op.choose(cache, 7);  // re-timed
  }
  CHECK(log.count("timed (top 2 of 3)") == 2);
  CHECK(log.count("third (outside the top 2)") == 2);
  CHECK(log.count("borrowed from " + op.name() + ".forward cpu in=[5]") == 1);
  CHECK(log.count("heuristic (timing budget spent)") == 1);
  CHECK(log.count("heuristic (capturing)") == 1);
  CHECK(log.count("replaces the borrowed choice fast") == 1);
  for (const std::string& l : log.lines) CHECK(l.find(op.name() + ".forward") == 0);
  CHECK(log.lines.size() == 5);
}

TEST_CASE("adaptive: the saved cache holds timed entries only") {
  FakeOp op = two_regimes();
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ember_adaptive_" + op.name() + ".json")).string();
  {
    AlgoCache cache;
    AlgoSettingsGuard guard(adaptive());
    op.choose(cache, 5);  // timed
    op.choose(cache, 7);  // borrowed
    op.choose(cache, 6);  // borrowed
    CHECK(cache.stats().borrowed == 2);
    cache.save(path);
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str().find("borrowed") == std::string::npos);
  AlgoCache loaded;
  AlgoCacheLoadResult r = loaded.load(path);
  CHECK(r.loaded);
  CHECK(r.entries == 1);
  CHECK(op.peek(loaded, 5)->source == ChoiceSource::benchmark);
  CHECK_FALSE(op.peek(loaded, 7).has_value());
  CHECK_FALSE(op.peek(loaded, 6).has_value());
  {
    // A loaded timed key is a class-mate too: a new key of its class borrows, untimed.
    AlgoSettingsGuard guard(adaptive());
    CHECK(op.choose(loaded, 8) == "a");
    CHECK(op.peek(loaded, 8)->source == ChoiceSource::borrowed);
    CHECK(loaded.stats().benchmarks == 0);
  }
  std::filesystem::remove(path);
}
