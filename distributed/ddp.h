// DistributedDataParallel: data-parallel training of one nn::Module replica per process.
// Parameters and buffers are broadcast from rank 0 at construction. Gradients are grouped in
// buckets (about 25 MiB; a small first bucket so communication starts early) in reverse
// registration order, rebuilt after the first backward in the order gradients actually became
// ready. Each bucket is averaged in place with one all_reduce as soon as its last gradient is
// accumulated (post-accumulate-grad hooks), on a communication stream ordered with events,
// overlapping the rest of backward; the end of backward waits for all buckets.
// Gradients are views of the buckets (PyTorch's gradient_as_bucket_view, always on): the first
// backward copies each gradient into its bucket slot and makes the parameter's .grad that slot,
// with the parameter's strides (channels_last included), so later backwards accumulate straight
// into the buckets and nothing is copied in or out. zero_grad(false) zeroes the views in place and
// keeps them; zero_grad() (set_to_none) drops them, and the next backward copies each gradient in
// once and makes it a view again. Parameters must be dense (contiguous or channels_last).
// NoSyncGuard skips synchronization (gradient accumulation, into the views); a parameter that
// received no gradient is an error naming it unless find_unused_parameters is set (it then gets a
// zero gradient). Nothing here syncs the host on the CUDA path, so a whole DDP step can be
// captured in a CUDA graph.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ember/distributed/process_group.h"
#include "ember/nn/module.h"

namespace ember::distributed {

// DistributedDataParallel's settings, with PyTorch's defaults.
struct DDPOptions {
  size_t bucket_cap_bytes = size_t(25) << 20;   // bytes of gradients per bucket (bucket_cap_mb)
  size_t first_bucket_bytes = size_t(1) << 20;  // the first bucket's cap (small, to start early)
  bool find_unused_parameters = false;  // unused parameters get zero gradients instead of an error
  bool broadcast_buffers = true;        // sync_buffers() copies rank 0's buffers (BN statistics)
};

// Counters of what DistributedDataParallel did, for tests and monitoring.
struct DDPStats {
  uint64_t iterations = 0,  // backwards that synchronized gradients
      buckets_reduced = 0,  // bucket all_reduces launched
      bucket_rebuilds = 0;  // times the buckets were rebuilt in gradient-ready order (at most 1)
  // Gradients copied into a bucket (none in the steady state, where .grad is the bucket's view).
  uint64_t grads_copied = 0;
  size_t num_buckets = 0;  // buckets in the current layout
};

// torch.nn.parallel.DistributedDataParallel: wraps one replica of a module per process so that
// backward averages its gradients over the ranks of the group (see the top of this file). Call
// forward on module() and backward as usual; the optimizer then steps on averaged gradients.
class DistributedDataParallel {
 public:
  // Wraps `module` (its trainable parameters all on one device, dense) for the ranks of `group`,
  // broadcasting rank 0's parameters and buffers. Throws bad_param for a null module or group, a
  // module without trainable parameters, parameters on several devices or a non-dense one.
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                          DDPOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // The wrapped module (call its forward).
  nn::Module& module() { return *module_; }
  // The process group gradients are averaged over.
  ProcessGroup& group() { return *group_; }
  // Copies rank 0's buffers to every rank (call before forward when buffers change, e.g. BN).
  void sync_buffers();
  const DDPStats& stats() const;

  // While alive, backward accumulates gradients locally without communication.
  class NoSyncGuard {
   public:
    // Turns synchronization off on `ddp` until the guard is destroyed (which restores it).
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
