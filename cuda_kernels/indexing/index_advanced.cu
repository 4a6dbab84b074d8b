// CUDA kernels of advanced indexing and nonzero, behind nonzero_flat_kernel, unravel_index_kernel,
// advanced_gather_kernel and linear_index_kernel (kernel_interface/indexing.h). nonzero_flat
// counts the nonzero bytes with CUB's DeviceReduce, reads the count back (the one host sync, which
// PyTorch's nonzero makes too: the output's size depends on it) and selects the positions with
// CUB's DeviceSelect::Flagged. The gather computes each element's linear position from up to
// kMaxAdvancedIndices broadcast index tensors (negatives wrapped) and moves rows as 1- to 16-byte
// units; an index still out of range is reported through the device error flag (thrown at the next
// sync point) and yields zeros (gather) or position -1 (linear_index), which the index_copy and
// index_add kernels skip. These kernels compute no gradients.
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <cub/device/device_reduce.cuh>
#include <cub/device/device_select.cuh>
#include <limits>

#include "ember/cuda_kernels/common/common.cuh"
#include "ember/cuda_kernels/indexing/indexing_common.cuh"
#include "ember/kernel_interface/indexing.h"

namespace ember::cuda {
namespace {

// ---- nonzero ------------------------------------------------------------------------------------

struct NonzeroAsOne {
  __host__ __device__ __forceinline__ int64_t operator()(uint8_t v) const { return v != 0; }
};
struct NonzeroFlag {
  __host__ __device__ __forceinline__ bool operator()(uint8_t v) const { return v != 0; }
};

Tensor nonzero_flat_cuda(const Tensor& mask) {
  EMBER_INTERNAL_ASSERT(mask.is_contiguous() && mask.element_size() == 1,
                        "nonzero_flat_kernel: mask must be dense bool/uint8, got ",
                        mask.shape_str());
  const Device dev = mask.device();
  const int64_t n = mask.numel();
  if (n == 0) return empty({0}, DType::i64, dev);
  DeviceGuard device_guard(dev);
  cudaStream_t stream = stream_of(dev);
  const uint8_t* flags = static_cast<const uint8_t*>(mask.data_ptr());
  thrust::transform_iterator<NonzeroAsOne, const uint8_t*, int64_t> ones(flags, NonzeroAsOne{});
  thrust::transform_iterator<NonzeroFlag, const uint8_t*, bool> selected(flags, NonzeroFlag{});
  thrust::counting_iterator<int64_t> positions(0);
  Tensor count = empty({1}, DType::i64, dev);
  int64_t* d_count = static_cast<int64_t*>(count.data_ptr());
  size_t reduce_bytes = 0, select_bytes = 0;
  EMBER_CUDA_CHECK(cub::DeviceReduce::Sum(nullptr, reduce_bytes, ones, d_count, n, stream));
  EMBER_CUDA_CHECK(cub::DeviceSelect::Flagged(nullptr, select_bytes, positions, selected,
                                              static_cast<int64_t*>(nullptr), d_count, n, stream));
  Tensor workspace = empty({int64_t(std::max(reduce_bytes, select_bytes)) + 1}, DType::u8, dev);
  EMBER_CUDA_CHECK(
      cub::DeviceReduce::Sum(workspace.data_ptr(), reduce_bytes, ones, d_count, n, stream));
  int64_t host_count = 0;
  EMBER_CUDA_CHECK(
      cudaMemcpyAsync(&host_count, d_count, sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));
  Tensor out = empty({host_count}, DType::i64, dev);
  if (host_count == 0) return out;
  // d_count is rewritten with the same count; `out` has exactly that many slots.
  EMBER_CUDA_CHECK(cub::DeviceSelect::Flagged(workspace.data_ptr(), select_bytes, positions,
                                              selected, static_cast<int64_t*>(out.data_ptr()),
                                              d_count, n, stream));
  return out;
}

// ---- unravel_index ------------------------------------------------------------------------------

constexpr int kMaxUnravelDims = 25;
struct UnravelSizes {
  int ndim;
  int64_t size[kMaxUnravelDims];
};

__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    unravel_index_kernel_impl(int64_t* out, const int64_t* flat, int64_t n, UnravelSizes sizes) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t rest = flat[i];
    for (int d = sizes.ndim - 1; d >= 0; --d) {
      const int64_t s = sizes.size[d];
      out[i * sizes.ndim + d] = rest % s;
      rest /= s;
    }
  }
}

void unravel_index_cuda(const Tensor& out, const Tensor& flat, const Shape& sizes) {
  const int64_t n = flat.numel();
  EMBER_INTERNAL_ASSERT(
      out.numel() == n * int64_t(sizes.size()) && out.is_contiguous() && flat.is_contiguous(),
      "unravel_index_kernel: out ", out.shape_str(), ", flat ", flat.shape_str());
  EMBER_CHECK_STATUS(sizes.size() <= size_t(kMaxUnravelDims), not_supported,
                     "nonzero: tensors of more than ", kMaxUnravelDims,
                     " dims are not supported on CUDA, got ", shape_str(sizes));
  if (out.numel() == 0) return;
  DeviceGuard device_guard(out.device());
  UnravelSizes s{};
  s.ndim = int(sizes.size());
  for (int d = 0; d < s.ndim; ++d) s.size[d] = sizes[size_t(d)];
  unravel_index_kernel_impl<<<grid_for(n, out.device().index), kBlockThreads, 0,
                              stream_of(out.device())>>>(
      static_cast<int64_t*>(out.data_ptr()), static_cast<const int64_t*>(flat.data_ptr()), n, s);
  EMBER_CUDA_LAUNCH_CHECK();
}

// ---- advanced gather / linear index -------------------------------------------------------------

// The linear position of element i of the index tensors, or -1 (reported) when out of range.
__device__ __forceinline__ int64_t linear_position(const AdvancedIndex& ix, int64_t i,
                                                   int* error_flag) {
  int64_t pos = 0;
  for (int j = 0; j < ix.num_indices; ++j) {
    int64_t v = load_index(ix.data[j], ix.is_i64[j], i * ix.elem_stride[j]);
    const int64_t size = ix.size[j];
    if (v < 0) v += size;
    if (v < 0 || v >= size) {
      report_device_error(error_flag, kDeviceErrorIndexOutOfRange, v < 0 ? v - size : v, size);
      return -1;
    }
    pos += v * ix.stride[j];
  }
  return pos;
}

template <typename U>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    advanced_gather_kernel_impl(U* out, const U* in, AdvancedIndex ix, int64_t rows,
                                int64_t units_per_row, int64_t total, FastDivmod64 by_units,
                                FastDivmod64 by_count, bool use32, int* error_flag) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += step) {
    int64_t row, u, o, i;
    by_units.divmod(t, use32, row, u);
    by_count.divmod(row, use32, o, i);
    const int64_t pos = linear_position(ix, i, error_flag);
    out[t] = pos >= 0 ? in[(o * rows + pos) * units_per_row + u] : U{};
  }
}

template <typename U>
void launch_advanced_gather(const Tensor& out, const Tensor& in, const AdvancedIndex& ix,
                            int64_t rows, int64_t units_per_row, int64_t total,
                            cudaStream_t stream) {
  const bool use32 = total <= std::numeric_limits<int32_t>::max();
  const int device = out.device().index;
  advanced_gather_kernel_impl<U><<<grid_for(total, device), kBlockThreads, 0, stream>>>(
      static_cast<U*>(out.data_ptr()), static_cast<const U*>(in.data_ptr()), ix, rows,
      units_per_row, total, FastDivmod64(units_per_row, use32), FastDivmod64(ix.count, use32),
      use32, device_error_flag(device));
  EMBER_CUDA_LAUNCH_CHECK();
}

void advanced_gather_cuda(const Tensor& out, const Tensor& in, const AdvancedIndex& ix,
                          int64_t outer, int64_t rows, int64_t inner) {
  EMBER_INTERNAL_ASSERT(
      out.is_contiguous() && in.is_contiguous() && in.numel() == outer * rows * inner &&
          out.numel() == outer * ix.count * inner && in.dtype() == out.dtype(),
      "advanced_gather_kernel: in ", in.shape_str(), ", out ", out.shape_str(), " do not match [",
      outer, ", ", rows, ", ", inner, "] / [", outer, ", ", ix.count, ", ", inner, "]");
  if (out.numel() == 0) return;
  DeviceGuard device_guard(out.device());
  cudaStream_t stream = stream_of(out.device());
  with_row_copy_unit(inner * int64_t(out.element_size()), in.data_ptr(), out.data_ptr(),
                     [&](auto unit, int64_t units_per_row) {
                       launch_advanced_gather<decltype(unit)>(out, in, ix, rows, units_per_row,
                                                              outer * ix.count * units_per_row,
                                                              stream);
                     });
}

__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    linear_index_kernel_impl(int64_t* out, AdvancedIndex ix, int* error_flag) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < ix.count; i += step)
    out[i] = linear_position(ix, i, error_flag);
}

void linear_index_cuda(const Tensor& out, const AdvancedIndex& ix) {
  EMBER_INTERNAL_ASSERT(out.is_contiguous() && out.numel() == ix.count && out.dtype() == DType::i64,
                        "linear_index_kernel: out ", out.shape_str(), " for ", ix.count,
                        " positions");
  if (ix.count == 0) return;
  DeviceGuard device_guard(out.device());
  const int device = out.device().index;
  linear_index_kernel_impl<<<grid_for(ix.count, device), kBlockThreads, 0,
                             stream_of(out.device())>>>(static_cast<int64_t*>(out.data_ptr()), ix,
                                                        device_error_flag(device));
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace
}  // namespace ember::cuda

namespace ember {
EMBER_REGISTER_KERNEL(nonzero_flat_kernel, CUDA,
                      (std::initializer_list<DType>{DType::boolean, DType::u8}),
                      &cuda::nonzero_flat_cuda);
EMBER_REGISTER_KERNEL(unravel_index_kernel, CUDA, {DType::i64}, &cuda::unravel_index_cuda);
EMBER_REGISTER_KERNEL(advanced_gather_kernel, CUDA, dispatch::kAllTypes,
                      &cuda::advanced_gather_cuda);
EMBER_REGISTER_KERNEL(linear_index_kernel, CUDA, {DType::i64}, &cuda::linear_index_cuda);
}  // namespace ember
