// Implicit-GEMM backward-filter kernels on tensor cores (mma.sync), sharing the pipeline, tile
// shapes and PTX wrappers of implicit_gemm.cuh.
//
// wgrad kernel (backward-filter): GEMM rows = output channels k, columns = the (tap, channel c)
//   index tap*C + c (a column tile may span taps, so 64-channel layers fill 128-wide tiles),
//   reduction = the N*P*Q output pixels (128 bytes of them per stage), split across blockIdx.z
//   (split-K). Both operands are pixel-major in memory (dy [NPQ][K], x gathered per pixel), so
//   shared tiles are [pixels][rows] (padded rows) and fragments come from ldmatrix.trans (16-bit)
//   or scalar loads (fp32). Each split writes its fp32 partial [K][R*S*C] to a workspace slice
//   (reduced afterwards in a fixed order: deterministic), or atomically adds into one fp32 buffer
//   (not deterministic).
//
// halo wgrad kernel (backward-filter, 16-bit, stride 1 'same' 3-wide rows): the wgrad GEMM with
//   the three taps of one filter row per block, read from one shared halo of x rows (see below).
// Include only from cuda_kernels/conv/implicit_gemm_wgrad.cu.
#pragma once
#include <cstdint>

#include "ember/cuda_kernels/conv/implicit_gemm.cuh"

namespace ember::cuda::conv::igemm {

// ---- wgrad: backward-filter with split-K ------------------------------------------------------

struct WgradParams {
  const void* dy;  // [NPQ][K], NHWC dense
  const void* x;   // [N][H][W][C], NHWC dense
  float* partial;  // deterministic: [splits][K][R*S*C]; atomic: [K][R*S*C] (zeroed)
  bool atomic;
  int N, H, W, C, K, P, Q, R, S, sh, sw, ph, pw, dh, dw;
  int NPQ;
  int k_tiles;          // ceil(NPQ / wgrad_rows(T))
  int tiles_per_split;  // consecutive k-tiles per blockIdx.z
  FastDivmod div_pq, div_q;
};

// Output pixels (the reduction) per pipeline stage: 128 bytes of each pixel's channels, i.e. four
// MMA k-steps, so one barrier serves four k-steps.
constexpr int wgrad_rows(int elem_bytes) { return 128 / elem_bytes; }
constexpr int kWgradKSteps = 4;
constexpr int kWgradPad = 8;  // elements of padding per shared row (conflict-free fragments)

template <typename T, int BM, int BN, int STAGES>
constexpr int wgrad_smem_bytes() {
  return STAGES * wgrad_rows(int(sizeof(T))) * (BM + kWgradPad + BN + kWgradPad) * int(sizeof(T));
}

template <typename T, int BM, int BN, int WM, int WN, int STAGES>
__global__ void __launch_bounds__(TileShape<BM, BN, WM, WN>::kThreads,
                                  blocks_per_sm(wgrad_smem_bytes<T, BM, BN, STAGES>()))
    implicit_gemm_wgrad_kernel(WgradParams p) {
  allow_dependents();  // a batch-norm kernel launched dependent may take freed SMs early
  constexpr int kThreads = TileShape<BM, BN, WM, WN>::kThreads;
  constexpr int VEC = 16 / int(sizeof(T));
  constexpr int kRows = wgrad_rows(int(sizeof(T)));
  constexpr int A_ROW = (BM + kWgradPad) * int(sizeof(T));  // bytes per shared row
  constexpr int B_ROW = (BN + kWgradPad) * int(sizeof(T));
  constexpr int A_CPR = BM / VEC;  // 16-byte chunks per row
  constexpr int B_CPR = BN / VEC;
  static_assert(kThreads % A_CPR == 0 && kThreads % B_CPR == 0, "a thread keeps its chunk column");
  constexpr int A_ITERS = kRows * A_CPR / kThreads;
  constexpr int B_ITERS = kRows * B_CPR / kThreads;
  static_assert(A_ITERS * kThreads == kRows * A_CPR && B_ITERS * kThreads == kRows * B_CPR,
                "tile vs threads");
  static_assert(STAGES >= 3, "the stage refilled must differ from the one read next");
  constexpr int kStageBytes = kRows * (A_ROW + B_ROW);
  constexpr int MT = WM / 16, NT = WN / 8;
  static_assert(NT % 2 == 0, "B fragments load two n8 tiles at a time");
  using Mma = MmaOp<T>;
  static_assert(kRows == kWgradKSteps * Mma::kK, "a stage is four k-steps");
  constexpr bool kSixteenBit = sizeof(T) == 2;

  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp % (BM / WM), warp_n = warp / (BM / WM);
  const int block_m = blockIdx.x * BM;  // first output channel k
  const int block_n = blockIdx.y * BN;  // first column tap*C + c
  const int cols = p.R * p.S * p.C;
  const int kt_begin = blockIdx.z * p.tiles_per_split;
  const int kt_end = min(p.k_tiles, kt_begin + p.tiles_per_split);
  const int n_tiles = max(kt_end - kt_begin, 0);
  const T* dy = static_cast<const T*>(p.dy);
  const T* x = static_cast<const T*>(p.x);
  const int PQ = p.P * p.Q;

  // Each thread loads one chunk column of each tile, on rows every kThreads / CPR pixels. Its B
  // chunk is VEC channels of one tap (C is a multiple of VEC), decomposed once.
  const int a_col = tid % A_CPR, a_row0 = tid / A_CPR;
  const int b_col = tid % B_CPR, b_row0 = tid / B_CPR;
  const int a_k = block_m + a_col * VEC;
  const bool a_col_ok = a_k < p.K;
  // A column past the last one gets a row offset that fails every bounds test.
  const int b_n = block_n + b_col * VEC;
  const int b_tap = b_n / p.C, b_c = b_n - b_tap * p.C;
  const int b_r = b_tap / p.S, b_s = b_tap - b_r * p.S;
  const int tap_h = b_n < cols ? b_r * p.dh - p.ph : kNoPixel, tap_w = b_s * p.dw - p.pw;

  auto load_stage = [&](int stage, int kt) {
    unsigned char* sA = smem + stage * kStageBytes;
    unsigned char* sB = sA + kRows * A_ROW;
#pragma unroll
    for (int i = 0; i < A_ITERS; ++i) {
      const int row = a_row0 + i * (kThreads / A_CPR);
      const int pix = kt * kRows + row;
      const bool valid = a_col_ok && pix < p.NPQ;
      const T* g = dy + int64_t(pix) * p.K + a_k;
      cp_async_16(smem_u32(sA + row * A_ROW + a_col * 16), valid ? g : dy, valid);
    }
    // Partly unrolled: all B_ITERS gathers in flight at once would need more registers than the
    // 128x128 tile has left.
#pragma unroll 4
    for (int i = 0; i < B_ITERS; ++i) {
      const int row = b_row0 + i * (kThreads / B_CPR);
      const int pix = kt * kRows + row;
      bool valid = pix < p.NPQ;
      int64_t at = 0;
      if (valid) {
        const int n = int(p.div_pq.div(uint32_t(pix)));
        const int rem = pix - n * PQ;
        const int op = int(p.div_q.div(uint32_t(rem)));
        const int oq = rem - op * p.Q;
        const int h = op * p.sh + tap_h, w = oq * p.sw + tap_w;
        valid = uint32_t(h) < uint32_t(p.H) && uint32_t(w) < uint32_t(p.W);
        at = ((int64_t(n) * p.H + h) * p.W + w) * p.C + b_c;
      }
      cp_async_16(smem_u32(sB + row * B_ROW + b_col * 16), valid ? x + at : x, valid);
    }
  };

  // Fragments of k-step ks of a stage, double-buffered like the fprop kernel's.
  uint32_t af[2][MT][4], bf[2][NT][2];
  auto load_frags = [&](int buf, int stage, int ks) {
    const unsigned char* sA = smem + stage * kStageBytes;
    const unsigned char* sB = sA + kRows * A_ROW;
    if constexpr (kSixteenBit) {
      // Shared tiles are [pixel][channel]: the transposing ldmatrix yields row-major A
      // (channels k x pixels) and column-major B (pixels x channels c) fragments.
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int krow = ks * 16 + (lane & 7) + ((lane >> 4) << 3);
        const int mcol = warp_m * WM + mt * 16 + ((lane >> 3) & 1) * 8;
        ldmatrix_x4_trans(af[buf][mt], smem_u32(sA + krow * A_ROW + mcol * 2));
      }
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        const int krow = ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
        const int ncol = warp_n * WN + np * 16 + (lane >> 4) * 8;
        uint32_t q[4];
        ldmatrix_x4_trans(q, smem_u32(sB + krow * B_ROW + ncol * 2));
        set_b_pair(bf[buf], np, q);
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
        af[buf][mt][0] = __float_as_uint(As[k0 * AS + m0]);
        af[buf][mt][1] = __float_as_uint(As[k0 * AS + m0 + 8]);
        af[buf][mt][2] = __float_as_uint(As[(k0 + 4) * AS + m0]);
        af[buf][mt][3] = __float_as_uint(As[(k0 + 4) * AS + m0 + 8]);
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int n0 = warp_n * WN + nt * 8 + g;
        bf[buf][nt][0] = __float_as_uint(Bs[k0 * BS + n0]);
        bf[buf][nt][1] = __float_as_uint(Bs[(k0 + 4) * BS + n0]);
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int k = 0; k < 4; ++k) Mma::prepare(af[buf][mt][k]);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      Mma::prepare(bf[buf][nt][0]);
      Mma::prepare(bf[buf][nt][1]);
    }
  };

  float acc[MT][NT][4];
  zero_accumulators(acc);

  multistage_mainloop<STAGES, kWgradKSteps>(
      n_tiles, [&](int stage, int tile) { load_stage(stage, kt_begin + tile); }, load_frags,
      [&](int buf) { mma_tile<Mma>(acc, af[buf], bf[buf]); }, [] {});

  // Every split writes its whole tile (zeros when it had no k-tiles), so the reduction over
  // splits never reads stale memory.
  float* out = p.atomic ? p.partial : p.partial + int64_t(blockIdx.z) * p.K * cols;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int col = block_n + warp_n * WN + nt * 8 + (lane & 3) * 2;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int k = block_m + warp_m * WM + mt * 16 + (lane >> 2) + half * 8;
        if (k >= p.K) continue;
        float* row = out + int64_t(k) * cols;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (col + e >= cols) continue;
          if (p.atomic) {
            atomicAdd(row + col + e, acc[mt][nt][2 * half + e]);
          } else {
            row[col + e] = acc[mt][nt][2 * half + e];
          }
        }
      }
    }
}

// ---- halo wgrad: backward-filter of stride-1 'same' convolutions with 3-wide rows (16-bit) ----
//
// For stride 1 and P == H, Q == W (S = 3, dw = 1, pw = 1), output pixel m = (n, p, q) reads x at
// linear pixel m + (r*dh - ph)*W + (s - 1) for tap (r, s) whenever that tap is inside the image.
// So one block, whose columns are the three taps (r, 0..2) of a 64-channel chunk (192 columns),
// loads the x rows of a stage's 64 output pixels ONCE as a 66-row halo (64 pixels + 2 for the
// tap offsets) and reads tap s from halo row pixel + s: ldmatrix takes one row address per lane,
// so the shift costs nothing, and a lane whose (pixel, tap) falls outside the image points at a
// shared row of zeros instead. A stage loads 64 pixels x (64 dy + 66 x) rows of 128 bytes for
// 64 x 192 x 64 MACs, 48 MACs per byte, where the gathering kernel above loads every x row once
// per tap (64x128 tiles: 21 MACs per byte). Rows 64 + 8 elements wide: the 8 consecutive rows one
// ldmatrix phase reads fall in different bank groups at any shift. Each stage also carries a
// byte per pixel: bit s = tap (r, s) of that pixel lies inside the image (and the pixel exists).
// Split-K, partials and the epilogue as in implicit_gemm_wgrad_kernel; blockIdx.y = r * chunks +
// chunk of 64 channels, blockIdx.x = 64 output channels.

struct HaloWgradParams {
  const void* dy;  // [NPQ][K], NHWC dense
  const void* x;   // [N][H][W][C], NHWC dense, NHW == NPQ
  float* partial;  // deterministic: [splits][K][R*3*C]; atomic: [K][R*3*C] (zeroed)
  bool atomic;
  int C, K, H, W, R, dh, ph;
  int NPQ;
  int c_chunks;         // C / 64
  int k_tiles;          // ceil(NPQ / 64)
  int tiles_per_split;  // consecutive k-tiles per blockIdx.z
  FastDivmod div_hw, div_w;
};

constexpr int kHaloPixels = 64;                         // output pixels per stage (128 bytes)
constexpr int kHaloTaps = 3;                            // the taps s of one filter row
constexpr int kHaloChannels = 64;                       // x channels per block (128 bytes)
constexpr int kHaloRows = kHaloPixels + kHaloTaps - 1;  // x rows per stage
constexpr int kHaloBM = 64;                             // output channels per block
constexpr int kHaloBN = kHaloTaps * kHaloChannels;      // columns per block
constexpr int kHaloThreads = 128;                       // 4 warps side by side, 64 x 48 each
constexpr int kHaloWN = kHaloBN / (kHaloThreads / 32);
constexpr int kHaloStages = 4;
constexpr int kHaloRowBytes = (64 + kWgradPad) * 2;  // dy and x shared rows alike
constexpr int kHaloStageBytes =
    (kHaloPixels + kHaloRows) * kHaloRowBytes + kHaloPixels;  // + the pixel flags
// The stages, then one row of zeros.
constexpr int kHaloSmemBytes = kHaloStages * kHaloStageBytes + kHaloRowBytes;
// Shared memory would admit 3 blocks per SM, but their 168 registers per thread spill (96
// accumulators and 56 double-buffered fragment registers), so the kernel asks for 2.
constexpr int kHaloBlocksPerSm = 2;
static_assert(blocks_per_sm(kHaloSmemBytes) >= kHaloBlocksPerSm, "shared memory per block");

template <typename T>
__global__ void __launch_bounds__(kHaloThreads, kHaloBlocksPerSm)
    implicit_gemm_halo_wgrad_kernel(HaloWgradParams p) {
  allow_dependents();  // a batch-norm kernel launched dependent may take freed SMs early
  static_assert(sizeof(T) == 2, "16-bit types: a stage is 64 pixels of 128-byte rows");
  static_assert(kHaloStageBytes % 16 == 0, "stages keep 16-byte alignment");
  static_assert(kHaloBM == 64 && kHaloChannels == 64, "rows are 128 bytes");
  static_assert(kHaloWN % 16 == 0 && kHaloChannels % 16 == 0,
                "a 16-column fragment group lies within one tap");
  constexpr int VEC = 8;
  constexpr int kChunks = 8;                            // 16-byte chunks per 128-byte row
  constexpr int kRowsPerPass = kHaloThreads / kChunks;  // 16
  constexpr int A_ITERS = kHaloPixels / kRowsPerPass;   // 4
  constexpr int X_ITERS = (kHaloRows + kRowsPerPass - 1) / kRowsPerPass;  // 5, the last partial
  constexpr int MT = kHaloBM / 16, NT = kHaloWN / 8;                      // 4, 6
  static_assert(NT % 2 == 0, "B fragments load two n8 tiles at a time");
  constexpr int kDyBytes = kHaloPixels * kHaloRowBytes;
  constexpr int kFlagsOffset = kDyBytes + kHaloRows * kHaloRowBytes;
  using Mma = MmaOp<T>;

  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp_n = tid >> 5;
  const int block_k = blockIdx.x * kHaloBM;  // first output channel
  const int r = int(blockIdx.y) / p.c_chunks;
  const int c0 = (int(blockIdx.y) - r * p.c_chunks) * kHaloChannels;
  const int cols = p.R * kHaloTaps * p.C;
  const int kt_begin = blockIdx.z * p.tiles_per_split;
  const int kt_end = min(p.k_tiles, kt_begin + p.tiles_per_split);
  const int n_tiles = max(kt_end - kt_begin, 0);
  const T* dy = static_cast<const T*>(p.dy);
  const T* x = static_cast<const T*>(p.x);
  // Tap (r, s) of pixel m reads x pixel m + row_shift + s while inside the image.
  const int row_shift = (r * p.dh - p.ph) * p.W - 1;
  const int row_off = r * p.dh - p.ph;  // h - p

  const int chunk = tid & 7, row0 = tid >> 3;
  const int a_k = block_k + chunk * VEC;
  const bool a_col_ok = a_k < p.K;
  const uint32_t zero_row = smem_u32(smem + kHaloStages * kHaloStageBytes);
  if (tid < kHaloRowBytes / 16)
    *reinterpret_cast<uint4*>(smem + kHaloStages * kHaloStageBytes + tid * 16) =
        make_uint4(0, 0, 0, 0);

  auto load_stage = [&](int stage, int kt) {
    unsigned char* sA = smem + stage * kHaloStageBytes;
    unsigned char* sX = sA + kDyBytes;
    const int pix0 = kt * kHaloPixels;
#pragma unroll
    for (int i = 0; i < A_ITERS; ++i) {
      const int row = row0 + i * kRowsPerPass;
      const int pix = pix0 + row;
      const bool valid = a_col_ok && pix < p.NPQ;
      const T* g = dy + int64_t(pix) * p.K + a_k;
      cp_async_16(smem_u32(sA + row * kHaloRowBytes + chunk * 16), valid ? g : dy, valid);
    }
#pragma unroll
    for (int i = 0; i < X_ITERS; ++i) {
      const int row = row0 + i * kRowsPerPass;
      if (row < kHaloRows) {
        const int xpix = pix0 + row_shift + row;
        const bool valid = xpix >= 0 && xpix < p.NPQ;
        const T* g = x + int64_t(xpix) * p.C + c0 + chunk * VEC;
        cp_async_16(smem_u32(sX + row * kHaloRowBytes + chunk * 16), valid ? g : x, valid);
      }
    }
    // Which taps of this stage's pixel `tid` lie inside the image (plain stores: the barrier
    // before the stage is read publishes them with the cp.async data).
    if (tid < kHaloPixels) {
      const int pix = pix0 + tid;
      uint32_t bits = 0;
      if (pix < p.NPQ) {
        const int n = int(p.div_hw.div(uint32_t(pix)));
        const int rem = pix - n * p.H * p.W;
        const int oh = int(p.div_w.div(uint32_t(rem)));
        const int ow = rem - oh * p.W;
        if (uint32_t(oh + row_off) < uint32_t(p.H))
          bits = (ow > 0 ? 1u : 0u) | 2u | (ow + 1 < p.W ? 4u : 0u);
      }
      sA[kFlagsOffset + tid] = static_cast<unsigned char>(bits);
    }
  };

  // This lane's B columns of fragment pair np: tap and channel (fixed for the whole kernel).
  int b_tap[NT / 2], b_chan_bytes[NT / 2];
#pragma unroll
  for (int np = 0; np < NT / 2; ++np) {
    const int ncol = warp_n * kHaloWN + np * 16 + (lane >> 4) * 8;
    b_tap[np] = ncol / kHaloChannels;
    b_chan_bytes[np] = (ncol % kHaloChannels) * 2;
  }
  const int b_krow = (lane & 7) + (((lane >> 3) & 1) << 3);  // plus 16 per k-step
  const int a_krow = (lane & 7) + ((lane >> 4) << 3);
  const int a_mcol_bytes = ((lane >> 3) & 1) * 8 * 2;

  uint32_t af[2][MT][4], bf[2][NT][2];
  auto load_frags = [&](int buf, int stage, int ks) {
    const unsigned char* sA = smem + stage * kHaloStageBytes;
    const uint32_t a_base =
        smem_u32(sA) + uint32_t((ks * 16 + a_krow) * kHaloRowBytes + a_mcol_bytes);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) ldmatrix_x4_trans(af[buf][mt], a_base + mt * 16 * 2);
    const int krow = ks * 16 + b_krow;
    const uint32_t flags = sA[kFlagsOffset + krow];
    const uint32_t x_row = smem_u32(sA + kDyBytes) + uint32_t(krow * kHaloRowBytes);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      const uint32_t addr = ((flags >> b_tap[np]) & 1u)
                                ? x_row + uint32_t(b_tap[np] * kHaloRowBytes + b_chan_bytes[np])
                                : zero_row + uint32_t(b_chan_bytes[np]);
      uint32_t q[4];
      ldmatrix_x4_trans(q, addr);
      set_b_pair(bf[buf], np, q);
    }
  };

  float acc[MT][NT][4];
  zero_accumulators(acc);

  multistage_mainloop<kHaloStages, kWgradKSteps>(
      n_tiles, [&](int stage, int tile) { load_stage(stage, kt_begin + tile); }, load_frags,
      [&](int buf) { mma_tile<Mma>(acc, af[buf], bf[buf]); }, [] {});

  // Every split writes its whole tile; block column j is tap (r, j / 64), channel c0 + j % 64.
  float* out = p.atomic ? p.partial : p.partial + int64_t(blockIdx.z) * p.K * cols;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int j = warp_n * kHaloWN + nt * 8 + (lane & 3) * 2;  // even: a pair stays in one tap
    const int col = (r * kHaloTaps + j / kHaloChannels) * p.C + c0 + j % kHaloChannels;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int k = block_k + mt * 16 + (lane >> 2) + half * 8;
        if (k >= p.K) continue;
        float* dst = out + int64_t(k) * cols + col;
        if (p.atomic) {
          atomicAdd(dst, acc[mt][nt][2 * half]);
          atomicAdd(dst + 1, acc[mt][nt][2 * half + 1]);
        } else {
          *reinterpret_cast<float2*>(dst) =
              make_float2(acc[mt][nt][2 * half], acc[mt][nt][2 * half + 1]);
        }
      }
  }
}

}  // namespace ember::cuda::conv::igemm
