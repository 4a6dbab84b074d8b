// The packed float32 GEMM of the CPU convolutions (declared in cpu_kernels/conv2d_packed_gemm.h):
// packing of A and B into register-tile panels, the AVX2 and AVX-512 micro-kernels, and the
// blocked loop around them.
#include "ember/cpu_kernels/conv2d_packed_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace ember::cpu {

bool cpu_has_avx2_fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

bool use_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  if (!has) return false;
  const char* env = std::getenv("EMBER_CPU_AVX512");
  return env == nullptr || std::string_view(env) != "0";
}

void pack_a(const float* a, int64_t rs, int64_t cs, int64_t M, int64_t K, float* out) {
  const int64_t Mp = round_up(M, kMR);
  for (int64_t k0 = 0; k0 < K; k0 += kKC) {
    const int64_t kc = std::min(kKC, K - k0);
    for (int64_t i0 = 0; i0 < Mp; i0 += kMR) {
      float* panel = out + k0 * Mp + i0 * kc;
      const int64_t rows = std::clamp<int64_t>(M - i0, 0, kMR);
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = a + i0 * rs + (k0 + k) * cs;
        for (int64_t i = 0; i < rows; ++i) panel[k * kMR + i] = src[i * rs];
        for (int64_t i = rows; i < kMR; ++i) panel[k * kMR + i] = 0.0f;
      }
    }
  }
}

namespace {

// Packs rows [k0, k0 + kc) and columns [j0, j0 + nc) of B[K, N], read as b[k * rs + j * cs], in
// kNR-column panels of kc rows; columns past N are zero.
void pack_b(const float* b, int64_t rs, int64_t cs, int64_t N, int64_t k0, int64_t kc, int64_t j0,
            int64_t nc, float* out) {
  for (int64_t jp = 0; jp < nc; jp += kNR) {
    float* panel = out + jp * kc;
    const int64_t cols = std::min(kNR, N - j0 - jp);
    const float* src = b + k0 * rs + (j0 + jp) * cs;
    if (cs == 1) {
      for (int64_t k = 0; k < kc; ++k) {
        std::memcpy(panel + k * kNR, src + k * rs, size_t(cols) * sizeof(float));
        std::fill(panel + k * kNR + cols, panel + (k + 1) * kNR, 0.0f);
      }
    } else {
      for (int64_t j = 0; j < cols; ++j)
        for (int64_t k = 0; k < kc; ++k) panel[k * kNR + j] = src[k * rs + j * cs];
      for (int64_t j = cols; j < kNR; ++j)
        for (int64_t k = 0; k < kc; ++k) panel[k * kNR + j] = 0.0f;
    }
  }
}

// c[kMR, 16] (row stride ldc) = (accumulate ? c : 0) + a_panel * 16 columns of a B panel over kc
// (B rows kNR floats apart): half of a register tile on AVX2.
__attribute__((target("avx2,fma"))) void kernel_6x16(int64_t kc, const float* a, const float* b,
                                                     float* c, int64_t ldc, bool accumulate) {
  __m256 acc[kMR][2];
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < kMR; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += kMR;
    b += kNR;
  }
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) {
    float* row = c + i * ldc;
    if (accumulate) {
      acc[i][0] = _mm256_add_ps(acc[i][0], _mm256_loadu_ps(row));
      acc[i][1] = _mm256_add_ps(acc[i][1], _mm256_loadu_ps(row + 8));
    }
    _mm256_storeu_ps(row, acc[i][0]);
    _mm256_storeu_ps(row + 8, acc[i][1]);
  }
}

// c[kMR, kNR] (row stride ldc) = (accumulate ? c : 0) + a_panel * b_panel over kc, on AVX-512:
// twice the AVX2 kernel's vector width, so a higher floating-point rate per core.
__attribute__((target("avx512f"))) void kernel_6x32(int64_t kc, const float* a, const float* b,
                                                    float* c, int64_t ldc, bool accumulate) {
  __m512 acc[kMR][2];
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 6
    for (int i = 0; i < kMR; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += kMR;
    b += kNR;
  }
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) {
    float* row = c + i * ldc;
    if (accumulate) {
      acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_loadu_ps(row));
      acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_loadu_ps(row + 16));
    }
    _mm512_storeu_ps(row, acc[i][0]);
    _mm512_storeu_ps(row + 16, acc[i][1]);
  }
}

// One kMR x kNR register tile: the AVX-512 kernel, or the AVX2 kernel on each 16-column half.
void kernel_tile(bool avx512, int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                 bool accumulate) {
  if (avx512) {
    kernel_6x32(kc, a, b, c, ldc, accumulate);
    return;
  }
  kernel_6x16(kc, a, b, c, ldc, accumulate);
  kernel_6x16(kc, a, b + 16, c + 16, ldc, accumulate);
}

// C[M, N] (row stride ldc) = (accumulate ? C : 0) + A * B, A packed by pack_a, B[K, N] read as
// b[k * rs + j * cs] and packed into `bpack` (kPackedBFloats). Each element of C is summed over k
// in order, K block by K block.
__attribute__((target("avx2,fma"))) void gemm_packed_avx2(const float* apack, int64_t M, int64_t N,
                                                          int64_t K, const float* b, int64_t rs,
                                                          int64_t cs, float* c, int64_t ldc,
                                                          bool accumulate, float* bpack) {
  const int64_t Mp = round_up(M, kMR);
  const bool avx512 = use_avx512();
  alignas(64) float tile[kMR * kNR];
  for (int64_t k0 = 0; k0 < K; k0 += kKC) {
    const int64_t kc = std::min(kKC, K - k0);
    const bool add = accumulate || k0 > 0;
    for (int64_t j0 = 0; j0 < N; j0 += kNC) {
      const int64_t nc = std::min(kNC, N - j0);
      pack_b(b, rs, cs, N, k0, kc, j0, nc, bpack);
      for (int64_t jp = 0; jp < nc; jp += kNR) {
        const float* bp = bpack + jp * kc;
        const int64_t cols = std::min(kNR, nc - jp);
        for (int64_t i0 = 0; i0 < M; i0 += kMR) {
          const float* ap = apack + k0 * Mp + i0 * kc;
          const int64_t rows = std::min(kMR, M - i0);
          float* ct = c + i0 * ldc + j0 + jp;
          if (rows == kMR && cols == kNR) {
            kernel_tile(avx512, kc, ap, bp, ct, ldc, add);
            continue;
          }
          kernel_tile(avx512, kc, ap, bp, tile, kNR, false);
          for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < cols; ++j)
              ct[i * ldc + j] = add ? tile[i * kNR + j] + ct[i * ldc + j] : tile[i * kNR + j];
        }
      }
    }
  }
}

}  // namespace

void gemm_packed(const float* apack, int64_t M, int64_t N, int64_t K, const float* b, int64_t rs,
                 int64_t cs, float* c, int64_t ldc, bool accumulate, float* bpack) {
  gemm_packed_avx2(apack, M, N, K, b, rs, cs, c, ldc, accumulate, bpack);
}

}  // namespace ember::cpu
