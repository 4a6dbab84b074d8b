// The definitions behind kernel_interface/attention.h: the attention algorithm slots, their cache
// key and AttentionProblem's scratch outputs.
#include "ember/kernel_interface/attention.h"

#include <algorithm>

namespace ember {

using dispatch::Direction;

namespace {

// The largest power of two up to 16 dividing the tensor's base address and the byte size of each
// stride of a dim of size > 1 but the last: what a kernel loading 16-byte vectors along rows may
// assume.
uint8_t row_alignment(const Tensor& t) {
  if (!t.defined() || t.numel() == 0) return 16;
  uint64_t bits = reinterpret_cast<uintptr_t>(t.data_ptr());
  const uint64_t element = element_size(t.dtype());
  for (int64_t d = 0; d + 1 < t.dim(); ++d)
    if (t.size(d) > 1) bits |= uint64_t(t.stride(d)) * element;
  uint8_t align = 16;
  while (align > 1 && bits % align != 0) align /= 2;
  return align;
}

dispatch::OperandLayout layout_of(const Tensor& t) {
  return t.is_contiguous() ? dispatch::OperandLayout::contiguous : dispatch::OperandLayout::strided;
}

// The mask's kind (0 none, 1 bool, 2 additive), its dtype and which of its four dims
// [B, Hq, Tq, Tk] are broadcast (stride 0 over a size > 1), packed in one int.
int32_t mask_code(const Tensor& mask) {
  if (!mask.defined()) return 0;
  int32_t code = mask.dtype() == DType::boolean ? 1 : 2;
  code |= int32_t(mask.dtype()) << 2;
  for (int64_t d = 0; d < mask.dim() && d < 4; ++d)
    if (mask.size(d) > 1 && mask.stride(d) == 0) code |= 1 << (8 + d);
  return code;
}

Tensor fresh_like(const Tensor& t) { return t.defined() ? empty_with_layout_of(t, t.dtype()) : t; }

}  // namespace

// The written tensors are dense (ops/attention.cpp allocates them): the scratch ones get their
// sizes and strides over fresh storage.
AttentionProblem AttentionProblem::with_scratch_outputs() const {
  AttentionProblem scratch = *this;
  if (direction == Direction::forward) {
    scratch.out = fresh_like(out);
    scratch.lse = fresh_like(lse);
  } else {
    scratch.grad_q = fresh_like(grad_q);
    scratch.grad_k = fresh_like(grad_k);
    scratch.grad_v = fresh_like(grad_v);
  }
  return scratch;
}

dispatch::OpId attention_op() {
  static const dispatch::OpId id = dispatch::op_id("attention");
  return id;
}

dispatch::AlgoSlot& attention_slot(Direction direction, DeviceType device_type) {
  return dispatch::algo_slot(attention_op(), direction, device_type);
}

// input_sizes: [B, Hq, Tq, D], weight_sizes: [B, Hkv, Tk, Dv], output_sizes: [B, Hq, Tq, Dv]
// (for variable-length batches B is the number of sequences and Tq, Tk the maximum lengths);
// layouts of q, k and out; weight_dtype: the mask's dtype; extra: the mask code, the flags
// (causal, dropout, variable-length), the causal offset and Hq / Hkv.
dispatch::AlgoKey attention_key(const AttentionProblem& p) {
  dispatch::AlgoKey key = dispatch::make_algo_key(attention_op(), p.direction, p.device());
  const bool varlen = p.varlen();
  const int64_t batch = varlen ? p.cu_seqlens_q.numel() - 1 : p.q.size(0);
  const int64_t hq = p.q.size(1), hkv = p.k.size(1);
  const int64_t tq = varlen ? p.max_seqlen_q : p.q.size(2);
  const int64_t tk = varlen ? p.max_seqlen_k : p.k.size(2);
  const int64_t d = p.q.size(-1), dv = p.v.size(-1);
  key.rank = 4;
  const int64_t in[4] = {batch, hq, tq, d}, kv[4] = {batch, hkv, tk, dv},
                out[4] = {batch, hq, tq, dv};
  for (int i = 0; i < 4; ++i) {
    key.assign(key.input_sizes[i], in[i]);
    key.assign(key.weight_sizes[i], kv[i]);
    key.assign(key.output_sizes[i], out[i]);
  }
  key.input_dtype = uint8_t(p.q.dtype());
  key.weight_dtype = uint8_t(p.mask.defined() ? p.mask.dtype() : p.q.dtype());
  key.output_dtype = uint8_t(p.q.dtype());
  key.input_layout = uint8_t(layout_of(p.q));
  key.weight_layout = uint8_t(layout_of(p.k));
  key.output_layout = uint8_t(layout_of(p.v));
  uint8_t align = std::min({row_alignment(p.q), row_alignment(p.k), row_alignment(p.v)});
  if (p.direction == Direction::forward) {
    align = std::min(align, row_alignment(p.out));
  } else {
    align = std::min({align, row_alignment(p.out), row_alignment(p.grad_out),
                      row_alignment(p.grad_q), row_alignment(p.grad_k), row_alignment(p.grad_v)});
  }
  key.alignment_bytes = align;
  key.extra[0] = mask_code(p.mask);
  key.extra[1] = (p.causal ? 1 : 0) | (p.dropout_p > 0 ? 2 : 0) | (varlen ? 4 : 0);
  key.assign(key.extra[2], p.causal ? p.causal_offset : 0);
  key.assign(key.groups, hkv > 0 ? hq / hkv : 0);
  return key;
}

const dispatch::Algorithm<AttentionProblem>& attention_choose(const AttentionProblem& p) {
  return dispatch::algo_cache().choose(attention_slot(p.direction, p.device().type),
                                       attention_key(p), p);
}

void attention_run(const AttentionProblem& p) {
  dispatch::algo_cache().run(attention_slot(p.direction, p.device().type), attention_key(p), p);
}

}  // namespace ember
