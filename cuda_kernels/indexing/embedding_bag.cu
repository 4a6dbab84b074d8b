// CUDA embedding_bag kernels behind embedding_bag_forward_kernel / embedding_bag_backward_kernel
// (kernel_interface/embedding_bag.h). Blocks hold kBlockThreads threads as [bags_per_block,
// features_per_bag] (features_per_bag a power of two covering the row, 4 to 128): the threads of
// a bag read its indices as broadcasts and the weight rows coalesced, accumulating in float
// (double for f64) without materializing the gathered rows. The backward ACCUMULATES into the
// zero-filled grad_weight: with atomics (whose float sums may differ in the last bits from run to
// run) unless the algorithm cache is in deterministic mode, where sum / mean sort the indices
// with their positions and let one thread per (run of equal indices, feature) add the run in
// entry order, and max walks the bags in order per feature. An index outside [0, rows) is
// reported through the device error flag and skipped.
#include <limits>

#include "ember/cuda_kernels/common/common.cuh"
#include "ember/cuda_kernels/indexing/indexing_common.cuh"
#include "ember/cuda_kernels/indexing/sort_index.cuh"
#include "ember/dispatch/algo_cache.h"
#include "ember/kernel_interface/embedding_bag.h"
#include "ember/tensor/runtime/device_errors.h"

namespace ember::cuda {
namespace {

// The problem as the kernels see it (pointers typed by the launcher).
template <typename T>
struct BagProblem {
  const T* weight;      // [rows, dim]
  const void* indices;  // [num_indices], int32 or int64
  bool indices_are_i64;
  const int64_t* bounds;        // [num_bags + 1]
  const T* per_sample_weights;  // [num_indices] or null
  int64_t num_indices, num_bags, rows, dim, padding_idx;
  EmbeddingBagMode mode;
  int* error_flag;

  __device__ int64_t clamp_bound(int64_t v) const {
    return v < 0 ? 0 : (v > num_indices ? num_indices : v);
  }
  __device__ int64_t begin(int64_t b) const { return clamp_bound(bounds[b]); }
  __device__ int64_t end(int64_t b) const {
    const int64_t e = clamp_bound(bounds[b + 1]), s = begin(b);
    return e > s ? e : s;
  }
  // The row of entry i, or -1 when it is padding or out of range (reported).
  __device__ int64_t row_of(int64_t i) const {
    const int64_t r = load_index(indices, indices_are_i64, i);
    if (r == padding_idx) return -1;
    return index_in_range(r, rows, error_flag) ? r : -1;
  }
  // The bag holding entry `pos` (bounds non-decreasing), or -1 when none does.
  __device__ int64_t bag_of(int64_t pos) const {
    int64_t lo = 0, hi = num_bags;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (begin(mid) <= pos)
        lo = mid + 1;
      else
        hi = mid;
    }
    return lo > 0 && pos < end(lo - 1) ? lo - 1 : -1;
  }
};

template <typename T>
BagProblem<T> bag_problem(const EmbeddingBagArgs& a) {
  return BagProblem<T>{static_cast<const T*>(a.weight.data_ptr()),
                       a.indices.data_ptr(),
                       a.indices.dtype() == DType::i64,
                       a.bounds.data<int64_t>(),
                       a.per_sample_weights.defined()
                           ? static_cast<const T*>(a.per_sample_weights.data_ptr())
                           : nullptr,
                       a.indices.numel(),
                       a.num_bags,
                       a.weight.size(0),
                       a.weight.size(1),
                       a.padding_idx,
                       a.mode,
                       device_error_flag(a.weight.device().index)};
}

// Threads per bag: the power of two covering the row, 4 to 128.
struct BagLaunch {
  dim3 block, grid;
};
BagLaunch bag_launch(int64_t num_bags, int64_t dim, int device) {
  int per_bag = 4;
  while (per_bag < 128 && per_bag < dim) per_bag *= 2;
  const int bags_per_block = kBlockThreads / per_bag;
  const int64_t blocks = (num_bags + bags_per_block - 1) / bags_per_block;
  const int64_t cap = int64_t(device_properties(device).sm_count) * 8;
  return {dim3(unsigned(per_bag), unsigned(bags_per_block)),
          dim3(unsigned(std::max<int64_t>(1, std::min(blocks, cap))))};
}

// Entries a forward thread loads ahead.
constexpr int kUnroll = 4;

template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    embedding_bag_forward_impl(BagProblem<T> p, T* out, int64_t* bag_count, int64_t* max_rows) {
  using A = OpMath<T>;
  for (int64_t b = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; b < p.num_bags;
       b += int64_t(gridDim.x) * blockDim.y) {
    const int64_t first = p.begin(b), last = p.end(b);
    for (int64_t f = threadIdx.x; f < p.dim; f += blockDim.x) {
      A acc = A(0);
      int64_t n = 0, arg = -1;
      // kUnroll entries' indices, then their rows, are loaded before any is combined (more loads
      // in flight); they are combined in entry order, as the CPU does.
      for (int64_t i0 = first; i0 < last; i0 += kUnroll) {
        int64_t r[kUnroll];
        A v[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) r[k] = i0 + k < last ? p.row_of(i0 + k) : -1;
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
          v[k] = r[k] >= 0 ? convert<A>(p.weight[r[k] * p.dim + f]) : A(0);
          if (p.per_sample_weights && r[k] >= 0)
            v[k] = convert<A>(p.per_sample_weights[i0 + k]) * v[k];
        }
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
          if (r[k] < 0) continue;
          if (p.mode == EmbeddingBagMode::max) {
            if (n == 0 || v[k] > acc) {
              acc = v[k];
              arg = r[k];
            }
          } else {
            acc += v[k];
          }
          ++n;
        }
      }
      if (p.mode == EmbeddingBagMode::mean && n > 0) acc *= A(1) / A(n);
      out[b * p.dim + f] = convert<T>(acc);
      if (max_rows) max_rows[b * p.dim + f] = arg;
      if (f == 0) bag_count[b] = n;
    }
  }
}

// Sum / mean with atomics: thread (bag, feature) adds its gradient to every entry's row.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    embedding_bag_backward_atomic(BagProblem<T> p, const T* grad, const int64_t* bag_count,
                                  T* grad_weight) {
  using A = OpMath<T>;
  for (int64_t b = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; b < p.num_bags;
       b += int64_t(gridDim.x) * blockDim.y) {
    if (bag_count[b] == 0) continue;
    const A bag_scale = p.mode == EmbeddingBagMode::mean ? A(1) / A(bag_count[b]) : A(1);
    const int64_t first = p.begin(b), last = p.end(b);
    for (int64_t f = threadIdx.x; f < p.dim; f += blockDim.x) {
      const A g = convert<A>(grad[b * p.dim + f]) * bag_scale;
      for (int64_t i = first; i < last; ++i) {
        const int64_t r = p.row_of(i);
        if (r < 0) continue;
        const A s = p.per_sample_weights ? convert<A>(p.per_sample_weights[i]) : A(1);
        atomic_accumulate(grad_weight + r * p.dim + f, convert<T>(g * s));
      }
    }
  }
}

// Sum / mean, deterministic: thread (first position of a run of equal sorted indices, feature)
// adds the run's gradients in entry order, then writes its row element once.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    embedding_bag_backward_sorted(BagProblem<T> p, const T* grad, const int64_t* bag_count,
                                  const int64_t* sorted_index, const int64_t* sorted_positions,
                                  T* grad_weight, int64_t total) {
  using A = OpMath<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += step) {
    const int64_t f = t % p.dim, q0 = t / p.dim;
    const int64_t r = sorted_index[q0];
    if (q0 > 0 && sorted_index[q0 - 1] == r) continue;  // not the first of its run
    if (r == p.padding_idx || !index_in_range(r, p.rows, p.error_flag)) continue;
    A acc = A(0);
    for (int64_t q = q0; q < p.num_indices && sorted_index[q] == r; ++q) {
      const int64_t pos = sorted_positions[q], b = p.bag_of(pos);
      if (b < 0) continue;
      A s = p.mode == EmbeddingBagMode::mean ? A(1) / A(bag_count[b]) : A(1);
      if (p.per_sample_weights) s *= convert<A>(p.per_sample_weights[pos]);
      acc += convert<A>(grad[b * p.dim + f]) * s;
    }
    T* dst = grad_weight + r * p.dim + f;
    *dst = convert<T>(convert<A>(*dst) + acc);
  }
}

// Max with atomics: each element goes to the row that gave its maximum.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    embedding_bag_backward_max_atomic(const T* grad, const int64_t* max_rows, T* grad_weight,
                                      int64_t dim, int64_t total) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += step) {
    const int64_t r = max_rows[t];
    if (r >= 0) atomic_accumulate(grad_weight + r * dim + t % dim, grad[t]);
  }
}

// Max, deterministic: one thread per feature walks the bags in order.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    embedding_bag_backward_max_ordered(const T* grad, const int64_t* max_rows, T* grad_weight,
                                       int64_t dim, int64_t num_bags) {
  using A = OpMath<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t f = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; f < dim; f += step)
    for (int64_t b = 0; b < num_bags; ++b) {
      const int64_t r = max_rows[b * dim + f];
      if (r < 0) continue;
      T* dst = grad_weight + r * dim + f;
      *dst = convert<T>(convert<A>(*dst) + convert<A>(grad[b * dim + f]));
    }
}

// d bag / d per_sample_weights[i] = <grad[bag], weight[row]>: one warp per entry, the lanes
// splitting the row, reduced by shuffles in a fixed order.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    embedding_bag_per_sample_weights_grad(BagProblem<T> p, const T* grad, T* grad_psw) {
  using A = OpMath<T>;
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t i = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; i < p.num_indices;
       i += warps) {
    const int64_t b = p.bag_of(i);
    if (b < 0) continue;
    const int64_t r = p.row_of(i);
    A dot = A(0);
    if (r >= 0)
      for (int64_t f = lane; f < p.dim; f += 32)
        dot += convert<A>(grad[b * p.dim + f]) * convert<A>(p.weight[r * p.dim + f]);
    for (int offset = 16; offset > 0; offset /= 2)
      dot += __shfl_down_sync(0xffffffffu, dot, offset);
    if (lane == 0) grad_psw[i] = convert<T>(dot);
  }
}

void check_args(const char* op, const EmbeddingBagArgs& a) {
  check_index_dtype(op, a.indices);
  EMBER_INTERNAL_ASSERT(a.weight.dim() == 2 && a.weight.is_contiguous() &&
                            a.indices.is_contiguous() && a.bounds.is_contiguous() &&
                            a.bounds.dtype() == DType::i64 && a.bounds.numel() == a.num_bags + 1,
                        op, ": weight ", a.weight.shape_str(), ", indices ", a.indices.shape_str(),
                        ", bounds ", a.bounds.shape_str(), " for ", a.num_bags,
                        " bags do not match");
}

void embedding_bag_forward_cuda(const EmbeddingBagArgs& a) {
  check_args("embedding_bag_forward_kernel", a);
  if (a.num_bags == 0) return;
  DeviceGuard device_guard(a.weight.device());
  cudaStream_t stream = stream_of(a.weight.device());
  const BagLaunch launch = bag_launch(a.num_bags, a.weight.size(1), a.weight.device().index);
  dispatch_floating(a.weight.dtype(), "embedding_bag", [&](auto tag) {
    using T = decltype(tag);
    embedding_bag_forward_impl<T><<<launch.grid, launch.block, 0, stream>>>(
        bag_problem<T>(a), static_cast<T*>(a.output.data_ptr()), a.bag_count.data<int64_t>(),
        a.mode == EmbeddingBagMode::max ? a.max_rows.data<int64_t>() : nullptr);
    EMBER_CUDA_LAUNCH_CHECK();
  });
}

void embedding_bag_backward_cuda(const EmbeddingBagArgs& a) {
  check_args("embedding_bag_backward_kernel", a);
  if (a.num_bags == 0) return;
  DeviceGuard device_guard(a.weight.device());
  cudaStream_t stream = stream_of(a.weight.device());
  const int device = a.weight.device().index;
  const int64_t dim = a.weight.size(1);
  const bool deterministic =
      dispatch::current_algo_settings().mode == dispatch::AlgoMode::deterministic;
  dispatch_floating(a.weight.dtype(), "embedding_bag", [&](auto tag) {
    using T = decltype(tag);
    const BagProblem<T> p = bag_problem<T>(a);
    const T* grad = static_cast<const T*>(a.grad_output.data_ptr());
    T* grad_weight = static_cast<T*>(a.grad_weight.data_ptr());
    const int64_t* count = a.bag_count.data<int64_t>();
    if (a.mode == EmbeddingBagMode::max) {
      const int64_t* max_rows = a.max_rows.data<int64_t>();
      if (deterministic)
        embedding_bag_backward_max_ordered<T><<<grid_for(dim, device), kBlockThreads, 0, stream>>>(
            grad, max_rows, grad_weight, dim, a.num_bags);
      else
        embedding_bag_backward_max_atomic<T>
            <<<grid_for(a.num_bags * dim, device), kBlockThreads, 0, stream>>>(
                grad, max_rows, grad_weight, dim, a.num_bags * dim);
      EMBER_CUDA_LAUNCH_CHECK();
    } else if (deterministic && a.indices.numel() > 0) {
      int64_t *sorted_index = nullptr, *sorted_positions = nullptr;
      Tensor workspace =
          sort_index_with_positions(a.indices, stream, sorted_index, sorted_positions);
      const int64_t total = a.indices.numel() * dim;
      embedding_bag_backward_sorted<T><<<grid_for(total, device), kBlockThreads, 0, stream>>>(
          p, grad, count, sorted_index, sorted_positions, grad_weight, total);
      EMBER_CUDA_LAUNCH_CHECK();
    } else {
      const BagLaunch launch = bag_launch(a.num_bags, dim, device);
      embedding_bag_backward_atomic<T>
          <<<launch.grid, launch.block, 0, stream>>>(p, grad, count, grad_weight);
      EMBER_CUDA_LAUNCH_CHECK();
    }
    if (a.grad_per_sample_weights.defined() && a.indices.numel() > 0) {
      const int64_t warps_per_block = kBlockThreads / 32;
      const int64_t blocks = (a.indices.numel() + warps_per_block - 1) / warps_per_block;
      const int64_t cap = int64_t(device_properties(device).sm_count) * 8;
      embedding_bag_per_sample_weights_grad<T>
          <<<unsigned(std::min(blocks, cap)), kBlockThreads, 0, stream>>>(
              p, grad, static_cast<T*>(a.grad_per_sample_weights.data_ptr()));
      EMBER_CUDA_LAUNCH_CHECK();
    }
  });
}

}  // namespace
}  // namespace ember::cuda

namespace ember {
EMBER_REGISTER_KERNEL(embedding_bag_forward_kernel, CUDA, dispatch::kFloatingTypes,
                      &cuda::embedding_bag_forward_cuda);
EMBER_REGISTER_KERNEL(embedding_bag_backward_kernel, CUDA, dispatch::kFloatingTypes,
                      &cuda::embedding_bag_backward_cuda);
}  // namespace ember
