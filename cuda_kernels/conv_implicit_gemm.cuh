// Implicit-GEMM conv2d kernels on tensor cores (mma.sync: m16n8k16 for bf16/f16, m16n8k8 for
// TF32), NHWC activations, fp32 accumulation. The tiles of the GEMM are gathered straight from
// the activations into shared memory with cp.async (no im2col buffer), through a STAGES-deep
// pipeline; each warp computes a WM x WN tile from ldmatrix-loaded fragments.
//
// fprop kernel (forward, and backward-data as a transposed convolution):
//   GEMM rows m = (n, oh, ow) of the destination, columns = destination channels, reduction =
//   (tap r,s; channel c) walked tap by tap, BK channels at a time, so each 16-byte chunk is a
//   contiguous channel vector of one source pixel:
//     forward        src = x [N,H,W,C],  filter = W packed as [K][R][S][Cpad], dst = y [N,P,Q,K]
//     backward_data  src = dy [N,P,Q,K], filter = W^T packed as [C][R][S][Kpad], dst = dx [N,H,W,C]
//   with the source pixel of destination (oh, ow) at tap (r, s): forward oh*sh - ph + r*dh;
//   backward_data (oh + ph - r*dh) / sh when that division is exact (else the tap adds nothing).
//   Shared tiles are [rows][64 bytes] (padded to 80 bytes so ldmatrix is conflict-free); the
//   packed filter is zero-padded to Cpad (a multiple of BK), and source channels beyond Csrc load
//   as zeros, so any channel count works: kVec loads 16-byte chunks (Csrc a multiple of 8 for
//   16-bit types, 4 for fp32), the general path loads element by element.
//   The epilogue optionally adds a bias and applies ReLU (the fused conv2d_bias_relu forward).
//
// wgrad kernel (backward-filter): GEMM rows = output channels k, columns = (tap, channel c),
//   reduction = the N*P*Q output pixels, split across blockIdx.z (split-K). Both operands are
//   pixel-major in memory (dy [NPQ][K], x gathered per pixel), so shared tiles are [pixels][rows]
//   and fragments come from ldmatrix.trans (16-bit) or scalar loads (fp32). Each split writes its
//   fp32 partial [K][R*S*C] to a workspace slice (reduced afterwards in a fixed order:
//   deterministic), or atomically adds into one fp32 buffer (not deterministic).
// Include only from cuda_kernels/conv_implicit_gemm.cu.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda_kernels/elementwise.cuh"

namespace ember::cuda::conv::igemm {

// ---- PTX wrappers -----------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; zero-filled when !valid (nothing is read then).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// One warp-wide MMA on fragments in the standard mma.sync layouts (A row-major m16 x kK, B
// column-major kK x n8, C/D m16 x n8 in fp32). kK elements of the reduction are 32 bytes of T.
template <typename T>
struct MmaOp;

template <>
struct MmaOp<__nv_bfloat16> {
  static constexpr int kK = 16;
  __device__ __forceinline__ static void prepare(uint32_t&) {}
  __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

template <>
struct MmaOp<__half> {
  static constexpr int kK = 16;
  __device__ __forceinline__ static void prepare(uint32_t&) {}
  __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

// fp32 operands run as TF32: rounded to nearest (cvt.rna) once per fragment register.
template <>
struct MmaOp<float> {
  static constexpr int kK = 8;
  __device__ __forceinline__ static void prepare(uint32_t& r) {
    uint32_t out;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(out) : "f"(__uint_as_float(r)));
    r = out;
  }
  __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

// Two adjacent output elements stored at once.
template <typename T>
struct alignas(2 * sizeof(T)) Pair {
  T a, b;
};

// ---- fprop: forward and backward-data ----------------------------------------------------------

struct FpropParams {
  const void* src;     // [N][SH][SW][Csrc], NHWC dense
  const void* filter;  // [Nout][R][S][Cpad], Cpad a multiple of the kernel's BK, zero-padded
  void* dst;           // [M][Nout]: NHWC dense destination
  const void* bias;    // [Nout] or null (forward only)
  bool relu;           // forward only
  bool transposed;     // backward-data index map
  int N, SH, SW, Csrc, Cpad;
  int OH, OW;  // destination spatial size; M = N * OH * OW
  int R, S, sh, sw, ph, pw, dh, dw;
  int M, Nout;
  int cblocks;  // Cpad / BK
  int k_tiles;  // R * S * cblocks
  FastDivmod div_ohw, div_ow;
};

template <int BM, int BN, int WM, int WN>
struct TileShape {
  static constexpr int kWarps = (BM / WM) * (BN / WN);
  static constexpr int kThreads = kWarps * 32;
};

// Shared-memory bytes of one fprop pipeline: STAGES x (BM + BN) rows of 80 bytes.
constexpr int kFpropRowBytes = 80;
template <int BM, int BN, int STAGES>
constexpr int fprop_smem_bytes() {
  return STAGES * (BM + BN) * kFpropRowBytes;
}

template <typename T, int BM, int BN, int WM, int WN, int STAGES, bool kVec>
__global__ void __launch_bounds__(TileShape<BM, BN, WM, WN>::kThreads)
implicit_gemm_fprop_kernel(FpropParams p) {
  constexpr int kThreads = TileShape<BM, BN, WM, WN>::kThreads;
  constexpr int VEC = 16 / int(sizeof(T));  // elements per 16-byte chunk
  constexpr int BK = 64 / int(sizeof(T));   // reduction elements per stage (64 bytes)
  constexpr int kRow = kFpropRowBytes;
  constexpr int kRowsPerPass = kThreads / 4;  // 4 chunks per 64-byte row
  constexpr int A_ITERS = BM / kRowsPerPass;
  constexpr int B_ITERS = BN / kRowsPerPass;
  static_assert(A_ITERS * kRowsPerPass == BM && B_ITERS * kRowsPerPass == BN, "tile vs threads");
  constexpr int MT = WM / 16, NT = WN / 8;
  static_assert(NT % 2 == 0, "B fragments load two n8 tiles at a time");
  constexpr int kStageBytes = (BM + BN) * kRow;
  using Mma = MmaOp<T>;

  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp % (BM / WM), warp_n = warp / (BM / WM);
  const int block_m = blockIdx.x * BM, block_n = blockIdx.y * BN;
  const T* src = static_cast<const T*>(p.src);
  const T* filter = static_cast<const T*>(p.filter);
  const int chunk = tid & 3;  // this thread's 16-byte chunk within each 64-byte row

  // The destination pixels of this thread's A rows: image (-1 past M) and base coordinates.
  int a_img[A_ITERS], a_h[A_ITERS], a_w[A_ITERS];
#pragma unroll
  for (int i = 0; i < A_ITERS; ++i) {
    const int m = block_m + tid / 4 + i * kRowsPerPass;
    a_img[i] = -1;
    a_h[i] = a_w[i] = 0;
    if (m < p.M) {
      const int n = int(p.div_ohw.div(uint32_t(m)));
      const int rem = m - n * p.OH * p.OW;
      const int oh = int(p.div_ow.div(uint32_t(rem)));
      const int ow = rem - oh * p.OW;
      a_img[i] = n;
      a_h[i] = p.transposed ? oh + p.ph : oh * p.sh - p.ph;
      a_w[i] = p.transposed ? ow + p.pw : ow * p.sw - p.pw;
    }
  }

  auto load_stage = [&](int stage, int kt) {
    const int tap = kt / p.cblocks, cb = kt - tap * p.cblocks;
    const int r = tap / p.S, s = tap - r * p.S;
    const int c = cb * BK + chunk * VEC;  // first channel of this thread's chunks
    unsigned char* sA = smem + stage * kStageBytes;
    unsigned char* sB = sA + BM * kRow;
#pragma unroll
    for (int i = 0; i < A_ITERS; ++i) {
      const int row = tid / 4 + i * kRowsPerPass;
      bool ok = a_img[i] >= 0;
      int h, w;
      if (!p.transposed) {
        h = a_h[i] + r * p.dh;
        w = a_w[i] + s * p.dw;
        ok = ok && h >= 0 && h < p.SH && w >= 0 && w < p.SW;
      } else {
        const int nh = a_h[i] - r * p.dh, nw = a_w[i] - s * p.dw;
        ok = ok && nh >= 0 && nw >= 0 && nh % p.sh == 0 && nw % p.sw == 0;
        h = nh / p.sh;
        w = nw / p.sw;
        ok = ok && h < p.SH && w < p.SW;
      }
      const int64_t pixel = ok ? (int64_t(a_img[i]) * p.SH + h) * p.SW + w : 0;
      const T* g = src + pixel * p.Csrc + c;
      unsigned char* d = sA + row * kRow + chunk * 16;
      if constexpr (kVec) {
        const bool valid = ok && c < p.Csrc;
        cp_async_16(smem_u32(d), valid ? g : src, valid);
      } else {
        alignas(16) T vals[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) vals[e] = (ok && c + e < p.Csrc) ? g[e] : convert<T>(0.0f);
        *reinterpret_cast<uint4*>(d) = *reinterpret_cast<const uint4*>(vals);
      }
    }
#pragma unroll
    for (int i = 0; i < B_ITERS; ++i) {
      const int row = tid / 4 + i * kRowsPerPass;
      const int n_out = block_n + row;
      const bool valid = n_out < p.Nout;
      const T* g = filter + (int64_t(n_out) * (p.R * p.S) + tap) * p.Cpad + c;
      cp_async_16(smem_u32(sB + row * kRow + chunk * 16), valid ? g : filter, valid);
    }
  };

  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[i][j][k] = 0.f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < p.k_tiles) load_stage(s, s);
    cp_async_commit();
  }

  for (int kt = 0; kt < p.k_tiles; ++kt) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // stage kt landed for every thread; stage kt-1 is no longer being read
    const int next = kt + STAGES - 1;
    if (next < p.k_tiles) load_stage(next % STAGES, next);
    cp_async_commit();

    const unsigned char* sA = smem + (kt % STAGES) * kStageBytes;
    const unsigned char* sB = sA + BM * kRow;
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {  // two 32-byte MMA steps per 64-byte stage
      uint32_t af[MT][4], bf[NT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int row = warp_m * WM + mt * 16 + (lane & 15);
        ldmatrix_x4(af[mt], smem_u32(sA + row * kRow + ks * 32 + (lane >> 4) * 16));
#pragma unroll
        for (int k = 0; k < 4; ++k) Mma::prepare(af[mt][k]);
      }
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        const int row = warp_n * WN + np * 16 + (lane & 7) + ((lane >> 4) << 3);
        uint32_t r[4];
        ldmatrix_x4(r, smem_u32(sB + row * kRow + ks * 32 + ((lane >> 3) & 1) * 16));
#pragma unroll
        for (int k = 0; k < 4; ++k) Mma::prepare(r[k]);
        bf[2 * np][0] = r[0];
        bf[2 * np][1] = r[1];
        bf[2 * np + 1][0] = r[2];
        bf[2 * np + 1][1] = r[3];
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) Mma::run(acc[mt][nt], af[mt], bf[nt]);
    }
  }
  cp_async_wait<0>();

  // Epilogue: fragment (mt, nt) holds rows lane/4 and lane/4 + 8, columns 2*(lane%4) + {0, 1}.
  T* dst = static_cast<T*>(p.dst);
  const T* bias = static_cast<const T*>(p.bias);
  const bool pairs = (p.Nout & 1) == 0;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int col = block_n + warp_n * WN + nt * 8 + (lane & 3) * 2;
      if (col >= p.Nout) continue;
      float b0 = 0.f, b1 = 0.f;
      if (bias != nullptr) {
        b0 = convert<float>(bias[col]);
        if (col + 1 < p.Nout) b1 = convert<float>(bias[col + 1]);
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = block_m + warp_m * WM + mt * 16 + (lane >> 2) + half * 8;
        if (row >= p.M) continue;
        float v0 = acc[mt][nt][2 * half] + b0, v1 = acc[mt][nt][2 * half + 1] + b1;
        if (p.relu) {  // NaN stays NaN, as torch.relu
          v0 = v0 < 0.f ? 0.f : v0;
          v1 = v1 < 0.f ? 0.f : v1;
        }
        T* out = dst + int64_t(row) * p.Nout + col;
        if (pairs) {
          *reinterpret_cast<Pair<T>*>(out) = Pair<T>{convert<T>(v0), convert<T>(v1)};
        } else {
          out[0] = convert<T>(v0);
          if (col + 1 < p.Nout) out[1] = convert<T>(v1);
        }
      }
    }
}

// ---- wgrad: backward-filter with split-K ------------------------------------------------------

struct WgradParams {
  const void* dy;  // [NPQ][K], NHWC dense
  const void* x;   // [N][H][W][C], NHWC dense
  float* partial;  // deterministic: [splits][K][R*S*C]; atomic: [K][R*S*C] (zeroed)
  bool atomic;
  int N, H, W, C, K, P, Q, R, S, sh, sw, ph, pw, dh, dw;
  int NPQ;
  int cblocks;          // ceil(C / BN)
  int k_tiles;          // ceil(NPQ / kWgradRows)
  int tiles_per_split;  // consecutive k-tiles per blockIdx.z
  FastDivmod div_pq, div_q;
};

constexpr int kWgradRows = 32;  // output pixels (reduction) per pipeline stage
constexpr int kWgradPad = 8;    // elements of padding per shared row (conflict-free fragments)

template <typename T, int BM, int BN, int STAGES>
constexpr int wgrad_smem_bytes() {
  return STAGES * kWgradRows * (BM + kWgradPad + BN + kWgradPad) * int(sizeof(T));
}

template <typename T, int BM, int BN, int WM, int WN, int STAGES>
__global__ void __launch_bounds__(TileShape<BM, BN, WM, WN>::kThreads)
implicit_gemm_wgrad_kernel(WgradParams p) {
  constexpr int kThreads = TileShape<BM, BN, WM, WN>::kThreads;
  constexpr int VEC = 16 / int(sizeof(T));
  constexpr int kRows = kWgradRows;
  constexpr int A_ROW = (BM + kWgradPad) * int(sizeof(T));  // bytes per shared row
  constexpr int B_ROW = (BN + kWgradPad) * int(sizeof(T));
  constexpr int A_CPR = BM / VEC;  // 16-byte chunks per row
  constexpr int B_CPR = BN / VEC;
  constexpr int A_ITERS = kRows * A_CPR / kThreads;
  constexpr int B_ITERS = kRows * B_CPR / kThreads;
  static_assert(A_ITERS * kThreads == kRows * A_CPR && B_ITERS * kThreads == kRows * B_CPR,
                "tile vs threads");
  constexpr int kStageBytes = kRows * (A_ROW + B_ROW);
  constexpr int MT = WM / 16, NT = WN / 8;
  static_assert(NT % 2 == 0, "B fragments load two n8 tiles at a time");
  using Mma = MmaOp<T>;
  constexpr int KSTEP = Mma::kK;
  constexpr bool kSixteenBit = sizeof(T) == 2;

  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp % (BM / WM), warp_n = warp / (BM / WM);
  const int block_m = blockIdx.x * BM;  // first output channel k
  const int tap = blockIdx.y / p.cblocks;
  const int c_base = (blockIdx.y - tap * p.cblocks) * BN;
  const int r = tap / p.S, s = tap - r * p.S;
  const int kt_begin = blockIdx.z * p.tiles_per_split;
  const int kt_end = min(p.k_tiles, kt_begin + p.tiles_per_split);
  const int n_tiles = max(kt_end - kt_begin, 0);
  const T* dy = static_cast<const T*>(p.dy);
  const T* x = static_cast<const T*>(p.x);
  const int PQ = p.P * p.Q;

  auto load_stage = [&](int stage, int kt) {
    unsigned char* sA = smem + stage * kStageBytes;
    unsigned char* sB = sA + kRows * A_ROW;
#pragma unroll
    for (int i = 0; i < A_ITERS; ++i) {
      const int id = tid + i * kThreads;
      const int row = id / A_CPR, col = id % A_CPR;
      const int pix = kt * kRows + row;
      const int k = block_m + col * VEC;
      const bool valid = pix < p.NPQ && k < p.K;
      const T* g = dy + int64_t(pix) * p.K + k;
      cp_async_16(smem_u32(sA + row * A_ROW + col * 16), valid ? g : dy, valid);
    }
#pragma unroll
    for (int i = 0; i < B_ITERS; ++i) {
      const int id = tid + i * kThreads;
      const int row = id / B_CPR, col = id % B_CPR;
      const int pix = kt * kRows + row;
      const int c = c_base + col * VEC;
      bool valid = pix < p.NPQ && c < p.C;
      int64_t at = 0;
      if (valid) {
        const int n = int(p.div_pq.div(uint32_t(pix)));
        const int rem = pix - n * PQ;
        const int op = int(p.div_q.div(uint32_t(rem)));
        const int oq = rem - op * p.Q;
        const int h = op * p.sh - p.ph + r * p.dh, w = oq * p.sw - p.pw + s * p.dw;
        valid = h >= 0 && h < p.H && w >= 0 && w < p.W;
        at = ((int64_t(n) * p.H + h) * p.W + w) * p.C + c;
      }
      cp_async_16(smem_u32(sB + row * B_ROW + col * 16), valid ? x + at : x, valid);
    }
  };

  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[i][j][k] = 0.f;

#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < n_tiles) load_stage(st, kt_begin + st);
    cp_async_commit();
  }
  for (int t = 0; t < n_tiles; ++t) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int next = t + STAGES - 1;
    if (next < n_tiles) load_stage(next % STAGES, kt_begin + next);
    cp_async_commit();

    const unsigned char* sA = smem + (t % STAGES) * kStageBytes;
    const unsigned char* sB = sA + kRows * A_ROW;
#pragma unroll
    for (int ks = 0; ks < kRows / KSTEP; ++ks) {
      uint32_t af[MT][4], bf[NT][2];
      if constexpr (kSixteenBit) {
        // Shared tiles are [pixel][channel]: the transposing ldmatrix yields row-major A
        // (channels k x pixels) and column-major B (pixels x channels c) fragments.
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const int krow = ks * 16 + (lane & 7) + ((lane >> 4) << 3);
          const int mcol = warp_m * WM + mt * 16 + ((lane >> 3) & 1) * 8;
          ldmatrix_x4_trans(af[mt], smem_u32(sA + krow * A_ROW + mcol * 2));
        }
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
          const int krow = ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
          const int ncol = warp_n * WN + np * 16 + (lane >> 4) * 8;
          uint32_t q[4];
          ldmatrix_x4_trans(q, smem_u32(sB + krow * B_ROW + ncol * 2));
          bf[2 * np][0] = q[0];
          bf[2 * np][1] = q[1];
          bf[2 * np + 1][0] = q[2];
          bf[2 * np + 1][1] = q[3];
        }
      } else {
        // TF32 m16n8k8: a0 (m g, k t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4);
        // b0 (k t, n g), b1 (t + 4, g); g = lane / 4, t = lane % 4.
        const int g = lane >> 2, t4 = lane & 3;
        const float* As = reinterpret_cast<const float*>(sA);
        const float* Bs = reinterpret_cast<const float*>(sB);
        constexpr int AS = A_ROW / 4, BS = B_ROW / 4;
        const int k0 = ks * 8 + t4;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const int m0 = warp_m * WM + mt * 16 + g;
          af[mt][0] = __float_as_uint(As[k0 * AS + m0]);
          af[mt][1] = __float_as_uint(As[k0 * AS + m0 + 8]);
          af[mt][2] = __float_as_uint(As[(k0 + 4) * AS + m0]);
          af[mt][3] = __float_as_uint(As[(k0 + 4) * AS + m0 + 8]);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int n0 = warp_n * WN + nt * 8 + g;
          bf[nt][0] = __float_as_uint(Bs[k0 * BS + n0]);
          bf[nt][1] = __float_as_uint(Bs[(k0 + 4) * BS + n0]);
        }
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int k = 0; k < 4; ++k) Mma::prepare(af[mt][k]);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        Mma::prepare(bf[nt][0]);
        Mma::prepare(bf[nt][1]);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) Mma::run(acc[mt][nt], af[mt], bf[nt]);
    }
  }
  cp_async_wait<0>();

  // Every split writes its whole tile (zeros when it had no k-tiles), so the reduction over
  // splits never reads stale memory.
  const int64_t cols = int64_t(p.R) * p.S * p.C;
  float* out = p.atomic ? p.partial : p.partial + int64_t(blockIdx.z) * p.K * cols;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int c = c_base + warp_n * WN + nt * 8 + (lane & 3) * 2;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int k = block_m + warp_m * WM + mt * 16 + (lane >> 2) + half * 8;
        if (k >= p.K) continue;
        float* row = out + int64_t(k) * cols + int64_t(tap) * p.C;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (c + e >= p.C) continue;
          if (p.atomic) {
            atomicAdd(row + c + e, acc[mt][nt][2 * half + e]);
          } else {
            row[c + e] = acc[mt][nt][2 * half + e];
          }
        }
      }
    }
}

}  // namespace ember::cuda::conv::igemm
