// The launchers of the implicit-GEMM fprop kernels (mma.sync tiles, their split-K builds, the
// wgmma and warp-specialized wgmma tiles, the halo kernel) and their explicit instantiations for
// float, __half and __nv_bfloat16: the one source that compiles those kernels.
#include <algorithm>

#include "ember/cuda_kernels/conv/implicit_gemm_halo_fprop.cuh"
#include "ember/cuda_kernels/conv/implicit_gemm_host.cuh"
#include "ember/cuda_kernels/conv/implicit_gemm_wgmma.cuh"

namespace ember::cuda::conv {
namespace {

using igemm::FpropParams;

// 192 KiB of stages per SM each: one wide or square block, two narrow ones.
constexpr int kWgmmaWideStages = 4, kWgmmaSquareStages = 6, kWgmmaNarrowStages = 4;

// The grid of an fprop kernel with BM x BN tiles: the tiles along x (fprop_block_origin), the
// split-K slices along y (one unless the plan split), the backward-data phases along z.
dim3 fprop_grid(const FpropParams& p, int bm, int bn) {
  const int64_t blocks = int64_t((p.M + bm - 1) / bm) * ((p.Nout + bn - 1) / bn);
  const int64_t splits = (p.k_tiles + p.tiles_per_split - 1) / p.tiles_per_split;
  return dim3{unsigned(blocks), unsigned(std::max<int64_t>(splits, 1)),  // a phase without taps: 1
              unsigned(p.phases)};
}

template <typename T, int BM, int BN, int WM, int WN, int STAGES, bool kVec, bool kSplitK = false>
void launch_fprop(const FpropParams& p, cudaStream_t stream, int device) {
  constexpr auto kernel =
      igemm::implicit_gemm_fprop_kernel<T, BM, BN, WM, WN, STAGES, kVec, kSplitK>;
  constexpr int smem = igemm::fprop_smem_bytes<BM, BN, STAGES>();
  // The largest carveout, so that as many blocks as the tile was sized for fit on one SM.
  opt_in_max_dynamic_shared_memory<kernel, SharedCarveout::max_shared>(device);
  kernel<<<fprop_grid(p, BM, BN), igemm::TileShape<BM, BN, WM, WN>::kThreads, smem, stream>>>(p);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T, int BM, int BN, int STAGES, bool kSplitK>
void launch_wgmma_fprop(const FpropParams& p, cudaStream_t stream, int device) {
  constexpr auto kernel = igemm::implicit_gemm_fprop_wgmma_kernel<T, BM, BN, STAGES, kSplitK>;
  constexpr int smem = igemm::wgmma_fprop_smem_bytes<BM, BN, STAGES>();
  opt_in_max_dynamic_shared_memory<kernel, SharedCarveout::max_shared>(device);
  kernel<<<fprop_grid(p, BM, BN), igemm::kWgmmaThreads, smem, stream>>>(p);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T, int BM, int BN, int STAGES>
void launch_wgmma_ws_fprop(const FpropParams& p, cudaStream_t stream, int device) {
  constexpr auto kernel = igemm::implicit_gemm_fprop_wgmma_ws_kernel<T, BM, BN, STAGES>;
  constexpr int smem = igemm::wgmma_ws_smem_bytes<BM, BN, STAGES>();
  opt_in_max_dynamic_shared_memory<kernel, SharedCarveout::max_shared>(device);
  kernel<<<fprop_grid(p, BM, BN), igemm::kWgmmaWsThreads, smem, stream>>>(p);
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace

// `split`: the split-K build of the tile (square, small and wgmma_square only:
// kSplitFpropAlgorithms).
template <typename T>
void launch_fprop_tile(FpropTile tile, bool split, const FpropParams& p, cudaStream_t stream,
                       int device) {
  if (split) {
    EMBER_CHECK(
        tile == FpropTile::square || tile == FpropTile::small || tile == FpropTile::wgmma_square,
        "implicit_gemm: no split-K build of fprop tile ", int(tile));
    if (tile == FpropTile::wgmma_square) {
      launch_wgmma_fprop<T, 128, 128, kWgmmaSquareStages, true>(p, stream, device);
    } else if (tile == FpropTile::square) {
      launch_fprop<T, 128, 128, 64, 64, 3, true, true>(p, stream, device);
    } else {
      launch_fprop<T, 64, 64, 32, 32, 3, true, true>(p, stream, device);
    }
    return;
  }
  switch (tile) {
    case FpropTile::wide:
      launch_fprop<T, 256, 128, 64, 64, 4, true>(p, stream, device);
      break;
    case FpropTile::square:
      launch_fprop<T, 128, 128, 64, 64, 3, true>(p, stream, device);
      break;
    case FpropTile::narrow:
      launch_fprop<T, 128, 64, 64, 32, 3, true>(p, stream, device);
      break;
    case FpropTile::small:
      launch_fprop<T, 64, 64, 32, 32, 3, true>(p, stream, device);
      break;
    case FpropTile::general:
      launch_fprop<T, kGeneralTile, kGeneralTile, 32, 32, 3, false>(p, stream, device);
      break;
    case FpropTile::wgmma_wide:
      launch_wgmma_fprop<T, 256, 128, kWgmmaWideStages, false>(p, stream, device);
      break;
    case FpropTile::wgmma_square:
      launch_wgmma_fprop<T, 128, 128, kWgmmaSquareStages, false>(p, stream, device);
      break;
    case FpropTile::wgmma_narrow:
      launch_wgmma_fprop<T, 128, 64, kWgmmaNarrowStages, false>(p, stream, device);
      break;
    case FpropTile::wgmma_ws_wide:
      launch_wgmma_ws_fprop<T, 256, 128, kWgmmaWideStages>(p, stream, device);
      break;
    case FpropTile::wgmma_ws_square:
      launch_wgmma_ws_fprop<T, 128, 128, kWgmmaSquareStages>(p, stream, device);
      break;
  }
}

// The halo kernel (one 256 x 64 tile, 8 warps, one block per SM; never split).
template <typename T>
void launch_halo_fprop(const FpropParams& p, cudaStream_t stream, int device) {
  constexpr auto kernel = igemm::implicit_gemm_halo_fprop_kernel<T>;
  opt_in_max_dynamic_shared_memory<kernel, SharedCarveout::max_shared>(device);
  kernel<<<fprop_grid(p, igemm::kHaloFpropBM, igemm::kHaloFpropBN), igemm::kHaloFpropThreads,
           igemm::kHaloFpropSmemBytes, stream>>>(p);
  EMBER_CUDA_LAUNCH_CHECK();
}

template void launch_fprop_tile<float>(FpropTile, bool, const FpropParams&, cudaStream_t, int);
template void launch_fprop_tile<__half>(FpropTile, bool, const FpropParams&, cudaStream_t, int);
template void launch_fprop_tile<__nv_bfloat16>(FpropTile, bool, const FpropParams&, cudaStream_t,
                                               int);
template void launch_halo_fprop<__half>(const FpropParams&, cudaStream_t, int);
template void launch_halo_fprop<__nv_bfloat16>(const FpropParams&, cudaStream_t, int);

}  // namespace ember::cuda::conv
