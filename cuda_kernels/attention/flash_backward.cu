// The flash backward of scaled-dot-product attention, FlashAttention-2 style, in the CUDA
// "attention" backward slot as two algorithms:
//   flash_atomic_dq  a block per 64-key tile (4 warps, 16 keys each) loops over the query tiles
//                    of every query head of its key head's group, keeping dK and dV in registers,
//                    and adds each tile's dQ = dS K into an fp32 workspace with atomics (then a
//                    kernel converts it to grad_q). The atomics' order varies: not deterministic.
//   flash            the same key-tile kernel without dQ, plus a separate dQ kernel (a block per
//                    64-query tile looping over the key tiles, like the forward): deterministic.
// Both start with the preprocess kernel Delta_i = dO_i . O_i (fp32, into the workspace). With
// P_ij = exp(scaled masked score - lse_i), the dropout factor Z_ij (0 or 1 / (1 - p), the
// forward's keep decision recomputed by attention_dropout_keep) and dP_ij = dO_i . v_j:
//   dV_j = sum_i P_ij Z_ij dO_i,  dS_ij = P_ij (Z_ij dP_ij - Delta_i),
//   dK_j = scale sum_i dS_ij q_i, dQ_i = scale sum_j dS_ij k_j.
// The key-tile kernel computes S^T = K Q^T and dP^T = V dO^T (keys as rows), so that P^T and dS^T
// are already the A operands of dV += (P Z)^T dO and dK += dS^T Q; for dQ it writes dS to shared
// memory and reads it back as rows. Rows with lse = -inf (no visible key) get P = 0. Head dims
// 64 and 128, bf16/f16; everything else is the reference algorithm's.
#include "ember/cuda_kernels/attention/flash.cuh"

namespace ember::cuda::attention_impl {
namespace {

constexpr int kKvKeys = 64;  // keys per block of the key-tile kernel (16 per warp)
template <int D>
constexpr int kKvRows = D <= 64 ? 64 : 32;  // queries per tile of the key-tile kernel
constexpr int kDqRows = 64;                 // queries per block of the dQ kernel
constexpr int kDqKeys = 64;                 // keys per tile of the dQ kernel

// ---- Delta and the dQ conversion --------------------------------------------------------------

// Delta[(b * Hq + h) * tq + i] = dO_i . O_i: a warp per row.
template <typename T>
__global__ void __launch_bounds__(kFlashThreads)
    flash_delta_kernel(const AttentionParams p, float* __restrict__ delta) {
  const int h = blockIdx.y, b = blockIdx.z;
  const SeqBounds sb = seq_bounds(p, b);
  const int64_t i = int64_t(blockIdx.x) * kFlashWarps + threadIdx.x / 32;
  if (i >= sb.q_len) return;
  const T* o = static_cast<const T*>(p.out) + row_offset(p.so, b, h, sb.q_start, i);
  const T* dout = static_cast<const T*>(p.grad_out) + row_offset(p.sdo, b, h, sb.q_start, i);
  float s = 0.0f;
  for (int d = threadIdx.x % 32; d < p.dv; d += 32)
    s += convert<float>(o[d]) * convert<float>(dout[d]);
#pragma unroll
  for (int w = 16; w > 0; w /= 2) s += __shfl_xor_sync(0xffffffffu, s, w);
  if (threadIdx.x % 32 == 0) delta[(int64_t(b) * p.hq + h) * p.tq + i] = s;
}

// grad_q rows from the fp32 accumulator [B, Hq, tq, D]: a block per (row, head, batch).
template <typename T>
__global__ void __launch_bounds__(kFlashThreads)
    flash_dq_convert_kernel(const AttentionParams p, const float* __restrict__ dq_acc) {
  const int h = blockIdx.y, b = blockIdx.z;
  const SeqBounds sb = seq_bounds(p, b);
  const int64_t i = blockIdx.x;
  if (i >= sb.q_len) return;
  const float* src = dq_acc + ((int64_t(b) * p.hq + h) * p.tq + i) * p.d;
  T* dst = static_cast<T*>(p.grad_q) + row_offset(p.sdq, b, h, sb.q_start, i);
  for (int d = threadIdx.x; d < p.d; d += blockDim.x) dst[d] = convert<T>(src[d]);
}

// ---- the key-tile kernel: dK, dV (and atomically dQ) ------------------------------------------

template <int D>
constexpr size_t kv_smem_bytes() {
  constexpr int R = kKvRows<D>;
  return sizeof(uint16_t) *
             (size_t(2 * kKvKeys + 4 * R) * (D + kPad) + size_t(R) * (kKvKeys + kPad)) +
         sizeof(float) * 4 * R;
}

template <typename T, int D, bool kAtomicDq>
__global__ void __launch_bounds__(kFlashThreads)
    flash_kv_kernel(const AttentionParams p, const float* __restrict__ delta,
                    float* __restrict__ dq_acc) {
  constexpr int R = kKvRows<D>;
  constexpr int LD = D + kPad, LDS = kKvKeys + kPad;
  constexpr int kQTiles = R / 8;   // 8-column (query) tiles of S^T
  constexpr int kDTiles = D / 8;   // 8-column tiles of dK, dV
  constexpr int kKSteps = D / 16;  // k-blocks over the head dim
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* k_s = reinterpret_cast<T*>(smem_raw);
  T* v_s = k_s + kKvKeys * LD;
  T* q_s = v_s + kKvKeys * LD;                              // 2 stages of R rows
  T* do_s = q_s + 2 * R * LD;                               // 2 stages of R rows
  T* ds_s = do_s + 2 * R * LD;                              // [R][LDS]: dS * scale, rows = queries
  float* lse_s = reinterpret_cast<float*>(ds_s + R * LDS);  // 2 stages, log2 units, +inf = no row
  float* delta_s = lse_s + 2 * R;                           // 2 stages

  const int hk = blockIdx.y, b = blockIdx.z;
  const SeqBounds sb = seq_bounds(p, b);
  const int64_t j0 = int64_t(blockIdx.x) * kKvKeys;
  if (j0 >= sb.k_len) return;
  const int group = p.hq / p.hkv;
  const int warp = threadIdx.x / 32, g = lane_group(), t = lane_in_group();
  const T* k = static_cast<const T*>(p.k) + row_offset(p.sk, b, hk, sb.k_start, 0);
  const T* v = static_cast<const T*>(p.v) + row_offset(p.sv, b, hk, sb.k_start, 0);
  const float scale = float(p.scale);
  const bool dropout = p.dropout_p > 0.0f;
  const uint64_t philox_offset = dropout ? effective_philox_offset(p) : 0;
  const float keep_scale = p.dropout_p < 1.0f ? 1.0f / (1.0f - p.dropout_p) : 0.0f;

  // Query tiles that can see a key of this tile: causal rows i >= j0 - offset.
  int64_t m_begin = 0;
  if (p.causal && j0 - sb.shift > 0) m_begin = (j0 - sb.shift) / R;
  const int64_t m_count = (sb.q_len + R - 1) / R;
  const int64_t per_head = m_count > m_begin ? m_count - m_begin : 0;
  const int64_t iters = per_head * group;

  // Issues the copies of iteration `it`'s Q and dO tiles (cp.async) and fills its lse and Delta.
  auto load_stage = [&](int64_t it, int stage) {
    const int h = hk * group + int(it / per_head);
    const int64_t i0 = (m_begin + it % per_head) * R;
    const T* q = static_cast<const T*>(p.q) + row_offset(p.sq, b, h, sb.q_start, 0);
    const T* dout = static_cast<const T*>(p.grad_out) + row_offset(p.sdo, b, h, sb.q_start, 0);
    load_tile_async<T, D>(q_s + stage * R * LD, q, p.sq.row, i0, sb.q_len, R);
    load_tile_async<T, D>(do_s + stage * R * LD, dout, p.sdo.row, i0, sb.q_len, R);
    for (int r = threadIdx.x; r < R; r += kFlashThreads) {
      const int64_t i = i0 + r;
      float l = INFINITY, dl = 0.0f;
      if (i < sb.q_len) {
        const float lse = p.lse[row_offset(p.slse, b, h, sb.q_start, i)];
        if (lse != -INFINITY) l = lse * kLog2e;
        dl = delta[(int64_t(b) * p.hq + h) * p.tq + i];
      }
      lse_s[stage * R + r] = l;
      delta_s[stage * R + r] = dl;
    }
  };

  float dk_acc[kDTiles][4], dv_acc[kDTiles][4];
#pragma unroll
  for (int n = 0; n < kDTiles; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[n][e] = dv_acc[n][e] = 0.0f;

  if (iters > 0) {
    load_tile_async<T, D>(k_s, k, p.sk.row, j0, sb.k_len, kKvKeys);
    load_tile_async<T, D>(v_s, v, p.sv.row, j0, sb.k_len, kKvKeys);
    load_stage(0, 0);
    cp_async_commit();
  }
  for (int64_t it = 0; it < iters; ++it) {
    const int stage = int(it & 1);
    if (it + 1 < iters) {
      load_stage(it + 1, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int h = hk * group + int(it / per_head);
    const int64_t i0 = (m_begin + it % per_head) * R;
    const T* qt = q_s + stage * R * LD;
    const T* dot = do_s + stage * R * LD;
    const float* lse_t = lse_s + stage * R;
    const float* delta_t = delta_s + stage * R;

    // S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys and the tile's R queries.
    float st[kQTiles][4], dpt[kQTiles][4];
#pragma unroll
    for (int n = 0; n < kQTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[n][e] = dpt[n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      uint32_t ak[4], av[4];
      load_a(ak, k_s, LD, warp * 16, kk * 16);
      load_a(av, v_s, LD, warp * 16, kk * 16);
#pragma unroll
      for (int n = 0; n < kQTiles; ++n) {
        uint32_t bq[2], bo[2];
        load_b_rows_n(bq, qt, LD, n * 8, kk * 16);
        load_b_rows_n(bo, dot, LD, n * 8, kk * 16);
        mma_16816<T>(st[n], ak, bq);
        mma_16816<T>(dpt[n], av, bo);
      }
    }
    // Element (n, e): key j = j0 + 16 warp + g + 8 (e / 2), query c = 8 n + 2 t + e % 2 of the
    // tile. st becomes P Z, dpt becomes dS (unscaled).
    const bool needs_mask = tile_needs_mask(p, sb, i0, j0, kKvKeys);
#pragma unroll
    for (int n = 0; n < kQTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = 8 * n + 2 * t + (e % 2);
        const int64_t j = j0 + warp * 16 + g + 8 * (e / 2), i = i0 + c;
        float x = st[n][e] * scale;
        if (needs_mask)
          x = i < sb.q_len && j < sb.k_len ? masked_score(p, sb, x, b, h, i, j) : -INFINITY;
        const float prob = exp2f(x * kLog2e - lse_t[c]);
        float z = 1.0f;
        if (dropout) {
          const uint64_t bh = uint64_t(b) * uint64_t(p.hq) + uint64_t(h);
          z = attention_dropout_keep(p.seed, philox_offset, bh, uint64_t(i), uint64_t(j),
                                     p.dropout_p)
                  ? keep_scale
                  : 0.0f;
        }
        st[n][e] = prob * z;
        dpt[n][e] = prob * (z * dpt[n][e] - delta_t[c]);
      }
    }
    // dV += (P Z)^T dO and dK += dS^T Q: k runs over the tile's queries.
#pragma unroll
    for (int kb = 0; kb < R / 16; ++kb) {
      uint32_t ap[4], as[4];
      a_from_c<T>(ap, st, kb);
      a_from_c<T>(as, dpt, kb);
#pragma unroll
      for (int n = 0; n < kDTiles; n += 2) {
        uint32_t bo0[2], bo1[2], bq0[2], bq1[2];
        load_b_rows_k_x2(bo0, bo1, dot, LD, kb * 16, n * 8);
        load_b_rows_k_x2(bq0, bq1, qt, LD, kb * 16, n * 8);
        mma_16816<T>(dv_acc[n], ap, bo0);
        mma_16816<T>(dv_acc[n + 1], ap, bo1);
        mma_16816<T>(dk_acc[n], as, bq0);
        mma_16816<T>(dk_acc[n + 1], as, bq1);
      }
    }
    if constexpr (kAtomicDq) {
      // dS * scale to shared memory as [query][key], then dQ (R x D) = dS K: warp w takes query
      // rows 16 (w % RG) and a 1 / CS share of the head dim.
      const int kr = warp * 16 + g;
#pragma unroll
      for (int n = 0; n < kQTiles; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          ds_s[(8 * n + 2 * t + (e % 2)) * LDS + kr + 8 * (e / 2)] = convert<T>(dpt[n][e] * scale);
      __syncthreads();
      constexpr int RG = R / 16, CS = kFlashWarps / RG, NT = kDTiles / CS;
      const int rg = warp % RG, cs = warp / RG;
      float* dq_head = dq_acc + (int64_t(b) * p.hq + h) * p.tq * D;
#pragma unroll
      for (int nn = 0; nn < NT; nn += 2) {
        const int n = cs * NT + nn;
        float c[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
        for (int kb = 0; kb < kKvKeys / 16; ++kb) {
          uint32_t a[4], bk0[2], bk1[2];
          load_a(a, ds_s, LDS, rg * 16, kb * 16);
          load_b_rows_k_x2(bk0, bk1, k_s, LD, kb * 16, n * 8);
          mma_16816<T>(c[0], a, bk0);
          mma_16816<T>(c[1], a, bk1);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t i = i0 + rg * 16 + g + 8 * (e / 2);
          if (i >= sb.q_len) continue;
          float* dq_row = dq_head + i * D + 2 * t + (e % 2);
          atomicAdd(dq_row + 8 * n, c[0][e]);
          atomicAdd(dq_row + 8 * (n + 1), c[1][e]);
        }
      }
    }
    __syncthreads();  // the next iteration's prefetch overwrites this stage (and ds_s)
  }

  // Store dK (times scale) and dV rows of this tile.
  T* dk = static_cast<T*>(p.grad_k) + row_offset(p.sdk, b, hk, sb.k_start, 0);
  T* dv = static_cast<T*>(p.grad_v) + row_offset(p.sdv, b, hk, sb.k_start, 0);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t j = j0 + warp * 16 + g + 8 * r;
    if (j >= sb.k_len) continue;
#pragma unroll
    for (int n = 0; n < kDTiles; ++n) {
      *reinterpret_cast<uint32_t*>(dk + j * p.sdk.row + 8 * n + 2 * t) =
          pack2<T>(dk_acc[n][2 * r] * scale, dk_acc[n][2 * r + 1] * scale);
      *reinterpret_cast<uint32_t*>(dv + j * p.sdv.row + 8 * n + 2 * t) =
          pack2<T>(dv_acc[n][2 * r], dv_acc[n][2 * r + 1]);
    }
  }
}

// ---- the dQ kernel (deterministic variant) ----------------------------------------------------

template <int D>
constexpr size_t dq_smem_bytes() {
  return sizeof(uint16_t) * size_t(D + kPad) * (2 * kDqRows + 4 * kDqKeys);  // Q, dO, 2 x (K, V)
}

template <typename T, int D>
__global__ void __launch_bounds__(kFlashThreads)
    flash_dq_kernel(const AttentionParams p, const float* __restrict__ delta) {
  constexpr int LD = D + kPad;
  constexpr int kKTiles = kDqKeys / 8;  // 8-column (key) tiles of S
  constexpr int kDTiles = D / 8;
  constexpr int kKSteps = D / 16;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* q_s = reinterpret_cast<T*>(smem_raw);
  T* do_s = q_s + kDqRows * LD;
  T* k_s = do_s + kDqRows * LD;     // 2 stages
  T* v_s = k_s + 2 * kDqKeys * LD;  // 2 stages

  const int h = blockIdx.y, b = blockIdx.z;
  const SeqBounds sb = seq_bounds(p, b);
  const int64_t i0 = int64_t(blockIdx.x) * kDqRows;
  if (i0 >= sb.q_len) return;
  const int hk = h / (p.hq / p.hkv);
  const int warp = threadIdx.x / 32, g = lane_group(), t = lane_in_group();
  const T* q = static_cast<const T*>(p.q) + row_offset(p.sq, b, h, sb.q_start, 0);
  const T* dout = static_cast<const T*>(p.grad_out) + row_offset(p.sdo, b, h, sb.q_start, 0);
  const T* k = static_cast<const T*>(p.k) + row_offset(p.sk, b, hk, sb.k_start, 0);
  const T* v = static_cast<const T*>(p.v) + row_offset(p.sv, b, hk, sb.k_start, 0);
  const float scale = float(p.scale);
  const bool dropout = p.dropout_p > 0.0f;
  const uint64_t philox_offset = dropout ? effective_philox_offset(p) : 0;
  const float keep_scale = p.dropout_p < 1.0f ? 1.0f / (1.0f - p.dropout_p) : 0.0f;
  const int64_t key_end = visible_key_end(p, sb, i0 + kDqRows);
  const int n_tiles = int((key_end + kDqKeys - 1) / kDqKeys);

  const int64_t rows[2] = {i0 + warp * 16 + g, i0 + warp * 16 + g + 8};
  float lse[2], dl[2];  // lse in log2 units, +inf for rows without a visible key (P = 0)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    lse[r] = INFINITY;
    dl[r] = 0.0f;
    if (rows[r] < sb.q_len) {
      const float l = p.lse[row_offset(p.slse, b, h, sb.q_start, rows[r])];
      if (l != -INFINITY) lse[r] = l * kLog2e;
      dl[r] = delta[(int64_t(b) * p.hq + h) * p.tq + rows[r]];
    }
  }
  float dq[kDTiles][4];
#pragma unroll
  for (int n = 0; n < kDTiles; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;

  if (n_tiles > 0) {
    load_tile_async<T, D>(q_s, q, p.sq.row, i0, sb.q_len, kDqRows);
    load_tile_async<T, D>(do_s, dout, p.sdo.row, i0, sb.q_len, kDqRows);
    load_tile_async<T, D>(k_s, k, p.sk.row, 0, sb.k_len, kDqKeys);
    load_tile_async<T, D>(v_s, v, p.sv.row, 0, sb.k_len, kDqKeys);
    cp_async_commit();
  }
  for (int tile = 0; tile < n_tiles; ++tile) {
    const int stage = tile & 1;
    if (tile + 1 < n_tiles) {
      const int64_t next0 = int64_t(tile + 1) * kDqKeys;
      load_tile_async<T, D>(k_s + (stage ^ 1) * kDqKeys * LD, k, p.sk.row, next0, sb.k_len,
                            kDqKeys);
      load_tile_async<T, D>(v_s + (stage ^ 1) * kDqKeys * LD, v, p.sv.row, next0, sb.k_len,
                            kDqKeys);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const T* kt = k_s + stage * kDqKeys * LD;
    const T* vt = v_s + stage * kDqKeys * LD;
    const int64_t j0 = int64_t(tile) * kDqKeys;

    float s[kKTiles][4], dp[kKTiles][4];
#pragma unroll
    for (int n = 0; n < kKTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      uint32_t aq[4], ao[4];
      load_a(aq, q_s, LD, warp * 16, kk * 16);
      load_a(ao, do_s, LD, warp * 16, kk * 16);
#pragma unroll
      for (int n = 0; n < kKTiles; ++n) {
        uint32_t bk[2], bv[2];
        load_b_rows_n(bk, kt, LD, n * 8, kk * 16);
        load_b_rows_n(bv, vt, LD, n * 8, kk * 16);
        mma_16816<T>(s[n], aq, bk);
        mma_16816<T>(dp[n], ao, bv);
      }
    }
    // Element (n, e): query rows[e / 2], key j0 + 8 n + 2 t + e % 2; s becomes dS * scale.
    const bool needs_mask = tile_needs_mask(p, sb, i0, j0, kDqKeys);
#pragma unroll
    for (int n = 0; n < kKTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = rows[e / 2], j = j0 + 8 * n + 2 * t + (e % 2);
        float x = s[n][e] * scale;
        if (needs_mask)
          x = i < sb.q_len && j < sb.k_len ? masked_score(p, sb, x, b, h, i, j) : -INFINITY;
        const float prob = exp2f(x * kLog2e - lse[e / 2]);
        float z = 1.0f;
        if (dropout) {
          const uint64_t bh = uint64_t(b) * uint64_t(p.hq) + uint64_t(h);
          z = attention_dropout_keep(p.seed, philox_offset, bh, uint64_t(i), uint64_t(j),
                                     p.dropout_p)
                  ? keep_scale
                  : 0.0f;
        }
        s[n][e] = prob * (z * dp[n][e] - dl[e / 2]) * scale;
      }
    }
    // dQ += dS K: k runs over the tile's keys.
#pragma unroll
    for (int kb = 0; kb < kDqKeys / 16; ++kb) {
      uint32_t as[4];
      a_from_c<T>(as, s, kb);
#pragma unroll
      for (int n = 0; n < kDTiles; n += 2) {
        uint32_t b0[2], b1[2];
        load_b_rows_k_x2(b0, b1, kt, LD, kb * 16, n * 8);
        mma_16816<T>(dq[n], as, b0);
        mma_16816<T>(dq[n + 1], as, b1);
      }
    }
    __syncthreads();
  }
  T* dq_out = static_cast<T*>(p.grad_q) + row_offset(p.sdq, b, h, sb.q_start, 0);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= sb.q_len) continue;
#pragma unroll
    for (int n = 0; n < kDTiles; ++n)
      *reinterpret_cast<uint32_t*>(dq_out + rows[r] * p.sdq.row + 8 * n + 2 * t) =
          pack2<T>(dq[n][2 * r], dq[n][2 * r + 1]);
  }
}

// ---- host side --------------------------------------------------------------------------------

constexpr size_t kWorkspaceAlign = 256;

size_t delta_bytes(const AttentionParams& a) {
  const size_t bytes = sizeof(float) * size_t(a.batch) * size_t(a.hq) * size_t(a.tq);
  return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}
size_t dq_acc_bytes(const AttentionParams& a) {
  return sizeof(float) * size_t(a.batch) * size_t(a.hq) * size_t(a.tq) * size_t(a.d);
}

template <auto kernel>
void prepare_smem(size_t smem, int device) {
  if (smem <= 48 * 1024) return;
  const int limit = opt_in_max_dynamic_shared_memory<kernel>(device);
  EMBER_CHECK_STATUS(size_t(limit) >= smem, not_supported,
                     "scaled_dot_product_attention (CUDA flash backward): needs ", smem,
                     " bytes of shared memory per block, the device allows ", limit);
}

template <typename T, int D>
void launch_flash_backward(const AttentionParams& a, bool atomic_dq, void* workspace, int device,
                           cudaStream_t stream) {
  float* delta = static_cast<float*>(workspace);
  float* dq_acc = reinterpret_cast<float*>(static_cast<char*>(workspace) + delta_bytes(a));
  if (a.tq > 0) {
    flash_delta_kernel<T><<<dim3(unsigned((a.tq + kFlashWarps - 1) / kFlashWarps), a.hq, a.batch),
                            kFlashThreads, 0, stream>>>(a, delta);
    EMBER_CUDA_LAUNCH_CHECK();
  }
  const unsigned kv_blocks = unsigned((a.tk + kKvKeys - 1) / kKvKeys);
  if (atomic_dq) {
    if (dq_acc_bytes(a) > 0) EMBER_CUDA_CHECK(cudaMemsetAsync(dq_acc, 0, dq_acc_bytes(a), stream));
    constexpr auto kernel = flash_kv_kernel<T, D, true>;
    prepare_smem<kernel>(kv_smem_bytes<D>(), device);
    if (kv_blocks > 0) {
      kernel<<<dim3(kv_blocks, a.hkv, a.batch), kFlashThreads, kv_smem_bytes<D>(), stream>>>(
          a, delta, dq_acc);
      EMBER_CUDA_LAUNCH_CHECK();
    }
    if (a.tq > 0) {
      flash_dq_convert_kernel<T>
          <<<dim3(unsigned(a.tq), a.hq, a.batch), kFlashThreads, 0, stream>>>(a, dq_acc);
      EMBER_CUDA_LAUNCH_CHECK();
    }
    return;
  }
  constexpr auto dq_kernel = flash_dq_kernel<T, D>;
  prepare_smem<dq_kernel>(dq_smem_bytes<D>(), device);
  if (a.tq > 0) {
    dq_kernel<<<dim3(unsigned((a.tq + kDqRows - 1) / kDqRows), a.hq, a.batch), kFlashThreads,
                dq_smem_bytes<D>(), stream>>>(a, delta);
    EMBER_CUDA_LAUNCH_CHECK();
  }
  constexpr auto kernel = flash_kv_kernel<T, D, false>;
  prepare_smem<kernel>(kv_smem_bytes<D>(), device);
  if (kv_blocks > 0) {
    kernel<<<dim3(kv_blocks, a.hkv, a.batch), kFlashThreads, kv_smem_bytes<D>(), stream>>>(a, delta,
                                                                                           nullptr);
    EMBER_CUDA_LAUNCH_CHECK();
  }
}

void run_flash_backward(const AttentionProblem& problem, void* workspace, bool atomic_dq) {
  DeviceGuard guard(problem.device());
  cudaStream_t stream = stream_of(problem.device());
  const AttentionParams a = make_params(problem);
  if (a.hq == 0 || a.batch == 0) return;
  const int device = problem.device().index;
  auto by_dim = [&](auto tag) {
    using T = decltype(tag);
    if (a.d == 64)
      launch_flash_backward<T, 64>(a, atomic_dq, workspace, device, stream);
    else
      launch_flash_backward<T, 128>(a, atomic_dq, workspace, device, stream);
  };
  if (problem.q.dtype() == DType::bf16)
    by_dim(__nv_bfloat16{});
  else
    by_dim(__half{});
}

dispatch::Algorithm<AttentionProblem> make_flash_backward(bool atomic_dq) {
  dispatch::Algorithm<AttentionProblem> a;
  a.name = atomic_dq ? "flash_atomic_dq" : "flash";
  a.deterministic = !atomic_dq;  // fp32 atomics add dQ in a varying order
  a.applies = &flash_applies;
  a.workspace_bytes = [atomic_dq](const AttentionProblem& p) {
    const AttentionParams a = make_params(p);
    return delta_bytes(a) + (atomic_dq ? dq_acc_bytes(a) : 0);
  };
  // The atomic variant computes S and dP once per tile pair; the deterministic one twice.
  a.heuristic_cost = [atomic_dq](const AttentionProblem&) { return atomic_dq ? 1.0 : 1.5; };
  a.run = [atomic_dq](const AttentionProblem& p, void* workspace) {
    run_flash_backward(p, workspace, atomic_dq);
  };
  return a;
}

}  // namespace
}  // namespace ember::cuda::attention_impl

namespace ember {
EMBER_REGISTER_ALGORITHM(AttentionProblem, "attention", backward, CUDA,
                         cuda::attention_impl::make_flash_backward(true));
EMBER_REGISTER_ALGORITHM(AttentionProblem, "attention", backward, CUDA,
                         cuda::attention_impl::make_flash_backward(false));
}  // namespace ember
