// Embedding and EmbeddingBag, as torch.nn.Embedding / EmbeddingBag: a lookup table weight
// [num_embeddings, embedding_dim], initialized N(0, 1) (the padding_idx row zeroed), indexed by an
// int32/int64 tensor (EmbeddingBag reduces bags of rows by ops/embedding_bag.h).
#pragma once
#include <optional>

#include "ember/nn/module.h"
#include "ember/nn/options.h"
#include "ember/ops/embedding_bag.h"

namespace ember::nn {

// The options of Embedding, as torch.nn.Embedding's arguments.
struct EmbeddingOptions {
  // The table's size; padding_idx defaults to none, as PyTorch.
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  EMBER_ARG(int64_t, num_embeddings);  // rows of the table: indices lie in [0, num_embeddings)
  EMBER_ARG(int64_t, embedding_dim);   // the size of each embedding vector
  // The row for padding: zero at initialization and never updated by gradients (negative values
  // count from the end, as in PyTorch).
  EMBER_ARG(std::optional<int64_t>, padding_idx) = std::nullopt;
};

// indices [*] -> [*, embedding_dim], in the weight's dtype (autocast leaves it alone).
class EmbeddingImpl : public Module {
 public:
  // clone() builds a fresh EmbeddingImpl from options, then copies the weight.
  EMBER_CLONEABLE(EmbeddingImpl);
  // Checks the sizes and padding_idx (within [-num_embeddings, num_embeddings)), registers weight
  // and initializes it.
  explicit EmbeddingImpl(const EmbeddingOptions& options);
  EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim)
      : EmbeddingImpl(EmbeddingOptions(num_embeddings, embedding_dim)) {}
  // weight ~ N(0, 1), then the padding_idx row (if any) zeroed, as PyTorch.
  void reset_parameters();
  // indices (int32/int64, any shape [*]) -> weight rows [*, embedding_dim]. Errors on
  // another index dtype.
  Tensor forward(const Tensor& indices);
  void pretty_print(std::ostream& os) const override;

  EmbeddingOptions options;  // the options it was built with
  Tensor weight;             // the table [num_embeddings, embedding_dim]
};
EMBER_MODULE(Embedding);

// The options of EmbeddingBag, as torch.nn.EmbeddingBag's arguments (max_norm, norm_type,
// scale_grad_by_freq and sparse are not offered).
struct EmbeddingBagOptions {
  EmbeddingBagOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  EMBER_ARG(int64_t, num_embeddings);                          // rows of the table
  EMBER_ARG(int64_t, embedding_dim);                           // the size of each embedding vector
  EMBER_ARG(EmbeddingBagMode, mode) = EmbeddingBagMode::mean;  // sum, mean or max of each bag
  // offsets has one more entry than there are bags: the end of the last bag.
  EMBER_ARG(bool, include_last_offset) = false;
  // Entries equal to this row are skipped (zero at initialization, never updated by gradients).
  EMBER_ARG(std::optional<int64_t>, padding_idx) = std::nullopt;
};

// input [B, L] (B bags) or [n] with offsets [B] -> [B, embedding_dim] (see ops/embedding_bag.h).
class EmbeddingBagImpl : public Module {
 public:
  // clone() builds a fresh EmbeddingBagImpl from options, then copies the weight.
  EMBER_CLONEABLE(EmbeddingBagImpl);
  // Checks the sizes and padding_idx, registers weight and initializes it.
  explicit EmbeddingBagImpl(const EmbeddingBagOptions& options);
  EmbeddingBagImpl(int64_t num_embeddings, int64_t embedding_dim)
      : EmbeddingBagImpl(EmbeddingBagOptions(num_embeddings, embedding_dim)) {}
  // weight ~ N(0, 1), then the padding_idx row (if any) zeroed, as PyTorch.
  void reset_parameters();
  // input (int32/int64) [B, L] or [n] with offsets, per_sample_weights (input's shape, mode sum
  // only) -> [B, embedding_dim].
  Tensor forward(const Tensor& input, const Tensor& offsets = {},
                 const Tensor& per_sample_weights = {});
  void pretty_print(std::ostream& os) const override;

  EmbeddingBagOptions options;  // the options it was built with
  Tensor weight;                // the table [num_embeddings, embedding_dim]
};
EMBER_MODULE(EmbeddingBag);

}  // namespace ember::nn
