// Indexing benchmarks (GPU), beside PyTorch's (bench/indexing.py prints the same rows): x.index
// with a large integer index and with a boolean mask, index_put_ with accumulate, nonzero and
// masked_select. Rows with a mask include the host sync that reads the number of true elements
// (PyTorch makes it too). Prints one JSON line per measurement; scripts/bench_report.py pairs the
// rows by bench and shape.
#include <cstdio>

#include "ember/ember.h"
#include "timing.h"

using namespace ember;
using namespace ember::indexing;

namespace {

using bench::run_section;
using bench::time_ms;

void emit(const char* bench, const char* shape, double ms, double elements) {
  std::printf(
      "{\"bench\":\"%s\",\"impl\":\"ember\",\"shape\":\"%s\",\"ms\":%.6f,\"Gelem_per_s\":%.3f}\n",
      bench, shape, ms, elements / (ms * 1e6));
  std::fflush(stdout);
}

}  // namespace

int main() {
  if (!cuda::is_available()) {
    std::printf("{\"bench\":\"indexing\",\"skipped\":\"no GPU\"}\n");
    return 0;
  }
  const Device dev = Device::cuda();
  const TensorOptions f32 = TensorOptions(DType::f32).with_device(dev);
  manual_seed(0);
  const int64_t n24 = int64_t(1) << 24, n26 = int64_t(1) << 26;

  run_section("index_int", [&] {
    Tensor x = randn({n24}, f32);
    Tensor idx = randint(0, n24, {n24}, TensorOptions(DType::i64).with_device(dev));
    Tensor out;
    const double ms = time_ms([&] { out = x.index({idx}); });
    emit("index_int", "2^24 f32, 2^24 int64 index", ms, double(n24));
  });
  run_section("index_int_rows", [&] {
    Tensor x = randn({int64_t(1) << 20, 16}, f32);
    Tensor idx = randint(0, int64_t(1) << 20, {int64_t(1) << 20},
                         TensorOptions(DType::i64).with_device(dev));
    Tensor out;
    const double ms = time_ms([&] { out = x.index({idx}); });
    emit("index_int", "[2^20, 16] f32, 2^20 int64 index", ms, double(n24));
  });
  run_section("index_mask", [&] {
    Tensor x = randn({n24}, f32);
    Tensor mask = rand({n24}, f32) < full({}, 0.5, f32);
    Tensor out;
    const double ms = time_ms([&] { out = x.index({mask}); });
    emit("index_mask", "2^24 f32, 2^24 bool mask (p 0.5)", ms, double(n24));
  });
  run_section("index_put_accumulate", [&] {
    Tensor x = zeros({n24}, f32);
    Tensor idx = randint(0, n24, {n24}, TensorOptions(DType::i64).with_device(dev));
    Tensor v = randn({n24}, f32);
    const double ms = time_ms([&] { x.index_put_({idx}, v, true); });
    emit("index_put_accumulate", "2^24 f32 values into 2^24", ms, double(n24));
  });
  run_section("nonzero", [&] {
    Tensor mask = rand({n26}, f32) < full({}, 0.5, f32);
    Tensor out;
    const double ms = time_ms([&] { out = mask.nonzero(); });
    emit("nonzero", "2^26 bool (p 0.5)", ms, double(n26));
  });
  run_section("masked_select", [&] {
    Tensor x = randn({n26}, f32);
    Tensor mask = rand({n26}, f32) < full({}, 0.5, f32);
    Tensor out;
    const double ms = time_ms([&] { out = x.masked_select(mask); });
    emit("masked_select", "2^26 f32, bool mask (p 0.5)", ms, double(n26));
  });
  return 0;
}
