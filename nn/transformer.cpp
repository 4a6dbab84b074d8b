// TransformerEncoderLayer, TransformerDecoderLayer, their stacks and Transformer (see
// transformer.h). The forward passes follow PyTorch's Python code step by step (_sa_block,
// _mha_block, _ff_block), so outputs match it for equal parameters.
#include "ember/nn/transformer.h"

#include <limits>
#include <ostream>

#include "ember/nn/init.h"
#include "ember/ops/activation.h"

namespace ember::nn {

namespace {

void check_layer_options(const char* who, const TransformerEncoderLayerOptions& o) {
  EMBER_CHECK(o.d_model() > 0 && o.nhead() > 0 && o.dim_feedforward() > 0, who,
              ": d_model, nhead and dim_feedforward must be positive, got ", o.d_model(), ", ",
              o.nhead(), " and ", o.dim_feedforward());
  EMBER_CHECK(o.d_model() % o.nhead() == 0, who, ": d_model (", o.d_model(),
              ") must be divisible by nhead (", o.nhead(), ")");
  EMBER_CHECK(o.dropout() >= 0 && o.dropout() < 1, who, ": dropout must be in [0, 1), got ",
              o.dropout());
}

MultiheadAttentionOptions attention_options(const TransformerEncoderLayerOptions& o) {
  return MultiheadAttentionOptions(o.d_model(), o.nhead())
      .dropout(o.dropout())
      .bias(o.bias())
      .batch_first(o.batch_first());
}

LayerNormOptions norm_options(const TransformerEncoderLayerOptions& o) {
  return LayerNormOptions({o.d_model()}).eps(o.layer_norm_eps()).bias(o.bias());
}

Tensor activate(TransformerActivation a, const Tensor& x) {
  return a == TransformerActivation::gelu ? gelu(x) : relu(x);
}

// The output of a MultiheadAttention call without weights.
Tensor attend(MultiheadAttention& attn, const Tensor& q, const Tensor& kv, const Tensor& mask,
              const Tensor& key_padding_mask, bool is_causal) {
  return std::get<0>(
      attn->forward(q, kv, kv, key_padding_mask, /*need_weights=*/false, mask, true, is_causal));
}

}  // namespace

// ---- TransformerEncoderLayer
// ---------------------------------------------------------------------

TransformerEncoderLayerImpl::TransformerEncoderLayerImpl(
    const TransformerEncoderLayerOptions& options_)
    : Module("TransformerEncoderLayer"), options(options_) {
  check_layer_options("TransformerEncoderLayer", options);
  const int64_t d = options.d_model(), ff = options.dim_feedforward();
  self_attn = register_module("self_attn", MultiheadAttention(attention_options(options)));
  linear1 = register_module("linear1", Linear(LinearOptions(d, ff).bias(options.bias())));
  dropout = register_module("dropout", Dropout(options.dropout()));
  linear2 = register_module("linear2", Linear(LinearOptions(ff, d).bias(options.bias())));
  norm1 = register_module("norm1", LayerNorm(norm_options(options)));
  norm2 = register_module("norm2", LayerNorm(norm_options(options)));
  dropout1 = register_module("dropout1", Dropout(options.dropout()));
  dropout2 = register_module("dropout2", Dropout(options.dropout()));
}

Tensor TransformerEncoderLayerImpl::self_attention_block(const Tensor& x, const Tensor& mask,
                                                         const Tensor& key_padding_mask,
                                                         bool is_causal) {
  return dropout1(attend(self_attn, x, x, mask, key_padding_mask, is_causal));
}

Tensor TransformerEncoderLayerImpl::feed_forward_block(const Tensor& x) {
  return dropout2(linear2(dropout(activate(options.activation(), linear1(x)))));
}

Tensor TransformerEncoderLayerImpl::forward(const Tensor& src, const Tensor& src_mask,
                                            const Tensor& src_key_padding_mask, bool is_causal) {
  EMBER_CHECK(
      src.defined() && (src.dim() == 2 || src.dim() == 3) && src.size(-1) == options.d_model(),
      "TransformerEncoderLayer: src must be [S, N, d_model] ([N, S, d_model] with "
      "batch_first) or [S, d_model] with d_model = ",
      options.d_model(), ", got ", src.defined() ? src.shape_str() : "undefined");
  Tensor x = src;
  if (options.norm_first()) {
    x = add(x, self_attention_block(norm1(x), src_mask, src_key_padding_mask, is_causal));
    x = add(x, feed_forward_block(norm2(x)));
  } else {
    x = norm1(add(x, self_attention_block(x, src_mask, src_key_padding_mask, is_causal)));
    x = norm2(add(x, feed_forward_block(x)));
  }
  return x;
}

// ---- TransformerDecoderLayer
// ---------------------------------------------------------------------

TransformerDecoderLayerImpl::TransformerDecoderLayerImpl(
    const TransformerDecoderLayerOptions& options_)
    : Module("TransformerDecoderLayer"), options(options_) {
  check_layer_options("TransformerDecoderLayer", options);
  const int64_t d = options.d_model(), ff = options.dim_feedforward();
  self_attn = register_module("self_attn", MultiheadAttention(attention_options(options)));
  multihead_attn =
      register_module("multihead_attn", MultiheadAttention(attention_options(options)));
  linear1 = register_module("linear1", Linear(LinearOptions(d, ff).bias(options.bias())));
  dropout = register_module("dropout", Dropout(options.dropout()));
  linear2 = register_module("linear2", Linear(LinearOptions(ff, d).bias(options.bias())));
  norm1 = register_module("norm1", LayerNorm(norm_options(options)));
  norm2 = register_module("norm2", LayerNorm(norm_options(options)));
  norm3 = register_module("norm3", LayerNorm(norm_options(options)));
  dropout1 = register_module("dropout1", Dropout(options.dropout()));
  dropout2 = register_module("dropout2", Dropout(options.dropout()));
  dropout3 = register_module("dropout3", Dropout(options.dropout()));
}

Tensor TransformerDecoderLayerImpl::feed_forward_block(const Tensor& x) {
  return dropout3(linear2(dropout(activate(options.activation(), linear1(x)))));
}

Tensor TransformerDecoderLayerImpl::forward(const Tensor& tgt, const Tensor& memory,
                                            const Tensor& tgt_mask, const Tensor& memory_mask,
                                            const Tensor& tgt_key_padding_mask,
                                            const Tensor& memory_key_padding_mask,
                                            bool tgt_is_causal, bool memory_is_causal) {
  EMBER_CHECK(tgt.defined() && memory.defined() && tgt.dim() == memory.dim() &&
                  (tgt.dim() == 2 || tgt.dim() == 3) && tgt.size(-1) == options.d_model() &&
                  memory.size(-1) == options.d_model(),
              "TransformerDecoderLayer: tgt and memory must both be 3-D (batched) or 2-D "
              "(unbatched) with last dim d_model = ",
              options.d_model(), ", got tgt ", tgt.defined() ? tgt.shape_str() : "undefined",
              " and memory ", memory.defined() ? memory.shape_str() : "undefined");
  auto sa = [&](const Tensor& x) {
    return dropout1(attend(self_attn, x, x, tgt_mask, tgt_key_padding_mask, tgt_is_causal));
  };
  auto mha = [&](const Tensor& x) {
    return dropout2(
        attend(multihead_attn, x, memory, memory_mask, memory_key_padding_mask, memory_is_causal));
  };
  Tensor x = tgt;
  if (options.norm_first()) {
    x = add(x, sa(norm1(x)));
    x = add(x, mha(norm2(x)));
    x = add(x, feed_forward_block(norm3(x)));
  } else {
    x = norm1(add(x, sa(x)));
    x = norm2(add(x, mha(x)));
    x = norm3(add(x, feed_forward_block(x)));
  }
  return x;
}

// ---- the stacks
// ------------------------------------------------------------------------------------

TransformerEncoderImpl::TransformerEncoderImpl(const TransformerEncoderOptions& options_)
    : Module("TransformerEncoder"), options(options_) {
  EMBER_CHECK(options.num_layers() >= 1, "TransformerEncoder: num_layers must be at least 1, got ",
              options.num_layers());
  layers = register_module("layers", ModuleList());
  TransformerEncoderLayer first(options.encoder_layer());
  layers->push_back(first);
  for (int64_t i = 1; i < options.num_layers(); ++i) layers->push_back(first.clone());
  if (options.norm()) norm = register_module("norm", LayerNorm(*options.norm()));
}

Tensor TransformerEncoderImpl::forward(const Tensor& src, const Tensor& mask,
                                       const Tensor& src_key_padding_mask, bool is_causal) {
  Tensor x = src;
  for (size_t i = 0; i < layers->size(); ++i)
    x = layers->at<TransformerEncoderLayerImpl>(i).forward(x, mask, src_key_padding_mask,
                                                           is_causal);
  return norm.is_empty() ? x : norm(x);
}

TransformerDecoderImpl::TransformerDecoderImpl(const TransformerDecoderOptions& options_)
    : Module("TransformerDecoder"), options(options_) {
  EMBER_CHECK(options.num_layers() >= 1, "TransformerDecoder: num_layers must be at least 1, got ",
              options.num_layers());
  layers = register_module("layers", ModuleList());
  TransformerDecoderLayer first(options.decoder_layer());
  layers->push_back(first);
  for (int64_t i = 1; i < options.num_layers(); ++i) layers->push_back(first.clone());
  if (options.norm()) norm = register_module("norm", LayerNorm(*options.norm()));
}

Tensor TransformerDecoderImpl::forward(const Tensor& tgt, const Tensor& memory,
                                       const Tensor& tgt_mask, const Tensor& memory_mask,
                                       const Tensor& tgt_key_padding_mask,
                                       const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                       bool memory_is_causal) {
  Tensor x = tgt;
  for (size_t i = 0; i < layers->size(); ++i)
    x = layers->at<TransformerDecoderLayerImpl>(i).forward(
        x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
        tgt_is_causal, memory_is_causal);
  return norm.is_empty() ? x : norm(x);
}

// ---- Transformer
// -----------------------------------------------------------------------------------

TransformerImpl::TransformerImpl(const TransformerOptions& options_)
    : Module("Transformer"), options(options_) {
  const auto layer = TransformerEncoderLayerOptions(options.d_model(), options.nhead())
                         .dim_feedforward(options.dim_feedforward())
                         .dropout(options.dropout())
                         .activation(options.activation())
                         .layer_norm_eps(options.layer_norm_eps())
                         .batch_first(options.batch_first())
                         .norm_first(options.norm_first())
                         .bias(options.bias());
  const auto final_norm =
      LayerNormOptions({options.d_model()}).eps(options.layer_norm_eps()).bias(options.bias());
  encoder = register_module(
      "encoder",
      TransformerEncoder(
          TransformerEncoderOptions(layer, options.num_encoder_layers()).norm(final_norm)));
  decoder = register_module(
      "decoder",
      TransformerDecoder(
          TransformerDecoderOptions(layer, options.num_decoder_layers()).norm(final_norm)));
  for (Tensor p : parameters())
    if (p.dim() > 1) init::xavier_uniform_(p);
}

Tensor TransformerImpl::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask,
                                const Tensor& tgt_mask, const Tensor& memory_mask,
                                const Tensor& src_key_padding_mask,
                                const Tensor& tgt_key_padding_mask,
                                const Tensor& memory_key_padding_mask, bool src_is_causal,
                                bool tgt_is_causal, bool memory_is_causal) {
  EMBER_CHECK(src.defined() && tgt.defined() && src.dim() == tgt.dim(),
              "Transformer: src and tgt must be defined and of the same rank, got src ",
              src.defined() ? src.shape_str() : "undefined", " and tgt ",
              tgt.defined() ? tgt.shape_str() : "undefined");
  if (src.dim() == 3) {
    const int64_t batch_dim = options.batch_first() ? 0 : 1;
    EMBER_CHECK(src.size(batch_dim) == tgt.size(batch_dim),
                "Transformer: the batch number of src and tgt must be equal, got src ",
                src.shape_str(), " and tgt ", tgt.shape_str(),
                options.batch_first() ? " (batch_first)" : "");
  }
  EMBER_CHECK(src.size(-1) == options.d_model() && tgt.size(-1) == options.d_model(),
              "Transformer: the feature number of src and tgt must be equal to d_model = ",
              options.d_model(), ", got src ", src.shape_str(), " and tgt ", tgt.shape_str());
  Tensor memory = encoder->forward(src, src_mask, src_key_padding_mask, src_is_causal);
  return decoder->forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                          memory_key_padding_mask, tgt_is_causal, memory_is_causal);
}

Tensor TransformerImpl::generate_square_subsequent_mask(int64_t sz, Device device, DType dtype) {
  EMBER_CHECK(sz >= 0, "Transformer::generate_square_subsequent_mask: sz must be >= 0, got ", sz);
  return full({sz, sz}, -std::numeric_limits<double>::infinity(),
              TensorOptions(dtype).with_device(device))
      .triu(1);
}

}  // namespace ember::nn
