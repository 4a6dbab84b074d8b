// implicit_gemm, forward and backward_data: conv2d on tensor cores without an im2col buffer
// (kernels in implicit_gemm.cuh, implicit_gemm_halo_fprop.cuh and implicit_gemm_wgmma.cuh,
// launched from implicit_gemm_launch.cu), registered in the algorithm cache for bf16, f16 and f32
// (as TF32, so only when the problem allows TF32), groups == 1:
//   forward / backward_data  "implicit_gemm": the fprop kernel. The filter is packed once per call
//       into the workspace as [Nout][R][S][Cpad] (forward: W as KRSC), zero-padded to whole
//       channel blocks; a forward with a KRSC weight whose C is a multiple of the block uses the
//       weight in place. Backward_data runs one stride-1 forward convolution of dy per phase of
//       the stride (see backward-data phases below; stride 1: one), W^T packed as CRSK, spatially
//       flipped, phase by phase; strided backward_data needs dilation 1 along the strided axes.
//       Tiles: 256x128 (8 warps of 64x64), 128x128 (4 of 64x64), 128x64 (4 of 64x32) or 64x64
//       (4 of 32x32), and where wgmma runs the wgmma
//       kernel's 256x128, 128x128 and 128x64, the one whose busiest SM has the least work
//       (partial last waves count); channel counts that are not a multiple of 8 (16-bit) /
//       4 (fp32) take the general (element-load) 64x64 path.
//   forward / backward_data  "implicit_gemm_256x128", "_128x128", "_128x64", "_64x64": the same
//       kernel with that tile fixed (channel counts with 16-byte vectors only), for the benchmark
//       mode to time against the wave model's pick; the heuristic ranks them behind it.
//   forward / backward_data  "implicit_gemm_128x128_splitk", "_64x64_splitk": those tiles with the
//       reduction (taps x channel blocks) split over blockIdx.y into fp32 partials, summed in a
//       fixed order by a second kernel, where the tile's blocks alone leave SMs idle (ResNet's
//       7x7 / 14x14 layers: 3136 / 12544 rows); ranked behind "implicit_gemm" likewise.
//   forward / backward_data  "implicit_gemm_halo": bf16/f16, 3x3, stride 1, dilation 1, padding 1,
//       the reduced channels (C forward, K backward_data) a multiple of 64 (ResNet's 3x3 layers):
//       256 destination pixels x 64 channels per block, each stage (filter row r, 64 channels)
//       loading the strip's source rows once with a halo for the three taps instead of gathering
//       them per tap (55 MACs per byte loaded against 21-43 for the tiles above); no bias/ReLU
//       epilogue in its kernel (the epilogue pass follows it); ranked behind "implicit_gemm" for
//       the benchmark mode to time.
//   forward / backward_data  "implicit_gemm_wgmma_256x128", "implicit_gemm_wgmma_128x128",
//       "implicit_gemm_wgmma_128x64", "implicit_gemm_wgmma_128x128_splitk": the fprop GEMM on
//       Hopper's warpgroup MMA (implicit_gemm_wgmma.cuh; sm_90a builds on compute
//       capability 9.0 devices only), vector path only, same plan, packing and staging as the
//       tiles above.
//   forward / backward_data  "implicit_gemm_wgmma_ws_256x128", "implicit_gemm_wgmma_ws_128x128":
//       the same GEMM warp-specialized (a producer warpgroup gathers, two consumer warpgroups
//       multiply; mbarriers between them), for the benchmark mode to time.
// Activations not in channels_last are staged into the workspace (and written back). Every
// direction OVERWRITES the tensor it writes. "implicit_gemm" forward applies a problem's bias +
// ReLU epilogue in its kernel (the other tiles leave it to the epilogue pass).
#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "ember/cuda_kernels/conv/implicit_gemm_halo_fprop.cuh"
#include "ember/cuda_kernels/conv/implicit_gemm_host.cuh"
#include "ember/cuda_kernels/conv/implicit_gemm_wgmma.cuh"

namespace ember::cuda::conv {

// Splits of `k_tiles` for a grid of `grid` tiles on `slots` resident blocks: the fewest whose
// blocks fill the slots to 90% counting the last partial wave, else the best fill, trying up to
// four waves' worth; each split walks at least 6 k-tiles (twice a pipeline). Every split gets
// at least one k-tile.
void split_k(int64_t grid, int64_t k_tiles, int64_t slots, int64_t& tiles_per_split,
             int64_t& splits) {
  const int64_t max_splits = std::min<int64_t>(std::max<int64_t>(1, k_tiles / 6), 65535);
  const int64_t tried = std::min<int64_t>(max_splits, 4 * ((slots + grid - 1) / grid));
  int64_t best = 1;
  double best_fill = 0;
  for (int64_t s = 1; s <= tried; ++s) {
    const int64_t blocks = grid * s;
    const double fill = double(blocks) / double((blocks + slots - 1) / slots * slots);
    if (fill > best_fill) best_fill = fill, best = s;
    if (fill >= 0.9) break;
  }
  tiles_per_split = (k_tiles + best - 1) / best;
  splits = (k_tiles + tiles_per_split - 1) / tiles_per_split;
}

namespace {

using igemm::FpropParams;

// ---- backward-data phases ---------------------------------------------------------------------
// Along one axis, dx[h] = sum over taps r of dy[(h + pad - r*dil) / stride] W[r], over the taps
// where that division is exact. The destination rows h = a, a + stride, ... (phase a < stride)
// all take the taps r = first_tap + stride*j (first_tap = (a + pad) mod stride, dilation 1),
// reading dy row i + e - j for h = a + stride*i (e = (a + pad - first_tap) / stride): a stride-1
// forward convolution of dy with those taps in reverse order (packed tap t is W's tap
// first_tap + stride*(taps - 1 - t)) and padding taps - 1 - e. Stride 1: one phase, all R taps
// flipped, padding dil*(R - 1) - pad (the dilation stays). The phases' taps partition W's.
struct PhaseTaps {
  int64_t first_tap, taps;
};
__host__ __device__ inline PhaseTaps phase_taps(int64_t a, int64_t R, int64_t stride, int64_t pad) {
  const int64_t first = (a + pad) % stride;
  return {first, first < R ? (R - first + stride - 1) / stride : 0};
}
struct PhaseAxis {
  int64_t first_row, rows;  // destination rows first_row, first_row + stride, ... below extent
  PhaseTaps taps;
  int64_t pad;  // of the stride-1 convolution computing them
};
PhaseAxis phase_axis(int64_t a, int64_t extent, int64_t R, int64_t stride, int64_t pad,
                     int64_t dil) {
  PhaseAxis x{};
  x.first_row = a;
  x.rows = a < extent ? (extent - a + stride - 1) / stride : 0;
  x.taps = phase_taps(a, R, stride, pad);
  x.pad = dil * (x.taps.taps - 1) - (a + pad - x.taps.first_tap) / stride;
  return x;
}

// How a packed filter's taps map to W's: forward, the identity; backward_data, phase by phase
// (row phases outer), each phase's [Nout][taps_h][taps_w][Cpad] slice after the previous ones.
struct FilterPack {
  bool backward_data;
  int R, S, sh, sw, ph, pw;
};
struct PackedTap {
  int64_t slice;   // first element of its phase's slice, over Nout * Cpad
  int slice_taps;  // taps of that phase
  int t;           // the tap within the phase
  int r, s;        // W's tap
};
__device__ inline PackedTap packed_tap(const FilterPack& fp, int tau) {
  if (!fp.backward_data) return {0, fp.R * fp.S, tau, tau / fp.S, tau % fp.S};
  int base = 0;
  for (int a = 0; a < fp.sh; ++a) {
    const PhaseTaps th = phase_taps(a, fp.R, fp.sh, fp.ph);
    for (int b = 0; b < fp.sw; ++b) {
      const PhaseTaps tw = phase_taps(b, fp.S, fp.sw, fp.pw);
      const int count = int(th.taps * tw.taps);
      if (tau < base + count) {
        const int t = tau - base, tr = t / int(tw.taps), ts = t - tr * int(tw.taps);
        return {base, count, t, int(th.first_tap + fp.sh * (th.taps - 1 - tr)),
                int(tw.first_tap + fp.sw * (tw.taps - 1 - ts))};
      }
      base += count;
    }
  }
  return {0, 0, 0, 0, 0};  // tau >= R * S: not launched
}

// Packs W into out: packed tap tau (packed_tap) of destination channel o, reduced channel i < Cpad
// is W[o, i, r, s] (forward) or W[i, o, r, s] (backward_data), zero for i >= Cin. A block moves
// 32 x 32 tiles of (o, i) at one tap through shared memory, reading with its lanes along W's
// channel dimension c and writing along i: both sides are coalesced for a channels-last W whether
// c is i (forward) or o (backward_data: each tap's [K][C] matrix is transposed).
constexpr int kPackTile = 32;
constexpr int kPackThreads = kPackTile * 8;
template <typename T>
__global__ void __launch_bounds__(kPackThreads)
    pack_filter_kernel(const T* __restrict__ w, int64_t ws0, int64_t ws1, int64_t ws2, int64_t ws3,
                       FilterPack fp, int Nout, int Cin, int Cpad, T* __restrict__ out) {
  __shared__ T tile[kPackTile][kPackTile + 1];  // [o - o0][i - i0]; the +1 spreads the banks
  const int lane = int(threadIdx.x) % kPackTile, row = int(threadIdx.x) / kPackTile;
  const bool transposed = fp.backward_data;
  const int i0 = int(blockIdx.x) * kPackTile;
  for (int o0 = int(blockIdx.y) * kPackTile; o0 < Nout; o0 += int(gridDim.y) * kPackTile) {
    for (int tau = int(blockIdx.z); tau < fp.R * fp.S; tau += int(gridDim.z)) {
      const PackedTap pt = packed_tap(fp, tau);
      const T* w_tap = w + int64_t(pt.r) * ws2 + int64_t(pt.s) * ws3;
      for (int j = row; j < kPackTile; j += kPackThreads / kPackTile) {
        const int o = o0 + (transposed ? lane : j), i = i0 + (transposed ? j : lane);
        T v = convert<T>(0.0f);
        if (o < Nout && i < Cin) {
          const int64_t k = transposed ? i : o, c = transposed ? o : i;
          v = w_tap[k * ws0 + c * ws1];
        }
        tile[o - o0][i - i0] = v;
      }
      __syncthreads();
      T* slice = out + pt.slice * Nout * Cpad;
      for (int j = row; j < kPackTile; j += kPackThreads / kPackTile) {
        const int o = o0 + j, i = i0 + lane;
        if (o < Nout && i < Cpad)
          slice[(int64_t(o) * pt.slice_taps + pt.t) * Cpad + i] = tile[j][lane];
      }
      __syncthreads();  // the tile is rewritten next
    }
  }
}

// The same packing for backward_data when W is channels-last with whole 16-byte vectors (W's c,
// the packed o, contiguous; every stride and Nout multiples of V): 64 x 64 tiles of (i, o) at one
// tap, read as 16-byte vectors along W's c and written as 16-byte vectors along the packed i, the
// transpose in shared memory (rows of kPackVecTile + 4 / sizeof(T) elements: an odd number of
// 32-bit words, so a column read touches distinct banks but for one 2-way pair). ResNet's 3x3
// backward_data packs its filter every step, where the scalar 32 x 32 tiles are slower.
constexpr int kPackVecTile = 64;
template <typename T>
__global__ void __launch_bounds__(kPackThreads)
    pack_filter_transposed_kernel(const T* __restrict__ w, int64_t ws0, int64_t ws2, int64_t ws3,
                                  FilterPack fp, int Nout, int Cin, int Cpad, T* __restrict__ out) {
  constexpr int V = 16 / int(sizeof(T));
  constexpr int kVecs = kPackVecTile / V;  // vectors per tile row
  constexpr int kRow = kPackVecTile + 4 / int(sizeof(T));
  using Vec = AlignedVec<T, V>;
  __shared__ T tile[kPackVecTile * kRow];  // [i - i0][o - o0]
  const int i0 = int(blockIdx.x) * kPackVecTile;
  for (int o0 = int(blockIdx.y) * kPackVecTile; o0 < Nout; o0 += int(gridDim.y) * kPackVecTile) {
    for (int tau = int(blockIdx.z); tau < fp.R * fp.S; tau += int(gridDim.z)) {
      const PackedTap pt = packed_tap(fp, tau);
      const T* w_tap = w + int64_t(pt.r) * ws2 + int64_t(pt.s) * ws3;
      for (int idx = int(threadIdx.x); idx < kPackVecTile * kVecs; idx += kPackThreads) {
        const int il = idx / kVecs, ol = (idx % kVecs) * V;
        const int i = i0 + il, o = o0 + ol;  // W's k = i, c = o
        Vec v;
        if (i < Cin && o < Nout) {
          v = *reinterpret_cast<const Vec*>(w_tap + int64_t(i) * ws0 + o);
        } else {
#pragma unroll
          for (int e = 0; e < V; ++e) v.v[e] = convert<T>(0.0f);
        }
#pragma unroll
        for (int e = 0; e < V; ++e) tile[il * kRow + ol + e] = v.v[e];
      }
      __syncthreads();
      T* slice = out + pt.slice * Nout * Cpad;
      for (int idx = int(threadIdx.x); idx < kPackVecTile * kVecs; idx += kPackThreads) {
        const int ol = idx / kVecs, il = (idx % kVecs) * V;
        const int o = o0 + ol, i = i0 + il;
        if (o < Nout && i < Cpad) {
          Vec v;
#pragma unroll
          for (int e = 0; e < V; ++e) v.v[e] = tile[(il + e) * kRow + ol];
          *reinterpret_cast<Vec*>(slice + (int64_t(o) * pt.slice_taps + pt.t) * Cpad + i) = v;
        }
      }
      __syncthreads();  // the tile is rewritten next
    }
  }
}

// The sum over splits of fp32 partials [splits][total], in order of z, as T: split-K fprop.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    fprop_split_reduce_kernel(const float* __restrict__ partial, int64_t splits,
                              T* __restrict__ dst, int64_t total) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    float sum = 0.f;
    for (int64_t z = 0; z < splits; ++z) sum += partial[z * total + idx];
    dst[idx] = convert<T>(sum);
  }
}

// ---- fprop (forward, backward_data) -----------------------------------------------------------

// A tile's shape and its throughput per SM relative to the best tile: warp tiles of 64x32 and
// 32x32 read more shared memory per MMA than 64x64 ones. Blocks per SM (shared memory 192, 96,
// 72, 48 KiB): 1, 2, 3, 4, i.e. 8, 8, 12, 16 warps (TF32: at most 2 blocks).
struct FpropTileInfo {
  FpropTile tile;
  int bm, bn;
  double relative_speed;
};
constexpr FpropTileInfo kFpropTiles[] = {{FpropTile::wide, 256, 128, 1.0},
                                         {FpropTile::square, 128, 128, 0.95},
                                         {FpropTile::narrow, 128, 64, 0.8},
                                         {FpropTile::small, 64, 64, 0.5}};
// The wgmma kernel's tiles (implicit_gemm_wgmma.cuh): blocks of 8 warps, one per SM (n128)
// or two (128x64: 64-channel outputs, where an n128 tile would compute half padding). Their
// relative speed here is the cost model's (as the wide mma.sync tile's); the wave model below
// scales it by wgmma_speedup.
// The warp-specialized kernel's tiles (one block per SM) come after them, so a tie keeps the
// tile above.
constexpr FpropTileInfo kWgmmaFpropTiles[] = {{FpropTile::wgmma_wide, 256, 128, 1.0},
                                              {FpropTile::wgmma_square, 128, 128, 1.0},
                                              {FpropTile::wgmma_narrow, 128, 64, 0.9},
                                              {FpropTile::wgmma_ws_wide, 256, 128, 1.0},
                                              {FpropTile::wgmma_ws_square, 128, 128, 1.0}};
// Per-SM throughput of a wgmma tile over the mma.sync tile of the same shape (grids of a whole
// wave or more): TF32 gains more than 16-bit types, as mma.sync runs TF32 below the tensor
// cores' TF32 rate.
double wgmma_speedup(DType dtype) { return dtype == DType::f32 ? 1.8 : 1.4; }

bool is_wgmma_tile(FpropTile tile) {
  return tile == FpropTile::wgmma_wide || tile == FpropTile::wgmma_square ||
         tile == FpropTile::wgmma_narrow || tile == FpropTile::wgmma_ws_wide ||
         tile == FpropTile::wgmma_ws_square;
}

// The wgmma kernel exists in this build (CUDA architectures with 90a, CMakeLists.txt) and the
// device runs it (compute capability 9.0).
bool wgmma_available(Device device) {
#ifdef EMBER_CUDA_WGMMA
  const DeviceProperties& props = device_properties(device.index);
  return props.major == 9 && props.minor == 0;
#else
  (void)device;
  return false;
#endif
}

FpropTileInfo fprop_tile_info(FpropTile tile) {
  for (const FpropTileInfo& t : kFpropTiles)
    if (t.tile == tile) return t;
  for (const FpropTileInfo& t : kWgmmaFpropTiles)
    if (t.tile == tile) return t;
  EMBER_CHECK(false, "implicit_gemm: no 16-byte-load fprop tile ", int(tile));
  return kFpropTiles[0];
}

// Whether the fprop kernel can load 16-byte chunks: the channels it reduces over (C forward, K
// backward_data) come in whole vectors. Otherwise only the general path runs the problem.
bool fprop_vector_path(const ConvProblem& pr) {
  const ConvDims d = conv_dims(pr);
  const int64_t csrc = pr.direction == Direction::backward_data ? d.K : d.C;
  return csrc % vector_elems(pr.input.dtype()) == 0;
}

struct FpropPlan {
  bool backward_data;
  int64_t phases_h, phases_w;  // backward-data phases along each axis (the stride), else 1
  int64_t Csrc, Nout, SH, SW, OH, OW, M;
  int64_t M_phase;  // the GEMM rows of the largest phase (M when there is one)
  int64_t Cpad;
  FpropTileInfo tile;
  int64_t k_tiles, tiles_per_split, splits;  // splits > 1: fp32 partials, then a reduction
  bool pack_filter;
  size_t filter_bytes, staging_bytes, partial_bytes, workspace;
};

// Blocks of a tile resident per SM: shared memory of launch_fprop_tile's stages (4 for the wide
// tile, else 3), TF32 at most 2 (fprop_min_blocks); the wgmma tiles' launch bounds.
int64_t fprop_resident_blocks(const FpropTileInfo& t, DType dtype) {
  if (is_wgmma_tile(t.tile)) return igemm::wgmma_blocks_per_sm(t.bn);
  const int stages = t.tile == FpropTile::wide ? 4 : 3;
  const int64_t fit = igemm::blocks_per_sm(stages * int(t.bm + t.bn) * igemm::kFpropRowBytes);
  return dtype == DType::f32 ? std::min<int64_t>(fit, 2) : fit;
}

// `fixed`: the tile to use (a vector-path problem), else the wave model picks. `split`: split
// the reduction (taps x channel blocks) so that the blocks fill the SMs (a fixed tile only).
FpropPlan fprop_plan(const ConvProblem& pr, std::optional<FpropTile> fixed, bool split = false) {
  const ConvDims d = conv_dims(pr);
  FpropPlan f{};
  f.backward_data = pr.direction == Direction::backward_data;
  f.phases_h = f.backward_data ? d.sh : 1;
  f.phases_w = f.backward_data ? d.sw : 1;
  f.Csrc = f.backward_data ? d.K : d.C;
  f.Nout = f.backward_data ? d.C : d.K;
  f.SH = f.backward_data ? d.P : d.H;
  f.SW = f.backward_data ? d.Q : d.W;
  f.OH = f.backward_data ? d.H : d.P;
  f.OW = f.backward_data ? d.W : d.Q;
  f.M = d.N * f.OH * f.OW;
  f.M_phase = d.N * ((f.OH + f.phases_h - 1) / f.phases_h) * ((f.OW + f.phases_w - 1) / f.phases_w);
  const int64_t bk = block_k_elems(pr.input.dtype());
  f.Cpad = (f.Csrc + bk - 1) / bk * bk;
  if (!fprop_vector_path(pr)) {
    f.tile = {FpropTile::general, kGeneralTile, kGeneralTile, 0.1};
  } else if (fixed) {
    f.tile = fprop_tile_info(*fixed);
  } else {
    // The busiest SM's work: its share of the blocks (a partial last wave costs a whole one).
    // The mma.sync tiles count one block per SM at a time (relative_speed covers what sharing an
    // SM does); the narrow wgmma tile runs two per SM by construction. The wgmma tiles compete
    // where they run.
    const int64_t sms = sm_count(pr.device());
    double best = 0;
    auto consider = [&](const FpropTileInfo& t, double speed, int64_t per_sm) {
      const int64_t blocks =
          f.phases_h * f.phases_w * ((f.M_phase + t.bm - 1) / t.bm) * ((f.Nout + t.bn - 1) / t.bn);
      const double work =
          double((blocks + sms * per_sm - 1) / (sms * per_sm)) * per_sm * t.bm * t.bn / speed;
      if (best == 0 || work < best) best = work, f.tile = t;
    };
    for (const FpropTileInfo& t : kFpropTiles) consider(t, t.relative_speed, 1);
    if (wgmma_available(pr.device()))
      for (const FpropTileInfo& t : kWgmmaFpropTiles)
        consider(t, t.relative_speed * wgmma_speedup(pr.input.dtype()),
                 fprop_resident_blocks(t, pr.input.dtype()));
  }
  f.k_tiles = d.RS() * (f.Cpad / bk);
  f.tiles_per_split = f.k_tiles;
  f.splits = 1;
  if (split && fixed && f.phases_h * f.phases_w == 1) {  // the partials are dense [M][Nout]
    const int64_t blocks =
        ((f.M + f.tile.bm - 1) / f.tile.bm) * ((f.Nout + f.tile.bn - 1) / f.tile.bn);
    split_k(blocks, f.k_tiles,
            fprop_resident_blocks(f.tile, pr.input.dtype()) * sm_count(pr.device()),
            f.tiles_per_split, f.splits);
  }
  f.partial_bytes = f.splits > 1 ? size_t(f.splits * f.M * f.Nout) * sizeof(float) : 0;
  f.pack_filter = f.backward_data || !dense_as(pr.weight, Form::nhwc) || f.Cpad != f.Csrc;
  f.filter_bytes = f.pack_filter ? size_t(f.Nout * d.RS() * f.Cpad) * pr.input.element_size() : 0;
  const Tensor& src = f.backward_data ? pr.output : pr.input;
  const Tensor& dst = f.backward_data ? pr.input : pr.output;
  WorkspacePlan ws;
  ws.add(staging_bytes(src, Form::nhwc));
  ws.add(staging_bytes(dst, Form::nhwc));
  f.staging_bytes = ws.bytes;
  ws.add(f.filter_bytes);
  ws.add(f.partial_bytes);
  f.workspace = ws.bytes;
  return f;
}

// The fprop kernel launches of a plan: backward-data phases go kMaxFpropPhases at a time.
int64_t fprop_launches(const FpropPlan& f) {
  return (f.phases_h * f.phases_w + igemm::kMaxFpropPhases - 1) / igemm::kMaxFpropPhases;
}

// Runs forward or backward_data with the `fixed` tile (else the wave model's); `bias` (forward
// only, may be undefined) and `relu` form the fused epilogue; `split`: split-K (no epilogue);
// `halo`: the halo kernel (halo_fprop_applies; no epilogue).
void run_fprop(const ConvProblem& pr, void* workspace, size_t workspace_bytes, const Tensor& bias,
               bool relu, std::optional<FpropTile> fixed, bool split = false, bool halo = false) {
  EMBER_CHECK(!split || (!bias.defined() && !relu), "implicit_gemm: split-K has no epilogue");
  EMBER_CHECK(!halo || (!bias.defined() && !relu && !split),
              "implicit_gemm_halo: no epilogue and no split-K");
  const ConvDims d = conv_dims(pr);
  const FpropPlan f = fprop_plan(pr, fixed, split);
  WorkspaceArena arena(workspace, workspace_bytes);
  const Device dev = pr.device();
  cudaStream_t stream = stream_of(dev);
  const Tensor& src_t = f.backward_data ? pr.output : pr.input;
  const Tensor& dst_t = f.backward_data ? pr.input : pr.output;
  Tensor src = stage_read(src_t, Form::nhwc, arena);
  Tensor dst = stage_write(dst_t, Form::nhwc, arena);
  const void* filter = pr.weight.data_ptr();
  void* packed = f.pack_filter ? arena.take(f.filter_bytes) : nullptr;
  auto* partial = f.splits > 1 ? static_cast<float*>(arena.take(f.partial_bytes)) : nullptr;

  FpropParams p{};
  p.src = src.data_ptr();
  p.dst = dst.data_ptr();
  p.bias = bias.defined() ? bias.data_ptr() : nullptr;
  p.relu = relu;
  p.N = int(d.N), p.SH = int(f.SH), p.SW = int(f.SW), p.Csrc = int(f.Csrc), p.Cpad = int(f.Cpad);
  p.dh = int(d.dh), p.dw = int(d.dw);
  p.Nout = int(f.Nout);
  p.cblocks = int(f.Cpad / block_k_elems(pr.input.dtype()));
  p.partial = partial;
  p.dst_H = int(f.OH), p.dst_W = int(f.OW);
  p.dst_sh = int(f.phases_h), p.dst_sw = int(f.phases_w);
  p.phases = 1;
  // The GEMM of one phase (forward: the one, the whole convolution): its destination grid, taps,
  // padding and slice of the packed filter.
  auto phase_of = [&](const PhaseAxis& ah, const PhaseAxis& aw, const void* slice) {
    igemm::FpropPhase q{};
    q.OH = int(ah.rows), q.OW = int(aw.rows);
    q.M = int(d.N * ah.rows * aw.rows);
    q.R = int(ah.taps.taps), q.S = int(aw.taps.taps), q.ph = int(ah.pad), q.pw = int(aw.pad);
    q.k_tiles = q.R * q.S * p.cblocks;
    q.dst_h0 = int(ah.first_row), q.dst_w0 = int(aw.first_row);
    q.div_ohw = FastDivmod(uint32_t(std::max(q.OH * q.OW, 1)));
    q.div_ow = FastDivmod(uint32_t(std::max(q.OW, 1)));
    q.filter = slice;
    return q;
  };
  // The launch's own fields: `q`'s (one phase), or the largest phase's rows (several); the
  // plan's split-K slices (fprop_grid needs at least one k-tile per slice).
  auto set_gemm = [&](const igemm::FpropPhase& q) {
    igemm::use_phase(p, q);
    p.tiles_per_split = f.splits > 1 ? int(f.tiles_per_split) : std::max(q.k_tiles, 1);
  };

  dispatch_conv_dtype(pr.input.dtype(), "implicit_gemm", [&](auto tag) {
    using T = decltype(tag);
    if (f.pack_filter) {
      const FilterPack fp{f.backward_data, int(d.R),  int(d.S), int(d.sh),
                          int(d.sw),       int(d.ph), int(d.pw)};
      const Tensor& w = pr.weight;
      constexpr int V = 16 / int(sizeof(T));
      const bool vector_pack = f.backward_data && w.stride(1) == 1 && f.Nout % V == 0 &&
                               f.Cpad % V == 0 && w.stride(0) % V == 0 && w.stride(2) % V == 0 &&
                               w.stride(3) % V == 0 && is_aligned(w.data_ptr(), 16) &&
                               is_aligned(packed, 16);
      const int tile = vector_pack ? kPackVecTile : kPackTile;
      const dim3 grid(unsigned((f.Cpad + tile - 1) / tile),
                      unsigned(std::min<int64_t>((f.Nout + tile - 1) / tile, 65535)),
                      unsigned(std::min<int64_t>(d.RS(), 65535)));
      if (vector_pack)
        pack_filter_transposed_kernel<T><<<grid, kPackThreads, 0, stream>>>(
            static_cast<const T*>(w.data_ptr()), w.stride(0), w.stride(2), w.stride(3), fp,
            int(f.Nout), int(f.Csrc), int(f.Cpad), static_cast<T*>(packed));
      else
        pack_filter_kernel<T><<<grid, kPackThreads, 0, stream>>>(
            static_cast<const T*>(w.data_ptr()), w.stride(0), w.stride(1), w.stride(2), w.stride(3),
            fp, int(f.Nout), int(f.Csrc), int(f.Cpad), static_cast<T*>(packed));
      EMBER_CUDA_LAUNCH_CHECK();
      filter = packed;
    }
    auto launch = [&] {
      if (p.M == 0) return;  // no destination pixels
      if (halo) {
        if constexpr (sizeof(T) == 2) {
          launch_halo_fprop<T>(p, stream, dev.index);
        } else {
          EMBER_CHECK(false, "implicit_gemm_halo: bf16/f16 only");
        }
      } else {
        launch_fprop_tile<T>(f.tile.tile, partial != nullptr, p, stream, dev.index);
      }
    };
    if (!f.backward_data) {
      set_gemm(phase_of({0, f.OH, {0, d.R}, d.ph}, {0, f.OW, {0, d.S}, d.pw}, filter));
      p.sh = int(d.sh), p.sw = int(d.sw);
      launch();
    } else {
      // The phases (one for stride 1) in packed_tap's order, each with its slice of the packed
      // filter, up to kMaxFpropPhases per launch; a phase that no tap reaches still runs,
      // writing its zeros. They stream into the launch's table: a full table, or the last
      // phase, launches.
      p.sh = p.sw = 1;
      int64_t slice = 0;
      int count = 0, largest = 0;
      for (int64_t a = 0; a < f.phases_h; ++a)
        for (int64_t b = 0; b < f.phases_w; ++b) {
          const PhaseAxis ah = phase_axis(a, f.OH, d.R, d.sh, d.ph, d.dh);
          const PhaseAxis aw = phase_axis(b, f.OW, d.S, d.sw, d.pw, d.dw);
          p.phase[count] =
              phase_of(ah, aw, static_cast<const T*>(filter) + slice * f.Nout * f.Cpad);
          if (p.phase[count].M > p.phase[largest].M) largest = count;
          slice += ah.taps.taps * aw.taps.taps;
          if (++count == igemm::kMaxFpropPhases || (a == f.phases_h - 1 && b == f.phases_w - 1)) {
            set_gemm(p.phase[largest]);
            p.phases = count;
            launch();
            count = largest = 0;
          }
        }
    }
    if (partial != nullptr) {
      const int64_t total = f.M * f.Nout;
      fprop_split_reduce_kernel<T><<<grid_for(total, dev.index), kBlockThreads, 0, stream>>>(
          partial, f.splits, static_cast<T*>(dst.data_ptr()), total);
      EMBER_CUDA_LAUNCH_CHECK();
    }
  });
  finish_write(dst_t, dst);
}

bool fprop_applies(const ConvProblem& pr) {
  const ConvDims d = conv_dims(pr);
  if (!tensor_core_dtype(pr) || d.G != 1 || operand_alignment(pr) != 16) return false;
  // The gather keeps a row's out-of-image taps in one 32-bit mask (FpropGather).
  if (d.R > igemm::kMaxGatherTaps || d.S > igemm::kMaxGatherTaps) return false;
  // Backward-data phases along a strided axis assume dilation 1 there (phase_axis).
  if (pr.direction == Direction::backward_data &&
      ((d.sh != 1 && d.dh != 1) || (d.sw != 1 && d.dw != 1)))
    return false;
  const FpropPlan f = fprop_plan(pr, std::nullopt);  // the limits below hold for every tile
  constexpr int64_t kMaxIndex = (int64_t(1) << 31) - 256;
  // Blocks are numbered along one grid dimension (at most 2^31 - 1, tiles at least 64x64).
  const int64_t max_blocks = ((f.M + 63) / 64) * ((f.Nout + 63) / 64);
  return f.M < kMaxIndex && max_blocks < kMaxIndex && f.Cpad * d.RS() < kMaxIndex &&
         d.N * f.SH * f.SW * f.Csrc < kMaxIndex;  // FpropGather's 32-bit source offsets
}

// A fixed tile runs exactly the problems of the vector path (the wgmma tiles where the kernel
// exists and the device runs it).
bool fixed_fprop_applies(const ConvProblem& pr, FpropTile tile) {
  return fprop_applies(pr) && fprop_vector_path(pr) &&
         (!is_wgmma_tile(tile) || wgmma_available(pr.device()));
}

// The same for every tile: staging and the packed filter.
size_t fprop_workspace(const ConvProblem& pr) { return fprop_plan(pr, std::nullopt).workspace; }

// mma.sync reaches about 55% of the tensor peak with 64x64 warp tiles, less with smaller ones;
// zero padding of channels and of partial tiles is wasted work; a strided backward_data runs one
// GEMM per phase (kMaxFpropPhases per launch); the general path loads element by element.
double fprop_cost_us(const ConvProblem& pr, std::optional<FpropTile> fixed) {
  const ConvDims d = conv_dims(pr);
  const FpropPlan f = fprop_plan(pr, fixed);
  const int64_t bm = f.tile.bm, bn = f.tile.bn;
  const double tiles_m = double((f.M_phase + bm - 1) / bm * bm) / double(f.M_phase);
  const double tiles_n = double((f.Nout + bn - 1) / bn * bn) / double(f.Nout);
  const double waste = double(f.Cpad) / double(f.Csrc) * tiles_m * tiles_n;
  const double efficiency = f.tile.tile == FpropTile::general ? 0.08 : 0.55 * f.tile.relative_speed;
  // Small-channel layers are bound by memory: the source is read once per column tile, the
  // filter once per row tile (a phase's tiles only its taps: one filter per phase's row tiles),
  // the destination written once.
  const Tensor& src = f.backward_data ? pr.output : pr.input;
  const Tensor& dst = f.backward_data ? pr.input : pr.output;
  const double traffic = double(src.nbytes()) * double((f.Nout + bn - 1) / bn) +
                         double(pr.weight.nbytes()) * double((f.M_phase + bm - 1) / bm) +
                         double(dst.nbytes());
  return std::max(math_time_us(d.macs() * waste, pr.input.dtype(), pr.allow_tf32, efficiency),
                  memory_time_us(traffic) / 0.7) +
         memory_time_us(2.0 * double(f.staging_bytes) + 2.0 * double(f.filter_bytes)) +
         double(fprop_launches(f) + (f.pack_filter ? 1 : 0)) * kLaunchUs;
}

double fixed_fprop_cost_us(const ConvProblem& pr, FpropTile tile) {
  return std::max(fprop_cost_us(pr, tile), fprop_cost_us(pr, std::nullopt)) * kFixedTileCostFactor;
}

// Split-K variants of fixed tiles, for layers with too few destination pixels to fill the SMs
// (ResNet's 7x7 and 14x14 layers: 3136 / 12544 rows): they apply where the tile's blocks leave
// SMs idle (more than one split), and pay the partials' traffic and a reduction launch.
bool split_fprop_applies(const ConvProblem& pr, FpropTile tile) {
  return fixed_fprop_applies(pr, tile) && fprop_plan(pr, tile, true).splits > 1;
}

double split_fprop_cost_us(const ConvProblem& pr, FpropTile tile) {
  const FpropPlan f = fprop_plan(pr, tile, true);
  const double own =
      fprop_cost_us(pr, tile) + memory_time_us(2.0 * double(f.partial_bytes)) + kLaunchUs;
  return std::max(own, fprop_cost_us(pr, std::nullopt)) * kFixedTileCostFactor;
}

// The halo kernel: bf16/f16, stride 1, 3x3, dilation 1, padding 1 (so the destination is as
// large as the source and pixel m reads source pixel m + const per tap), the reduced channels
// (C forward, K backward_data) in whole 64-channel blocks (no zero channels in the halo rows);
// pixel indices plus a halo of one image row stay far below 2^31.
bool halo_fprop_applies(const ConvProblem& pr) {
  const ConvDims d = conv_dims(pr);
  const DType t = pr.input.dtype();
  const int64_t csrc = pr.direction == Direction::backward_data ? d.K : d.C;
  return (t == DType::bf16 || t == DType::f16) && fprop_applies(pr) && d.R == 3 && d.S == 3 &&
         d.sh == 1 && d.sw == 1 && d.dh == 1 && d.dw == 1 && d.ph == 1 && d.pw == 1 && d.P == d.H &&
         d.Q == d.W && csrc % igemm::kHaloFpropBN == 0 && d.NHW() < (int64_t(1) << 30);
}

// Ranked just behind "implicit_gemm" (like a fixed tile) until measurements give the cost model
// a reason to prefer it; the benchmark mode times it. Its own estimate: the 256x64 tile's
// padding waste at the efficiency of the 64x64-warp tiles.
double halo_fprop_cost_us(const ConvProblem& pr) {
  const ConvDims d = conv_dims(pr);
  const FpropPlan f = fprop_plan(pr, std::nullopt);
  const int64_t bm = igemm::kHaloFpropBM, bn = igemm::kHaloFpropBN;
  const double waste = double((f.M + bm - 1) / bm * bm) / double(f.M) *
                       double((f.Nout + bn - 1) / bn * bn) / double(f.Nout);
  const double own = math_time_us(d.macs() * waste, pr.input.dtype(), pr.allow_tf32, 0.55) +
                     memory_time_us(2.0 * double(f.staging_bytes) + 2.0 * double(f.filter_bytes)) +
                     (f.pack_filter ? 2 : 1) * kLaunchUs;
  return std::max(own, fprop_cost_us(pr, std::nullopt)) * kFixedTileCostFactor;
}

// The wave model's tile, with the problem's epilogue (forward; none for backward_data) when
// fprop_fuses_epilogue holds (register_conv_algorithm passes it only then).
void run_fprop_auto(const ConvProblem& pr, void* workspace, size_t workspace_bytes) {
  run_fprop(pr, workspace, workspace_bytes, pr.epilogue.bias, pr.epilogue.relu, std::nullopt);
}
// The kernel's epilogue reads a dense bias of the problem's dtype on its device.
bool fprop_fuses_epilogue(const ConvProblem& pr) {
  const Tensor& bias = pr.epilogue.bias;
  return pr.direction == Direction::forward &&
         (!bias.defined() || (bias.dtype() == pr.input.dtype() && bias.device() == pr.device() &&
                              bias.is_contiguous()));
}
double fprop_cost_auto_us(const ConvProblem& pr) { return fprop_cost_us(pr, std::nullopt); }

const auto implicit_gemm_forward =
    register_conv_algorithm({"implicit_gemm", Direction::forward, true, kTensorCoreTypes,
                             fprop_applies, fprop_workspace, fprop_cost_auto_us, run_fprop_auto},
                            fprop_fuses_epilogue);
const auto implicit_gemm_backward_data =
    register_conv_algorithm({"implicit_gemm", Direction::backward_data, true, kTensorCoreTypes,
                             fprop_applies, fprop_workspace, fprop_cost_auto_us, run_fprop_auto});

bool register_halo_fprop_algorithms() {
  for (const Direction direction : {Direction::forward, Direction::backward_data})
    register_conv_algorithm({"implicit_gemm_halo", direction, true, kSixteenBitTypes,
                             halo_fprop_applies, fprop_workspace, halo_fprop_cost_us,
                             [](const ConvProblem& pr, void* ws, size_t bytes) {
                               run_fprop(pr, ws, bytes, Tensor(), false, std::nullopt, false, true);
                             }});
  return true;
}
const bool halo_fprop_algorithms_registered = register_halo_fprop_algorithms();

// The fixed-tile variants (registered after "implicit_gemm", so they follow it in every listing).
struct FixedFpropAlgorithm {
  const char* name;
  FpropTile tile;
};
constexpr FixedFpropAlgorithm kFixedFpropAlgorithms[] = {
    {"implicit_gemm_256x128", FpropTile::wide},
    {"implicit_gemm_128x128", FpropTile::square},
    {"implicit_gemm_128x64", FpropTile::narrow},
    {"implicit_gemm_64x64", FpropTile::small},
    {"implicit_gemm_wgmma_256x128", FpropTile::wgmma_wide},
    {"implicit_gemm_wgmma_128x128", FpropTile::wgmma_square},
    {"implicit_gemm_wgmma_128x64", FpropTile::wgmma_narrow},
    {"implicit_gemm_wgmma_ws_256x128", FpropTile::wgmma_ws_wide},
    {"implicit_gemm_wgmma_ws_128x128", FpropTile::wgmma_ws_square}};
// Split-K builds exist for these tiles only (launch_fprop_tile).
constexpr FixedFpropAlgorithm kSplitFpropAlgorithms[] = {
    {"implicit_gemm_128x128_splitk", FpropTile::square},
    {"implicit_gemm_64x64_splitk", FpropTile::small},
    {"implicit_gemm_wgmma_128x128_splitk", FpropTile::wgmma_square}};

bool register_fixed_tile_algorithms() {
  for (const Direction direction : {Direction::forward, Direction::backward_data})
    for (const FixedFpropAlgorithm& a : kFixedFpropAlgorithms)
      register_conv_algorithm(
          {a.name, direction, true, kTensorCoreTypes,
           [tile = a.tile](const ConvProblem& pr) { return fixed_fprop_applies(pr, tile); },
           fprop_workspace,
           [tile = a.tile](const ConvProblem& pr) { return fixed_fprop_cost_us(pr, tile); },
           [tile = a.tile](const ConvProblem& pr, void* ws, size_t bytes) {
             run_fprop(pr, ws, bytes, Tensor(), false, tile);
           }});
  for (const Direction direction : {Direction::forward, Direction::backward_data})
    for (const FixedFpropAlgorithm& a : kSplitFpropAlgorithms)
      register_conv_algorithm(
          {a.name, direction, true, kTensorCoreTypes,
           [tile = a.tile](const ConvProblem& pr) { return split_fprop_applies(pr, tile); },
           [tile = a.tile](const ConvProblem& pr) { return fprop_plan(pr, tile, true).workspace; },
           [tile = a.tile](const ConvProblem& pr) { return split_fprop_cost_us(pr, tile); },
           [tile = a.tile](const ConvProblem& pr, void* ws, size_t bytes) {
             run_fprop(pr, ws, bytes, Tensor(), false, tile, true);
           }});
  return true;
}
const bool fixed_tile_algorithms_registered = register_fixed_tile_algorithms();

}  // namespace

}  // namespace ember::cuda::conv
