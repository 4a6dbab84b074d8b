// The "math" CUDA attention algorithm ("reference" in the "attention" slots): a block per query row
// (forward, backward dQ) or per key row (backward dK, dV), scores recomputed a tile of 128 keys
// (or queries) at a time into shared memory, so that it needs no workspace and covers every
// feature of AttentionProblem: any head dims (D and Dv may differ), f32/f64/f16/bf16 (16-bit
// dtypes accumulate in float, f64 in double), bool and additive masks with broadcast strides,
// causal rules with an offset, grouped-query heads, variable-length batches, dropout and rows
// with no visible key (output 0, lse -inf). Every sum runs in a fixed order (no atomics), so it
// is deterministic; it is the fallback for what the flash kernels do not take and the choice of
// deterministic mode there.
//
// Forward: pass 1 gives the row's max and sum of exponentials (per-thread online statistics,
// combined in thread order), pass 2 the probabilities times V. Backward (softmax gradient with
// dropout factor Z and Delta_i = dO_i . O_i): dS_ij = P_ij (Z_ij dO_i . v_j - Delta_i);
// dQ_i = scale sum_j dS_ij k_j; dV_j = sum_i P_ij Z_ij dO_i; dK_j = scale sum_i dS_ij q_i, the key
// kernel summing over the query heads of its group.
#include "ember/cuda_kernels/attention/params.cuh"

namespace ember::cuda::attention_impl {
namespace {

constexpr int kRefThreads = 128;  // threads per block, and keys (queries) per score tile

template <typename T, typename Acc>
__device__ __forceinline__ Acc dot_row(const T* a, const Acc* b_smem, int n) {
  Acc s = 0;
  for (int d = 0; d < n; ++d) s += convert<Acc>(a[d]) * b_smem[d];
  return s;
}

template <typename T, typename Acc>
__device__ __forceinline__ Acc dot_rows(const T* a, const T* b, int n) {
  Acc s = 0;
  for (int d = 0; d < n; ++d) s += convert<Acc>(a[d]) * convert<Acc>(b[d]);
  return s;
}

// Combines online softmax statistics (max, sum of exp(x - max)).
template <typename Acc>
__device__ __forceinline__ void combine_stats(Acc& m, Acc& l, Acc m2, Acc l2) {
  if (m2 == Acc(-INFINITY)) return;
  if (m == Acc(-INFINITY)) {
    m = m2;
    l = l2;
    return;
  }
  const Acc mx = m > m2 ? m : m2;
  l = l * exp(m - mx) + l2 * exp(m2 - mx);
  m = mx;
}

// Forward: block (i, h, b). Shared: q row [D], probabilities [128], output accumulator [Dv],
// per-thread statistics [2 * 128].
template <typename T>
__global__ void __launch_bounds__(kRefThreads) reference_forward_kernel(const AttentionParams p) {
  using Acc = OpMath<T>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Acc* q_s = reinterpret_cast<Acc*>(smem_raw);
  Acc* prob_s = q_s + p.d;
  Acc* out_s = prob_s + kRefThreads;
  Acc* stat_s = out_s + p.dv;
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  const SeqBounds sb = seq_bounds(p, b);
  if (i >= sb.q_len) return;
  const int hk = h / (p.hq / p.hkv);
  const T* q = static_cast<const T*>(p.q) + row_offset(p.sq, b, h, sb.q_start, i);
  const T* k = static_cast<const T*>(p.k) + row_offset(p.sk, b, hk, sb.k_start, 0);
  const T* v = static_cast<const T*>(p.v) + row_offset(p.sv, b, hk, sb.k_start, 0);
  const Acc scale = Acc(p.scale);
  for (int d = threadIdx.x; d < p.d; d += kRefThreads) q_s[d] = convert<Acc>(q[d]);
  for (int d = threadIdx.x; d < p.dv; d += kRefThreads) out_s[d] = 0;
  __syncthreads();

  // Pass 1: each thread's keys j = tid, tid + 128, ...
  Acc m = -INFINITY, l = 0;
  for (int64_t j = threadIdx.x; j < sb.k_len; j += kRefThreads) {
    const Acc s = masked_score(p, sb, dot_row(k + j * p.sk.row, q_s, p.d) * scale, b, h, i, j);
    combine_stats(m, l, s, s == Acc(-INFINITY) ? Acc(0) : Acc(1));
  }
  stat_s[threadIdx.x] = m;
  stat_s[kRefThreads + threadIdx.x] = l;
  __syncthreads();
  if (threadIdx.x == 0) {
    Acc mm = -INFINITY, ll = 0;
    for (int t = 0; t < kRefThreads; ++t) combine_stats(mm, ll, stat_s[t], stat_s[kRefThreads + t]);
    stat_s[0] = mm;
    stat_s[1] = ll;
  }
  __syncthreads();
  const Acc row_max = stat_s[0], row_sum = stat_s[1];
  if (threadIdx.x == 0 && p.lse != nullptr) {
    const Acc lse = row_sum > 0 ? row_max + log(row_sum) : Acc(-INFINITY);
    p.lse[row_offset(p.slse, b, h, sb.q_start, i)] = float(lse);
  }

  // Pass 2: out = sum_j P_ij Z_ij v_j, a tile of 128 keys at a time.
  const uint64_t offset = effective_philox_offset(p);
  const Acc keep_scale = p.dropout_p < 1 ? Acc(1) / (Acc(1) - Acc(p.dropout_p)) : Acc(0);
  for (int64_t j0 = 0; j0 < sb.k_len; j0 += kRefThreads) {
    const int64_t j = j0 + threadIdx.x;
    Acc prob = 0;
    if (j < sb.k_len && row_sum > 0) {
      const Acc s = masked_score(p, sb, dot_row(k + j * p.sk.row, q_s, p.d) * scale, b, h, i, j);
      if (s != Acc(-INFINITY))
        prob = exp(s - row_max) / row_sum * dropout_factor(p, offset, b, h, i, j, keep_scale);
    }
    prob_s[threadIdx.x] = prob;
    __syncthreads();
    const int n = int(sb.k_len - j0 < kRefThreads ? sb.k_len - j0 : kRefThreads);
    for (int d = threadIdx.x; d < p.dv; d += kRefThreads) {
      Acc acc = out_s[d];
      for (int t = 0; t < n; ++t) acc += prob_s[t] * convert<Acc>(v[(j0 + t) * p.sv.row + d]);
      out_s[d] = acc;
    }
    __syncthreads();
  }
  T* out = static_cast<T*>(const_cast<void*>(p.out)) + row_offset(p.so, b, h, sb.q_start, i);
  for (int d = threadIdx.x; d < p.dv; d += kRefThreads) out[d] = convert<T>(out_s[d]);
}

// Backward dQ: block (i, h, b). Shared: q row [D], dO row [Dv], dS tile [128], dQ accumulator
// [D], reduction scratch [128].
template <typename T>
__global__ void __launch_bounds__(kRefThreads)
    reference_backward_dq_kernel(const AttentionParams p) {
  using Acc = OpMath<T>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Acc* q_s = reinterpret_cast<Acc*>(smem_raw);
  Acc* do_s = q_s + p.d;
  Acc* ds_s = do_s + p.dv;
  Acc* dq_s = ds_s + kRefThreads;
  Acc* red_s = dq_s + p.d;
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  const SeqBounds sb = seq_bounds(p, b);
  if (i >= sb.q_len) return;
  const int hk = h / (p.hq / p.hkv);
  const T* q = static_cast<const T*>(p.q) + row_offset(p.sq, b, h, sb.q_start, i);
  const T* o = static_cast<const T*>(p.out) + row_offset(p.so, b, h, sb.q_start, i);
  const T* dout = static_cast<const T*>(p.grad_out) + row_offset(p.sdo, b, h, sb.q_start, i);
  const T* k = static_cast<const T*>(p.k) + row_offset(p.sk, b, hk, sb.k_start, 0);
  const T* v = static_cast<const T*>(p.v) + row_offset(p.sv, b, hk, sb.k_start, 0);
  const Acc scale = Acc(p.scale);
  for (int d = threadIdx.x; d < p.d; d += kRefThreads) {
    q_s[d] = convert<Acc>(q[d]);
    dq_s[d] = 0;
  }
  Acc partial = 0;
  for (int d = threadIdx.x; d < p.dv; d += kRefThreads) {
    do_s[d] = convert<Acc>(dout[d]);
    partial += do_s[d] * convert<Acc>(o[d]);
  }
  red_s[threadIdx.x] = partial;
  __syncthreads();
  if (threadIdx.x == 0) {
    Acc s = 0;
    for (int t = 0; t < kRefThreads; ++t) s += red_s[t];
    red_s[0] = s;
  }
  __syncthreads();
  const Acc delta = red_s[0];
  const Acc lse = Acc(p.lse[row_offset(p.slse, b, h, sb.q_start, i)]);
  const uint64_t offset = effective_philox_offset(p);
  const Acc keep_scale = p.dropout_p < 1 ? Acc(1) / (Acc(1) - Acc(p.dropout_p)) : Acc(0);
  for (int64_t j0 = 0; j0 < sb.k_len; j0 += kRefThreads) {
    const int64_t j = j0 + threadIdx.x;
    Acc ds = 0;
    if (j < sb.k_len && lse != Acc(-INFINITY)) {
      const Acc s = masked_score(p, sb, dot_row(k + j * p.sk.row, q_s, p.d) * scale, b, h, i, j);
      if (s != Acc(-INFINITY)) {
        const Acc prob = exp(s - lse);
        const Acc dp = dot_row(v + j * p.sv.row, do_s, p.dv);
        const Acc z = dropout_factor(p, offset, b, h, i, j, keep_scale);
        ds = prob * (z * dp - delta) * scale;
      }
    }
    ds_s[threadIdx.x] = ds;
    __syncthreads();
    const int n = int(sb.k_len - j0 < kRefThreads ? sb.k_len - j0 : kRefThreads);
    for (int d = threadIdx.x; d < p.d; d += kRefThreads) {
      Acc acc = dq_s[d];
      for (int t = 0; t < n; ++t) acc += ds_s[t] * convert<Acc>(k[(j0 + t) * p.sk.row + d]);
      dq_s[d] = acc;
    }
    __syncthreads();
  }
  T* dq = static_cast<T*>(p.grad_q) + row_offset(p.sdq, b, h, sb.q_start, i);
  for (int d = threadIdx.x; d < p.d; d += kRefThreads) dq[d] = convert<T>(dq_s[d]);
}

// Backward dK, dV: block (j, hk, b), over the query heads of key head hk's group and every
// query. Shared: k row [D], v row [Dv], P Z tile [128], dS tile [128], dK [D], dV [Dv].
template <typename T>
__global__ void __launch_bounds__(kRefThreads)
    reference_backward_dkv_kernel(const AttentionParams p) {
  using Acc = OpMath<T>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Acc* k_s = reinterpret_cast<Acc*>(smem_raw);
  Acc* v_s = k_s + p.d;
  Acc* pz_s = v_s + p.dv;
  Acc* ds_s = pz_s + kRefThreads;
  Acc* dk_s = ds_s + kRefThreads;
  Acc* dv_s = dk_s + p.d;
  const int64_t j = blockIdx.x;
  const int hk = blockIdx.y, b = blockIdx.z;
  const SeqBounds sb = seq_bounds(p, b);
  if (j >= sb.k_len) return;
  const int group = p.hq / p.hkv;
  const T* k = static_cast<const T*>(p.k) + row_offset(p.sk, b, hk, sb.k_start, j);
  const T* v = static_cast<const T*>(p.v) + row_offset(p.sv, b, hk, sb.k_start, j);
  const Acc scale = Acc(p.scale);
  for (int d = threadIdx.x; d < p.d; d += kRefThreads) {
    k_s[d] = convert<Acc>(k[d]);
    dk_s[d] = 0;
  }
  for (int d = threadIdx.x; d < p.dv; d += kRefThreads) {
    v_s[d] = convert<Acc>(v[d]);
    dv_s[d] = 0;
  }
  __syncthreads();
  const uint64_t offset = effective_philox_offset(p);
  const Acc keep_scale = p.dropout_p < 1 ? Acc(1) / (Acc(1) - Acc(p.dropout_p)) : Acc(0);
  for (int h = hk * group; h < (hk + 1) * group; ++h) {
    const T* q = static_cast<const T*>(p.q) + row_offset(p.sq, b, h, sb.q_start, 0);
    const T* o = static_cast<const T*>(p.out) + row_offset(p.so, b, h, sb.q_start, 0);
    const T* dout = static_cast<const T*>(p.grad_out) + row_offset(p.sdo, b, h, sb.q_start, 0);
    for (int64_t i0 = 0; i0 < sb.q_len; i0 += kRefThreads) {
      const int64_t i = i0 + threadIdx.x;
      Acc pz = 0, ds = 0;
      if (i < sb.q_len) {
        const Acc lse = Acc(p.lse[row_offset(p.slse, b, h, sb.q_start, i)]);
        const Acc s =
            lse == Acc(-INFINITY)
                ? Acc(-INFINITY)
                : masked_score(p, sb, dot_row(q + i * p.sq.row, k_s, p.d) * scale, b, h, i, j);
        if (s != Acc(-INFINITY)) {
          const Acc prob = exp(s - lse);
          const T* dout_i = dout + i * p.sdo.row;
          const Acc dp = dot_row(dout_i, v_s, p.dv);
          const Acc delta = dot_rows<T, Acc>(dout_i, o + i * p.so.row, p.dv);
          const Acc z = dropout_factor(p, offset, b, h, i, j, keep_scale);
          pz = prob * z;
          ds = prob * (z * dp - delta) * scale;
        }
      }
      pz_s[threadIdx.x] = pz;
      ds_s[threadIdx.x] = ds;
      __syncthreads();
      const int n = int(sb.q_len - i0 < kRefThreads ? sb.q_len - i0 : kRefThreads);
      for (int d = threadIdx.x; d < p.dv; d += kRefThreads) {
        Acc acc = dv_s[d];
        for (int t = 0; t < n; ++t) acc += pz_s[t] * convert<Acc>(dout[(i0 + t) * p.sdo.row + d]);
        dv_s[d] = acc;
      }
      for (int d = threadIdx.x; d < p.d; d += kRefThreads) {
        Acc acc = dk_s[d];
        for (int t = 0; t < n; ++t) acc += ds_s[t] * convert<Acc>(q[(i0 + t) * p.sq.row + d]);
        dk_s[d] = acc;
      }
      __syncthreads();
    }
  }
  T* dk = static_cast<T*>(p.grad_k) + row_offset(p.sdk, b, hk, sb.k_start, j);
  T* dv = static_cast<T*>(p.grad_v) + row_offset(p.sdv, b, hk, sb.k_start, j);
  for (int d = threadIdx.x; d < p.d; d += kRefThreads) dk[d] = convert<T>(dk_s[d]);
  for (int d = threadIdx.x; d < p.dv; d += kRefThreads) dv[d] = convert<T>(dv_s[d]);
}

// Launches `kernel` over (rows, heads, batch) with `smem` bytes of dynamic shared memory.
template <auto kernel>
void launch_rows(const AttentionParams& a, int64_t rows, int heads, size_t smem,
                 cudaStream_t stream, int device) {
  if (rows == 0 || heads == 0 || a.batch == 0) return;
  EMBER_CHECK_STATUS(heads <= 65535 && a.batch <= 65535, not_supported,
                     "scaled_dot_product_attention (CUDA reference): ", heads, " heads and batch ",
                     a.batch, " exceed the grid limit of 65535; split the batch");
  const int limit = opt_in_max_dynamic_shared_memory<kernel>(device);
  EMBER_CHECK_STATUS(smem <= size_t(limit), not_supported,
                     "scaled_dot_product_attention (CUDA reference): head dims ", a.d, " and ",
                     a.dv, " need ", smem, " bytes of shared memory, more than the device's ",
                     limit);
  kernel<<<dim3(unsigned(rows), unsigned(heads), unsigned(a.batch)), kRefThreads, smem, stream>>>(
      a);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void run_reference_typed(const AttentionProblem& problem, const AttentionParams& a,
                         cudaStream_t stream) {
  using Acc = OpMath<T>;
  const int device = problem.device().index;
  if (problem.direction == dispatch::Direction::forward) {
    const size_t smem = sizeof(Acc) * (size_t(a.d) + a.dv + 3 * kRefThreads);
    launch_rows<reference_forward_kernel<T>>(a, a.tq, a.hq, smem, stream, device);
    return;
  }
  const size_t smem_dq = sizeof(Acc) * (2 * size_t(a.d) + a.dv + 2 * kRefThreads);
  launch_rows<reference_backward_dq_kernel<T>>(a, a.tq, a.hq, smem_dq, stream, device);
  const size_t smem_dkv = sizeof(Acc) * (2 * size_t(a.d) + 2 * size_t(a.dv) + 2 * kRefThreads);
  launch_rows<reference_backward_dkv_kernel<T>>(a, a.tk, a.hkv, smem_dkv, stream, device);
}

void run_reference(const AttentionProblem& problem, void*) {
  EMBER_INTERNAL_ASSERT(problem.q.device().is_cuda(), "attention reference (CUDA): q on ",
                        problem.q.device().str());
  DeviceGuard guard(problem.device());
  cudaStream_t stream = stream_of(problem.device());
  const AttentionParams a = make_params(problem);
  dispatch_floating(problem.q.dtype(), "scaled_dot_product_attention", "reference",
                    [&](auto tag) { run_reference_typed<decltype(tag)>(problem, a, stream); });
}

dispatch::Algorithm<AttentionProblem> make_reference() {
  dispatch::Algorithm<AttentionProblem> a;
  a.name = "reference";
  a.deterministic = true;
  a.run = &run_reference;
  // Last resort: the flash kernels rank first wherever they apply.
  a.heuristic_cost = [](const AttentionProblem&) { return 10.0; };
  return a;
}

}  // namespace
}  // namespace ember::cuda::attention_impl

namespace ember {
EMBER_REGISTER_ALGORITHM(AttentionProblem, "attention", forward, CUDA,
                         cuda::attention_impl::make_reference());
EMBER_REGISTER_ALGORITHM(AttentionProblem, "attention", backward, CUDA,
                         cuda::attention_impl::make_reference());
}  // namespace ember
