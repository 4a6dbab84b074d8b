// The DataLoader's GPU delivery: batches staged in pinned memory, copied on a side stream with the
// next batch prefetched, consumed on the caller's current stream (a non-default one here) right
// away, and equal to the CPU loader's batches for the same seed, epoch after epoch.
#include <doctest/doctest.h>

#include <vector>

#include "ember/ember.h"
#include "ember/nn/data.h"
#include "ember/nn/pinned_memory.h"
#include "ember/nn/transforms.h"

using namespace ember;

TEST_CASE("DataLoader delivers the CPU loader's batches to the GPU" *
          doctest::skip(!cuda::is_available())) {
  const Device dev = Device::cuda();
  Stream stream = new_stream(dev);
  StreamGuard guard(stream);
  const int64_t n = 1000;
  Tensor images = rand({n, 3, 8, 8});
  Tensor labels = arange(double(n), TensorOptions(DType::i64));
  auto ds = std::make_shared<data::TensorDataset>(std::vector<Tensor>{images, labels});
  auto opts = data::DataLoaderOptions(64).shuffle(true).seed(5).num_workers(2).transform(
      data::compose({data::RandomCrop(8, 1), data::RandomHorizontalFlip()}));
  data::DataLoader cpu_loader(ds, opts);
  data::DataLoader gpu_loader(ds, data::DataLoaderOptions(opts).device(dev));
  const uint64_t host_allocs_before = data::pinned_memory_stats().num_host_allocs;

  for (int epoch = 0; epoch < 2; ++epoch) {
    CAPTURE(epoch);
    int64_t batches = 0;
    auto cpu_it = cpu_loader.begin();
    for (data::Batch& b : gpu_loader) {
      REQUIRE(cpu_it != cpu_loader.end());
      CHECK(b[0].is_cuda());
      CHECK(b[1].is_cuda());
      // Work queued on the current stream right away sees the copied data.
      Tensor checksum = sum(b[0] * 2.0);
      CHECK(checksum.item() == doctest::Approx(sum((*cpu_it)[0] * 2.0).item()).epsilon(1e-6));
      CHECK(max_abs_diff(b[1].cpu(), (*cpu_it)[1]) == 0);
      ++cpu_it;
      ++batches;
    }
    CHECK(batches == gpu_loader.num_batches());
  }
  // Batches were staged in pinned memory, and the cache reused its blocks across batches.
  const data::PinnedMemoryStats stats = data::pinned_memory_stats();
  CHECK(stats.num_host_allocs > host_allocs_before);
  CHECK(stats.num_host_allocs - host_allocs_before < 2 * uint64_t(gpu_loader.num_batches()));
  CHECK(data::is_pinned(data::empty_pinned({4}, DType::f32)));

  // Leaving an epoch early is safe: the prefetched copy is retired, the next epoch starts clean.
  gpu_loader.start_epoch();
  CHECK(gpu_loader.next().has_value());
  int64_t rest = 0;
  for (data::Batch& b : gpu_loader) rest += b[0].size(0) > 0;
  CHECK(rest == gpu_loader.num_batches());
}
