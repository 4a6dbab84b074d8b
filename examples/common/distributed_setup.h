// examples/common: the data-parallel set-up the example programs share. One process per GPU,
// started by ember-launch (or mpirun); --ddp, or a launcher's WORLD_SIZE > 1, makes the process
// group. Each rank then trains on its own fixed shard of the training set.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ember/distributed/ddp.h"
#include "ember/ember.h"

namespace ember::examples {

struct DistributedSetup {
  std::shared_ptr<distributed::ProcessGroup> group;  // null: a single process
  int rank = 0, world = 1;
  bool main_rank() const { return rank == 0; }
};

// Joins the job when asked (--ddp) or when a launcher started several ranks.
inline DistributedSetup setup_distributed(bool ddp_flag) {
  DistributedSetup s;
  if (ddp_flag || distributed::env_int("WORLD_SIZE", 1) > 1) {
    s.group = distributed::init_process_group();
    s.rank = s.group->rank();
    s.world = s.group->world_size();
  }
  return s;
}

// "auto": this rank's GPU (cuda:LOCAL_RANK) when there is one, else the CPU.
inline Device pick_device(const std::string& name) {
  if (name != "auto") return Device(name);
  return cuda::is_available() ? Device::cuda(distributed::env_int("LOCAL_RANK", 0)) : Device::cpu();
}

// The examples of `base` at `indices`, in that order (a rank's shard of a dataset). Batches are
// gathered by the base dataset from the mapped indices, so they cost what the base's cost.
class ShardDataset : public data::Dataset {
 public:
  ShardDataset(std::shared_ptr<const data::Dataset> base, std::vector<int64_t> indices)
      : base_(std::move(base)), indices_(std::move(indices)) {}
  int64_t size() const override { return int64_t(indices_.size()); }
  data::Example get(int64_t index) const override { return base_->get(indices_.at(size_t(index))); }
  data::Batch get_batch(const std::vector<int64_t>& indices,
                        const data::BatchAllocator& alloc) const override {
    std::vector<int64_t> mapped;
    mapped.reserve(indices.size());
    for (int64_t i : indices) mapped.push_back(indices_.at(size_t(i)));
    return base_->get_batch(mapped, alloc);
  }

 private:
  std::shared_ptr<const data::Dataset> base_;
  std::vector<int64_t> indices_;
};

// This rank's shard of `d`: every world-th example (rank r: r, r + world, ...), padded with the
// first examples so that all shards have the same size, as torch's DistributedSampler does; the
// loader then shuffles within the shard each epoch. A single process keeps the whole dataset.
inline std::shared_ptr<data::Dataset> shard_for_rank(std::shared_ptr<data::Dataset> d,
                                                     const DistributedSetup& s, uint64_t seed) {
  if (s.world <= 1) return d;
  auto idx = distributed::distributed_sample_indices(d->size(), s.rank, s.world, seed, 0, false);
  return std::make_shared<ShardDataset>(std::move(d), std::move(idx));
}

}  // namespace ember::examples
