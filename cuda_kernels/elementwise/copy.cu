// CUDA kernels that move elements without arithmetic: where_kernel (out = cond ? a : b) and
// copy_kernel (a copy converting dtype), behind kernel_interface/elementwise.h. Like the unary and
// binary kernels (elementwise.cu): a contiguous path of 16-byte vectors where every operand is
// dense and aligned, and a strided path through OffsetCalc for any layout.
#include "ember/cuda_kernels/common/common.cuh"
#include "ember/cuda_kernels/elementwise/elementwise.cuh"
#include "ember/kernel_interface/elementwise.h"

namespace ember::cuda {
namespace {

// ---- where ------------------------------------------------------------------------------------

// out = cond ? a : b moves bits, so it is instantiated per element size (S = uint8..uint64).
template <typename S>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    where_strided_kernel(OffsetCalc<4> oc, char* out, const char* cond, const char* a,
                         const char* b, int64_t n) {
  // A block takes tiles of kStridedUnroll * blockDim consecutive elements (thread t gets t,
  // t + blockDim, ...): coalesced, and its loads stay within a few DRAM pages.
  const int64_t tile = int64_t(blockDim.x) * kStridedUnroll;
  for (int64_t first = int64_t(blockIdx.x) * tile + threadIdx.x; first < n;
       first += int64_t(gridDim.x) * tile) {
    int64_t out_off[kStridedUnroll];
    S v[kStridedUnroll];
#pragma unroll
    for (int u = 0; u < kStridedUnroll; ++u) {
      if (first + u * int64_t(blockDim.x) < n) {
        int64_t off[4];
        oc.get(first + u * int64_t(blockDim.x), off);
        out_off[u] = off[0];
        const bool c = *reinterpret_cast<const bool*>(cond + off[1]);
        v[u] = *reinterpret_cast<const S*>(c ? a + off[2] : b + off[3]);
      }
    }
#pragma unroll
    for (int u = 0; u < kStridedUnroll; ++u)
      if (first + u * int64_t(blockDim.x) < n) *reinterpret_cast<S*>(out + out_off[u]) = v[u];
  }
}

void where_cuda(const ElementwiseIter& iter) {
  if (iter.numel == 0) return;
  EMBER_INTERNAL_ASSERT(iter.num_operands == 4, "where_kernel: expected 4 operands, got ",
                        iter.num_operands);
  EMBER_INTERNAL_ASSERT(iter.dtypes[1] == DType::boolean, "where_kernel: condition has dtype ",
                        dtype_name(iter.dtypes[1]), "; ops/ must pass a bool condition");
  EMBER_INTERNAL_ASSERT(iter.dtypes[2] == iter.dtypes[0] && iter.dtypes[3] == iter.dtypes[0],
                        "where_kernel: operands of dtypes ", dtype_name(iter.dtypes[2]), " and ",
                        dtype_name(iter.dtypes[3]), " for an output of dtype ",
                        dtype_name(iter.dtypes[0]));
  DeviceGuard device_guard(iter.device);
  cudaStream_t stream = stream_of(iter.device);
  const OffsetCalc<4> oc = make_offset_calc<4>(iter);
  const unsigned grid = grid_for((iter.numel + kStridedUnroll - 1) / kStridedUnroll,
                                 iter.device.index, strided_blocks_per_sm(iter));
  char* const* d = iter.data;
  switch (element_size(iter.dtypes[0])) {
    case 1:
      where_strided_kernel<uint8_t>
          <<<grid, kBlockThreads, 0, stream>>>(oc, d[0], d[1], d[2], d[3], iter.numel);
      break;
    case 2:
      where_strided_kernel<uint16_t>
          <<<grid, kBlockThreads, 0, stream>>>(oc, d[0], d[1], d[2], d[3], iter.numel);
      break;
    case 4:
      where_strided_kernel<uint32_t>
          <<<grid, kBlockThreads, 0, stream>>>(oc, d[0], d[1], d[2], d[3], iter.numel);
      break;
    case 8:
      where_strided_kernel<uint64_t>
          <<<grid, kBlockThreads, 0, stream>>>(oc, d[0], d[1], d[2], d[3], iter.numel);
      break;
    default:
      EMBER_INTERNAL_ASSERT(false, "where_kernel: element size ", element_size(iter.dtypes[0]));
  }
  EMBER_CUDA_LAUNCH_CHECK();
}

// ---- copy (dtype conversion) ------------------------------------------------------------------

// Dense casts between f32, f16 and bf16: 8 elements per thread (16 bytes on the 16-bit side).
template <typename To, typename From>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    cast_contiguous_kernel(To* out, const From* in, int64_t n) {
  constexpr int V = 8;
  using InVec = AlignedVec<From, V>;
  using OutVec = AlignedVec<To, V>;
  const int64_t nvec = n / V;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // this thread's 8 elements
  if (i < nvec) {
    const InVec x = reinterpret_cast<const InVec*>(in)[i];
    OutVec y;
#pragma unroll
    for (int j = 0; j < V; ++j) y.v[j] = convert<To>(x.v[j]);
    reinterpret_cast<OutVec*>(out)[i] = y;
  }
  const int64_t t = nvec * V + i;  // the n % V elements past the last whole group
  if (t < n) out[t] = convert<To>(in[t]);
}

// Any layout, any input dtype (a uniform runtime switch per load), one instantiation per output.
template <typename To>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    copy_strided_kernel(OffsetCalc<2> oc, char* out, const char* in, DType in_dtype, int64_t n) {
  // A block takes tiles of kStridedUnroll * blockDim consecutive elements (thread t gets t,
  // t + blockDim, ...): coalesced, and its loads stay within a few DRAM pages.
  const int64_t tile = int64_t(blockDim.x) * kStridedUnroll;
  for (int64_t first = int64_t(blockIdx.x) * tile + threadIdx.x; first < n;
       first += int64_t(gridDim.x) * tile) {
    int64_t out_off[kStridedUnroll];
    To v[kStridedUnroll];
#pragma unroll
    for (int u = 0; u < kStridedUnroll; ++u) {
      if (first + u * int64_t(blockDim.x) < n) {
        int64_t off[2];
        oc.get(first + u * int64_t(blockDim.x), off);
        out_off[u] = off[0];
        v[u] = load_as<To>(in + off[1], in_dtype);
      }
    }
#pragma unroll
    for (int u = 0; u < kStridedUnroll; ++u)
      if (first + u * int64_t(blockDim.x) < n) *reinterpret_cast<To*>(out + out_off[u]) = v[u];
  }
}

template <typename To, typename From>
bool try_cast_contiguous(const ElementwiseIter& iter, cudaStream_t stream) {
  constexpr int V = 8;
  if (!is_aligned(iter.data[0], V * sizeof(To)) || !is_aligned(iter.data[1], V * sizeof(From)))
    return false;
  const int64_t n = iter.numel;
  cast_contiguous_kernel<To, From><<<blocks_for((n + V - 1) / V), kBlockThreads, 0, stream>>>(
      reinterpret_cast<To*>(iter.data[0]), reinterpret_cast<const From*>(iter.data[1]), n);
  EMBER_CUDA_LAUNCH_CHECK();
  return true;
}

// The fast path for dense float <-> half/bfloat16 conversions (mixed precision lives on these).
bool try_float_cast(const ElementwiseIter& iter, cudaStream_t stream) {
  const DType to = iter.dtypes[0], from = iter.dtypes[1];
  if (to == DType::f32 && from == DType::f16)
    return try_cast_contiguous<float, __half>(iter, stream);
  if (to == DType::f32 && from == DType::bf16)
    return try_cast_contiguous<float, __nv_bfloat16>(iter, stream);
  if (to == DType::f16 && from == DType::f32)
    return try_cast_contiguous<__half, float>(iter, stream);
  if (to == DType::bf16 && from == DType::f32)
    return try_cast_contiguous<__nv_bfloat16, float>(iter, stream);
  if (to == DType::f16 && from == DType::bf16)
    return try_cast_contiguous<__half, __nv_bfloat16>(iter, stream);
  if (to == DType::bf16 && from == DType::f16)
    return try_cast_contiguous<__nv_bfloat16, __half>(iter, stream);
  return false;
}

void copy_cuda(const ElementwiseIter& iter) {
  if (iter.numel == 0) return;
  EMBER_INTERNAL_ASSERT(iter.num_operands == 2, "copy_kernel: expected 2 operands, got ",
                        iter.num_operands);
  EMBER_INTERNAL_ASSERT(iter.device.is_cuda(), "copy_kernel (CUDA) called for ", iter.device.str());
  DeviceGuard device_guard(iter.device);
  cudaStream_t stream = stream_of(iter.device);
  const DType to = iter.dtypes[0], from = iter.dtypes[1];
  if (operand_is_flat(iter, 0) && operand_is_flat(iter, 1)) {
    if (to == from) {
      if (iter.data[0] != iter.data[1])
        EMBER_CUDA_CHECK(cudaMemcpyAsync(iter.data[0], iter.data[1],
                                         size_t(iter.numel) * element_size(to),
                                         cudaMemcpyDeviceToDevice, stream));
      return;
    }
    if (try_float_cast(iter, stream)) return;
  }
  const OffsetCalc<2> oc = make_offset_calc<2>(iter);
  dispatch_all_dtypes(to, "copy_kernel", [&](auto tag) {
    using scalar_t = decltype(tag);
    copy_strided_kernel<scalar_t>
        <<<grid_for((iter.numel + kStridedUnroll - 1) / kStridedUnroll, iter.device.index,
                    strided_blocks_per_sm(iter)),
           kBlockThreads, 0, stream>>>(oc, iter.data[0], iter.data[1], from, iter.numel);
    EMBER_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace
}  // namespace ember::cuda

namespace ember {
EMBER_REGISTER_KERNEL(where_kernel, CUDA, dispatch::kAllTypes, &cuda::where_cuda);
EMBER_REGISTER_KERNEL(copy_kernel, CUDA, dispatch::kAllTypes, &cuda::copy_cuda);
}  // namespace ember
