// implicit_gemm: conv2d on tensor cores without an im2col buffer (kernels in
// conv_implicit_gemm.cuh), registered in the algorithm cache for bf16, f16 and f32 (as TF32, so
// only when the problem allows TF32), groups == 1:
//   forward / backward_data  "implicit_gemm": the fprop kernel. The filter is packed once per call
//       into the workspace as [Nout][R][S][Cpad] (forward: W as KRSC; backward_data: W^T as CRSK,
//       i.e. the transposed convolution), zero-padded to whole channel blocks; a forward with a
//       KRSC weight whose C is a multiple of the block uses the weight in place. Tiles: 128x128
//       (64x64 warp tiles), 128x64 or 64x64, picked so the grid fills the GPU; channel counts
//       that are not a multiple of 8 (16-bit) / 4 (fp32) take the general (element-load) path.
//   backward_filter  "implicit_gemm": split-K over output pixels, every split writing an fp32
//       partial into the workspace, then a reduce kernel summing the splits in a fixed order
//       (deterministic); "implicit_gemm_atomic": the splits atomically add into one fp32 buffer
//       (not deterministic). Needs C and K multiples of 8 (16-bit) / 4 (fp32); other channel
//       counts go to im2col_gemm.
// Activations not in channels_last are staged into the workspace (and written back). Every
// direction OVERWRITES the tensor it writes. implicit_gemm_forward_fused (conv_common.h) runs the
// forward with a bias + ReLU epilogue for conv2d_bias_relu.
#include <algorithm>
#include <mutex>
#include <set>
#include <utility>

#include "cuda_kernels/conv_common.cuh"
#include "cuda_kernels/conv_implicit_gemm.cuh"

namespace ember::cuda::conv {
namespace {

using igemm::FpropParams;
using igemm::WgradParams;

constexpr int kStages = 4;          // fprop pipeline depth (64-byte rows, any dtype)
constexpr int kWgradStages16 = 4;   // wgrad pipeline depth for 16-bit types
constexpr int kWgradStages32 = 3;   // and for fp32 (rows twice as wide)

// Opts a kernel into more than 48 KiB of dynamic shared memory, once per device.
void allow_shared_memory(const void* kernel, int bytes, int device) {
  if (bytes <= 48 * 1024) return;
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> done;
  std::lock_guard<std::mutex> lock(mutex);
  if (!done.insert({kernel, device}).second) return;
  EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

int vector_elems(DType t) { return int(16 / element_size(t)); }
int block_k_elems(DType t) { return int(64 / element_size(t)); }  // fprop channels per stage

bool tensor_core_dtype(const ConvProblem& pr) {
  const DType t = pr.input.dtype();
  return t == DType::bf16 || t == DType::f16 || (t == DType::f32 && pr.allow_tf32);
}

// ---- filter packing and split reduction -------------------------------------------------------

// out[o][r][s][i] for i < Cpad: forward W[o, i, r, s]; transposed (backward-data) W[i, o, r, s];
// zero for i >= Cin.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
pack_filter_kernel(const T* __restrict__ w, int64_t ws0, int64_t ws1, int64_t ws2, int64_t ws3,
                   int64_t R, int64_t S, int64_t Cin, int64_t Cpad, bool transposed,
                   T* __restrict__ out, int64_t total) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int64_t i = idx % Cpad, rs = (idx / Cpad) % (R * S), o = idx / (Cpad * R * S);
    T v = convert<T>(0.0f);
    if (i < Cin) {
      const int64_t k = transposed ? i : o, c = transposed ? o : i;
      v = w[k * ws0 + c * ws1 + (rs / S) * ws2 + (rs % S) * ws3];
    }
    out[idx] = v;
  }
}

// dw[k, c, r, s] = sum over z < splits of partial[z][k][(r*S + s)*C + c], in order of z.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
wgrad_reduce_kernel(const float* __restrict__ partial, int64_t splits, int64_t C, int64_t S,
                    int64_t RS, int64_t ws0, int64_t ws1, int64_t ws2, int64_t ws3,
                    T* __restrict__ dw, int64_t total) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int64_t c = idx % C, tap = (idx / C) % RS, k = idx / (C * RS);
    float sum = 0.f;
    for (int64_t z = 0; z < splits; ++z) sum += partial[z * total + idx];
    dw[k * ws0 + c * ws1 + (tap / S) * ws2 + (tap % S) * ws3] = convert<T>(sum);
  }
}

// ---- fprop (forward, backward_data) -----------------------------------------------------------

enum class FpropTile : uint8_t { big, narrow, small, general };

struct FpropPlan {
  bool transposed;  // backward_data
  int64_t Csrc, Nout, SH, SW, OH, OW, M;
  int64_t Cpad;
  FpropTile tile;
  int bm, bn;
  bool pack_filter;
  size_t filter_bytes, staging_bytes, workspace;
};

FpropPlan fprop_plan(const ConvProblem& pr) {
  const ConvShape d = shape_of(pr);
  FpropPlan f{};
  f.transposed = pr.direction == Direction::backward_data;
  f.Csrc = f.transposed ? d.K : d.C;
  f.Nout = f.transposed ? d.C : d.K;
  f.SH = f.transposed ? d.P : d.H;
  f.SW = f.transposed ? d.Q : d.W;
  f.OH = f.transposed ? d.H : d.P;
  f.OW = f.transposed ? d.W : d.Q;
  f.M = d.N * f.OH * f.OW;
  const int64_t bk = block_k_elems(pr.input.dtype());
  f.Cpad = (f.Csrc + bk - 1) / bk * bk;
  const int64_t sms = sm_count(pr.device());
  auto blocks = [&](int64_t bm, int64_t bn) { return ((f.M + bm - 1) / bm) * ((f.Nout + bn - 1) / bn); };
  if (f.Csrc % vector_elems(pr.input.dtype()) != 0) {
    f.tile = FpropTile::general, f.bm = 64, f.bn = 64;
  } else if (f.Nout > 64 && blocks(128, 128) >= sms) {
    f.tile = FpropTile::big, f.bm = 128, f.bn = 128;
  } else if (blocks(128, 64) >= sms) {
    f.tile = FpropTile::narrow, f.bm = 128, f.bn = 64;
  } else {
    f.tile = FpropTile::small, f.bm = 64, f.bn = 64;
  }
  f.pack_filter = f.transposed || !dense_as(pr.weight, Form::nhwc) || f.Cpad != f.Csrc;
  f.filter_bytes = f.pack_filter ? size_t(f.Nout * d.RS() * f.Cpad) * pr.input.element_size() : 0;
  const Tensor& src = f.transposed ? pr.output : pr.input;
  const Tensor& dst = f.transposed ? pr.input : pr.output;
  WorkspacePlan ws;
  ws.add(staging_bytes(src, Form::nhwc));
  ws.add(staging_bytes(dst, Form::nhwc));
  f.staging_bytes = ws.bytes;
  ws.add(f.filter_bytes);
  f.workspace = ws.bytes;
  return f;
}

template <typename T, int BM, int BN, int WM, int WN, bool kVec>
void launch_fprop(const FpropParams& p, cudaStream_t stream, int device) {
  auto kernel = igemm::implicit_gemm_fprop_kernel<T, BM, BN, WM, WN, kStages, kVec>;
  constexpr int smem = igemm::fprop_smem_bytes<BM, BN, kStages>();
  allow_shared_memory(reinterpret_cast<const void*>(kernel), smem, device);
  const dim3 grid(unsigned((p.M + BM - 1) / BM), unsigned((p.Nout + BN - 1) / BN));
  kernel<<<grid, igemm::TileShape<BM, BN, WM, WN>::kThreads, smem, stream>>>(p);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void launch_fprop_tile(FpropTile tile, const FpropParams& p, cudaStream_t stream, int device) {
  switch (tile) {
    case FpropTile::big: launch_fprop<T, 128, 128, 64, 64, true>(p, stream, device); break;
    case FpropTile::narrow: launch_fprop<T, 128, 64, 64, 32, true>(p, stream, device); break;
    case FpropTile::small: launch_fprop<T, 64, 64, 32, 32, true>(p, stream, device); break;
    case FpropTile::general: launch_fprop<T, 64, 64, 32, 32, false>(p, stream, device); break;
  }
}

// Runs forward or backward_data; `bias` (forward only, may be undefined) and `relu` form the
// fused epilogue.
void run_fprop(const ConvProblem& pr, void* workspace, size_t workspace_bytes, const Tensor& bias,
               bool relu) {
  const ConvShape d = shape_of(pr);
  const FpropPlan f = fprop_plan(pr);
  WorkspaceArena arena(workspace, workspace_bytes);
  const Device dev = pr.device();
  cudaStream_t stream = stream_of(dev);
  const Tensor& src_t = f.transposed ? pr.output : pr.input;
  const Tensor& dst_t = f.transposed ? pr.input : pr.output;
  Tensor src = stage_read(src_t, Form::nhwc, arena);
  Tensor dst = stage_write(dst_t, Form::nhwc, arena);
  const void* filter = pr.weight.data_ptr();
  void* packed = f.pack_filter ? arena.take(f.filter_bytes) : nullptr;

  FpropParams p{};
  p.src = src.data_ptr();
  p.dst = dst.data_ptr();
  p.bias = bias.defined() ? bias.data_ptr() : nullptr;
  p.relu = relu;
  p.transposed = f.transposed;
  p.N = int(d.N), p.SH = int(f.SH), p.SW = int(f.SW), p.Csrc = int(f.Csrc), p.Cpad = int(f.Cpad);
  p.OH = int(f.OH), p.OW = int(f.OW);
  p.R = int(d.R), p.S = int(d.S), p.sh = int(d.sh), p.sw = int(d.sw), p.ph = int(d.ph),
  p.pw = int(d.pw), p.dh = int(d.dh), p.dw = int(d.dw);
  p.M = int(f.M), p.Nout = int(f.Nout);
  p.cblocks = int(f.Cpad / block_k_elems(pr.input.dtype()));
  p.k_tiles = int(d.RS()) * p.cblocks;
  p.div_ohw = FastDivmod(uint32_t(f.OH * f.OW));
  p.div_ow = FastDivmod(uint32_t(f.OW));

  dispatch_conv_dtype(pr.input.dtype(), "implicit_gemm", [&](auto tag) {
    using T = decltype(tag);
    if (f.pack_filter) {
      const int64_t total = f.Nout * d.RS() * f.Cpad;
      pack_filter_kernel<T><<<grid_for(total, dev.index), kBlockThreads, 0, stream>>>(
          static_cast<const T*>(pr.weight.data_ptr()), pr.weight.stride(0), pr.weight.stride(1),
          pr.weight.stride(2), pr.weight.stride(3), d.R, d.S, f.Csrc, f.Cpad, f.transposed,
          static_cast<T*>(packed), total);
      EMBER_CUDA_LAUNCH_CHECK();
      filter = packed;
    }
    p.filter = filter;
    launch_fprop_tile<T>(f.tile, p, stream, dev.index);
  });
  finish_write(dst_t, dst);
}

bool fprop_applies(const ConvProblem& pr) {
  const ConvShape d = shape_of(pr);
  if (!tensor_core_dtype(pr) || d.G != 1 || operand_alignment(pr) != 16) return false;
  const FpropPlan f = fprop_plan(pr);
  constexpr int64_t kMaxIndex = (int64_t(1) << 31) - 256;
  return f.M < kMaxIndex && f.Nout < int64_t(65535) * 64 && f.Cpad * d.RS() < kMaxIndex &&
         d.N * f.SH * f.SW < kMaxIndex;
}

size_t fprop_workspace(const ConvProblem& pr) { return fprop_plan(pr).workspace; }

// mma.sync reaches about 45% of the tensor peak on full tiles; zero padding of channels and of
// partial tiles is wasted work; a strided backward_data wastes the taps the stride skips; the
// general path loads element by element.
double fprop_cost_us(const ConvProblem& pr) {
  const ConvShape d = shape_of(pr);
  const FpropPlan f = fprop_plan(pr);
  const double tiles_m = double((f.M + f.bm - 1) / f.bm * f.bm) / double(f.M);
  const double tiles_n = double((f.Nout + f.bn - 1) / f.bn * f.bn) / double(f.Nout);
  double waste = double(f.Cpad) / double(f.Csrc) * tiles_m * tiles_n;
  if (f.transposed) waste *= double(d.sh * d.sw);
  const double efficiency = f.tile == FpropTile::general ? 0.08 : (f.tile == FpropTile::small ? 0.35 : 0.45);
  // Small-channel layers are bound by memory: the source is read once per column tile, the
  // filter once per row tile, the destination written once.
  const Tensor& src = f.transposed ? pr.output : pr.input;
  const Tensor& dst = f.transposed ? pr.input : pr.output;
  const double traffic = double(src.nbytes()) * double((f.Nout + f.bn - 1) / f.bn) +
                         double(pr.weight.nbytes()) * double((f.M + f.bm - 1) / f.bm) +
                         double(dst.nbytes());
  return std::max(math_time_us(d.macs() * waste, pr.input.dtype(), pr.allow_tf32, efficiency),
                  memory_time_us(traffic) / 0.7) +
         memory_time_us(2.0 * double(f.staging_bytes) + 2.0 * double(f.filter_bytes)) +
         (f.pack_filter ? 2 : 1) * kLaunchUs;
}

void run_fprop_algorithm(const ConvProblem& pr, void* workspace, size_t workspace_bytes) {
  run_fprop(pr, workspace, workspace_bytes, Tensor(), false);
}

// ---- wgrad (backward_filter) ------------------------------------------------------------------

struct WgradPlan {
  bool big;  // 128x128 tiles, else 64x64
  int bm, bn;
  int64_t grid_m, grid_n, k_tiles, tiles_per_split, splits;
  size_t partial_bytes, staging_bytes;
};

WgradPlan wgrad_plan(const ConvProblem& pr, bool atomic) {
  const ConvShape d = shape_of(pr);
  WgradPlan w{};
  w.big = d.K >= 128 && d.C >= 128;
  w.bm = w.bn = w.big ? 128 : 64;
  w.grid_m = (d.K + w.bm - 1) / w.bm;
  w.grid_n = d.RS() * ((d.C + w.bn - 1) / w.bn);
  w.k_tiles = (d.NPQ() + igemm::kWgradRows - 1) / igemm::kWgradRows;
  const int64_t sms = sm_count(pr.device());
  // Splits to fill the GPU about twice, each walking at least 8 k-tiles.
  const int64_t wanted = (2 * sms + w.grid_m * w.grid_n - 1) / (w.grid_m * w.grid_n);
  const int64_t splits = std::clamp<int64_t>(wanted, 1, std::min<int64_t>(std::max<int64_t>(1, w.k_tiles / 8), 65535));
  w.tiles_per_split = (w.k_tiles + splits - 1) / splits;
  w.splits = (w.k_tiles + w.tiles_per_split - 1) / w.tiles_per_split;
  w.partial_bytes = size_t(atomic ? 1 : w.splits) * size_t(d.K * d.RS() * d.C) * sizeof(float);
  WorkspacePlan ws;
  ws.add(staging_bytes(pr.input, Form::nhwc));
  ws.add(staging_bytes(pr.output, Form::nhwc));
  w.staging_bytes = ws.bytes;
  return w;
}

size_t wgrad_workspace(const ConvProblem& pr, bool atomic) {
  const WgradPlan w = wgrad_plan(pr, atomic);
  WorkspacePlan ws;
  ws.add(w.staging_bytes);
  ws.add(w.partial_bytes);
  return ws.bytes;
}

template <typename T, int BM, int BN, int WM, int WN, int STAGES>
void launch_wgrad(const WgradParams& p, const WgradPlan& w, cudaStream_t stream, int device) {
  auto kernel = igemm::implicit_gemm_wgrad_kernel<T, BM, BN, WM, WN, STAGES>;
  constexpr int smem = igemm::wgrad_smem_bytes<T, BM, BN, STAGES>();
  allow_shared_memory(reinterpret_cast<const void*>(kernel), smem, device);
  const dim3 grid(unsigned(w.grid_m), unsigned(w.grid_n), unsigned(w.splits));
  kernel<<<grid, igemm::TileShape<BM, BN, WM, WN>::kThreads, smem, stream>>>(p);
  EMBER_CUDA_LAUNCH_CHECK();
}

void run_wgrad(const ConvProblem& pr, void* workspace, size_t workspace_bytes, bool atomic) {
  const ConvShape d = shape_of(pr);
  const WgradPlan w = wgrad_plan(pr, atomic);
  WorkspaceArena arena(workspace, workspace_bytes);
  const Device dev = pr.device();
  cudaStream_t stream = stream_of(dev);
  Tensor x = stage_read(pr.input, Form::nhwc, arena);
  Tensor dy = stage_read(pr.output, Form::nhwc, arena);
  auto* partial = static_cast<float*>(arena.take(w.partial_bytes));
  if (atomic) EMBER_CUDA_CHECK(cudaMemsetAsync(partial, 0, w.partial_bytes, stream));

  WgradParams p{};
  p.dy = dy.data_ptr();
  p.x = x.data_ptr();
  p.partial = partial;
  p.atomic = atomic;
  p.N = int(d.N), p.H = int(d.H), p.W = int(d.W), p.C = int(d.C), p.K = int(d.K), p.P = int(d.P),
  p.Q = int(d.Q), p.R = int(d.R), p.S = int(d.S);
  p.sh = int(d.sh), p.sw = int(d.sw), p.ph = int(d.ph), p.pw = int(d.pw), p.dh = int(d.dh),
  p.dw = int(d.dw);
  p.NPQ = int(d.NPQ());
  p.cblocks = int((d.C + w.bn - 1) / w.bn);
  p.k_tiles = int(w.k_tiles);
  p.tiles_per_split = int(w.tiles_per_split);
  p.div_pq = FastDivmod(uint32_t(d.P * d.Q));
  p.div_q = FastDivmod(uint32_t(d.Q));

  dispatch_conv_dtype(pr.input.dtype(), "implicit_gemm", [&](auto tag) {
    using T = decltype(tag);
    constexpr int stages = sizeof(T) == 2 ? kWgradStages16 : kWgradStages32;
    if (w.big) {
      launch_wgrad<T, 128, 128, 64, 64, stages>(p, w, stream, dev.index);
    } else {
      launch_wgrad<T, 64, 64, 32, 32, stages>(p, w, stream, dev.index);
    }
    const int64_t total = d.K * d.RS() * d.C;
    wgrad_reduce_kernel<T><<<grid_for(total, dev.index), kBlockThreads, 0, stream>>>(
        partial, atomic ? 1 : w.splits, d.C, d.S, d.RS(), pr.weight.stride(0), pr.weight.stride(1),
        pr.weight.stride(2), pr.weight.stride(3), static_cast<T*>(pr.weight.data_ptr()), total);
    EMBER_CUDA_LAUNCH_CHECK();
  });
}

bool wgrad_applies(const ConvProblem& pr) {
  const ConvShape d = shape_of(pr);
  const int64_t vec = vector_elems(pr.input.dtype());
  constexpr int64_t kMaxIndex = (int64_t(1) << 31) - 256;
  return tensor_core_dtype(pr) && d.G == 1 && operand_alignment(pr) == 16 && d.C % vec == 0 &&
         d.K % vec == 0 && d.NPQ() < kMaxIndex && d.NHW() * d.C < (int64_t(1) << 40) &&
         d.RS() * ((d.C + 63) / 64) <= 65535;
}

double wgrad_cost_us(const ConvProblem& pr, bool atomic) {
  const ConvShape d = shape_of(pr);
  const WgradPlan w = wgrad_plan(pr, atomic);
  const double waste = double(w.grid_m * w.bm) / double(d.K) *
                       double((d.C + w.bn - 1) / w.bn * w.bn) / double(d.C);
  // Partials: written once per split and read back by the reduction (atomics: read-modify-write).
  const double partial_traffic = atomic ? 3.0 * double(w.partial_bytes) * double(w.splits)
                                        : 2.0 * double(w.partial_bytes);
  return math_time_us(d.macs() * waste, pr.input.dtype(), pr.allow_tf32, w.big ? 0.4 : 0.3) +
         memory_time_us(partial_traffic + 2.0 * double(w.staging_bytes)) + 2 * kLaunchUs;
}

const std::vector<DType> kTensorCoreTypes = {DType::f32, DType::f16, DType::bf16};

const auto implicit_gemm_forward = register_conv_algorithm(
    {"implicit_gemm", Direction::forward, true, kTensorCoreTypes, fprop_applies, fprop_workspace,
     fprop_cost_us, run_fprop_algorithm});
const auto implicit_gemm_backward_data = register_conv_algorithm(
    {"implicit_gemm", Direction::backward_data, true, kTensorCoreTypes, fprop_applies,
     fprop_workspace, fprop_cost_us, run_fprop_algorithm});
const auto implicit_gemm_backward_filter = register_conv_algorithm(
    {"implicit_gemm", Direction::backward_filter, true, kTensorCoreTypes, wgrad_applies,
     [](const ConvProblem& pr) { return wgrad_workspace(pr, false); },
     [](const ConvProblem& pr) { return wgrad_cost_us(pr, false); },
     [](const ConvProblem& pr, void* ws, size_t bytes) { run_wgrad(pr, ws, bytes, false); }});
const auto implicit_gemm_backward_filter_atomic = register_conv_algorithm(
    {"implicit_gemm_atomic", Direction::backward_filter, false, kTensorCoreTypes, wgrad_applies,
     [](const ConvProblem& pr) { return wgrad_workspace(pr, true); },
     [](const ConvProblem& pr) { return wgrad_cost_us(pr, true); },
     [](const ConvProblem& pr, void* ws, size_t bytes) { run_wgrad(pr, ws, bytes, true); }});

}  // namespace

bool implicit_gemm_forward_fused(const ConvProblem& pr, const Tensor& bias, bool relu) {
  if (pr.direction != Direction::forward || !uniform_cuda_dtype(pr, kTensorCoreTypes) ||
      !fprop_applies(pr))
    return false;
  if (bias.defined() &&
      (bias.dtype() != pr.input.dtype() || bias.device() != pr.device() || !bias.is_contiguous()))
    return false;
  DeviceGuard device_guard(pr.device());
  const size_t bytes = fprop_workspace(pr);
  Tensor workspace;
  if (bytes > 0) workspace = empty({int64_t(bytes)}, DType::u8, pr.device());
  run_fprop(pr, bytes > 0 ? workspace.data_ptr() : nullptr, bytes, bias, relu);
  return true;
}

}  // namespace ember::cuda::conv
