// winograd: F(2x2, 3x3) Winograd convolution for strict fp32 (3x3, stride 1, dilation 1,
// groups 1), forward and backward_data; registered in the algorithm cache as "winograd".
// Non-fused (Lavin & Gray), per chunk of images:
//   filter transform  U[16][Cin][Kout] = G g G^T                    (once per call)
//   input transform   V[16][tiles][Cin] = B^T d B                   d: 4x4 input patch per tile
//   16 GEMMs          M[xi] = V[xi] @ U[xi]                          cuBLAS, fp32 (never TF32)
//   output transform  y(2x2 tile) = A^T M A
// with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
// A^T = [1 1 1 0; 0 1 -1 -1]. It needs 2.25x fewer multiplies than direct convolution, which is
// its niche when TF32 is off. backward_data is the forward of dy with the filter flipped and its
// channels swapped (padding 2 - pad, so pad <= 2). Inputs and outputs are read and written
// through strides (any layout). The output is OVERWRITTEN; deterministic.
#include <algorithm>

#include "ember/cuda_kernels/conv/conv_common.cuh"

namespace ember::cuda::conv {
namespace {

constexpr size_t kWinogradBudgetBytes = size_t(256) << 20;  // V and M of one chunk of images

struct WinogradArgs {
  int64_t n0, Nc;     // images of this chunk
  int64_t Cin, Kout;  // channels of the source and of the destination
  int64_t SH, SW;     // source spatial size
  int64_t DH, DW;     // destination spatial size
  int64_t ph, pw;     // padding of the (possibly transposed) convolution
  int64_t TP, TQ;     // 2x2 output tiles per image along H and W
  int64_t src_strides[4], dst_strides[4];
};

// V[xi][tile][c] for the tiles of images [n0, n0 + Nc); idx = tile * Cin + c.
__global__ void __launch_bounds__(kBlockThreads)
    winograd_input_transform_kernel(WinogradArgs a, const float* __restrict__ src,
                                    float* __restrict__ V, int64_t total) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  const int64_t tiles_per_image = a.TP * a.TQ;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int64_t c = idx % a.Cin, tile = idx / a.Cin;
    const int64_t n = tile / tiles_per_image, t = tile - n * tiles_per_image;
    const int64_t h0 = 2 * (t / a.TQ) - a.ph, w0 = 2 * (t % a.TQ) - a.pw;
    const float* base = src + (a.n0 + n) * a.src_strides[0] + c * a.src_strides[1];
    float d[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t h = h0 + i, w = w0 + j;
        d[i][j] = (h >= 0 && h < a.SH && w >= 0 && w < a.SW)
                      ? base[h * a.src_strides[2] + w * a.src_strides[3]]
                      : 0.f;
      }
    float t4[4][4];  // B^T d
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      t4[0][j] = d[0][j] - d[2][j];
      t4[1][j] = d[1][j] + d[2][j];
      t4[2][j] = d[2][j] - d[1][j];
      t4[3][j] = d[1][j] - d[3][j];
    }
    const int64_t plane = total;  // elements per xi
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // (B^T d) B
      V[(i * 4 + 0) * plane + idx] = t4[i][0] - t4[i][2];
      V[(i * 4 + 1) * plane + idx] = t4[i][1] + t4[i][2];
      V[(i * 4 + 2) * plane + idx] = t4[i][2] - t4[i][1];
      V[(i * 4 + 3) * plane + idx] = t4[i][1] - t4[i][3];
    }
  }
}

// U[xi][cin][kout] = G g G^T with g = w[kout, cin] (forward) or, transposed (backward_data),
// g = w[cin, kout] rotated by 180 degrees.
__global__ void __launch_bounds__(kBlockThreads)
    winograd_filter_transform_kernel(const float* __restrict__ w, int64_t ws0, int64_t ws1,
                                     int64_t ws2, int64_t ws3, int64_t Cin, int64_t Kout,
                                     bool transposed, float* __restrict__ U) {
  const int64_t total = Cin * Kout;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int64_t kout = idx % Kout, cin = idx / Kout;
    float g[3][3];
#pragma unroll
    for (int r = 0; r < 3; ++r)
#pragma unroll
      for (int s = 0; s < 3; ++s)
        g[r][s] = transposed ? w[cin * ws0 + kout * ws1 + (2 - r) * ws2 + (2 - s) * ws3]
                             : w[kout * ws0 + cin * ws1 + r * ws2 + s * ws3];
    float t[4][3];  // G g
#pragma unroll
    for (int s = 0; s < 3; ++s) {
      t[0][s] = g[0][s];
      t[1][s] = 0.5f * (g[0][s] + g[1][s] + g[2][s]);
      t[2][s] = 0.5f * (g[0][s] - g[1][s] + g[2][s]);
      t[3][s] = g[2][s];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // (G g) G^T
      U[(i * 4 + 0) * total + idx] = t[i][0];
      U[(i * 4 + 1) * total + idx] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);
      U[(i * 4 + 2) * total + idx] = 0.5f * (t[i][0] - t[i][1] + t[i][2]);
      U[(i * 4 + 3) * total + idx] = t[i][2];
    }
  }
}

// dst 2x2 tile = A^T M A for M[xi][tile][k]; idx = tile * Kout + k.
__global__ void __launch_bounds__(kBlockThreads)
    winograd_output_transform_kernel(WinogradArgs a, const float* __restrict__ M,
                                     float* __restrict__ dst, int64_t total) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  const int64_t tiles_per_image = a.TP * a.TQ;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int64_t k = idx % a.Kout, tile = idx / a.Kout;
    const int64_t n = tile / tiles_per_image, t = tile - n * tiles_per_image;
    const int64_t p0 = 2 * (t / a.TQ), q0 = 2 * (t % a.TQ);
    float m[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) m[i][j] = M[(i * 4 + j) * total + idx];
    float s[2][4];  // A^T m
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      s[0][j] = m[0][j] + m[1][j] + m[2][j];
      s[1][j] = m[1][j] - m[2][j] - m[3][j];
    }
    float* base = dst + (a.n0 + n) * a.dst_strides[0] + k * a.dst_strides[1];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float y0 = s[i][0] + s[i][1] + s[i][2], y1 = s[i][1] - s[i][2] - s[i][3];
      const int64_t p = p0 + i;
      if (p >= a.DH) continue;
      base[p * a.dst_strides[2] + q0 * a.dst_strides[3]] = y0;
      if (q0 + 1 < a.DW) base[p * a.dst_strides[2] + (q0 + 1) * a.dst_strides[3]] = y1;
    }
  }
}

struct Plan {
  bool transposed;
  int64_t Cin, Kout, SH, SW, DH, DW, ph, pw, TP, TQ;
  int64_t chunk;
  size_t filter_bytes, chunk_bytes, workspace;
};

Plan plan_of(const ConvProblem& pr) {
  const ConvDims d = conv_dims(pr);
  Plan p{};
  p.transposed = pr.direction == Direction::backward_data;
  p.Cin = p.transposed ? d.K : d.C;
  p.Kout = p.transposed ? d.C : d.K;
  p.SH = p.transposed ? d.P : d.H;
  p.SW = p.transposed ? d.Q : d.W;
  p.DH = p.transposed ? d.H : d.P;
  p.DW = p.transposed ? d.W : d.Q;
  p.ph = p.transposed ? 2 - d.ph : d.ph;
  p.pw = p.transposed ? 2 - d.pw : d.pw;
  p.TP = (p.DH + 1) / 2;
  p.TQ = (p.DW + 1) / 2;
  const size_t per_image = 16 * size_t(p.TP * p.TQ) * size_t(p.Cin + p.Kout) * sizeof(float);
  p.chunk = std::clamp<int64_t>(int64_t(kWinogradBudgetBytes / per_image), 1, d.N);
  p.filter_bytes = 16 * size_t(p.Cin * p.Kout) * sizeof(float);
  p.chunk_bytes = per_image * size_t(p.chunk);
  WorkspacePlan ws;
  ws.add(p.filter_bytes);
  ws.add(16 * size_t(p.chunk * p.TP * p.TQ * p.Cin) * sizeof(float));
  ws.add(16 * size_t(p.chunk * p.TP * p.TQ * p.Kout) * sizeof(float));
  p.workspace = ws.bytes;
  return p;
}

bool winograd_applies(const ConvProblem& pr) {
  const ConvDims d = conv_dims(pr);
  const bool shape_ok =
      d.G == 1 && d.R == 3 && d.S == 3 && d.sh == 1 && d.sw == 1 && d.dh == 1 && d.dw == 1;
  if (!shape_ok) return false;
  if (pr.direction == Direction::backward_data) return d.ph <= 2 && d.pw <= 2;
  return pr.direction == Direction::forward;
}

void run_winograd(const ConvProblem& pr, void* workspace, size_t workspace_bytes) {
  const ConvDims d = conv_dims(pr);
  const Plan plan = plan_of(pr);
  WorkspaceArena arena(workspace, workspace_bytes);
  const Device dev = pr.device();
  cudaStream_t stream = stream_of(dev);
  const Tensor& src = plan.transposed ? pr.output : pr.input;
  const Tensor& dst = plan.transposed ? pr.input : pr.output;
  auto* U = static_cast<float*>(arena.take(plan.filter_bytes));
  const int64_t max_tiles = plan.chunk * plan.TP * plan.TQ;
  auto* V = static_cast<float*>(arena.take(16 * size_t(max_tiles * plan.Cin) * sizeof(float)));
  auto* M = static_cast<float*>(arena.take(16 * size_t(max_tiles * plan.Kout) * sizeof(float)));

  winograd_filter_transform_kernel<<<grid_for(plan.Cin * plan.Kout, dev.index), kBlockThreads, 0,
                                     stream>>>(
      static_cast<const float*>(pr.weight.data_ptr()), pr.weight.stride(0), pr.weight.stride(1),
      pr.weight.stride(2), pr.weight.stride(3), plan.Cin, plan.Kout, plan.transposed, U);
  EMBER_CUDA_LAUNCH_CHECK();

  WinogradArgs a{};
  a.Cin = plan.Cin, a.Kout = plan.Kout, a.SH = plan.SH, a.SW = plan.SW, a.DH = plan.DH,
  a.DW = plan.DW, a.ph = plan.ph, a.pw = plan.pw, a.TP = plan.TP, a.TQ = plan.TQ;
  for (int i = 0; i < 4; ++i) {
    a.src_strides[i] = src.stride(i);
    a.dst_strides[i] = dst.stride(i);
  }
  for (int64_t n0 = 0; n0 < d.N; n0 += plan.chunk) {
    a.n0 = n0;
    a.Nc = std::min(plan.chunk, d.N - n0);
    const int64_t tiles = a.Nc * plan.TP * plan.TQ;
    const int64_t in_total = tiles * plan.Cin;
    winograd_input_transform_kernel<<<grid_for(in_total, dev.index), kBlockThreads, 0, stream>>>(
        a, static_cast<const float*>(src.data_ptr()), V, in_total);
    EMBER_CUDA_LAUNCH_CHECK();
    GemmArgs g;
    g.dtype = DType::f32;
    g.device = dev;
    g.allow_tf32 = false;  // strict fp32 is the point of this algorithm
    g.m = tiles, g.n = plan.Kout, g.k = plan.Cin;
    g.a = V, g.lda = plan.Cin, g.stride_a = tiles * plan.Cin;
    g.b = U, g.ldb = plan.Kout, g.stride_b = plan.Cin * plan.Kout;
    g.c = M, g.ldc = plan.Kout, g.stride_c = tiles * plan.Kout;
    g.batch = 16;
    gemm(g);
    const int64_t out_total = tiles * plan.Kout;
    winograd_output_transform_kernel<<<grid_for(out_total, dev.index), kBlockThreads, 0, stream>>>(
        a, M, static_cast<float*>(dst.data_ptr()), out_total);
    EMBER_CUDA_LAUNCH_CHECK();
  }
}

size_t winograd_workspace(const ConvProblem& pr) { return plan_of(pr).workspace; }

// 16 fp32 GEMMs with 4/9 of the direct multiplies on CUDA cores, plus the transforms' traffic
// (V and M written and read once).
double winograd_cost_us(const ConvProblem& pr) {
  const ConvDims d = conv_dims(pr);
  const Plan plan = plan_of(pr);
  const double tiles = double(d.N * plan.TP * plan.TQ);
  const double gemm_macs = 16.0 * tiles * double(plan.Cin) * double(plan.Kout);
  const double traffic = 2.0 * 16.0 * tiles * double(plan.Cin + plan.Kout) * sizeof(float);
  const int64_t chunks = (d.N + plan.chunk - 1) / plan.chunk;
  return math_time_us(gemm_macs, DType::f32, false, 0.7) + memory_time_us(traffic) +
         double(1 + 3 * chunks) * kLaunchUs;
}

const auto winograd_forward = register_conv_algorithm({"winograd",
                                                       Direction::forward,
                                                       true,
                                                       {DType::f32},
                                                       winograd_applies,
                                                       winograd_workspace,
                                                       winograd_cost_us,
                                                       run_winograd});
const auto winograd_backward_data = register_conv_algorithm({"winograd",
                                                             Direction::backward_data,
                                                             true,
                                                             {DType::f32},
                                                             winograd_applies,
                                                             winograd_workspace,
                                                             winograd_cost_us,
                                                             run_winograd});

}  // namespace
}  // namespace ember::cuda::conv
