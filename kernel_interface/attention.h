// The attention kernel interface: AttentionProblem, the problem of the "attention" algorithm slots
// (forward and backward of scaled-dot-product attention; the algorithm cache picks among the
// reference math path and our flash kernels), and the dropout keep rule both backends share so
// that one seed drops the same attention probabilities on the CPU and the GPU, in the forward and
// again in the backward. The op is in ops/attention.h; CPU kernels in cpu_kernels/attention.cpp,
// CUDA kernels in cuda_kernels/attention/.
#pragma once
#include <cstdint>

#include "ember/dispatch/algo_cache.h"
#include "ember/dispatch/registry.h"
#include "ember/tensor/philox.h"
#include "ember/tensor/runtime/generator.h"
#include "ember/tensor/tensor.h"

namespace ember {

// One scaled-dot-product attention, out = softmax(scale * q k^T + mask) v per (batch, head).
//
// Padded batches (cu_seqlens_q undefined): q [B, Hq, Tq, D], k [B, Hkv, Tk, D],
// v [B, Hkv, Tk, Dv], out [B, Hq, Tq, Dv]. Any strides with unit stride on the last dim, so a
// [B, T, H, D] tensor transposed to [B, H, T, D] is taken as it is; the op never passes a broadcast
// (stride 0) dim of q, k, v or grad_out (it copies such views), and allocates out, lse and the
// gradients contiguous.
// Variable-length batches (cu_seqlens_q and cu_seqlens_k defined, int32 [B + 1] on q's device,
// starting at 0 and non-decreasing): q [total_q, Hq, D], k [total_k, Hkv, D], v [total_k, Hkv, Dv],
// out [total_q, Hq, Dv]; sequence b is rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] of q (and of
// out) and rows cu_seqlens_k[b] .. cu_seqlens_k[b + 1] of k and v. max_seqlen_q / max_seqlen_k
// bound the lengths (host values the op computes or the caller passes, so that no kernel launch
// needs to read cu_seqlens on the host).
//
// Grouped-query attention: Hq is a multiple of Hkv; query head h reads key/value head
// h / (Hq / Hkv). q, k, v, out and the gradients share one floating dtype (bf16, f16, f32, f64);
// bf16/f16 accumulate in fp32.
struct AttentionProblem {
  dispatch::Direction direction = dispatch::Direction::forward;
  Tensor q, k, v;
  Tensor cu_seqlens_q, cu_seqlens_k;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  // Padded batches only: undefined, or the mask expanded (stride 0 where broadcast) to
  // [B, Hq, Tq, Tk]; bool (true = take part in attention) or additive (q's dtype or f32).
  Tensor mask;
  // Causal: key j is visible to query i iff j <= i + causal_offset (0: top-left aligned, PyTorch's
  // is_causal; Tk - Tq: bottom-right aligned). Variable-length batches: i and j count from the
  // start of their sequence and the alignment is per sequence, bottom-right plus causal_offset:
  // j <= i + (len_k - len_q) + causal_offset with len_q, len_k that sequence's lengths
  // (causal_offset 0 there is FlashAttention's varlen causal; the op always passes 0).
  bool causal = false;
  int64_t causal_offset = 0;
  double scale = 1;
  // Dropout on the attention probabilities (after softmax): probability p is dropped, the rest
  // scaled by 1 / (1 - p). The keep decision is attention_dropout_keep below, fed from `philox`
  // (the seed and offset the op reserved: a multiple of 4 values covering the longest key
  // sequence, so that each (bh, i) row draws its own Philox blocks; the backward sees the same
  // state).
  double dropout_p = 0;
  PhiloxState philox;
  // Forward writes out (q's dtype) and lse (f32 [B, Hq, Tq], or [Hq, total_q] for variable-length
  // batches): the natural-log log-sum-exp of each row's scaled, masked scores, -inf for a row with
  // no visible key (its output row is 0, as PyTorch's math backend gives since 2.5).
  Tensor out, lse;
  // Backward reads q, k, v, out, lse, grad_out and writes grad_q, grad_k, grad_v (dense, of q's
  // dtype, overwritten, never accumulated into; grad_k and grad_v have Hkv heads, the sum over
  // each group of query heads).
  Tensor grad_out, grad_q, grad_k, grad_v;

  Device device() const { return q.device(); }
  bool varlen() const { return cu_seqlens_q.defined(); }
  AttentionProblem with_scratch_outputs() const;  // outputs on fresh storage (benchmarking)
};

dispatch::OpId attention_op();
dispatch::AlgoSlot& attention_slot(dispatch::Direction direction, DeviceType device_type);
dispatch::AlgoKey attention_key(const AttentionProblem& problem);
// The algorithm the cache picks for `problem` under the current settings (tests, introspection).
const dispatch::Algorithm<AttentionProblem>& attention_choose(const AttentionProblem& problem);
// Chooses through algo_cache() and runs.
void attention_run(const AttentionProblem& problem);

// Whether attention probability (bh, i, j) survives dropout, bh = batch * Hq + head and i, j the
// query and key positions within the sequence. `offset` is the effective Philox offset (the
// state's offset plus, inside a CUDA graph capture, the value at its device_offset). One
// Philox4x32-10 block keyed by the seed, with counter (j / 4 + offset / 4, i, bh), decides four
// consecutive keys: lane j % 4 as a (0, 1] uniform is kept iff it is > p. The same on both
// backends, bit for bit, so the backward and a replayed CUDA graph recompute the forward's mask.
EMBER_PHILOX_FN bool attention_dropout_keep(uint64_t seed, uint64_t offset, uint64_t bh, uint64_t i,
                                            uint64_t j, float p) {
  const uint64_t block = j / 4 + offset / 4;
  const philox::U32x4 counter{uint32_t(block), uint32_t(block >> 32), uint32_t(i), uint32_t(bh)};
  const philox::U32x4 bits = philox::philox4x32_10(counter, uint32_t(seed), uint32_t(seed >> 32));
  const uint32_t lane = j % 4 == 0 ? bits.x : j % 4 == 1 ? bits.y : j % 4 == 2 ? bits.z : bits.w;
  return philox::uniform_from_bits(lane) > p;
}

}  // namespace ember
