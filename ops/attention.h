// Scaled-dot-product attention: torch.nn.functional.scaled_dot_product_attention, an extended
// entry point with bottom-right causal alignment and the saved log-sum-exp, and the
// variable-length form of FlashAttention's flash_attn_varlen_func. One fused op with one backward
// node (grad of query, key and value); the kernel interface is kernel_interface/attention.h, CPU
// kernels in cpu_kernels/attention.cpp, CUDA kernels in cuda_kernels/attention/.
#pragma once
#include <cstdint>
#include <optional>
#include <tuple>
#include <utility>

#include "ember/kernel_interface/attention.h"
#include "ember/tensor/runtime/generator.h"
#include "ember/tensor/tensor.h"

namespace ember {

// How a causal mask is aligned when the query and key lengths differ (L queries, S keys).
enum class AttentionCausal : uint8_t {
  none,          // no causal mask
  top_left,      // query i sees keys j <= i (PyTorch's is_causal: torch.tril(ones(L, S)))
  bottom_right,  // query i sees keys j <= i + S - L (the last query sees every key: decoding
                 // with a KV cache, FlashAttention >= 2.1's causal)
};

// The options of scaled_dot_product_attention_with_lse, with PyTorch's defaults; set them in a
// chain: AttentionOptions().with_causal(AttentionCausal::bottom_right).with_dropout(0.1).
struct AttentionOptions {
  // Undefined, or bool (true = take part in attention) or floating (added to the scaled scores),
  // broadcastable to [..., L, S]. Carries no gradient.
  Tensor attn_mask;
  double dropout_p = 0;  // in [0, 1]; applied whenever > 0, as in PyTorch's functional form
  AttentionCausal causal = AttentionCausal::none;  // none when attn_mask is given
  std::optional<double> scale;                     // default 1 / sqrt(E)
  bool enable_gqa = false;         // query heads may be a multiple of the key/value heads
  Generator* generator = nullptr;  // dropout's generator; default: the query's device's

  // Sets attn_mask (bool, floating, or undefined for none) and returns *this.
  AttentionOptions& with_mask(Tensor mask) {
    attn_mask = std::move(mask);
    return *this;
  }
  // Sets dropout_p (in [0, 1], default 0) and returns *this.
  AttentionOptions& with_dropout(double p) {
    dropout_p = p;
    return *this;
  }
  // Sets the causal alignment (default none) and returns *this.
  AttentionOptions& with_causal(AttentionCausal c) {
    causal = c;
    return *this;
  }
  // Sets the score scale (default 1 / sqrt(E)) and returns *this.
  AttentionOptions& with_scale(double s) {
    scale = s;
    return *this;
  }
  // Allows grouped-query attention (default false) and returns *this.
  AttentionOptions& with_gqa(bool enable = true) {
    enable_gqa = enable;
    return *this;
  }
  // Sets dropout's generator (null: the query's device's default) and returns *this.
  AttentionOptions& with_generator(Generator* g) {
    generator = g;
    return *this;
  }
};

// torch.nn.functional.scaled_dot_product_attention:
//   out = dropout(softmax(scale * query key^T + mask)) value
// query [..., Hq, L, E], key [..., Hkv, S, E], value [..., Hkv, S, Ev] -> out [..., Hq, L, Ev].
// Any number of leading dims (N, ..., H): the dim before L is the head dim and the others are the
// batch, which must be equal in the three inputs (no batch broadcasting); 3-D inputs [N, L, E]
// have no head dim, 2-D inputs [L, E] no batch either. Heads differ only with enable_gqa, where Hq
// must be a multiple of Hkv and query head h uses key/value head h / (Hq / Hkv).
// attn_mask: bool (true = take part in attention) or floating (added to the scores, converted to
// the query's dtype), broadcastable to [..., Hq, L, S]; it gets no gradient. is_causal: the
// top-left aligned causal mask (query i sees keys j <= i); giving both is an error, as in PyTorch.
// A row with no visible key outputs 0 (PyTorch's math backend since 2.5) and passes no gradient.
// dropout_p: the attention probabilities are dropped with probability dropout_p (the rest scaled
// by 1 / (1 - dropout_p)) whenever dropout_p > 0; the keep decisions come from the Philox state
// reserved from the query's device's default generator, saved for the backward, which recomputes
// them (attention_dropout_keep: the same on the CPU and CUDA). scale: default 1 / sqrt(E).
// Floating dtypes only, one dtype and one device for query, key and value. On CUDA E and Ev must
// be in [32, 256]; the CPU takes any. The backward is one fused kernel: a create_graph backward
// through it raises an Error when a second-order gradient is asked for.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = {}, double dropout_p = 0.0,
                                    bool is_causal = false,
                                    std::optional<double> scale = std::nullopt,
                                    bool enable_gqa = false);

// scaled_dot_product_attention with every option (AttentionOptions: bottom-right causal alignment,
// a dropout generator) that also returns the log-sum-exp of each row's scaled, masked scores
// (before dropout): f32 [..., Hq, L] (-inf for a row with no visible key), no gradient. Returns
// (out, lse); lse is what a caller combining partial attentions (split keys, ring attention) needs.
std::tuple<Tensor, Tensor> scaled_dot_product_attention_with_lse(
    const Tensor& query, const Tensor& key, const Tensor& value,
    const AttentionOptions& options = {});

// FlashAttention's flash_attn_varlen_func: a batch of sequences of different lengths packed
// without padding. q [total_q, Hq, E], k [total_k, Hkv, E], v [total_k, Hkv, Ev] ->
// out [total_q, Hq, Ev]. cu_seqlens_q / cu_seqlens_k: int32 (or int64) [B + 1] on q's device, the
// cumulative lengths: sequence b is rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] of q and rows
// cu_seqlens_k[b] .. cu_seqlens_k[b + 1] of k and v; both start at 0, never decrease and end at
// most at total_q / total_k (rows after the last sequence output 0 and get 0 gradients).
// max_seqlen_q / max_seqlen_k: at least the longest sequence (checked on the CPU; on CUDA they are
// trusted, so that no device-to-host copy is needed). Hq a multiple of Hkv (grouped-query
// attention is always allowed, as in FlashAttention). is_causal: bottom-right aligned per sequence
// (query i of a sequence of lengths len_q, len_k sees keys j <= i + len_k - len_q), as in
// FlashAttention >= 2.1. dropout_p and scale as in scaled_dot_product_attention.
Tensor scaled_dot_product_attention_varlen(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k,
                                           int64_t max_seqlen_q, int64_t max_seqlen_k,
                                           double dropout_p = 0.0, bool is_causal = false,
                                           std::optional<double> scale = std::nullopt);

}  // namespace ember
