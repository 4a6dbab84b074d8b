// gemm_1x1: 1x1 convolutions without padding as cuBLAS GEMMs, no unfold (f32 with TF32 when
// allowed, f16/bf16 with fp32 accumulation, f64; any groups).
//   NHWC form, X [N*H*W, C], Y [N*P*Q, K], W [K, Cg] (KCRS and KRSC are the same memory for 1x1):
//     forward          Y[:, g]  = X[:, g] @ W_g^T       one strided-batched GEMM over groups
//     backward_data    dX[:, g] = dY[:, g] @ W_g
//     backward_filter  dW_g     = dY[:, g]^T @ X[:, g]  (the whole pixel reduction in one GEMM)
//   NCHW form (stride 1, forward and backward_data): per group, a GEMM batched over images,
//     Y_n,g = W_g @ X_n,g and dX_n,g = W_g^T @ dY_n,g.
// Strided 1x1 convolutions (the ResNet downsampling shortcut) run in the NHWC form on the
// subsampled input x[:, :, ::sh, ::sw], gathered into the workspace; backward_data computes that
// subsampled gradient and scatters it into a zeroed dx. Operands that are not dense in the form
// used are staged through the workspace. The tensor a direction writes is OVERWRITTEN.
#include <algorithm>

#include "cuda_kernels/conv_common.cuh"

namespace ember::cuda::conv {
namespace {

bool strided(const ConvShape& d) { return d.sh != 1 || d.sw != 1; }

// The input positions a strided 1x1 convolution reads: a [N, C, P, Q] view of x (or of dx).
Tensor subsampled(const Tensor& t, const ConvShape& d) {
  if (!strided(d)) return t;
  return t.slice(2, 0, d.H, d.sh).slice(3, 0, d.W, d.sw);
}

struct Plan {
  Form form;
  bool stage_weight;
  size_t workspace;
};

Plan plan_of(const ConvProblem& pr) {
  const ConvShape d = shape_of(pr);
  Plan p{};
  if (pr.direction == Direction::backward_filter || strided(d)) {
    p.form = Form::nhwc;
  } else {
    const Tensor& act = pr.output;  // y or dy: the big operand whose layout we follow
    p.form = dense_as(act, Form::nhwc) && !dense_as(act, Form::nchw) ? Form::nhwc : Form::nchw;
  }
  p.stage_weight = !dense_as(pr.weight, Form::nchw) && !dense_as(pr.weight, Form::nhwc);
  WorkspacePlan ws;
  if (strided(d)) {
    // The subsampled input (or its gradient) always lives in the workspace.
    ws.add(size_t(d.N * d.C * d.P * d.Q) * pr.input.element_size());
  } else {
    ws.add(staging_bytes(pr.input, p.form));
  }
  ws.add(staging_bytes(pr.output, p.form));
  if (p.stage_weight) ws.add(staging_bytes(pr.weight, Form::nchw));
  p.workspace = ws.bytes;
  return p;
}

void run_gemm1x1(const ConvProblem& pr, void* workspace, size_t workspace_bytes) {
  const ConvShape d = shape_of(pr);
  const Plan plan = plan_of(pr);
  WorkspaceArena arena(workspace, workspace_bytes);
  const size_t es = pr.input.element_size();
  const Shape sub_shape = {d.N, d.C, d.P, d.Q};

  // Operands in the plan's form. x: the (subsampled) input or its gradient; y: output or dy.
  Tensor x, y, w = pr.weight;
  if (pr.direction == Direction::backward_data) {
    x = strided(d) ? workspace_tensor(arena, sub_shape, pr.input.dtype(), pr.device(), Form::nhwc)
                   : stage_write(pr.input, plan.form, arena);
  } else if (strided(d)) {
    x = workspace_tensor(arena, sub_shape, pr.input.dtype(), pr.device(), Form::nhwc);
    x.copy_(subsampled(pr.input, d).detach());
  } else {
    x = stage_read(pr.input, plan.form, arena);
  }
  y = pr.direction == Direction::forward ? stage_write(pr.output, plan.form, arena)
                                         : stage_read(pr.output, plan.form, arena);
  if (plan.stage_weight)
    w = pr.direction == Direction::backward_filter ? stage_write(pr.weight, Form::nchw, arena)
                                                   : stage_read(pr.weight, Form::nchw, arena);

  char* xp = static_cast<char*>(x.data_ptr());
  char* yp = static_cast<char*>(y.data_ptr());
  char* wp = static_cast<char*>(w.data_ptr());
  GemmArgs g;
  g.dtype = pr.input.dtype();
  g.device = pr.device();
  g.allow_tf32 = pr.allow_tf32;
  const int64_t M = d.N * d.P * d.Q, PQ = d.P * d.Q;

  if (plan.form == Form::nhwc) {
    g.batch = d.G;
    if (pr.direction == Direction::forward) {
      g.m = M, g.n = d.Kg, g.k = d.Cg;
      g.a = xp, g.lda = d.C, g.stride_a = d.Cg;
      g.b = wp, g.ldb = d.Cg, g.stride_b = d.Kg * d.Cg, g.trans_b = true;
      g.c = yp, g.ldc = d.K, g.stride_c = d.Kg;
    } else if (pr.direction == Direction::backward_data) {
      g.m = M, g.n = d.Cg, g.k = d.Kg;
      g.a = yp, g.lda = d.K, g.stride_a = d.Kg;
      g.b = wp, g.ldb = d.Cg, g.stride_b = d.Kg * d.Cg;
      g.c = xp, g.ldc = d.C, g.stride_c = d.Cg;
    } else {
      g.m = d.Kg, g.n = d.Cg, g.k = M;
      g.a = yp, g.lda = d.K, g.stride_a = d.Kg, g.trans_a = true;
      g.b = xp, g.ldb = d.C, g.stride_b = d.Cg;
      g.c = wp, g.ldc = d.Cg, g.stride_c = d.Kg * d.Cg;
    }
    gemm(g);
  } else {
    g.batch = d.N;
    for (int64_t grp = 0; grp < d.G; ++grp) {
      if (pr.direction == Direction::forward) {
        g.m = d.Kg, g.n = PQ, g.k = d.Cg;
        g.a = wp + size_t(grp * d.Kg * d.Cg) * es, g.lda = d.Cg, g.stride_a = 0;
        g.b = xp + size_t(grp * d.Cg * PQ) * es, g.ldb = PQ, g.stride_b = d.C * PQ;
        g.c = yp + size_t(grp * d.Kg * PQ) * es, g.ldc = PQ, g.stride_c = d.K * PQ;
      } else {
        g.m = d.Cg, g.n = PQ, g.k = d.Kg;
        g.a = wp + size_t(grp * d.Kg * d.Cg) * es, g.lda = d.Cg, g.stride_a = 0, g.trans_a = true;
        g.b = yp + size_t(grp * d.Kg * PQ) * es, g.ldb = PQ, g.stride_b = d.K * PQ;
        g.c = xp + size_t(grp * d.Cg * PQ) * es, g.ldc = PQ, g.stride_c = d.C * PQ;
      }
      gemm(g);
    }
  }

  if (pr.direction == Direction::forward) {
    finish_write(pr.output, y);
  } else if (pr.direction == Direction::backward_filter) {
    finish_write(pr.weight, w);
  } else if (strided(d)) {
    // Positions no output reads get a zero gradient.
    Tensor dx = pr.input;
    dx.zero_();
    Tensor reached = subsampled(pr.input, d);
    reached.copy_(x);
  } else {
    finish_write(pr.input, x);
  }
}

bool gemm1x1_applies(const ConvProblem& pr) {
  const ConvShape d = shape_of(pr);
  return d.R == 1 && d.S == 1 && d.ph == 0 && d.pw == 0;
}

size_t gemm1x1_workspace(const ConvProblem& pr) { return plan_of(pr).workspace; }

// Memory-bound at small channel counts, math-bound at large ones; staging and the strided
// gather/scatter cost a read and a write each.
double gemm1x1_cost_us(const ConvProblem& pr) {
  const ConvShape d = shape_of(pr);
  const Plan plan = plan_of(pr);
  const double operands = double(pr.input.nbytes() + pr.output.nbytes() + pr.weight.nbytes());
  const double math = math_time_us(d.macs(), pr.input.dtype(), pr.allow_tf32, 0.7);
  const int64_t calls = plan.form == Form::nhwc ? 1 : d.G;
  return std::max(math, memory_time_us(operands) / 0.8) + memory_time_us(2.0 * double(plan.workspace)) +
         double(calls) * kLaunchUs;
}

const std::vector<DType> kGemm1x1Types = {DType::f32, DType::f64, DType::f16, DType::bf16};

const auto gemm1x1_forward = register_conv_algorithm(
    {"gemm_1x1", Direction::forward, true, kGemm1x1Types, gemm1x1_applies, gemm1x1_workspace,
     gemm1x1_cost_us, run_gemm1x1});
const auto gemm1x1_backward_data = register_conv_algorithm(
    {"gemm_1x1", Direction::backward_data, true, kGemm1x1Types, gemm1x1_applies,
     gemm1x1_workspace, gemm1x1_cost_us, run_gemm1x1});
const auto gemm1x1_backward_filter = register_conv_algorithm(
    {"gemm_1x1", Direction::backward_filter, true, kGemm1x1Types, gemm1x1_applies,
     gemm1x1_workspace, gemm1x1_cost_us, run_gemm1x1});

}  // namespace
}  // namespace ember::cuda::conv
