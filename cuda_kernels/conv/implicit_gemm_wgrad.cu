// implicit_gemm, backward_filter: the weight gradient on tensor cores without an im2col buffer
// (kernels in implicit_gemm_wgrad.cuh), bf16, f16 and f32 (as TF32), groups == 1:
//   backward_filter  "implicit_gemm": split-K over output pixels, every split writing an fp32
//       partial into the workspace, then a reduce kernel summing the splits in a fixed order
//       (deterministic); "implicit_gemm_atomic": the splits atomically add into one fp32 buffer
//       (not deterministic). Tiles: 128x128 when K >= 128, else 64x128, over columns tap*C + c.
//       Needs K a multiple of 8 (16-bit) / 4 (fp32); x with another C is staged as NHWC with zero
//       channels up to the next multiple (the 3-channel stem: 4 fp32 / 8 bf16 channels), columns
//       tap*Cpad + c, and the reduction drops the padded channels.
//       "implicit_gemm_wgrad_64x128", "implicit_gemm_wgrad_128x128": the deterministic split-K
//       with that tile fixed, for the benchmark mode; the heuristic ranks them behind it.
//   backward_filter  "implicit_gemm_wgrad_halo" (deterministic), "implicit_gemm_wgrad_halo_atomic":
//       bf16/f16, stride 1, 3-wide 'same' rows (S = 3, pw = 1, output as large as the input), C a
//       multiple of 64 (ResNet's 3x3 layers): a block takes the three taps of one filter row and
//       reads them from ONE shared halo of x rows instead of gathering x per tap (2.5x fewer
//       bytes per MAC than the 64x128 tile); ranked behind "implicit_gemm" for the benchmark mode
//       to time.
// Every algorithm OVERWRITES the weight gradient.
#include <algorithm>
#include <optional>
#include <vector>

#include "ember/cuda_kernels/conv/implicit_gemm_host.cuh"
#include "ember/cuda_kernels/conv/implicit_gemm_wgrad.cuh"

namespace ember::cuda::conv {
namespace {

using igemm::WgradParams;

// dw[k, c, r, s] = the sum over z < splits of partial[z][k][(r*S + s)*Cpart + c], for the C
// channels of dw (Cpart >= C: the partials of zero-padded channels are dropped). Block (32 outputs,
// blockDim.y split walkers), one block per 32 outputs: walker w adds splits w, w + blockDim.y, ...
// in order (its loads coalesced along the outputs, several in flight), then the walkers' sums are
// added in order of w: a fixed order, so the result is the same run to run. One thread per output
// adding all its splits is latency-bound.
constexpr int kReduceOutputs = 32;
constexpr int kReduceMaxWalkers = 32;
template <typename T>
__global__ void __launch_bounds__(kReduceOutputs* kReduceMaxWalkers)
    wgrad_reduce_kernel(const float* __restrict__ partial, int64_t splits, int64_t C, int64_t Cpart,
                        int64_t S, int64_t RS, int64_t ws0, int64_t ws1, int64_t ws2, int64_t ws3,
                        T* __restrict__ dw, int64_t total) {
  __shared__ float sums[kReduceMaxWalkers][kReduceOutputs];
  const int lane = int(threadIdx.x), walker = int(threadIdx.y), walkers = int(blockDim.y);
  const int64_t split_elems = total / C * Cpart;  // K * RS * Cpart
  const int64_t idx = int64_t(blockIdx.x) * kReduceOutputs + lane;
  const int64_t c = idx % C, tap = (idx / C) % RS, k = idx / (C * RS);
  float sum = 0.f;
  if (idx < total) {
    const float* src = partial + (k * RS + tap) * Cpart + c;
#pragma unroll 4
    for (int64_t z = walker; z < splits; z += walkers) sum += src[z * split_elems];
  }
  sums[walker][lane] = sum;
  __syncthreads();
  if (walker == 0 && idx < total) {
    for (int w = 1; w < walkers; ++w) sum += sums[w][lane];
    dw[k * ws0 + c * ws1 + (tap / S) * ws2 + (tap % S) * ws3] = convert<T>(sum);
  }
}

// Sums the splits' fp32 partials (laid out with Cpart channels) into pr.weight (any strides).
template <typename T>
void reduce_wgrad_splits(const ConvProblem& pr, const float* partial, int64_t splits, int64_t Cpart,
                         cudaStream_t stream) {
  const ConvDims d = conv_dims(pr);
  const int64_t total = d.K * d.RS() * d.C;
  // About four splits per walker.
  const int walkers = int(std::clamp<int64_t>((splits + 3) / 4, 1, kReduceMaxWalkers));
  const int64_t blocks = (total + kReduceOutputs - 1) / kReduceOutputs;
  EMBER_CHECK(blocks <= int64_t(std::numeric_limits<int32_t>::max()),
              "conv2d backward_filter: ", total,
              " filter elements are too many for one reduction grid");
  wgrad_reduce_kernel<T><<<unsigned(blocks), dim3(kReduceOutputs, unsigned(walkers)), 0, stream>>>(
      partial, splits, d.C, Cpart, d.S, d.RS(), pr.weight.stride(0), pr.weight.stride(1),
      pr.weight.stride(2), pr.weight.stride(3), static_cast<T*>(pr.weight.data_ptr()), total);
  EMBER_CUDA_LAUNCH_CHECK();
}

// out[n][h][w][c] for c < Cpad = x[n, c, h, w] (any strides) for c < C, else zero: the filter
// gradient's x as NHWC with whole 16-byte channel vectors. One thread per 16-byte vector.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    stage_padded_nhwc_kernel(const T* __restrict__ x, int64_t xs0, int64_t xs1, int64_t xs2,
                             int64_t xs3, int C, int H, int W, int vectors_per_pixel,
                             FastDivmod div_vectors, FastDivmod div_w, FastDivmod div_h,
                             T* __restrict__ out, int64_t total) {
  constexpr int VEC = 16 / int(sizeof(T));
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int pix = int(div_vectors.div(uint32_t(idx)));  // total < 2^31
    const int c0 = (int(idx) - pix * vectors_per_pixel) * VEC;
    const int nh = int(div_w.div(uint32_t(pix)));
    const int w = pix - nh * W;
    const int n = int(div_h.div(uint32_t(nh)));
    const int h = nh - n * H;
    const T* src = x + n * xs0 + h * xs2 + w * xs3;
    alignas(16) T vals[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) vals[e] = c0 + e < C ? src[(c0 + e) * xs1] : convert<T>(0.0f);
    *reinterpret_cast<uint4*>(out + int64_t(idx) * VEC) = *reinterpret_cast<const uint4*>(vals);
  }
}

// ---- wgrad (backward_filter) ------------------------------------------------------------------

// wgrad tiles, rows (output channels) x columns (tap*C + c): 128x128 (4 warps of 64x64) when
// K >= 128, else 64x128 (4 warps of 32x64); either runs any problem (partial row tiles are
// masked). A stage holds 128 bytes of each pixel row, for any dtype; 3 stages of the first take
// 102 KiB, 4 of the second 104 KiB: 2 blocks per SM.
constexpr int kWgradStagesBig = 3;
constexpr int kWgradStagesShort = 4;
enum class WgradTile : uint8_t { short_rows, big };  // 64x128, 128x128

struct WgradPlan {
  bool big;  // 128x128 tiles, else 64x128
  int bm, bn;
  // C rounded up to whole 16-byte vectors; when above C, x is staged with zero channels up to it
  // (the stem's C = 3) and the columns are tap * Cpad + c.
  int64_t Cpad;
  bool pad_channels;
  int64_t grid_m, grid_n, k_tiles, tiles_per_split, splits;
  size_t padded_x_bytes, partial_bytes, staging_bytes;
};

// `fixed`: the tile to use, else 128x128 when K >= 128.
WgradPlan wgrad_plan(const ConvProblem& pr, bool atomic, std::optional<WgradTile> fixed) {
  const ConvDims d = conv_dims(pr);
  WgradPlan w{};
  w.big = fixed ? *fixed == WgradTile::big : d.K >= 128;
  w.bm = w.big ? 128 : 64;
  w.bn = 128;
  const int64_t vec = vector_elems(pr.input.dtype());
  w.Cpad = (d.C + vec - 1) / vec * vec;
  w.pad_channels = w.Cpad != d.C;
  w.grid_m = (d.K + w.bm - 1) / w.bm;
  w.grid_n = (d.RS() * w.Cpad + w.bn - 1) / w.bn;
  const int64_t rows = igemm::wgrad_rows(int(pr.input.element_size()));
  w.k_tiles = (d.NPQ() + rows - 1) / rows;
  split_k(w.grid_m * w.grid_n, w.k_tiles, 2 * sm_count(pr.device()), w.tiles_per_split, w.splits);
  w.partial_bytes = size_t(atomic ? 1 : w.splits) * size_t(d.K * d.RS() * w.Cpad) * sizeof(float);
  w.padded_x_bytes = w.pad_channels ? size_t(d.NHW() * w.Cpad) * pr.input.element_size() : 0;
  WorkspacePlan ws;
  ws.add(w.pad_channels ? w.padded_x_bytes : staging_bytes(pr.input, Form::nhwc));
  ws.add(staging_bytes(pr.output, Form::nhwc));
  w.staging_bytes = ws.bytes;
  return w;
}

size_t wgrad_workspace(const ConvProblem& pr, bool atomic, std::optional<WgradTile> fixed) {
  const WgradPlan w = wgrad_plan(pr, atomic, fixed);
  WorkspacePlan ws;
  ws.add(w.staging_bytes);
  ws.add(w.partial_bytes);
  return ws.bytes;
}

template <typename T, int BM, int BN, int WM, int WN, int STAGES>
void launch_wgrad(const WgradParams& p, const WgradPlan& w, cudaStream_t stream, int device) {
  constexpr auto kernel = igemm::implicit_gemm_wgrad_kernel<T, BM, BN, WM, WN, STAGES>;
  constexpr int smem = igemm::wgrad_smem_bytes<T, BM, BN, STAGES>();
  opt_in_max_dynamic_shared_memory<kernel, SharedCarveout::max_shared>(device);
  const dim3 grid(unsigned(w.grid_m), unsigned(w.grid_n), unsigned(w.splits));
  kernel<<<grid, igemm::TileShape<BM, BN, WM, WN>::kThreads, smem, stream>>>(p);
  EMBER_CUDA_LAUNCH_CHECK();
}

void run_wgrad(const ConvProblem& pr, void* workspace, size_t workspace_bytes, bool atomic,
               std::optional<WgradTile> fixed) {
  const ConvDims d = conv_dims(pr);
  const WgradPlan w = wgrad_plan(pr, atomic, fixed);
  WorkspaceArena arena(workspace, workspace_bytes);
  const Device dev = pr.device();
  cudaStream_t stream = stream_of(dev);
  Tensor x;  // unless the channels are padded: those are staged in the dtype dispatch below
  void* padded_x = nullptr;
  if (w.pad_channels) {
    padded_x = arena.take(w.padded_x_bytes);
  } else {
    x = stage_read(pr.input, Form::nhwc, arena);
  }
  Tensor dy = stage_read(pr.output, Form::nhwc, arena);
  auto* partial = static_cast<float*>(arena.take(w.partial_bytes));
  if (atomic) EMBER_CUDA_CHECK(cudaMemsetAsync(partial, 0, w.partial_bytes, stream));

  WgradParams p{};
  p.dy = dy.data_ptr();
  p.x = w.pad_channels ? padded_x : x.data_ptr();
  p.partial = partial;
  p.atomic = atomic;
  p.N = int(d.N), p.H = int(d.H), p.W = int(d.W), p.C = int(w.Cpad), p.K = int(d.K), p.P = int(d.P),
  p.Q = int(d.Q), p.R = int(d.R), p.S = int(d.S);
  p.sh = int(d.sh), p.sw = int(d.sw), p.ph = int(d.ph), p.pw = int(d.pw), p.dh = int(d.dh),
  p.dw = int(d.dw);
  p.NPQ = int(d.NPQ());
  p.k_tiles = int(w.k_tiles);
  p.tiles_per_split = int(w.tiles_per_split);
  p.div_pq = FastDivmod(uint32_t(d.P * d.Q));
  p.div_q = FastDivmod(uint32_t(d.Q));

  dispatch_conv_dtype(pr.input.dtype(), "implicit_gemm", [&](auto tag) {
    using T = decltype(tag);
    if (w.pad_channels) {
      const int vectors_per_pixel = int(w.Cpad / vector_elems(pr.input.dtype()));
      const int64_t total = d.NHW() * vectors_per_pixel;
      stage_padded_nhwc_kernel<T><<<grid_for(total, dev.index), kBlockThreads, 0, stream>>>(
          static_cast<const T*>(pr.input.data_ptr()), pr.input.stride(0), pr.input.stride(1),
          pr.input.stride(2), pr.input.stride(3), int(d.C), int(d.H), int(d.W), vectors_per_pixel,
          FastDivmod(uint32_t(vectors_per_pixel)), FastDivmod(uint32_t(d.W)),
          FastDivmod(uint32_t(d.H)), static_cast<T*>(padded_x), total);
      EMBER_CUDA_LAUNCH_CHECK();
    }
    if (w.big) {
      launch_wgrad<T, 128, 128, 64, 64, kWgradStagesBig>(p, w, stream, dev.index);
    } else {
      launch_wgrad<T, 64, 128, 32, 64, kWgradStagesShort>(p, w, stream, dev.index);
    }
    reduce_wgrad_splits<T>(pr, partial, atomic ? 1 : w.splits, w.Cpad, stream);
  });
}

// Any C (padded channels are staged with 32-bit indices: NHW * vectors below 2^31); K in whole
// 16-byte vectors (dy is read in them).
bool wgrad_applies(const ConvProblem& pr) {
  const ConvDims d = conv_dims(pr);
  const int64_t vec = vector_elems(pr.input.dtype());
  const int64_t cpad = (d.C + vec - 1) / vec * vec;
  constexpr int64_t kMaxIndex = (int64_t(1) << 31) - 256;
  return tensor_core_dtype(pr) && d.G == 1 && operand_alignment(pr) == 16 && d.K % vec == 0 &&
         d.NPQ() < kMaxIndex && d.NHW() * cpad < (int64_t(1) << 40) &&
         (cpad == d.C || d.NHW() * (cpad / vec) < kMaxIndex) &&
         (d.RS() * cpad + 127) / 128 <= 65535;
}

// The wgrad kernels (these tiles and the halo kernel) run slower than their estimates, where
// gemm_1x1's and im2col_gemm's run close to theirs; scaling theirs by this puts the 1x1 stride-2
// and small-image (8x8, 4x4) backward_filter picks on gemm_1x1 / im2col_gemm, which run them
// faster.
constexpr double kWgradMeasuredOverModel = 1.4;

double wgrad_cost_us(const ConvProblem& pr, bool atomic, std::optional<WgradTile> fixed) {
  const ConvDims d = conv_dims(pr);
  const WgradPlan w = wgrad_plan(pr, atomic, fixed);
  const double waste =
      double(w.grid_m * w.bm) / double(d.K) * double(w.grid_n * w.bn) / double(d.RS() * d.C);
  // Partials: written once per split and read back by the reduction (atomics: read-modify-write).
  const double partial_traffic =
      atomic ? 3.0 * double(w.partial_bytes) * double(w.splits) : 2.0 * double(w.partial_bytes);
  return kWgradMeasuredOverModel *
         (math_time_us(d.macs() * waste, pr.input.dtype(), pr.allow_tf32, w.big ? 0.45 : 0.35) +
          memory_time_us(partial_traffic + 2.0 * double(w.staging_bytes)) + 2 * kLaunchUs);
}

double fixed_wgrad_cost_us(const ConvProblem& pr, WgradTile tile) {
  return std::max(wgrad_cost_us(pr, false, tile), wgrad_cost_us(pr, false, std::nullopt)) *
         kFixedTileCostFactor;
}

// ---- halo wgrad (backward_filter of stride-1 'same' 3-wide convolutions, 16-bit) -------------

// The kernel's grid: 64 output channels x (filter row, 64-channel chunk) x splits, 2 blocks per
// SM (73.5 KiB of shared memory each).
struct HaloWgradPlan {
  int64_t grid_m, grid_n, k_tiles, tiles_per_split, splits;
  size_t partial_bytes, staging_bytes;
};

HaloWgradPlan halo_wgrad_plan(const ConvProblem& pr, bool atomic) {
  const ConvDims d = conv_dims(pr);
  HaloWgradPlan h{};
  h.grid_m = (d.K + igemm::kHaloBM - 1) / igemm::kHaloBM;
  h.grid_n = d.R * (d.C / igemm::kHaloChannels);
  h.k_tiles = (d.NPQ() + igemm::kHaloPixels - 1) / igemm::kHaloPixels;
  split_k(h.grid_m * h.grid_n, h.k_tiles, igemm::kHaloBlocksPerSm * sm_count(pr.device()),
          h.tiles_per_split, h.splits);
  h.partial_bytes = size_t(atomic ? 1 : h.splits) * size_t(d.K * d.RS() * d.C) * sizeof(float);
  WorkspacePlan ws;
  ws.add(staging_bytes(pr.input, Form::nhwc));
  ws.add(staging_bytes(pr.output, Form::nhwc));
  h.staging_bytes = ws.bytes;
  return h;
}

size_t halo_wgrad_workspace(const ConvProblem& pr, bool atomic) {
  const HaloWgradPlan h = halo_wgrad_plan(pr, atomic);
  WorkspacePlan ws;
  ws.add(h.staging_bytes);
  ws.add(h.partial_bytes);
  return ws.bytes;
}

// bf16/f16; stride 1 with the output as large as the input and taps 3 wide, dilation 1, padding
// 1 across (output pixel m reads x pixel m + const); whole 64-channel chunks of x; pixel indices
// plus a shift of up to one image stay below 2^31.
bool halo_wgrad_applies(const ConvProblem& pr) {
  const ConvDims d = conv_dims(pr);
  const DType t = pr.input.dtype();
  return (t == DType::bf16 || t == DType::f16) && wgrad_applies(pr) && d.S == igemm::kHaloTaps &&
         d.sh == 1 && d.sw == 1 && d.dw == 1 && d.pw == 1 && d.P == d.H && d.Q == d.W &&
         d.C % igemm::kHaloChannels == 0 && d.R * (d.C / igemm::kHaloChannels) <= 65535 &&
         d.NPQ() < (int64_t(1) << 30);
}

void run_halo_wgrad(const ConvProblem& pr, void* workspace, size_t workspace_bytes, bool atomic) {
  const ConvDims d = conv_dims(pr);
  const HaloWgradPlan h = halo_wgrad_plan(pr, atomic);
  WorkspaceArena arena(workspace, workspace_bytes);
  const Device dev = pr.device();
  cudaStream_t stream = stream_of(dev);
  Tensor x = stage_read(pr.input, Form::nhwc, arena);
  Tensor dy = stage_read(pr.output, Form::nhwc, arena);
  auto* partial = static_cast<float*>(arena.take(h.partial_bytes));
  if (atomic) EMBER_CUDA_CHECK(cudaMemsetAsync(partial, 0, h.partial_bytes, stream));

  igemm::HaloWgradParams p{};
  p.dy = dy.data_ptr();
  p.x = x.data_ptr();
  p.partial = partial;
  p.atomic = atomic;
  p.C = int(d.C), p.K = int(d.K), p.H = int(d.H), p.W = int(d.W), p.R = int(d.R);
  p.dh = int(d.dh), p.ph = int(d.ph);
  p.NPQ = int(d.NPQ());
  p.c_chunks = int(d.C / igemm::kHaloChannels);
  p.k_tiles = int(h.k_tiles);
  p.tiles_per_split = int(h.tiles_per_split);
  p.div_hw = FastDivmod(uint32_t(d.H * d.W));
  p.div_w = FastDivmod(uint32_t(d.W));

  auto launch = [&](auto tag) {
    using T = decltype(tag);
    constexpr auto kernel = igemm::implicit_gemm_halo_wgrad_kernel<T>;
    opt_in_max_dynamic_shared_memory<kernel, SharedCarveout::max_shared>(dev.index);
    const dim3 grid(unsigned(h.grid_m), unsigned(h.grid_n), unsigned(h.splits));
    kernel<<<grid, igemm::kHaloThreads, igemm::kHaloSmemBytes, stream>>>(p);
    EMBER_CUDA_LAUNCH_CHECK();
    reduce_wgrad_splits<T>(pr, partial, atomic ? 1 : h.splits, d.C, stream);
  };
  if (pr.input.dtype() == DType::bf16) {
    launch(__nv_bfloat16{});
  } else {
    launch(__half{});
  }
}

// The halo kernel beats implicit_gemm where the reduction is long (bf16 channels_last 3x3 layers
// of 14x14 and more), and falls behind im2col_gemm at 7x7 (3136 pixels, few k-tiles per split).
// So over at least 10000 output pixels it ranks ahead of implicit_gemm (0.6 of its estimate);
// elsewhere like a fixed-tile variant (just behind "implicit_gemm"), left to the benchmark mode.
double halo_wgrad_cost_us(const ConvProblem& pr, bool atomic) {
  const ConvDims d = conv_dims(pr);
  if (d.NPQ() >= 10000) return 0.6 * wgrad_cost_us(pr, atomic, std::nullopt);
  const HaloWgradPlan h = halo_wgrad_plan(pr, atomic);
  const double waste = double(h.grid_m * igemm::kHaloBM) / double(d.K);
  const double partial_traffic =
      atomic ? 3.0 * double(h.partial_bytes) * double(h.splits) : 2.0 * double(h.partial_bytes);
  const double own =
      kWgradMeasuredOverModel *
      (math_time_us(d.macs() * waste, pr.input.dtype(), pr.allow_tf32, 0.45) +
       memory_time_us(partial_traffic + 2.0 * double(h.staging_bytes)) + 2 * kLaunchUs);
  return std::max(own, wgrad_cost_us(pr, false, std::nullopt)) * kFixedTileCostFactor;
}

const auto implicit_gemm_backward_filter = register_conv_algorithm(
    {"implicit_gemm", Direction::backward_filter, true, kTensorCoreTypes, wgrad_applies,
     [](const ConvProblem& pr) { return wgrad_workspace(pr, false, std::nullopt); },
     [](const ConvProblem& pr) { return wgrad_cost_us(pr, false, std::nullopt); },
     [](const ConvProblem& pr, void* ws, size_t bytes) {
       run_wgrad(pr, ws, bytes, false, std::nullopt);
     }});
const auto implicit_gemm_backward_filter_atomic = register_conv_algorithm(
    {"implicit_gemm_atomic", Direction::backward_filter, false, kTensorCoreTypes, wgrad_applies,
     [](const ConvProblem& pr) { return wgrad_workspace(pr, true, std::nullopt); },
     [](const ConvProblem& pr) { return wgrad_cost_us(pr, true, std::nullopt); },
     [](const ConvProblem& pr, void* ws, size_t bytes) {
       run_wgrad(pr, ws, bytes, true, std::nullopt);
     }});

const auto implicit_gemm_backward_filter_halo = register_conv_algorithm(
    {"implicit_gemm_wgrad_halo", Direction::backward_filter, true, kSixteenBitTypes,
     halo_wgrad_applies, [](const ConvProblem& pr) { return halo_wgrad_workspace(pr, false); },
     [](const ConvProblem& pr) { return halo_wgrad_cost_us(pr, false); },
     [](const ConvProblem& pr, void* ws, size_t bytes) { run_halo_wgrad(pr, ws, bytes, false); }});
const auto implicit_gemm_backward_filter_halo_atomic = register_conv_algorithm(
    {"implicit_gemm_wgrad_halo_atomic", Direction::backward_filter, false, kSixteenBitTypes,
     halo_wgrad_applies, [](const ConvProblem& pr) { return halo_wgrad_workspace(pr, true); },
     [](const ConvProblem& pr) { return halo_wgrad_cost_us(pr, true); },
     [](const ConvProblem& pr, void* ws, size_t bytes) { run_halo_wgrad(pr, ws, bytes, true); }});

struct FixedWgradAlgorithm {
  const char* name;
  WgradTile tile;
};
constexpr FixedWgradAlgorithm kFixedWgradAlgorithms[] = {
    {"implicit_gemm_wgrad_64x128", WgradTile::short_rows},
    {"implicit_gemm_wgrad_128x128", WgradTile::big}};

bool register_fixed_wgrad_algorithms() {
  for (const FixedWgradAlgorithm& a : kFixedWgradAlgorithms)
    register_conv_algorithm(
        {a.name, Direction::backward_filter, true, kTensorCoreTypes, wgrad_applies,
         [tile = a.tile](const ConvProblem& pr) { return wgrad_workspace(pr, false, tile); },
         [tile = a.tile](const ConvProblem& pr) { return fixed_wgrad_cost_us(pr, tile); },
         [tile = a.tile](const ConvProblem& pr, void* ws, size_t bytes) {
           run_wgrad(pr, ws, bytes, false, tile);
         }});
  return true;
}
const bool fixed_wgrad_algorithms_registered = register_fixed_wgrad_algorithms();

}  // namespace

}  // namespace ember::cuda::conv
