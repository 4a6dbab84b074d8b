// Transformer layers and stacks, as torch.nn.TransformerEncoderLayer / TransformerDecoderLayer /
// TransformerEncoder / TransformerDecoder / Transformer: PyTorch's options (with their defaults),
// submodule names and parameter names, so state dicts load 1:1 both ways:
//   encoder layer: self_attn.*, linear1.*, linear2.*, norm1.*, norm2.*
//   decoder layer: self_attn.*, multihead_attn.*, linear1.*, linear2.*, norm1.*, norm2.*, norm3.*
//   stacks:        layers.0.*, layers.1.*, ..., norm.* (when a final norm is given)
//   Transformer:   encoder.* and decoder.* (each stack with its final norm)
// The self_attn / multihead_attn submodules are nn::MultiheadAttention (nn/multihead_attention.h),
// run with need_weights false (the scaled_dot_product_attention path), as PyTorch does. Masks
// follow MultiheadAttention's convention: bool true = not allowed, floating masks are added.
#pragma once
#include <cstdint>
#include <optional>

#include "ember/nn/container.h"
#include "ember/nn/dropout.h"
#include "ember/nn/linear.h"
#include "ember/nn/module.h"
#include "ember/nn/multihead_attention.h"
#include "ember/nn/norm.h"
#include "ember/nn/options.h"

namespace ember::nn {

// The feed-forward block's activation, as the layers' activation="relu" / "gelu" (exact erf form).
enum class TransformerActivation { relu, gelu };

// The options of TransformerEncoderLayer, as torch.nn.TransformerEncoderLayer's arguments.
struct TransformerEncoderLayerOptions {
  // The model width and head count; the rest default as PyTorch's.
  TransformerEncoderLayerOptions(int64_t d_model, int64_t nhead)
      : d_model_(d_model), nhead_(nhead) {}
  EMBER_ARG(int64_t, d_model);                 // the feature size of every token
  EMBER_ARG(int64_t, nhead);                   // attention heads (d_model must be divisible)
  EMBER_ARG(int64_t, dim_feedforward) = 2048;  // the feed-forward block's hidden size
  EMBER_ARG(double, dropout) = 0.1;  // on attention weights, the residual branches and the FF
  EMBER_ARG(TransformerActivation, activation) = TransformerActivation::relu;
  EMBER_ARG(double, layer_norm_eps) = 1e-5;  // the LayerNorms' eps
  EMBER_ARG(bool, batch_first) = false;      // inputs [N, T, d_model] instead of [T, N, d_model]
  // Pre-norm (x + f(norm(x))) instead of post-norm (norm(x + f(x))).
  EMBER_ARG(bool, norm_first) = false;
  EMBER_ARG(bool, bias) = true;  // biases in the Linear and LayerNorm layers and the attention
};

// The decoder layer takes the same options as the encoder layer.
using TransformerDecoderLayerOptions = TransformerEncoderLayerOptions;

// One encoder layer: self-attention and a feed-forward block (linear1, activation, dropout,
// linear2), each in a residual branch with dropout and a LayerNorm (post- or pre-norm).
class TransformerEncoderLayerImpl : public Module {
 public:
  // clone() builds a fresh layer from options, then copies the parameters.
  EMBER_CLONEABLE(TransformerEncoderLayerImpl);
  // Builds the submodules (see the file comment for their names).
  explicit TransformerEncoderLayerImpl(const TransformerEncoderLayerOptions& options);
  TransformerEncoderLayerImpl(int64_t d_model, int64_t nhead)
      : TransformerEncoderLayerImpl(TransformerEncoderLayerOptions(d_model, nhead)) {}
  // src [S, N, d_model] (batch_first: [N, S, d_model]; unbatched [S, d_model]) -> the same shape.
  // src_mask [S, S] or [N * nhead, S, S] and src_key_padding_mask [N, S] as MultiheadAttention's
  // attn_mask and key_padding_mask; is_causal as MultiheadAttention's (a hint that src_mask is
  // the causal mask, or the causal mask itself when src_mask is undefined).
  Tensor forward(const Tensor& src, const Tensor& src_mask = {},
                 const Tensor& src_key_padding_mask = {}, bool is_causal = false);

  TransformerEncoderLayerOptions options;  // the options it was built with
  MultiheadAttention self_attn{nullptr};   // the self-attention
  Linear linear1{nullptr};                 // d_model -> dim_feedforward
  Linear linear2{nullptr};                 // dim_feedforward -> d_model
  Dropout dropout{nullptr};                // inside the feed-forward block
  LayerNorm norm1{nullptr};                // around the self-attention branch
  LayerNorm norm2{nullptr};                // around the feed-forward branch
  Dropout dropout1{nullptr};               // on the self-attention branch
  Dropout dropout2{nullptr};               // on the feed-forward branch

 private:
  Tensor self_attention_block(const Tensor& x, const Tensor& mask, const Tensor& key_padding_mask,
                              bool is_causal);
  Tensor feed_forward_block(const Tensor& x);
};
EMBER_MODULE(TransformerEncoderLayer);

// One decoder layer: self-attention, cross-attention over the encoder's output (memory) and a
// feed-forward block, each in a residual branch with dropout and a LayerNorm.
class TransformerDecoderLayerImpl : public Module {
 public:
  // clone() builds a fresh layer from options, then copies the parameters.
  EMBER_CLONEABLE(TransformerDecoderLayerImpl);
  // Builds the submodules (see the file comment for their names).
  explicit TransformerDecoderLayerImpl(const TransformerDecoderLayerOptions& options);
  TransformerDecoderLayerImpl(int64_t d_model, int64_t nhead)
      : TransformerDecoderLayerImpl(TransformerDecoderLayerOptions(d_model, nhead)) {}
  // tgt [T, N, d_model], memory [S, N, d_model] (batch_first: [N, T, d_model], [N, S, d_model])
  // -> tgt's shape. tgt_mask [T, T] / memory_mask [T, S] and the key padding masks [N, T] /
  // [N, S] as MultiheadAttention's; the *_is_causal flags as its is_causal.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& tgt_key_padding_mask = {},
                 const Tensor& memory_key_padding_mask = {}, bool tgt_is_causal = false,
                 bool memory_is_causal = false);

  TransformerDecoderLayerOptions options;      // the options it was built with
  MultiheadAttention self_attn{nullptr};       // the self-attention over tgt
  MultiheadAttention multihead_attn{nullptr};  // the cross-attention over memory
  Linear linear1{nullptr};                     // d_model -> dim_feedforward
  Linear linear2{nullptr};                     // dim_feedforward -> d_model
  Dropout dropout{nullptr};                    // inside the feed-forward block
  LayerNorm norm1{nullptr};                    // around the self-attention branch
  LayerNorm norm2{nullptr};                    // around the cross-attention branch
  LayerNorm norm3{nullptr};                    // around the feed-forward branch
  Dropout dropout1{nullptr};                   // on the self-attention branch
  Dropout dropout2{nullptr};                   // on the cross-attention branch
  Dropout dropout3{nullptr};                   // on the feed-forward branch

 private:
  Tensor feed_forward_block(const Tensor& x);
};
EMBER_MODULE(TransformerDecoderLayer);

// The options of TransformerEncoder: the layer to stack, how many, and an optional final norm.
struct TransformerEncoderOptions {
  // num_layers copies of a layer built from encoder_layer.
  TransformerEncoderOptions(TransformerEncoderLayerOptions encoder_layer, int64_t num_layers)
      : encoder_layer_(std::move(encoder_layer)), num_layers_(num_layers) {}
  EMBER_ARG(TransformerEncoderLayerOptions, encoder_layer);  // every layer's options
  EMBER_ARG(int64_t, num_layers);                            // how many layers, >= 1
  // A LayerNorm applied to the last layer's output (registered as "norm"), or none.
  EMBER_ARG(std::optional<LayerNormOptions>, norm) = std::nullopt;
};

// A stack of encoder layers (layers.0, layers.1, ...) and an optional final norm. As PyTorch's
// deep copies of one layer, every layer starts with the same parameter values.
class TransformerEncoderImpl : public Module {
 public:
  // clone() builds a fresh stack from options, then copies the parameters.
  EMBER_CLONEABLE(TransformerEncoderImpl);
  explicit TransformerEncoderImpl(const TransformerEncoderOptions& options);
  // src -> the same shape, through every layer (the masks and is_causal go to each), then norm.
  Tensor forward(const Tensor& src, const Tensor& mask = {},
                 const Tensor& src_key_padding_mask = {}, bool is_causal = false);

  TransformerEncoderOptions options;  // the options it was built with
  ModuleList layers{nullptr};         // the TransformerEncoderLayers
  LayerNorm norm{nullptr};            // empty when options.norm() is not set
};
EMBER_MODULE(TransformerEncoder);

// The options of TransformerDecoder: the layer to stack, how many, and an optional final norm.
struct TransformerDecoderOptions {
  // num_layers copies of a layer built from decoder_layer.
  TransformerDecoderOptions(TransformerDecoderLayerOptions decoder_layer, int64_t num_layers)
      : decoder_layer_(std::move(decoder_layer)), num_layers_(num_layers) {}
  EMBER_ARG(TransformerDecoderLayerOptions, decoder_layer);  // every layer's options
  EMBER_ARG(int64_t, num_layers);                            // how many layers, >= 1
  // A LayerNorm applied to the last layer's output (registered as "norm"), or none.
  EMBER_ARG(std::optional<LayerNormOptions>, norm) = std::nullopt;
};

// A stack of decoder layers (layers.0, ...) and an optional final norm; layers start equal.
class TransformerDecoderImpl : public Module {
 public:
  // clone() builds a fresh stack from options, then copies the parameters.
  EMBER_CLONEABLE(TransformerDecoderImpl);
  explicit TransformerDecoderImpl(const TransformerDecoderOptions& options);
  // tgt, memory -> tgt's shape, through every layer (arguments as the decoder layer's), then norm.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& tgt_key_padding_mask = {},
                 const Tensor& memory_key_padding_mask = {}, bool tgt_is_causal = false,
                 bool memory_is_causal = false);

  TransformerDecoderOptions options;  // the options it was built with
  ModuleList layers{nullptr};         // the TransformerDecoderLayers
  LayerNorm norm{nullptr};            // empty when options.norm() is not set
};
EMBER_MODULE(TransformerDecoder);

// The options of Transformer, as torch.nn.Transformer's arguments (with their defaults).
struct TransformerOptions {
  // PyTorch's defaults: d_model 512, 8 heads, 6 + 6 layers.
  TransformerOptions() = default;
  TransformerOptions(int64_t d_model, int64_t nhead) : d_model_(d_model), nhead_(nhead) {}
  TransformerOptions(int64_t d_model, int64_t nhead, int64_t num_encoder_layers,
                     int64_t num_decoder_layers)
      : d_model_(d_model),
        nhead_(nhead),
        num_encoder_layers_(num_encoder_layers),
        num_decoder_layers_(num_decoder_layers) {}
  EMBER_ARG(int64_t, d_model) = 512;
  EMBER_ARG(int64_t, nhead) = 8;
  EMBER_ARG(int64_t, num_encoder_layers) = 6;
  EMBER_ARG(int64_t, num_decoder_layers) = 6;
  EMBER_ARG(int64_t, dim_feedforward) = 2048;
  EMBER_ARG(double, dropout) = 0.1;
  EMBER_ARG(TransformerActivation, activation) = TransformerActivation::relu;
  EMBER_ARG(double, layer_norm_eps) = 1e-5;
  EMBER_ARG(bool, batch_first) = false;
  EMBER_ARG(bool, norm_first) = false;
  EMBER_ARG(bool, bias) = true;
};

// The encoder-decoder model of "Attention Is All You Need", as torch.nn.Transformer: an encoder
// and a decoder stack, each with a final LayerNorm; every parameter with more than one dim is
// re-initialized by xavier_uniform_, as PyTorch's _reset_parameters.
class TransformerImpl : public Module {
 public:
  // clone() builds a fresh model from options, then copies the parameters.
  EMBER_CLONEABLE(TransformerImpl);
  explicit TransformerImpl(const TransformerOptions& options = {});
  // src [S, N, d_model], tgt [T, N, d_model] (batch_first: [N, S, ...], [N, T, ...]) ->
  // [T, N, d_model] (tgt's layout). Masks as the encoder's and decoder's.
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = {},
                 const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& src_key_padding_mask = {}, const Tensor& tgt_key_padding_mask = {},
                 const Tensor& memory_key_padding_mask = {}, bool src_is_causal = false,
                 bool tgt_is_causal = false, bool memory_is_causal = false);
  // The causal mask [sz, sz]: 0 on and below the diagonal, -inf above (float32 unless a dtype is
  // given), as torch.nn.Transformer.generate_square_subsequent_mask.
  static Tensor generate_square_subsequent_mask(int64_t sz, Device device = Device::cpu(),
                                                DType dtype = DType::f32);

  TransformerOptions options;           // the options it was built with
  TransformerEncoder encoder{nullptr};  // the encoder stack, with its final norm
  TransformerDecoder decoder{nullptr};  // the decoder stack, with its final norm
};
EMBER_MODULE(Transformer);

}  // namespace ember::nn
