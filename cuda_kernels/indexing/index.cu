// CUDA indexing kernels behind index_select_kernel, index_add_kernel, gather_kernel and
// scatter_add_kernel (kernel_interface/). Index tensors may be int32 or int64 (a uniform runtime
// switch). An index outside [0, size) does not trap and is not checked on the host (that would
// need a sync): the kernel reports it through the device error flag
// (tensor/runtime/device_errors.h, code kDeviceErrorIndexOutOfRange with the index and the size),
// skips it (index_add, scatter_add) or writes zero (index_select, gather), and check_device_errors
// throws at the next sync point. index_add and scatter_add ACCUMULATE into `out` with atomicAdd
// (native for f16/bf16 on sm_90), so their float results may differ in the last bits from run to
// run. In the algorithm cache's deterministic mode index_add (the backward of embedding and
// index_select) adds in index order instead, bitwise repeatably: with few rows x indices, one
// thread per output element scans the index for its row (O(rows x indices) cheap broadcast reads);
// otherwise one thread per output column walks the indices in order (O(indices x columns) work,
// latency-bound in the indices).
#include <array>
#include <limits>
#include <vector>

#include "ember/cuda_kernels/common/common.cuh"
#include "ember/dispatch/algo_cache.h"
#include "ember/kernel_interface/elementwise.h"
#include "ember/kernel_interface/indexing.h"
#include "ember/tensor/runtime/device_errors.h"

namespace ember::cuda {
namespace {

__device__ __forceinline__ int64_t load_index(const void* index, bool index_is_i64, int64_t i) {
  return index_is_i64 ? static_cast<const int64_t*>(index)[i]
                      : int64_t(static_cast<const int32_t*>(index)[i]);
}

__device__ __forceinline__ bool index_in_range(int64_t idx, int64_t size, int* error_flag) {
  if (idx >= 0 && idx < size) return true;
  report_device_error(error_flag, kDeviceErrorIndexOutOfRange, idx, size);
  return false;
}

__device__ __forceinline__ void atomic_accumulate(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_accumulate(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_accumulate(__half* p, __half v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_accumulate(__nv_bfloat16* p, __nv_bfloat16 v) {
  atomicAdd(p, v);
}
__device__ __forceinline__ void atomic_accumulate(int32_t* p, int32_t v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_accumulate(int64_t* p, int64_t v) {
  // Two's-complement addition is the same operation on the unsigned bits.
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

void check_index_dtype(const char* op, const Tensor& index) {
  EMBER_CHECK(index.dtype() == DType::i64 || index.dtype() == DType::i32, op,
              ": index tensor has dtype ", dtype_name(index.dtype()),
              "; indices must be int64 or int32 (convert with .to(ember::DType::i64))");
}

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
  const int64_t row_bytes = inner * int64_t(out.element_size());
  int64_t unit = 16;
  while (unit > 1 && (row_bytes % unit != 0 || !is_aligned(in.data_ptr(), size_t(unit)) ||
                      !is_aligned(out.data_ptr(), size_t(unit))))
    unit /= 2;
  const int64_t units_per_row = row_bytes / unit;
  const int64_t total = outer * nidx * units_per_row;
  switch (unit) {
    case 16:
      launch_index_select<uint4>(out, in, index, in_size, units_per_row, nidx, total, stream);
      break;
    case 8:
      launch_index_select<uint64_t>(out, in, index, in_size, units_per_row, nidx, total, stream);
      break;
    case 4:
      launch_index_select<uint32_t>(out, in, index, in_size, units_per_row, nidx, total, stream);
      break;
    case 2:
      launch_index_select<uint16_t>(out, in, index, in_size, units_per_row, nidx, total, stream);
      break;
    default:
      launch_index_select<uint8_t>(out, in, index, in_size, units_per_row, nidx, total, stream);
      break;
  }
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

// Deterministic index_add for many rows: thread t owns column (o, n) of out and walks i in order,
// out[o, index[i], n] += src[o, i, n].
template <typename T>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    index_add_column_walk_kernel(T* out, const T* src, const void* index, bool index_is_i64,
                                 int64_t out_size, int64_t nidx, int64_t inner, int64_t columns,
                                 int* error_flag) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < columns; t += step) {
    const int64_t n = t % inner, o = t / inner;
    for (int64_t i = 0; i < nidx; ++i) {
      const int64_t idx = load_index(index, index_is_i64, i);
      if (!index_in_range(idx, out_size, error_flag)) continue;
      T* dst = out + (o * out_size + idx) * inner + n;
      *dst = *dst + src[(o * nidx + i) * inner + n];
    }
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
        const int64_t columns = outer * inner;
        index_add_column_walk_kernel<scalar_t>
            <<<grid_for(columns, device), kBlockThreads, 0, stream>>>(
                static_cast<scalar_t*>(out.data_ptr()),
                static_cast<const scalar_t*>(src.data_ptr()), index.data_ptr(),
                index.dtype() == DType::i64, out_size, nidx, inner, columns, flag);
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

// The loop over index's shape as an OffsetCalc in ELEMENTS with operands (index, data, other):
// `data` is the tensor indexed along `dim` (its stride there zeroed: the index supplies it),
// `other` the tensor that shares index's shape. Size-1 dims are dropped and neighbours that are
// contiguous for all three are merged, so only unusual layouts exceed kMaxIterDims.
OffsetCalc<3> make_gather_offsets(const char* op, const Tensor& index, const Tensor& data,
                                  const Tensor& other, int64_t dim) {
  std::vector<int64_t> sizes;
  std::vector<std::array<int64_t, 3>> strides;
  for (int64_t d = 0; d < index.dim(); ++d) {
    const int64_t size = index.size(d);
    if (size == 1) continue;
    const std::array<int64_t, 3> s = {index.stride(d), d == dim ? 0 : data.stride(d),
                                      other.stride(d)};
    if (!sizes.empty()) {
      const auto& prev = strides.back();
      if (prev[0] == s[0] * size && prev[1] == s[1] * size && prev[2] == s[2] * size) {
        sizes.back() *= size;
        strides.back() = s;
        continue;
      }
    }
    sizes.push_back(size);
    strides.push_back(s);
  }
  EMBER_CHECK_STATUS(int(sizes.size()) <= kMaxIterDims, not_supported, op, ": index of shape ",
                     index.shape_str(), " needs ", sizes.size(), " loop dims; at most ",
                     kMaxIterDims, " are supported on CUDA: reshape the operands to fewer dims");
  ElementwiseIter it;
  it.ndim = int(sizes.size());
  it.num_operands = 3;
  it.numel = index.numel();
  for (int d = 0; d < it.ndim; ++d) {
    it.sizes[d] = sizes[size_t(d)];
    for (int k = 0; k < 3; ++k) it.strides[k][d] = strides[size_t(d)][size_t(k)];
  }
  return make_offset_calc<3>(it);
}

void check_gather_shapes(const char* op, const Tensor& index, const Tensor& data,
                         const Tensor& other, int64_t dim) {
  check_index_dtype(op, index);
  EMBER_INTERNAL_ASSERT((index.dim() == 0 || (dim >= 0 && dim < data.dim())) &&
                            index.dim() == data.dim() && index.sizes() == other.sizes() &&
                            data.dtype() == other.dtype(),
                        op, "_kernel: index ", index.shape_str(), ", data ", data.shape_str(),
                        ", other ", other.shape_str(), " along dim ", dim, " do not match");
  for (int64_t d = 0; d < index.dim(); ++d)
    EMBER_INTERNAL_ASSERT(d == dim || index.size(d) <= data.size(d), op, "_kernel: index ",
                          index.shape_str(), " exceeds ", data.shape_str(), " at dim ", d);
}

// The extent and stride of the indexed dim (a 0-d tensor counts as one element), as on the CPU.
int64_t indexed_extent(const Tensor& t, int64_t dim) { return t.dim() == 0 ? 1 : t.size(dim); }
int64_t indexed_stride(const Tensor& t, int64_t dim) { return t.dim() == 0 ? 0 : t.stride(dim); }

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
