// The cluster_rows softmax algorithm (sm_90), registered in softmax.cu: a cluster of blocks per
// row, the row in registers.
//
// Rows too long for one block's registers are split over a thread-block cluster of up to 8 blocks
// of 256 threads: each block loads its segment into registers with every load in flight at once,
// reduces it, and the blocks exchange their partial statistics through distributed shared memory.
// Global memory is read once and written once (like block_smem) without staging the row in shared
// memory, and a block holds only its segment (8192 values forward, 4096 of y and dL/dy backward),
// so 4 or more blocks of different rows share an SM and one's loads overlap another's reduction
// and stores (block_smem's f32 rows of 32768 values take a whole SM's shared memory).
#include <cooperative_groups.h>

#include "ember/cuda_kernels/softmax/launch.cuh"

namespace ember::cuda::softmax_impl {
namespace {

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

// The cluster of blocks [c * n, (c + 1) * n) (n = the cluster size) takes rows c, c + clusters,
// ...; block rank b of a cluster holds the row's segment [b * 8192, (b + 1) * 8192). Statistics:
// each thread takes the max m_t of its values first (no exponentials), then sum_t = sum exp(x -
// m_t) over them: one exponential per value and no rescaling, where the online update costs a
// rescale whenever a vector raises the max. Slots past the row's end count as -inf. The
// exponentials replace the values in registers (64 registers, no spills), and the output is exp(x -
// m_t) * (exp(m_t - M) / S): one exponential per element in all, where taking exp(x - M) again in
// the output pass would double the kernel's arithmetic. log_softmax keeps the values and writes x -
// (M + log S).
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
                                    T* __restrict__ dx, int64_t rows, int64_t dim, bool log,
                                    bool vec) {
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

}  // namespace

template <typename T>
void launch_cluster(const SoftmaxProblem& p, cudaStream_t stream) {
  const bool vec = rows_vectorizable(p);
  const int64_t blocks = cluster_blocks(p);  // 1..kClusterMaxBlocks (applies())
  const int64_t clusters = std::min<int64_t>(p.outer, std::numeric_limits<int32_t>::max() / blocks);
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

// The dtypes run_softmax (softmax.cu) launches cluster_rows for.
template void launch_cluster<float>(const SoftmaxProblem&, cudaStream_t);
template void launch_cluster<__half>(const SoftmaxProblem&, cudaStream_t);
template void launch_cluster<__nv_bfloat16>(const SoftmaxProblem&, cudaStream_t);

}  // namespace ember::cuda::softmax_impl
