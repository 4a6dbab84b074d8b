// Helpers shared by the CUDA indexing kernels (cuda_kernels/indexing/*.cu; not a face header):
// reading int32/int64 indices, the range check that reports through the device error flag, atomic
// accumulation for every arithmetic dtype, and the OffsetCalc over an index tensor's shape that
// gather, scatter_add and scatter_reduce share; the copy unit that row-moving kernels
// (index_select, index_copy, advanced gather) use.
#pragma once
#include <array>
#include <vector>

#include "ember/cuda_kernels/common/common.cuh"
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

inline void check_index_dtype(const char* op, const Tensor& index) {
  EMBER_CHECK(index.dtype() == DType::i64 || index.dtype() == DType::i32, op,
              ": index tensor has dtype ", dtype_name(index.dtype()),
              "; indices must be int64 or int32 (convert with .to(ember::DType::i64))");
}

// The loop over index's shape as an OffsetCalc in ELEMENTS with operands (index, data, other):
// `data` is the tensor indexed along `dim` (its stride there zeroed: the index supplies it),
// `other` the tensor that shares index's shape. Size-1 dims are dropped and neighbours that are
// contiguous for all three are merged, so only unusual layouts exceed kMaxIterDims.
inline OffsetCalc<3> make_gather_offsets(const char* op, const Tensor& index, const Tensor& data,
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

inline void check_gather_shapes(const char* op, const Tensor& index, const Tensor& data,
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

// Row-moving kernels move rows of `row_bytes` bytes as units of 16, 8, 4, 2 or 1 bytes: the widest
// that divides the row and to which both pointers are aligned (an embedding lookup of 4-byte floats
// moves 16 bytes per thread when rows allow it). Calls f(U{}, units_per_row) with U the unsigned
// type of that width.
template <typename F>
void with_row_copy_unit(int64_t row_bytes, const void* a, const void* b, F&& f) {
  int64_t unit = 16;
  while (unit > 1 &&
         (row_bytes % unit != 0 || !is_aligned(a, size_t(unit)) || !is_aligned(b, size_t(unit))))
    unit /= 2;
  const int64_t units_per_row = row_bytes / unit;
  switch (unit) {
    case 16:
      return f(uint4{}, units_per_row);
    case 8:
      return f(uint64_t{}, units_per_row);
    case 4:
      return f(uint32_t{}, units_per_row);
    case 2:
      return f(uint16_t{}, units_per_row);
    default:
      return f(uint8_t{}, units_per_row);
  }
}

// The extent and stride of the indexed dim (a 0-d tensor counts as one element), as on the CPU.
inline int64_t indexed_extent(const Tensor& t, int64_t dim) {
  return t.dim() == 0 ? 1 : t.size(dim);
}
inline int64_t indexed_stride(const Tensor& t, int64_t dim) {
  return t.dim() == 0 ? 0 : t.stride(dim);
}

}  // namespace
}  // namespace ember::cuda
