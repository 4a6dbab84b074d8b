// CUDA kernels of ops/softmax.h.
//
// softmax / log_softmax, registered as algorithms of the "softmax" slots (forward and backward) so
// that the algorithm cache picks one per shape:
//   warp_per_row     rows of <= 1024 values held in registers, one warp per row (4 rows a block):
//                    1 read + 1 write (forward), 2 reads + 1 write (backward);
//   block_smem       one block per row, the row (backward: y and dL/dy) cached in shared memory
//                    while it is read, so global memory is read once;
//   cluster_rows     rows of 1025 to 65536 values (backward 32768), sm_90: a cluster of up to 8
//                    blocks per row, each holding its segment in registers, the blocks' partial
//                    statistics exchanged through distributed shared memory (1 read + 1 write;
//                    several rows per SM at once, where block_smem fits one f32 row of 32768);
//   block_tma_ring   forward rows of 1025 to 32768 values in 16-byte vectors, sm_90: a persistent
//                    block per SM holding each row in registers while TMA bulk copies stream the
//                    next rows into a ring of shared-memory chunks (1 read + 1 write; loads in
//                    flight through every row's reduction and stores);
//   block_multipass  one block per row re-reading global memory: online max and rescaled sum in
//                    the first pass (2 reads + 1 write in all); any length, any dtype;
//   multi_block      for few very long rows: each row split over several blocks; a first kernel
//                    writes each block's (max, sum) to a workspace, a second merges them and writes
//                    its segment (2 reads + 1 write, the whole GPU busy);
//   column           the reduced dim is not innermost (inner > 1): a thread per column, threads
//                    along the contiguous inner dim, online statistics then a write pass.
// f16/bf16/f32 compute in float (f64 in double, which only block_multipass, multi_block and
// column accept). 16-byte vector accesses wherever the row length and pointers allow; the online
// statistics take a whole vector at a time (one max, at most one rescale, one exponential per
// value), which keeps 16-bit rows at memory speed.
//
// Cross-entropy / nll_loss (cross_entropy_forward_kernel, cross_entropy_backward_kernel):
//   forward, classes innermost: a warp per row (<= 1024 classes) or a block of up to 256 threads
//   per row (several blocks per SM) reads the row once: online max / sum, the target logit, and
//   with label smoothing the weighted logit sum;
//   forward, classes strided (inner > 1) and nll_loss: a thread per row;
//   backward: one pass over the logits, each element recomputing its softmax probability from the
//   saved log-sum-exp: tiles of a row in 16-byte vectors (several loads in flight per thread, the
//   row's coefficients loaded once per tile) when rows allow, else a flat pass per element.
// An out-of-range target is reported through the device error flag (kDeviceErrorClassIndexOutOfRange,
// details: the index and the class count) and its row is treated as ignored; no host sync.
// Every kernel writes its output (gradients are never accumulated) and is deterministic.
#include <cooperative_groups.h>

#include <algorithm>

#include "ember/cuda_kernels/common/row_reduce.cuh"
#include "ember/kernel_interface/softmax.h"
#include "ember/tensor/runtime/device_errors.h"

namespace ember::cuda {
namespace {

using dispatch::Direction;

template <typename T>
inline constexpr int kVec = 16 / int(sizeof(T));

constexpr int kWarpRowsPerBlock = 4;
constexpr int kMaxBlockThreads = 1024;

template <typename T>
__device__ __forceinline__ bool aligned16(const T* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

// ---- row visitors: every element of [begin, end) of a row, 16-byte vectors when `vec` ---------
// (vec requires begin, end and the row start to be multiples of the vector width; the callers
// check that on the host.)

// The values of one vector converted to the accumulation type.
template <typename A, typename T, int V>
__device__ __forceinline__ void to_acc(const AlignedVec<T, V>& c, A (&v)[V]) {
#pragma unroll
  for (int j = 0; j < V; ++j) v[j] = convert<A>(c.v[j]);
}

// f(values, index of values[0]) on one vector: all V values at once (an array), or for f64 (a
// correctness path) one value at a time, whose inlined double math spills otherwise.
template <typename A, typename T, typename F>
__device__ __forceinline__ void visit_vector(const AlignedVec<T, kVec<T>>& c, int64_t first,
                                             F&& f) {
  constexpr int V = kVec<T>;
  if constexpr (std::is_same_v<T, double>) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const A one[1] = {c.v[j]};
      f(one, first + j);
    }
  } else {
    A v[V];
    to_acc(c, v);
    f(v, first);
  }
}

// visit_vector's f for each vector of [begin, end) of a row, or for each element as an array of
// one on the scalar path; thread `rank` of `group` threads takes every group-th vector (or
// element), with kInFlight vector loads in flight per thread (softmax_block_forward_kernel keeps
// 2 in f64, which spills with 4). Handing over whole vectors lets the online statistics rescale
// once per vector instead of once per element.
template <typename A, int kInFlight = 4, typename T, typename F>
__device__ __forceinline__ void visit_row(const T* row, int64_t begin, int64_t end, bool vec,
                                          int rank, int group, F&& f) {
  constexpr int V = kVec<T>;
  using Vec = AlignedVec<T, V>;
  if (vec) {
    const Vec* rv = reinterpret_cast<const Vec*>(row);
    const int64_t vb = begin / V, ve = end / V;
    int64_t i = vb + rank;
    for (; i + (kInFlight - 1) * int64_t(group) < ve; i += kInFlight * int64_t(group)) {
      Vec c[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) c[u] = rv[i + u * group];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) visit_vector<A>(c[u], (i + u * group) * V, f);
    }
    for (; i < ve; i += group) visit_vector<A>(rv[i], i * V, f);
  } else {
    for (int64_t i = begin + rank; i < end; i += group) {
      const A v[1] = {convert<A>(row[i])};
      f(v, i);
    }
  }
}

// Adds N values to online statistics: one rescale for the group (when its max is a new maximum)
// and one exponential per value, instead of a compare, branch and possible rescale per value.
// -inf values add exp(-inf) = 0 (while every value so far is -inf the sum is taken against 0, so
// it stays 0), and a NaN makes the sum NaN (it never wins the max, but its exponential is NaN).
// A single value takes maxsum_add (one exponential on either branch).
template <typename A, int N>
__device__ __forceinline__ void maxsum_add_n(MaxSum<A>& s, const A (&v)[N]) {
  if constexpr (N == 1) {
    maxsum_add(s, v[0]);
    return;
  }
  A m = v[0];
#pragma unroll
  for (int j = 1; j < N; ++j) m = v[j] > m ? v[j] : m;
  if (m > s.max) {
    s.sum *= exp_acc(s.max - m);  // exp(-inf) = 0 for empty statistics
    s.max = m;
  }
  const A base = s.max == neg_infinity<A>() ? A(0) : s.max;
  A add = 0;
#pragma unroll
  for (int j = 0; j < N; ++j) add += exp_acc(v[j] - base);
  s.sum += add;
}

// f(a, b) for each element pair of two rows.
template <typename A, typename T, typename F>
__device__ __forceinline__ void visit_rows2(const T* ra, const T* rb, int64_t begin, int64_t end,
                                            bool vec, F&& f) {
  constexpr int V = kVec<T>;
  using Vec = AlignedVec<T, V>;
  if (vec) {
    const Vec* va = reinterpret_cast<const Vec*>(ra);
    const Vec* vb = reinterpret_cast<const Vec*>(rb);
    const int64_t b0 = begin / V, e0 = end / V;
    int64_t i = b0 + threadIdx.x;
    for (; i + int64_t(blockDim.x) < e0; i += 2 * int64_t(blockDim.x)) {
      const Vec a0 = va[i], a1 = va[i + blockDim.x], c0 = vb[i], c1 = vb[i + blockDim.x];
#pragma unroll
      for (int j = 0; j < V; ++j) f(convert<A>(a0.v[j]), convert<A>(c0.v[j]));
#pragma unroll
      for (int j = 0; j < V; ++j) f(convert<A>(a1.v[j]), convert<A>(c1.v[j]));
    }
    for (; i < e0; i += blockDim.x) {
      const Vec a0 = va[i], c0 = vb[i];
#pragma unroll
      for (int j = 0; j < V; ++j) f(convert<A>(a0.v[j]), convert<A>(c0.v[j]));
    }
  } else {
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      f(convert<A>(ra[i]), convert<A>(rb[i]));
  }
}

// out[i] = f(a[i]) (b == nullptr) or f(a[i], b[i]) over [begin, end).
template <typename A, typename T, typename F>
__device__ __forceinline__ void transform_row(const T* a, const T* b, T* out, int64_t begin,
                                              int64_t end, bool vec, F&& f) {
  constexpr int V = kVec<T>;
  using Vec = AlignedVec<T, V>;
  if (vec) {
    const Vec* va = reinterpret_cast<const Vec*>(a);
    const Vec* vb = reinterpret_cast<const Vec*>(b);
    Vec* vo = reinterpret_cast<Vec*>(out);
    for (int64_t i = begin / V + threadIdx.x; i < end / V; i += blockDim.x) {
      const Vec x = va[i];
      Vec y;
      if (b != nullptr) {
        const Vec g = vb[i];
#pragma unroll
        for (int j = 0; j < V; ++j) y.v[j] = convert<T>(f(convert<A>(x.v[j]), convert<A>(g.v[j])));
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) y.v[j] = convert<T>(f(convert<A>(x.v[j]), A(0)));
      }
      vo[i] = y;
    }
  } else {
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      out[i] = convert<T>(f(convert<A>(a[i]), b != nullptr ? convert<A>(b[i]) : A(0)));
  }
}

// ---- warp per row -----------------------------------------------------------------------------

// Lane `lane` holds columns (k * 32 + lane) * V + j (vector path) or i * 32 + lane (scalar path).
template <typename T, int kPerLane>
__device__ __forceinline__ void warp_load(const T* row, int dim, int lane, bool vec,
                                          float (&v)[kPerLane], float pad) {
  constexpr int V = kVec<T>;
  if constexpr (kPerLane % V == 0) {
    if (vec) {
#pragma unroll
      for (int k = 0; k < kPerLane / V; ++k) {
        const int col = (k * kWarpSize + lane) * V;
        if (col < dim) {
          const auto c = *reinterpret_cast<const AlignedVec<T, V>*>(row + col);
#pragma unroll
          for (int j = 0; j < V; ++j) v[k * V + j] = convert<float>(c.v[j]);
        } else {
#pragma unroll
          for (int j = 0; j < V; ++j) v[k * V + j] = pad;
        }
      }
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int col = i * kWarpSize + lane;
    v[i] = col < dim ? convert<float>(row[col]) : pad;
  }
}

template <typename T, int kPerLane>
__device__ __forceinline__ void warp_store(T* row, int dim, int lane, bool vec,
                                           const float (&v)[kPerLane]) {
  constexpr int V = kVec<T>;
  if constexpr (kPerLane % V == 0) {
    if (vec) {
#pragma unroll
      for (int k = 0; k < kPerLane / V; ++k) {
        const int col = (k * kWarpSize + lane) * V;
        if (col < dim) {
          AlignedVec<T, V> c;
#pragma unroll
          for (int j = 0; j < V; ++j) c.v[j] = convert<T>(v[k * V + j]);
          *reinterpret_cast<AlignedVec<T, V>*>(row + col) = c;
        }
      }
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int col = i * kWarpSize + lane;
    if (col < dim) row[col] = convert<T>(v[i]);
  }
}

template <typename T, int kPerLane>
__global__ void __launch_bounds__(kWarpRowsPerBlock * kWarpSize)
softmax_warp_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int dim,
                            bool log, bool vec) {
  const int64_t row = int64_t(blockIdx.x) * kWarpRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // the whole warp leaves together
  const int lane = threadIdx.x % kWarpSize;
  float v[kPerLane];
  warp_load<T, kPerLane>(x + row * dim, dim, lane, vec, v, neg_infinity<float>());
  float m = v[0];
#pragma unroll
  for (int i = 1; i < kPerLane; ++i) m = MaxOp()(m, v[i]);
  m = warp_reduce(m, MaxOp());
  float s = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const float e = exp_acc(v[i] - m);
    s += e;
    if (!log) v[i] = e;
  }
  s = warp_reduce(s, SumOp());
  if (log) {
    const float lse = m + log_acc(s);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) v[i] -= lse;
  } else {
    const float inv = 1.0f / s;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) v[i] *= inv;
  }
  warp_store<T, kPerLane>(y + row * dim, dim, lane, vec, v);
}

template <typename T, int kPerLane>
__global__ void __launch_bounds__(kWarpRowsPerBlock * kWarpSize)
softmax_warp_backward_kernel(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ dx,
                             int64_t rows, int dim, bool log, bool vec) {
  const int64_t row = int64_t(blockIdx.x) * kWarpRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarpSize;
  float yv[kPerLane], gv[kPerLane];
  warp_load<T, kPerLane>(y + row * dim, dim, lane, vec, yv, 0.0f);
  warp_load<T, kPerLane>(g + row * dim, dim, lane, vec, gv, 0.0f);
  float acc = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc += log ? gv[i] : gv[i] * yv[i];
  acc = warp_reduce(acc, SumOp());
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    yv[i] = log ? gv[i] - exp_acc(yv[i]) * acc : yv[i] * (gv[i] - acc);
  warp_store<T, kPerLane>(dx + row * dim, dim, lane, vec, yv);
}

// ---- block per row, row in shared memory ------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(kMaxBlockThreads)
softmax_smem_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t dim,
                            bool log, bool vec) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* buf = reinterpret_cast<T*>(smem_raw);
  __shared__ MaxSum<float> scratch[kWarpSize];
  constexpr int V = kVec<T>;
  using Vec = AlignedVec<T, V>;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * dim;
    MaxSum<float> st = maxsum_identity<float>();
    // Load the row into shared memory, gathering the statistics on the way.
    if (vec) {
      const Vec* src = reinterpret_cast<const Vec*>(xr);
      Vec* dst = reinterpret_cast<Vec*>(buf);
      const int64_t nvec = dim / V;
      int64_t i = threadIdx.x;
      for (; i + 3 * int64_t(blockDim.x) < nvec; i += 4 * int64_t(blockDim.x)) {
        Vec c[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) c[u] = src[i + u * blockDim.x];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          dst[i + u * blockDim.x] = c[u];
          float v[V];
          to_acc(c[u], v);
          maxsum_add_n(st, v);
        }
      }
      for (; i < nvec; i += blockDim.x) {
        const Vec c = src[i];
        dst[i] = c;
        float v[V];
        to_acc(c, v);
        maxsum_add_n(st, v);
      }
    } else {
      for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        const T c = xr[i];
        buf[i] = c;
        maxsum_add(st, convert<float>(c));
      }
    }
    st = block_maxsum(st, scratch);  // also makes buf visible to the whole block
    const float m = st.max, inv = 1.0f / st.sum, lse = st.max + log_acc(st.sum);
    transform_row<float>(buf, static_cast<const T*>(nullptr), y + row * dim, 0, dim, vec,
                         [=](float v, float) { return log ? v - lse : exp_acc(v - m) * inv; });
    __syncthreads();  // buf is refilled for the next row
  }
}

template <typename T>
__global__ void __launch_bounds__(kMaxBlockThreads)
softmax_smem_backward_kernel(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ dx,
                             int64_t rows, int64_t dim, bool log, bool vec) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* ybuf = reinterpret_cast<T*>(smem_raw);
  T* gbuf = ybuf + ((dim + 7) / 8) * 8;  // keeps gbuf 16-byte aligned
  __shared__ float scratch[kWarpSize];
  constexpr int V = kVec<T>;
  using Vec = AlignedVec<T, V>;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* yr = y + row * dim;
    const T* gr = g + row * dim;
    float acc = 0;
    if (vec) {
      const int64_t nvec = dim / V;
      for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
        const Vec a = reinterpret_cast<const Vec*>(yr)[i], b = reinterpret_cast<const Vec*>(gr)[i];
        reinterpret_cast<Vec*>(ybuf)[i] = a;
        reinterpret_cast<Vec*>(gbuf)[i] = b;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float gv = convert<float>(b.v[j]);
          acc += log ? gv : gv * convert<float>(a.v[j]);
        }
      }
    } else {
      for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        const T a = yr[i], b = gr[i];
        ybuf[i] = a;
        gbuf[i] = b;
        const float gv = convert<float>(b);
        acc += log ? gv : gv * convert<float>(a);
      }
    }
    acc = block_reduce(acc, SumOp(), 0.0f, scratch);
    transform_row<float>(ybuf, gbuf, dx + row * dim, 0, dim, vec, [=](float yv, float gv) {
      return log ? gv - exp_acc(yv) * acc : yv * (gv - acc);
    });
    __syncthreads();
  }
}

// ---- a cluster of blocks per row, the row in registers (sm_90) --------------------------------
//
// Rows too long for one block's registers are split over a thread-block cluster of up to 8 blocks
// of 256 threads: each block loads its segment into registers with every load in flight at once,
// reduces it, and the blocks exchange their partial statistics through distributed shared memory.
// Global memory is read once and written once (like block_smem) without staging the row in shared
// memory, and a block holds only its segment (8192 values forward, 4096 of y and dL/dy backward),
// so 4 or more blocks of different rows share an SM and one's loads overlap another's reduction
// and stores (block_smem's f32 rows of 32768 values take a whole SM's shared memory).

constexpr int kClusterThreads = 256;
constexpr int kClusterMaxBlocks = 8;  // the portable cluster size
// Values per thread: forward x; backward y and dL/dy (twice the registers per value).
template <bool Backward>
inline constexpr int kClusterPerThread = Backward ? 16 : 32;
template <bool Backward>
inline constexpr int64_t kClusterSegment = int64_t(kClusterThreads) * kClusterPerThread<Backward>;
// 4 blocks of 256 threads per SM: 64 registers, enough for 32 f32 values and the addressing.
constexpr int kClusterBlocksPerSm = 4;

// Row element of value j of vector slot k of thread t in the block's segment starting at `seg`:
// 16-byte vectors k * 256 + t (vec), or single elements (k * V + j) * 256 + t; a warp's
// accesses are contiguous either way.
template <int V>
__device__ __forceinline__ int64_t cluster_slot(bool vec, int64_t seg, int k, int j) {
  return vec ? seg + (int64_t(k) * kClusterThreads + threadIdx.x) * V + j
             : seg + (int64_t(k) * V + j) * kClusterThreads + threadIdx.x;
}

// Loads this thread's slots of a row (slots past the row's end stay zero; vec requires the row
// length and the row start to be multiples of the vector).
template <typename T, int kVecs>
__device__ __forceinline__ void cluster_load(const T* row, int64_t dim, int64_t seg, bool vec,
                                             AlignedVec<T, kVec<T>> (&raw)[kVecs]) {
  constexpr int V = kVec<T>;
  using Vec = AlignedVec<T, V>;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    raw[k] = Vec{};
    if (vec) {
      const int64_t i = cluster_slot<V>(true, seg, k, 0);
      if (i < dim) raw[k] = *reinterpret_cast<const Vec*>(row + i);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int64_t i = cluster_slot<V>(false, seg, k, j);
        if (i < dim) raw[k].v[j] = row[i];
      }
    }
  }
}

// Writes f(k, j), the output of value j of vector slot k, to each of this thread's slots inside
// the row.
template <typename T, int kVecs, typename F>
__device__ __forceinline__ void cluster_store(T* row, int64_t dim, int64_t seg, bool vec, F&& f) {
  constexpr int V = kVec<T>;
  using Vec = AlignedVec<T, V>;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    if (vec) {
      const int64_t i = cluster_slot<V>(true, seg, k, 0);
      if (i < dim) {
        Vec o;
#pragma unroll
        for (int j = 0; j < V; ++j) o.v[j] = convert<T>(f(k, j));
        *reinterpret_cast<Vec*>(row + i) = o;
      }
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int64_t i = cluster_slot<V>(false, seg, k, j);
        if (i < dim) row[i] = convert<T>(f(k, j));
      }
    }
  }
}

// The cluster and ring kernels use sm_90 instructions; applies() keeps older devices out, and a
// build for an older architecture compiles them to a trap.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define EMBER_SOFTMAX_SM90 1
#else
#define EMBER_SOFTMAX_SM90 0
#endif

// The cluster of blocks [c * n, (c + 1) * n) (n = the cluster size) takes rows c, c + clusters, ...;
// block rank b of a cluster holds the row's segment [b * 8192, (b + 1) * 8192).
// Statistics: each thread takes the max m_t of its values first (no exponentials), then
// sum_t = sum exp(x - m_t) over them: one exponential per value and no rescaling, where the
// online update costs a rescale whenever a vector raises the max. Slots past the row's end count
// as -inf. The exponentials replace the values in registers (64 registers, no spills), and the
// output is exp(x - m_t) * (exp(m_t - M) / S): one exponential per element in all, where taking
// exp(x - M) again in the output pass doubled the arithmetic of the kernel (f32 3.10, bf16 1.89
// TB/s). log_softmax keeps the values and writes x - (M + log S).
template <typename T>
__global__ void __launch_bounds__(kClusterThreads, kClusterBlocksPerSm)
softmax_cluster_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows,
                               int64_t dim, bool log, bool vec) {
#if EMBER_SOFTMAX_SM90
  namespace cg = cooperative_groups;
  constexpr int V = kVec<T>, kVecs = kClusterPerThread<false> / V;
  using Vec = AlignedVec<T, V>;
  __shared__ MaxSum<float> scratch[kWarpSize];
  __shared__ MaxSum<float> block_stats;  // this block's segment, read by the whole cluster
  const cg::cluster_group cluster = cg::this_cluster();
  const unsigned blocks = cluster.num_blocks();
  const int64_t seg = int64_t(cluster.block_rank()) * kClusterSegment<false>;
  const int lane = threadIdx.x % kWarpSize;
  // Whether value j of slot k lies inside the row (vec: the whole vector does or does not).
  auto inside = [&](int k, int j) {
    return vec ? cluster_slot<V>(true, seg, k, 0) < dim : cluster_slot<V>(false, seg, k, j) < dim;
  };
  for (int64_t row = blockIdx.x / blocks; row < rows; row += gridDim.x / blocks) {
    Vec raw[kVecs];
    cluster_load(x + row * dim, dim, seg, vec, raw);
    auto value = [&](int k, int j) {
      return inside(k, j) ? convert<float>(raw[k].v[j]) : neg_infinity<float>();
    };
    float m_t = neg_infinity<float>();
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
#pragma unroll
      for (int j = 0; j < V; ++j) m_t = MaxOp()(m_t, value(k, j));
    }
    // While every value is -inf the exponentials are taken against 0 (they are all 0).
    const float base = m_t == neg_infinity<float>() ? 0.0f : m_t;
    // The exponentials (softmax) or the values (log_softmax).
    float kept[kVecs * V];
    float sum_t = 0;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float xv = value(k, j), e = exp_acc(xv - base);
        sum_t += e;
        kept[k * V + j] = log ? xv : e;
      }
    }
    const MaxSum<float> st = block_maxsum(MaxSum<float>{m_t, sum_t}, scratch);
    if (threadIdx.x == 0) block_stats = st;
    cluster.sync();  // every block's statistics written and visible to the cluster
    // Each warp merges the blocks' statistics itself; the butterfly merge is commutative at every
    // step, so every thread of every block of the cluster gets the same bits.
    MaxSum<float> rs = lane < int(blocks) ? *cluster.map_shared_rank(&block_stats, lane)
                                          : maxsum_identity<float>();
    rs = warp_maxsum(rs);
    cluster.barrier_arrive();  // done reading the other blocks' shared memory
    const float m = rs.max, inv = 1.0f / rs.sum, lse = rs.max + log_acc(rs.sum);
    // exp(m_t - M) is 0 for a thread of only -inf values (its exponentials are 0 too) and NaN for
    // a row of only -inf values (every output NaN, as exp(x - M) / S gives).
    const float scale = exp_acc(m_t - m) * inv;
    cluster_store<T, kVecs>(y + row * dim, dim, seg, vec, [&](int k, int j) {
      return log ? kept[k * V + j] - lse : kept[k * V + j] * scale;
    });
    cluster.barrier_wait();  // block_stats is rewritten next row; a block exits only when unread
  }
#else
  __trap();
#endif
}

// Backward: the row sum is sum(g * y) (softmax) or sum(g) (log_softmax), each block's segment sum
// exchanged like the forward statistics.
template <typename T>
__global__ void __launch_bounds__(kClusterThreads, kClusterBlocksPerSm)
softmax_cluster_backward_kernel(const T* __restrict__ y, const T* __restrict__ g,
                                T* __restrict__ dx, int64_t rows, int64_t dim, bool log, bool vec) {
#if EMBER_SOFTMAX_SM90
  namespace cg = cooperative_groups;
  constexpr int V = kVec<T>, kVecs = kClusterPerThread<true> / V;
  using Vec = AlignedVec<T, V>;
  __shared__ float scratch[kWarpSize];
  __shared__ float block_sum;
  const cg::cluster_group cluster = cg::this_cluster();
  const unsigned blocks = cluster.num_blocks();
  const int64_t seg = int64_t(cluster.block_rank()) * kClusterSegment<true>;
  const int lane = threadIdx.x % kWarpSize;
  for (int64_t row = blockIdx.x / blocks; row < rows; row += gridDim.x / blocks) {
    Vec yraw[kVecs], graw[kVecs];
    cluster_load(y + row * dim, dim, seg, vec, yraw);
    cluster_load(g + row * dim, dim, seg, vec, graw);
    // Slots past the row's end hold zeros, which add nothing.
    float acc = 0;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float gv = convert<float>(graw[k].v[j]);
        acc += log ? gv : gv * convert<float>(yraw[k].v[j]);
      }
    }
    acc = block_reduce(acc, SumOp(), 0.0f, scratch);
    if (threadIdx.x == 0) block_sum = acc;
    cluster.sync();
    float total = lane < int(blocks) ? *cluster.map_shared_rank(&block_sum, lane) : 0.0f;
    total = warp_reduce(total, SumOp());  // commutative butterfly: the same bits everywhere
    cluster.barrier_arrive();
    cluster_store<T, kVecs>(dx + row * dim, dim, seg, vec, [&](int k, int j) {
      const float yv = convert<float>(yraw[k].v[j]), gv = convert<float>(graw[k].v[j]);
      return log ? gv - exp_acc(yv) * total : yv * (gv - total);
    });
    cluster.barrier_wait();
  }
#else
  __trap();
#endif
}

// ---- a block per SM streaming rows through a shared-memory ring (sm_90) ------------------------
//
// Forward rows of up to 32768 values in 16-byte vectors. The kernels above load a row, reduce it
// and write it in turn, and an SM's loads stop while its rows are reduced and written: block_smem
// fits one f32 row of 32768 (128 KiB) per SM, two bf16 rows, and cluster_rows' blocks, which
// start together and wait on each other, load, reduce and store in step (8192 x 32768 forward:
// cluster_rows f32 79%, block_smem bf16 75% of copy). Here one persistent block of 1024 threads
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
// A row is one block-wide merge with one barrier. With HBM streaming, a 16-bit row (64 KiB in,
// 64 KiB out) gives the SM about 4.7 us at 85% of copy, in which the block also does all of the
// row's arithmetic, its barrier and its shuffle merges one after the other (32 warps in step),
// so the per-value instructions bound bf16 where f32 (twice the bytes per value) has room:
// packed 16-bit max, FFMA-folded exponent argument for 16-bit types, one MUFU.EX2 per value.

constexpr int kRingThreads = 1024;
constexpr int kRingValues = 32;                     // per thread
constexpr int kRingChunkBytes = kRingThreads * 16;  // one 16-byte vector per thread
constexpr int kRingMaxSlots = 16;                   // barriers reserved (227 KiB: 14 used)
constexpr int64_t kRingMaxDim = int64_t(kRingThreads) * kRingValues;

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
    const float2 f =
        std::is_same_v<T, __half>
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
softmax_ring_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t dim,
                            bool log, int slots) {
#if EMBER_SOFTMAX_SM90
  constexpr int V = kVec<T>, kVecs = kRingValues / V;
  using Vec = AlignedVec<T, V>;
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t arrived[kRingMaxSlots];  // one barrier per slot
  __shared__ MaxSum<float> scratch[2 * kWarpSize];  // rows alternate
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
      const float e = sizeof(T) == 2 ? exp2_approx(fmaf(kept[v], kLog2e, nbase2))
                                     : exp_acc(kept[v] - base);
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

// ---- block per row re-reading global memory (one block per row, or several: multi_block) -----

// mode full: statistics and output of whole rows (gridDim.y == 1, no workspace).
// mode stats: each block (row, blockIdx.y) writes the statistics of its segment to `partials`.
// mode write: each block merges its row's partials and writes its segment.
enum PassMode : int { kPassFull = 0, kPassStats = 1, kPassWrite = 2 };

template <typename T>
__global__ void __launch_bounds__(kMaxBlockThreads)
softmax_block_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t dim,
                             bool log, bool vec, int mode, int64_t segment,
                             MaxSum<OpMath<T>>* __restrict__ partials) {
  using A = OpMath<T>;
  __shared__ MaxSum<A> scratch[kWarpSize];
  const int64_t splits = gridDim.y, split = blockIdx.y;
  const int64_t begin = split * segment, end = ::min(dim, begin + segment);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * dim;
    MaxSum<A> st = maxsum_identity<A>();
    if (mode == kPassWrite) {
      for (int64_t k = 0; k < splits; ++k) st = maxsum_merge(st, partials[row * splits + k]);
    } else {
      constexpr int kInFlight = std::is_same_v<T, double> ? 2 : 4;
      visit_row<A, kInFlight>(xr, begin, end, vec, int(threadIdx.x), int(blockDim.x),
                              [&](const auto& v, int64_t) { maxsum_add_n(st, v); });
      st = block_maxsum(st, scratch);
      if (mode == kPassStats) {
        if (threadIdx.x == 0) partials[row * splits + split] = st;
        continue;
      }
    }
    const A m = st.max, inv = A(1) / st.sum, lse = st.max + log_acc(st.sum);
    transform_row<A>(xr, static_cast<const T*>(nullptr), y + row * dim, begin, end, vec,
                     [=](A v, A) { return log ? v - lse : exp_acc(v - m) * inv; });
  }
}

// Backward: the row sum is sum(g * y) (softmax) or sum(g) (log_softmax); partials hold segment sums.
template <typename T>
__global__ void __launch_bounds__(kMaxBlockThreads)
softmax_block_backward_kernel(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ dx,
                              int64_t rows, int64_t dim, bool log, bool vec, int mode,
                              int64_t segment, OpMath<T>* __restrict__ partials) {
  using A = OpMath<T>;
  __shared__ A scratch[kWarpSize];
  const int64_t splits = gridDim.y, split = blockIdx.y;
  const int64_t begin = split * segment, end = ::min(dim, begin + segment);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* yr = y + row * dim;
    const T* gr = g + row * dim;
    A acc = 0;
    if (mode == kPassWrite) {
      for (int64_t k = 0; k < splits; ++k) acc += partials[row * splits + k];
    } else {
      visit_rows2<A>(yr, gr, begin, end, vec, [&](A yv, A gv) { acc += log ? gv : gv * yv; });
      acc = block_reduce(acc, SumOp(), A(0), scratch);
      if (mode == kPassStats) {
        if (threadIdx.x == 0) partials[row * splits + split] = acc;
        continue;
      }
    }
    transform_row<A>(yr, gr, dx + row * dim, begin, end, vec, [=](A yv, A gv) {
      return log ? gv - exp_acc(yv) * acc : yv * (gv - acc);
    });
  }
}

// ---- reduced dim not innermost: a thread per (outer, inner) column ----------------------------

template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
softmax_column_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer,
                              int64_t dim, int64_t inner, bool log) {
  using A = OpMath<T>;
  const int64_t columns = outer * inner;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < columns; t += step) {
    const int64_t o = t / inner;
    const int64_t base = o * dim * inner + (t - o * inner);
    MaxSum<A> st = maxsum_identity<A>();
    for (int64_t d = 0; d < dim; ++d) maxsum_add(st, convert<A>(x[base + d * inner]));
    const A m = st.max, inv = A(1) / st.sum, lse = st.max + log_acc(st.sum);
    for (int64_t d = 0; d < dim; ++d) {
      const A v = convert<A>(x[base + d * inner]);
      y[base + d * inner] = convert<T>(log ? v - lse : exp_acc(v - m) * inv);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
softmax_column_backward_kernel(const T* __restrict__ y, const T* __restrict__ g,
                               T* __restrict__ dx, int64_t outer, int64_t dim, int64_t inner,
                               bool log) {
  using A = OpMath<T>;
  const int64_t columns = outer * inner;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < columns; t += step) {
    const int64_t o = t / inner;
    const int64_t base = o * dim * inner + (t - o * inner);
    A acc = 0;
    for (int64_t d = 0; d < dim; ++d) {
      const A gv = convert<A>(g[base + d * inner]);
      acc += log ? gv : gv * convert<A>(y[base + d * inner]);
    }
    for (int64_t d = 0; d < dim; ++d) {
      const A yv = convert<A>(y[base + d * inner]), gv = convert<A>(g[base + d * inner]);
      dx[base + d * inner] = convert<T>(log ? gv - exp_acc(yv) * acc : yv * (gv - acc));
    }
  }
}

// ---- host side: launch geometry ---------------------------------------------------------------

bool is_aligned16(const Tensor& t) { return !t.defined() || is_aligned(t.data_ptr(), 16); }

// 16-byte vectors along the rows: the row length a multiple of the vector and every base aligned.
bool rows_vectorizable(const SoftmaxProblem& p) {
  const int64_t V = 16 / int64_t(p.input.element_size());
  return p.dim_size % V == 0 && is_aligned16(p.input) && is_aligned16(p.output) &&
         is_aligned16(p.grad_output);
}

// Threads per block for rows of `length` elements: enough for about 4 vectors per thread.
int block_threads_for(int64_t length, size_t element_size) {
  const int64_t vectors = (length * int64_t(element_size) + 15) / 16;
  int threads = 128;
  while (threads < kMaxBlockThreads && int64_t(threads) * 4 < vectors) threads *= 2;
  return threads;
}

unsigned row_grid(int64_t rows) {
  return unsigned(std::min<int64_t>(rows, std::numeric_limits<int32_t>::max()));
}

size_t smem_bytes(const SoftmaxProblem& p) {
  const size_t row = size_t((p.dim_size + 7) / 8 * 8) * p.input.element_size();
  return p.direction == Direction::forward ? row : 2 * row;
}

size_t smem_limit(const SoftmaxProblem& p) {
  // The opt-in per-block limit, less the kernels' static scratch (32 x 16 bytes at most).
  const size_t optin = device_properties(p.device().index).shared_memory_per_block_optin;
  return optin > 1024 ? optin - 1024 : 0;
}

// multi_block: how many blocks share a row so that about two waves of the GPU are busy, each
// segment at least kMinSegment elements. 1 when not worth it.
constexpr int64_t kMinSegment = 4096;
int64_t multi_block_splits(const SoftmaxProblem& p) {
  if (p.inner != 1) return 1;
  const int64_t sms = device_properties(p.device().index).sm_count;
  if (p.outer >= sms) return 1;
  const int64_t wanted = (2 * sms + p.outer - 1) / p.outer;
  return std::max<int64_t>(1, std::min(wanted, p.dim_size / kMinSegment));
}
int64_t multi_block_segment(const SoftmaxProblem& p, int64_t splits) {
  const int64_t V = 16 / int64_t(p.input.element_size());
  const int64_t seg = (p.dim_size + splits - 1) / splits;
  return (seg + V - 1) / V * V;  // vector aligned; the last segment may be shorter
}

template <typename T>
void launch_warp(const SoftmaxProblem& p, cudaStream_t stream) {
  const bool vec = rows_vectorizable(p);
  const unsigned grid = unsigned((p.outer + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock);
  const int dim = int(p.dim_size);
  const T* in = static_cast<const T*>(p.input.data_ptr());
  T* out = static_cast<T*>(p.output.data_ptr());
  const int threads = kWarpRowsPerBlock * kWarpSize;
  if (p.direction == Direction::forward) {
    if (dim <= 4 * kWarpSize)
      softmax_warp_forward_kernel<T, 4><<<grid, threads, 0, stream>>>(in, out, p.outer, dim, p.log, vec);
    else
      softmax_warp_forward_kernel<T, 32><<<grid, threads, 0, stream>>>(in, out, p.outer, dim, p.log, vec);
  } else {
    const T* g = static_cast<const T*>(p.grad_output.data_ptr());
    if (dim <= 4 * kWarpSize)
      softmax_warp_backward_kernel<T, 4><<<grid, threads, 0, stream>>>(in, g, out, p.outer, dim, p.log, vec);
    else
      softmax_warp_backward_kernel<T, 32><<<grid, threads, 0, stream>>>(in, g, out, p.outer, dim, p.log, vec);
  }
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void launch_smem(const SoftmaxProblem& p, cudaStream_t stream) {
  const bool vec = rows_vectorizable(p);
  const size_t bytes = smem_bytes(p);  // at most smem_limit(p) (applies())
  const int device = p.device().index;
  const int threads = block_threads_for(p.dim_size, sizeof(T));
  const T* in = static_cast<const T*>(p.input.data_ptr());
  T* out = static_cast<T*>(p.output.data_ptr());
  if (p.direction == Direction::forward) {
    opt_in_max_dynamic_shared_memory<softmax_smem_forward_kernel<T>>(device);
    softmax_smem_forward_kernel<T><<<row_grid(p.outer), threads, bytes, stream>>>(
        in, out, p.outer, p.dim_size, p.log, vec);
  } else {
    opt_in_max_dynamic_shared_memory<softmax_smem_backward_kernel<T>>(device);
    softmax_smem_backward_kernel<T><<<row_grid(p.outer), threads, bytes, stream>>>(
        in, static_cast<const T*>(p.grad_output.data_ptr()), out, p.outer, p.dim_size, p.log, vec);
  }
  EMBER_CUDA_LAUNCH_CHECK();
}

// splits == 1: one kernel (mode full); else a stats kernel and a write kernel around `workspace`.
template <typename T>
void launch_block(const SoftmaxProblem& p, int64_t splits, void* workspace, cudaStream_t stream) {
  using A = OpMath<T>;
  const bool vec = rows_vectorizable(p);
  const int64_t segment = splits == 1 ? p.dim_size : multi_block_segment(p, splits);
  splits = (p.dim_size + segment - 1) / segment;  // no empty segments
  const int threads = block_threads_for(segment, sizeof(T));
  const dim3 grid(row_grid(p.outer), unsigned(splits));
  const T* in = static_cast<const T*>(p.input.data_ptr());
  T* out = static_cast<T*>(p.output.data_ptr());
  if (p.direction == Direction::forward) {
    auto* partials = static_cast<MaxSum<A>*>(workspace);
    if (splits == 1) {
      softmax_block_forward_kernel<T><<<grid, threads, 0, stream>>>(
          in, out, p.outer, p.dim_size, p.log, vec, kPassFull, segment, nullptr);
      EMBER_CUDA_LAUNCH_CHECK();
      return;
    }
    softmax_block_forward_kernel<T><<<grid, threads, 0, stream>>>(
        in, out, p.outer, p.dim_size, p.log, vec, kPassStats, segment, partials);
    EMBER_CUDA_LAUNCH_CHECK();
    softmax_block_forward_kernel<T><<<grid, threads, 0, stream>>>(
        in, out, p.outer, p.dim_size, p.log, vec, kPassWrite, segment, partials);
    EMBER_CUDA_LAUNCH_CHECK();
  } else {
    const T* g = static_cast<const T*>(p.grad_output.data_ptr());
    auto* partials = static_cast<A*>(workspace);
    if (splits == 1) {
      softmax_block_backward_kernel<T><<<grid, threads, 0, stream>>>(
          in, g, out, p.outer, p.dim_size, p.log, vec, kPassFull, segment, nullptr);
      EMBER_CUDA_LAUNCH_CHECK();
      return;
    }
    softmax_block_backward_kernel<T><<<grid, threads, 0, stream>>>(
        in, g, out, p.outer, p.dim_size, p.log, vec, kPassStats, segment, partials);
    EMBER_CUDA_LAUNCH_CHECK();
    softmax_block_backward_kernel<T><<<grid, threads, 0, stream>>>(
        in, g, out, p.outer, p.dim_size, p.log, vec, kPassWrite, segment, partials);
    EMBER_CUDA_LAUNCH_CHECK();
  }
}

// cluster_rows: blocks per row (each holds a segment of kClusterSegment values); more than
// kClusterMaxBlocks means the algorithm does not apply.
int64_t cluster_blocks(const SoftmaxProblem& p) {
  const int64_t segment = p.direction == Direction::forward ? kClusterSegment<false>
                                                            : kClusterSegment<true>;
  return (p.dim_size + segment - 1) / segment;
}

template <typename T>
void launch_cluster(const SoftmaxProblem& p, cudaStream_t stream) {
  const bool vec = rows_vectorizable(p);
  const int64_t blocks = cluster_blocks(p);  // 1..kClusterMaxBlocks (applies())
  const int64_t clusters =
      std::min<int64_t>(p.outer, std::numeric_limits<int32_t>::max() / blocks);
  cudaLaunchAttribute cluster_dim{};
  cluster_dim.id = cudaLaunchAttributeClusterDimension;
  cluster_dim.val.clusterDim.x = unsigned(blocks);
  cluster_dim.val.clusterDim.y = 1;
  cluster_dim.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(clusters * blocks));
  config.blockDim = dim3(kClusterThreads);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = &cluster_dim;
  config.numAttrs = 1;
  const T* in = static_cast<const T*>(p.input.data_ptr());
  T* out = static_cast<T*>(p.output.data_ptr());
  if (p.direction == Direction::forward) {
    EMBER_CUDA_CHECK(cudaLaunchKernelEx(&config, softmax_cluster_forward_kernel<T>, in, out,
                                        p.outer, p.dim_size, p.log, vec));
  } else {
    const T* g = static_cast<const T*>(p.grad_output.data_ptr());
    EMBER_CUDA_CHECK(cudaLaunchKernelEx(&config, softmax_cluster_backward_kernel<T>, in, g, out,
                                        p.outer, p.dim_size, p.log, vec));
  }
  EMBER_CUDA_LAUNCH_CHECK();
}

// block_tma_ring: chunks of shared memory the ring has on this device, and chunks a row takes.
int ring_slots(const SoftmaxProblem& p) {
  return int(std::min<size_t>(kRingMaxSlots, smem_limit(p) / kRingChunkBytes));
}
int64_t ring_chunks_per_row(const SoftmaxProblem& p) {
  const int64_t vectors = p.dim_size / (16 / int64_t(p.input.element_size()));
  return (vectors + kRingThreads - 1) / kRingThreads;
}

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

template <typename T>
void launch_column(const SoftmaxProblem& p, cudaStream_t stream) {
  const unsigned grid = grid_for(p.outer * p.inner, p.device().index);
  const T* in = static_cast<const T*>(p.input.data_ptr());
  T* out = static_cast<T*>(p.output.data_ptr());
  if (p.direction == Direction::forward)
    softmax_column_forward_kernel<T><<<grid, kBlockThreads, 0, stream>>>(
        in, out, p.outer, p.dim_size, p.inner, p.log);
  else
    softmax_column_backward_kernel<T><<<grid, kBlockThreads, 0, stream>>>(
        in, static_cast<const T*>(p.grad_output.data_ptr()), out, p.outer, p.dim_size, p.inner,
        p.log);
  EMBER_CUDA_LAUNCH_CHECK();
}

// ---- algorithms -------------------------------------------------------------------------------

enum class SoftmaxAlgo { warp, smem, cluster, ring, block, multi_block, column };

// The name each algorithm is registered and reported under.
const char* algo_name(SoftmaxAlgo algo) {
  switch (algo) {
    case SoftmaxAlgo::warp: return "warp_per_row";
    case SoftmaxAlgo::smem: return "block_smem";
    case SoftmaxAlgo::cluster: return "cluster_rows";
    case SoftmaxAlgo::ring: return "block_tma_ring";
    case SoftmaxAlgo::block: return "block_multipass";
    case SoftmaxAlgo::multi_block: return "multi_block";
    case SoftmaxAlgo::column: return "column";
  }
  return "unknown";
}

void check_problem(const SoftmaxProblem& p) {
  EMBER_INTERNAL_ASSERT(p.input.device().is_cuda() && p.output.device() == p.input.device() &&
                            p.output.dtype() == p.input.dtype() &&
                            p.outer * p.dim_size * p.inner == p.output.numel() &&
                            (p.direction == Direction::forward ||
                             (p.grad_output.defined() && p.grad_output.dtype() == p.input.dtype())),
                        "softmax (CUDA): inconsistent problem [", p.outer, ", ", p.dim_size, ", ",
                        p.inner, "] for output ", p.output.shape_str());
}

void run_softmax(SoftmaxAlgo algo, const SoftmaxProblem& p, void* workspace) {
  check_problem(p);
  if (p.output.numel() == 0) return;
  DeviceGuard device_guard(p.device());
  cudaStream_t stream = stream_of(p.device());
  const DType dtype = p.input.dtype();
  // warp, smem, cluster and ring are built for the float-computed dtypes only; their applies()
  // keep float64 out.
  auto dispatch_reduced = [&](auto launch) {
    dispatch_floating<FloatingTypes::no_f64>(dtype, "softmax", algo_name(algo), launch);
  };
  auto dispatch_all = [&](auto launch) {
    dispatch_floating(dtype, "softmax", algo_name(algo), launch);
  };
  switch (algo) {
    case SoftmaxAlgo::warp:
      dispatch_reduced([&](auto tag) { launch_warp<decltype(tag)>(p, stream); });
      break;
    case SoftmaxAlgo::smem:
      dispatch_reduced([&](auto tag) { launch_smem<decltype(tag)>(p, stream); });
      break;
    case SoftmaxAlgo::cluster:
      dispatch_reduced([&](auto tag) { launch_cluster<decltype(tag)>(p, stream); });
      break;
    case SoftmaxAlgo::ring:
      dispatch_reduced([&](auto tag) { launch_ring<decltype(tag)>(p, stream); });
      break;
    case SoftmaxAlgo::block:
      dispatch_all([&](auto tag) { launch_block<decltype(tag)>(p, 1, nullptr, stream); });
      break;
    case SoftmaxAlgo::multi_block:
      dispatch_all([&](auto tag) {
        launch_block<decltype(tag)>(p, multi_block_splits(p), workspace, stream);
      });
      break;
    case SoftmaxAlgo::column:
      dispatch_all([&](auto tag) { launch_column<decltype(tag)>(p, stream); });
      break;
  }
}

dispatch::Algorithm<SoftmaxProblem> make_algorithm(SoftmaxAlgo algo) {
  dispatch::Algorithm<SoftmaxProblem> a;
  a.name = algo_name(algo);
  a.deterministic = true;
  a.run = [algo](const SoftmaxProblem& p, void* workspace) { run_softmax(algo, p, workspace); };
  switch (algo) {
    case SoftmaxAlgo::warp:
      a.applies = [](const SoftmaxProblem& p) {
        return p.inner == 1 && p.dim_size <= 32 * kWarpSize && p.input.dtype() != DType::f64;
      };
      // Measured on an H200: best forward for rows <= 1024; in the backward the shared-memory
      // variant was as fast or faster (65536 x 1024: 4.2 vs 3.8 TB/s in bf16).
      a.heuristic_cost = [](const SoftmaxProblem& p) {
        return p.direction == Direction::forward ? 1.0 : 2.0;
      };
      break;
    case SoftmaxAlgo::smem:
      a.applies = [](const SoftmaxProblem& p) {
        return p.inner == 1 && p.input.dtype() != DType::f64 && smem_bytes(p) <= smem_limit(p);
      };
      // Backward rows above 64 KiB (y and dL/dy) leave too few blocks per SM: re-reading from L2
      // was faster (8192 x 32768 bf16: 3.47 vs 3.28 TB/s).
      a.heuristic_cost = [](const SoftmaxProblem& p) {
        if (p.direction == Direction::forward) return 2.0;
        return smem_bytes(p) <= 64 * 1024 ? 1.5 : 3.5;
      };
      break;
    case SoftmaxAlgo::cluster:
      // Thread-block clusters need sm_90; rows of up to 1024 values are the warp kernel's.
      a.applies = [](const SoftmaxProblem& p) {
        return p.inner == 1 && p.input.dtype() != DType::f64 && p.dim_size > 32 * kWarpSize &&
               cluster_blocks(p) <= kClusterMaxBlocks &&
               device_properties(p.device().index).major >= 9;
      };
      // Measured on the H200 (8192 rows of 32768, bench_softmax's softmax_algo rows): first for
      // the f32 backward, whose rows (y and dL/dy) fit no block_smem block and which
      // block_multipass reads twice (4.05 vs 2.61 TB/s). The f32 forward was level with the
      // others (3.10 vs 3.06-3.13 TB/s) while it took two exponentials per element; with one
      // (the others keep two) and 4 rows' segments per SM it is taken for f32 rows too. 16-bit
      // rows hold half the bytes in flight per thread (bf16: 1.89 vs 2.99 TB/s forward, 2.31 vs
      // 3.49 backward) and stay block_smem's. Up to 8192 values block_smem keeps 4 blocks of 512
      // threads per SM without cluster barriers; fewer rows than SMs stay multi_block's. Forward
      // rows that block_tma_ring takes (whole vectors, up to 32768 values) are its (0.8); f32
      // rows of 32769-65536 values, and unaligned ones, stay here.
      a.heuristic_cost = [](const SoftmaxProblem& p) {
        const bool many_rows = p.outer >= device_properties(p.device().index).sm_count;
        const bool wide_f32 = p.input.element_size() == 4 && p.dim_size > 8192;
        if (wide_f32 && many_rows) return 0.9;
        return p.input.element_size() == 4 ? 2.5 : 4.0;
      };
      break;
    case SoftmaxAlgo::ring:
      // Forward only: the backward's two inputs per row meet the bar already (cluster_rows,
      // block_smem: 94% / 83% of copy at 8192 x 32768). TMA bulk copies need whole 16-byte
      // vectors on aligned rows; the ring must hold a row and prefetch at least 2 chunks more;
      // a block counts its stream's chunks in an int.
      a.applies = [](const SoftmaxProblem& p) {
        return p.direction == Direction::forward && p.inner == 1 && p.input.dtype() != DType::f64 &&
               p.dim_size > 32 * kWarpSize && p.dim_size <= kRingMaxDim && rows_vectorizable(p) &&
               device_properties(p.device().index).major >= 9 &&
               ring_chunks_per_row(p) + 2 <= ring_slots(p) &&
               p.outer / device_properties(p.device().index).sm_count < (int64_t(1) << 27);
      };
      // Rows over 8192 values, at least one per SM: the rows where block_smem (one f32 row or
      // two bf16 rows per SM) and cluster_rows (blocks that load, reduce and store in step)
      // leave HBM idle between rows (8192 x 32768: f32 79%, bf16 75% of copy). Measured on an
      // H200 at 8192 x 32768 (session 9 run 5, copy 4252 GB/s): f32 3727 GB/s = 87.7% of copy
      // (cluster_rows 3355, block_smem 3142, block_multipass 2609); bf16 3635 = 85.5%
      // (block_multipass 3434, block_smem 3214, cluster_rows 1823). The first version reached
      // bf16 3482 (run 3): the block's per-row arithmetic, not the loads, bounds 16-bit rows, so
      // the kernel has a packed bf16x2/f16x2 NaN-propagating max, a one-FFMA exponent argument,
      // one barrier per row, a branch-free one-exponential merge, log S only for log_softmax, and
      // the next chunks issued by one lane of each of `chunks` warps (about 600 instructions per
      // thread and row on the bf16 path, from about 860). Shorter rows keep block_smem (4 blocks
      // per SM, no idle threads), fewer rows than SMs multi_block.
      a.heuristic_cost = [](const SoftmaxProblem& p) {
        const bool many_rows = p.outer >= device_properties(p.device().index).sm_count;
        return many_rows && p.dim_size > 8192 ? 0.8 : 2.2;
      };
      break;
    case SoftmaxAlgo::block:
      a.applies = [](const SoftmaxProblem& p) { return p.inner == 1; };
      a.heuristic_cost = [](const SoftmaxProblem&) { return 3.0; };
      break;
    case SoftmaxAlgo::multi_block:
      a.applies = [](const SoftmaxProblem& p) { return multi_block_splits(p) >= 2; };
      a.workspace_bytes = [](const SoftmaxProblem& p) {
        const size_t acc = p.input.dtype() == DType::f64 ? sizeof(double) : sizeof(float);
        const size_t per_split = p.direction == Direction::forward ? 2 * acc : acc;
        return size_t(p.outer) * size_t(multi_block_splits(p)) * per_split;
      };
      // Few long rows: one block per row would leave most of the GPU idle.
      a.heuristic_cost = [](const SoftmaxProblem&) { return 1.2; };
      break;
    case SoftmaxAlgo::column:
      a.applies = [](const SoftmaxProblem& p) { return p.inner > 1; };
      a.heuristic_cost = [](const SoftmaxProblem&) { return 1.0; };
      break;
  }
  return a;
}

// ---- cross-entropy ----------------------------------------------------------------------------

// Pointers and parameters of one call; A is the accumulation type (float, or double for f64),
// also the type of the per-row buffers and the weights.
template <typename A>
struct CeDevice {
  const void* input;
  void* grad;
  const int64_t* target;
  const A* weight;      // null: all ones
  const A* weight_sum;  // null: no weights (the sum is `classes`)
  A* loss;
  A* lse;
  A* target_weight;
  const A* row_scale;
  int64_t row_scale_stride;
  int64_t outer, classes, inner;
  int64_t ignore_index;
  A smoothing;
  bool log_probs;
  int* error_flag;

  __device__ __forceinline__ A weight_of(int64_t c) const { return weight != nullptr ? weight[c] : A(1); }
  __device__ __forceinline__ A weight_total() const {
    return weight_sum != nullptr ? *weight_sum : A(classes);
  }
};

// The class of a row whose target entry is t, or -1 when ignored or out of range (reported).
template <typename A>
__device__ __forceinline__ int64_t checked_target(const CeDevice<A>& a, int64_t t) {
  if (t == a.ignore_index) return -1;
  if (t < 0 || t >= a.classes) {
    report_device_error(a.error_flag, kDeviceErrorClassIndexOutOfRange, t, a.classes);
    return -1;
  }
  return t;
}
template <typename A>
__device__ __forceinline__ int64_t row_target(const CeDevice<A>& a, int64_t r) {
  return checked_target(a, a.target[r]);
}

// Writes the row's outputs from its log-sum-exp, target logit and sum_c w[c] * x[c].
template <typename A>
__device__ __forceinline__ void finish_row(const CeDevice<A>& a, int64_t r, int64_t t, A lse,
                                           A x_t, A weighted_sum) {
  a.lse[r] = lse;
  if (t < 0) {
    a.loss[r] = A(0);
    a.target_weight[r] = A(0);
    return;
  }
  const A wt = a.weight_of(t);
  A loss = (A(1) - a.smoothing) * wt * (lse - x_t);
  if (a.smoothing > A(0)) loss += a.smoothing / A(a.classes) * (a.weight_total() * lse - weighted_sum);
  a.loss[r] = loss;
  a.target_weight[r] = wt;
}

// Threads per block of the cross-entropy row kernels: long rows get 256 threads (not one 1024-
// thread block per row), so several blocks share an SM and one's reduction and per-row tail (the
// target, the target logit, the row's outputs) overlap the others' loads; 2 blocks of 1024 threads
// per SM ran 32768-class bf16 rows at 1.5 TB/s.
constexpr int kCeRowThreads = 256;
// 4 blocks per SM at most 64 registers (4 vectors in flight per thread).
constexpr int kCeRowBlocksPerSm = 4;

// Classes innermost (inner == 1), logits: a group of threads per row, the group a warp
// (rows_per_block = blockDim / 32 rows a block) or the whole block (rows_per_block = 1).
template <typename T>
__global__ void __launch_bounds__(kCeRowThreads, kCeRowBlocksPerSm)
cross_entropy_rows_kernel(CeDevice<OpMath<T>> a, int rows_per_block, bool vec) {
  using A = OpMath<T>;
  __shared__ MaxSum<A> scratch[kWarpSize];
  __shared__ A wx_scratch[kWarpSize];
  const T* x = static_cast<const T*>(a.input);
  const int64_t rows = a.outer, C = a.classes;
  const bool warp_groups = rows_per_block > 1;
  const int64_t group = warp_groups ? threadIdx.x / kWarpSize : 0;
  const int rank = warp_groups ? threadIdx.x % kWarpSize : threadIdx.x;
  const int group_size = warp_groups ? kWarpSize : blockDim.x;
  const bool smoothing = a.smoothing > A(0);
  for (int64_t r0 = int64_t(blockIdx.x) * rows_per_block; r0 < rows;
       r0 += int64_t(gridDim.x) * rows_per_block) {
    const int64_t r = r0 + group;
    if (warp_groups && r >= rows) break;  // warps leave independently; no block barrier below
    const T* row = x + r * C;
    // The target entry is loaded before the row (its latency overlaps the row's loads) and checked
    // after it.
    const int64_t target_entry = rank == 0 ? a.target[r] : 0;
    MaxSum<A> st = maxsum_identity<A>();
    A wx = 0;  // sum_c w[c] * x[c], only with label smoothing
    visit_row<A>(row, 0, C, vec, rank, group_size, [&](const auto& v, int64_t c0) {
      maxsum_add_n(st, v);
      if (smoothing) {
#pragma unroll
        for (int j = 0; j < int(sizeof(v) / sizeof(A)); ++j) wx += a.weight_of(c0 + j) * v[j];
      }
    });
    // The target logit (just read by this group: a cache hit) is loaded before the reduction.
    const int64_t t = rank == 0 ? checked_target(a, target_entry) : -1;
    const A x_t = t >= 0 ? convert<A>(row[t]) : A(0);
    if (warp_groups) {
      st = warp_maxsum(st);
      if (smoothing) wx = warp_reduce(wx, SumOp());
    } else {
      st = block_maxsum(st, scratch);
      if (smoothing) wx = block_reduce(wx, SumOp(), A(0), wx_scratch);
    }
    if (rank == 0) finish_row(a, r, t, st.max + log_acc(st.sum), x_t, wx);
  }
}

// Any layout (element (n, c, s) at (n * C + c) * S + s), and nll_loss: a thread per row r = n*S+s.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
cross_entropy_columns_kernel(CeDevice<OpMath<T>> a) {
  using A = OpMath<T>;
  const T* x = static_cast<const T*>(a.input);
  const int64_t S = a.inner, C = a.classes, rows = a.outer * a.inner;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += step) {
    const int64_t n = r / S;
    const T* row = x + n * C * S + (r - n * S);  // class c at row[c * S]
    const int64_t t = row_target(a, r);
    const A x_t = t >= 0 ? convert<A>(row[t * S]) : A(0);
    if (a.log_probs) {
      finish_row(a, r, t, A(0), x_t, A(0));
      continue;
    }
    MaxSum<A> st = maxsum_identity<A>();
    A wx = 0;
    for (int64_t c = 0; c < C; ++c) {
      const A v = convert<A>(row[c * S]);
      maxsum_add(st, v);
      if (a.smoothing > A(0)) wx += a.weight_of(c) * v;
    }
    finish_row(a, r, t, st.max + log_acc(st.sum), x_t, wx);
  }
}

// What the gradient of every element of row r shares (see cpu_kernels/softmax.cpp for the
// formula).
template <typename A>
struct CeRowCoef {
  int64_t t;  // target class, -1 when ignored
  A scale;    // upstream gradient of the row
  A lse;
  A p_coef;   // (1 - eps) w[t] + eps / C * sum(w)
  A hit;      // (1 - eps) w[t]: subtracted at c == t
};

template <typename A>
__device__ __forceinline__ CeRowCoef<A> row_coefficients(const CeDevice<A>& a, int64_t r) {
  CeRowCoef<A> k;
  k.t = row_target(a, r);
  k.scale = a.row_scale[r * a.row_scale_stride];
  k.lse = a.lse[r];
  const A wt = k.t >= 0 ? a.weight_of(k.t) : A(1);
  k.p_coef = (A(1) - a.smoothing) * wt + a.smoothing / A(a.classes) * a.weight_total();
  k.hit = (A(1) - a.smoothing) * wt;
  return k;
}

template <typename A>
__device__ __forceinline__ A ce_grad(const CeDevice<A>& a, const CeRowCoef<A>& k, bool is_target,
                                     int64_t c, A x) {
  if (k.t < 0) return A(0);
  A d = is_target ? -k.hit : A(0);
  if (!a.log_probs) {
    d += exp_acc(x - k.lse) * k.p_coef;
    if (a.smoothing > A(0)) d -= a.smoothing / A(a.classes) * a.weight_of(c);
  }
  return k.scale * d;
}

// Backward, classes innermost in 16-byte vectors (inner == 1, classes % V == 0, aligned): the
// grid strides over tiles of kCeTileVectors * 256 vectors of one row; a tile's row coefficients
// are loaded once (the same addresses for the whole block), and each thread has kCeTileVectors
// 16-byte loads in flight (one per thread left a 32-class bf16 pass at 3.2 TB/s).
constexpr int kCeTileVectors = 4;
template <typename T>
inline constexpr int kCeTileBlocksPerSm = std::is_same_v<T, double> ? 2 : 4;

template <typename T>
__global__ void __launch_bounds__(kBlockThreads, kCeTileBlocksPerSm<T>)
cross_entropy_backward_rows_kernel(CeDevice<OpMath<T>> a, int64_t tiles_per_row) {
  using A = OpMath<T>;
  constexpr int V = kVec<T>;
  using Vec = AlignedVec<T, V>;
  constexpr int64_t kTile = int64_t(kBlockThreads) * kCeTileVectors;  // vectors
  const int64_t vectors_per_row = a.classes / V;
  const int64_t tiles = a.outer * tiles_per_row;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t r = tile / tiles_per_row;
    const int64_t first = (tile - r * tiles_per_row) * kTile + threadIdx.x;  // vector in the row
    const Vec* xr = static_cast<const Vec*>(a.input) + r * vectors_per_row;
    Vec* gr = static_cast<Vec*>(a.grad) + r * vectors_per_row;
    const CeRowCoef<A> k = row_coefficients(a, r);
    Vec in[kCeTileVectors];
#pragma unroll
    for (int u = 0; u < kCeTileVectors; ++u) {
      const int64_t i = first + int64_t(u) * kBlockThreads;
      if (i < vectors_per_row) in[u] = xr[i];
    }
#pragma unroll
    for (int u = 0; u < kCeTileVectors; ++u) {
      const int64_t i = first + int64_t(u) * kBlockThreads;
      if (i >= vectors_per_row) continue;
      const int64_t target_slot = k.t - i * V;  // in [0, V) when the target is in this vector
      Vec out;
#pragma unroll
      for (int j = 0; j < V; ++j)
        out.v[j] = convert<T>(ce_grad(a, k, target_slot == j, i * V + j, convert<A>(in[u].v[j])));
      gr[i] = out;
    }
  }
}

// Blocks per SM of the flat pass: one element per thread and grid-stride iteration, so memory-
// level parallelism comes from a full SM (2048 threads, 32 registers); f64 needs more registers.
template <typename T>
inline constexpr int kCeBackwardBlocksPerSm = std::is_same_v<T, double> ? 4 : 8;

// Backward, any layout (and rows that are not whole aligned vectors): one flat pass, element
// e -> (n, c, s) with by_a dividing by inner and by_b by classes.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads, kCeBackwardBlocksPerSm<T>)
cross_entropy_backward_flat_kernel(CeDevice<OpMath<T>> a, bool use32, DivideBy by_a,
                                   DivideBy by_b) {
  using A = OpMath<T>;
  const T* x = static_cast<const T*>(a.input);
  T* gx = static_cast<T*>(a.grad);
  const int64_t C = a.classes, S = a.inner;
  const int64_t total = a.outer * C * S;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t e = tid; e < total; e += step) {
    const int64_t q = by_a.div(e, use32), s = e - q * S;
    const int64_t n = by_b.div(q, use32), c = q - n * C;
    const CeRowCoef<A> k = row_coefficients(a, n * S + s);
    gx[e] = convert<T>(ce_grad(a, k, c == k.t, c, convert<A>(x[e])));
  }
}

template <typename A>
CeDevice<A> make_ce_device(const CrossEntropyArgs& a) {
  auto ptr = [](const Tensor& t) -> A* { return t.defined() ? t.data<A>() : nullptr; };
  CeDevice<A> d{};
  d.input = a.input.data_ptr();
  d.grad = a.grad_input.defined() ? a.grad_input.data_ptr() : nullptr;
  d.target = a.target.data<int64_t>();
  d.weight = ptr(a.weight);
  d.weight_sum = a.weight.defined() ? ptr(a.weight_sum) : nullptr;
  d.loss = ptr(a.loss);
  d.lse = ptr(a.lse);
  d.target_weight = ptr(a.target_weight);
  d.row_scale = ptr(a.row_scale);
  d.row_scale_stride = a.row_scale_stride;
  d.outer = a.outer;
  d.classes = a.classes;
  d.inner = a.inner;
  d.ignore_index = a.ignore_index;
  d.smoothing = A(a.label_smoothing);
  d.log_probs = a.input_is_log_probs;
  d.error_flag = device_error_flag(a.input.device().index);
  return d;
}

template <typename T>
void launch_ce_forward(const CrossEntropyArgs& a, cudaStream_t stream) {
  const CeDevice<OpMath<T>> d = make_ce_device<OpMath<T>>(a);
  const int device = a.input.device().index;
  const int64_t rows = a.outer * a.inner;
  if (a.inner == 1 && !a.input_is_log_probs) {
    const int64_t V = kVec<T>;
    const bool vec = a.classes % V == 0 && is_aligned(a.input.data_ptr(), 16);
    if (a.classes <= 32 * kWarpSize) {
      const int rows_per_block = kWarpRowsPerBlock;
      const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
      cross_entropy_rows_kernel<T><<<row_grid(blocks), rows_per_block * kWarpSize, 0, stream>>>(
          d, rows_per_block, vec);
    } else {
      const int threads = std::min(block_threads_for(a.classes, sizeof(T)), kCeRowThreads);
      cross_entropy_rows_kernel<T><<<row_grid(rows), threads, 0, stream>>>(d, 1, vec);
    }
  } else {
    cross_entropy_columns_kernel<T><<<grid_for(rows, device), kBlockThreads, 0, stream>>>(d);
  }
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void launch_ce_backward(const CrossEntropyArgs& a, cudaStream_t stream) {
  const CeDevice<OpMath<T>> d = make_ce_device<OpMath<T>>(a);
  const int64_t V = kVec<T>;
  const int64_t total = a.outer * a.classes * a.inner;
  const bool vec = a.inner == 1 && a.classes % V == 0 && is_aligned(a.input.data_ptr(), 16) &&
                   is_aligned(a.grad_input.data_ptr(), 16);
  const int device = a.input.device().index;
  if (vec) {
    const int64_t tile_vectors = int64_t(kBlockThreads) * kCeTileVectors;
    const int64_t tiles_per_row = (a.classes / V + tile_vectors - 1) / tile_vectors;
    const int64_t tiles = a.outer * tiles_per_row;
    cross_entropy_backward_rows_kernel<T>
        <<<grid_for(tiles * kBlockThreads, device, kCeTileBlocksPerSm<T>), kBlockThreads, 0,
           stream>>>(d, tiles_per_row);
  } else {
    const bool use32 = total <= std::numeric_limits<int32_t>::max();
    const DivideBy by_a(a.inner, use32), by_b(a.classes, use32);
    cross_entropy_backward_flat_kernel<T>
        <<<grid_for(total, device, kCeBackwardBlocksPerSm<T>), kBlockThreads, 0, stream>>>(
            d, use32, by_a, by_b);
  }
  EMBER_CUDA_LAUNCH_CHECK();
}

void cross_entropy_forward_cuda(const CrossEntropyArgs& a) {
  if (a.outer * a.inner == 0) return;
  DeviceGuard device_guard(a.input.device());
  cudaStream_t stream = stream_of(a.input.device());
  dispatch_floating(a.input.dtype(), "cross_entropy",
                    [&](auto tag) { launch_ce_forward<decltype(tag)>(a, stream); });
}

void cross_entropy_backward_cuda(const CrossEntropyArgs& a) {
  if (a.grad_input.numel() == 0) return;
  DeviceGuard device_guard(a.input.device());
  cudaStream_t stream = stream_of(a.input.device());
  dispatch_floating(a.input.dtype(), "cross_entropy",
                    [&](auto tag) { launch_ce_backward<decltype(tag)>(a, stream); });
}

}  // namespace
}  // namespace ember::cuda

namespace ember {
using cuda::SoftmaxAlgo;
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", forward, CUDA, cuda::make_algorithm(SoftmaxAlgo::warp));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", forward, CUDA, cuda::make_algorithm(SoftmaxAlgo::smem));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", forward, CUDA, cuda::make_algorithm(SoftmaxAlgo::cluster));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", forward, CUDA, cuda::make_algorithm(SoftmaxAlgo::ring));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", forward, CUDA, cuda::make_algorithm(SoftmaxAlgo::block));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", forward, CUDA, cuda::make_algorithm(SoftmaxAlgo::multi_block));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", forward, CUDA, cuda::make_algorithm(SoftmaxAlgo::column));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", backward, CUDA, cuda::make_algorithm(SoftmaxAlgo::warp));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", backward, CUDA, cuda::make_algorithm(SoftmaxAlgo::smem));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", backward, CUDA, cuda::make_algorithm(SoftmaxAlgo::cluster));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", backward, CUDA, cuda::make_algorithm(SoftmaxAlgo::block));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", backward, CUDA, cuda::make_algorithm(SoftmaxAlgo::multi_block));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", backward, CUDA, cuda::make_algorithm(SoftmaxAlgo::column));
EMBER_REGISTER_KERNEL(cross_entropy_forward_kernel, CUDA, dispatch::kFloatingTypes,
                      &cuda::cross_entropy_forward_cuda);
EMBER_REGISTER_KERNEL(cross_entropy_backward_kernel, CUDA, dispatch::kFloatingTypes,
                      &cuda::cross_entropy_backward_cuda);
}  // namespace ember
