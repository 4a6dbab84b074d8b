// Global average pooling (adaptive average pooling to size 1) of dense channels_last (NHWC)
// input, float32 and bfloat16 (algorithms global_nhwc and global_nchw,
// pooling_nhwc_algorithms.cu): a thread per (n, channel group) summing over the H*W rows, rows
// split over the block's y threads (reduced in shared memory) when there are too few (n, group)
// items to fill the GPU. Backward writes grad_out[n, c] / (H*W) into a dense NHWC or NCHW
// gradient with 16-byte stores; NHWC reads grad_out as one 16-byte vector per (n, channel group)
// where it is dense and aligned, element by element otherwise. Launched dependent, as the window
// kernels.
#include <algorithm>

#include "ember/cuda_kernels/pooling/pooling_nhwc.cuh"

namespace ember::cuda {
namespace {

// Threads the global-average kernels aim for before they stop splitting rows over threadIdx.y.
constexpr int64_t kGlobalThreadsPerSm = 2048;

// Global average of dense NHWC input [N, plane, C] into dense [N, C]. Block (bx, by): x runs over
// (n, channel group) items, y splits the plane's rows; partial sums meet in shared memory.
template <typename T, int V>
__global__ void __launch_bounds__(kBlockThreads)
    global_avg_pool_nhwc_forward_kernel(const T* __restrict__ in, T* __restrict__ out, int items,
                                        int groups, int channels, int plane) {
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
  using Vec = AlignedVec<T, V>;
  __shared__ float partial[V * kBlockThreads];  // [V][by][bx]: conflict-free along x
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
  const int item = blockIdx.x * bx + tx;
  const int n = item / groups, c0 = (item - n * groups) * V;
  float sum[V];
#pragma unroll
  for (int j = 0; j < V; ++j) sum[j] = 0.f;
  if (item < items) {
    const T* src = in + n * plane * channels + c0;
    // Unrolled by 4: four rows' loads in flight (batches of 8 rows are slower).
#pragma unroll 4
    for (int p = ty; p < plane; p += by) {
      const Vec v = *reinterpret_cast<const Vec*>(src + p * channels);
#pragma unroll
      for (int j = 0; j < V; ++j) sum[j] += convert<float>(v.v[j]);
    }
  }
  if (by > 1) {  // uniform over the block
#pragma unroll
    for (int j = 0; j < V; ++j) partial[(j * by + ty) * bx + tx] = sum[j];
    __syncthreads();
    if (ty == 0) {
      // k outer, channels inner: V independent chains whose loads overlap (each channel still
      // sums k = 0, 1, ... in order).
#pragma unroll
      for (int j = 0; j < V; ++j) sum[j] = 0.f;
      for (int k = 0; k < by; ++k)
#pragma unroll
        for (int j = 0; j < V; ++j) sum[j] += partial[(j * by + k) * bx + tx];
    }
  }
  if (ty == 0 && item < items) {
    Vec result;
#pragma unroll
    for (int j = 0; j < V; ++j) result.v[j] = convert<T>(sum[j] / float(plane));
    *reinterpret_cast<Vec*>(out + n * channels + c0) = result;
  }
}

// grad_in[n, p, c] = grad_out[n, c] / plane for a dense NHWC grad_in [N, plane, C]; grad_out is
// read through its strides: one 16-byte load per thread where its channels are contiguous and
// aligned (`vector_grad_out`, uniform: the [N, C] gradient of a dense output), else V scalar loads
// (broadcast gradients, stride 0). The block shape is the forward's; the rows' stores are unrolled
// so that a thread's stores issue back to back once its value is known.
template <typename T, int V>
__global__ void __launch_bounds__(kBlockThreads)
    global_avg_pool_nhwc_backward_kernel(T* __restrict__ grad_in, const T* __restrict__ grad_out,
                                         int items, int groups, int channels, int plane,
                                         int64_t grad_out_stride_n, int64_t grad_out_stride_c,
                                         bool vector_grad_out) {
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
  using Vec = AlignedVec<T, V>;
  const int item = blockIdx.x * blockDim.x + threadIdx.x;
  if (item >= items) return;
  const int n = item / groups, c0 = (item - n * groups) * V;
  const T* src = grad_out + n * grad_out_stride_n;
  Vec value;
  if (vector_grad_out) {
    value = *reinterpret_cast<const Vec*>(src + c0);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) value.v[j] = src[(c0 + j) * grad_out_stride_c];
  }
#pragma unroll
  for (int j = 0; j < V; ++j) value.v[j] = convert<T>(convert<float>(value.v[j]) / float(plane));
  T* dst = grad_in + n * plane * channels + c0;
#pragma unroll 4
  for (int p = threadIdx.y; p < plane; p += blockDim.y)
    *reinterpret_cast<Vec*>(dst + p * channels) = value;
}

// grad_in[n, c, p] = grad_out[n, c] / plane for a dense NCHW grad_in of `total` elements (planes
// of `plane` elements): V consecutive elements per thread (they may span planes), the last
// vector stored element by element when total % V != 0.
template <typename T, int V>
__global__ void __launch_bounds__(kBlockThreads)
    global_avg_pool_nchw_backward_kernel(T* __restrict__ grad_in, const T* __restrict__ grad_out,
                                         int total, FastDivmod by_plane, FastDivmod by_channels,
                                         int plane, int64_t grad_out_stride_n,
                                         int64_t grad_out_stride_c) {
  wait_for_prior_grid();  // launched dependent: the previous kernel may still be finishing
  allow_dependents();
  using Vec = AlignedVec<T, V>;
  auto plane_value = [&](uint32_t p) {
    const uint32_t n = by_channels.div(p);
    const uint32_t c = p - n * by_channels.divisor;
    return convert<T>(
        convert<float>(grad_out[int64_t(n) * grad_out_stride_n + int64_t(c) * grad_out_stride_c]) /
        float(plane));
  };
  const int64_t vectors = (int64_t(total) + V - 1) / V;
  const int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= vectors) return;
  const int first = int(v * V);
  const int count = ::min(V, total - first);
  uint32_t p = by_plane.div(uint32_t(first));
  int within = first - int(p) * plane;
  T current = plane_value(p);
  Vec out;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    if (j < count) {
      if (within == plane) {
        ++p;
        within = 0;
        current = plane_value(p);
      }
      out.v[j] = current;
      ++within;
    }
  }
  if (count == V) {
    *reinterpret_cast<Vec*>(grad_in + first) = out;
  } else {
    for (int j = 0; j < count; ++j) grad_in[first + j] = out.v[j];
  }
}

// Rows of the plane split over threadIdx.y for `items` (n, channel group) items: doubled while the
// doubled grid still fits kGlobalThreadsPerSm threads per SM (the kernels use <= 32 registers, so
// it is one resident wave: no second, partly filled wave of blocks, and fewer partial sums to
// reduce) and each y thread keeps at least one row. ResNet's head (256 x 2048 x 7 x 7): 4 rows
// per (n, group) in bf16, 2 in f32, about 12 loads of 16 bytes per thread.
dim3 global_block(int64_t items, int64_t plane, int device) {
  const int64_t target =
      int64_t(std::max(device_properties(device).sm_count, 1)) * kGlobalThreadsPerSm;
  int by = 1;
  while (by < kBlockThreads && 2 * by <= plane && items * by * 2 <= target) by *= 2;
  return dim3(unsigned(kBlockThreads / by), unsigned(by));
}

int64_t volume(const PoolArgs& a, const int64_t (&spatial)[3]) {
  return a.batch * a.channels * spatial[0] * spatial[1] * spatial[2];
}

template <typename T>
void launch_global_typed(const PoolArgs& a, PoolFastKernel kernel, dispatch::Direction direction,
                         cudaStream_t stream) {
  constexpr int V = kVectorOf<T>;
  const int device = a.input.device().index;
  const int channels = int(a.channels);
  const int plane = int(a.in_size[0] * a.in_size[1] * a.in_size[2]);
  if (kernel == PoolFastKernel::global_nchw) {
    const int total = int(volume(a, a.in_size));
    launch_dependent(global_avg_pool_nchw_backward_kernel<T, V>,
                     dim3(blocks_for((int64_t(total) + V - 1) / V)), dim3(kBlockThreads), 0, stream,
                     static_cast<T*>(a.input.data_ptr()),
                     static_cast<const T*>(a.output.data_ptr()), total, FastDivmod(uint32_t(plane)),
                     FastDivmod(uint32_t(channels)), plane, a.out_strides[0], a.out_strides[1]);
    EMBER_CUDA_LAUNCH_CHECK();
    return;
  }
  const int groups = channels / V;
  const int items = int(a.batch) * groups;
  const dim3 block = global_block(items, plane, device);
  const unsigned grid = unsigned((items + int64_t(block.x) - 1) / block.x);
  if (direction == dispatch::Direction::forward)
    launch_dependent(global_avg_pool_nhwc_forward_kernel<T, V>, dim3(grid), block, 0, stream,
                     static_cast<const T*>(a.input.data_ptr()),
                     static_cast<T*>(a.output.data_ptr()), items, groups, channels, plane);
  else
    launch_dependent(global_avg_pool_nhwc_backward_kernel<T, V>, dim3(grid), block, 0, stream,
                     static_cast<T*>(a.input.data_ptr()),
                     static_cast<const T*>(a.output.data_ptr()), items, groups, channels, plane,
                     a.out_strides[0], a.out_strides[1],
                     a.out_strides[1] == 1 && (a.batch == 1 || a.out_strides[0] % V == 0) &&
                         aligned16(a.output));
}

}  // namespace

void launch_global(const PoolArgs& a, PoolFastKernel kernel, dispatch::Direction direction,
                   cudaStream_t stream) {
  dispatch_floating<FloatingTypes::f32_bf16>(
      a.input.dtype(), "pooling", "global average",
      [&](auto tag) { launch_global_typed<decltype(tag)>(a, kernel, direction, stream); });
}

}  // namespace ember::cuda
