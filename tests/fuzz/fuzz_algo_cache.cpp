// Fuzz target: the algorithm-cache file reader (dispatch::AlgoCache::load). The reader never
// throws for a bad file (it warns and ignores it), so any exception or sanitizer report is a bug.
// A loaded file's stamp must equal this machine's (CPU model, Ember version), so the seeds hold
// the placeholders @CPU_MODEL@ and @EMBER_VERSION@ and the target substitutes this machine's
// values before loading: mutations then reach the entries on any machine.
// The reader warns on stderr for every rejected file: scripts/fuzz.sh runs this target with
// -close_fd_mask=2 (libFuzzer keeps its own and the sanitizers' output).
#include <fstream>
#include <sstream>

#include "fuzz_support.h"

using namespace ember;

namespace {
void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
    s.replace(pos, from.size(), to);
}
}  // namespace

namespace ember_fuzz {
void write_seeds(const std::string& dir) {
  // Benchmark a few CPU convolutions, as a training run with EMBER_ALGO_MODE=benchmark would.
  dispatch::AlgoModeGuard mode(dispatch::AlgoMode::benchmark);
  manual_seed(3);
  Tensor x = randn({2, 3, 8, 8}).requires_grad_();
  Tensor w = randn({4, 3, 3, 3}).requires_grad_();
  Conv2dParams p;
  p.padding = {1, 1};
  conv2d(x, w, {}, p).sum().backward();
  conv2d(randn({1, 3, 9, 9}), randn({2, 3, 1, 1})).sum();
  const std::string saved = scratch_dir() + "/seed.json";
  dispatch::algo_cache().save(saved);
  std::ifstream in(saved);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  const dispatch::AlgoCacheStamp stamp = dispatch::current_algo_cache_stamp();
  replace_all(s, "\"" + stamp.cpu_model + "\"", "\"@CPU_MODEL@\"");
  replace_all(s, "\"" + stamp.ember_version + "\"", "\"@EMBER_VERSION@\"");
  write_text(dir + "/benchmarked.json", s);
  write_text(dir + "/empty.json",
             R"({"format": "ember-algo-cache", "format_version": 1, "stamp": {"ember_version": )"
             R"("@EMBER_VERSION@", "gpu_name": "none", "compute_capability": [0, 0], )"
             R"("cuda_runtime_version": 0, "cuda_driver_version": 0, "cpu_model": "@CPU_MODEL@"}, )"
             R"("entries": []})");
}
}  // namespace ember_fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const dispatch::AlgoCacheStamp stamp = dispatch::current_algo_cache_stamp();
  static dispatch::AlgoCache* cache = new dispatch::AlgoCache();
  std::string text(reinterpret_cast<const char*>(data), size);
  replace_all(text, "@CPU_MODEL@", stamp.cpu_model);
  replace_all(text, "@EMBER_VERSION@", stamp.ember_version);
  const std::string path = ember_fuzz::write_file(
      "algo_cache.json", reinterpret_cast<const uint8_t*>(text.data()), text.size());
  ember_fuzz::expect_only_ember_errors("AlgoCache::load", [&] {
    try {
      cache->load(path);
    } catch (const Error& e) {
      std::printf("ember fuzz: AlgoCache::load threw (it must only warn): %s\n", e.what());
      std::fflush(stdout);
      std::abort();
    }
  });
  cache->clear();
  return 0;
}
