// Implicit-GEMM conv2d kernels on tensor cores (mma.sync: m16n8k16 for bf16/f16, m16n8k8 for
// TF32), NHWC activations, fp32 accumulation. The tiles of the GEMM are gathered straight from
// the activations into shared memory with cp.async (no im2col buffer), through a STAGES-deep
// pipeline with one barrier per stage of four MMA k-steps; each warp computes a WM x WN tile from
// ldmatrix-loaded fragments, double-buffered so shared-memory reads overlap the MMAs.
//
// fprop kernel (forward, and backward-data):
//   GEMM rows m = (n, oh, ow) of the destination, columns = destination channels, reduction =
//   (tap r,s; channel c) walked tap by tap, 128 bytes of channels per stage, so each 16-byte
//   chunk is a contiguous channel vector of one source pixel:
//     forward        src = x [N,H,W,C],  filter = W packed as [K][R][S][Cpad], dst = y [N,P,Q,K]
//     backward_data  src = dy [N,P,Q,K], filter = W^T packed as [C][R][S][Kpad], dst = dx [N,H,W,C]
//   Backward_data is a set of stride-1 forward convolutions of dy, one per phase (the destination
//   pixels whose coordinates agree modulo the stride, which all take the same taps of the
//   spatially flipped W^T; stride 1: one phase, the whole of dx): a phase's GEMM row m is its
//   pixel (n, h0 + sh*i, w0 + sw*j) of dx, so a strided backward_data does no MMA for the taps
//   that do not reach a pixel (3x3 stride 2: 9 of 36 tap-pixel pairs do). Per-thread pixel state
//   is decomposed once; a stage advances (tap, channel block) counters, so the gather does no
//   division. Shared rows are 128 bytes with an XOR swizzle (no padding); the packed filter is
//   zero-padded to Cpad (a multiple of the stage's channels), and source channels beyond Csrc
//   load as zeros, so any channel count works: kVec loads 16-byte chunks (Csrc a multiple of 8 for
//   16-bit types, 4 for fp32), the general path loads element by element. The epilogue optionally
//   adds a bias and applies ReLU (fused conv2d_bias_relu).
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
//
// halo fprop kernel (forward and stride-1 backward-data, 16-bit, 3x3 stride 1 padding 1): the
//   fprop GEMM over strips of 256 linear destination pixels, a stage being one filter row and 64
//   channels: the strip's source rows are loaded once with a one-pixel halo and the three taps
//   read them at shifted rows (see below).
// Include only from cuda_kernels/conv_implicit_gemm.cu.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "ember/cuda_kernels/common/cp_async.cuh"
#include "ember/cuda_kernels/common/dependent_launch.cuh"
#include "ember/cuda_kernels/common/common.cuh"

namespace ember::cuda::conv::igemm {

// ---- PTX wrappers -----------------------------------------------------------------------------

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

// One backward-data phase's GEMM (see FpropParams::phases): the fields of FpropParams it replaces.
struct FpropPhase {
  int OH, OW, M, R, S, ph, pw, k_tiles, dst_h0, dst_w0;
  FastDivmod div_ohw, div_ow;
  const void* filter;
};
constexpr int kMaxFpropPhases = 4;

struct FpropParams {
  const void* src;     // [N][SH][SW][Csrc], NHWC dense
  const void* filter;  // [Nout][R][S][Cpad], Cpad a multiple of the stage's channels, zero-padded
  void* dst;           // [N][dst_H][dst_W][Nout]: NHWC dense destination
  const void* bias;    // [Nout] or null (forward only)
  bool relu;           // forward only
  int N, SH, SW, Csrc, Cpad;
  int OH, OW;  // the GEMM's destination grid; M = N * OH * OW
  // Where row m = (n, i, j) of that grid lies in dst, a dst_H x dst_W image: pixel
  // (n, dst_h0 + dst_sh*i, dst_w0 + dst_sw*j) (a backward-data phase), or pixel m itself when
  // dst_sh == dst_sw == 1 (then dst_H, dst_W = OH, OW and dst_h0 = dst_w0 = 0).
  int dst_H, dst_W, dst_h0, dst_w0, dst_sh, dst_sw;
  int R, S, sh, sw, ph, pw, dh, dw;
  int M, Nout;
  int cblocks;  // Cpad / channels per stage
  int k_tiles;  // R * S * cblocks
  // kSplitK kernels: blockIdx.y walks k-tiles [y * tiles_per_split, (y + 1) * tiles_per_split)
  // and writes its fp32 sums to partial[y][M][Nout] (no bias, no ReLU) for a reduction after.
  int tiles_per_split;
  float* partial;
  FastDivmod div_ohw, div_ow;
  // Backward-data phases of one launch: blockIdx.z runs phase[blockIdx.z] (fprop_phase_params);
  // the grid's x covers the largest phase, whose M is the one above. phases == 1: the fields
  // above are the GEMM.
  int phases;
  FpropPhase phase[kMaxFpropPhases];
};

// Makes `q` the GEMM that p's own fields describe (no split: tiles_per_split = k_tiles).
__host__ __device__ __forceinline__ void use_phase(FpropParams& p, const FpropPhase& q) {
  p.OH = q.OH, p.OW = q.OW, p.M = q.M, p.R = q.R, p.S = q.S, p.ph = q.ph, p.pw = q.pw;
  p.k_tiles = p.tiles_per_split = q.k_tiles;
  p.dst_h0 = q.dst_h0, p.dst_w0 = q.dst_w0;
  p.div_ohw = q.div_ohw, p.div_ow = q.div_ow;
  p.filter = q.filter;
}

// This block's GEMM: params, with its phase's fields when the launch runs several. (The kernels
// take their parameters as __grid_constant__, so indexing the phase table copies nothing.)
__device__ __forceinline__ FpropParams fprop_phase_params(const FpropParams& params) {
  FpropParams p = params;
  if (params.phases > 1) use_phase(p, params.phase[blockIdx.z]);
  return p;
}

// The pixel of dst that GEMM row `row` writes (see FpropParams::dst_sh).
__device__ __forceinline__ int64_t fprop_dst_pixel(const FpropParams& p, int row) {
  if (p.dst_sh == 1 && p.dst_sw == 1) return row;
  const int n = int(p.div_ohw.div(uint32_t(row)));
  const int rem = row - n * p.OH * p.OW;
  const int i = int(p.div_ow.div(uint32_t(rem)));
  const int j = rem - i * p.OW;
  return (int64_t(n) * p.dst_H + p.dst_h0 + p.dst_sh * i) * p.dst_W + p.dst_w0 + p.dst_sw * j;
}

template <int BM, int BN, int WM, int WN>
struct TileShape {
  static constexpr int kWarps = (BM / WM) * (BN / WN);
  static constexpr int kThreads = kWarps * 32;
};

// Shared fprop tiles are rows of 128 bytes: one stage's slice of the reduction (64 bf16/f16 or 32
// fp32 channels), 8 chunks of 16 bytes, four 32-byte MMA k-steps. Chunk j of row r is stored at
// chunk j ^ (r % 8): the 8 rows that one ldmatrix phase reads at one logical chunk fall in 8
// different bank groups, and the 8 threads filling one row write a whole 128-byte line, so
// neither side has bank conflicts and no padding is needed.
constexpr int kFpropRowBytes = 128;
constexpr int kFpropKSteps = kFpropRowBytes / 32;
__device__ __forceinline__ uint32_t swizzled(int row, int chunk) {
  return uint32_t(row * kFpropRowBytes + ((chunk ^ (row & 7)) << 4));
}

template <int BM, int BN, int STAGES>
constexpr int fprop_smem_bytes() {
  return STAGES * (BM + BN) * kFpropRowBytes;
}

// Blocks of a kernel using `smem_bytes` that fit in an SM's 228 KiB of shared memory (1 KiB of
// it reserved per block), at most 4: the register budget __launch_bounds__ asks for, so that
// registers do not limit occupancy below what shared memory allows.
constexpr int blocks_per_sm(int smem_bytes) {
  const int fit = (228 * 1024) / (smem_bytes + 1024);
  return fit < 1 ? 1 : (fit > 4 ? 4 : fit);
}

// A row of the A tile whose destination pixel is past M: its coordinates never pass a bounds test.
constexpr int kNoPixel = -(1 << 30);

// ---- the main loop every kernel below shares ----------------------------------------------------

template <int MH, int N>
__device__ __forceinline__ void zero_accumulators(float (&acc)[MH][N]) {
#pragma unroll
  for (int i = 0; i < MH; ++i)
#pragma unroll
    for (int j = 0; j < N; ++j) acc[i][j] = 0.f;
}
template <int MT, int NT>
__device__ __forceinline__ void zero_accumulators(float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[i][j][k] = 0.f;
}

// One k-step of a warp's tile: every (m16, n8) MMA on one buffer of fragments.
template <typename Mma, int MT, int NT>
__device__ __forceinline__ void mma_tile(float (&acc)[MT][NT][4], const uint32_t (&a)[MT][4],
                                         const uint32_t (&b)[NT][2]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) Mma::run(acc[mt][nt], a[mt], b[nt]);
}

// One ldmatrix.x4 of B fragments, q, is the fragments of two adjacent n8 tiles: 2 * np and
// 2 * np + 1 (see MmaOp).
template <int NT>
__device__ __forceinline__ void set_b_pair(uint32_t (&b)[NT][2], int np, const uint32_t (&q)[4]) {
  b[2 * np][0] = q[0];
  b[2 * np][1] = q[1];
  b[2 * np + 1][0] = q[2];
  b[2 * np + 1][1] = q[3];
}

// The multistage pipeline over n_tiles k-tiles of KSTEPS MMA k-steps each, STAGES - 1 tiles in
// flight: load_stage(stage, tile) issues the cp.async copies of k-tile `tile` into `stage`,
// load_frags(buf, stage, ks) reads k-step ks of `stage` into fragment buffer `buf`, mma(buf) runs
// a k-step on it, and on_read_advance() runs when reading moves to the next stage (kernels that
// walk taps keep their read position there). One commit group per k-tile (empty past the end), so
// waiting until STAGES - 2 groups are pending means the tile about to be read has landed. At
// the last k-step's barrier tile kt + 1 has landed for every thread and every warp holds all its
// fragments of tile kt (the last were read at k-step KSTEPS - 2), so the refill at ks == 0 of
// iteration kt + 1 may overwrite tile kt's stage: one barrier per stage.
template <int STAGES, int KSTEPS, typename LoadStage, typename LoadFrags, typename Mma,
          typename OnReadAdvance>
__device__ __forceinline__ void multistage_mainloop(int n_tiles, LoadStage&& load_stage,
                                                    LoadFrags&& load_frags, Mma&& mma,
                                                    OnReadAdvance&& on_read_advance) {
  static_assert(KSTEPS % 2 == 0, "fragment double buffers alternate within a stage");
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < n_tiles) load_stage(s, s);
    cp_async_commit();
  }
  cp_async_wait<STAGES - 2>();
  __syncthreads();
  int read_stage = 0, write_stage = STAGES - 1;
  load_frags(0, 0, 0);
  for (int kt = 0; kt < n_tiles; ++kt) {
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      if (ks == KSTEPS - 1) {
        read_stage = read_stage == STAGES - 1 ? 0 : read_stage + 1;
        on_read_advance();
        cp_async_wait<STAGES - 2>();
        __syncthreads();
      }
      load_frags((ks + 1) & 1, read_stage, (ks + 1) % KSTEPS);
      if (ks == 0) {
        if (kt + STAGES - 1 < n_tiles) load_stage(write_stage, kt + STAGES - 1);
        cp_async_commit();
        write_stage = write_stage == STAGES - 1 ? 0 : write_stage + 1;
      }
      mma(ks & 1);
    }
  }
  cp_async_wait<0>();
}

// TF32 (fp32) fprop kernels settle for at most 2 blocks per SM: the 168 registers of 3 blocks of
// 128 threads spill once every fragment also needs its cvt.
template <typename T, int BM, int BN, int STAGES>
constexpr int fprop_min_blocks() {
  const int fit = blocks_per_sm(fprop_smem_bytes<BM, BN, STAGES>());
  return sizeof(T) == 4 && fit > 2 ? 2 : fit;
}

// The destination pixel and channel where an fprop block's tile starts. Column tiles vary
// fastest along blockIdx.x: the blocks resident at once share their A rows (the gathered source)
// through L2, and the filter is small enough to stay there.
struct FpropBlockOrigin {
  int m, n;
};
template <int BM, int BN>
__device__ __forceinline__ FpropBlockOrigin fprop_block_origin(const FpropParams& p) {
  const int tiles_n = (p.Nout + BN - 1) / BN;
  const int tile_m = int(blockIdx.x) / tiles_n;
  return {tile_m * BM, (int(blockIdx.x) - tile_m * tiles_n) * BN};
}

// The fprop gather: which destination pixels (A rows) and filter rows (B rows) one thread copies
// into every stage, and the k-tile (tap r,s; channel block) the next load reads. Shared by the
// mma.sync and the wgmma fprop kernels; stage tiles are kFpropRowBytes rows, swizzled.
//
// Everything that varies per A row is decided once, when the gather is built: the row's source
// element at tap (0, 0) and its chunk (a 32-bit offset: fprop_applies keeps the source under 2^31
// elements), and a mask of the taps that fall outside the source image
// (bit r: row tap r, bit kMaxGatherTaps + s: column tap s). A stage then adds one offset shared by
// every row (tap and channel block) and tests one AND per row: a handful of instructions per
// 16-byte copy, so the gather issues no faster than the tensor cores need it.
constexpr int kMaxGatherTaps = 15;  // R and S of an fprop GEMM (fprop_applies checks)

template <typename T, int BM, int BN, int kThreads, bool kVec>
struct FpropGather {
  static constexpr int VEC = 16 / int(sizeof(T));             // elements per 16-byte chunk
  static constexpr int BK = kFpropRowBytes / int(sizeof(T));  // reduction elements per stage
  static constexpr int kRowsPerPass = kThreads / 8;           // 8 chunks per row
  static constexpr int A_ITERS = BM / kRowsPerPass;
  static constexpr int B_ITERS = BN / kRowsPerPass;
  static_assert(A_ITERS * kRowsPerPass == BM && B_ITERS * kRowsPerPass == BN, "tile vs threads");
  static_assert(kRowsPerPass % 8 == 0, "a thread's rows share their swizzle (row % 8)");
  static_assert(B_ITERS <= 32, "B row validity is a 32-bit mask");
  // The out-of-image mask's bit for "this thread's channel chunk is past Csrc", set in every row's
  // mask so that a stage's one AND also tests the channels.
  static constexpr uint32_t kChannelBit = 1u << (2 * kMaxGatherTaps);

  uint32_t swz;  // this thread's chunk's swizzled offset within its first row
  int chunk;     // this thread's 16-byte chunk within every row it loads
  // The source element of this thread's A rows at tap (0, 0), at its chunk of channel block 0
  // (modulo 2^32 where the tap is outside the image; rows past M: 0, never read), and the row's
  // taps outside the image.
  uint32_t a_src[A_ITERS];
  uint32_t a_out[A_ITERS];
  const T* b_first;  // this thread's first B row (destination channel), at its chunk
  uint32_t b_valid;  // which of its B rows exist
  int64_t b_pass;    // elements between its B rows (kRowsPerPass packed filter rows)
  // The next k-tile to load: channel block and tap (r, s), and the tile's offset within a packed
  // filter row ((tap * cblocks + cb) * BK = tap * Cpad + cb * BK).
  int ld_cb = 0, ld_r = 0, ld_s = 0, ld_k = 0;

  __device__ __forceinline__ FpropGather(const FpropParams& p, int block_m, int block_n, int tid) {
    chunk = tid & 7;
    const int row0 = tid >> 3;
    swz = swizzled(row0, chunk);
#pragma unroll
    for (int i = 0; i < A_ITERS; ++i) {
      const int m = block_m + row0 + i * kRowsPerPass;
      a_src[i] = 0;
      a_out[i] = ~0u;
      if (m < p.M) {
        const int n = int(p.div_ohw.div(uint32_t(m)));
        const int rem = m - n * p.OH * p.OW;
        const int oh = int(p.div_ow.div(uint32_t(rem)));
        const int ow = rem - oh * p.OW;
        const int h = oh * p.sh - p.ph, w = ow * p.sw - p.pw;
        a_src[i] = uint32_t(((n * p.SH + h) * p.SW + w) * p.Csrc + chunk * VEC);
        uint32_t out = kChannelBit;
        for (int r = 0; r < p.R; ++r)
          if (uint32_t(h + r * p.dh) >= uint32_t(p.SH)) out |= 1u << r;
        for (int s = 0; s < p.S; ++s)
          if (uint32_t(w + s * p.dw) >= uint32_t(p.SW)) out |= 1u << (kMaxGatherTaps + s);
        a_out[i] = out;
      }
    }
    b_pass = int64_t(kRowsPerPass) * p.R * p.S * p.Cpad;
    b_first = static_cast<const T*>(p.filter) + (block_n + row0) * (b_pass / kRowsPerPass) +
              chunk * VEC;
    b_valid = 0;
#pragma unroll
    for (int i = 0; i < B_ITERS; ++i)
      if (block_n + row0 + i * kRowsPerPass < p.Nout) b_valid |= 1u << i;
  }

  // This block's k-tiles: all of them, or (split-K) its blockIdx.y range, the gather starting
  // at the range's first.
  template <bool kSplitK>
  __device__ __forceinline__ int block_tiles(const FpropParams& p) {
    if constexpr (!kSplitK) {
      return p.k_tiles;
    } else {
      const int kt_begin = int(blockIdx.y) * p.tiles_per_split;
      const int first_tap = kt_begin / p.cblocks;
      ld_cb = kt_begin - first_tap * p.cblocks;
      ld_r = first_tap / p.S;
      ld_s = first_tap - ld_r * p.S;
      ld_k = kt_begin * BK;
      return max(min(p.k_tiles, kt_begin + p.tiles_per_split) - kt_begin, 0);
    }
  }

  // Issues the copies of the next k-tile into stage `stage` of a pipeline of (BM + BN)-row
  // stages (the A tile, then the B tile; smem / smem_base its start), then advances to the
  // k-tile after it.
  __device__ __forceinline__ void load_stage(const FpropParams& p, unsigned char* smem,
                                             uint32_t smem_base, int stage) {
    const uint32_t a_dst = uint32_t(stage * (BM + BN) * kFpropRowBytes) + swz;
    const uint32_t b_dst = a_dst + uint32_t(BM * kFpropRowBytes);
    // What this k-tile adds to every row's source pointer, and the mask bits that void a row:
    // its tap's, and the channel bit when this thread's chunk is past the source's channels.
    const T* src = static_cast<const T*>(p.src);
    const int c0 = ld_cb * BK;
    const uint32_t offset = uint32_t((ld_r * p.dh * p.SW + ld_s * p.dw) * p.Csrc + c0);
    const uint32_t taps =
        (1u << ld_r) | (1u << (kMaxGatherTaps + ld_s)) |
        (c0 + chunk * VEC < p.Csrc ? 0u : kChannelBit);
#pragma unroll
    for (int i = 0; i < A_ITERS; ++i) {
      const bool valid = (a_out[i] & taps) == 0;
      const T* g = src + (a_src[i] + offset);
      const uint32_t d = a_dst + uint32_t(i * kRowsPerPass * kFpropRowBytes);
      if constexpr (kVec) {
        cp_async_16(smem_base + d, g, valid);  // nothing is read when !valid
      } else {
        const int c = c0 + chunk * VEC;
        alignas(16) T vals[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const bool ok = (a_out[i] & taps & ~kChannelBit) == 0 && c + e < p.Csrc;
          vals[e] = ok ? g[e] : convert<T>(0.0f);
        }
        *reinterpret_cast<uint4*>(smem + d) = *reinterpret_cast<const uint4*>(vals);
      }
    }
    const T* b = b_first + ld_k;
#pragma unroll
    for (int i = 0; i < B_ITERS; ++i) {
      cp_async_16(smem_base + b_dst + uint32_t(i * kRowsPerPass * kFpropRowBytes), b,
                  (b_valid >> i) & 1u);
      b += b_pass;
    }
    ld_k += BK;
    if (++ld_cb == p.cblocks) {
      ld_cb = 0;
      if (++ld_s == p.S) {
        ld_s = 0;
        ++ld_r;
      }
    }
  }
};

// The fprop epilogue of one thread's accumulators: kPairs column pairs (col0 + 8 i, + 1) of each
// of its rows. finish() adds the bias (forward only; one load per column pair, for all the
// thread's rows) and applies ReLU, in registers; store_row() writes one row, with no per-column
// test where all the thread's columns exist and pair up (Nout even). A split-K block writes its
// fp32 partial sums instead (no bias, no ReLU). write() does all of it for a thread's row slots.
// `acc(i, r, e)` is the accumulator of column col0 + 8 i + e (e = 0 or 1) in the thread's row
// slot r.
template <typename T>
struct FpropEpilogue {
  T* dst;
  const T* bias;
  bool pairs;  // Nout even: two columns stored at once
  __device__ __forceinline__ explicit FpropEpilogue(const FpropParams& p)
      : dst(static_cast<T*>(p.dst)), bias(static_cast<const T*>(p.bias)),
        pairs((p.Nout & 1) == 0) {}

  template <int kPairs, int kRowSlots, typename Acc>
  __device__ __forceinline__ void finish(const FpropParams& p, int col0, Acc&& acc) const {
    if (bias != nullptr) {
#pragma unroll
      for (int i = 0; i < kPairs; ++i) {
        const int col = col0 + 8 * i;
        if (col >= p.Nout) continue;  // never stored
        const float b0 = convert<float>(bias[col]);
        const float b1 = col + 1 < p.Nout ? convert<float>(bias[col + 1]) : 0.f;
#pragma unroll
        for (int r = 0; r < kRowSlots; ++r) {
          acc(i, r, 0) += b0;
          acc(i, r, 1) += b1;
        }
      }
    }
    if (p.relu) {  // NaN stays NaN, as torch.relu
#pragma unroll
      for (int i = 0; i < kPairs; ++i)
#pragma unroll
        for (int r = 0; r < kRowSlots; ++r)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& v = acc(i, r, e);
            v = v < 0.f ? 0.f : v;
          }
    }
  }

  // Row `row` of the GEMM (below M), its values `acc_row(i, e)`.
  template <int kPairs, typename AccRow>
  __device__ __forceinline__ void store_row(const FpropParams& p, int row, int col0,
                                            AccRow&& acc_row) const {
    T* out = dst + fprop_dst_pixel(p, row) * p.Nout;
    if (pairs && col0 + 8 * (kPairs - 1) < p.Nout) {
#pragma unroll
      for (int i = 0; i < kPairs; ++i)
        *reinterpret_cast<Pair<T>*>(out + col0 + 8 * i) =
            Pair<T>{convert<T>(acc_row(i, 0)), convert<T>(acc_row(i, 1))};
      return;
    }
#pragma unroll
    for (int i = 0; i < kPairs; ++i) {
      const int col = col0 + 8 * i;
      if (col >= p.Nout) continue;
      if (pairs) {
        *reinterpret_cast<Pair<T>*>(out + col) =
            Pair<T>{convert<T>(acc_row(i, 0)), convert<T>(acc_row(i, 1))};
      } else {
        out[col] = convert<T>(acc_row(i, 0));
        if (col + 1 < p.Nout) out[col + 1] = convert<T>(acc_row(i, 1));
      }
    }
  }

  // The same row of a split-K block's fp32 partial sums (its split's slice).
  template <int kPairs, typename AccRow>
  __device__ __forceinline__ void store_partial_row(const FpropParams& p, int row, int col0,
                                                    AccRow&& acc_row) const {
    float* out = p.partial + (int64_t(blockIdx.y) * p.M + row) * p.Nout;
#pragma unroll
    for (int i = 0; i < kPairs; ++i) {
      const int col = col0 + 8 * i;
      if (col >= p.Nout) continue;
      out[col] = acc_row(i, 0);
      if (col + 1 < p.Nout) out[col + 1] = acc_row(i, 1);
    }
  }

  // The whole epilogue of a thread: finish() (unless split-K), then each of its kRowSlots rows
  // below M, row slot r being GEMM row `row_of(r)`. What the mma.sync and wgmma kernels differ
  // in, their accumulator layouts, is in row_of and acc.
  template <int kPairs, int kRowSlots, bool kSplitK, typename RowOf, typename Acc>
  __device__ __forceinline__ void write(const FpropParams& p, int col0, RowOf&& row_of,
                                        Acc&& acc) const {
    if constexpr (!kSplitK) finish<kPairs, kRowSlots>(p, col0, acc);
#pragma unroll
    for (int r = 0; r < kRowSlots; ++r) {
      const int row = row_of(r);
      if (row >= p.M) continue;
      auto acc_row = [&](int i, int e) { return acc(i, r, e); };
      if constexpr (kSplitK) {
        store_partial_row<kPairs>(p, row, col0, acc_row);
      } else {
        store_row<kPairs>(p, row, col0, acc_row);
      }
    }
  }
};

// The epilogue of an mma.sync warp tile acc[MT][NT][4] (fragment (mt, nt): rows row0 + 16 mt
// and + 8, columns col0 + 8 nt + {0, 1}), shared by the fprop and the halo fprop kernels.
template <typename T, int MT, int NT, bool kSplitK>
__device__ __forceinline__ void fprop_mma_epilogue(const FpropParams& p, float (&acc)[MT][NT][4],
                                                   int row0, int col0) {
  FpropEpilogue<T>(p).template write<NT, 2 * MT, kSplitK>(
      p, col0, [&](int slot) { return row0 + (slot >> 1) * 16 + (slot & 1) * 8; },
      [&](int nt, int slot, int e) -> float& { return acc[slot >> 1][nt][2 * (slot & 1) + e]; });
}

// kSplitK is a template parameter, not a runtime flag: the split bookkeeping costs registers
// that the 3-blocks-per-SM tiles do not have (they spill), so only the split tiles carry it.
template <typename T, int BM, int BN, int WM, int WN, int STAGES, bool kVec, bool kSplitK>
__global__ void __launch_bounds__(TileShape<BM, BN, WM, WN>::kThreads,
                                  fprop_min_blocks<T, BM, BN, STAGES>())
implicit_gemm_fprop_kernel(const __grid_constant__ FpropParams params) {
  allow_dependents();  // a batch-norm kernel launched dependent may take freed SMs early
  constexpr int kThreads = TileShape<BM, BN, WM, WN>::kThreads;
  static_assert(STAGES >= 3, "the stage refilled must differ from the one read next");
  constexpr int MT = WM / 16, NT = WN / 8;
  static_assert(NT % 2 == 0, "B fragments load two n8 tiles at a time");
  constexpr int kStageBytes = (BM + BN) * kFpropRowBytes;
  using Mma = MmaOp<T>;

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t smem_base = smem_u32(smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp % (BM / WM), warp_n = warp / (BM / WM);
  const FpropParams p = fprop_phase_params(params);
  const FpropBlockOrigin origin = fprop_block_origin<BM, BN>(p);
  const int block_m = origin.m, block_n = origin.n;
  if (block_m >= p.M) return;  // past a smaller phase's rows (the grid fits the largest)
  FpropGather<T, BM, BN, kThreads, kVec> gather(p, block_m, block_n, tid);
  const int n_tiles = gather.template block_tiles<kSplitK>(p);

  // Fragments, double-buffered: k-step ks + 1 is read from shared memory while ks runs. Lane l
  // addresses A row l % 16 at chunk 2*ks + l / 16 and B row (l % 8) + 8 * (l / 16) at chunk
  // 2*ks + (l / 8) % 2 (the x4 matrices in fragment order, see MmaOp).
  const int a_frag_row = warp_m * WM + (lane & 15), a_frag_chunk = lane >> 4;
  const int b_frag_row = warp_n * WN + (lane & 7) + ((lane >> 4) << 3);
  const int b_frag_chunk = (lane >> 3) & 1;
  uint32_t af[2][MT][4], bf[2][NT][2];
  auto load_frags = [&](int buf, int stage, int ks) {
    const uint32_t sA = smem_base + uint32_t(stage * kStageBytes);
    const uint32_t sB = sA + uint32_t(BM * kFpropRowBytes);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      ldmatrix_x4(af[buf][mt], sA + swizzled(a_frag_row + mt * 16, 2 * ks + a_frag_chunk));
#pragma unroll
      for (int k = 0; k < 4; ++k) Mma::prepare(af[buf][mt][k]);
    }
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t r[4];
      ldmatrix_x4(r, sB + swizzled(b_frag_row + np * 16, 2 * ks + b_frag_chunk));
#pragma unroll
      for (int k = 0; k < 4; ++k) Mma::prepare(r[k]);
      set_b_pair(bf[buf], np, r);
    }
  };

  float acc[MT][NT][4];
  zero_accumulators(acc);

  multistage_mainloop<STAGES, kFpropKSteps>(
      n_tiles, [&](int stage, int) { gather.load_stage(p, smem, smem_base, stage); }, load_frags,
      [&](int buf) { mma_tile<Mma>(acc, af[buf], bf[buf]); }, [] {});

  // Epilogue: fragment (mt, nt) holds rows lane/4 and lane/4 + 8, columns 2*(lane%4) + {0, 1}:
  // column pair nt, row slots (mt, half). A split writes its whole tile (zeros when it had no
  // k-tiles).
  fprop_mma_epilogue<T, MT, NT, kSplitK>(p, acc, block_m + warp_m * WM + (lane >> 2),
                                         block_n + warp_n * WN + (lane & 3) * 2);
}

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
  constexpr int MT = kHaloBM / 16, NT = kHaloWN / 8;  // 4, 6
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
    const uint32_t a_base = smem_u32(sA) + uint32_t((ks * 16 + a_krow) * kHaloRowBytes +
                                                    a_mcol_bytes);
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
  static constexpr int kRowsPerPass = kHaloFpropThreads / 8;  // 32
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
    b_first = static_cast<const T*>(p.filter) + int64_t(block_n + row0) * filter_row_elems +
              chunk * VEC;
    b_valid = 0;
#pragma unroll
    for (int i = 0; i < B_ITERS; ++i)
      if (block_n + row0 + i * kRowsPerPass < p.Nout) b_valid |= 1u << i;
  }

  __device__ __forceinline__ void load_stage(const FpropParams& p, uint32_t smem_base,
                                             int stage) {
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
        cp_async_16(smem_base + b_off +
                        swizzled(s * kHaloFpropBN + row0 + i * kRowsPerPass, chunk),
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
