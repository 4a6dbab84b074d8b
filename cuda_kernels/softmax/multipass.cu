// The softmax algorithms that re-read global memory, registered in softmax.cu (every floating
// dtype, f64 computed in double):
//   block_multipass  one block per row: online max and rescaled sum in the first pass (2 reads + 1
//                    write in all); any length;
//   multi_block      for few very long rows: each row split over several blocks; a first kernel
//                    writes each block's (max, sum) to a workspace, a second merges them and writes
//                    its segment (2 reads + 1 write, the whole GPU busy);
//   column           the reduced dim is not innermost (inner > 1): a thread per column, threads
//                    along the contiguous inner dim, online statistics then a write pass.
#include "ember/cuda_kernels/softmax/launch.cuh"

namespace ember::cuda::softmax_impl {
namespace {

// ---- block per row re-reading global memory (one block per row, or several: multi_block) -----

// mode full: statistics and output of whole rows (gridDim.y == 1, no workspace).
// mode stats: each block (row, blockIdx.y) writes the statistics of its segment to `partials`.
// mode write: each block merges its row's partials and writes its segment.
enum PassMode : int { kPassFull = 0, kPassStats = 1, kPassWrite = 2 };

template <typename T>
__global__ void __launch_bounds__(kMaxBlockThreads)
    softmax_block_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows,
                                 int64_t dim, bool log, bool vec, int mode, int64_t segment,
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

// Backward: the row sum is sum(g * y) (softmax) or sum(g) (log_softmax); partials hold segment
// sums.
template <typename T>
__global__ void __launch_bounds__(kMaxBlockThreads)
    softmax_block_backward_kernel(const T* __restrict__ y, const T* __restrict__ g,
                                  T* __restrict__ dx, int64_t rows, int64_t dim, bool log, bool vec,
                                  int mode, int64_t segment, OpMath<T>* __restrict__ partials) {
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
    transform_row<A>(yr, gr, dx + row * dim, begin, end, vec,
                     [=](A yv, A gv) { return log ? gv - exp_acc(yv) * acc : yv * (gv - acc); });
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

}  // namespace

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

template <typename T>
void launch_column(const SoftmaxProblem& p, cudaStream_t stream) {
  const unsigned grid = grid_for(p.outer * p.inner, p.device().index);
  const T* in = static_cast<const T*>(p.input.data_ptr());
  T* out = static_cast<T*>(p.output.data_ptr());
  if (p.direction == Direction::forward)
    softmax_column_forward_kernel<T>
        <<<grid, kBlockThreads, 0, stream>>>(in, out, p.outer, p.dim_size, p.inner, p.log);
  else
    softmax_column_backward_kernel<T>
        <<<grid, kBlockThreads, 0, stream>>>(in, static_cast<const T*>(p.grad_output.data_ptr()),
                                             out, p.outer, p.dim_size, p.inner, p.log);
  EMBER_CUDA_LAUNCH_CHECK();
}

// The dtypes run_softmax (softmax.cu) launches these algorithms for (f64 included).
template void launch_block<float>(const SoftmaxProblem&, int64_t, void*, cudaStream_t);
template void launch_block<double>(const SoftmaxProblem&, int64_t, void*, cudaStream_t);
template void launch_block<__half>(const SoftmaxProblem&, int64_t, void*, cudaStream_t);
template void launch_block<__nv_bfloat16>(const SoftmaxProblem&, int64_t, void*, cudaStream_t);
template void launch_column<float>(const SoftmaxProblem&, cudaStream_t);
template void launch_column<double>(const SoftmaxProblem&, cudaStream_t);
template void launch_column<__half>(const SoftmaxProblem&, cudaStream_t);
template void launch_column<__nv_bfloat16>(const SoftmaxProblem&, cudaStream_t);

}  // namespace ember::cuda::softmax_impl
