// CUDA indexing kernels behind index_select_kernel, index_add_kernel, gather_kernel and
// scatter_add_kernel (kernel_interface/). Index tensors may be int32 or int64 (a uniform runtime
// switch). An index outside [0, size) does not trap and is not checked on the host (that would
// need a sync): the kernel reports it through the device error flag
// (tensor/runtime/device_errors.h, code kDeviceErrorIndexOutOfRange with the index and the size),
// skips it (index_add, scatter_add) or writes zero (index_select, gather), and check_device_errors
// throws at the next sync point. index_add and scatter_add ACCUMULATE into `out` with atomicAdd
// (native for f16/bf16 on sm_90), so their float results may differ in the last bits from run to
// run. In the algorithm cache's deterministic mode both add in index order instead, bitwise
// repeatably: scatter_add through scatter_reduce_kernel's in-order sum (index_scatter.cu);
// index_add (the backward of embedding, index_select and x.index, and index_put_'s accumulation),
// with few rows x indices, by one thread per output element scanning the index for its row
// (O(rows x indices) cheap broadcast reads), otherwise by sorting the index stably with its
// positions (CUB radix sort) and letting the first thread of each run of equal indices add the
// run's rows in position order.
#include <array>
#include <limits>
#include <vector>

#include "ember/cuda_kernels/common/common.cuh"
#include "ember/cuda_kernels/indexing/indexing_common.cuh"
#include "ember/cuda_kernels/indexing/sort_index.cuh"
#include "ember/dispatch/algo_cache.h"
#include "ember/kernel_interface/elementwise.h"
#include "ember/kernel_interface/indexing.h"
#include "ember/tensor/runtime/device_errors.h"

namespace ember::cuda {
namespace {

// ---- index_select -----------------------------------------------------------------------------

// Rows of `inner` elements are moved as units of U (1 to 16 bytes) chosen on the host, so an
// embedding lookup of 4-byte floats moves 16 bytes per thread when rows allow it.
template <typename U>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    index_select_kernel_impl(U* out, const U* in, const void* index, bool index_is_i64,
                             int64_t in_size, int64_t units_per_row, int64_t total,
                             FastDivmod64 by_units, FastDivmod64 by_nidx, bool use32,
                             int* error_flag) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += step) {
    int64_t row, u, o, i;
    by_units.divmod(t, use32, row, u);
    by_nidx.divmod(row, use32, o, i);
    const int64_t idx = load_index(index, index_is_i64, i);
    out[t] = index_in_range(idx, in_size, error_flag) ? in[(o * in_size + idx) * units_per_row + u]
                                                      : U{};
  }
}

template <typename U>
void launch_index_select(const Tensor& out, const Tensor& in, const Tensor& index, int64_t in_size,
                         int64_t units_per_row, int64_t nidx, int64_t total, cudaStream_t stream) {
  const bool use32 = total <= std::numeric_limits<int32_t>::max();
  const int device = out.device().index;
  index_select_kernel_impl<U><<<grid_for(total, device), kBlockThreads, 0, stream>>>(
      static_cast<U*>(out.data_ptr()), static_cast<const U*>(in.data_ptr()), index.data_ptr(),
      index.dtype() == DType::i64, in_size, units_per_row, total,
      FastDivmod64(units_per_row, use32), FastDivmod64(nidx, use32), use32,
      device_error_flag(device));
  EMBER_CUDA_LAUNCH_CHECK();
}

void index_select_cuda(const Tensor& out, const Tensor& in, const Tensor& index, int64_t outer,
                       int64_t in_size, int64_t inner) {
  check_index_dtype("index_select", index);
  const int64_t nidx = index.numel();
  EMBER_INTERNAL_ASSERT(in.numel() == outer * in_size * inner &&
                            out.numel() == outer * nidx * inner && in.is_contiguous() &&
                            out.is_contiguous() && index.is_contiguous() &&
                            in.dtype() == out.dtype(),
                        "index_select_kernel: in ", in.shape_str(), ", out ", out.shape_str(),
                        ", index ", index.shape_str(), " do not match [", outer, ", ", in_size,
                        ", ", inner, "] / [", outer, ", ", nidx, ", ", inner, "] dense");
  if (out.numel() == 0) return;
  DeviceGuard device_guard(out.device());
  cudaStream_t stream = stream_of(out.device());
  with_row_copy_unit(inner * int64_t(out.element_size()), in.data_ptr(), out.data_ptr(),
                     [&](auto unit, int64_t units_per_row) {
                       launch_index_select<decltype(unit)>(out, in, index, in_size, units_per_row,
                                                           nidx, outer * nidx * units_per_row,
                                                           stream);
                     });
}

// ---- index_add --------------------------------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    index_add_kernel_impl(T* out, const T* src, const void* index, bool index_is_i64,
                          int64_t out_size, int64_t inner, int64_t total, FastDivmod64 by_inner,
                          FastDivmod64 by_nidx, bool use32, int* error_flag) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += step) {
    int64_t row, n, o, i;
    by_inner.divmod(t, use32, row, n);
    by_nidx.divmod(row, use32, o, i);
    const int64_t idx = load_index(index, index_is_i64, i);
    if (index_in_range(idx, out_size, error_flag))
      atomic_accumulate(out + (o * out_size + idx) * inner + n, src[t]);
  }
}

// Deterministic index_add: thread t owns out[o, r, n] (t over outer * out_size * inner) and adds
// src[o, i, n] for every i with index[i] == r, in increasing i. Every thread of a warp reads the
// same index[i] (a broadcast), so the scan costs little beside the matching rows it loads.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    index_add_ordered_kernel(T* out, const T* src, const void* index, bool index_is_i64,
                             int64_t out_size, int64_t nidx, int64_t inner, int64_t total,
                             int* error_flag) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += step) {
    const int64_t n = t % inner, row = t / inner;
    const int64_t r = row % out_size, o = row / out_size;
    T acc = out[t];
    for (int64_t i = 0; i < nidx; ++i) {
      const int64_t idx = load_index(index, index_is_i64, i);
      if (idx == r) acc = acc + src[(o * nidx + i) * inner + n];
      // Report out-of-range indices once (from the thread of row 0, column 0), as the atomic path.
      if (r == 0 && n == 0 && o == 0) (void)index_in_range(idx, out_size, error_flag);
    }
    out[t] = acc;
  }
}

// Deterministic index_add for many rows x indices: the index is sorted stably together with the
// positions 0..nidx-1 (CUB radix sort), so each run of equal indices lists its positions in
// increasing order; the thread of (o, first position of a run, n) adds the run's src rows into out
// in that order, which is the order the row-scan kernel and the CPU add them in.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    index_add_sorted_runs_kernel(T* out, const T* src, const int64_t* sorted_index,
                                 const int64_t* sorted_positions, int64_t out_size, int64_t nidx,
                                 int64_t inner, int64_t total, int* error_flag) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += step) {
    const int64_t n = t % inner, row = t / inner;
    const int64_t p = row % nidx, o = row / nidx;
    const int64_t idx = sorted_index[p];
    if (p > 0 && sorted_index[p - 1] == idx) continue;  // not the first of its run
    if (!index_in_range(idx, out_size, error_flag)) continue;
    T* dst = out + (o * out_size + idx) * inner + n;
    T acc = *dst;
    for (int64_t q = p; q < nidx && sorted_index[q] == idx; ++q)
      acc = acc + src[(o * nidx + sorted_positions[q]) * inner + n];
    *dst = acc;
  }
}

// Rows x indices up to which the row-scan kernel serves deterministic mode.
constexpr int64_t kRowScanLimit = int64_t(1) << 24;

void index_add_cuda(const Tensor& out, const Tensor& index, const Tensor& src, int64_t outer,
                    int64_t out_size, int64_t inner) {
  check_index_dtype("index_add", index);
  const int64_t nidx = index.numel();
  EMBER_INTERNAL_ASSERT(out.numel() == outer * out_size * inner &&
                            src.numel() == outer * nidx * inner && out.is_contiguous() &&
                            src.is_contiguous() && index.is_contiguous() &&
                            out.dtype() == src.dtype(),
                        "index_add_kernel: out ", out.shape_str(), ", src ", src.shape_str(),
                        ", index ", index.shape_str(), " do not match [", outer, ", ", out_size,
                        ", ", inner, "] / [", outer, ", ", nidx, ", ", inner, "] dense");
  const int64_t total = src.numel();
  if (total == 0) return;
  DeviceGuard device_guard(out.device());
  cudaStream_t stream = stream_of(out.device());
  const int device = out.device().index;
  const bool use32 = total <= std::numeric_limits<int32_t>::max();
  int* flag = device_error_flag(device);
  dispatch_all_dtypes(out.dtype(), "index_add_kernel", [&](auto tag) {
    using scalar_t = decltype(tag);
    if constexpr (std::is_same_v<scalar_t, uint8_t> || std::is_same_v<scalar_t, bool>) {
      EMBER_THROW(not_supported, "index_add: dtype ", dtype_name(out.dtype()),
                  " is not supported on CUDA; use a floating dtype, int32 or int64");
    } else if (dispatch::current_algo_settings().mode == dispatch::AlgoMode::deterministic) {
      if (out_size * nidx <= kRowScanLimit) {
        const int64_t out_total = out.numel();
        index_add_ordered_kernel<scalar_t>
            <<<grid_for(out_total, device), kBlockThreads, 0, stream>>>(
                static_cast<scalar_t*>(out.data_ptr()),
                static_cast<const scalar_t*>(src.data_ptr()), index.data_ptr(),
                index.dtype() == DType::i64, out_size, nidx, inner, out_total, flag);
      } else {
        int64_t *sorted_index = nullptr, *sorted_positions = nullptr;
        Tensor workspace = sort_index_with_positions(index, stream, sorted_index, sorted_positions);
        index_add_sorted_runs_kernel<scalar_t>
            <<<grid_for(total, device), kBlockThreads, 0, stream>>>(
                static_cast<scalar_t*>(out.data_ptr()),
                static_cast<const scalar_t*>(src.data_ptr()), sorted_index, sorted_positions,
                out_size, nidx, inner, total, flag);
      }
      EMBER_CUDA_LAUNCH_CHECK();
    } else {
      index_add_kernel_impl<scalar_t><<<grid_for(total, device), kBlockThreads, 0, stream>>>(
          static_cast<scalar_t*>(out.data_ptr()), static_cast<const scalar_t*>(src.data_ptr()),
          index.data_ptr(), index.dtype() == DType::i64, out_size, inner, total,
          FastDivmod64(inner, use32), FastDivmod64(nidx, use32), use32, flag);
      EMBER_CUDA_LAUNCH_CHECK();
    }
  });
}

// ---- gather / scatter_add ---------------------------------------------------------------------

// S moves the element's bits (uint8..uint64).
template <typename S>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    gather_kernel_impl(OffsetCalc<3> oc, S* out, const S* in, const void* index, bool index_is_i64,
                       int64_t n, int64_t dim_size, int64_t in_dim_stride, int* error_flag) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += step) {
    int64_t off[3];  // index, in (without dim), out
    oc.get(t, off);
    const int64_t idx = load_index(index, index_is_i64, off[0]);
    out[off[2]] =
        index_in_range(idx, dim_size, error_flag) ? in[off[1] + idx * in_dim_stride] : S{};
  }
}

template <typename S>
void launch_gather(const OffsetCalc<3>& oc, const Tensor& out, const Tensor& in,
                   const Tensor& index, int64_t dim, cudaStream_t stream) {
  const int device = out.device().index;
  gather_kernel_impl<S><<<grid_for(index.numel(), device), kBlockThreads, 0, stream>>>(
      oc, static_cast<S*>(out.data_ptr()), static_cast<const S*>(in.data_ptr()), index.data_ptr(),
      index.dtype() == DType::i64, index.numel(), indexed_extent(in, dim), indexed_stride(in, dim),
      device_error_flag(device));
  EMBER_CUDA_LAUNCH_CHECK();
}

void gather_cuda(const Tensor& out, const Tensor& in, const Tensor& index, int64_t dim) {
  check_gather_shapes("gather", index, in, out, dim);
  if (index.numel() == 0) return;
  DeviceGuard device_guard(out.device());
  cudaStream_t stream = stream_of(out.device());
  const OffsetCalc<3> oc = make_gather_offsets("gather", index, in, out, dim);
  switch (out.element_size()) {
    case 1:
      launch_gather<uint8_t>(oc, out, in, index, dim, stream);
      break;
    case 2:
      launch_gather<uint16_t>(oc, out, in, index, dim, stream);
      break;
    case 4:
      launch_gather<uint32_t>(oc, out, in, index, dim, stream);
      break;
    case 8:
      launch_gather<uint64_t>(oc, out, in, index, dim, stream);
      break;
    default:
      EMBER_INTERNAL_ASSERT(false, "gather_kernel: element size ", out.element_size());
  }
}

template <typename T>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    scatter_add_kernel_impl(OffsetCalc<3> oc, T* out, const T* src, const void* index,
                            bool index_is_i64, int64_t n, int64_t dim_size, int64_t out_dim_stride,
                            int* error_flag) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += step) {
    int64_t off[3];  // index, out (without dim), src
    oc.get(t, off);
    const int64_t idx = load_index(index, index_is_i64, off[0]);
    if (index_in_range(idx, dim_size, error_flag))
      atomic_accumulate(out + off[1] + idx * out_dim_stride, src[off[2]]);
  }
}

void scatter_add_cuda(const Tensor& out, const Tensor& index, const Tensor& src, int64_t dim) {
  check_gather_shapes("scatter_add", index, out, src, dim);
  if (index.numel() == 0) return;
  // Deterministic mode: scatter_reduce's in-order sum (index_scatter.cu), through its table.
  if (dispatch::current_algo_settings().mode == dispatch::AlgoMode::deterministic &&
      out.is_contiguous())
    return scatter_reduce_kernel().get(DeviceType::CUDA, out.dtype())(out, index, src, dim,
                                                                      ScatterReduce::sum);
  DeviceGuard device_guard(out.device());
  cudaStream_t stream = stream_of(out.device());
  const int device = out.device().index;
  const OffsetCalc<3> oc = make_gather_offsets("scatter_add", index, out, src, dim);
  int* flag = device_error_flag(device);
  dispatch_all_dtypes(out.dtype(), "scatter_add_kernel", [&](auto tag) {
    using scalar_t = decltype(tag);
    if constexpr (std::is_same_v<scalar_t, uint8_t> || std::is_same_v<scalar_t, bool>) {
      EMBER_THROW(not_supported, "scatter_add: dtype ", dtype_name(out.dtype()),
                  " is not supported on CUDA; use a floating dtype, int32 or int64");
    } else {
      scatter_add_kernel_impl<scalar_t>
          <<<grid_for(index.numel(), device), kBlockThreads, 0, stream>>>(
              oc, static_cast<scalar_t*>(out.data_ptr()),
              static_cast<const scalar_t*>(src.data_ptr()), index.data_ptr(),
              index.dtype() == DType::i64, index.numel(), indexed_extent(out, dim),
              indexed_stride(out, dim), flag);
      EMBER_CUDA_LAUNCH_CHECK();
    }
  });
}

}  // namespace
}  // namespace ember::cuda

namespace ember {
namespace {
constexpr std::initializer_list<DType> kAtomicAddTypes = {DType::f32,  DType::f64, DType::f16,
                                                          DType::bf16, DType::i32, DType::i64};
}  // namespace
EMBER_REGISTER_KERNEL(index_select_kernel, CUDA, dispatch::kAllTypes, &cuda::index_select_cuda);
EMBER_REGISTER_KERNEL(index_add_kernel, CUDA, kAtomicAddTypes, &cuda::index_add_cuda);
EMBER_REGISTER_KERNEL(gather_kernel, CUDA, dispatch::kAllTypes, &cuda::gather_cuda);
EMBER_REGISTER_KERNEL(scatter_add_kernel, CUDA, kAtomicAddTypes, &cuda::scatter_add_cuda);
}  // namespace ember
