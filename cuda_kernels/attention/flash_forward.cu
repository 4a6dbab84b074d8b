// The flash forward of scaled-dot-product attention ("flash" in the CUDA "attention" forward slot),
// FlashAttention-2 style: a block of 4 warps per (64-query tile, head, batch), each warp owning 16
// query rows; the key/value tiles of 64 rows stream through two shared-memory stages by cp.async
// (the next tile's copy overlaps this tile's math). Per tile a warp computes S = Q K^T with
// mma.sync (bf16/f16 in, fp32 out), scales and masks it (causal rule, bool or additive mask, keys
// past the sequence), updates its rows' online softmax statistics (running max m, running sum l;
// the output accumulator is rescaled by exp(m_old - m_new) whenever the max grows), and adds
// P V with the probabilities taken straight from the score fragments. Dropout multiplies P by the
// keep decision of attention_dropout_keep before P V (the sum l is of the undropped P, as the
// reference computes it), and the 1 / (1 - p) with 1 / l at the end. The T x T scores are never
// stored. Causal problems stop at the last tile a row of the query tile can see. Head dims 64
// and 128; everything else is the reference algorithm's (attention_reference.cu).
#include "ember/cuda_kernels/attention/flash.cuh"

namespace ember::cuda::attention_impl {
namespace {

constexpr int kFwdRows = 64;  // queries per block (16 per warp)
constexpr int kFwdKeys = 64;  // keys per tile

template <int D>
constexpr size_t forward_smem_bytes() {
  return sizeof(uint16_t) * size_t(D + kPad) * (kFwdRows + 4 * kFwdKeys);  // Q, 2 x (K, V)
}

template <typename T, int D>
__global__ void __launch_bounds__(kFlashThreads) flash_forward_kernel(const AttentionParams p) {
  constexpr int LD = D + kPad;
  constexpr int kKSteps = D / 16;        // k-blocks of Q K^T
  constexpr int kSTiles = kFwdKeys / 8;  // 8-column tiles of S
  constexpr int kOTiles = D / 8;         // 8-column tiles of O
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* q_s = reinterpret_cast<T*>(smem_raw);
  T* k_s = q_s + kFwdRows * LD;      // 2 stages of kFwdKeys rows
  T* v_s = k_s + 2 * kFwdKeys * LD;  // 2 stages of kFwdKeys rows

  const int h = blockIdx.y, b = blockIdx.z;
  const SeqBounds sb = seq_bounds(p, b);
  const int64_t i0 = int64_t(blockIdx.x) * kFwdRows;
  if (i0 >= sb.q_len) return;
  const int hk = h / (p.hq / p.hkv);
  const int warp = threadIdx.x / 32, g = lane_group(), t = lane_in_group();
  const T* q = static_cast<const T*>(p.q) + row_offset(p.sq, b, h, sb.q_start, 0);
  const T* k = static_cast<const T*>(p.k) + row_offset(p.sk, b, hk, sb.k_start, 0);
  const T* v = static_cast<const T*>(p.v) + row_offset(p.sv, b, hk, sb.k_start, 0);
  const int64_t key_end = visible_key_end(p, sb, i0 + kFwdRows);
  const int n_tiles = int((key_end + kFwdKeys - 1) / kFwdKeys);

  // Rows of this thread: r[0] = warp's row g, r[1] = row g + 8 (query positions i).
  const int64_t rows[2] = {i0 + warp * 16 + g, i0 + warp * 16 + g + 8};
  const float scale = float(p.scale);
  const bool dropout = p.dropout_p > 0.0f;
  const uint64_t philox_offset = dropout ? effective_philox_offset(p) : 0;

  float o_acc[kOTiles][4];
#pragma unroll
  for (int n = 0; n < kOTiles; ++n) o_acc[n][0] = o_acc[n][1] = o_acc[n][2] = o_acc[n][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};  // in log2 units (scaled score times log2(e))
  float row_sum[2] = {0.0f, 0.0f};            // this thread's part of the row's sum
  uint32_t q_frag[kKSteps][4];

  if (n_tiles > 0) {
    load_tile_async<T, D>(q_s, q, p.sq.row, i0, sb.q_len, kFwdRows);
    load_tile_async<T, D>(k_s, k, p.sk.row, 0, sb.k_len, kFwdKeys);
    load_tile_async<T, D>(v_s, v, p.sv.row, 0, sb.k_len, kFwdKeys);
    cp_async_commit();
  }
  for (int tile = 0; tile < n_tiles; ++tile) {
    const int stage = tile & 1;
    if (tile + 1 < n_tiles) {  // prefetch the next tile into the other stage
      const int64_t next0 = int64_t(tile + 1) * kFwdKeys;
      load_tile_async<T, D>(k_s + (stage ^ 1) * kFwdKeys * LD, k, p.sk.row, next0, sb.k_len,
                            kFwdKeys);
      load_tile_async<T, D>(v_s + (stage ^ 1) * kFwdKeys * LD, v, p.sv.row, next0, sb.k_len,
                            kFwdKeys);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (tile == 0) {
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) load_a(q_frag[kk], q_s, LD, warp * 16, kk * 16);
    }
    const T* kt = k_s + stage * kFwdKeys * LD;
    const T* vt = v_s + stage * kFwdKeys * LD;
    const int64_t j0 = int64_t(tile) * kFwdKeys;

    // S = Q K^T for the warp's 16 rows and the tile's 64 keys.
    float s[kSTiles][4];
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        uint32_t bf[2];
        load_b_rows_n(bf, kt, LD, n * 8, kk * 16);
        mma_16816<T>(s[n], q_frag[kk], bf);
      }
    }
    // Scale, mask, and convert to log2 units; element (n, e) is row rows[e / 2], key
    // j0 + 8 n + 2 t + e % 2.
    float tile_max[2] = {-INFINITY, -INFINITY};
    const bool needs_mask = tile_needs_mask(p, sb, i0, j0, kFwdKeys);
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = rows[e / 2], j = j0 + 8 * n + 2 * t + (e % 2);
        float x = s[n][e] * scale;
        if (needs_mask)
          x = i < sb.q_len && j < sb.k_len ? masked_score(p, sb, x, b, h, i, j) : -INFINITY;
        x *= kLog2e;
        s[n][e] = x;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], x);
      }
    }
    // Online softmax: the four lanes of a group hold one row's columns.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float new_max = fmaxf(row_max[r], tile_max[r]);
      // Rows with no visible key so far keep max -inf; exponentials are then taken against 0,
      // so every masked probability is exp2(-inf) = 0 and nothing is -inf - -inf.
      const float base = new_max == -INFINITY ? 0.0f : new_max;
      const float alpha = exp2f(row_max[r] - base);  // 0 while the old max was -inf
      row_max[r] = new_max;
      row_sum[r] *= alpha;
#pragma unroll
      for (int n = 0; n < kOTiles; ++n) {
        o_acc[n][2 * r] *= alpha;
        o_acc[n][2 * r + 1] *= alpha;
      }
#pragma unroll
      for (int n = 0; n < kSTiles; ++n) {
#pragma unroll
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          const float prob = exp2f(s[n][e] - base);
          row_sum[r] += prob;
          s[n][e] = prob;
        }
      }
    }
    if (dropout) {
#pragma unroll
      for (int n = 0; n < kSTiles; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t i = rows[e / 2], j = j0 + 8 * n + 2 * t + (e % 2);
          const uint64_t bh = uint64_t(b) * uint64_t(p.hq) + uint64_t(h);
          if (!attention_dropout_keep(p.seed, philox_offset, bh, uint64_t(i), uint64_t(j),
                                      p.dropout_p))
            s[n][e] = 0.0f;
        }
    }
    // O += P V: P's C fragments are the A fragments of k-blocks of 16 keys.
#pragma unroll
    for (int kb = 0; kb < kFwdKeys / 16; ++kb) {
      uint32_t af[4];
      a_from_c<T>(af, s, kb);
#pragma unroll
      for (int n = 0; n < kOTiles; n += 2) {
        uint32_t b0[2], b1[2];
        load_b_rows_k_x2(b0, b1, vt, LD, kb * 16, n * 8);
        mma_16816<T>(o_acc[n], af, b0);
        mma_16816<T>(o_acc[n + 1], af, b1);
      }
    }
    __syncthreads();  // the next iteration's prefetch overwrites this stage
  }

  // Normalize and store: out = O * (1 / (1 - p)) / l, lse = ln(sum exp(scaled score)).
  const float keep_scale =
      dropout ? (p.dropout_p < 1.0f ? 1.0f / (1.0f - p.dropout_p) : 0.0f) : 1.0f;
  T* out = static_cast<T*>(const_cast<void*>(p.out)) + row_offset(p.so, b, h, sb.q_start, 0);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = row_sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int64_t i = rows[r];
    if (i >= sb.q_len) continue;
    const float inv = l > 0.0f ? keep_scale / l : 0.0f;
    T* out_row = out + i * p.so.row;
#pragma unroll
    for (int n = 0; n < kOTiles; ++n) {
      *reinterpret_cast<uint32_t*>(out_row + 8 * n + 2 * t) =
          pack2<T>(o_acc[n][2 * r] * inv, o_acc[n][2 * r + 1] * inv);
    }
    if (t == 0 && p.lse != nullptr) {
      p.lse[row_offset(p.slse, b, h, sb.q_start, i)] =
          l > 0.0f ? (row_max[r] + log2f(l)) * kLn2 : -INFINITY;
    }
  }
}

template <typename T, int D>
void launch_flash_forward(const AttentionParams& a, int device, cudaStream_t stream) {
  constexpr auto kernel = flash_forward_kernel<T, D>;
  constexpr size_t smem = forward_smem_bytes<D>();
  if constexpr (smem > 48 * 1024) {
    const int limit = opt_in_max_dynamic_shared_memory<kernel>(device);
    EMBER_CHECK_STATUS(size_t(limit) >= smem, not_supported,
                       "scaled_dot_product_attention (CUDA flash): needs ", smem,
                       " bytes of shared memory per block, the device allows ", limit);
  }
  const int64_t blocks = (a.tq + kFwdRows - 1) / kFwdRows;
  if (blocks == 0 || a.hq == 0 || a.batch == 0) return;
  kernel<<<dim3(unsigned(blocks), unsigned(a.hq), unsigned(a.batch)), kFlashThreads, smem,
           stream>>>(a);
  EMBER_CUDA_LAUNCH_CHECK();
}

void run_flash_forward(const AttentionProblem& problem, void*) {
  DeviceGuard guard(problem.device());
  cudaStream_t stream = stream_of(problem.device());
  const AttentionParams a = make_params(problem);
  const int device = problem.device().index;
  auto by_dim = [&](auto tag) {
    using T = decltype(tag);
    if (a.d == 64)
      launch_flash_forward<T, 64>(a, device, stream);
    else
      launch_flash_forward<T, 128>(a, device, stream);
  };
  if (problem.q.dtype() == DType::bf16)
    by_dim(__nv_bfloat16{});
  else
    by_dim(__half{});
}

dispatch::Algorithm<AttentionProblem> make_flash_forward() {
  dispatch::Algorithm<AttentionProblem> a;
  a.name = "flash";
  a.deterministic = true;  // no atomics: each output row is one block's, in a fixed order
  a.applies = &flash_applies;
  a.heuristic_cost = [](const AttentionProblem&) { return 1.0; };
  a.run = &run_flash_forward;
  return a;
}

}  // namespace
}  // namespace ember::cuda::attention_impl

namespace ember {
EMBER_REGISTER_ALGORITHM(AttentionProblem, "attention", forward, CUDA,
                         cuda::attention_impl::make_flash_forward());
}  // namespace ember
