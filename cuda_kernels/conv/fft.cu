// fft: convolution through the frequency domain on cuFFT, for large kernels (stride 1,
// dilation 1, groups 1; kernels of at least 5 along one axis), forward, backward_data and
// backward_filter; registered in the algorithm cache as "fft". f32 computes in fp32; f16/bf16 are
// converted to fp32 in the workspace and the result rounded back.
// Every plane (one image and channel, or one filter tap set [k, c]) is zero-padded to an Hf x Wf
// grid, Hf >= H + 2 ph and Wf >= W + 2 pw with factors 2, 3, 5, 7 only, so no circular wrap reaches
// a value that is kept. With ^ a 2-D real FFT (Hf x (Wf/2 + 1) complex bins, f):
//   forward          y^[n, k](f)  = sum_c x^[n, c](f) conj(w^[k, c](f))     x shifted by (ph, pw)
//   backward_data    dx^[n, c](f) = sum_k dy^[n, k](f) w^[k, c](f)          dx read at (ph, pw)
//   backward_filter  dw^[k, c](f) = sum_n x^[n, c](f) conj(dy^[n, k](f))    summed over images
// The spectra are laid out frequency-major ([f][n * C + c], cuFFT's strided output), so each
// frequency's channel sum is one complex GEMM: one cuBLAS strided-batched call over all bins
// (strict fp32: the point of this algorithm is accuracy at large kernels, not tensor cores).
// Images run in chunks sized to a workspace budget; the filter spectrum is made once per call
// (backward_filter accumulates it over chunks through the GEMM's beta). Operands are read and
// written through their strides (any layout); the written tensor is OVERWRITTEN; deterministic.
//
// cuFFT plans are made on the host when the algorithm cache selects for a problem (its workspace
// query, outside any capture), cached by (device, direction of transform, Hf, Wf, batch), and
// executed with auto-allocation off on a work area carved from the algorithm's workspace and on
// the current stream: running never allocates, so the op path is capturable. Making a plan
// allocates device memory, which a CUDA graph capture forbids, so it never happens inside one:
// while the current stream captures, "fft" does not apply to a size without plans (the cache's
// heuristic picks another algorithm; forcing "fft" is refused as not applying), and a cached
// choice of "fft" for such a size (from a loaded cache file) fails its workspace query with an
// ember::Error that says to run the shape once before capturing.
#include <cufft.h>

#include <algorithm>
#include <compare>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>

#include "ember/cuda_kernels/blas/blas.h"
#include "ember/cuda_kernels/conv/conv_common.cuh"
#include "ember/tensor/runtime/cuda_check.h"
#include "ember/tensor/runtime/cuda_graph.h"
#include "ember/tensor/runtime/stream.h"

namespace ember::cuda::conv {
namespace {

constexpr int64_t kMinKernelExtent = 5;  // smaller kernels: Winograd, implicit GEMM and im2col win
constexpr size_t kFftChunkBudgetBytes = size_t(256) << 20;  // per-chunk planes and spectra

// ---- sizes ------------------------------------------------------------------------------------

// The smallest m >= n (and even when `even`) whose prime factors are 2, 3, 5 and 7: the sizes
// cuFFT transforms fastest.
int64_t smooth_size(int64_t n, bool even) {
  for (int64_t m = std::max<int64_t>(n, 1);; ++m) {
    if (even && m % 2 != 0) continue;
    int64_t r = m;
    for (int64_t f : {2, 3, 5, 7})
      while (r % f == 0) r /= f;
    if (r == 1) return m;
  }
}

struct FftSizes {
  int64_t Hf, Wf;  // the transform grid
  int64_t Wc;      // Wf / 2 + 1 complex columns of a real transform
  int64_t F;       // Hf * Wc frequency bins
  int64_t chunk;   // images per chunk
  int64_t chunks;
  int64_t Cmax;  // max(C, K): planes per image of the larger activation
};

FftSizes sizes_of(const ConvDims& d) {
  FftSizes z{};
  // A 1-row problem (conv1d) needs no transform along H; Wf >= 2 keeps every real transform proper.
  z.Hf = d.H + 2 * d.ph == 1 ? 1 : smooth_size(d.H + 2 * d.ph, false);
  z.Wf = smooth_size(std::max<int64_t>(d.W + 2 * d.pw, 2), true);
  z.Wc = z.Wf / 2 + 1;
  z.F = z.Hf * z.Wc;
  z.Cmax = std::max(d.C, d.K);
  const size_t per_image = size_t(z.Cmax * z.Hf * z.Wf) * sizeof(float) +
                           size_t(z.F * (d.C + d.K)) * sizeof(cufftComplex);
  z.chunk =
      std::clamp<int64_t>(int64_t(kFftChunkBudgetBytes / std::max<size_t>(per_image, 1)), 1, d.N);
  z.chunks = (d.N + z.chunk - 1) / z.chunk;
  return z;
}

// ---- cuFFT plans ------------------------------------------------------------------------------

struct CufftPlan {
  cufftHandle handle = 0;
  size_t work_bytes = 0;
  std::mutex mutex;  // executing binds the stream and work area: one thread at a time per plan
};

// One plan: `batch` dense real Hf x Wf planes to spectra stored frequency-major ([f][batch])
// (forward), or such spectra back to planes (inverse), on one device.
struct PlanKey {
  int device = 0;
  bool inverse = false;
  int64_t Hf = 0, Wf = 0, batch = 0;
  auto operator<=>(const PlanKey&) const = default;
};

class CufftPlanCache {
 public:
  // The plan for `key`, or null when it was never made.
  CufftPlan* find(const PlanKey& key) {
    std::shared_lock lock(mutex_);
    auto it = plans_.find(key);
    return it == plans_.end() ? nullptr : it->second.get();
  }

  // The plan for `key`, made when missing (never inside a CUDA graph capture: see the file header).
  CufftPlan& get(const PlanKey& key) {
    if (CufftPlan* plan = find(key)) return *plan;
    std::unique_lock lock(mutex_);
    auto it = plans_.find(key);
    if (it != plans_.end()) return *it->second;
    const Device device = Device::cuda(key.device);
    EMBER_CHECK_STATUS(
        !cuda::current_stream_capturing(device), not_supported,
        "conv2d (algorithm fft): the cuFFT ", key.inverse ? "inverse" : "forward", " plan for ",
        key.batch, " planes of ", key.Hf, " x ", key.Wf, " on ", device.str(),
        " does not exist yet, and making it allocates device memory, which a CUDA graph capture "
        "forbids; run this convolution shape once before capturing it (a warm-up step), or pick "
        "another algorithm for it");
    auto plan = make_plan(key);
    CufftPlan& result = *plan;
    plans_.emplace(key, std::move(plan));
    return result;
  }

 private:
  static std::unique_ptr<CufftPlan> make_plan(const PlanKey& key) {
    DeviceGuard device_guard(Device::cuda(key.device));
    auto plan = std::make_unique<CufftPlan>();
    EMBER_CUFFT_CHECK(cufftCreate(&plan->handle));
    try {
      // Our workspace carries the work area: cuFFT allocates nothing when the plan runs.
      EMBER_CUFFT_CHECK(cufftSetAutoAllocation(plan->handle, 0));
      const long long Hf = key.Hf, Wf = key.Wf, batch = key.batch;
      const long long Wc = Wf / 2 + 1, plane = Hf * Wf;
      const int rank = Hf == 1 ? 1 : 2;
      long long n[2] = {Hf, Wf}, real_embed[2] = {Hf, Wf}, spectrum_embed[2] = {Hf, Wc};
      long long* dims = rank == 1 ? n + 1 : n;
      long long* real_dims = rank == 1 ? real_embed + 1 : real_embed;
      long long* spectrum_dims = rank == 1 ? spectrum_embed + 1 : spectrum_embed;
      // Element (b, f) of a spectrum is at f * batch + b; of a real plane at
      // b * Hf * Wf + i * Wf + j.
      if (!key.inverse) {
        EMBER_CUFFT_CHECK(cufftMakePlanMany64(plan->handle, rank, dims, real_dims, 1, plane,
                                              spectrum_dims, batch, 1, CUFFT_R2C, batch,
                                              &plan->work_bytes));
      } else {
        EMBER_CUFFT_CHECK(cufftMakePlanMany64(plan->handle, rank, dims, spectrum_dims, batch, 1,
                                              real_dims, 1, plane, CUFFT_C2R, batch,
                                              &plan->work_bytes));
      }
    } catch (...) {
      cufftDestroy(plan->handle);
      throw;
    }
    return plan;
  }

  std::shared_mutex mutex_;
  std::map<PlanKey, std::unique_ptr<CufftPlan>> plans_;
};

// Never destroyed: plans hold device memory, and freeing it from a static destructor can run after
// the CUDA runtime has shut down (the cuBLAS handle pool in blas.cpp does the same).
CufftPlanCache& plan_cache() {
  static auto* cache = new CufftPlanCache;
  return *cache;
}

void exec_forward(CufftPlan& plan, float* planes, cufftComplex* spectra, void* work_area,
                  cudaStream_t stream) {
  std::lock_guard lock(plan.mutex);
  EMBER_CUFFT_CHECK(cufftSetStream(plan.handle, stream));
  if (plan.work_bytes > 0) EMBER_CUFFT_CHECK(cufftSetWorkArea(plan.handle, work_area));
  EMBER_CUFFT_CHECK(cufftExecR2C(plan.handle, planes, spectra));
}

// cuFFT's C2R overwrites its input spectra; none is read again afterwards.
void exec_inverse(CufftPlan& plan, cufftComplex* spectra, float* planes, void* work_area,
                  cudaStream_t stream) {
  std::lock_guard lock(plan.mutex);
  EMBER_CUFFT_CHECK(cufftSetStream(plan.handle, stream));
  if (plan.work_bytes > 0) EMBER_CUFFT_CHECK(cufftSetWorkArea(plan.handle, work_area));
  EMBER_CUFFT_CHECK(cufftExecC2R(plan.handle, spectra, planes));
}

// The plans one problem runs and the chunk sizes it runs them on.
struct PlanKeys {
  int64_t chunk_sizes[2] = {0, 0};  // the full chunk and the last, shorter one (0: none)
  PlanKey filter;                   // w -> w^ (forward) or dw^ -> dw (inverse)
  PlanKey input[2];                 // x -> x^ or dx^ -> dx, per chunk size
  PlanKey output[2];                // dy -> dy^ or y^ -> y, per chunk size
};

PlanKeys plan_keys(const ConvProblem& pr, const FftSizes& z) {
  const ConvDims d = conv_dims(pr);
  const int device = pr.device().index;
  PlanKeys k;
  k.chunk_sizes[0] = z.chunk;
  if (d.N % z.chunk != 0) k.chunk_sizes[1] = d.N % z.chunk;
  // backward_filter inverts the filter spectrum; the others transform the filter.
  k.filter = {device, pr.direction == Direction::backward_filter, z.Hf, z.Wf, d.K * d.C};
  for (int i = 0; i < 2; ++i) {
    const int64_t nc = k.chunk_sizes[i];
    if (nc == 0) continue;
    k.input[i] = {device, pr.direction == Direction::backward_data, z.Hf, z.Wf, nc * d.C};
    k.output[i] = {device, pr.direction == Direction::forward, z.Hf, z.Wf, nc * d.K};
  }
  return k;
}

// Whether every plan the problem runs exists already.
bool plans_exist(const ConvProblem& pr) {
  const PlanKeys k = plan_keys(pr, sizes_of(conv_dims(pr)));
  CufftPlanCache& cache = plan_cache();
  if (cache.find(k.filter) == nullptr) return false;
  for (int i = 0; i < 2; ++i)
    if (k.chunk_sizes[i] != 0 &&
        (cache.find(k.input[i]) == nullptr || cache.find(k.output[i]) == nullptr))
      return false;
  return true;
}

// The plans one problem uses (made here when missing), the chunk sizes it runs, its workspace.
struct FftLayout {
  FftSizes z;
  int64_t chunk_sizes[2] = {0, 0};  // as in PlanKeys
  CufftPlan* filter_plan = nullptr;
  CufftPlan* input_plans[2] = {nullptr, nullptr};
  CufftPlan* output_plans[2] = {nullptr, nullptr};
  size_t work_bytes = 0, filter_spectrum_bytes = 0, input_spectrum_bytes = 0,
         output_spectrum_bytes = 0, plane_bytes = 0, workspace = 0;
};

FftLayout layout_of(const ConvProblem& pr) {
  const ConvDims d = conv_dims(pr);
  FftLayout l;
  l.z = sizes_of(d);
  const FftSizes& z = l.z;
  const PlanKeys keys = plan_keys(pr, z);
  CufftPlanCache& cache = plan_cache();
  l.filter_plan = &cache.get(keys.filter);
  l.work_bytes = l.filter_plan->work_bytes;
  for (int i = 0; i < 2; ++i) {
    l.chunk_sizes[i] = keys.chunk_sizes[i];
    if (keys.chunk_sizes[i] == 0) continue;
    l.input_plans[i] = &cache.get(keys.input[i]);
    l.output_plans[i] = &cache.get(keys.output[i]);
    l.work_bytes =
        std::max({l.work_bytes, l.input_plans[i]->work_bytes, l.output_plans[i]->work_bytes});
  }
  l.filter_spectrum_bytes = size_t(z.F * d.K * d.C) * sizeof(cufftComplex);
  l.input_spectrum_bytes = size_t(z.F * z.chunk * d.C) * sizeof(cufftComplex);
  l.output_spectrum_bytes = size_t(z.F * z.chunk * d.K) * sizeof(cufftComplex);
  l.plane_bytes = size_t(std::max(z.chunk * z.Cmax, d.K * d.C) * z.Hf * z.Wf) * sizeof(float);
  WorkspacePlan ws;
  ws.add(l.work_bytes);
  ws.add(l.filter_spectrum_bytes);
  ws.add(l.input_spectrum_bytes);
  ws.add(l.output_spectrum_bytes);
  ws.add(l.plane_bytes);
  l.workspace = ws.bytes;
  return l;
}

// ---- kernels ----------------------------------------------------------------------------------

// Planes b of one tensor [*, inner, h, w] (b = n * inner + c over images n0 + n) and where they sit
// on the transform grid.
struct PlaneMap {
  int64_t inner, n0;     // channels per image (K * C filters: inner = C, n0 = 0)
  int64_t h, w;          // extent of the tensor's planes
  int64_t off_h, off_w;  // grid position of element (0, 0)
  int64_t Hf, Wf;
  int64_t strides[4];
};

PlaneMap plane_map(const Tensor& t, int64_t inner, int64_t n0, int64_t off_h, int64_t off_w,
                   const FftSizes& z) {
  PlaneMap m{};
  m.inner = inner;
  m.n0 = n0;
  m.h = t.size(2);
  m.w = t.size(3);
  m.off_h = off_h;
  m.off_w = off_w;
  m.Hf = z.Hf;
  m.Wf = z.Wf;
  for (int i = 0; i < 4; ++i) m.strides[i] = t.stride(i);
  return m;
}

// grid[b][i][j] = src plane b at (i - off_h, j - off_w) in fp32, zero outside it.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    fft_pad_planes_kernel(PlaneMap m, const T* __restrict__ src, float* __restrict__ grid,
                          int64_t total) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int64_t j = idx % m.Wf, rest = idx / m.Wf;
    const int64_t i = rest % m.Hf, b = rest / m.Hf;
    const int64_t h = i - m.off_h, w = j - m.off_w;
    float v = 0.f;
    if (h >= 0 && h < m.h && w >= 0 && w < m.w) {
      const int64_t n = m.n0 + b / m.inner, c = b % m.inner;
      v = convert<float>(
          src[n * m.strides[0] + c * m.strides[1] + h * m.strides[2] + w * m.strides[3]]);
    }
    grid[idx] = v;
  }
}

// dst plane b at (i, j) = scale * grid[b][i + off_h][j + off_w], for the whole plane.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    fft_extract_planes_kernel(PlaneMap m, float scale, const float* __restrict__ grid,
                              T* __restrict__ dst, int64_t total) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int64_t j = idx % m.w, rest = idx / m.w;
    const int64_t i = rest % m.h, b = rest / m.h;
    const int64_t n = m.n0 + b / m.inner, c = b % m.inner;
    const float v = grid[(b * m.Hf + i + m.off_h) * m.Wf + j + m.off_w];
    dst[n * m.strides[0] + c * m.strides[1] + i * m.strides[2] + j * m.strides[3]] =
        convert<T>(scale * v);
  }
}

void pad_planes(const Tensor& src, const PlaneMap& m, int64_t planes, float* grid,
                const Device& dev) {
  const int64_t total = planes * m.Hf * m.Wf;
  dispatch_conv_dtype(src.dtype(), "fft", [&](auto tag) {
    using T = decltype(tag);
    fft_pad_planes_kernel<T><<<grid_for(total, dev.index), kBlockThreads, 0, stream_of(dev)>>>(
        m, static_cast<const T*>(src.data_ptr()), grid, total);
    EMBER_CUDA_LAUNCH_CHECK();
  });
}

void extract_planes(const float* grid, const PlaneMap& m, int64_t planes, float scale,
                    const Tensor& dst, const Device& dev) {
  const int64_t total = planes * m.h * m.w;
  dispatch_conv_dtype(dst.dtype(), "fft", [&](auto tag) {
    using T = decltype(tag);
    fft_extract_planes_kernel<T><<<grid_for(total, dev.index), kBlockThreads, 0, stream_of(dev)>>>(
        m, scale, grid, static_cast<T*>(dst.data_ptr()), total);
    EMBER_CUDA_LAUNCH_CHECK();
  });
}

// Column-major C[f] = op_a(A[f]) @ op_b(B[f]) + beta * C[f] for every frequency bin f, in fp32.
struct SpectrumGemm {
  cublasOperation_t op_a = CUBLAS_OP_N, op_b = CUBLAS_OP_N;
  int64_t m = 0, n = 0, k = 0;
  const cufftComplex* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const cufftComplex* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  cufftComplex* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  float beta = 0.f;
  int64_t bins = 0;
};

void spectrum_gemm(const SpectrumGemm& g) {
  const cuComplex alpha = make_cuComplex(1.f, 0.f), beta = make_cuComplex(g.beta, 0.f);
  EMBER_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
      cublas_handle(), g.op_a, g.op_b, g.m, g.n, g.k, &alpha, g.a, CUDA_C_32F, g.lda, g.stride_a,
      g.b, CUDA_C_32F, g.ldb, g.stride_b, &beta, g.c, CUDA_C_32F, g.ldc, g.stride_c, g.bins,
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// ---- the algorithm ----------------------------------------------------------------------------

bool fft_applies(const ConvProblem& pr) {
  const ConvDims d = conv_dims(pr);
  if (!(d.G == 1 && d.sh == 1 && d.sw == 1 && d.dh == 1 && d.dw == 1 &&
        std::max(d.R, d.S) >= kMinKernelExtent))
    return false;
  // Inside a capture a size runs only with plans made before it (see the file header). The
  // cache's heuristic choice for such a key is cached like any other; benchmark mode times the
  // key again after the capture.
  return !cuda::current_stream_capturing(pr.device()) || plans_exist(pr);
}

size_t fft_workspace(const ConvProblem& pr) { return layout_of(pr).workspace; }

void run_fft(const ConvProblem& pr, void* workspace, size_t workspace_bytes) {
  const ConvDims d = conv_dims(pr);
  const FftLayout l = layout_of(pr);
  const FftSizes& z = l.z;
  const Device dev = pr.device();
  cudaStream_t stream = stream_of(dev);
  WorkspaceArena arena(workspace, workspace_bytes);
  void* work_area = arena.take(l.work_bytes);
  auto* w_hat = static_cast<cufftComplex*>(arena.take(l.filter_spectrum_bytes));
  auto* x_hat = static_cast<cufftComplex*>(arena.take(l.input_spectrum_bytes));
  auto* y_hat = static_cast<cufftComplex*>(arena.take(l.output_spectrum_bytes));
  auto* grid = static_cast<float*>(arena.take(l.plane_bytes));
  const float inverse_scale = 1.f / float(z.Hf * z.Wf);  // cuFFT's inverse is unnormalised
  const int64_t filters = d.K * d.C;

  if (pr.direction != Direction::backward_filter) {
    pad_planes(pr.weight, plane_map(pr.weight, d.C, 0, 0, 0, z), filters, grid, dev);
    exec_forward(*l.filter_plan, grid, w_hat, work_area, stream);
  }
  for (int64_t n0 = 0, chunk_index = 0; n0 < d.N; n0 += z.chunk, ++chunk_index) {
    const int64_t nc = std::min(z.chunk, d.N - n0);
    const int which = nc == z.chunk ? 0 : 1;
    // Spectra of this chunk: x^ [f][nc * C] and y^ [f][nc * K]. In cuBLAS's column-major terms a
    // bin's x^ is [C, nc] (ld C), y^ is [K, nc] (ld K) and w^ is [C, K] (ld C).
    SpectrumGemm g;
    g.bins = z.F;
    if (pr.direction == Direction::forward) {
      pad_planes(pr.input, plane_map(pr.input, d.C, n0, d.ph, d.pw, z), nc * d.C, grid, dev);
      exec_forward(*l.input_plans[which], grid, x_hat, work_area, stream);
      // y^T [K, nc] = conj(w^)^T [K, C] @ x^T [C, nc]
      g.op_a = CUBLAS_OP_C, g.op_b = CUBLAS_OP_N;
      g.m = d.K, g.n = nc, g.k = d.C;
      g.a = w_hat, g.lda = d.C, g.stride_a = filters;
      g.b = x_hat, g.ldb = d.C, g.stride_b = nc * d.C;
      g.c = y_hat, g.ldc = d.K, g.stride_c = nc * d.K;
      spectrum_gemm(g);
      exec_inverse(*l.output_plans[which], y_hat, grid, work_area, stream);
      extract_planes(grid, plane_map(pr.output, d.K, n0, 0, 0, z), nc * d.K, inverse_scale,
                     pr.output, dev);
    } else if (pr.direction == Direction::backward_data) {
      pad_planes(pr.output, plane_map(pr.output, d.K, n0, 0, 0, z), nc * d.K, grid, dev);
      exec_forward(*l.output_plans[which], grid, y_hat, work_area, stream);
      // dx^T [C, nc] = w^ [C, K] @ dy^T [K, nc]
      g.op_a = CUBLAS_OP_N, g.op_b = CUBLAS_OP_N;
      g.m = d.C, g.n = nc, g.k = d.K;
      g.a = w_hat, g.lda = d.C, g.stride_a = filters;
      g.b = y_hat, g.ldb = d.K, g.stride_b = nc * d.K;
      g.c = x_hat, g.ldc = d.C, g.stride_c = nc * d.C;
      spectrum_gemm(g);
      exec_inverse(*l.input_plans[which], x_hat, grid, work_area, stream);
      extract_planes(grid, plane_map(pr.input, d.C, n0, d.ph, d.pw, z), nc * d.C, inverse_scale,
                     pr.input, dev);
    } else {
      pad_planes(pr.input, plane_map(pr.input, d.C, n0, d.ph, d.pw, z), nc * d.C, grid, dev);
      exec_forward(*l.input_plans[which], grid, x_hat, work_area, stream);
      pad_planes(pr.output, plane_map(pr.output, d.K, n0, 0, 0, z), nc * d.K, grid, dev);
      exec_forward(*l.output_plans[which], grid, y_hat, work_area, stream);
      // dw^ [C, K] (+)= x^T [C, nc] @ conj(dy^T)^T [nc, K]; the first chunk overwrites.
      g.op_a = CUBLAS_OP_N, g.op_b = CUBLAS_OP_C;
      g.m = d.C, g.n = d.K, g.k = nc;
      g.a = x_hat, g.lda = d.C, g.stride_a = nc * d.C;
      g.b = y_hat, g.ldb = d.K, g.stride_b = nc * d.K;
      g.c = w_hat, g.ldc = d.C, g.stride_c = filters;
      g.beta = chunk_index == 0 ? 0.f : 1.f;
      spectrum_gemm(g);
    }
  }
  if (pr.direction == Direction::backward_filter) {
    exec_inverse(*l.filter_plan, w_hat, grid, work_area, stream);
    extract_planes(grid, plane_map(pr.weight, d.C, 0, 0, 0, z), filters, inverse_scale, pr.weight,
                   dev);
  }
}

// Memory-bound transforms plus an fp32 complex GEMM per bin. Each plane is padded (write), read
// by its transform, whose spectrum (strided, about two passes) is read or written by the GEMM,
// and the inverse reads a spectrum and writes a plane that the extraction reads.
double fft_cost_us(const ConvProblem& pr) {
  const ConvDims d = conv_dims(pr);
  const FftSizes z = sizes_of(d);
  const double planes = double(d.N * d.C + d.K * d.C + d.N * d.K);
  const double plane_bytes = 4.0 * double(z.Hf * z.Wf), spectrum_bytes = 8.0 * double(z.F);
  const double operands = double(pr.input.nbytes() + pr.weight.nbytes() + pr.output.nbytes());
  const double traffic = planes * (3.0 * plane_bytes + 3.0 * spectrum_bytes) + operands;
  const double complex_macs = 4.0 * double(z.F) * double(d.N) * double(d.K) * double(d.C);
  // Launches: the filter's pad and transform (or inverse and extraction), then five per chunk.
  return memory_time_us(traffic) / 0.6 + math_time_us(complex_macs, DType::f32, false, 0.6) +
         double(2 + 5 * z.chunks) * kLaunchUs;
}

const std::vector<DType> kFftTypes = {DType::f32, DType::f16, DType::bf16};

const auto fft_forward = register_conv_algorithm(
    {"fft", Direction::forward, true, kFftTypes, fft_applies, fft_workspace, fft_cost_us, run_fft});
const auto fft_backward_data =
    register_conv_algorithm({"fft", Direction::backward_data, true, kFftTypes, fft_applies,
                             fft_workspace, fft_cost_us, run_fft});
const auto fft_backward_filter =
    register_conv_algorithm({"fft", Direction::backward_filter, true, kFftTypes, fft_applies,
                             fft_workspace, fft_cost_us, run_fft});

}  // namespace
}  // namespace ember::cuda::conv
