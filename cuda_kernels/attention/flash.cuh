// Building blocks of the flash attention kernels (flash_forward.cu, flash_backward.cu): the
// bf16/f16 tensor-core product mma.sync.m16n8k16 (row.col, fp32 accumulate), loads of its operand
// fragments from shared-memory tiles, the cp.async copy of a tile of rows into shared memory, and
// the host-side test of which problems the flash kernels take.
//
// Fragment layout of mma.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
// g = lane / 4 and t = lane % 4; each 32-bit register holds two 16-bit values, the one of the
// lower column (A, C) or lower k (B) in its low half:
//   A (16 x 16, row-major): a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..],
//                           a3 = A[g+8][2t+8..]
//   B (16 x 8):             b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
//   C (16 x 8, fp32):       c0, c1 = C[g][2t], C[g][2t+1]; c2, c3 = C[g+8][2t], C[g+8][2t+1]
// So the C fragments of two neighbouring 8-column tiles (columns 16k .. 16k+15), packed to 16 bits
// in pairs, are exactly the A fragment of k-block k: a0 = (c0, c1) and a1 = (c2, c3) of tile 2k,
// a2 = (c0, c1) and a3 = (c2, c3) of tile 2k + 1. The kernels keep scores and probabilities in
// C fragments and feed them to the next product this way, without shared memory.
// Every tile in shared memory is row-major with kPad extra elements per row (16 bytes: row starts
// stay 16-byte aligned for cp.async and consecutive rows start 4 banks apart).
#pragma once
#include "ember/cuda_kernels/attention/params.cuh"
#include "ember/cuda_kernels/common/cp_async.cuh"

namespace ember::cuda::attention_impl {

inline constexpr int kPad = 8;
inline constexpr int kFlashWarps = 4;
inline constexpr int kFlashThreads = 32 * kFlashWarps;
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// Scaled-score bounds of a query tile: keys j < key_end(i0 + rows) can be visible (causal rule).
__device__ __forceinline__ int64_t visible_key_end(const AttentionParams& p, const SeqBounds& sb,
                                                   int64_t row_end) {
  if (!p.causal) return sb.k_len;
  const int64_t end = row_end + sb.shift;  // the last row sees keys j <= row_end - 1 + shift
  return end < 0 ? 0 : (end < sb.k_len ? end : sb.k_len);
}

// Whether a tile of keys j0 .. j0 + keys - 1 against queries from i0 on needs the per-element
// checks of masked_score: a mask, keys past the sequence, or a causal diagonal inside the tile.
// Queries past the sequence need none (their rows are never stored, or get lse = +inf).
__device__ __forceinline__ bool tile_needs_mask(const AttentionParams& p, const SeqBounds& sb,
                                                int64_t i0, int64_t j0, int keys) {
  return p.mask_kind != MaskKind::none || j0 + keys > sb.k_len ||
         (p.causal && j0 + keys - 1 > i0 + sb.shift);
}

// c += a * b for one 16x8x16 tile.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[2]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    static_assert(std::is_same_v<T, __half>, "mma_16816: bf16 or f16");
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// Two floats rounded to T and packed: `lo` in the low half.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

__device__ __forceinline__ int lane_group() { return (threadIdx.x % 32) / 4; }  // g
__device__ __forceinline__ int lane_in_group() { return threadIdx.x % 4; }      // t

template <typename T>
__device__ __forceinline__ uint32_t lds32(const T* tile, int ld, int row, int col) {
  return *reinterpret_cast<const uint32_t*>(tile + row * ld + col);
}
template <typename T>
__device__ __forceinline__ uint32_t lds16(const T* tile, int ld, int row, int col) {
  return *reinterpret_cast<const uint16_t*>(tile + row * ld + col);
}

// A fragment of rows r0 .. r0+15, columns k0 .. k0+15 of a row-major tile (A[r][k] = M[r][k]).
template <typename T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* tile, int ld, int r0, int k0) {
  const int g = lane_group(), t = lane_in_group();
  a[0] = lds32(tile, ld, r0 + g, k0 + 2 * t);
  a[1] = lds32(tile, ld, r0 + g + 8, k0 + 2 * t);
  a[2] = lds32(tile, ld, r0 + g, k0 + 2 * t + 8);
  a[3] = lds32(tile, ld, r0 + g + 8, k0 + 2 * t + 8);
}

// B fragment with B[k][n] = M[n0 + n][k0 + k]: the tile's rows are B's columns (Q K^T reads K so).
template <typename T>
__device__ __forceinline__ void load_b_rows_n(uint32_t (&b)[2], const T* tile, int ld, int n0,
                                              int k0) {
  const int g = lane_group(), t = lane_in_group();
  b[0] = lds32(tile, ld, n0 + g, k0 + 2 * t);
  b[1] = lds32(tile, ld, n0 + g, k0 + 2 * t + 8);
}

// B fragment with B[k][n] = M[k0 + k][n0 + n]: the tile's rows are B's rows (P V reads V so); the
// two values of a register come from two rows, loaded 16 bits at a time.
template <typename T>
__device__ __forceinline__ void load_b_rows_k(uint32_t (&b)[2], const T* tile, int ld, int k0,
                                              int n0) {
  const int g = lane_group(), t = lane_in_group();
  b[0] = lds16(tile, ld, k0 + 2 * t, n0 + g) | (lds16(tile, ld, k0 + 2 * t + 1, n0 + g) << 16);
  b[1] = lds16(tile, ld, k0 + 2 * t + 8, n0 + g) | (lds16(tile, ld, k0 + 2 * t + 9, n0 + g) << 16);
}

// Two B fragments, of the 8-column tiles n0 and n0 + 8, with B[k][n] = M[k0 + k][n0 + n]. With
// kUseLdmatrix one ldmatrix.x4.trans loads them: matrix m (addresses from lanes 8 m .. 8 m + 7,
// one 16-byte row each) is rows k0 + 8 (m % 2) .. + 7, columns n0 + 8 (m / 2) .. + 7 of the tile,
// and transposed delivery gives each lane rows 2t, 2t + 1 of column g: b0[0], b0[1], b1[0], b1[1]
// in that order. Without it, load_b_rows_k's 16-bit loads (the obviously correct form: set
// kUseLdmatrix to false to rule the ldmatrix path out when a flash result looks wrong).
inline constexpr bool kUseLdmatrix = true;

template <typename T>
__device__ __forceinline__ void load_b_rows_k_x2(uint32_t (&b0)[2], uint32_t (&b1)[2],
                                                 const T* tile, int ld, int k0, int n0) {
  if constexpr (kUseLdmatrix) {
    const int lane = threadIdx.x % 32, m = lane / 8, r = lane % 8;
    const T* row = tile + (k0 + (m % 2) * 8 + r) * ld + n0 + (m / 2) * 8;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(b0[0]), "=r"(b0[1]), "=r"(b1[0]), "=r"(b1[1])
                 : "r"(smem_u32(row))
                 : "memory");
  } else {
    load_b_rows_k(b0, tile, ld, k0, n0);
    load_b_rows_k(b1, tile, ld, k0, n0 + 8);
  }
}

// The A fragment of k-block kb from fp32 C fragments acc[2 kb], acc[2 kb + 1] (see the header).
template <typename T, int N>
__device__ __forceinline__ void a_from_c(uint32_t (&a)[4], const float (&acc)[N][4], int kb) {
  a[0] = pack2<T>(acc[2 * kb][0], acc[2 * kb][1]);
  a[1] = pack2<T>(acc[2 * kb][2], acc[2 * kb][3]);
  a[2] = pack2<T>(acc[2 * kb + 1][0], acc[2 * kb + 1][1]);
  a[3] = pack2<T>(acc[2 * kb + 1][2], acc[2 * kb + 1][3]);
}

// Issues cp.async copies of `rows` rows of D elements (row r at src + (row0 + r) * row_stride)
// into a tile of leading dimension D + kPad; rows at or past `len` are zero-filled. All threads
// of the block take part; the caller commits.
template <typename T, int D>
__device__ __forceinline__ void load_tile_async(T* tile, const T* src, int64_t row_stride,
                                                int64_t row0, int64_t len, int rows) {
  constexpr int kChunks = D * int(sizeof(T)) / 16;  // 16-byte pieces per row
  constexpr int kPer = 16 / int(sizeof(T));
  for (int c = threadIdx.x; c < rows * kChunks; c += blockDim.x) {
    const int r = c / kChunks, col = (c % kChunks) * kPer;
    const bool valid = row0 + r < len;
    const T* from = valid ? src + (row0 + r) * row_stride + col : src;
    cp_async_16(smem_u32(tile + r * (D + kPad) + col), from, valid);
  }
}

// Whether the flash kernels take `p` (host side): 16-bit floats, equal head dims of a compiled
// size, unit last-dim strides, the other strides multiples of 8 elements and 16-byte aligned
// data (whole 16-byte rows for cp.async and 32-bit fragment accesses), grid-sized heads/batch.
inline bool flash_supported_head_dim(int64_t d) { return d == 64 || d == 128; }

inline bool flash_layout_ok(const Tensor& t) {
  if (!t.defined()) return true;
  if (t.stride(t.dim() - 1) != 1 || reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0)
    return false;
  for (int64_t i = 0; i + 1 < t.dim(); ++i)
    if (t.size(i) > 1 && t.stride(i) % 8 != 0) return false;
  return true;
}

inline bool flash_applies(const AttentionProblem& p) {
  const DType dt = p.q.dtype();
  if (dt != DType::bf16 && dt != DType::f16) return false;
  if (!p.q.device().is_cuda()) return false;
  const int64_t d = p.q.size(p.q.dim() - 1);
  if (!flash_supported_head_dim(d) || p.v.size(p.v.dim() - 1) != d) return false;
  if (p.q.size(1) > 65535 || (p.varlen() ? p.cu_seqlens_q.numel() - 1 : p.q.size(0)) > 65535)
    return false;
  for (const Tensor* t : {&p.q, &p.k, &p.v, &p.out})
    if (!flash_layout_ok(*t)) return false;
  if (p.direction == dispatch::Direction::backward) {
    if (!p.lse.defined()) return false;
    for (const Tensor* t : {&p.grad_out, &p.grad_q, &p.grad_k, &p.grad_v})
      if (!flash_layout_ok(*t)) return false;
  }
  return true;
}

}  // namespace ember::cuda::attention_impl
