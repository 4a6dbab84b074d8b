// What every CUDA attention kernel of this family reads: AttentionParams, the problem of
// kernel_interface/attention.h flattened into raw pointers and element strides (padded and
// variable-length batches addressed alike), and the device helpers that give a sequence's bounds,
// the address of a row, and whether key j is visible to query i (with the additive bias it gets)
// and survives dropout. Shared by attention_reference.cu, flash_forward.cu and flash_backward.cu
// so that all of them mask, offset and drop exactly alike. Include only from .cu files.
#pragma once
#include <cmath>
#include <cstdint>

#include "ember/cuda_kernels/common/common.cuh"
#include "ember/kernel_interface/attention.h"

namespace ember::cuda::attention_impl {

// How the mask is given: none, bool (true = visible), or added to the scores (f32 or q's dtype).
enum class MaskKind : int { none, boolean, additive };

// Strides of one [B, H, T, D] operand in elements: batch, head, row (padded batches), or 0, head,
// row for variable-length batches, whose rows are counted from the sequence's start in cu_seqlens.
struct RowStrides {
  int64_t batch = 0, head = 0, row = 0;
};

struct AttentionParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* out = nullptr;  // written by the forward, read by the backward
  float* lse = nullptr;
  const void* grad_out = nullptr;
  void* grad_q = nullptr;
  void* grad_k = nullptr;
  void* grad_v = nullptr;
  RowStrides sq, sk, sv, so, sdo, sdq, sdk, sdv, slse;  // slse: element strides of lse
  const int32_t* cu_q = nullptr;  // variable-length batches: [B + 1] row starts
  const int32_t* cu_k = nullptr;
  const void* mask = nullptr;
  MaskKind mask_kind = MaskKind::none;
  DType mask_dtype = DType::boolean;
  int64_t mask_elem_bytes = 1;
  int64_t mask_strides[4] = {0, 0, 0, 0};  // [B, Hq, Tq, Tk]
  int batch = 0, hq = 0, hkv = 0;
  int64_t tq = 0, tk = 0;  // padded lengths, or the bounds max_seqlen_q / max_seqlen_k
  int d = 0, dv = 0;
  double scale = 1;
  bool causal = false;
  int64_t causal_offset = 0;  // varlen: added to each sequence's len_k - len_q (SeqBounds::shift)
  float dropout_p = 0;
  uint64_t seed = 0, philox_offset = 0;
  const uint64_t* device_offset = nullptr;  // inside a CUDA graph capture: added to philox_offset
};

inline RowStrides row_strides(const Tensor& t, bool varlen) {
  if (!t.defined()) return {};
  if (varlen) return RowStrides{0, t.stride(1), t.stride(0)};
  return RowStrides{t.stride(0), t.stride(1), t.stride(2)};
}

// lse is [B, Hq, Tq] (padded) or [Hq, total_q] (variable-length).
inline RowStrides lse_strides(const Tensor& lse, bool varlen) {
  if (!lse.defined()) return {};
  if (varlen) return RowStrides{0, lse.stride(0), lse.stride(1)};
  return RowStrides{lse.stride(0), lse.stride(1), lse.stride(2)};
}

inline AttentionParams make_params(const AttentionProblem& p) {
  AttentionParams a;
  const bool varlen = p.varlen();
  a.q = p.q.data_ptr();
  a.k = p.k.data_ptr();
  a.v = p.v.data_ptr();
  a.sq = row_strides(p.q, varlen);
  a.sk = row_strides(p.k, varlen);
  a.sv = row_strides(p.v, varlen);
  if (p.out.defined()) {
    a.out = p.out.data_ptr();
    a.so = row_strides(p.out, varlen);
  }
  if (p.lse.defined()) {
    a.lse = static_cast<float*>(p.lse.data_ptr());
    a.slse = lse_strides(p.lse, varlen);
  }
  if (p.direction == dispatch::Direction::backward) {
    a.grad_out = p.grad_out.data_ptr();
    a.grad_q = p.grad_q.data_ptr();
    a.grad_k = p.grad_k.data_ptr();
    a.grad_v = p.grad_v.data_ptr();
    a.sdo = row_strides(p.grad_out, varlen);
    a.sdq = row_strides(p.grad_q, varlen);
    a.sdk = row_strides(p.grad_k, varlen);
    a.sdv = row_strides(p.grad_v, varlen);
  }
  a.hq = int(p.q.size(1));  // heads are dim 1 in both layouts
  a.hkv = int(p.k.size(1));
  if (varlen) {
    a.cu_q = static_cast<const int32_t*>(p.cu_seqlens_q.data_ptr());
    a.cu_k = static_cast<const int32_t*>(p.cu_seqlens_k.data_ptr());
    a.batch = int(p.cu_seqlens_q.numel() - 1);
    a.tq = p.max_seqlen_q;
    a.tk = p.max_seqlen_k;
    a.d = int(p.q.size(2));
    a.dv = int(p.v.size(2));
  } else {
    a.batch = int(p.q.size(0));
    a.tq = p.q.size(2);
    a.tk = p.k.size(2);
    a.d = int(p.q.size(3));
    a.dv = int(p.v.size(3));
  }
  if (p.mask.defined() && !varlen) {
    a.mask = p.mask.data_ptr();
    a.mask_dtype = p.mask.dtype();
    a.mask_elem_bytes = int64_t(p.mask.element_size());
    a.mask_kind = p.mask.dtype() == DType::boolean ? MaskKind::boolean : MaskKind::additive;
    for (int i = 0; i < 4; ++i) a.mask_strides[i] = p.mask.stride(i);
  }
  a.scale = p.scale;
  a.causal = p.causal;
  a.causal_offset = p.causal_offset;
  a.dropout_p = float(p.dropout_p);
  a.seed = p.philox.seed;
  a.philox_offset = p.philox.offset;
  a.device_offset = p.philox.device_offset;
  return a;
}

// ---- device helpers ---------------------------------------------------------------------------

// Rows of sequence b: queries q_start .. q_start + q_len of q, keys k_start .. k_start + k_len;
// shift: the causal rule's offset for this sequence (key j visible to query i iff
// j <= i + shift): causal_offset, plus len_k - len_q for variable-length batches (aligned
// bottom-right per sequence, see kernel_interface/attention.h).
struct SeqBounds {
  int64_t q_start, q_len, k_start, k_len, shift;
};

__device__ __forceinline__ SeqBounds seq_bounds(const AttentionParams& p, int b) {
  if (p.cu_q != nullptr) {
    const int64_t q0 = p.cu_q[b], q1 = p.cu_q[b + 1], k0 = p.cu_k[b], k1 = p.cu_k[b + 1];
    return SeqBounds{q0, q1 - q0, k0, k1 - k0, p.causal_offset + (k1 - k0) - (q1 - q0)};
  }
  return SeqBounds{0, p.tq, 0, p.tk, p.causal_offset};
}

// Element offset of row `row` (counted from the sequence start `start`) of head h of batch b.
__device__ __forceinline__ int64_t row_offset(const RowStrides& s, int b, int h, int64_t start,
                                              int64_t row) {
  return int64_t(b) * s.batch + int64_t(h) * s.head + (start + row) * s.row;
}

// The Philox offset the dropout decisions use: the state's, plus the device value under capture.
__device__ __forceinline__ uint64_t effective_philox_offset(const AttentionParams& p) {
  return p.philox_offset + (p.device_offset != nullptr ? *p.device_offset : 0);
}

// Whether key j (within the sequence) is visible to query i by the causal rule.
__device__ __forceinline__ bool causal_visible(const AttentionParams& p, const SeqBounds& sb,
                                               int64_t i, int64_t j) {
  return !p.causal || j <= i + sb.shift;
}

// Applies the causal rule and the mask to the scaled score `s` of (b, h, i, j): returns the
// masked score, -inf where the key is not visible.
template <typename Acc>
__device__ __forceinline__ Acc masked_score(const AttentionParams& p, const SeqBounds& sb, Acc s,
                                            int b, int h, int64_t i, int64_t j) {
  if (!causal_visible(p, sb, i, j)) return -INFINITY;
  if (p.mask_kind != MaskKind::none) {
    const int64_t off = int64_t(b) * p.mask_strides[0] + int64_t(h) * p.mask_strides[1] +
                        i * p.mask_strides[2] + j * p.mask_strides[3];
    if (p.mask_kind == MaskKind::boolean) {
      if (!static_cast<const bool*>(p.mask)[off]) return -INFINITY;
    } else {
      const char* base = static_cast<const char*>(p.mask) + off * p.mask_elem_bytes;
      s += load_as<Acc>(base, p.mask_dtype);
    }
  }
  return s;
}

// The multiplier dropout gives probability (b, h, i, j): 0 or 1 / (1 - p).
template <typename Acc>
__device__ __forceinline__ Acc dropout_factor(const AttentionParams& p, uint64_t offset, int b,
                                              int h, int64_t i, int64_t j, Acc keep_scale) {
  if (p.dropout_p <= 0.0f) return Acc(1);
  const uint64_t bh = uint64_t(b) * uint64_t(p.hq) + uint64_t(h);
  return attention_dropout_keep(p.seed, offset, bh, uint64_t(i), uint64_t(j), p.dropout_p)
             ? keep_scale
             : Acc(0);
}

}  // namespace ember::cuda::attention_impl
