// CUDA kernel behind layout_transpose_kernel (kernel_interface/layout.h), the NCHW <-> NHWC
// conversion: a batched transpose through 32 x 32 shared-memory tiles (one column of padding
// against bank conflicts), so that both the global reads (along src rows) and the global writes
// (along dst rows) are coalesced. A block of 32 x 8 threads moves one tile per iteration of a
// grid-stride loop over (batch, tile row, tile column). Values move as element-sized words: one
// instantiation per element size (1, 2, 4, 8 bytes) serves every dtype.
#include "ember/cuda_kernels/common/common.cuh"
#include "ember/kernel_interface/layout.h"

namespace ember::cuda {
namespace {

constexpr int kTile = 32;
constexpr int kTileRowsPerPass = 8;  // blockDim.y: each thread moves kTile / 8 words per tile

template <typename Word>
__global__ void __launch_bounds__(kTile* kTileRowsPerPass)
    transpose_tiles_kernel(Word* __restrict__ dst, const Word* __restrict__ src, int64_t batch,
                           int64_t rows, int64_t cols, int64_t tiles_r, int64_t tiles_c) {
  __shared__ Word tile[kTile][kTile + 1];
  const int64_t tiles_per_plane = tiles_r * tiles_c;
  const int64_t total_tiles = batch * tiles_per_plane;
  const int64_t plane = rows * cols;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t t = blockIdx.x; t < total_tiles; t += gridDim.x) {
    const int64_t b = t / tiles_per_plane;
    const int64_t in_plane = t - b * tiles_per_plane;
    const int64_t r0 = (in_plane / tiles_c) * kTile;
    const int64_t c0 = (in_plane % tiles_c) * kTile;
    const Word* s = src + b * plane;
    Word* d = dst + b * plane;
#pragma unroll
    for (int j = 0; j < kTile; j += kTileRowsPerPass) {
      const int64_t r = r0 + ty + j, c = c0 + tx;
      if (r < rows && c < cols) tile[ty + j][tx] = s[r * cols + c];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kTile; j += kTileRowsPerPass) {
      const int64_t c = c0 + ty + j, r = r0 + tx;
      if (r < rows && c < cols) d[c * rows + r] = tile[tx][ty + j];
    }
    __syncthreads();  // the tile is rewritten by the next iteration
  }
}

template <typename Word>
void launch_transpose(const Tensor& dst, const Tensor& src, int64_t batch, int64_t rows,
                      int64_t cols, cudaStream_t stream) {
  const int64_t tiles_r = (rows + kTile - 1) / kTile, tiles_c = (cols + kTile - 1) / kTile;
  const int64_t total = batch * tiles_r * tiles_c;
  // Several resident blocks per SM (each uses 4-8 KiB of shared memory); the loop covers the rest.
  const int64_t cap = int64_t(device_properties(dst.device().index).sm_count) * 16;
  const unsigned grid = unsigned(std::max<int64_t>(1, std::min(total, cap)));
  transpose_tiles_kernel<Word><<<grid, dim3(kTile, kTileRowsPerPass), 0, stream>>>(
      static_cast<Word*>(dst.data_ptr()), static_cast<const Word*>(src.data_ptr()), batch, rows,
      cols, tiles_r, tiles_c);
  EMBER_CUDA_LAUNCH_CHECK();
}

void layout_transpose_cuda(const Tensor& dst, const Tensor& src, int64_t batch, int64_t rows,
                           int64_t cols) {
  EMBER_INTERNAL_ASSERT(dst.numel() == batch * rows * cols && src.numel() == dst.numel() &&
                            dst.dtype() == src.dtype() && dst.device() == src.device(),
                        "layout_transpose_kernel: dst ", dst.shape_str(), " and src ",
                        src.shape_str(), " do not hold [", batch, ", ", rows, ", ", cols, "]");
  if (dst.numel() == 0) return;
  DeviceGuard device_guard(dst.device());
  cudaStream_t stream = stream_of(dst.device());
  switch (dst.element_size()) {
    case 1:
      launch_transpose<uint8_t>(dst, src, batch, rows, cols, stream);
      break;
    case 2:
      launch_transpose<uint16_t>(dst, src, batch, rows, cols, stream);
      break;
    case 4:
      launch_transpose<uint32_t>(dst, src, batch, rows, cols, stream);
      break;
    case 8:
      launch_transpose<uint64_t>(dst, src, batch, rows, cols, stream);
      break;
    default:
      EMBER_INTERNAL_ASSERT(false, "layout_transpose_kernel: element size ", dst.element_size());
  }
}

}  // namespace
}  // namespace ember::cuda

namespace ember {
EMBER_REGISTER_KERNEL(layout_transpose_kernel, CUDA, dispatch::kAllTypes,
                      &cuda::layout_transpose_cuda);
}  // namespace ember
