// CUDA sort behind sort_kernel (kernel_interface/sort.h): a stable sort of every row of a dense
// [rows, len] input with CUB's radix sort (DeviceRadixSort for one row, DeviceSegmentedRadixSort
// for several), sorting (key bits, position-in-row) pairs. Each element becomes an unsigned key of
// its width whose order is the wanted one: floats flip the sign bit (negatives flip every bit),
// signed integers flip the sign bit, and descending inverts every bit. Before that every NaN
// becomes the positive quiet NaN (above +inf) and -0.0 becomes 0.0, which gives PyTorch's order.
// Values are then re-read from the input at the sorted positions (NaN payloads and signed zeros
// come back unchanged). Radix sort is stable, and inverted keys stay equal where they were equal,
// so equal keys keep their input order in both directions. Only four key widths are compiled.
#include <cstring>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>
#include <limits>

#include "ember/cuda_kernels/common/common.cuh"
#include "ember/kernel_interface/sort.h"
#include "ember/tensor/runtime/cuda_device.h"

namespace ember::cuda {
namespace {

template <int kBytes>
struct KeyBits;
template <>
struct KeyBits<1> {
  using type = uint8_t;
};
template <>
struct KeyBits<2> {
  using type = uint16_t;
};
template <>
struct KeyBits<4> {
  using type = uint32_t;
};
template <>
struct KeyBits<8> {
  using type = uint64_t;
};
template <typename T>
using key_bits_t = typename KeyBits<int(sizeof(T))>::type;

// The unsigned key whose ascending order is T's order (NaN last, -0.0 == 0.0), inverted for
// descending.
template <typename T>
__device__ __forceinline__ key_bits_t<T> ordered_key(T v, bool descending) {
  using U = key_bits_t<T>;
  constexpr U kSign = U(U(1) << (sizeof(U) * 8 - 1));
  U bits;
  if constexpr (is_device_floating_v<T>) {
    const auto f = convert<OpMath<T>>(v);
    if (f != f)
      v = convert<T>(std::numeric_limits<OpMath<T>>::quiet_NaN());
    else if (f == OpMath<T>(0))
      v = convert<T>(OpMath<T>(0));
    memcpy(&bits, &v, sizeof(U));
    bits = (bits & kSign) ? U(~bits) : U(bits | kSign);
  } else if constexpr (std::is_signed_v<T>) {
    memcpy(&bits, &v, sizeof(U));
    bits = U(bits ^ kSign);
  } else {
    bits = U(v);
  }
  return descending ? U(~bits) : bits;
}

template <typename T>
__global__ void prepare_keys_kernel(const T* __restrict__ in, key_bits_t<T>* __restrict__ keys,
                                    int64_t* __restrict__ positions, int64_t n, int64_t len,
                                    bool descending) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  keys[i] = ordered_key(in[i], descending);
  positions[i] = i % len;
}

__global__ void row_offsets_kernel(int64_t* __restrict__ offsets, int64_t rows, int64_t len) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r <= rows) offsets[r] = r * len;
}

template <typename T>
__global__ void gather_values_kernel(const T* __restrict__ in, const int64_t* __restrict__ indices,
                                     T* __restrict__ values, int64_t n, int64_t len) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  values[i] = in[i - i % len + indices[i]];
}

// Sorts (keys, positions) row by row into (scratch keys, indices); one instantiation per width.
template <typename U>
void radix_sort_rows(U* keys, int64_t* positions, int64_t* indices, int64_t rows, int64_t len,
                     Device dev, cudaStream_t stream) {
  const int64_t n = rows * len;
  Tensor keys_sorted = empty({n * int64_t(sizeof(U))}, DType::u8, dev);
  U* sorted_ptr = static_cast<U*>(keys_sorted.data_ptr());
  Tensor offsets;
  int64_t* off_ptr = nullptr;
  if (rows > 1) {
    EMBER_CHECK_STATUS(n <= int64_t(std::numeric_limits<int>::max()), not_supported, "sort: ", rows,
                       " rows of ", len,
                       " elements exceed the 2^31 - 1 elements one CUDA segmented sort takes; "
                       "sort in pieces");
    offsets = empty({rows + 1}, DType::i64, dev);
    off_ptr = static_cast<int64_t*>(offsets.data_ptr());
    row_offsets_kernel<<<blocks_for(rows + 1), kBlockThreads, 0, stream>>>(off_ptr, rows, len);
    EMBER_CUDA_LAUNCH_CHECK();
  }
  size_t temp_bytes = 0;
  auto run = [&](void* temp) {
    if (rows == 1)
      return cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, sorted_ptr, positions, indices,
                                             n, 0, int(sizeof(U) * 8), stream);
    return cub::DeviceSegmentedRadixSort::SortPairs(temp, temp_bytes, keys, sorted_ptr, positions,
                                                    indices, int(n), int(rows), off_ptr,
                                                    off_ptr + 1, 0, int(sizeof(U) * 8), stream);
  };
  EMBER_CUDA_CHECK(run(nullptr));
  Tensor temp = empty({int64_t(std::max<size_t>(temp_bytes, 1))}, DType::u8, dev);
  EMBER_CUDA_CHECK(run(temp.data_ptr()));
  // The work tensors go back to the stream-ordered allocator, reused only by later work.
}

template <typename T>
void sort_typed(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t rows,
                int64_t len, bool descending, cudaStream_t stream) {
  using U = key_bits_t<T>;
  const int64_t n = rows * len;
  const Device dev = in.device();
  Tensor keys = empty({n * int64_t(sizeof(U))}, DType::u8, dev);
  Tensor positions = empty({n}, DType::i64, dev);
  const T* in_ptr = static_cast<const T*>(in.data_ptr());
  U* keys_ptr = static_cast<U*>(keys.data_ptr());
  int64_t* pos_ptr = static_cast<int64_t*>(positions.data_ptr());
  int64_t* idx_ptr = static_cast<int64_t*>(indices.data_ptr());
  prepare_keys_kernel<T>
      <<<blocks_for(n), kBlockThreads, 0, stream>>>(in_ptr, keys_ptr, pos_ptr, n, len, descending);
  EMBER_CUDA_LAUNCH_CHECK();
  radix_sort_rows<U>(keys_ptr, pos_ptr, idx_ptr, rows, len, dev, stream);
  gather_values_kernel<T><<<blocks_for(n), kBlockThreads, 0, stream>>>(
      in_ptr, idx_ptr, static_cast<T*>(values.data_ptr()), n, len);
  EMBER_CUDA_LAUNCH_CHECK();
}

void sort_cuda(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t rows,
               int64_t len, bool descending) {
  EMBER_INTERNAL_ASSERT(in.is_cuda() && in.is_contiguous() && values.is_contiguous() &&
                            indices.is_contiguous() && in.numel() == rows * len &&
                            values.numel() == in.numel() && indices.numel() == in.numel() &&
                            values.dtype() == in.dtype() && indices.dtype() == DType::i64,
                        "sort (CUDA): input ", in.shape_str(), ", values ", values.shape_str(),
                        ", indices ", indices.shape_str(), " are not dense [", rows, ", ", len,
                        "]");
  if (in.numel() == 0) return;
  DeviceGuard device_guard(in.device());
  cudaStream_t stream = stream_of(in.device());
  dispatch_all_dtypes(in.dtype(), "sort", [&](auto tag) {
    using scalar_t = decltype(tag);
    if constexpr (std::is_same_v<scalar_t, bool>)
      EMBER_THROW(internal, "sort (CUDA): bool keys are sorted as uint8 by the op");
    else
      sort_typed<scalar_t>(values, indices, in, rows, len, descending, stream);
  });
}

}  // namespace
}  // namespace ember::cuda

namespace ember {
EMBER_REGISTER_KERNEL(sort_kernel, CUDA, dispatch::kAllTypes, &cuda::sort_cuda);
}  // namespace ember
