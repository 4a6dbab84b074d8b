// embedding_bag, as torch.nn.functional.embedding_bag: sums, means or maxima of bags of embedding
// rows, computed without materializing the gathered rows (kernels in cpu_kernels/ and
// cuda_kernels/indexing/, interface in kernel_interface/embedding_bag.h).
#pragma once
#include <cstdint>
#include <optional>

#include "ember/kernel_interface/embedding_bag.h"
#include "ember/tensor/tensor.h"

namespace ember {

// embedding_bag's arguments beside input and weight, with PyTorch's defaults. max_norm,
// scale_grad_by_freq and sparse gradients are not offered.
struct EmbeddingBagParams {
  // With a 1-D input: where each bag starts (int32/int64, 1-D, non-decreasing, starting at 0);
  // must be undefined with a 2-D input, whose rows are the bags.
  Tensor offsets;
  EmbeddingBagMode mode = EmbeddingBagMode::mean;
  // Per-entry weights (input's shape, weight's dtype), mode sum only: bag = sum w_i * row_i.
  Tensor per_sample_weights;
  // offsets has one more entry than there are bags: the end of the last bag (as PyTorch).
  bool include_last_offset = false;
  // Entries equal to this row are skipped: they add nothing and do not count toward the mean
  // (negative values count from the end).
  std::optional<int64_t> padding_idx = std::nullopt;
};

// input [B, L] (B bags of L entries) or [n] with offsets; weight [num_embeddings, dim], floating
// -> [B, dim] (B = number of bags) in weight's dtype; an empty bag gives zeros. Differentiable
// with respect to weight and per_sample_weights (once; no double backward, as PyTorch). The
// weight gradient of max mode goes to the row that gave each maximum (the first on ties).
Tensor embedding_bag(const Tensor& input, const Tensor& weight, const EmbeddingBagParams& p = {});

}  // namespace ember
