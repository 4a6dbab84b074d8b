// The harness that bench/cpu.cpp (Ember) and its libtorch twin bench/cpu_torch.cpp share, so that
// both sides time, parse flags and report the same way: timing of a CPU callable (median, min and
// max of samples), the common options (CLI11), a row's JSON and human lines, and the row runner.
// Standard C++17 and CLI11 only: the twin does not link Ember.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace cpu_bench {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Samples {
  double median = 0, min = 0, max = 0;
};

// Linear between the two nearest samples, as bench/models/varying.h.
inline double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const size_t lo = size_t(pos), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - double(lo)) * (v[hi] - v[lo]);
}

inline Samples summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {percentile(v, 0.5), v.front(), v.back()};
}

// `warmup` calls of f, then `reps` samples, each the mean ms of `iters` back-to-back calls.
template <typename F>
Samples time_cpu(F&& f, int warmup, int reps, int iters) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> v;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) f();
    v.push_back(ms_since(t0) / iters);
  }
  return summarize(std::move(v));
}

struct Options {
  std::string impl;                     // "ember" or "libtorch": the JSON lines' "impl"
  std::function<int()> threads_in_use;  // the side's thread count, for the JSON lines
  std::vector<std::string> rows = {"resnet18_step", "lstm_fwdbwd", "matmul",
                                   "matmul_blas",   "add",         "tiny_op"};
  int threads = 0;  // 0: the side's default
  bool json_only = false;
  int steps = 10, warmup = 3;
};

// The flags both sides take, on `app` (a side adds its own before calling CLI11_PARSE).
inline void add_common_flags(CLI::App& app, Options& o) {
  app.add_option("--rows", o.rows, "rows to run")->delimiter(',');
  app.add_option("--threads", o.threads, "threads (0: the default)")->check(CLI::NonNegativeNumber);
  app.add_flag("--json", o.json_only, "JSON lines only");
  app.add_option("--steps", o.steps, "timed training steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "warm-up steps")->check(CLI::PositiveNumber);
}

// Prints the row's JSON line ("bench", "impl", "row", "threads" first, then `fields`, which start
// with a comma) and its human line.
inline void emit(const Options& o, const std::string& row, const std::string& fields,
                 const std::string& human) {
  std::printf("{\"bench\":\"cpu\",\"impl\":\"%s\",\"row\":\"%s\",\"threads\":%d%s}\n",
              o.impl.c_str(), row.c_str(), o.threads_in_use(), fields.c_str());
  if (!o.json_only) std::printf("# %-14s %s\n", row.c_str(), human.c_str());
  std::fflush(stdout);
}

inline std::string samples_json(const char* key, const Samples& s) {
  std::ostringstream j;
  j << ",\"" << key << "\":" << s.median << ",\"min_" << key << "\":" << s.min << ",\"max_" << key
    << "\":" << s.max;
  return j.str();
}

using Rows = std::vector<std::pair<std::string, std::function<bool()>>>;

// Runs the rows o.rows names, in that order; a row that throws prints an error line. Returns the
// exit status: 0 when every row ran and was correct, 1 otherwise, 2 for an unknown row.
inline int run_rows(const Options& o, const Rows& rows) {
  bool ok = true;
  for (const std::string& want : o.rows) {
    auto it =
        std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return r.first == want; });
    if (it == rows.end()) {
      std::fprintf(stderr, "bench_cpu (%s): unknown row '%s'\n", o.impl.c_str(), want.c_str());
      return 2;
    }
    try {
      ok = it->second() && ok;
    } catch (const std::exception& e) {
      std::printf("{\"bench\":\"cpu\",\"impl\":\"%s\",\"row\":\"%s\",\"error\":\"%s\"}\n",
                  o.impl.c_str(), want.c_str(), e.what());
      ok = false;
    }
  }
  return ok ? 0 : 1;
}

}  // namespace cpu_bench
