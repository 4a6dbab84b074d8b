// Samplers of nn/sampler.h: sequential, uniform, weighted, subset and distributed index streams,
// each random one a pure function of (seed, epoch) through Philox counters.
#include "ember/nn/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ember/tensor/error.h"
#include "ember/tensor/philox.h"

namespace ember::data {

namespace {

// 64 random bits for (key, stream, counter): Philox4x32-10 used as a hash.
uint64_t bits64(uint64_t key, uint64_t stream, uint64_t counter) {
  const philox::U32x4 r = philox::draw4(key, stream, 4 * counter);
  return (uint64_t(r.x) << 32) | r.y;
}

// A double uniform in [0, 1) from 53 random bits.
double uniform53(uint64_t bits) { return double(bits >> 11) * 0x1.0p-53; }

// What each sampler derives from its seed, kept apart by the stream number.
constexpr uint64_t kRandomStream = 0x52414e44ull;    // "RAND"
constexpr uint64_t kWeightedStream = 0x57474854ull;  // "WGHT"
constexpr uint64_t kSubsetStream = 0x53554253ull;    // "SUBS"
constexpr uint64_t kDistStream = 0x44495354ull;      // "DIST"

void check_epoch(int64_t epoch, const char* who) {
  EMBER_CHECK(epoch >= 0, who, ": epoch ", epoch, " is negative");
}

}  // namespace

std::vector<int64_t> philox_permutation(int64_t n, uint64_t seed, uint64_t stream, int64_t epoch) {
  std::vector<int64_t> order(size_t(std::max<int64_t>(n, 0)));
  std::iota(order.begin(), order.end(), int64_t(0));
  const uint64_t key = bits64(seed, stream, uint64_t(epoch));
  for (size_t i = order.size(); i > 1; --i) {
    // 64 random bits modulo i: the bias is below i / 2^64, far under anything measurable.
    const size_t j = size_t(bits64(key, uint64_t(i - 1), 0) % uint64_t(i));
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

void Sampler::set_epoch(int64_t epoch) {
  check_epoch(epoch, "Sampler::set_epoch");
  epoch_ = epoch;
}

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  EMBER_CHECK(n >= 0, "SequentialSampler: size ", n, " is negative");
}

std::vector<int64_t> SequentialSampler::indices(int64_t) const {
  std::vector<int64_t> out(static_cast<size_t>(n_));
  std::iota(out.begin(), out.end(), int64_t(0));
  return out;
}

RandomSampler::RandomSampler(int64_t n, bool replacement, std::optional<int64_t> num_samples,
                             uint64_t seed)
    : n_(n), num_samples_(num_samples.value_or(n)), replacement_(replacement), seed_(seed) {
  EMBER_CHECK(n >= 0, "RandomSampler: dataset size ", n, " is negative");
  EMBER_CHECK(num_samples_ >= 0, "RandomSampler: num_samples ", num_samples_, " is negative");
  EMBER_CHECK(num_samples_ == 0 || n > 0, "RandomSampler: cannot draw ", num_samples_,
              " samples from an empty dataset");
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const {
  check_epoch(epoch, "RandomSampler");
  std::vector<int64_t> out;
  out.reserve(size_t(num_samples_));
  if (replacement_) {
    const uint64_t key = bits64(seed_, kRandomStream, uint64_t(epoch));
    for (int64_t i = 0; i < num_samples_; ++i)
      out.push_back(int64_t(bits64(key, 1, uint64_t(i)) % uint64_t(n_)));
    return out;
  }
  // Whole permutations, then the head of one more: permutation k of epoch e is the permutation of
  // counter e * 2^20 + k, so epochs never share one.
  for (int64_t k = 0; int64_t(out.size()) < num_samples_; ++k) {
    const std::vector<int64_t> perm =
        philox_permutation(n_, seed_, kRandomStream, (epoch << 20) + k);
    const size_t take = size_t(std::min<int64_t>(n_, num_samples_ - int64_t(out.size())));
    out.insert(out.end(), perm.begin(), perm.begin() + take);
  }
  return out;
}

WeightedRandomSampler::WeightedRandomSampler(std::vector<double> weights, int64_t num_samples,
                                             bool replacement, uint64_t seed)
    : weights_(std::move(weights)),
      num_samples_(num_samples),
      replacement_(replacement),
      seed_(seed) {
  EMBER_CHECK(num_samples >= 0, "WeightedRandomSampler: num_samples ", num_samples, " is negative");
  double total = 0;
  int64_t positive = 0;
  for (size_t i = 0; i < weights_.size(); ++i) {
    const double w = weights_[i];
    EMBER_CHECK(std::isfinite(w) && w >= 0, "WeightedRandomSampler: weight ", i, " is ", w,
                "; weights must be finite and non-negative");
    total += w;
    positive += w > 0;
    cumulative_.push_back(total);
  }
  EMBER_CHECK(num_samples == 0 || total > 0,
              "WeightedRandomSampler: the weights sum to zero; give at least one positive weight");
  EMBER_CHECK(replacement || num_samples <= positive, "WeightedRandomSampler: cannot draw ",
              num_samples, " samples without replacement from ", positive,
              " positive weights; lower num_samples or set replacement");
}

std::vector<int64_t> WeightedRandomSampler::indices(int64_t epoch) const {
  check_epoch(epoch, "WeightedRandomSampler");
  const uint64_t key = bits64(seed_, kWeightedStream, uint64_t(epoch));
  std::vector<int64_t> out;
  out.reserve(size_t(num_samples_));
  if (replacement_) {
    // Inverse CDF: the first index whose cumulative weight exceeds u * total.
    const double total = cumulative_.empty() ? 0 : cumulative_.back();
    for (int64_t i = 0; i < num_samples_; ++i) {
      const double target = uniform53(bits64(key, 1, uint64_t(i))) * total;
      auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), target);
      int64_t k =
          std::min<int64_t>(int64_t(it - cumulative_.begin()), int64_t(weights_.size()) - 1);
      while (weights_[size_t(k)] == 0) --k;  // u * total landing on a zero-weight boundary
      out.push_back(k);
    }
    return out;
  }
  // Successive draws without replacement are the indices ordered by the keys log(u_i) / w_i,
  // largest first (Efraimidis & Spirakis): the same distribution as drawing one at a time.
  std::vector<std::pair<double, int64_t>> keys;
  for (size_t i = 0; i < weights_.size(); ++i) {
    if (weights_[i] <= 0) continue;
    const double u = uniform53(bits64(key, 2, uint64_t(i)));
    keys.emplace_back(std::log1p(-u) / weights_[i], int64_t(i));
  }
  std::partial_sort(keys.begin(), keys.begin() + num_samples_, keys.end(),
                    [](const auto& a, const auto& b) { return a.first > b.first; });
  for (int64_t i = 0; i < num_samples_; ++i) out.push_back(keys[size_t(i)].second);
  return out;
}

SubsetRandomSampler::SubsetRandomSampler(std::vector<int64_t> indices, uint64_t seed)
    : subset_(std::move(indices)), seed_(seed) {
  for (size_t i = 0; i < subset_.size(); ++i)
    EMBER_CHECK(subset_[i] >= 0, "SubsetRandomSampler: index ", i, " is ", subset_[i],
                "; indices must be non-negative");
}

std::vector<int64_t> SubsetRandomSampler::indices(int64_t epoch) const {
  check_epoch(epoch, "SubsetRandomSampler");
  const std::vector<int64_t> perm =
      philox_permutation(int64_t(subset_.size()), seed_, kSubsetStream, epoch);
  std::vector<int64_t> out;
  out.reserve(perm.size());
  for (int64_t p : perm) out.push_back(subset_[size_t(p)]);
  return out;
}

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank,
                                       bool shuffle, uint64_t seed, bool drop_last)
    : n_(dataset_size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      drop_last_(drop_last),
      seed_(seed) {
  EMBER_CHECK(dataset_size >= 0, "DistributedSampler: dataset size ", dataset_size, " is negative");
  EMBER_CHECK(num_replicas > 0, "DistributedSampler: num_replicas ", num_replicas,
              " must be positive");
  EMBER_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: rank ", rank,
              " is out of range [0, ", num_replicas, ")");
  // PyTorch: ceil((n - replicas) / replicas) when dropping a ragged tail, ceil(n / replicas)
  // otherwise; the first equals floor(n / replicas) whenever n % replicas != 0.
  num_samples_ = drop_last && n_ % num_replicas != 0 ? n_ / num_replicas
                                                     : (n_ + num_replicas - 1) / num_replicas;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  check_epoch(epoch, "DistributedSampler");
  std::vector<int64_t> order = shuffle_ ? philox_permutation(n_, seed_, kDistStream, epoch)
                                        : SequentialSampler(n_).indices(0);
  const int64_t total = total_size();
  if (int64_t(order.size()) < total) {
    // Pad by repeating the order from its start (as often as needed when n < the padding).
    const int64_t n = int64_t(order.size());
    EMBER_CHECK(n > 0, "DistributedSampler: cannot pad an empty dataset to ", total, " indices");
    for (int64_t i = n; i < total; ++i) order.push_back(order[size_t(i % n)]);
  }
  order.resize(size_t(total));
  std::vector<int64_t> out;
  out.reserve(size_t(num_samples_));
  for (int64_t i = rank_; i < total; i += num_replicas_) out.push_back(order[size_t(i)]);
  return out;
}

BatchSampler::BatchSampler(std::shared_ptr<const Sampler> sampler, int64_t batch_size,
                           bool drop_last)
    : sampler_(std::move(sampler)), batch_size_(batch_size), drop_last_(drop_last) {
  EMBER_CHECK(sampler_ != nullptr, "BatchSampler: the sampler is null");
  EMBER_CHECK(batch_size > 0, "BatchSampler: batch_size ", batch_size, " must be positive");
}

int64_t BatchSampler::num_batches() const {
  const int64_t n = sampler_->size();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

std::vector<std::vector<int64_t>> BatchSampler::batches(int64_t epoch) const {
  const std::vector<int64_t> stream = sampler_->indices(epoch);
  std::vector<std::vector<int64_t>> out;
  for (size_t begin = 0; begin < stream.size(); begin += size_t(batch_size_)) {
    const size_t end = std::min(stream.size(), begin + size_t(batch_size_));
    if (drop_last_ && end - begin < size_t(batch_size_)) break;
    out.emplace_back(stream.begin() + begin, stream.begin() + end);
  }
  return out;
}

}  // namespace ember::data
