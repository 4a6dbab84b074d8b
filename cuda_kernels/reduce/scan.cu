// CUDA scans behind scan_kernel (kernel_interface/scan.h): inclusive cumsum / cumprod / cummax /
// cummin along the middle dim of a dense [outer, len, inner] input.
//  - inner > 1, or short rows: one thread per (outer, inner) column walks the scanned dim
//    (threads adjacent in inner read adjacent addresses).
//  - inner == 1 with longer rows: one block per row scans tiles of kThreads x kItems elements with
//    cub::BlockScan, carrying the running prefix from tile to tile.
//  - one long row of cumsum / cumprod in f32 / f64 / int64 (the dtype is its own accumulation
//    type): cub::DeviceScan's single-pass decoupled look-back scan across the whole GPU (one block
//    would leave the rest of the GPU idle).
// Accumulation in OpMath (fp32 for f16/bf16/f32, fp64 for f64, int64 for integers; integer sums and
// products wrap). cummax/cummin carry (value, index): a later element wins ties and NaN takes over
// (a later NaN too), as on the CPU and in PyTorch. That rule is associative, so the block scan
// gives the sequential answer.
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>

#include "ember/cuda_kernels/common/common.cuh"
#include "ember/kernel_interface/scan.h"
#include "ember/tensor/runtime/cuda_device.h"

namespace ember::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kItems = 8;
// Rows of at most this many elements (with inner == 1) are walked by one thread each.
constexpr int64_t kShortRow = 32;
// A single row at least this long (cumsum / cumprod where the dtype accumulates in itself) goes
// to cub::DeviceScan.
constexpr int64_t kDeviceScanRow = int64_t(1) << 16;

template <typename A>
__device__ __forceinline__ A wrap_add(A a, A b) {
  if constexpr (std::is_integral_v<A>)
    return A(uint64_t(a) + uint64_t(b));
  else
    return a + b;
}
template <typename A>
__device__ __forceinline__ A wrap_mul(A a, A b) {
  if constexpr (std::is_integral_v<A>)
    return A(uint64_t(a) * uint64_t(b));
  else
    return a * b;
}

// cumsum / cumprod: the state is the running total.
template <typename T>
struct ArithScan {
  using A = OpMath<T>;
  using State = A;
  bool is_prod;
  __device__ __forceinline__ State identity() const { return is_prod ? A(1) : A(0); }
  __device__ __forceinline__ State make(T x, int64_t) const { return convert<A>(x); }
  __device__ __forceinline__ State operator()(State a, State b) const {
    return is_prod ? wrap_mul(a, b) : wrap_add(a, b);
  }
  __device__ __forceinline__ void store(State s, T* out, int64_t*, int64_t at) const {
    out[at] = convert<T>(s);
  }
};

template <typename A>
struct ValueIndex {
  A v;
  int64_t i;  // -1: the identity (no element yet)
};

// cummax / cummin: the state is the running extremum and its position.
template <typename T>
struct ExtremeScan {
  using A = OpMath<T>;
  using State = ValueIndex<A>;
  bool is_max;
  __device__ __forceinline__ State identity() const { return {A(0), -1}; }
  __device__ __forceinline__ State make(T x, int64_t k) const { return {convert<A>(x), k}; }
  // `b` comes after `a` along the scanned dim.
  __device__ __forceinline__ State operator()(State a, State b) const {
    if (b.i < 0) return a;
    if (a.i < 0) return b;
    if (is_nan(b.v)) return b;
    if (is_nan(a.v)) return a;
    return (is_max ? b.v >= a.v : b.v <= a.v) ? b : a;
  }
  __device__ __forceinline__ void store(State s, T* out, int64_t* idx, int64_t at) const {
    out[at] = convert<T>(s.v);
    if (idx != nullptr) idx[at] = s.i;
  }
};

template <typename T, typename Op>
__global__ void scan_columns_kernel(const T* __restrict__ in, T* __restrict__ out,
                                    int64_t* __restrict__ idx, int64_t columns, int64_t len,
                                    int64_t inner, Op op) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= columns) return;
  const int64_t o = t / inner, i = t - o * inner;
  const int64_t base = o * len * inner + i;
  typename Op::State s = op.identity();
  for (int64_t k = 0; k < len; ++k) {
    const int64_t at = base + k * inner;
    s = op(s, op.make(in[at], k));
    op.store(s, out, idx, at);
  }
}

// The running prefix handed to cub::BlockScan between tiles (called by the first warp; every lane
// keeps the same copy, lane 0's answer is used).
template <typename Op>
struct TilePrefix {
  Op op;
  typename Op::State total;
  __device__ typename Op::State operator()(typename Op::State tile_aggregate) {
    typename Op::State before = total;
    total = op(total, tile_aggregate);
    return before;
  }
};

template <typename T, typename Op>
__global__ void __launch_bounds__(kThreads)
    scan_rows_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t* __restrict__ idx,
                     int64_t len, Op op) {
  using State = typename Op::State;
  using BlockScan = cub::BlockScan<State, kThreads>;
  __shared__ typename BlockScan::TempStorage temp;
  const int64_t row_base = int64_t(blockIdx.x) * len;
  const T* row_in = in + row_base;
  TilePrefix<Op> prefix{op, op.identity()};
  constexpr int64_t kTile = int64_t(kThreads) * kItems;
  for (int64_t start = 0; start < len; start += kTile) {
    State items[kItems];
    const int64_t first = start + int64_t(threadIdx.x) * kItems;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int64_t k = first + j;
      items[j] = k < len ? op.make(row_in[k], k) : op.identity();
    }
    BlockScan(temp).InclusiveScan(items, items, op, prefix);
    __syncthreads();  // `temp` is reused by the next tile
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int64_t k = first + j;
      if (k < len) op.store(items[j], out, idx, row_base + k);
    }
  }
}

template <typename T, typename Op>
void launch_scan(const Tensor& out, const Tensor* indices, const Tensor& in, ReduceShape s, Op op,
                 cudaStream_t stream) {
  const T* in_ptr = static_cast<const T*>(in.data_ptr());
  T* out_ptr = static_cast<T*>(out.data_ptr());
  int64_t* idx_ptr = indices != nullptr ? static_cast<int64_t*>(indices->data_ptr()) : nullptr;
  if constexpr (std::is_same_v<Op, ArithScan<T>> && std::is_same_v<T, OpMath<T>>) {
    if (s.outer == 1 && s.inner == 1 && s.reduce >= kDeviceScanRow) {
      size_t temp_bytes = 0;
      EMBER_CUDA_CHECK(cub::DeviceScan::InclusiveScan(nullptr, temp_bytes, in_ptr, out_ptr, op,
                                                      s.reduce, stream));
      Tensor temp = empty({int64_t(std::max<size_t>(temp_bytes, 1))}, DType::u8, in.device());
      EMBER_CUDA_CHECK(cub::DeviceScan::InclusiveScan(temp.data_ptr(), temp_bytes, in_ptr, out_ptr,
                                                      op, s.reduce, stream));
      return;  // `temp` goes back to the stream-ordered allocator for later work only
    }
  }
  if (s.inner > 1 || s.reduce <= kShortRow) {
    const int64_t columns = s.outer * s.inner;
    scan_columns_kernel<T, Op><<<blocks_for(columns), kBlockThreads, 0, stream>>>(
        in_ptr, out_ptr, idx_ptr, columns, s.reduce, s.inner, op);
  } else {
    EMBER_CHECK_STATUS(s.outer <= kMaxGridX, not_supported, "scan: ", s.outer,
                       " rows need more CUDA blocks than a grid holds; scan in pieces");
    scan_rows_kernel<T, Op>
        <<<unsigned(s.outer), kThreads, 0, stream>>>(in_ptr, out_ptr, idx_ptr, s.reduce, op);
  }
  EMBER_CUDA_LAUNCH_CHECK();
}

void scan_cuda(const Tensor& out, const Tensor* indices, const Tensor& in, ReduceShape shape,
               ScanOp op) {
  EMBER_INTERNAL_ASSERT(in.is_cuda() && out.device() == in.device() && in.is_contiguous() &&
                            out.is_contiguous() && out.dtype() == in.dtype() &&
                            in.numel() == shape.outer * shape.reduce * shape.inner &&
                            out.numel() == in.numel(),
                        scan_op_name(op), " (CUDA): input ", in.shape_str(), " / output ",
                        out.shape_str(), " are not a dense [", shape.outer, ", ", shape.reduce,
                        ", ", shape.inner, "] pair of one dtype on one device");
  if (indices != nullptr)
    EMBER_INTERNAL_ASSERT(indices->dtype() == DType::i64 && indices->numel() == in.numel() &&
                              indices->is_contiguous() && indices->device() == in.device(),
                          scan_op_name(op), ": indices must be a dense int64 tensor like out");
  if (in.numel() == 0) return;
  DeviceGuard device_guard(in.device());
  cudaStream_t stream = stream_of(in.device());
  dispatch_all_dtypes(in.dtype(), scan_op_name(op), [&](auto tag) {
    using scalar_t = decltype(tag);
    if (op == ScanOp::sum || op == ScanOp::prod)
      launch_scan<scalar_t>(out, indices, in, shape, ArithScan<scalar_t>{op == ScanOp::prod},
                            stream);
    else
      launch_scan<scalar_t>(out, indices, in, shape, ExtremeScan<scalar_t>{op == ScanOp::max},
                            stream);
  });
}

}  // namespace
}  // namespace ember::cuda

namespace ember {
EMBER_REGISTER_KERNEL(scan_kernel, CUDA, dispatch::kAllTypes, &cuda::scan_cuda);
}  // namespace ember
