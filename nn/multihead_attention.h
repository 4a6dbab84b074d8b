// MultiheadAttention, as torch.nn.MultiheadAttention: PyTorch's options, parameter names, shapes,
// initialization and mask conventions, so that state dicts load 1:1 both ways.
//
// Parameters (registered in PyTorch's order, so state_dict() lists them as PyTorch does):
//   in_proj_weight [3E, E]                      when kdim == vdim == E (the packed projection)
//   q_proj_weight [E, E], k_proj_weight [E, kdim], v_proj_weight [E, vdim]   otherwise
//   in_proj_bias [3E]                           (when bias)
//   bias_k [1, 1, E], bias_v [1, 1, E]          (when add_bias_kv)
//   out_proj.weight [E, E], out_proj.bias [E]   (out_proj is a Linear; bias when bias)
// Initialization as PyTorch: xavier_uniform_ on in_proj_weight (or on each of q/k/v_proj_weight),
// zeros for in_proj_bias and out_proj.bias, xavier_normal_ on bias_k and bias_v, out_proj.weight
// as Linear's default.
//
// Masks follow MultiheadAttention's convention, which is the opposite of
// scaled_dot_product_attention's: a bool key_padding_mask or attn_mask is true where attention is
// NOT allowed; a floating mask is added to the attention scores (-inf forbids). Both are turned
// into one additive mask in the scores' dtype; a row with every key forbidden gives NaN, as in
// PyTorch.
#pragma once
#include <cstdint>
#include <tuple>

#include "ember/nn/linear.h"
#include "ember/nn/module.h"
#include "ember/nn/options.h"

namespace ember::nn {

// The options of MultiheadAttention, as torch.nn.MultiheadAttention's arguments.
struct MultiheadAttentionOptions {
  // E and the number of heads (E must be divisible by it); the rest default as PyTorch's.
  MultiheadAttentionOptions(int64_t embed_dim, int64_t num_heads)
      : embed_dim_(embed_dim), num_heads_(num_heads), kdim_(embed_dim), vdim_(embed_dim) {}
  EMBER_ARG(int64_t, embed_dim);   // E, the query's (and the output's) feature size
  EMBER_ARG(int64_t, num_heads);   // parallel heads; each sees E / num_heads features
  EMBER_ARG(double, dropout) = 0;  // dropout on the attention weights, in training; in [0, 1)
  EMBER_ARG(bool, bias) = true;    // whether in_proj and out_proj have biases
  // Learned key and value rows (bias_k, bias_v) appended to the keys and values.
  EMBER_ARG(bool, add_bias_kv) = false;
  // A row of zeros appended to the keys and values (after splitting into heads).
  EMBER_ARG(bool, add_zero_attn) = false;
  EMBER_ARG(int64_t, kdim);  // the key's feature size (E by default)
  EMBER_ARG(int64_t, vdim);  // the value's feature size (E by default)
  // Inputs and outputs [N, L, E] instead of [L, N, E].
  EMBER_ARG(bool, batch_first) = false;
};

// Multi-head attention (see the file comment). Shapes, with N the batch, L the target (query)
// length, S the source (key) length, H the heads:
//   query [L, N, E] (batch_first: [N, L, E]; unbatched: [L, E])
//   key   [S, N, kdim], value [S, N, vdim] (same layouts)
//   key_padding_mask [N, S] (unbatched: [S]): bool true = ignore that key, or floating (added)
//   attn_mask [L, S] or [N * H, L, S]: bool true = not allowed, or floating (added)
// forward returns (output [L, N, E] in the query's layout, weights): weights are [N, L, S]
// (averaged over heads) or [N, H, L, S] (average_attn_weights false) when need_weights, else an
// undefined tensor. With need_weights false the attention runs through
// scaled_dot_product_attention (ops/attention.h), the fused path (on CUDA when the head size
// E / H is within its kernels' [32, 256]; otherwise explicitly); with need_weights true the
// weights are computed explicitly as softmax(q k^T / sqrt(E / H) + mask), as PyTorch does.
// is_causal asks for a causal mask: as PyTorch, with need_weights false and no key_padding_mask
// the attention runs with is_causal (attn_mask, the causal mask's hint, is then not read);
// otherwise attn_mask is used and, when it is undefined, the causal mask [L, S] is built here
// (PyTorch requires it to be given).
class MultiheadAttentionImpl : public Module {
 public:
  // clone() builds a fresh MultiheadAttentionImpl from options, then copies the parameters.
  EMBER_CLONEABLE(MultiheadAttentionImpl);
  // Checks the options (positive sizes, embed_dim divisible by num_heads, dropout in [0, 1)),
  // registers the parameters listed in the file comment and initializes them.
  explicit MultiheadAttentionImpl(const MultiheadAttentionOptions& options);
  MultiheadAttentionImpl(int64_t embed_dim, int64_t num_heads)
      : MultiheadAttentionImpl(MultiheadAttentionOptions(embed_dim, num_heads)) {}
  // Re-initializes as PyTorch's _reset_parameters (see the file comment).
  void reset_parameters();
  // (output, attention weights); see the class comment for shapes and masks.
  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const Tensor& key_padding_mask = {}, bool need_weights = true,
                                     const Tensor& attn_mask = {}, bool average_attn_weights = true,
                                     bool is_causal = false);

  // Whether kdim == vdim == embed_dim (the packed in_proj_weight is used).
  bool qkv_same_embed_dim() const {
    return options.kdim() == options.embed_dim() && options.vdim() == options.embed_dim();
  }
  // E / num_heads, each head's feature size.
  int64_t head_dim() const { return options.embed_dim() / options.num_heads(); }

  MultiheadAttentionOptions options;  // the options it was built with
  // The parameters, undefined when the options leave them out (see the file comment).
  Tensor in_proj_weight;     // [3E, E], when kdim == vdim == E
  Tensor q_proj_weight;      // [E, E], when kdim or vdim differs from E
  Tensor k_proj_weight;      // [E, kdim], when kdim or vdim differs from E
  Tensor v_proj_weight;      // [E, vdim], when kdim or vdim differs from E
  Tensor in_proj_bias;       // [3E], with bias
  Tensor bias_k;             // [1, 1, E], with add_bias_kv
  Tensor bias_v;             // [1, 1, E], with add_bias_kv
  Linear out_proj{nullptr};  // E -> E, the output projection
};
EMBER_MODULE(MultiheadAttention);

}  // namespace ember::nn
