// CPU kernels of kernel_interface/attention.h: the "reference" attention algorithm, forward and
// backward, registered in the algorithm cache's CPU slots for every floating dtype (f16 and bf16
// are read into and computed in double like the others). They are the reference the CUDA kernels
// are tested against, so they accumulate in double and handle every feature of AttentionProblem:
// bool and additive masks broadcast through strides, causal alignment with an offset, grouped-query
// heads, variable-length batches and dropout through attention_dropout_keep.
//
// Forward: one item is a block of query rows of one (batch, head); each row's scores live in a
// buffer of Tk doubles (never a Tq x Tk matrix), then out = softmax(scores) v and the row's lse.
// Backward (the FlashAttention formulas, with P recomputed from the scores): a first pass over
// query rows recomputes each row's softmax statistics exactly (the saved f32 lse would cost fp64
// its precision), D_i = sum_j P_ij dP_ij (= rowsum(dO * O)) and dQ; a second pass over blocks of
// keys of one (batch, kv head) sums dK and dV over every query head of the group and every query
// row. Each output row is written by one thread: no races, and the results do not depend on the
// thread count.
#include "ember/kernel_interface/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "ember/tensor/parallel.h"

namespace ember {
namespace {

using dispatch::Direction;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
// Query rows (forward, backward's first pass) or keys (second pass) per parallel item.
constexpr int64_t kRowsPerItem = 16;

template <typename T>
inline double load(const T* p, int64_t i) {
  return double(p[i]);
}
template <typename T>
inline void store(T* p, int64_t i, double v) {
  if constexpr (std::is_same_v<T, double>)
    p[i] = v;
  else
    p[i] = T(float(v));
}

// sum a[e] * b[e] in double over eight independent lanes (so that the compiler vectorizes it
// without reassociating one long sum), then the lanes in a fixed order: deterministic.
template <typename T>
inline double dot(const T* a, const T* b, int64_t n) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t e = 0;
  for (; e + 8 <= n; e += 8)
    for (int l = 0; l < 8; ++l) lane[l] += load(a, e + l) * load(b, e + l);
  for (; e < n; ++e) lane[0] += load(a, e) * load(b, e);
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// y[e] += alpha * x[e] for e < n.
template <typename T>
inline void axpy(double* y, double alpha, const T* x, int64_t n) {
  for (int64_t e = 0; e < n; ++e) y[e] += alpha * load(x, e);
}

// Element (b, h, t, 0) of an operand: padded [B, H, T, E] (strides sb, sh, st), or
// variable-length [total, H, E] with sb = 0 and t counted from the start of the whole tensor.
template <typename T>
struct Rows {
  T* base = nullptr;
  int64_t sb = 0, sh = 0, st = 0;
  // Null for an empty operand (no storage): offsetting a null pointer is undefined.
  T* row(int64_t b, int64_t h, int64_t t) const {
    return base ? base + b * sb + h * sh + t * st : nullptr;
  }
};

template <typename T>
Rows<T> rows_of(const Tensor& t, bool varlen) {
  if (!t.defined()) return {};
  T* base = static_cast<T*>(t.data_ptr());
  if (varlen) return {base, 0, t.stride(1), t.stride(0)};
  return {base, t.stride(0), t.stride(1), t.stride(2)};
}

// Everything one (batch, head, row) computation needs, read once from the problem.
template <typename T>
struct Attention {
  int64_t batch = 0, hq = 0, hkv = 0, group = 1, d = 0, dv = 0, tq = 0, tk = 0;
  bool varlen = false, causal = false, dropout = false;
  const int32_t* cu_q = nullptr;
  const int32_t* cu_k = nullptr;
  int64_t causal_offset = 0;
  double scale = 1, p_drop = 0, keep_scale = 1;
  uint64_t seed = 0, offset = 0;
  Rows<T> q, k, v, out, grad_out, grad_q, grad_k, grad_v;
  float* lse = nullptr;
  int64_t lse_sb = 0, lse_sh = 0, lse_st = 0;
  const void* mask = nullptr;
  DType mask_dtype = DType::boolean;
  int64_t mask_stride[4] = {0, 0, 0, 0};

  explicit Attention(const AttentionProblem& p) {
    varlen = p.varlen();
    hq = p.q.size(1);
    hkv = p.k.size(1);
    group = hq / hkv;
    d = p.q.size(-1);
    dv = p.v.size(-1);
    if (varlen) {
      batch = p.cu_seqlens_q.numel() - 1;
      cu_q = p.cu_seqlens_q.data<int32_t>();
      cu_k = p.cu_seqlens_k.data<int32_t>();
      tq = p.max_seqlen_q;
      tk = p.max_seqlen_k;
    } else {
      batch = p.q.size(0);
      tq = p.q.size(2);
      tk = p.k.size(2);
    }
    causal = p.causal;
    causal_offset = p.causal_offset;
    scale = p.scale;
    dropout = p.dropout_p > 0;
    p_drop = p.dropout_p;
    keep_scale = p.dropout_p >= 1 ? 0.0 : 1.0 / (1.0 - p.dropout_p);
    seed = p.philox.seed;
    offset = p.philox.offset;
    q = rows_of<T>(p.q, varlen);
    k = rows_of<T>(p.k, varlen);
    v = rows_of<T>(p.v, varlen);
    out = rows_of<T>(p.out, varlen);
    grad_out = rows_of<T>(p.grad_out, varlen);
    grad_q = rows_of<T>(p.grad_q, varlen);
    grad_k = rows_of<T>(p.grad_k, varlen);
    grad_v = rows_of<T>(p.grad_v, varlen);
    if (p.lse.defined()) {
      lse = p.lse.data<float>();
      if (varlen) {
        lse_sh = p.lse.stride(0);
        lse_st = p.lse.stride(1);
      } else {
        lse_sb = p.lse.stride(0);
        lse_sh = p.lse.stride(1);
        lse_st = p.lse.stride(2);
      }
    }
    if (p.mask.defined()) {
      mask = p.mask.data_ptr();
      mask_dtype = p.mask.dtype();
      for (int i = 0; i < 4; ++i) mask_stride[i] = p.mask.stride(i);
    }
  }

  int64_t q_start(int64_t b) const { return varlen ? cu_q[b] : 0; }
  int64_t k_start(int64_t b) const { return varlen ? cu_k[b] : 0; }
  int64_t q_len(int64_t b) const { return varlen ? cu_q[b + 1] - cu_q[b] : tq; }
  int64_t k_len(int64_t b) const { return varlen ? cu_k[b + 1] - cu_k[b] : tk; }
  // Key j is visible to query i iff j <= i + shift(b) (causal only).
  int64_t shift(int64_t b) const { return causal_offset + (varlen ? k_len(b) - q_len(b) : 0); }
  // Keys [0, end) may be visible to query i of sequence b.
  int64_t key_end(int64_t b, int64_t i) const {
    const int64_t n = k_len(b);
    return causal ? std::clamp<int64_t>(i + shift(b) + 1, 0, n) : n;
  }
  // Queries [begin, q_len) may see key j of sequence b.
  int64_t query_begin(int64_t b, int64_t j) const {
    return causal ? std::clamp<int64_t>(j - shift(b), 0, q_len(b)) : 0;
  }

  // The mask's contribution to score (b, h, i, j): -inf for a bool false, the additive value.
  double mask_term(int64_t b, int64_t h, int64_t i, int64_t j) const {
    const int64_t at =
        b * mask_stride[0] + h * mask_stride[1] + i * mask_stride[2] + j * mask_stride[3];
    switch (mask_dtype) {
      case DType::boolean:
        return static_cast<const bool*>(mask)[at] ? 0.0 : kNegInf;
      case DType::f32:
        return load(static_cast<const float*>(mask), at);
      case DType::f64:
        return load(static_cast<const double*>(mask), at);
      case DType::f16:
        return load(static_cast<const Half*>(mask), at);
      case DType::bf16:
        return load(static_cast<const BFloat16*>(mask), at);
      default:
        EMBER_THROW(internal, "attention: mask dtype ", dtype_name(mask_dtype));
    }
  }

  // The scaled, masked score of query i (head h) and key j (sequence b).
  double score(int64_t b, int64_t h, int64_t i, int64_t j) const {
    const T* qi = q.row(b, h, q_start(b) + i);
    const T* kj = k.row(b, h / group, k_start(b) + j);
    double s = scale * dot(qi, kj, d);
    if (mask != nullptr) s += mask_term(b, h, i, j);
    return s;
  }

  // The dropout factor of probability (b, h, i, j): 1 without dropout, else 0 or 1 / (1 - p).
  double keep(int64_t b, int64_t h, int64_t i, int64_t j) const {
    if (!dropout) return 1.0;
    return attention_dropout_keep(seed, offset, uint64_t(b * hq + h), uint64_t(i), uint64_t(j),
                                  float(p_drop))
               ? keep_scale
               : 0.0;
  }

  // Fills s[0, end) with the scores of row i and returns the log-sum-exp (-inf: no visible key).
  double row_scores(int64_t b, int64_t h, int64_t i, int64_t end, double* s) const {
    double m = kNegInf;
    for (int64_t j = 0; j < end; ++j) {
      s[j] = score(b, h, i, j);
      // NaN wins, so that a NaN score makes the whole row NaN.
      if (s[j] > m || std::isnan(s[j])) m = s[j];
    }
    if (m == kNegInf) return kNegInf;
    double sum = 0;
    for (int64_t j = 0; j < end; ++j) sum += std::exp(s[j] - m);
    return m + std::log(sum);
  }

  float* lse_at(int64_t b, int64_t h, int64_t i) const {
    return lse + b * lse_sb + h * lse_sh + (q_start(b) + i) * lse_st;
  }
};

// Runs f(b, h, i0, i1) over blocks of at most kRowsPerItem rows [i0, i1) of `heads` heads of every
// sequence, `rows` being the (maximum) row count; `work` estimates one row's cost.
template <typename F>
void for_each_row_block(int64_t batch, int64_t heads, int64_t rows, int64_t work, const F& f) {
  const int64_t blocks = (rows + kRowsPerItem - 1) / kRowsPerItem;
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, kRowsPerItem * work));
  parallel_for(0, batch * heads * blocks, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t bh = item / blocks, i0 = item % blocks * kRowsPerItem;
      f(bh / heads, bh % heads, i0, std::min(rows, i0 + kRowsPerItem));
    }
  });
}

template <typename T>
void attention_forward_typed(const AttentionProblem& p) {
  const Attention<T> a(p);
  auto rows = [&](int64_t b, int64_t h, int64_t i0, int64_t i1) {
    std::vector<double> s(size_t(std::max<int64_t>(a.tk, 1)));
    std::vector<double> acc(size_t(std::max<int64_t>(a.dv, 1)));
    const int64_t len = a.q_len(b);
    for (int64_t i = i0; i < std::min(i1, len); ++i) {
      const int64_t end = a.key_end(b, i);
      const double lse = a.row_scores(b, h, i, end, s.data());
      std::fill(acc.begin(), acc.end(), 0.0);
      if (lse != kNegInf) {
        for (int64_t j = 0; j < end; ++j) {
          const double pj = std::exp(s[j] - lse) * a.keep(b, h, i, j);
          if (pj == 0) continue;
          axpy(acc.data(), pj, a.v.row(b, h / a.group, a.k_start(b) + j), a.dv);
        }
      }
      T* o = a.out.row(b, h, a.q_start(b) + i);
      for (int64_t e = 0; e < a.dv; ++e) store(o, e, acc[e]);
      if (a.lse != nullptr) *a.lse_at(b, h, i) = float(lse);
    }
  };
  for_each_row_block(a.batch, a.hq, a.tq, a.tk * (a.d + a.dv), rows);
}

template <typename T>
void attention_backward_typed(const AttentionProblem& p) {
  const Attention<T> a(p);
  // Per (b, h, i): the row's exact log-sum-exp and D_i, for the second pass.
  const size_t stats = size_t(a.batch * a.hq * a.tq);
  std::vector<double> row_lse(stats, kNegInf), row_delta(stats, 0.0);
  auto stat = [&](int64_t b, int64_t h, int64_t i) { return size_t((b * a.hq + h) * a.tq + i); };

  // Pass 1: dQ_i = scale * sum_j P_ij (dP_ij - D_i) k_j, with dP_ij = keep_ij * (dO_i . v_j).
  auto query_rows = [&](int64_t b, int64_t h, int64_t i0, int64_t i1) {
    std::vector<double> s(size_t(std::max<int64_t>(a.tk, 1)));
    std::vector<double> dp(size_t(std::max<int64_t>(a.tk, 1)));
    std::vector<double> acc(size_t(std::max<int64_t>(a.d, 1)));
    const int64_t len = a.q_len(b);
    for (int64_t i = i0; i < std::min(i1, len); ++i) {
      const int64_t end = a.key_end(b, i);
      const double lse = a.row_scores(b, h, i, end, s.data());
      std::fill(acc.begin(), acc.end(), 0.0);
      double delta = 0;
      if (lse != kNegInf) {
        const T* go = a.grad_out.row(b, h, a.q_start(b) + i);
        for (int64_t j = 0; j < end; ++j) {
          s[j] = std::exp(s[j] - lse);  // now P_ij
          const double z = a.keep(b, h, i, j);
          dp[j] = z == 0 ? 0.0 : z * dot(go, a.v.row(b, h / a.group, a.k_start(b) + j), a.dv);
          delta += s[j] * dp[j];
        }
        for (int64_t j = 0; j < end; ++j) {
          const double ds = s[j] * (dp[j] - delta);
          if (ds == 0) continue;
          axpy(acc.data(), ds, a.k.row(b, h / a.group, a.k_start(b) + j), a.d);
        }
      }
      T* gq = a.grad_q.row(b, h, a.q_start(b) + i);
      for (int64_t e = 0; e < a.d; ++e) store(gq, e, a.scale * acc[e]);
      row_lse[stat(b, h, i)] = lse;
      row_delta[stat(b, h, i)] = delta;
    }
  };
  for_each_row_block(a.batch, a.hq, a.tq, a.tk * (2 * a.d + a.dv), query_rows);

  // Pass 2, per key j of kv head g: dV_j = sum P_ij keep_ij dO_i and
  // dK_j = scale * sum P_ij (dP_ij - D_i) q_i over the query heads of g and their rows i.
  auto key_rows = [&](int64_t b, int64_t g, int64_t j0, int64_t j1) {
    std::vector<double> dk(size_t(std::max<int64_t>(a.d, 1)));
    std::vector<double> dv(size_t(std::max<int64_t>(a.dv, 1)));
    const int64_t len_k = a.k_len(b), len_q = a.q_len(b);
    for (int64_t j = j0; j < std::min(j1, len_k); ++j) {
      std::fill(dk.begin(), dk.end(), 0.0);
      std::fill(dv.begin(), dv.end(), 0.0);
      const T* vj = a.v.row(b, g, a.k_start(b) + j);
      for (int64_t h = g * a.group; h < (g + 1) * a.group; ++h) {
        for (int64_t i = a.query_begin(b, j); i < len_q; ++i) {
          const double lse = row_lse[stat(b, h, i)];
          if (lse == kNegInf) continue;
          const double pij = std::exp(a.score(b, h, i, j) - lse);
          if (pij == 0) continue;
          const double z = a.keep(b, h, i, j);
          const T* go = a.grad_out.row(b, h, a.q_start(b) + i);
          double dpd = 0;
          if (z != 0) {
            dpd = dot(go, vj, a.dv);
            axpy(dv.data(), pij * z, go, a.dv);
          }
          const double ds = pij * (z * dpd - row_delta[stat(b, h, i)]);
          axpy(dk.data(), ds, a.q.row(b, h, a.q_start(b) + i), a.d);
        }
      }
      T* gk = a.grad_k.row(b, g, a.k_start(b) + j);
      T* gv = a.grad_v.row(b, g, a.k_start(b) + j);
      for (int64_t e = 0; e < a.d; ++e) store(gk, e, a.scale * dk[e]);
      for (int64_t e = 0; e < a.dv; ++e) store(gv, e, dv[e]);
    }
  };
  for_each_row_block(a.batch, a.hkv, a.tk, a.group * a.tq * (2 * a.d + 2 * a.dv), key_rows);
}

// Rows have unit stride (a last dim of size 1 may have any).
bool unit_rows(const Tensor& t) { return t.size(-1) <= 1 || t.stride(-1) == 1; }

void check_problem(const AttentionProblem& p) {
  const bool varlen = p.varlen();
  const int64_t rank = varlen ? 3 : 4;
  bool ok = p.q.dim() == rank && p.k.dim() == rank && p.v.dim() == rank &&
            p.k.dtype() == p.q.dtype() && p.v.dtype() == p.q.dtype() && p.k.size(1) > 0 &&
            p.q.size(1) % p.k.size(1) == 0 && unit_rows(p.q) && unit_rows(p.k) && unit_rows(p.v) &&
            p.philox.device_offset == nullptr;
  if (p.direction == Direction::forward)
    ok = ok && p.out.defined() && p.out.dtype() == p.q.dtype() && unit_rows(p.out) &&
         (!p.lse.defined() || p.lse.dtype() == DType::f32);
  else
    ok = ok && p.grad_out.defined() && p.grad_q.defined() && p.grad_k.defined() &&
         p.grad_v.defined() && unit_rows(p.grad_out) && unit_rows(p.grad_q) &&
         unit_rows(p.grad_k) && unit_rows(p.grad_v);
  if (varlen)
    ok = ok && p.cu_seqlens_q.dtype() == DType::i32 && p.cu_seqlens_k.dtype() == DType::i32 &&
         p.cu_seqlens_k.numel() == p.cu_seqlens_q.numel() && !p.mask.defined();
  else
    ok = ok && (!p.mask.defined() || p.mask.dim() == 4);
  EMBER_INTERNAL_ASSERT(ok, "attention: inconsistent problem: q ", p.q.shape_str(), ", k ",
                        p.k.shape_str(), ", v ", p.v.shape_str());
}

dispatch::Algorithm<AttentionProblem> reference(bool forward) {
  dispatch::Algorithm<AttentionProblem> a;
  a.name = "reference";
  a.deterministic = true;
  a.run = [forward](const AttentionProblem& p, void*) {
    check_problem(p);
    EMBER_DISPATCH_FLOATING_DTYPES(p.q.dtype(), "scaled_dot_product_attention", [&] {
      if (forward)
        attention_forward_typed<scalar_t>(p);
      else
        attention_backward_typed<scalar_t>(p);
    });
  };
  return a;
}

EMBER_REGISTER_ALGORITHM(AttentionProblem, "attention", forward, CPU, reference(true));
EMBER_REGISTER_ALGORITHM(AttentionProblem, "attention", backward, CPU, reference(false));

}  // namespace
}  // namespace ember
