// Indexing benchmarks (GPU), beside PyTorch's (bench/indexing.py prints the same rows): x.index
// with a large integer index and with a boolean mask, index_put_ with accumulate, nonzero,
// masked_select, embedding_bag (forward, and forward + backward) and ctc_loss (forward +
// backward). Rows with a mask include the host sync that reads the number of true elements
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
  // 2^20 lookups into a [2^20, 64] table, in 2^14 bags of 64 (offsets), mode sum.
  const int64_t bag_rows = int64_t(1) << 20, bags = int64_t(1) << 14;
  run_section("embedding_bag", [&] {
    Tensor w = randn({bag_rows, 64}, f32);
    Tensor idx = randint(0, bag_rows, {bag_rows}, TensorOptions(DType::i64).with_device(dev));
    EmbeddingBagParams p;
    p.offsets = arange(0, double(bag_rows), 64, TensorOptions(DType::i64).with_device(dev));
    p.mode = EmbeddingBagMode::sum;
    Tensor out;
    const double ms = time_ms([&] { out = embedding_bag(idx, w, p); });
    emit("embedding_bag", "[2^20, 64] f32, 2^14 bags of 64, sum", ms, double(bag_rows * 64));
    w.requires_grad_(true);
    const Tensor g = randn({bags, 64}, f32);
    const double ms_train = time_ms([&] {
      w.mutable_grad() = Tensor();
      embedding_bag(idx, w, p).backward(g);
    });
    emit("embedding_bag_fwd_bwd", "[2^20, 64] f32, 2^14 bags of 64, sum", ms_train,
         double(bag_rows * 64));
  });
  // T 200, N 32, C 30, targets of 40 (padded).
  run_section("ctc_loss", [&] {
    Tensor logits = randn({200, 32, 30}, f32).requires_grad_(true);
    Tensor targets = randint(1, 30, {32, 40}, TensorOptions(DType::i64).with_device(dev));
    const std::vector<int64_t> input_lengths(32, 200), target_lengths(32, 40);
    const double ms = time_ms([&] {
      logits.mutable_grad() = Tensor();
      ctc_loss(log_softmax(logits, 2), targets, input_lengths, target_lengths).backward();
    });
    emit("ctc_loss_fwd_bwd", "T 200, N 32, C 30, S 40 f32", ms, double(200 * 32 * 30));
  });
  return 0;
}
