// The halo fprop kernel on tensor cores (mma.sync), sharing the fprop parameters, pipeline and
// PTX wrappers of implicit_gemm.cuh (forward and stride-1 backward-data, 16-bit, 3x3 stride 1
// padding 1): the fprop GEMM over strips of 256 linear destination pixels, a stage being one
// filter row and 64 channels: the strip's source rows are loaded once with a one-pixel halo and
// the three taps read them at shifted rows (see below).
// Include only from cuda_kernels/conv/implicit_gemm_launch.cu.
#pragma once
#include <cstdint>

#include "ember/cuda_kernels/conv/implicit_gemm.cuh"

namespace ember::cuda::conv::igemm {

// ---- halo fprop: forward / backward-data of stride-1 'same' 3x3 convolutions (16-bit) ---------
//
// With stride 1, dilation 1, padding 1 and the destination as large as the source, destination
// pixel m = (n, oh, ow) reads source pixel m + (r - 1)*SW + (s - 1) at tap (r, s) whenever
// oh + r - 1 and ow + s - 1 lie inside the image. A block takes 256 consecutive destination
// pixels (any rows and images: linear pixel indices) x 64 destination channels; a stage is one
// filter row r and one 64-channel block, and holds the 258 source rows m0 + (r - 1)*SW - 1 + j
// (the block's pixels with a one-pixel halo on each side) once, plus the 3 x 64 filter rows of
// taps (r, 0..2). Tap s of pixel i reads halo row i + s: ldmatrix takes one row address per lane,
// so the shift is free, and a lane whose (pixel, tap) falls outside the image points at a shared
// row of zeros instead (which also covers halo rows of the wrong image row or image). The
// gathering kernel above loads each source row once per tap; here a stage loads (258 + 192) rows
// of 128 bytes for 256 x 64 x 192 MACs: 55 MACs per byte against 21 (128x64) to 43 (256x128).
// The 128-byte rows keep the XOR swizzle of the fprop tiles: any 8 consecutive rows hit 8
// different bank groups, so ldmatrix at a shifted row start stays conflict-free. The source rows
// take 264 rows of a stage (258 used): filter rows and stages start 1024-byte aligned.
// Reuses FpropParams (Cpad == Csrc, a multiple of 64; SH == OH, SW == OW); no bias or ReLU.
constexpr int kHaloFpropBM = 256;  // destination pixels per block
constexpr int kHaloFpropBN = 64;   // destination channels per block
constexpr int kHaloFpropWM = 64, kHaloFpropWN = 32;
constexpr int kHaloFpropThreads =
    (kHaloFpropBM / kHaloFpropWM) * (kHaloFpropBN / kHaloFpropWN) * 32;  // 8 warps
constexpr int kHaloFpropTaps = 3;  // taps s of one filter row per stage
constexpr int kHaloFpropSrcRows = kHaloFpropBM + kHaloFpropTaps - 1;
constexpr int kHaloFpropSrcRowsPadded = (kHaloFpropSrcRows + 7) / 8 * 8;  // 264
constexpr int kHaloFpropStages = 3;
constexpr int kHaloFpropKSteps = kHaloFpropTaps * kFpropKSteps;  // 12 MMA k-steps per stage
constexpr int kHaloFpropFilterOffset = kHaloFpropSrcRowsPadded * kFpropRowBytes;  // 33792
constexpr int kHaloFpropStageBytes =
    kHaloFpropFilterOffset + kHaloFpropTaps * kHaloFpropBN * kFpropRowBytes;  // 58368
static_assert(kHaloFpropFilterOffset % 1024 == 0 && kHaloFpropStageBytes % 1024 == 0,
              "filter rows and stages 1024-byte aligned");
// The stages, then one row of zeros: 171 KiB, one block of 8 warps per SM.
constexpr int kHaloFpropSmemBytes = kHaloFpropStages * kHaloFpropStageBytes + kFpropRowBytes;
static_assert(blocks_per_sm(kHaloFpropSmemBytes) >= 1, "shared memory per block");

// Which of the 9 taps (bit r * 3 + s) of destination pixel m lie inside the image; none for a
// pixel past M.
__device__ __forceinline__ uint32_t halo_tap_mask(const FpropParams& p, int m) {
  if (m >= p.M) return 0;
  const int n = int(p.div_ohw.div(uint32_t(m)));
  const int rem = m - n * p.OH * p.OW;
  const int oh = int(p.div_ow.div(uint32_t(rem)));
  const int ow = rem - oh * p.OW;
  const uint32_t cols = (ow > 0 ? 1u : 0u) | 2u | (ow + 1 < p.OW ? 4u : 0u);
  uint32_t mask = cols << 3;
  if (oh > 0) mask |= cols;
  if (oh + 1 < p.OH) mask |= cols << 6;
  return mask;
}

// Where a lane reads its A fragment row for one k-step of the halo kernel: in the stage at sA,
// source row `row` (the pixel's row plus the tap's shift) at chunk `chunk`, when `tap` lies inside
// the image for that pixel (tap_ok, halo_tap_mask); else the block's row of zeros.
__device__ __forceinline__ uint32_t halo_a_fragment(uint32_t tap_ok, int tap, uint32_t sA, int row,
                                                    int chunk, uint32_t zero_row, int lane_chunk) {
  return ((tap_ok >> tap) & 1u) ? sA + swizzled(row, chunk) : zero_row + uint32_t(lane_chunk << 4);
}

// The copies of the halo fprop stages (the halo kernel's 256 threads): stage k-tile = filter row
// r * cblocks + channel block; source pixels past either end of the tensor are zero-filled.
template <typename T>
struct HaloFpropGather {
  static constexpr int VEC = 8;
  static constexpr int kRowsPerPass = kHaloFpropThreads / 8;                             // 32
  static constexpr int X_ITERS = (kHaloFpropSrcRows + kRowsPerPass - 1) / kRowsPerPass;  // 9
  static constexpr int B_ITERS = kHaloFpropBN / kRowsPerPass;  // 2 per tap
  static_assert(B_ITERS * kRowsPerPass == kHaloFpropBN, "filter rows vs threads");

  int chunk, row0;
  int halo_first;  // halo row j of filter row r holds source pixel halo_first + r * SW + j
  int64_t filter_row_elems;
  const T* b_first;
  uint32_t b_valid;
  int ld_cb = 0, ld_r = 0;  // the next k-tile to load

  __device__ __forceinline__ HaloFpropGather(const FpropParams& p, int block_m, int block_n,
                                             int tid) {
    chunk = tid & 7;
    row0 = tid >> 3;
    halo_first = block_m - p.SW - 1;
    filter_row_elems = int64_t(kHaloFpropTaps) * kHaloFpropTaps * p.Cpad;
    b_first =
        static_cast<const T*>(p.filter) + int64_t(block_n + row0) * filter_row_elems + chunk * VEC;
    b_valid = 0;
#pragma unroll
    for (int i = 0; i < B_ITERS; ++i)
      if (block_n + row0 + i * kRowsPerPass < p.Nout) b_valid |= 1u << i;
  }

  __device__ __forceinline__ void load_stage(const FpropParams& p, uint32_t smem_base, int stage) {
    const T* src = static_cast<const T*>(p.src);
    const uint32_t a_off = uint32_t(stage * kHaloFpropStageBytes);
    const uint32_t b_off = a_off + uint32_t(kHaloFpropFilterOffset);
    const int c = ld_cb * kFpropRowBytes / 2 + chunk * VEC;
    const int first = halo_first + ld_r * p.SW;
#pragma unroll
    for (int i = 0; i < X_ITERS; ++i) {
      const int row = row0 + i * kRowsPerPass;
      if (row < kHaloFpropSrcRows) {
        const int pixel = first + row;
        const bool valid = uint32_t(pixel) < uint32_t(p.M);  // M == N * SH * SW
        const T* g = src + int64_t(pixel) * p.Csrc + c;
        cp_async_16(smem_base + a_off + swizzled(row, chunk), valid ? g : src, valid);
      }
    }
    // Filter rows of taps (r, s): packed offset (r * 3 + s) * Cpad + c, stored at rows s * BN + n.
#pragma unroll
    for (int s = 0; s < kHaloFpropTaps; ++s)
#pragma unroll
      for (int i = 0; i < B_ITERS; ++i) {
        const bool valid = (b_valid >> i) & 1u;
        const T* g = b_first + int64_t(i * kRowsPerPass) * filter_row_elems +
                     (ld_r * kHaloFpropTaps + s) * p.Cpad + ld_cb * kFpropRowBytes / 2;
        cp_async_16(smem_base + b_off + swizzled(s * kHaloFpropBN + row0 + i * kRowsPerPass, chunk),
                    valid ? g : p.filter, valid);
      }
    if (++ld_cb == p.cblocks) {
      ld_cb = 0;
      ++ld_r;
    }
  }
};

template <typename T>
__global__ void __launch_bounds__(kHaloFpropThreads, 1)
    implicit_gemm_halo_fprop_kernel(FpropParams p) {
  allow_dependents();  // a batch-norm kernel launched dependent may take freed SMs early
  static_assert(sizeof(T) == 2, "16-bit types: a stage is 64 channels of 128-byte rows");
  static_assert(kHaloFpropStageBytes % kFpropRowBytes == 0, "stages keep the swizzle's alignment");
  static_assert(kHaloFpropStages >= 3, "the stage refilled must differ from the one read next");
  constexpr int MT = kHaloFpropWM / 16, NT = kHaloFpropWN / 8;  // 4, 4
  static_assert(NT % 2 == 0, "B fragments load two n8 tiles at a time");
  constexpr int kWarpsM = kHaloFpropBM / kHaloFpropWM;
  using Mma = MmaOp<T>;

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t smem_base = smem_u32(smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp % kWarpsM, warp_n = warp / kWarpsM;
  const FpropBlockOrigin origin = fprop_block_origin<kHaloFpropBM, kHaloFpropBN>(p);
  const int block_m = origin.m, block_n = origin.n;
  const int n_tiles = kHaloFpropTaps * p.cblocks;  // k-tile = r * cblocks + channel block
  const uint32_t zero_row = smem_base + uint32_t(kHaloFpropStages * kHaloFpropStageBytes);
  if (tid < kFpropRowBytes / 16)
    *reinterpret_cast<uint4*>(smem + kHaloFpropStages * kHaloFpropStageBytes + tid * 16) =
        make_uint4(0, 0, 0, 0);

  HaloFpropGather<T> gather(p, block_m, block_n, tid);

  // This lane's A rows (one per mt): their index within the block and which of the 9 taps
  // lie inside the image, decomposed once.
  const int a_frag_row = warp_m * kHaloFpropWM + (lane & 15), a_frag_chunk = lane >> 4;
  uint32_t tap_ok[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) tap_ok[mt] = halo_tap_mask(p, block_m + a_frag_row + mt * 16);
  const int b_frag_row = warp_n * kHaloFpropWN + (lane & 7) + ((lane >> 4) << 3);
  const int b_frag_chunk = (lane >> 3) & 1;
  // Fragments of k-step ks (tap s = ks / 4) of the stage of filter row rd_r, double-buffered.
  uint32_t af[2][MT][4], bf[2][NT][2];
  auto load_frags = [&](int buf, int stage, int ks, int rd_r) {
    const int s = ks / kFpropKSteps, kc = 2 * (ks % kFpropKSteps);
    const uint32_t sA = smem_base + uint32_t(stage * kHaloFpropStageBytes);
    const uint32_t sB = sA + uint32_t(kHaloFpropFilterOffset);
    const int tap = rd_r * kHaloFpropTaps + s;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      ldmatrix_x4(af[buf][mt], halo_a_fragment(tap_ok[mt], tap, sA, a_frag_row + mt * 16 + s,
                                               kc + a_frag_chunk, zero_row, a_frag_chunk));
    }
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t q[4];
      ldmatrix_x4(q, sB + swizzled(s * kHaloFpropBN + b_frag_row + np * 16, kc + b_frag_chunk));
      set_b_pair(bf[buf], np, q);
    }
  };

  float acc[MT][NT][4];
  zero_accumulators(acc);

  // The shared pipeline with 12 k-steps per stage. rd_r / rd_cb: the filter row and channel
  // block of the tile read next.
  int rd_r = 0, rd_cb = 0;
  multistage_mainloop<kHaloFpropStages, kHaloFpropKSteps>(
      n_tiles, [&](int stage, int) { gather.load_stage(p, smem_base, stage); },
      [&](int buf, int stage, int ks) { load_frags(buf, stage, ks, rd_r); },
      [&](int buf) { mma_tile<Mma>(acc, af[buf], bf[buf]); },
      [&] {
        if (++rd_cb == p.cblocks) {
          rd_cb = 0;
          ++rd_r;
        }
      });

  // Fragment (mt, nt) holds rows lane/4 and lane/4 + 8, columns 2*(lane%4) + {0, 1}; stored as
  // the fprop tiles store theirs (the plan gives this kernel no bias and no ReLU).
  fprop_mma_epilogue<T, MT, NT, false>(p, acc, block_m + warp_m * kHaloFpropWM + (lane >> 2),
                                       block_n + warp_n * kHaloFpropWN + (lane & 3) * 2);
}

}  // namespace ember::cuda::conv::igemm
