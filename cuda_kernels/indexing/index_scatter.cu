// CUDA kernels behind index_copy_kernel and scatter_reduce_kernel (kernel_interface/indexing.h).
// Out-of-range indices are reported through the device error flag (thrown at the next sync point,
// as for index_select) and skipped. index_copy and scatter's assign only move bits (one
// instantiation per element size); with duplicate indices an unspecified write wins, as in
// PyTorch. scatter_reduce's sum uses atomicAdd, prod / amax / amin a compare-and-swap loop on the
// element's word; amax and amin are order-independent and so deterministic, sum and prod of floats
// may differ in the last bits from run to run, except in the algorithm cache's deterministic mode,
// where each output element combines its values in index order (bitwise repeatable, as the CPU).
// Gradients: these kernels write or combine into `out`; they compute no gradients themselves.
#include <limits>

#include "ember/cuda_kernels/common/common.cuh"
#include "ember/cuda_kernels/indexing/indexing_common.cuh"
#include "ember/dispatch/algo_cache.h"
#include "ember/kernel_interface/indexing.h"

namespace ember::cuda {
namespace {

// ---- index_copy -------------------------------------------------------------------------------

// out[o, index[i], u] = src[o, i, u] with rows of units_per_row units of U.
template <typename U>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    index_copy_kernel_impl(U* out, const U* src, const int64_t* index, int64_t out_size,
                           int64_t units_per_row, int64_t total, FastDivmod64 by_units,
                           FastDivmod64 by_nidx, bool use32, int* error_flag) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += step) {
    int64_t row, u, o, i;
    by_units.divmod(t, use32, row, u);
    by_nidx.divmod(row, use32, o, i);
    const int64_t idx = index[i];
    if (index_in_range(idx, out_size, error_flag))
      out[(o * out_size + idx) * units_per_row + u] = src[t];
  }
}

template <typename U>
void launch_index_copy(const Tensor& out, const Tensor& src, const Tensor& index, int64_t out_size,
                       int64_t units_per_row, int64_t nidx, int64_t total, cudaStream_t stream) {
  const bool use32 = total <= std::numeric_limits<int32_t>::max();
  const int device = out.device().index;
  index_copy_kernel_impl<U><<<grid_for(total, device), kBlockThreads, 0, stream>>>(
      static_cast<U*>(out.data_ptr()), static_cast<const U*>(src.data_ptr()),
      static_cast<const int64_t*>(index.data_ptr()), out_size, units_per_row, total,
      FastDivmod64(units_per_row, use32), FastDivmod64(nidx, use32), use32,
      device_error_flag(device));
  EMBER_CUDA_LAUNCH_CHECK();
}

void index_copy_cuda(const Tensor& out, const Tensor& index, const Tensor& src, int64_t outer,
                     int64_t out_size, int64_t inner) {
  const int64_t nidx = index.numel();
  EMBER_INTERNAL_ASSERT(index.dtype() == DType::i64 && out.numel() == outer * out_size * inner &&
                            src.numel() == outer * nidx * inner && out.is_contiguous() &&
                            src.is_contiguous() && index.is_contiguous() &&
                            out.dtype() == src.dtype(),
                        "index_copy_kernel: out ", out.shape_str(), ", src ", src.shape_str(),
                        ", index ", index.shape_str(), " do not match [", outer, ", ", out_size,
                        ", ", inner, "] / [", outer, ", ", nidx, ", ", inner, "] dense int64");
  if (src.numel() == 0) return;
  DeviceGuard device_guard(out.device());
  cudaStream_t stream = stream_of(out.device());
  with_row_copy_unit(inner * int64_t(out.element_size()), src.data_ptr(), out.data_ptr(),
                     [&](auto unit, int64_t units_per_row) {
                       launch_index_copy<decltype(unit)>(out, src, index, out_size, units_per_row,
                                                         nidx, outer * nidx * units_per_row,
                                                         stream);
                     });
}

// ---- scatter_reduce ---------------------------------------------------------------------------

template <typename T>
__device__ __forceinline__ T combine(T a, T b, ScatterReduce reduce) {
  if constexpr (is_reduced_float_v<T>) {
    return convert<T>(combine(convert<float>(a), convert<float>(b), reduce));
  } else {
    switch (reduce) {
      case ScatterReduce::prod:
        return a * b;
      case ScatterReduce::amax:
        if (is_nan(a) || is_nan(b)) return is_nan(a) ? a : b;
        return a > b ? a : b;
      case ScatterReduce::amin:
        if (is_nan(a) || is_nan(b)) return is_nan(a) ? a : b;
        return a < b ? a : b;
      default:
        return a + b;
    }
  }
}

template <typename W, typename T>
__device__ __forceinline__ void cas_combine(T* p, T v, ScatterReduce reduce) {
  W* word = reinterpret_cast<W*>(p);
  W old = *word, assumed;
  do {
    assumed = old;
    T current;
    memcpy(&current, &assumed, sizeof(T));
    const T next = combine(current, v, reduce);
    W next_bits;
    memcpy(&next_bits, &next, sizeof(T));
    if (next_bits == assumed) return;
    old = atomicCAS(word, assumed, next_bits);
  } while (old != assumed);
}

// combine(*p, v) atomically: atomicAdd for sum, a CAS loop on the element's word otherwise.
template <typename T>
__device__ __forceinline__ void atomic_combine(T* p, T v, ScatterReduce reduce) {
  if (reduce == ScatterReduce::sum) return atomic_accumulate(p, v);
  if constexpr (sizeof(T) == 2)
    cas_combine<unsigned short>(p, v, reduce);
  else if constexpr (sizeof(T) == 4)
    cas_combine<unsigned int>(p, v, reduce);
  else
    cas_combine<unsigned long long>(p, v, reduce);
}

// assign: S moves the element's bits; otherwise T is the dtype and `reduce` combines.
template <typename T, bool kAssign>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    scatter_reduce_kernel_impl(OffsetCalc<3> oc, T* out, const T* src, const void* index,
                               bool index_is_i64, int64_t n, int64_t dim_size,
                               int64_t out_dim_stride, ScatterReduce reduce, int* error_flag) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += step) {
    int64_t off[3];  // index, out (without dim), src
    oc.get(t, off);
    const int64_t idx = load_index(index, index_is_i64, off[0]);
    if (!index_in_range(idx, dim_size, error_flag)) continue;
    T* target = out + off[1] + idx * out_dim_stride;
    if constexpr (kAssign)
      *target = src[off[2]];
    else
      atomic_combine(target, src[off[2]], reduce);
  }
}

template <typename T, bool kAssign>
void launch_scatter_reduce(const OffsetCalc<3>& oc, const Tensor& out, const Tensor& index,
                           const Tensor& src, int64_t dim, ScatterReduce reduce,
                           cudaStream_t stream) {
  const int device = out.device().index;
  scatter_reduce_kernel_impl<T, kAssign>
      <<<grid_for(index.numel(), device), kBlockThreads, 0, stream>>>(
          oc, static_cast<T*>(out.data_ptr()), static_cast<const T*>(src.data_ptr()),
          index.data_ptr(), index.dtype() == DType::i64, index.numel(), indexed_extent(out, dim),
          indexed_stride(out, dim), reduce, device_error_flag(device));
  EMBER_CUDA_LAUNCH_CHECK();
}

// Deterministic sum / prod (the algorithm cache's deterministic mode): thread t owns out element
// t (out dense) and combines, in increasing i along dim, src[.., i, ..] for every i whose index
// names its coordinate, as the CPU kernel does, so the result repeats bit for bit and matches the
// CPU. Work per column is out.size(dim) x index.size(dim).
struct ScanGeometry {
  int ndim;
  int64_t out_size[kMaxIterDims];
  int64_t index_size[kMaxIterDims];
  int64_t index_stride[kMaxIterDims];
  int64_t src_stride[kMaxIterDims];
};

template <typename T>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    scatter_reduce_ordered_kernel(T* out, const T* src, const void* index, bool index_is_i64,
                                  ScanGeometry g, int dim, int64_t total, ScatterReduce reduce,
                                  int* error_flag) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += step) {
    int64_t rest = t, index_off = 0, src_off = 0, j = 0;
    bool covered = true;
    for (int k = g.ndim - 1; k >= 0; --k) {
      const int64_t c = rest % g.out_size[k];
      rest /= g.out_size[k];
      if (k == dim) {
        j = c;
        continue;
      }
      covered = covered && c < g.index_size[k];
      index_off += c * g.index_stride[k];
      src_off += c * g.src_stride[k];
    }
    if (!covered) continue;
    T acc = out[t];
    for (int64_t i = 0; i < g.index_size[dim]; ++i) {
      const int64_t idx = load_index(index, index_is_i64, index_off + i * g.index_stride[dim]);
      if (idx == j) acc = combine(acc, src[src_off + i * g.src_stride[dim]], reduce);
      // The thread of coordinate 0 reports an out-of-range index of its column.
      if (j == 0) (void)index_in_range(idx, g.out_size[dim], error_flag);
    }
    out[t] = acc;
  }
}

template <typename T>
void launch_scatter_reduce_ordered(const Tensor& out, const Tensor& index, const Tensor& src,
                                   int64_t dim, ScatterReduce reduce, cudaStream_t stream) {
  EMBER_CHECK_STATUS(out.dim() <= kMaxIterDims && out.is_contiguous(), not_supported,
                     "scatter: deterministic ", scatter_reduce_name(reduce), " on CUDA supports",
                     " at most ", kMaxIterDims, " dims, got ", out.shape_str());
  ScanGeometry g{};
  g.ndim = int(std::max<int64_t>(out.dim(), 1));
  for (int k = 0; k < g.ndim; ++k) {
    const bool scalar = out.dim() == 0;
    g.out_size[k] = scalar ? 1 : out.size(k);
    g.index_size[k] = scalar ? 1 : index.size(k);
    g.index_stride[k] = scalar ? 0 : index.stride(k);
    g.src_stride[k] = scalar ? 0 : src.stride(k);
  }
  const int64_t total = out.numel();
  const int device = out.device().index;
  scatter_reduce_ordered_kernel<T><<<grid_for(total, device), kBlockThreads, 0, stream>>>(
      static_cast<T*>(out.data_ptr()), static_cast<const T*>(src.data_ptr()), index.data_ptr(),
      index.dtype() == DType::i64, g, int(out.dim() == 0 ? 0 : dim), total, reduce,
      device_error_flag(device));
  EMBER_CUDA_LAUNCH_CHECK();
}

void scatter_reduce_cuda(const Tensor& out, const Tensor& index, const Tensor& src, int64_t dim,
                         ScatterReduce reduce) {
  check_gather_shapes("scatter", index, out, src, dim);
  if (index.numel() == 0) return;
  DeviceGuard device_guard(out.device());
  cudaStream_t stream = stream_of(out.device());
  const OffsetCalc<3> oc = make_gather_offsets("scatter", index, out, src, dim);
  if (reduce == ScatterReduce::assign) {
    switch (out.element_size()) {
      case 1:
        return launch_scatter_reduce<uint8_t, true>(oc, out, index, src, dim, reduce, stream);
      case 2:
        return launch_scatter_reduce<uint16_t, true>(oc, out, index, src, dim, reduce, stream);
      case 4:
        return launch_scatter_reduce<uint32_t, true>(oc, out, index, src, dim, reduce, stream);
      default:
        return launch_scatter_reduce<uint64_t, true>(oc, out, index, src, dim, reduce, stream);
    }
  }
  dispatch_all_dtypes(out.dtype(), "scatter_reduce_kernel", [&](auto tag) {
    using scalar_t = decltype(tag);
    if constexpr (std::is_same_v<scalar_t, uint8_t> || std::is_same_v<scalar_t, bool>) {
      EMBER_THROW(not_supported, "scatter: reduce \"", scatter_reduce_name(reduce),
                  "\" does not support dtype ", dtype_name(out.dtype()),
                  " on CUDA; use a floating dtype, int32 or int64");
    } else if ((reduce == ScatterReduce::sum || reduce == ScatterReduce::prod) &&
               dispatch::current_algo_settings().mode == dispatch::AlgoMode::deterministic) {
      launch_scatter_reduce_ordered<scalar_t>(out, index, src, dim, reduce, stream);
    } else {
      launch_scatter_reduce<scalar_t, false>(oc, out, index, src, dim, reduce, stream);
    }
  });
}

}  // namespace
}  // namespace ember::cuda

namespace ember {
EMBER_REGISTER_KERNEL(index_copy_kernel, CUDA, dispatch::kAllTypes, &cuda::index_copy_cuda);
// The element-moving assign serves every dtype; the kernel refuses the reductions on u8 / bool.
EMBER_REGISTER_KERNEL(scatter_reduce_kernel, CUDA, dispatch::kAllTypes, &cuda::scatter_reduce_cuda);
}  // namespace ember
