// im2col_gemm: the general GEMM-based conv2d on CUDA (any stride, padding, dilation, groups,
// layout; f32 with TF32 when allowed, f16/bf16 with fp32 accumulation, f64). The receptive fields
// of a chunk of images are unfolded into a workspace (`col`), then cuBLAS multiplies:
//   NHWC form (pixels-major col [G][Nc*P*Q][J], J = Cg*R*S):
//     forward          Y[:, g]  = col_g  @ W_g^T        (one strided-batched GEMM over groups)
//     backward_data    dcol_g   = dY[:, g] @ W_g        then col2im gathers into dx
//     backward_filter  dW_g    += dY[:, g]^T @ col_g   (chunks accumulate with beta = 1)
//   NCHW form (col [Nc][G][J][P*Q]), forward and backward_data only:
//     forward          Y_n,g    = W_g @ col_n,g         (batched over images, one call per group)
//     backward_data    dcol_n,g = W_g^T @ dY_n,g        then col2im
// backward_filter always uses the NHWC form (dY staged to channels_last when it is not), so the
// whole reduction over pixels runs inside one GEMM with fp32 accumulation. The unfold order J
// follows the weight's layout: (c, r, s) for KCRS, (r, s, c) for KRSC. col2im gathers (a thread
// per input element sums the taps that reach it): no atomics, deterministic. The tensor a
// direction writes is OVERWRITTEN.
#include <algorithm>

#include "cuda_kernels/conv_common.cuh"

namespace ember::cuda::conv {
namespace {

// Workspace for `col` is bounded: images are processed in chunks.
constexpr size_t kColBudgetBytes = size_t(256) << 20;

struct UnfoldArgs {
  int64_t n0, Nc;  // first image and images in this chunk
  int64_t C, H, W, P, Q, R, S, G, Cg;
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t xs[4];        // strides of the unfolded (or gathered-into) activation [N, C, H, W]
  bool pixels_major;    // col is [G][Nc*P*Q][J] (NHWC form), else [Nc][G][J][P*Q]
  bool taps_outer;      // J order (r, s, c) (KRSC weights), else (c, r, s) (KCRS)
  bool channels_fastest;  // col2im: walk dx with channels innermost (NHWC dx)
};

__device__ __forceinline__ int64_t unfold_column(const UnfoldArgs& a, int64_t c, int64_t r, int64_t s) {
  return a.taps_outer ? (r * a.S + s) * a.Cg + c : (c * a.R + r) * a.S + s;
}

// col = unfold(x) for images [n0, n0 + Nc); zeros where a tap falls in the padding.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
im2col_kernel(UnfoldArgs a, const T* __restrict__ x, T* __restrict__ col, int64_t total) {
  const int64_t J = a.Cg * a.R * a.S, PQ = a.P * a.Q, M = a.Nc * PQ;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    int64_t j, n, g, pq;
    if (a.pixels_major) {
      j = idx % J;
      const int64_t m = (idx / J) % M;
      g = idx / (J * M);
      n = m / PQ;
      pq = m - n * PQ;
    } else {
      pq = idx % PQ;
      j = (idx / PQ) % J;
      g = (idx / (PQ * J)) % a.G;
      n = idx / (PQ * J * a.G);
    }
    int64_t c, r, s;
    if (a.taps_outer) {
      c = j % a.Cg;
      s = (j / a.Cg) % a.S;
      r = j / (a.Cg * a.S);
    } else {
      s = j % a.S;
      r = (j / a.S) % a.R;
      c = j / (a.S * a.R);
    }
    const int64_t p = pq / a.Q, q = pq - p * a.Q;
    const int64_t h = p * a.sh - a.ph + r * a.dh, w = q * a.sw - a.pw + s * a.dw;
    T v = convert<T>(0.0f);
    if (h >= 0 && h < a.H && w >= 0 && w < a.W)
      v = x[(a.n0 + n) * a.xs[0] + (g * a.Cg + c) * a.xs[1] + h * a.xs[2] + w * a.xs[3]];
    col[idx] = v;
  }
}

// dx[n, c, h, w] = sum of dcol over the taps whose output position reaches (h, w), for images
// [n0, n0 + Nc); accumulation in fp32 (fp64 for f64).
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
col2im_kernel(UnfoldArgs a, const T* __restrict__ col, T* __restrict__ dx, int64_t total) {
  using Acc = OpMath<T>;
  const int64_t J = a.Cg * a.R * a.S, PQ = a.P * a.Q, M = a.Nc * PQ;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    int64_t n, c, h, w;
    if (a.channels_fastest) {
      c = idx % a.C;
      w = (idx / a.C) % a.W;
      h = (idx / (a.C * a.W)) % a.H;
      n = idx / (a.C * a.W * a.H);
    } else {
      w = idx % a.W;
      h = (idx / a.W) % a.H;
      c = (idx / (a.W * a.H)) % a.C;
      n = idx / (a.W * a.H * a.C);
    }
    const int64_t g = c / a.Cg, ci = c - g * a.Cg;
    Acc acc = 0;
    for (int64_t r = 0; r < a.R; ++r) {
      const int64_t ph = h + a.ph - r * a.dh;
      if (ph < 0 || ph % a.sh != 0 || ph / a.sh >= a.P) continue;
      const int64_t p = ph / a.sh;
      for (int64_t s = 0; s < a.S; ++s) {
        const int64_t qw = w + a.pw - s * a.dw;
        if (qw < 0 || qw % a.sw != 0 || qw / a.sw >= a.Q) continue;
        const int64_t q = qw / a.sw;
        const int64_t j = unfold_column(a, ci, r, s);
        const int64_t at = a.pixels_major ? (g * M + n * PQ + p * a.Q + q) * J + j
                                          : ((n * a.G + g) * J + j) * PQ + p * a.Q + q;
        acc += convert<Acc>(col[at]);
      }
    }
    dx[(a.n0 + n) * a.xs[0] + c * a.xs[1] + h * a.xs[2] + w * a.xs[3]] = convert<T>(acc);
  }
}

// ---- planning ---------------------------------------------------------------------------------

// Everything a run decides, derived from the problem alone (so workspace_bytes and run agree).
struct Plan {
  bool pixels_major;   // NHWC form
  bool taps_outer;     // weights (read or written) used as KRSC
  bool stage_weight;   // the weight is dense in neither KCRS nor KRSC: staged as KCRS
  Form dy_form;        // form of the GEMM's activation operand (output / output gradient)
  int64_t chunk;       // images per col chunk
  size_t col_bytes;    // one chunk's col
  size_t staging;      // bytes of staged operands
  size_t workspace;    // total
};

Plan plan_of(const ConvProblem& pr) {
  const ConvShape d = shape_of(pr);
  Plan p{};
  const Tensor& act = pr.output;  // y (forward) or dy (backward)
  if (pr.direction == Direction::backward_filter) {
    p.pixels_major = true;
  } else {
    p.pixels_major = dense_as(act, Form::nhwc) && !dense_as(act, Form::nchw);
  }
  p.dy_form = p.pixels_major ? Form::nhwc : Form::nchw;
  if (dense_as(pr.weight, Form::nchw)) {
    p.taps_outer = false;
  } else if (dense_as(pr.weight, Form::nhwc)) {
    p.taps_outer = true;
  } else {
    p.taps_outer = false;
    p.stage_weight = true;
  }
  const size_t per_image = size_t(d.G * d.Cg * d.R * d.S) * size_t(d.P * d.Q) * pr.input.element_size();
  p.chunk = std::clamp<int64_t>(int64_t(kColBudgetBytes / std::max<size_t>(per_image, 1)), 1, d.N);
  p.col_bytes = per_image * size_t(p.chunk);
  WorkspacePlan ws;
  ws.add(staging_bytes(act, p.dy_form));
  if (p.stage_weight) ws.add(staging_bytes(pr.weight, Form::nchw));
  p.staging = ws.bytes;
  ws.add(p.col_bytes);
  p.workspace = ws.bytes;
  return p;
}

UnfoldArgs unfold_args(const ConvProblem& pr, const Plan& plan, const Tensor& activation) {
  const ConvShape d = shape_of(pr);
  UnfoldArgs a{};
  a.C = d.C, a.H = d.H, a.W = d.W, a.P = d.P, a.Q = d.Q, a.R = d.R, a.S = d.S, a.G = d.G,
  a.Cg = d.Cg;
  a.sh = d.sh, a.sw = d.sw, a.ph = d.ph, a.pw = d.pw, a.dh = d.dh, a.dw = d.dw;
  for (int i = 0; i < 4; ++i) a.xs[i] = activation.stride(i);
  a.pixels_major = plan.pixels_major;
  a.taps_outer = plan.taps_outer;
  a.channels_fastest = activation.suggest_memory_format() == MemoryFormat::channels_last;
  return a;
}

GemmArgs gemm_base(const ConvProblem& pr) {
  GemmArgs g;
  g.dtype = pr.input.dtype();
  g.device = pr.device();
  g.allow_tf32 = pr.allow_tf32;
  return g;
}

template <typename T>
void run_im2col_gemm_typed(const ConvProblem& pr, void* workspace, size_t workspace_bytes) {
  const ConvShape d = shape_of(pr);
  const Plan plan = plan_of(pr);
  WorkspaceArena arena(workspace, workspace_bytes);
  const Device dev = pr.device();
  cudaStream_t stream = stream_of(dev);
  const int64_t J = d.Cg * d.R * d.S, PQ = d.P * d.Q;
  const size_t es = pr.input.element_size();

  Tensor act = pr.direction == Direction::forward ? stage_write(pr.output, plan.dy_form, arena)
                                                  : stage_read(pr.output, plan.dy_form, arena);
  Tensor weight = pr.weight;
  if (pr.direction == Direction::backward_filter) {
    if (plan.stage_weight) weight = stage_write(pr.weight, Form::nchw, arena);
  } else if (plan.stage_weight) {
    weight = stage_read(pr.weight, Form::nchw, arena);
  }
  T* col = static_cast<T*>(arena.take(plan.col_bytes));
  char* act_ptr = static_cast<char*>(act.data_ptr());
  char* w_ptr = static_cast<char*>(weight.data_ptr());

  for (int64_t n0 = 0; n0 < d.N; n0 += plan.chunk) {
    const int64_t nc = std::min(plan.chunk, d.N - n0);
    const int64_t M = nc * PQ;
    UnfoldArgs ua = unfold_args(pr, plan, pr.input);
    ua.n0 = n0;
    ua.Nc = nc;
    const int64_t col_elems = d.G * J * M;
    if (pr.direction != Direction::backward_data) {
      im2col_kernel<T><<<grid_for(col_elems, dev.index), kBlockThreads, 0, stream>>>(
          ua, static_cast<const T*>(pr.input.data_ptr()), col, col_elems);
      EMBER_CUDA_LAUNCH_CHECK();
    }
    GemmArgs g = gemm_base(pr);
    if (pr.direction == Direction::forward && plan.pixels_major) {
      g.m = M, g.n = d.Kg, g.k = J;
      g.a = col, g.lda = J, g.stride_a = M * J;
      g.b = w_ptr, g.ldb = J, g.stride_b = d.Kg * J, g.trans_b = true;
      g.c = act_ptr + size_t(n0 * PQ * d.K) * es, g.ldc = d.K, g.stride_c = d.Kg;
      g.batch = d.G;
      gemm(g);
    } else if (pr.direction == Direction::forward) {
      for (int64_t grp = 0; grp < d.G; ++grp) {
        g.m = d.Kg, g.n = PQ, g.k = J;
        g.a = w_ptr + size_t(grp * d.Kg * J) * es, g.lda = J, g.stride_a = 0;
        g.b = col + grp * J * PQ, g.ldb = PQ, g.stride_b = d.G * J * PQ;
        g.c = act_ptr + size_t((n0 * d.K + grp * d.Kg) * PQ) * es, g.ldc = PQ, g.stride_c = d.K * PQ;
        g.batch = nc;
        gemm(g);
      }
    } else if (pr.direction == Direction::backward_data) {
      if (plan.pixels_major) {
        g.m = M, g.n = J, g.k = d.Kg;
        g.a = act_ptr + size_t(n0 * PQ * d.K) * es, g.lda = d.K, g.stride_a = d.Kg;
        g.b = w_ptr, g.ldb = J, g.stride_b = d.Kg * J;
        g.c = col, g.ldc = J, g.stride_c = M * J;
        g.batch = d.G;
        gemm(g);
      } else {
        for (int64_t grp = 0; grp < d.G; ++grp) {
          g.m = J, g.n = PQ, g.k = d.Kg;
          g.a = w_ptr + size_t(grp * d.Kg * J) * es, g.lda = J, g.stride_a = 0, g.trans_a = true;
          g.b = act_ptr + size_t((n0 * d.K + grp * d.Kg) * PQ) * es, g.ldb = PQ, g.stride_b = d.K * PQ;
          g.c = col + grp * J * PQ, g.ldc = PQ, g.stride_c = d.G * J * PQ;
          g.batch = nc;
          gemm(g);
        }
      }
      const int64_t dx_elems = nc * d.C * d.H * d.W;
      UnfoldArgs ca = unfold_args(pr, plan, pr.input);
      ca.n0 = n0;
      ca.Nc = nc;
      col2im_kernel<T><<<grid_for(dx_elems, dev.index), kBlockThreads, 0, stream>>>(
          ca, col, static_cast<T*>(pr.input.data_ptr()), dx_elems);
      EMBER_CUDA_LAUNCH_CHECK();
    } else {
      g.m = d.Kg, g.n = J, g.k = M;
      g.a = act_ptr + size_t(n0 * PQ * d.K) * es, g.lda = d.K, g.stride_a = d.Kg, g.trans_a = true;
      g.b = col, g.ldb = J, g.stride_b = M * J;
      g.c = w_ptr, g.ldc = J, g.stride_c = d.Kg * J;
      g.beta = n0 == 0 ? 0.0 : 1.0;
      g.batch = d.G;
      gemm(g);
    }
  }
  if (pr.direction == Direction::forward) finish_write(pr.output, act);
  if (pr.direction == Direction::backward_filter) finish_write(pr.weight, weight);
}

void run_im2col_gemm(const ConvProblem& pr, void* workspace, size_t workspace_bytes) {
  dispatch_conv_dtype<true>(pr.input.dtype(), "im2col_gemm", [&](auto tag) {
    run_im2col_gemm_typed<decltype(tag)>(pr, workspace, workspace_bytes);
  });
}

size_t im2col_workspace(const ConvProblem& pr) { return plan_of(pr).workspace; }

// The unfold writes and the GEMM reads col (R*S times the input), plus staging copies, plus the
// GEMMs at about 60% of the math peak, plus one launch per chunk and group.
double im2col_cost_us(const ConvProblem& pr) {
  const ConvShape d = shape_of(pr);
  const Plan plan = plan_of(pr);
  const double col_total = double(plan.col_bytes) / double(plan.chunk) * double(d.N);
  const int64_t chunks = (d.N + plan.chunk - 1) / plan.chunk;
  const int64_t calls_per_chunk = plan.pixels_major ? 2 : 1 + d.G;
  const double operands = double(pr.input.nbytes() + pr.output.nbytes() + pr.weight.nbytes());
  return memory_time_us(3.0 * col_total + 2.0 * double(plan.staging)) +
         std::max(math_time_us(d.macs(), pr.input.dtype(), pr.allow_tf32, 0.6),
                  memory_time_us(operands) / 0.8) +
         double(chunks * calls_per_chunk) * kLaunchUs;
}

bool im2col_applies(const ConvProblem& pr) {
  // cuBLAS takes 64-bit sizes; the unfold index must fit int64 comfortably.
  const ConvShape d = shape_of(pr);
  return double(d.G * d.Cg * d.R * d.S) * double(d.P * d.Q) < 9e15;
}

const std::vector<DType> kIm2colTypes = {DType::f32, DType::f64, DType::f16, DType::bf16};

const auto im2col_forward = register_conv_algorithm(
    {"im2col_gemm", Direction::forward, true, kIm2colTypes, im2col_applies, im2col_workspace,
     im2col_cost_us, run_im2col_gemm});
const auto im2col_backward_data = register_conv_algorithm(
    {"im2col_gemm", Direction::backward_data, true, kIm2colTypes, im2col_applies, im2col_workspace,
     im2col_cost_us, run_im2col_gemm});
const auto im2col_backward_filter = register_conv_algorithm(
    {"im2col_gemm", Direction::backward_filter, true, kIm2colTypes, im2col_applies,
     im2col_workspace, im2col_cost_us, run_im2col_gemm});

}  // namespace
}  // namespace ember::cuda::conv
