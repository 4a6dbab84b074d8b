// Embedding and EmbeddingBag (see embedding.h).
#include "ember/nn/embedding.h"

#include <ostream>

#include "ember/autograd/graph/grad_mode.h"
#include "ember/nn/init.h"

namespace ember::nn {

EmbeddingImpl::EmbeddingImpl(const EmbeddingOptions& options_)
    : Module("Embedding"), options(options_) {
  const int64_t n = options.num_embeddings(), d = options.embedding_dim();
  EMBER_CHECK(n > 0 && d > 0, "Embedding: num_embeddings and embedding_dim must be positive, got ",
              n, " and ", d);
  if (options.padding_idx()) {
    int64_t p = *options.padding_idx();
    EMBER_CHECK(p >= -n && p < n, "Embedding: padding_idx ", p, " must be within [", -n, ", ", n,
                ")");
    if (p < 0) options.padding_idx(p + n);
  }
  weight = register_parameter("weight", empty({n, d}));
  reset_parameters();
}

void EmbeddingImpl::reset_parameters() {
  init::normal_(weight, 0.0, 1.0);
  if (options.padding_idx()) {
    autograd::NoGradGuard no_grad;
    weight.select(0, *options.padding_idx()).fill_(0.0);
  }
}

Tensor EmbeddingImpl::forward(const Tensor& indices) {
  EMBER_CHECK(indices.defined() && (indices.dtype() == DType::i64 || indices.dtype() == DType::i32),
              "Embedding: indices must be an int64 or int32 tensor, got ",
              indices.defined() ? dtype_name(indices.dtype()) : "an undefined tensor");
  Tensor out = embedding(weight, indices);
  if (!options.padding_idx() || !out.requires_grad()) return out;
  // The padding row takes no gradient: positions that look it up read it through a detached
  // weight, so their gradient stops there (the values are the same).
  Tensor is_pad = eq(indices, full({}, double(*options.padding_idx()),
                                   TensorOptions(indices.dtype()).with_device(indices.device())));
  return where(is_pad.unsqueeze(-1), embedding(weight.detach(), indices), out);
}

void EmbeddingImpl::pretty_print(std::ostream& os) const {
  os << "Embedding(" << options.num_embeddings() << ", " << options.embedding_dim();
  if (options.padding_idx()) os << ", padding_idx=" << *options.padding_idx();
  os << ")";
}

EmbeddingBagImpl::EmbeddingBagImpl(const EmbeddingBagOptions& options_)
    : Module("EmbeddingBag"), options(options_) {
  const int64_t n = options.num_embeddings(), d = options.embedding_dim();
  EMBER_CHECK(n > 0 && d > 0,
              "EmbeddingBag: num_embeddings and embedding_dim must be positive, got ", n, " and ",
              d);
  if (options.padding_idx()) {
    int64_t p = *options.padding_idx();
    EMBER_CHECK(p >= -n && p < n, "EmbeddingBag: padding_idx ", p, " must be within [", -n, ", ", n,
                ")");
    if (p < 0) options.padding_idx(p + n);
  }
  weight = register_parameter("weight", empty({n, d}));
  reset_parameters();
}

void EmbeddingBagImpl::reset_parameters() {
  init::normal_(weight, 0.0, 1.0);
  if (options.padding_idx()) {
    autograd::NoGradGuard no_grad;
    weight.select(0, *options.padding_idx()).fill_(0.0);
  }
}

Tensor EmbeddingBagImpl::forward(const Tensor& input, const Tensor& offsets,
                                 const Tensor& per_sample_weights) {
  EmbeddingBagParams p;
  p.offsets = offsets;
  p.mode = options.mode();
  p.per_sample_weights = per_sample_weights;
  p.include_last_offset = options.include_last_offset();
  p.padding_idx = options.padding_idx();
  return embedding_bag(input, weight, p);
}

void EmbeddingBagImpl::pretty_print(std::ostream& os) const {
  os << "EmbeddingBag(" << options.num_embeddings() << ", " << options.embedding_dim() << ", mode='"
     << embedding_bag_mode_name(options.mode()) << "'";
  if (options.include_last_offset()) os << ", include_last_offset=True";
  if (options.padding_idx()) os << ", padding_idx=" << *options.padding_idx();
  os << ")";
}

}  // namespace ember::nn
