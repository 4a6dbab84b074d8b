// Foundation benchmarks (GPU): a large elementwise add against the copy bandwidth, GEMMs through
// Ember's cuBLAS wrapper, and the host cost of issuing one tiny CUDA op from C++. The PyTorch
// side is bench/foundation.py; scripts/gpu_run.sh runs both in one invocation and
// scripts/bench_report.py prints the ratios. Prints one JSON line per measurement.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "ember/ember.h"
#include "timing.h"

using namespace ember;

namespace {

using bench::time_ms;

void emit(const char* bench, const char* impl, const char* shape, double ms, const char* metric,
          double value) {
  std::printf("{\"bench\":\"%s\",\"impl\":\"%s\",\"shape\":\"%s\",\"ms\":%.6f,\"%s\":%.3f}\n",
              bench, impl, shape, ms, metric, value);
  std::fflush(stdout);
}

}  // namespace

int main() {
  if (!cuda::is_available()) {
    std::printf("{\"bench\":\"foundation\",\"skipped\":\"no GPU\"}\n");
    return 0;
  }
  Device dev = Device::cuda();
  auto opts = TensorOptions().with_device(dev);
  manual_seed(0);

  // 1) Elementwise add, fp32 and bf16: 2 reads + 1 write.
  for (DType dt : {DType::f32, DType::bf16}) {
    const int64_t n = int64_t(1) << 28;
    Tensor a = randn({n}, TensorOptions(dt).with_device(dev)),
           b = randn({n}, TensorOptions(dt).with_device(dev));
    Tensor out = empty({n}, TensorOptions(dt).with_device(dev));
    // The op the user calls allocates its output; the caching allocator reuses the block.
    double ms = time_ms([&] { out = a + b; });
    double gbs = 3.0 * double(n) * double(element_size(dt)) / (ms * 1e6);
    emit("add", "ember", dt == DType::f32 ? "2^28 f32" : "2^28 bf16", ms, "GBps", gbs);
  }

  // 1b) The tensor operators (remainder, bitwise, comparisons with a number) against a same-size
  // copy: bytes moved per second, and that as a fraction of the copy's.
  {
    const int64_t n = int64_t(1) << 28;
    Tensor f = randn({n}, TensorOptions(DType::f32).with_device(dev));
    Tensor g = rand({n}, TensorOptions(DType::f32).with_device(dev)) + 0.5;
    Tensor i = randint(-1000, 1000, {n}, TensorOptions(DType::i32).with_device(dev));
    Tensor j = randint(-1000, 1000, {n}, TensorOptions(DType::i32).with_device(dev));
    Tensor copy_out = empty({n}, TensorOptions(DType::f32).with_device(dev));
    const double copy_ms = time_ms([&] { copy_out.copy_(f); });
    const double copy_gbs = 2.0 * double(n) * 4 / (copy_ms * 1e6);
    emit("elementwise_op", "ember", "copy 2^28 f32", copy_ms, "GBps", copy_gbs);
    struct Op {
      const char* shape;
      std::function<Tensor()> run;
      double bytes_per_element;
    };
    Tensor out;
    for (const Op& op : {Op{"a % b 2^28 f32", [&] { return f % g; }, 12},
                         Op{"a % 7 2^28 i32", [&] { return i % 7; }, 8},
                         Op{"a & b 2^28 i32", [&] { return i & j; }, 12},
                         Op{"a ^ 5 2^28 i32", [&] { return i ^ 5; }, 8},
                         Op{"a > 0.5 2^28 f32", [&] { return f > 0.5; }, 5},
                         Op{"a == b 2^28 i32", [&] { return i == j; }, 9}}) {
      const double ms = time_ms([&] { out = op.run(); });
      const double gbs = op.bytes_per_element * double(n) / (ms * 1e6);
      std::printf(
          "{\"bench\":\"elementwise_op\",\"impl\":\"ember\",\"shape\":\"%s\",\"ms\":%.6f,"
          "\"GBps\":%.3f,\"of_copy\":%.3f}\n",
          op.shape, ms, gbs, gbs / copy_gbs);
      std::fflush(stdout);
    }
  }

  // 2) GEMMs through the wrapper.
  struct G {
    int64_t m, n, k;
    DType dt;
    bool tf32;
    const char* name;
  };
  for (G g : {G{8192, 8192, 8192, DType::bf16, false, "8192^3 bf16"},
              G{4096, 4096, 4096, DType::bf16, false, "4096^3 bf16"},
              G{8192, 8192, 8192, DType::f32, true, "8192^3 tf32"},
              G{4096, 4096, 4096, DType::f32, false, "4096^3 fp32"},
              G{1024, 1024, 1024, DType::bf16, false, "1024^3 bf16"}}) {
    set_matmul_allow_tf32(g.tf32);
    Tensor a = randn({g.m, g.k}, TensorOptions(g.dt).with_device(dev));
    Tensor b = randn({g.k, g.n}, TensorOptions(g.dt).with_device(dev));
    Tensor c;
    double ms = time_ms([&] { c = matmul(a, b); }, g.m >= 8192 ? 5 : 20);
    emit("matmul", "ember", g.name, ms, "TFLOPs", 2.0 * g.m * g.n * g.k / (ms * 1e9));
  }
  set_matmul_allow_tf32(false);

  // 3) Host cost of one tiny CUDA op (in-place add on a one-element tensor), issued from C++.
  // Timed in bursts of kBurst ops, shorter than the launch queue, with the stream drained between
  // bursts (untimed): back-to-back launches fill the queue after ~1000 kernels, and from then on
  // the loop runs at the GPU's rate of executing tiny kernels, not at the host's rate of issuing
  // them. Both figures are printed; the burst one is the host cost.
  {
    Tensor x = zeros({1}, opts);
    for (int i = 0; i < 1000; ++i) add_(x, 1.0);
    current_stream(dev).synchronize();
    constexpr int kBurst = 256, kBursts = 200;
    auto burst_us = [&](auto&& op) {
      double total = 0;
      for (int b = 0; b < kBursts; ++b) {
        current_stream(dev).synchronize();
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < kBurst; ++i) op();
        total += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                     .count();
      }
      current_stream(dev).synchronize();
      return total / (kBurst * kBursts);
    };
    const double add_us = burst_us([&] { add_(x, 1.0); });
    const bool correct = x.item() == double(1000 + kBurst * kBursts);
    std::printf(
        "{\"bench\":\"tiny_op_host\",\"impl\":\"ember\",\"shape\":\"add_ 1 "
        "elem\",\"us_per_op\":%.3f,\"correct\":%s}\n",
        add_us, correct ? "true" : "false");
    // The same with the out-of-place op (allocates its output from the caching allocator).
    Tensor y = zeros({1}, opts), z;
    std::printf(
        "{\"bench\":\"tiny_op_host\",\"impl\":\"ember\",\"shape\":\"y + 1 "
        "(allocates)\",\"us_per_op\":%.3f}\n",
        burst_us([&] { z = y + 1.0; }));
    // 100k back-to-back: bound by how fast the GPU retires tiny kernels once the queue is full.
    const int n = 100000;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) add_(x, 1.0);
    auto t1 = std::chrono::steady_clock::now();
    current_stream(dev).synchronize();
    std::printf(
        "{\"bench\":\"tiny_op_host\",\"impl\":\"ember\",\"shape\":\"add_ 1 elem, 100k back to "
        "back\",\"us_per_op\":%.3f}\n",
        std::chrono::duration<double, std::micro>(t1 - t0).count() / n);
  }
  return 0;
}
