// Embedding, as torch.nn.Embedding: a lookup table weight [num_embeddings, embedding_dim],
// initialized N(0, 1) (the padding_idx row zeroed), indexed by an int32/int64 tensor of any shape.
#pragma once
#include <optional>

#include "ember/nn/module.h"
#include "ember/nn/options.h"

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

}  // namespace ember::nn
