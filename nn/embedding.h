// Embedding, as torch.nn.Embedding: a lookup table weight [num_embeddings, embedding_dim],
// initialized N(0, 1) (the padding_idx row zeroed), indexed by an int32/int64 tensor of any shape.
#pragma once
#include <optional>

#include "ember/nn/module.h"
#include "ember/nn/options.h"

namespace ember::nn {

struct EmbeddingOptions {
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  EMBER_ARG(int64_t, num_embeddings);
  EMBER_ARG(int64_t, embedding_dim);
  // The row for padding: zero at initialization and never updated by gradients (negative values
  // count from the end, as in PyTorch).
  EMBER_ARG(std::optional<int64_t>, padding_idx) = std::nullopt;
};

// indices [*] -> [*, embedding_dim], in the weight's dtype (autocast leaves it alone).
class EmbeddingImpl : public Module {
 public:
  EMBER_CLONEABLE(EmbeddingImpl);
  explicit EmbeddingImpl(const EmbeddingOptions& options);
  EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim)
      : EmbeddingImpl(EmbeddingOptions(num_embeddings, embedding_dim)) {}
  void reset_parameters();
  Tensor forward(const Tensor& indices);
  void pretty_print(std::ostream& os) const override;

  EmbeddingOptions options;
  Tensor weight;
};
EMBER_MODULE(Embedding);

}  // namespace ember::nn
