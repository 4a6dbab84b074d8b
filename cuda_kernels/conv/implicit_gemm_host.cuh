// Host-side pieces shared by the implicit-GEMM sources of cuda_kernels/conv/
// (implicit_gemm_fprop.cu, implicit_gemm_wgrad.cu, implicit_gemm_launch.cu): dtype facts, the
// dtype lists the algorithms register for, the fixed-tile cost factor, the split-K rule, the fprop
// tiles and their launchers (defined, and instantiated for float, __half and __nv_bfloat16, in
// implicit_gemm_launch.cu). Include only from those sources.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "ember/cuda_kernels/conv/conv_common.cuh"
#include "ember/cuda_kernels/conv/implicit_gemm.cuh"

namespace ember::cuda::conv {

inline int vector_elems(DType t) { return int(16 / element_size(t)); }
inline int block_k_elems(DType t) {  // fprop channels per stage
  return int(igemm::kFpropRowBytes / element_size(t));
}

inline bool tensor_core_dtype(const ConvProblem& pr) {
  const DType t = pr.input.dtype();
  return t == DType::bf16 || t == DType::f16 || (t == DType::f32 && pr.allow_tf32);
}

inline const std::vector<DType> kSixteenBitTypes = {DType::f16, DType::bf16};
inline const std::vector<DType> kTensorCoreTypes = {DType::f32, DType::f16, DType::bf16};

// A fixed-tile variant's estimate is above the auto-picking algorithm's (whose choice among the
// same tiles it is meant to check), so the heuristic keeps choosing that one; the benchmark mode
// times every variant.
inline constexpr double kFixedTileCostFactor = 1.01;

// Splits of `k_tiles` for a grid of `grid` tiles on `slots` resident blocks: the fewest whose
// blocks fill the slots to 90% counting the last partial wave, else the best fill, trying up to
// four waves' worth; each split walks at least 6 k-tiles (twice a pipeline). Every split gets
// at least one k-tile.
void split_k(int64_t grid, int64_t k_tiles, int64_t slots, int64_t& tiles_per_split,
             int64_t& splits);

// ---- fprop tiles and their launchers ---------------------------------------------------------

enum class FpropTile : uint8_t {
  wide,
  square,
  narrow,
  small,
  general,
  wgmma_wide,
  wgmma_square,
  wgmma_narrow,
  wgmma_ws_wide,
  wgmma_ws_square
};
constexpr int kGeneralTile = 64;  // the element-load path's square tile

// Launches the fprop kernel of `tile` (`split`: its split-K build; square, small and
// wgmma_square only) for the launch's FpropParams.
template <typename T>
void launch_fprop_tile(FpropTile tile, bool split, const igemm::FpropParams& p, cudaStream_t stream,
                       int device);
// The halo fprop kernel (16-bit types only).
template <typename T>
void launch_halo_fprop(const igemm::FpropParams& p, cudaStream_t stream, int device);

}  // namespace ember::cuda::conv
