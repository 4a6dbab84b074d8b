// Subset, random_split, ConcatDataset (nn/data_utils.h) and pad_sequence.
#include "ember/nn/data_utils.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ember/nn/sampler.h"
#include "ember/ops/ops.h"

namespace ember::data {

namespace {

constexpr uint64_t kSplitStream = 0x53504c54ull;  // "SPLT"

BatchAllocator cpu_allocator() {
  return [](const Shape& s, DType t) { return empty(s, t, Device::cpu()); };
}

}  // namespace

// ---- Subset ----------------------------------------------------------------------------------

Subset::Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  EMBER_CHECK(dataset_ != nullptr, "Subset: the dataset is null");
  const int64_t n = dataset_->size();
  for (size_t i = 0; i < indices_.size(); ++i)
    EMBER_CHECK(indices_[i] >= 0 && indices_[i] < n, "Subset: index ", i, " is ", indices_[i],
                ", out of range [0, ", n, ") of the dataset");
}

Example Subset::get(int64_t index) const {
  EMBER_CHECK(index >= 0 && index < size(), "Subset::get: index ", index, " is out of range [0, ",
              size(), ")");
  return dataset_->get(indices_[size_t(index)]);
}

Batch Subset::get_batch(const std::vector<int64_t>& indices, const BatchAllocator& alloc) const {
  std::vector<int64_t> mapped;
  mapped.reserve(indices.size());
  for (int64_t index : indices) {
    EMBER_CHECK(index >= 0 && index < size(), "Subset::get_batch: index ", index,
                " is out of range [0, ", size(), ")");
    mapped.push_back(indices_[size_t(index)]);
  }
  return dataset_->get_batch(mapped, alloc);
}

std::vector<int64_t> split_lengths(int64_t n, const std::vector<double>& fractions) {
  EMBER_CHECK(!fractions.empty(), "random_split: give at least one fraction");
  double sum = 0;
  std::vector<int64_t> lengths;
  for (size_t i = 0; i < fractions.size(); ++i) {
    EMBER_CHECK(fractions[i] >= 0 && fractions[i] <= 1, "random_split: fraction ", i, " is ",
                fractions[i], "; fractions must lie in [0, 1]");
    sum += fractions[i];
    lengths.push_back(int64_t(std::floor(double(n) * fractions[i])));
  }
  EMBER_CHECK(std::abs(sum - 1.0) <= 1e-9, "random_split: the fractions sum to ", sum,
              ", not 1; give lengths or fractions summing to 1");
  int64_t remainder = n;
  for (int64_t l : lengths) remainder -= l;
  for (int64_t i = 0; i < remainder; ++i) ++lengths[size_t(i) % lengths.size()];
  return lengths;
}

std::vector<std::shared_ptr<Subset>> random_split(const std::shared_ptr<const Dataset>& dataset,
                                                  const std::vector<int64_t>& lengths,
                                                  uint64_t seed) {
  EMBER_CHECK(dataset != nullptr, "random_split: the dataset is null");
  const int64_t n = dataset->size();
  int64_t sum = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    EMBER_CHECK(lengths[i] >= 0, "random_split: length ", i, " is ", lengths[i], " (negative)");
    sum += lengths[i];
  }
  EMBER_CHECK(sum == n, "random_split: the lengths sum to ", sum, " but the dataset has ", n,
              " examples");
  const std::vector<int64_t> perm = philox_permutation(n, seed, kSplitStream, 0);
  std::vector<std::shared_ptr<Subset>> out;
  int64_t offset = 0;
  for (int64_t length : lengths) {
    out.push_back(std::make_shared<Subset>(
        dataset, std::vector<int64_t>(perm.begin() + offset, perm.begin() + offset + length)));
    offset += length;
  }
  return out;
}

std::vector<std::shared_ptr<Subset>> random_split(const std::shared_ptr<const Dataset>& dataset,
                                                  const std::vector<double>& fractions,
                                                  uint64_t seed) {
  EMBER_CHECK(dataset != nullptr, "random_split: the dataset is null");
  return random_split(dataset, split_lengths(dataset->size(), fractions), seed);
}

// ---- ConcatDataset ---------------------------------------------------------------------------

ConcatDataset::ConcatDataset(std::vector<std::shared_ptr<const Dataset>> datasets)
    : datasets_(std::move(datasets)) {
  EMBER_CHECK(!datasets_.empty(), "ConcatDataset: give at least one dataset");
  int64_t total = 0;
  for (size_t k = 0; k < datasets_.size(); ++k) {
    EMBER_CHECK(datasets_[k] != nullptr, "ConcatDataset: dataset ", k, " is null");
    total += datasets_[k]->size();
    cumulative_sizes_.push_back(total);
  }
}

std::pair<size_t, int64_t> ConcatDataset::locate(int64_t index) const {
  EMBER_CHECK(index >= 0 && index < size(), "ConcatDataset: index ", index, " is out of range [0, ",
              size(), ")");
  const size_t part =
      size_t(std::upper_bound(cumulative_sizes_.begin(), cumulative_sizes_.end(), index) -
             cumulative_sizes_.begin());
  return {part, part == 0 ? index : index - cumulative_sizes_[part - 1]};
}

Example ConcatDataset::get(int64_t index) const {
  const auto [part, local] = locate(index);
  return datasets_[part]->get(local);
}

Batch ConcatDataset::get_batch(const std::vector<int64_t>& indices,
                               const BatchAllocator& alloc) const {
  // Each part's rows collated by the part, then scattered back to their positions in the batch.
  std::vector<std::vector<int64_t>> local(datasets_.size()), position(datasets_.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    const auto [part, idx] = locate(indices[i]);
    local[part].push_back(idx);
    position[part].push_back(int64_t(i));
  }
  const int64_t n = int64_t(indices.size());
  Batch out;
  for (size_t part = 0; part < datasets_.size(); ++part) {
    if (local[part].empty()) continue;
    Batch piece = datasets_[part]->get_batch(local[part], cpu_allocator());
    if (out.empty()) {
      for (const Tensor& t : piece) {
        Shape s = t.sizes();
        s[0] = n;
        out.push_back(alloc(s, t.dtype()));
      }
    }
    EMBER_CHECK(piece.size() == out.size(), "ConcatDataset::get_batch: dataset ", part,
                " gives examples of ", piece.size(), " fields, another part ", out.size());
    for (size_t f = 0; f < out.size(); ++f) {
      const Tensor t = piece[f].is_contiguous() ? piece[f] : piece[f].contiguous();
      EMBER_CHECK(t.dtype() == out[f].dtype() &&
                      Shape(t.sizes().begin() + 1, t.sizes().end()) ==
                          Shape(out[f].sizes().begin() + 1, out[f].sizes().end()),
                  "ConcatDataset::get_batch: field ", f, " of dataset ", part, " (", t.shape_str(),
                  ", ", dtype_name(t.dtype()), ") does not match the other parts' (",
                  out[f].shape_str(), ", ", dtype_name(out[f].dtype()),
                  "); parts of one batch must agree");
      const size_t row = t.numel() == 0 ? 0 : t.nbytes() / size_t(t.size(0));
      const char* src = static_cast<const char*>(t.data_ptr());
      char* dst = static_cast<char*>(out[f].data_ptr());
      for (size_t r = 0; r < position[part].size(); ++r)
        std::memcpy(dst + size_t(position[part][r]) * row, src + r * row, row);
    }
  }
  return out;
}

}  // namespace ember::data

namespace ember::nn::utils::rnn {

Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first, double padding_value,
                    const std::string& padding_side) {
  EMBER_CHECK(!sequences.empty(), "pad_sequence: give at least one sequence");
  EMBER_CHECK(padding_side == "right" || padding_side == "left", "pad_sequence: padding_side '",
              padding_side, "' must be \"right\" or \"left\"");
  const Tensor& first = sequences[0];
  int64_t max_len = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const Tensor& s = sequences[i];
    EMBER_CHECK(s.defined() && s.dim() >= 1, "pad_sequence: sequence ", i,
                " must have at least one dim (its length), got ",
                s.defined() ? s.shape_str() : "undefined");
    EMBER_CHECK(Shape(s.sizes().begin() + 1, s.sizes().end()) ==
                        Shape(first.sizes().begin() + 1, first.sizes().end()) &&
                    s.dtype() == first.dtype() && s.device() == first.device(),
                "pad_sequence: sequence ", i, " (", s.shape_str(), ", ", dtype_name(s.dtype()),
                ") does not match sequence 0 (", first.shape_str(), ", ", dtype_name(first.dtype()),
                ") in trailing dims, dtype or device");
    max_len = std::max(max_len, s.size(0));
  }
  std::vector<Tensor> padded;
  padded.reserve(sequences.size());
  for (const Tensor& s : sequences) {
    const int64_t missing = max_len - s.size(0);
    if (missing == 0) {
      padded.push_back(s);
      continue;
    }
    Shape pad_shape = s.sizes();
    pad_shape[0] = missing;
    const Tensor pad = full(pad_shape, padding_value, s.options());
    padded.push_back(padding_side == "right" ? cat({s, pad}, 0) : cat({pad, s}, 0));
  }
  return stack(padded, batch_first ? 0 : 1);
}

}  // namespace ember::nn::utils::rnn
