// The softmax algorithms that read a row once from global memory within one warp or one block:
//   warp_per_row  rows of <= 1024 values held in registers, one warp per row (4 rows a block):
//                 1 read + 1 write (forward), 2 reads + 1 write (backward);
//   block_smem    one block per row, the row (backward: y and dL/dy) cached in shared memory
//                 while it is read, so global memory is read once.
// Registered in softmax.cu.
#include "ember/cuda_kernels/softmax/launch.cuh"

namespace ember::cuda::softmax_impl {
namespace {

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
__global__ void __launch_bounds__(kWarpRowsPerBlock* kWarpSize)
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
__global__ void __launch_bounds__(kWarpRowsPerBlock* kWarpSize)
    softmax_warp_backward_kernel(const T* __restrict__ y, const T* __restrict__ g,
                                 T* __restrict__ dx, int64_t rows, int dim, bool log, bool vec) {
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
    softmax_smem_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows,
                                int64_t dim, bool log, bool vec) {
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
    softmax_smem_backward_kernel(const T* __restrict__ y, const T* __restrict__ g,
                                 T* __restrict__ dx, int64_t rows, int64_t dim, bool log,
                                 bool vec) {
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

}  // namespace

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
      softmax_warp_forward_kernel<T, 4>
          <<<grid, threads, 0, stream>>>(in, out, p.outer, dim, p.log, vec);
    else
      softmax_warp_forward_kernel<T, 32>
          <<<grid, threads, 0, stream>>>(in, out, p.outer, dim, p.log, vec);
  } else {
    const T* g = static_cast<const T*>(p.grad_output.data_ptr());
    if (dim <= 4 * kWarpSize)
      softmax_warp_backward_kernel<T, 4>
          <<<grid, threads, 0, stream>>>(in, g, out, p.outer, dim, p.log, vec);
    else
      softmax_warp_backward_kernel<T, 32>
          <<<grid, threads, 0, stream>>>(in, g, out, p.outer, dim, p.log, vec);
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
    softmax_smem_forward_kernel<T>
        <<<row_grid(p.outer), threads, bytes, stream>>>(in, out, p.outer, p.dim_size, p.log, vec);
  } else {
    opt_in_max_dynamic_shared_memory<softmax_smem_backward_kernel<T>>(device);
    softmax_smem_backward_kernel<T><<<row_grid(p.outer), threads, bytes, stream>>>(
        in, static_cast<const T*>(p.grad_output.data_ptr()), out, p.outer, p.dim_size, p.log, vec);
  }
  EMBER_CUDA_LAUNCH_CHECK();
}

// The dtypes run_softmax (softmax.cu) launches these algorithms for.
template void launch_warp<float>(const SoftmaxProblem&, cudaStream_t);
template void launch_warp<__half>(const SoftmaxProblem&, cudaStream_t);
template void launch_warp<__nv_bfloat16>(const SoftmaxProblem&, cudaStream_t);
template void launch_smem<float>(const SoftmaxProblem&, cudaStream_t);
template void launch_smem<__half>(const SoftmaxProblem&, cudaStream_t);
template void launch_smem<__nv_bfloat16>(const SoftmaxProblem&, cudaStream_t);

}  // namespace ember::cuda::softmax_impl
