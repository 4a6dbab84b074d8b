// The fprop implicit GEMM (forward and backward-data, implicit_gemm.cuh) on Hopper's warpgroup
// MMA: wgmma.mma_async reads both operands straight from shared memory, so no warp spends issue
// slots on ldmatrix or per-fragment MMAs, and TF32 runs at the tensor core's TF32 rate instead of
// mma.sync's.
//
// The gather is the mma.sync kernel's (FpropGather: cp.async of 16-byte channel chunks into
// 128-byte rows whose chunk j of row r sits at j ^ (r % 8)); that is exactly wgmma's K-major layout
// with the 128-byte swizzle when each stage starts 1024-byte aligned, so a descriptor per operand
// (start address, 1024 bytes between 8-row groups) describes a stage, and a k-step moves the start
// 32 bytes along the row. Two warpgroups (256 threads) each own BM/2 destination rows (one m64
// wgmma per 64 of them) and all BN columns (n128, or n64 for 64-channel outputs). Pipeline: STAGES
// tiles of shared memory, STAGES - 2 k-tiles in flight ahead of the one read, and one wgmma group
// in flight: at k-tile kt a thread refills the stage of tile kt - 2, whose MMAs every warpgroup
// retired before the barrier of iteration kt (each waits for all but its latest group at the end of
// an iteration).
//
// implicit_gemm_fprop_wgmma_ws_kernel runs the same GEMM warp-specialized (a producer warpgroup,
// two consumer warpgroups, mbarriers between them; see its comment).
//
// fp32 operands run as TF32 (the MMA ignores the low 13 mantissa bits: truncation, where the
// mma.sync kernels round to nearest). Compiled only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); the
// host launches it only where wgmma_compiled() and the device is compute capability 9.0. Include
// only from cuda_kernels/conv/implicit_gemm_launch.cu, after implicit_gemm.cuh.
#pragma once

#include <cstdint>

#include "ember/cuda_kernels/common/dependent_launch.cuh"
#include "ember/cuda_kernels/common/tma.cuh"

namespace ember::cuda::conv::igemm {

constexpr int kWgmmaThreads = 256;  // two warpgroups
// Blocks per SM a wgmma fprop kernel is built for (its launch bounds; the host's wave model): two
// of the n64 tile, whose stages fit twice in shared memory, else one.
constexpr int wgmma_blocks_per_sm(int bn) { return bn == 64 ? 2 : 1; }

// Dynamic shared memory of a wgmma fprop block: its stages plus the slack that aligns them.
template <int BM, int BN, int STAGES>
constexpr int wgmma_fprop_smem_bytes() {
  return STAGES * (BM + BN) * kFpropRowBytes + 1024;
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define EMBER_WGMMA_DEVICE 1
#endif

#ifdef EMBER_WGMMA_DEVICE

// A shared-memory matrix descriptor: K-major rows of 128 bytes with the 128-byte swizzle, 8-row
// groups 1024 bytes apart (the leading-byte offset is unused in this mode).
__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t smem_addr) {
  return uint64_t((smem_addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}
// Descriptor units are 16 bytes: one 32-byte k-step, and 64 rows of 128 bytes.
constexpr uint64_t kWgmmaDescKStep = 32 >> 4;
constexpr uint64_t kWgmmaDescM64 = (64 * kFpropRowBytes) >> 4;

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// This thread's generic-proxy writes to shared memory (its completed cp.async copies) become
// visible to the async proxy that wgmma reads through.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving accesses of the accumulators across a wgmma wait.
template <int N>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#define EMBER_WGMMA_D64                                                                         \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63}"
#define EMBER_WGMMA_ACC8(d, i)                                                                \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define EMBER_WGMMA_ACC32(d) \
  EMBER_WGMMA_ACC8(d, 0), EMBER_WGMMA_ACC8(d, 8), EMBER_WGMMA_ACC8(d, 16), EMBER_WGMMA_ACC8(d, 24)
#define EMBER_WGMMA_ACC64(d)                                                                       \
  EMBER_WGMMA_ACC32(d), EMBER_WGMMA_ACC8(d, 32), EMBER_WGMMA_ACC8(d, 40), EMBER_WGMMA_ACC8(d, 48), \
      EMBER_WGMMA_ACC8(d, 56)
#define EMBER_WGMMA_D32                                                                         \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"

// One m64 nN k-step (N = 128 or 64; 32 bytes of the reduction: k16 for 16-bit types, k8 for
// TF32) added into d: d[4i + {0,1}] are row lane/4 of the warp's 16, columns 8i + 2(lane%4) +
// {0,1}; d[4i + {2,3}] the same columns of row lane/4 + 8.
template <typename T, int N>
struct WgmmaOp;

// One specialization per (type, N): the PTX shape and type names and the accumulator operands.
// 16-bit types pass the scale-d, scale-a/b and transpose-a/b immediates; TF32 has no transposes.
#define EMBER_WGMMA_OP(T, N, SHAPE_TYPES, D, ACC, AB, TAIL)                                 \
  template <>                                                                               \
  struct WgmmaOp<T, N> {                                                                    \
    __device__ __forceinline__ static void run(float (&d)[N / 2], uint64_t a, uint64_t b) { \
      asm volatile(                                                                         \
          "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
          "wgmma.mma_async.sync.aligned." SHAPE_TYPES " " D ", " AB ", p, " TAIL ";\n}\n"   \
          : ACC(d)                                                                          \
          : "l"(a), "l"(b));                                                                \
    }                                                                                       \
  };
EMBER_WGMMA_OP(__nv_bfloat16, 128, "m64n128k16.f32.bf16.bf16", EMBER_WGMMA_D64, EMBER_WGMMA_ACC64,
               "%64, %65", "1, 1, 0, 0")
EMBER_WGMMA_OP(__half, 128, "m64n128k16.f32.f16.f16", EMBER_WGMMA_D64, EMBER_WGMMA_ACC64,
               "%64, %65", "1, 1, 0, 0")
EMBER_WGMMA_OP(float, 128, "m64n128k8.f32.tf32.tf32", EMBER_WGMMA_D64, EMBER_WGMMA_ACC64,
               "%64, %65", "1, 1")
EMBER_WGMMA_OP(__nv_bfloat16, 64, "m64n64k16.f32.bf16.bf16", EMBER_WGMMA_D32, EMBER_WGMMA_ACC32,
               "%32, %33", "1, 1, 0, 0")
EMBER_WGMMA_OP(__half, 64, "m64n64k16.f32.f16.f16", EMBER_WGMMA_D32, EMBER_WGMMA_ACC32, "%32, %33",
               "1, 1, 0, 0")
EMBER_WGMMA_OP(float, 64, "m64n64k8.f32.tf32.tf32", EMBER_WGMMA_D32, EMBER_WGMMA_ACC32, "%32, %33",
               "1, 1")
#undef EMBER_WGMMA_OP

// The warp-specialized kernel's stage barriers are cuda_kernels/common/tma.cuh's; a producer thread
// arrives on one once every cp.async it issued so far has landed (counted among the barrier's
// expected arrivals: noinc).
__device__ __forceinline__ void cp_async_mbarrier_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

#undef EMBER_WGMMA_ACC64
#undef EMBER_WGMMA_ACC32
#undef EMBER_WGMMA_ACC8
#undef EMBER_WGMMA_D64
#undef EMBER_WGMMA_D32

// One k-tile of the fprop GEMM for one warpgroup: the wgmmas of its four k-steps over the MH m64
// row blocks starting `first_row` rows into the stage at `stage` (A tile, then the B tile at row
// BM), committed as one group. The stage's copies must be visible to the async proxy.
template <typename T, int BM, int BN, int MH>
__device__ __forceinline__ void wgmma_fprop_tile(float (&acc)[MH][BN / 2], uint32_t stage,
                                                 int first_row) {
  const uint64_t a_desc = wgmma_desc_sw128(stage + uint32_t(first_row * kFpropRowBytes));
  const uint64_t b_desc = wgmma_desc_sw128(stage + uint32_t(BM * kFpropRowBytes));
#pragma unroll
  for (int mh = 0; mh < MH; ++mh) wgmma_fence_operands(acc[mh]);
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kFpropKSteps; ++ks)
#pragma unroll
    for (int mh = 0; mh < MH; ++mh)
      WgmmaOp<T, BN>::run(acc[mh], a_desc + mh * kWgmmaDescM64 + ks * kWgmmaDescKStep,
                          b_desc + ks * kWgmmaDescKStep);
  wgmma_commit();
}

// Waits until at most N of this warpgroup's wgmma groups are pending; the accumulators are then
// up to date with the others.
template <int N, int MH, int kAccumulators>
__device__ __forceinline__ void wgmma_retire(float (&acc)[MH][kAccumulators]) {
  wgmma_wait<N>();
#pragma unroll
  for (int mh = 0; mh < MH; ++mh) wgmma_fence_operands(acc[mh]);
}

#endif  // EMBER_WGMMA_DEVICE

// Where the stages start in dynamic shared memory: wgmma's swizzle is a function of address bits
// 4-9, so the stages start 1024-byte aligned (the launches ask for 1 KiB more).
__device__ __forceinline__ unsigned char* wgmma_aligned_stages(unsigned char* smem_raw) {
  return smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
}

// The epilogue of a warpgroup's MH x m64 rows by BN columns, the first at GEMM row `first_row`
// and column `first_col`. In the accumulator layout of WgmmaOp, acc[mh][4 i + 2 half + e] is row
// row0 + 64 mh + 8 half and column col0 + 8 i + e, where a thread's row0 is 16 rows per warp of
// the warpgroup plus lane / 4 and its col0 two columns per lane % 4. kSplitK: the fp32 partials;
// else the destination, with the bias and ReLU (FpropEpilogue::write).
template <typename T, int MH, int BN, bool kSplitK>
__device__ __forceinline__ void wgmma_fprop_epilogue(const FpropParams& p, float (&acc)[MH][BN / 2],
                                                     int first_row, int first_col) {
  constexpr int kPairs = BN / 8;
  const int lane = threadIdx.x & 31, warp_in_group = (threadIdx.x >> 5) & 3;
  const int row0 = first_row + warp_in_group * 16 + (lane >> 2);
  const int col0 = first_col + (lane & 3) * 2;
  FpropEpilogue<T>(p).template write<kPairs, 2 * MH, kSplitK>(
      p, col0, [&](int slot) { return row0 + (slot >> 1) * 64 + (slot & 1) * 8; },
      [&](int i, int slot, int e) -> float& { return acc[slot >> 1][4 * i + 2 * (slot & 1) + e]; });
}

// BM destination pixels x BN destination channels per block (BM = 128 or 256; BN = 128, or 64
// with two blocks per SM), the vector path only (16-byte chunks: Csrc a multiple of 8 for 16-bit
// types, 4 for fp32). kSplitK as in implicit_gemm_fprop_kernel.
template <typename T, int BM, int BN, int STAGES, bool kSplitK>
__global__ void __launch_bounds__(kWgmmaThreads, wgmma_blocks_per_sm(BN))
    implicit_gemm_fprop_wgmma_kernel(const __grid_constant__ FpropParams params) {
#ifdef EMBER_WGMMA_DEVICE
  allow_dependents();  // a batch-norm kernel launched dependent may take freed SMs early
  static_assert(BN == 128 || BN == 64, "n128 or n64 wgmma");
  constexpr int kWarpgroupRows = BM / 2;
  constexpr int MH = kWarpgroupRows / 64;  // m64 wgmmas per warpgroup and k-step
  static_assert(MH * 64 * 2 == BM, "BM is 128 or 256");
  static_assert(STAGES >= 3, "the refilled stage is two tiles behind the one read");
  constexpr int kStageBytes = (BM + BN) * kFpropRowBytes;
  static_assert(kStageBytes % 1024 == 0, "stages stay 1024-byte aligned");

  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = wgmma_aligned_stages(smem_raw);
  const uint32_t smem_base = smem_u32(smem);
  const int tid = threadIdx.x, warpgroup = tid >> 7;
  const FpropParams p = fprop_phase_params(params);
  const FpropBlockOrigin origin = fprop_block_origin<BM, BN>(p);
  const int block_m = origin.m, block_n = origin.n;
  if (block_m >= p.M) return;  // past a smaller phase's rows (the grid fits the largest)
  FpropGather<T, BM, BN, kWgmmaThreads, true> gather(p, block_m, block_n, tid);
  const int n_tiles = gather.template block_tiles<kSplitK>(p);

  float acc[MH][BN / 2];
  zero_accumulators(acc);

  // One commit group per k-tile (empty past the end): waiting until STAGES - 3 are pending means
  // tile kt has landed.
#pragma unroll
  for (int s = 0; s < STAGES - 2; ++s) {
    if (s < n_tiles) gather.load_stage(p, smem, smem_base, s);
    cp_async_commit();
  }
  int read_stage = 0, write_stage = STAGES - 2;
  for (int kt = 0; kt < n_tiles; ++kt) {
    cp_async_wait<STAGES - 3>();
    fence_proxy_async_shared();
    __syncthreads();
    wgmma_fprop_tile<T, BM, BN, MH>(acc, smem_base + uint32_t(read_stage * kStageBytes),
                                    warpgroup * kWarpgroupRows);
    // Refill the stage of tile kt - 2 (retired by every warpgroup before this barrier).
    if (kt + STAGES - 2 < n_tiles) gather.load_stage(p, smem, smem_base, write_stage);
    cp_async_commit();
    write_stage = write_stage == STAGES - 1 ? 0 : write_stage + 1;
    read_stage = read_stage == STAGES - 1 ? 0 : read_stage + 1;
    wgmma_retire<1>(acc);
  }
  wgmma_retire<0>(acc);
  cp_async_wait<0>();

  // A split writes its whole tile.
  wgmma_fprop_epilogue<T, MH, BN, kSplitK>(p, acc, block_m + warpgroup * kWarpgroupRows, block_n);
#else
  __trap();  // never launched: the host checks wgmma_compiled() first
#endif
}

// The same GEMM, warp-specialized (as cuDNN's Hopper fprop kernels): a producer warpgroup gathers
// the stages with cp.async and two consumer warpgroups (BM/2 rows each) only issue wgmmas, so the
// MMAs never wait behind the gather's address arithmetic and no block-wide barrier orders the
// two. Stage s has two mbarriers: full[s] completes when the producer's 128 threads' copies into
// it have landed (cp.async.mbarrier.arrive), empty[s] when the 256 consumer threads have retired
// the wgmmas reading it (each arrives after the wgmma wait that follows its next stage), and the
// producer refills it then: all STAGES tiles can be in flight. No split-K, no epilogue fusion
// beyond FpropEpilogue's (bias, ReLU).
constexpr int kWgmmaWsThreads = 384;  // producer warpgroup + two consumer warpgroups
template <int BM, int BN, int STAGES>
constexpr int wgmma_ws_smem_bytes() {
  return wgmma_fprop_smem_bytes<BM, BN, STAGES>() + 2 * STAGES * 8;  // + the mbarriers
}

template <typename T, int BM, int BN, int STAGES>
__global__ void __launch_bounds__(kWgmmaWsThreads, 1)
    implicit_gemm_fprop_wgmma_ws_kernel(const __grid_constant__ FpropParams params) {
#ifdef EMBER_WGMMA_DEVICE
  allow_dependents();  // a batch-norm kernel launched dependent may take freed SMs early
  static_assert(BN == 128 || BN == 64, "n128 or n64 wgmma");
  constexpr int kWarpgroupRows = BM / 2;
  constexpr int MH = kWarpgroupRows / 64;  // m64 wgmmas per consumer warpgroup and k-step
  static_assert(MH * 64 * 2 == BM, "BM is 128 or 256");
  constexpr int kStageBytes = (BM + BN) * kFpropRowBytes;
  static_assert(kStageBytes % 1024 == 0, "stages stay 1024-byte aligned");

  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = wgmma_aligned_stages(smem_raw);
  const uint32_t smem_base = smem_u32(smem);
  const uint32_t full_bar = smem_base + uint32_t(STAGES * kStageBytes);  // 8 bytes per stage
  const uint32_t empty_bar = full_bar + uint32_t(STAGES * 8);
  const int tid = threadIdx.x, warpgroup = tid >> 7;
  const FpropParams p = fprop_phase_params(params);
  const FpropBlockOrigin origin = fprop_block_origin<BM, BN>(p);
  const int block_m = origin.m, block_n = origin.n;
  if (block_m >= p.M) return;  // past a smaller phase's rows (the grid fits the largest)
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(full_bar + 8 * s, 128);
      mbarrier_init(empty_bar + 8 * s, 256);
    }
  }
  __syncthreads();  // the only block-wide barrier: the roles part here
  const int n_tiles = p.k_tiles;

  if (warpgroup == 0) {
    // Producer: fill stage kt % STAGES with k-tile kt once the consumers released its previous
    // fill (k-tile kt - STAGES).
    FpropGather<T, BM, BN, 128, true> gather(p, block_m, block_n, tid);
    for (int kt = 0; kt < n_tiles; ++kt) {
      const int s = kt % STAGES;
      if (kt >= STAGES) mbarrier_wait(empty_bar + 8 * s, uint32_t((kt / STAGES - 1) & 1));
      gather.load_stage(p, smem, smem_base, s);
      cp_async_mbarrier_arrive(full_bar + 8 * s);
    }
    cp_async_wait<0>();  // no copy outlives its thread
    return;
  }

  const int consumer = warpgroup - 1;
  float acc[MH][BN / 2];
  zero_accumulators(acc);
  for (int kt = 0; kt < n_tiles; ++kt) {
    const int s = kt % STAGES;
    mbarrier_wait(full_bar + 8 * s, uint32_t((kt / STAGES) & 1));
    // The producer's copies are generic-proxy writes, visible here through the barrier; wgmma
    // reads through the async proxy.
    fence_proxy_async_shared();
    wgmma_fprop_tile<T, BM, BN, MH>(acc, smem_base + uint32_t(s * kStageBytes),
                                    consumer * kWarpgroupRows);
    wgmma_retire<1>(acc);  // k-tile kt - 1's wgmmas retired: its stage goes back to the producer
    if (kt > 0) mbarrier_arrive(empty_bar + 8 * ((kt - 1) % STAGES));
  }
  wgmma_retire<0>(acc);

  wgmma_fprop_epilogue<T, MH, BN, false>(p, acc, block_m + consumer * kWarpgroupRows, block_n);
#else
  __trap();  // never launched: the host checks wgmma_available() first
#endif
}

}  // namespace ember::cuda::conv::igemm
