// The CPU bar table of issue 38, Ember side; bench/cpu_torch.cpp is its libtorch C++ twin (same
// rows, models, inputs, thread count, warm-up and medians) and scripts/bench_cpu.sh runs both and
// prints the table with the bars. Rows:
//   resnet18_step  ResNet-18 with the CIFAR stem (examples/resnet's model) on 28x28x1
//                  (Fashion-MNIST shaped) synthetic images, batch 64, float32, NCHW: one full
//                  training step (forward, cross-entropy, backward, SGD momentum 0.9 / weight decay
//                  5e-4 / lr 0.02 step, gradients dropped): ms per step, images/s
//   lstm_fwdbwd    nn::LSTM 128 -> 256 (one layer), T = 50, batch 32, seq-major: the training
//                  forward and output.sum().backward() (weight gradients dropped each step): ms
//   matmul         1024 x 1024 x 1024 float32 through ember::matmul: GFLOP/s over 2 M N K flops
//   matmul_blas    the same product through cblas_sgemm directly (OpenBLAS's own rate; needs the
//                  bench built against a CBLAS, EMBER_BENCH_HAVE_CBLAS, else "skipped")
//   add            a.add_(b) on two float32 tensors of 2^26 elements, beside std::memcpy of one of
//                  them (one thread, and split over the same thread count): GB/s. Bytes count the
//                  memory traffic each side needs at least, reads plus writes: add_ reads a and b
//                  and writes a (3 * 4 * 2^26 bytes), memcpy reads its source and writes its
//                  destination (2 * 4 * 2^26 bytes). a + b into a fresh tensor is reported too
//                  (add_alloc_GBps: the same 3 * 4 * 2^26 bytes, plus the new pages' first touch).
//   tiny_op        add_ of two 1-element float32 tensors in a loop: microseconds per op (the
//                  host's per-op overhead: checks, dispatch, autograd bookkeeping)
// Timing: wall clock. Every row runs its warm-up calls, then `reps` samples (each the mean of
// `iters` calls; the model rows time single steps) and reports the median, with min and max.
// Every row prints a JSON line on stdout ({"bench":"cpu","impl":"ember","row":...}) and, unless
// --json, a human line starting with "# ". The ResNet step's loss must fall on its repeated batch
// (correct-first), else the row reports "correct":false and the exit status is 1.
//
//   bench_cpu [--rows resnet18_step,lstm_fwdbwd,matmul,matmul_blas,add,tiny_op] [--threads N]
//             [--json] [--steps N] [--warmup N] [--algo-mode heuristic|benchmark|...]
// --threads N calls ember::set_num_threads(N) (and OpenBLAS's for matmul_blas); without it, the
// default (EMBER_NUM_THREADS, else every hardware thread) stays. The algorithm cache runs in
// heuristic mode unless --algo-mode says otherwise (the CPU examples' default: no first-step
// timing of candidates).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#ifdef EMBER_BENCH_HAVE_CBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);  // OpenBLAS's own; present in every OpenBLAS
#endif

#include "cpu_harness.h"
#include "ember/dispatch/algo_cache.h"
#include "ember/ember.h"
#include "ember/nn/nn.h"
#include "ember/tensor/parallel.h"
#include "models/varying.h"
#include "resnet/resnet.h"

using namespace ember;

namespace {

using cpu_bench::Clock;
using cpu_bench::emit;
using cpu_bench::ms_since;
using cpu_bench::Samples;
using cpu_bench::samples_json;
using cpu_bench::summarize;
using cpu_bench::time_cpu;

// The common options, and the algorithm-cache mode of the ResNet row.
struct Options : cpu_bench::Options {
  dispatch::AlgoMode algo_mode = dispatch::AlgoMode::heuristic;
};

int threads_in_use() { return get_num_threads(); }

bool row_resnet18(const Options& o) {
  manual_seed(0);
  resnet::ResNetOptions ro;
  ro.arch = "resnet18";
  ro.stem = "cifar";
  ro.in_channels = 1;
  ro.num_classes = 10;
  const int64_t batch = 64;
  auto model = std::make_shared<resnet::ResNetImpl>(ro);
  const Tensor x = bench::synthetic_images({batch, 1, 28, 28}, 0, Device::cpu());
  const Tensor y = bench::synthetic_labels(batch, 0, 10, Device::cpu());
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.02).momentum(0.9).weight_decay(5e-4));
  std::vector<double> losses;
  auto step = [&] {
    Tensor loss = cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    opt.zero_grad(/*set_to_none=*/true);
    losses.push_back(loss.item());
  };
  dispatch::AlgoModeGuard mode(o.algo_mode);
  auto t0 = Clock::now();
  step();
  const double first_ms = ms_since(t0);
  for (int i = 1; i < o.warmup; ++i) step();
  std::vector<double> ms;
  for (int i = 0; i < o.steps; ++i) {
    t0 = Clock::now();
    step();
    ms.push_back(ms_since(t0));
  }
  const Samples s = summarize(ms);
  bool finite = true;
  for (double l : losses) finite = finite && std::isfinite(l);
  const bool ok = finite && losses.back() < losses.front();
  std::ostringstream j, h;
  j << samples_json("ms", s) << ",\"img_per_s\":" << double(batch) / (s.median / 1e3)
    << ",\"first_step_ms\":" << first_ms << ",\"steps\":" << o.steps << ",\"warmup\":" << o.warmup
    << ",\"algo_mode\":\"" << dispatch::algo_mode_name(o.algo_mode)
    << "\",\"loss_first\":" << losses.front() << ",\"loss_last\":" << losses.back()
    << ",\"correct\":" << (ok ? "true" : "false");
  h.precision(4);
  h << "ResNet-18 CIFAR stem 28x28x1 b64 f32 train step: " << s.median << " ms (min " << s.min
    << ", max " << s.max << "), " << double(batch) / (s.median / 1e3) << " img/s, first step "
    << first_ms << " ms, loss " << losses.front() << " -> " << losses.back();
  emit(o, "resnet18_step", j.str(), h.str());
  return ok;
}

void row_lstm(const Options& o) {
  manual_seed(0);
  nn::LSTM lstm(nn::LSTMOptions(128, 256));
  const Tensor x = randn({50, 32, 128});
  std::vector<Tensor> params = lstm->parameters();
  auto step = [&] {
    Tensor out = lstm->forward(x).output;
    out.sum().backward();
    for (Tensor& p : params) p.set_grad(Tensor());
  };
  const Samples s = time_cpu(step, o.warmup, std::max(o.steps, 5), 1);
  std::ostringstream h;
  h.precision(4);
  h << "LSTM 128->256 T50 b32 f32 forward+backward: " << s.median << " ms (min " << s.min
    << ", max " << s.max << ")";
  emit(o, "lstm_fwdbwd", samples_json("ms", s), h.str());
}

constexpr int64_t kGemm = 1024;

void row_matmul(const Options& o) {
  manual_seed(0);
  const Tensor a = randn({kGemm, kGemm}), b = randn({kGemm, kGemm});
  const Samples s = time_cpu([&] { (void)matmul(a, b); }, 2, 7, 2);
  const double gflop = 2.0 * double(kGemm) * double(kGemm) * double(kGemm) / 1e9;
  std::ostringstream j, h;
  j << samples_json("ms", s) << ",\"GFLOPs\":" << gflop / (s.median / 1e3);
  h.precision(4);
  h << "matmul 1024^3 f32 (ember::matmul): " << s.median << " ms, " << gflop / (s.median / 1e3)
    << " GFLOP/s";
  emit(o, "matmul", j.str(), h.str());
}

void row_matmul_blas(const Options& o) {
#ifdef EMBER_BENCH_HAVE_CBLAS
  openblas_set_num_threads(threads_in_use());  // the same thread count as Ember
  const size_t n = size_t(kGemm) * size_t(kGemm);
  std::vector<float> a(n), b(n), c(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = float(std::sin(0.001 * double(i)));
    b[i] = float(std::cos(0.002 * double(i)));
  }
  const int m = int(kGemm);
  const Samples s = time_cpu(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m, m, 1.0f, a.data(), m, b.data(),
                    m, 0.0f, c.data(), m);
      },
      2, 7, 2);
  const double gflop = 2.0 * double(kGemm) * double(kGemm) * double(kGemm) / 1e9;
  std::ostringstream j, h;
  j << samples_json("ms", s) << ",\"GFLOPs\":" << gflop / (s.median / 1e3);
  h.precision(4);
  h << "matmul 1024^3 f32 (cblas_sgemm directly): " << s.median << " ms, "
    << gflop / (s.median / 1e3) << " GFLOP/s";
  emit(o, "matmul_blas", j.str(), h.str());
#else
  emit(o, "matmul_blas", ",\"skipped\":\"no BLAS\"", "skipped: no BLAS (no cblas.h at configure)");
#endif
}

// std::memcpy of `bytes` from src to dst, split into `parts` contiguous slices, one per thread
// (parts == 1: on the calling thread).
void split_memcpy(char* dst, const char* src, size_t bytes, int parts) {
  if (parts <= 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  std::vector<std::thread> workers;
  const size_t chunk = (bytes + size_t(parts) - 1) / size_t(parts);
  for (int p = 0; p < parts; ++p) {
    const size_t lo = std::min(bytes, size_t(p) * chunk), hi = std::min(bytes, lo + chunk);
    workers.emplace_back([=] { std::memcpy(dst + lo, src + lo, hi - lo); });
  }
  for (auto& w : workers) w.join();
}

void row_add(const Options& o) {
  const int64_t n = int64_t(1) << 26;
  Tensor a = full({n}, 1.0), b = full({n}, 1e-3);
  const double add_bytes = 3.0 * 4.0 * double(n), copy_bytes = 2.0 * 4.0 * double(n);
  const Samples add = time_cpu([&] { a.add_(b); }, 2, 7, 2);
  const Samples alloc = time_cpu([&] { (void)(a + b); }, 1, 5, 1);
  std::vector<float> src(size_t(n), 1.0f), dst(size_t(n), 0.0f);
  auto* d = reinterpret_cast<char*>(dst.data());
  const auto* s = reinterpret_cast<const char*>(src.data());
  const Samples copy1 = time_cpu([&] { split_memcpy(d, s, copy_bytes / 2, 1); }, 2, 7, 2);
  const int parts = std::max(1, threads_in_use());
  const Samples copyn = time_cpu([&] { split_memcpy(d, s, copy_bytes / 2, parts); }, 2, 7, 2);
  auto gbps = [](double bytes, double ms) { return bytes / (ms / 1e3) / 1e9; };
  const double memcpy_best =
      std::max(gbps(copy_bytes, copy1.median), gbps(copy_bytes, copyn.median));
  const double add_gbps = gbps(add_bytes, add.median);
  std::ostringstream j, h;
  j << samples_json("ms", add) << ",\"GBps\":" << add_gbps
    << ",\"add_alloc_GBps\":" << gbps(add_bytes, alloc.median)
    << ",\"memcpy_1thread_GBps\":" << gbps(copy_bytes, copy1.median)
    << ",\"memcpy_threads\":" << parts << ",\"memcpy_GBps\":" << gbps(copy_bytes, copyn.median)
    << ",\"memcpy_best_GBps\":" << memcpy_best << ",\"ratio_to_memcpy\":" << add_gbps / memcpy_best
    << ",\"bytes_add\":" << add_bytes << ",\"bytes_memcpy\":" << copy_bytes;
  h.precision(4);
  h << "add_ f32 2^26: " << add_gbps
    << " GB/s (reads+writes; a + b fresh: " << gbps(add_bytes, alloc.median) << ") vs memcpy "
    << gbps(copy_bytes, copy1.median) << " GB/s (1 thread), " << gbps(copy_bytes, copyn.median)
    << " GB/s (" << parts << " threads): " << 100 * add_gbps / memcpy_best << "% of the better";
  emit(o, "add", j.str(), h.str());
}

void row_tiny_op(const Options& o) {
  Tensor a = zeros({1}), b = ones({1});
  const int iters = 100000;
  const Samples s = time_cpu([&] { a.add_(b); }, iters, 7, iters);
  std::ostringstream j, h;
  j << ",\"us\":" << s.median * 1e3 << ",\"min_us\":" << s.min * 1e3
    << ",\"max_us\":" << s.max * 1e3;
  h.precision(4);
  h << "1-element add_: " << s.median * 1e3 << " us/op (min " << s.min * 1e3 << ")";
  emit(o, "tiny_op", j.str(), h.str());
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  o.impl = "ember";
  o.threads_in_use = threads_in_use;
  CLI::App app("bench_cpu: issue 38's CPU rows (Ember's side; bench/cpu_torch.cpp is libtorch's)");
  cpu_bench::add_common_flags(app, o);
  std::string algo_mode = dispatch::algo_mode_name(o.algo_mode);
  app.add_option("--algo-mode", algo_mode, "algorithm-cache mode of the ResNet row");
  CLI11_PARSE(app, argc, argv);
  o.algo_mode = dispatch::algo_mode_from_name(algo_mode);
  if (o.threads > 0) set_num_threads(o.threads);
  return cpu_bench::run_rows(o, {
                                    {"resnet18_step", [&] { return row_resnet18(o); }},
                                    {"lstm_fwdbwd", [&] { return row_lstm(o), true; }},
                                    {"matmul", [&] { return row_matmul(o), true; }},
                                    {"matmul_blas", [&] { return row_matmul_blas(o), true; }},
                                    {"add", [&] { return row_add(o), true; }},
                                    {"tiny_op", [&] { return row_tiny_op(o), true; }},
                                });
}
