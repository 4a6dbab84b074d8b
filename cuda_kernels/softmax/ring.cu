// The block_tma_ring softmax algorithm (sm_90, forward), registered in softmax.cu: a block per SM
// streaming rows through a shared-memory ring.
//
// Forward rows of up to 32768 values in 16-byte vectors. The kernels above load a row, reduce it
// and write it in turn, and an SM's loads stop while its rows are reduced and written: block_smem
// fits one f32 row of 32768 (128 KiB) per SM, two bf16 rows, and cluster_rows' blocks, which
// start together and wait on each other, load, reduce and store in step, so both leave HBM idle
// between rows. Here one persistent block of 1024 threads
// per SM takes rows blockIdx.x, + gridDim.x, ..., and a ring of 16 KiB chunks of shared memory
// (as many as fit: 14 on an H100/H200) decouples the loads from the arithmetic: every free chunk
// keeps loading the next rows (TMA bulk copies, counted on one mbarrier per slot, issued by lane 0
// of one warp per chunk, L2 evict-first: the input is read once), up to 224 KiB ahead, while the
// block reduces and writes the current row. Chunk i of a row holds its vectors
// [i * 1024, (i + 1) * 1024): thread t takes vector i * 1024 + t from it into registers (at most
// 32 values: 8 f32 or 4 16-bit vectors), so a row's chunks are free again once the block has read
// them, before the row's arithmetic and stores. The statistics and the output are cluster_rows'
// (a thread's max m_t, then exp(x - m_t) once per value, kept in registers; the output
// exp(x - m_t) * (exp(m_t - M) / S), or x - (M + log S)).
// A row is one block-wide merge with one barrier. In the few microseconds that HBM takes to stream
// a 16-bit row (64 KiB in, 64 KiB out) the block also does all of the row's arithmetic, its
// barrier and its shuffle merges one after the other (32 warps in step), so the per-value
// instructions bound bf16 where f32 (twice the bytes per value) has room: hence the packed 16-bit
// max, the FFMA-folded exponent argument for 16-bit types and one MUFU.EX2 per value.
#include "ember/cuda_kernels/common/tma.cuh"
#include "ember/cuda_kernels/softmax/launch.cuh"

namespace ember::cuda::softmax_impl {
namespace {

// NaN-propagating max of floats (max.NaN: NaN if either is NaN, as MaxOp), sm_80+.
__device__ __forceinline__ float ring_max_nan(float a, float b) {
  float y;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}

// A thread's running max over its vectors. f32: floats. 16-bit types: pairs of raw values
// (max.NaN.bf16x2 / f16x2: the max of two 16-bit values is exact, NaN if either is NaN), turned
// into one float at the end. -0 and +0 may come out either way; the max only anchors the
// exponentials (exp(x - 0) == exp(x + 0)).
template <typename T>
struct RingMax {  // f32
  float m;
  __device__ __forceinline__ static RingMax identity() { return {neg_infinity<float>()}; }
  __device__ __forceinline__ void fold(const AlignedVec<T, kVec<T>>& c) {
    static_assert(kVec<T> == 4, "f32 vectors");
    const float a = ring_max_nan(convert<float>(c.v[0]), convert<float>(c.v[1]));
    const float b = ring_max_nan(convert<float>(c.v[2]), convert<float>(c.v[3]));
    m = ring_max_nan(m, ring_max_nan(a, b));
  }
  __device__ __forceinline__ float value() const { return m; }
};
template <typename T>
struct RingMax16 {
  using Pair = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
  Pair m;
  __device__ __forceinline__ static RingMax16 identity() {
    // -inf in both halves: f16 0xfc00, bf16 0xff80.
    const uint32_t bits = std::is_same_v<T, __half> ? 0xfc00fc00u : 0xff80ff80u;
    RingMax16 r;
    r.m = *reinterpret_cast<const Pair*>(&bits);
    return r;
  }
  __device__ __forceinline__ void fold(const AlignedVec<T, kVec<T>>& c) {
    static_assert(kVec<T> == 8, "16-bit vectors");
    const Pair* p = reinterpret_cast<const Pair*>(c.v);
    m = __hmax2_nan(m, __hmax2_nan(__hmax2_nan(p[0], p[1]), __hmax2_nan(p[2], p[3])));
  }
  __device__ __forceinline__ float value() const {
    const float2 f = std::is_same_v<T, __half>
                         ? __half22float2(*reinterpret_cast<const __half2*>(&m))
                         : __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&m));
    return ring_max_nan(f.x, f.y);
  }
};
template <typename T>
using RingMaxOf = std::conditional_t<sizeof(T) == 2, RingMax16<T>, RingMax<T>>;

// A vector's values as floats. bf16: the raw bits shifted (low half) or masked (high half), one
// instruction per value where the conversion of a high half took a PRMT and a shift.
template <typename T>
__device__ __forceinline__ void ring_unpack(const AlignedVec<T, kVec<T>>& c, float* out) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(c.v);
#pragma unroll
    for (int j = 0; j < kVec<T> / 2; ++j) {
      out[2 * j] = bf16_low_as_float(w[j]);
      out[2 * j + 1] = bf16_high_as_float(w[j]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kVec<T>; ++j) out[j] = convert<float>(c.v[j]);
  }
}

// maxsum_merge without branches and with one exponential: the side with the larger max keeps
// its sum (maxsum_merge multiplies it by exp_acc(0) == 1), the other is scaled by
// exp(smaller - larger). The same values as maxsum_merge for the pairs the kernel makes (a -inf
// max has a 0 sum, a NaN or +inf max a NaN sum); the shuffles are warp_maxsum's.
__device__ __forceinline__ MaxSum<float> ring_merge(const MaxSum<float>& a,
                                                    const MaxSum<float>& b) {
  const bool a_big = a.max > b.max;
  const float m = a_big ? a.max : b.max;
  const float e = exp_acc(a_big ? b.max - a.max : a.max - b.max);
  const float sa = a.max == neg_infinity<float>() ? 0.0f : (a_big ? a.sum : a.sum * e);
  const float sb = b.max == neg_infinity<float>() ? 0.0f : (a_big ? b.sum * e : b.sum);
  return {m, m == neg_infinity<float>() ? a.sum + b.sum : sa + sb};
}
__device__ __forceinline__ MaxSum<float> ring_warp_maxsum(MaxSum<float> s) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const MaxSum<float> o{__shfl_xor_sync(kFullWarpMask, s.max, offset),
                          __shfl_xor_sync(kFullWarpMask, s.sum, offset)};
    s = ring_merge(s, o);
  }
  return s;
}

// `slots` chunks of dynamic shared memory; a row takes `chunks` of them (fewer than `slots`).
// Chunk q of the block's stream (row q / chunks, chunk q % chunks of it) lands in slot q % slots
// on use q / slots of that slot's barrier.
template <typename T>
__global__ void __launch_bounds__(kRingThreads, 1)
    softmax_ring_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows,
                                int64_t dim, bool log, int slots) {
#if EMBER_SOFTMAX_SM90
  constexpr int V = kVec<T>, kVecs = kRingValues / V;
  using Vec = AlignedVec<T, V>;
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t arrived[kRingMaxSlots];  // one barrier per slot
  __shared__ MaxSum<float> scratch[2 * kWarpSize];          // rows alternate
  static_assert(kRingThreads == kWarpSize * kWarpSize, "one scratch entry per lane");
  const int nvec = int(dim / V);
  const int chunks = (nvec + kRingThreads - 1) / kRingThreads;
  // Rows of this block (gridDim.x <= rows); applies() keeps my_rows * chunks within an int.
  const int my_rows = int((rows - 1 - blockIdx.x) / gridDim.x + 1);
  auto row_of = [&](int k) { return int64_t(blockIdx.x) + int64_t(k) * gridDim.x; };
  auto slot_bar = [&](int s) { return shared_address(&arrived[s]); };

  // Chunk `chunk` of this block's row `row_k` into slot `slot` (the slot's next barrier use).
  auto issue = [&](int slot, int row_k, int chunk) {
    const int first = chunk * kRingThreads;  // vector
    const uint32_t bytes = uint32_t(::min(kRingThreads, nvec - first)) * 16u;
    bulk_load(shared_address(ring + size_t(slot) * kRingChunkBytes),
              x + row_of(row_k) * dim + int64_t(first) * V, bytes, slot_bar(slot),
              l2_evict_first_policy());
  };
  const int total = my_rows * chunks;  // chunks of the block's stream
  if (threadIdx.x == 0) {
    for (int s = 0; s < slots; ++s) mbarrier_init(slot_bar(s), 1);
    bulk_barrier_init_fence();
    // The first `slots` chunks of the stream, one per slot.
    for (int q = 0, row_k = 0, chunk = 0; q < ::min(slots, total); ++q) {
      issue(q, row_k, chunk);
      if (++chunk == chunks) {
        chunk = 0;
        ++row_k;
      }
    }
  }
  __syncthreads();  // barriers initialized before anyone waits on them

  // The slot of the current row's first chunk and the parity of its barrier's current use.
  int first_slot = 0;
  uint32_t first_parity = 0;
  for (int k = 0; k < my_rows; ++k) {
    const int64_t row = row_of(k);
    auto inside = [&](int i) { return i * kRingThreads + int(threadIdx.x) < nvec; };
    // Each chunk waited for as it lands (in issue order), its vector moved to registers and
    // folded into this thread's max: a tree over the vector, then into the running max, with a
    // NaN-propagating max instruction (16-bit: on packed pairs of the raw values, whose max is
    // the max of their float values; 1 instruction per 2 values where the compare-and-select
    // chain took 3 per value).
    float kept[kVecs * V];
    RingMaxOf<T> run = RingMaxOf<T>::identity();
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      if (inside(i)) {
        int s = first_slot + i;
        uint32_t parity = first_parity;
        if (s >= slots) {
          s -= slots;
          parity ^= 1u;
        }
        mbarrier_wait(slot_bar(s), parity);
        const Vec c = reinterpret_cast<const Vec*>(ring + size_t(s) * kRingChunkBytes)[threadIdx.x];
        run.fold(c);
        ring_unpack(c, &kept[i * V]);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) kept[i * V + j] = neg_infinity<float>();
      }
    }
    const float m_t = run.value();
    const int row_slot = first_slot;
    first_slot += chunks;
    if (first_slot >= slots) {
      first_slot -= slots;
      first_parity ^= 1u;
    }
    // While every value is -inf the exponentials are taken against 0 (they are all 0).
    const float base = m_t == neg_infinity<float>() ? 0.0f : m_t;
    // 16-bit outputs: exp2(x log2(e) - base log2(e)), one FFMA and one MUFU.EX2 (the rounding of
    // base log2(e) adds a relative error of about |base| 2^-24, far below the output's 2^-9 or
    // 2^-12); f32 keeps exp_acc(x - base) (x - base exact near the max).
    const float nbase2 = -base * kLog2e;
    float sum_t = 0;
#pragma unroll
    for (int v = 0; v < kVecs * V; ++v) {
      const float e =
          sizeof(T) == 2 ? exp2_approx(fmaf(kept[v], kLog2e, nbase2)) : exp_acc(kept[v] - base);
      sum_t += e;
      if (!log) kept[v] = e;
    }
    // The block's merge with one barrier (the scratch alternates between rows: a warp writes
    // row k + 2's entry only after the barrier of row k + 1, which every warp reaches after its
    // reads of row k's). The barrier follows every thread's reads of this row's chunks: they
    // are free.
    MaxSum<float> st = ring_warp_maxsum(MaxSum<float>{m_t, sum_t});
    MaxSum<float>* const part = scratch + (k & 1) * kWarpSize;
    if (threadIdx.x % kWarpSize == 0) part[threadIdx.x / kWarpSize] = st;
    __syncthreads();
    st = ring_warp_maxsum(part[threadIdx.x % kWarpSize]);  // kRingThreads / 32 == 32 entries
    // Row k's chunks are free: chunks k * chunks + slots + w (w < chunks) of the stream go into
    // them, chunk w issued by lane 0 of warp w (chunks <= 8), so no warp spends more than one
    // issue per row between the barrier and its stores (one thread issuing them all made its
    // warp, which the next barrier waits for, the block's slowest).
    const int w = int(threadIdx.x) / kWarpSize;
    if (threadIdx.x % kWarpSize == 0 && w < chunks && k * chunks + slots + w < total) {
      const int d = slots - chunks + w;  // stream chunk (k + 1) * chunks + d
      int slot = row_slot + w;           // (k * chunks + w) % slots
      if (slot >= slots) slot -= slots;
      bulk_refill_fence();
      issue(slot, k + 1 + d / chunks, d % chunks);
    }
    // log S only for log_softmax (a polynomial on the path to the stores otherwise).
    const float inv = 1.0f / st.sum, lse = log ? st.max + log_acc(st.sum) : 0.0f;
    // exp(m_t - M): 0 for a thread of only -inf values, NaN for a row of only -inf values (every
    // output NaN, as exp(x - M) / S gives).
    const float scale = exp_acc(m_t - st.max) * inv;
    Vec* yr = reinterpret_cast<Vec*>(y + row * dim);
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      if (!inside(i)) continue;
      Vec o;
#pragma unroll
      for (int j = 0; j < V; ++j)
        o.v[j] = convert<T>(log ? kept[i * V + j] - lse : kept[i * V + j] * scale);
      yr[i * kRingThreads + threadIdx.x] = o;
    }
  }
#else
  __trap();
#endif
}

}  // namespace

template <typename T>
void launch_ring(const SoftmaxProblem& p, cudaStream_t stream) {
  const int device = p.device().index;
  const int slots = ring_slots(p);  // more than a row's chunks (applies())
  opt_in_max_dynamic_shared_memory<softmax_ring_forward_kernel<T>>(device);
  // One block per SM (the ring takes its shared memory), each looping over rows.
  const unsigned grid = unsigned(std::min<int64_t>(p.outer, device_properties(device).sm_count));
  softmax_ring_forward_kernel<T><<<grid, kRingThreads, size_t(slots) * kRingChunkBytes, stream>>>(
      static_cast<const T*>(p.input.data_ptr()), static_cast<T*>(p.output.data_ptr()), p.outer,
      p.dim_size, p.log, slots);
  EMBER_CUDA_LAUNCH_CHECK();
}

// The dtypes run_softmax (softmax.cu) launches block_tma_ring for.
template void launch_ring<float>(const SoftmaxProblem&, cudaStream_t);
template void launch_ring<__half>(const SoftmaxProblem&, cudaStream_t);
template void launch_ring<__nv_bfloat16>(const SoftmaxProblem&, cudaStream_t);

}  // namespace ember::cuda::softmax_impl
