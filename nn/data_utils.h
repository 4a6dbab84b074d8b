// Dataset combinators and collation helpers, as torch.utils.data and torch::nn::utils::rnn:
//   - Subset: a dataset seen through a list of indices; random_split: seeded disjoint Subsets of
//     given lengths or fractions; ConcatDataset: datasets one after another.
//   - pad_sequence: variable-length sequences padded into one tensor, for a DataLoader collate
//     function (DataLoaderOptions::collate) over examples whose first dims differ.
// ChainDataset is left out: it chains iterable datasets, and Ember has only map-style ones.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ember/nn/data.h"

namespace ember::data {

// Example i is dataset[indices[i]]; get_batch maps the indices and routes to the dataset's own
// get_batch (so a TensorDataset underneath still copies rows directly).
class Subset : public Dataset {
 public:
  // Shares `dataset`; errors when it is null or an index is outside [0, dataset->size()).
  Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices);
  int64_t size() const override { return int64_t(indices_.size()); }
  Example get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices, const BatchAllocator& alloc) const override;
  // The indices into the underlying dataset, in example order.
  const std::vector<int64_t>& indices() const { return indices_; }
  // The underlying dataset.
  const Dataset& dataset() const { return *dataset_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  std::vector<int64_t> indices_;
};

// Splits a seeded permutation of the dataset into consecutive Subsets of the given lengths, which
// must sum to the dataset's size.
std::vector<std::shared_ptr<Subset>> random_split(const std::shared_ptr<const Dataset>& dataset,
                                                  const std::vector<int64_t>& lengths,
                                                  uint64_t seed = 0);
// Fractions summing to 1 (PyTorch 2): length i is floor(n * fraction i), and the remainder is
// handed out one by one, round-robin from the first split.
std::vector<std::shared_ptr<Subset>> random_split(const std::shared_ptr<const Dataset>& dataset,
                                                  const std::vector<double>& fractions,
                                                  uint64_t seed = 0);
// The lengths that random_split gives `fractions` of n examples.
std::vector<int64_t> split_lengths(int64_t n, const std::vector<double>& fractions);

// The datasets one after another: example i belongs to the part whose cumulative size first
// exceeds i. get_batch collates each part's indices through that part's get_batch and interleaves
// the rows back in order (parts must agree in field count, shapes and dtypes).
class ConcatDataset : public Dataset {
 public:
  // The parts in order; errors when there are none or one is null.
  explicit ConcatDataset(std::vector<std::shared_ptr<const Dataset>> datasets);
  int64_t size() const override { return cumulative_sizes_.empty() ? 0 : cumulative_sizes_.back(); }
  Example get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices, const BatchAllocator& alloc) const override;
  // Running totals of the parts' sizes (cumulative_sizes()[k] = size of parts 0..k).
  const std::vector<int64_t>& cumulative_sizes() const { return cumulative_sizes_; }
  // (part, index within the part) of example `index`.
  std::pair<size_t, int64_t> locate(int64_t index) const;

 private:
  std::vector<std::shared_ptr<const Dataset>> datasets_;
  std::vector<int64_t> cumulative_sizes_;
};

}  // namespace ember::data

namespace ember::nn::utils::rnn {

// Pads sequences [L_i, *] (same trailing dims, dtype and device) to the longest L and stacks them:
// [max L, B, *], or [B, max L, *] with batch_first. padding_side "right" puts the padding after
// each sequence, "left" before it. Differentiable (cat and stack).
Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first = false,
                    double padding_value = 0.0, const std::string& padding_side = "right");

}  // namespace ember::nn::utils::rnn
