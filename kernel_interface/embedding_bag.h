// The embedding_bag kernel interface: EmbeddingBagArgs and the forward / backward tables. The op
// (ops/embedding_bag.cpp) normalizes every input form (2-D input, 1-D input with offsets, with or
// without include_last_offset) to 1-D indices and int64 bag boundaries, so the kernels see one
// layout. CPU kernels in cpu_kernels/embedding_bag.cpp, CUDA ones in
// cuda_kernels/indexing/embedding_bag.cu.
#pragma once
#include <cstdint>

#include "ember/dispatch/registry.h"
#include "ember/tensor/tensor.h"

namespace ember {

enum class EmbeddingBagMode : uint8_t { sum, mean, max };
const char* embedding_bag_mode_name(EmbeddingBagMode mode);

// Bag b holds the entries indices[bounds[b]] .. indices[bounds[b + 1] - 1] (bounds clamped into
// [0, num_indices]; a bag whose end is not past its start is empty). An entry equal to
// padding_idx (>= 0; -1 for none) is skipped: it adds nothing, does not count toward the mean and
// never wins the max. An empty bag (after skipping) gives a zero row.
struct EmbeddingBagArgs {
  Tensor weight;              // [num_embeddings, dim], dense, floating
  Tensor indices;             // [num_indices], dense, int32 or int64, values in [0, num_embeddings)
  Tensor bounds;              // [num_bags + 1], dense, int64
  Tensor per_sample_weights;  // [num_indices], weight's dtype, dense; undefined: all ones (sum)
  EmbeddingBagMode mode = EmbeddingBagMode::mean;
  int64_t padding_idx = -1;
  int64_t num_bags = 0;
  // Forward outputs (overwritten): the bags [num_bags, dim] in weight's dtype, the number of
  // entries each bag counted [num_bags] int64, and in max mode the row that gave each maximum
  // [num_bags, dim] int64 (-1 for an empty bag; ties go to the first entry).
  Tensor output, bag_count, max_rows;
  // Backward: grad_output [num_bags, dim] dense; grad_weight [num_embeddings, dim], zero-filled
  // by the op, which the kernel ACCUMULATES into; grad_per_sample_weights [num_indices],
  // zero-filled by the op, whose entries in bags the kernel overwrites (only when defined: sum
  // mode with per_sample_weights).
  Tensor grad_output, grad_weight, grad_per_sample_weights;
};

// Reads weight, indices, bounds, per_sample_weights; writes output, bag_count, max_rows (max
// mode). An index outside [0, num_embeddings) throws (CPU) or is reported through the device
// error flag and skipped (CUDA). Selected by weight's dtype.
using EmbeddingBagForwardKernel = void (*)(const EmbeddingBagArgs& args);
EMBER_DECLARE_KERNEL(embedding_bag_forward_kernel, EmbeddingBagForwardKernel)
// Reads grad_output, weight (for grad_per_sample_weights), indices, bounds, per_sample_weights,
// bag_count, max_rows; accumulates into grad_weight, writes grad_per_sample_weights. Sum and mean
// add each entry's gradient row in entry order on the CPU and in CUDA's deterministic mode
// (atomics otherwise); max sends each element to its max_rows row.
using EmbeddingBagBackwardKernel = void (*)(const EmbeddingBagArgs& args);
EMBER_DECLARE_KERNEL(embedding_bag_backward_kernel, EmbeddingBagBackwardKernel)

}  // namespace ember
