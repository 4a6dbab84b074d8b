// Samplers, as torch.utils.data.sampler and torch.utils.data.distributed: a Sampler gives the
// example indices of one epoch, a BatchSampler groups them into batches. Every random sampler is a
// pure function of (seed, epoch) through Philox counters (tensor/philox.h), so an epoch's stream is
// the same on every machine, run and number of workers. The DataLoader (nn/data.h) asks its sampler
// for the stream of the epoch it starts, so set_epoch is needed only when iterating a sampler by
// hand (as PyTorch's DistributedSampler.set_epoch).
//
//   auto sampler = std::make_shared<data::DistributedSampler>(dataset->size(), world, rank);
//   data::DataLoader loader(dataset, data::DataLoaderOptions(64).sampler(sampler));
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace ember::data {

// The order in which a DataLoader visits a dataset, as torch.utils.data.Sampler: a stream of
// dataset indices per epoch, deterministic in the epoch (and the sampler's seed).
class Sampler {
 public:
  virtual ~Sampler() = default;
  // Indices in one epoch's stream.
  virtual int64_t size() const = 0;
  // The stream of `epoch`: size() dataset indices.
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
  // The stream of the epoch set by set_epoch (0 by default).
  std::vector<int64_t> indices() const { return indices(epoch_); }
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

 private:
  int64_t epoch_ = 0;
};

// 0, 1, ..., n-1.
class SequentialSampler : public Sampler {
 public:
  // n >= 0 examples.
  explicit SequentialSampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(int64_t epoch) const override;
  using Sampler::indices;

 private:
  int64_t n_;
};

// Uniform over 0..n-1: without replacement a seeded permutation per epoch (num_samples > n
// concatenates further permutations, as PyTorch); with replacement num_samples independent draws.
// num_samples defaults to n.
class RandomSampler : public Sampler {
 public:
  // Defaults as PyTorch: without replacement, num_samples = n; seed picks the permutations.
  explicit RandomSampler(int64_t n, bool replacement = false,
                         std::optional<int64_t> num_samples = std::nullopt, uint64_t seed = 0);
  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> indices(int64_t epoch) const override;
  using Sampler::indices;

 private:
  int64_t n_, num_samples_;
  bool replacement_;
  uint64_t seed_;
};

// num_samples indices drawn with probability proportional to `weights` (non-negative, not all
// zero): with replacement independent draws; without, successive draws each excluding the indices
// already drawn (as torch.multinomial), which needs num_samples <= the number of positive weights.
class WeightedRandomSampler : public Sampler {
 public:
  // weights: one per dataset index; replacement defaults to true, as PyTorch. Errors on a
  // negative or non-finite weight, all zeros (unless num_samples is 0), or too few positive
  // weights without replacement.
  WeightedRandomSampler(std::vector<double> weights, int64_t num_samples, bool replacement = true,
                        uint64_t seed = 0);
  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> indices(int64_t epoch) const override;
  using Sampler::indices;

 private:
  std::vector<double> weights_, cumulative_;
  int64_t num_samples_;
  bool replacement_;
  uint64_t seed_;
};

// A seeded permutation of the given indices per epoch.
class SubsetRandomSampler : public Sampler {
 public:
  // The dataset indices (each >= 0) to permute each epoch.
  explicit SubsetRandomSampler(std::vector<int64_t> indices, uint64_t seed = 0);
  int64_t size() const override { return int64_t(subset_.size()); }
  std::vector<int64_t> indices(int64_t epoch) const override;
  using Sampler::indices;

 private:
  std::vector<int64_t> subset_;
  uint64_t seed_;
};

// The share of rank `rank` of num_replicas processes, exactly PyTorch's DistributedSampler rule:
// the epoch's order (0..n-1, or its permutation for (seed, epoch), the same on every rank) is
// padded to total_size = ceil(n / num_replicas) * num_replicas by repeating it from the start, or,
// with drop_last, truncated to floor(n / num_replicas) * num_replicas; rank r then takes
// order[r], order[r + num_replicas], ... (order[r::num_replicas]).
class DistributedSampler : public Sampler {
 public:
  // 0 <= rank < num_replicas; shuffle, seed and drop_last as PyTorch's (defaults too).
  DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);
  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> indices(int64_t epoch) const override;
  using Sampler::indices;
  // The padded (or truncated) order's length: size() * num_replicas.
  int64_t total_size() const { return num_samples_ * num_replicas_; }

 private:
  int64_t n_, num_replicas_, rank_, num_samples_;
  bool shuffle_, drop_last_;
  uint64_t seed_;
};

// Groups a sampler's stream into batches of batch_size (the last one shorter unless drop_last).
class BatchSampler {
 public:
  // Shares `sampler`; batch_size > 0. Errors on a null sampler.
  BatchSampler(std::shared_ptr<const Sampler> sampler, int64_t batch_size, bool drop_last);
  // Batches per epoch: ceil (or, with drop_last, floor) of sampler size / batch_size.
  int64_t num_batches() const;
  // The batches of `epoch`: the sampler's stream for that epoch, cut in order.
  std::vector<std::vector<int64_t>> batches(int64_t epoch) const;
  // The sampler it groups.
  const Sampler& sampler() const { return *sampler_; }

 private:
  std::shared_ptr<const Sampler> sampler_;
  int64_t batch_size_;
  bool drop_last_;
};

// A seeded permutation of 0..n-1: Fisher-Yates driven by Philox counters of (seed, stream, epoch).
std::vector<int64_t> philox_permutation(int64_t n, uint64_t seed, uint64_t stream, int64_t epoch);

}  // namespace ember::data
