// Sort, topk and scan benchmarks (GPU): sort and topk on 2^24 keys and on 4096 rows x 32768, and
// cumsum over 2^28 elements against the copy bandwidth it needs (one read, one write). The PyTorch
// side is bench/sort.py (the same rows, the same JSON lines).
#include <cstdio>

#include "ember/ember.h"
#include "timing.h"

using namespace ember;

namespace {

using bench::time_ms;

void emit(const char* bench, const char* shape, double ms, const char* metric, double value) {
  std::printf("{\"bench\":\"%s\",\"impl\":\"ember\",\"shape\":\"%s\",\"ms\":%.6f,\"%s\":%.3f}\n",
              bench, shape, ms, metric, value);
  std::fflush(stdout);
}

}  // namespace

int main() {
  if (!cuda::is_available()) {
    std::printf("{\"bench\":\"sort\",\"skipped\":\"no GPU\"}\n");
    return 0;
  }
  const Device dev = Device::cuda();
  manual_seed(0);
  const int64_t n24 = int64_t(1) << 24;
  {
    Tensor x = randn({n24}, TensorOptions(DType::f32).with_device(dev));
    double ms = time_ms([&] { (void)sort(x); });
    emit("sort", "2^24 f32", ms, "Gkeys_per_s", double(n24) / (ms * 1e6));
    ms = time_ms([&] { (void)topk(x, 100); });
    emit("topk", "2^24 f32, k 100", ms, "Gkeys_per_s", double(n24) / (ms * 1e6));
  }
  {
    const int64_t rows = 4096, cols = 32768;
    Tensor x = randn({rows, cols}, TensorOptions(DType::f32).with_device(dev));
    double ms = time_ms([&] { (void)sort(x, -1); });
    emit("sort", "4096 x 32768 f32, last dim", ms, "Gkeys_per_s", double(rows * cols) / (ms * 1e6));
    ms = time_ms([&] { (void)topk(x, 64, -1); });
    emit("topk", "4096 x 32768 f32, k 64, last dim", ms, "Gkeys_per_s",
         double(rows * cols) / (ms * 1e6));
  }
  {
    const int64_t n = int64_t(1) << 28;
    Tensor x = randn({n}, TensorOptions(DType::f32).with_device(dev));
    double ms = time_ms([&] { (void)cumsum(x, 0); });
    emit("cumsum", "2^28 f32", ms, "GBps", 2.0 * double(n) * 4 / (ms * 1e6));
  }
  return 0;
}
