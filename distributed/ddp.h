// DistributedDataParallel: data-parallel training of one nn::Module replica per process.
// Parameters and buffers are broadcast from rank 0 at construction. Gradients are grouped in
// buckets (about 25 MiB; a small first bucket so communication starts early) in reverse
// registration order, rebuilt after the first backward in the order gradients actually became
// ready. Each bucket is averaged with one all_reduce as soon as its last gradient is accumulated
// (post-accumulate-grad hooks), on a communication stream ordered with events, overlapping the
// rest of backward; the end of backward waits for all buckets and writes the averaged gradients
// back. NoSyncGuard skips synchronization (gradient accumulation); a parameter that received no
// gradient is an error naming it unless find_unused_parameters is set. Nothing here syncs the host
// on the CUDA path, so a whole DDP step can be captured in a CUDA graph.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "nn/module.h"

namespace ember::distributed {

struct DDPOptions {
  size_t bucket_cap_bytes = size_t(25) << 20;
  size_t first_bucket_bytes = size_t(1) << 20;
  bool find_unused_parameters = false;  // unused parameters get zero gradients instead of an error
  bool broadcast_buffers = true;        // sync_buffers() copies rank 0's buffers (BN statistics)
};

struct DDPStats {
  uint64_t iterations = 0, buckets_reduced = 0, bucket_rebuilds = 0;
  size_t num_buckets = 0;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                          DDPOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  nn::Module& module() { return *module_; }
  ProcessGroup& group() { return *group_; }
  // Copies rank 0's buffers to every rank (call before forward when buffers change, e.g. BN).
  void sync_buffers();
  const DDPStats& stats() const;

  // While alive, backward accumulates gradients locally without communication.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool prev_;
  };
  NoSyncGuard no_sync() = delete;  // use `DistributedDataParallel::NoSyncGuard guard(ddp);`

  struct Reducer;  // the bucket state shared with the gradient hooks

 private:
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  std::shared_ptr<Reducer> reducer_;
};

// Splits dataset indices among ranks like torch's DistributedSampler: a seeded shuffle per epoch
// (same on every rank), padded to a multiple of the world size, then every world_size-th index.
std::vector<int64_t> distributed_sample_indices(int64_t dataset_size, int rank, int world_size,
                                                uint64_t seed, int64_t epoch, bool shuffle = true,
                                                bool drop_last = false);

}  // namespace ember::distributed
