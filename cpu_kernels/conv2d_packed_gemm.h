// The CPU convolutions' packed float32 GEMM (AVX2 + FMA, AVX-512 where the CPU has it) and the
// helpers the conv2d algorithms share: which problems take the packed path and how many threads a
// problem gets. Used by im2col_gemm (cpu_kernels/conv2d.cpp) and winograd
// (cpu_kernels/conv2d_winograd.cpp).
#pragma once

#include <algorithm>
#include <cstdint>

#include "ember/cpu_kernels/parallel.h"
#include "ember/kernel_interface/conv.h"

namespace ember::cpu {

// Register tile (kMR x kNR floats: 12 zmm registers accumulate on AVX-512; on AVX2 the tile is
// two 6x16 halves, 12 of the 16 ymm registers each), the K block (a kKC x kNR panel of B, 32 KiB,
// stays in L1 while the A panels stream past it) and the N block (a packed kKC x kNC block of B,
// 512 KiB, stays in L2).
inline constexpr int64_t kMR = 6, kNR = 32, kKC = 256, kNC = 512;
inline constexpr int64_t kPackedBFloats = kKC * kNC;

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
// Workspace sub-buffers start on 64-byte boundaries.
inline int64_t aligned_floats(int64_t n) { return round_up(n, 16); }

// Whether the CPU runs the packed GEMM (AVX2 and FMA).
bool cpu_has_avx2_fma();
// The packed GEMM's AVX-512 micro-kernel: where the CPU has AVX-512F, unless EMBER_CPU_AVX512=0
// (read per GEMM: for tests, and for CPUs that slow down on 512-bit instructions). Both kernels
// sum each element of C over k in the same order with fused multiply-adds: identical results.
bool use_avx512();

// Packs A[M, K], read as a[i * rs + k * cs], for gemm_packed: per K block, per kMR-row panel, kc
// columns of kMR values; rows past M are zero. Holds round_up(M, kMR) * K floats.
void pack_a(const float* a, int64_t rs, int64_t cs, int64_t M, int64_t K, float* out);

// C[M, N] (row stride ldc) = (accumulate ? C : 0) + A * B, A packed by pack_a, B[K, N] read as
// b[k * rs + j * cs] and packed into `bpack` (kPackedBFloats). Each element of C is summed over k
// in order, K block by K block. Requires cpu_has_avx2_fma(). One thread.
void gemm_packed(const float* apack, int64_t M, int64_t N, int64_t K, const float* b, int64_t rs,
                 int64_t cs, float* c, int64_t ldc, bool accumulate, float* bpack);

// float32 problems on a CPU with AVX2 and FMA take the packed GEMM.
inline bool uses_packed_gemm(const ConvProblem& pr) {
  return pr.input.dtype() == DType::f32 && cpu_has_avx2_fma();
}

// Threads for a problem with `items` independent work items. Small problems stay on the caller's
// thread: starting a thread costs tens of microseconds.
inline int thread_count(const ConvDims& d, int64_t items) {
  if (d.macs() < 2e6) return 1;
  return int(std::clamp<int64_t>(items, 1, worker_limit()));
}

}  // namespace ember::cpu
