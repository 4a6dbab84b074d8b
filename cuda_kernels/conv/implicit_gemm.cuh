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
//   adds a bias and applies ReLU (a forward ConvProblem's epilogue).
//
// The backward-filter kernels are in implicit_gemm_wgrad.cuh, the halo fprop kernel in
// implicit_gemm_halo_fprop.cuh, the warpgroup-MMA fprop kernels in implicit_gemm_wgmma.cuh.
// Include only from the implicit-GEMM sources of cuda_kernels/conv/.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "ember/cuda_kernels/common/common.cuh"
#include "ember/cuda_kernels/common/cp_async.cuh"
#include "ember/cuda_kernels/common/dependent_launch.cuh"

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
    b_first =
        static_cast<const T*>(p.filter) + (block_n + row0) * (b_pass / kRowsPerPass) + chunk * VEC;
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
    const uint32_t taps = (1u << ld_r) | (1u << (kMaxGatherTaps + ld_s)) |
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
      : dst(static_cast<T*>(p.dst)),
        bias(static_cast<const T*>(p.bias)),
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

}  // namespace ember::cuda::conv::igemm
