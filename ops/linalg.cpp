// Matrix products: mm, bmm, matmul (torch.matmul's broadcasting rules), addmm and linear, on the
// gemm kernel (OpenBLAS or Eigen on the CPU, cuBLAS on CUDA). Inputs with unit stride in either of
// their last two dims are used in place (as a transposed operand when needed); others are copied
// once.
#include "ember/autograd/graph/graph.h"
#include "ember/kernel_interface/gemm.h"
#include "ember/ops/ops.h"
#include "ember/tensor/tensor_iter.h"

namespace ember {

using Grads = std::vector<Tensor>;

namespace {
bool g_matmul_allow_tf32 = false;

// How a [.., rows, cols] operand is handed to a row-major GEMM: leading dim and transpose flag.
struct Operand {
  Tensor t;
  bool trans = false;
  int64_t ld = 0;
};

Operand as_operand(const Tensor& x) {
  const int64_t r = x.dim() - 2, c = x.dim() - 1;
  const int64_t rows = x.size(r), cols = x.size(c);
  if (x.stride(c) == 1 && (x.stride(r) >= std::max<int64_t>(cols, 1) || rows == 1))
    return {x, false, std::max<int64_t>(rows == 1 ? cols : x.stride(r), 1)};
  if (x.stride(r) == 1 && (x.stride(c) >= std::max<int64_t>(rows, 1) || cols == 1))
    return {x, true, std::max<int64_t>(cols == 1 ? rows : x.stride(c), 1)};
  Tensor y = x.contiguous();
  return {y, false, std::max<int64_t>(cols, 1)};
}

void check_matrix_args(const char* op, const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.defined() && b.defined(), op, ": undefined input");
  EMBER_CHECK(a.device() == b.device(), op, ": inputs are on different devices (", a.device().str(),
              " and ", b.device().str(), "); move one with .to(device)");
  EMBER_CHECK(a.dtype() == b.dtype(), op, ": inputs have different dtypes (", dtype_name(a.dtype()),
              " and ", dtype_name(b.dtype()), "); convert one with .to(dtype)");
  EMBER_CHECK(is_floating(a.dtype()), op, ": needs floating-point inputs, got ",
              dtype_name(a.dtype()));
}

// C[b] = alpha * A[b] @ B[b] + beta * C[b] for 3-D (batch, rows, cols) tensors; C dense.
void gemm_3d(const Tensor& a, const Tensor& b, const Tensor& c, double alpha, double beta) {
  const int64_t batch = c.size(0), m = c.size(1), n = c.size(2), k = a.size(2);
  if (c.numel() == 0) return;
  Operand oa = as_operand(a), ob = as_operand(b);
  auto batch_stride = [&](const Operand& o) { return o.t.size(0) == 1 ? 0 : o.t.stride(0); };
  GemmArgs g;
  g.trans_a = oa.trans;
  g.trans_b = ob.trans;
  g.m = m;
  g.n = n;
  g.k = k;
  g.alpha = alpha;
  g.beta = beta;
  g.a = oa.t.data_ptr();
  g.lda = oa.ld;
  g.stride_a = batch_stride(oa);
  g.b = ob.t.data_ptr();
  g.ldb = ob.ld;
  g.stride_b = batch_stride(ob);
  g.c = c.data_ptr();
  g.ldc = n;
  g.stride_c = m * n;
  g.batch = batch;
  g.dtype = c.dtype();
  g.device = c.device();
  g.allow_tf32 = g_matmul_allow_tf32;
  if (k == 0) {  // nothing to multiply: C = beta * C
    if (beta == 0)
      const_cast<Tensor&>(c).zero_();
    else {
      Tensor cc = c;
      mul_(cc, beta);
    }
    return;
  }
  gemm_kernel().get(c.device().type, c.dtype())(g);
}

Tensor mm_raw(const Tensor& a, const Tensor& b) {
  Tensor out = empty({a.size(0), b.size(1)}, a.dtype(), a.device());
  gemm_3d(a.unsqueeze(0), b.unsqueeze(0), out.unsqueeze(0), 1, 0);
  return out;
}

}  // namespace

void set_matmul_allow_tf32(bool allow) { g_matmul_allow_tf32 = allow; }
bool matmul_allow_tf32() { return g_matmul_allow_tf32; }

Tensor mm(const Tensor& a, const Tensor& b) {
  check_matrix_args("mm", a, b);
  EMBER_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expects 2-D matrices, got ", a.shape_str(),
              " and ", b.shape_str());
  EMBER_CHECK(a.size(1) == b.size(0), "mm: shapes ", a.shape_str(), " and ", b.shape_str(),
              " cannot be multiplied (", a.size(1), " != ", b.size(0), ")");
  Tensor out;
  {
    autograd::NoGradGuard ng;
    out = mm_raw(a, b);
  }
  if (autograd::needs_grad({&a, &b})) {
    autograd::SavedTensor sa(b.requires_grad() ? a : Tensor(), "mm"),
        sb(a.requires_grad() ? b : Tensor(), "mm");
    autograd::record_backward("mm", {a, b}, {&out}, [sa, sb](const Grads& g, const auto& node) {
      Grads r(2);
      if (node.needs_input_grad(0)) r[0] = mm(g[0], sb.unpack().t());
      if (node.needs_input_grad(1)) r[1] = mm(sa.unpack().t(), g[0]);
      return r;
    });
  }
  return out;
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_matrix_args("bmm", a, b);
  EMBER_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expects 3-D batches of matrices, got ",
              a.shape_str(), " and ", b.shape_str());
  EMBER_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1), "bmm: shapes ", a.shape_str(),
              " and ", b.shape_str(), " cannot be multiplied");
  Tensor out = empty({a.size(0), a.size(1), b.size(2)}, a.dtype(), a.device());
  {
    autograd::NoGradGuard ng;
    gemm_3d(a, b, out, 1, 0);
  }
  if (autograd::needs_grad({&a, &b})) {
    autograd::SavedTensor sa(b.requires_grad() ? a : Tensor(), "bmm"),
        sb(a.requires_grad() ? b : Tensor(), "bmm");
    autograd::record_backward("bmm", {a, b}, {&out}, [sa, sb](const Grads& g, const auto& node) {
      Grads r(2);
      if (node.needs_input_grad(0)) r[0] = bmm(g[0], sb.unpack().transpose(1, 2));
      if (node.needs_input_grad(1)) r[1] = bmm(sa.unpack().transpose(1, 2), g[0]);
      return r;
    });
  }
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_matrix_args("matmul", a, b);
  const int64_t da = a.dim(), db = b.dim();
  EMBER_CHECK(da >= 1 && db >= 1, "matmul: both arguments need at least 1 dim, got ", a.shape_str(),
              " and ", b.shape_str());
  if (da == 1 && db == 1) {
    EMBER_CHECK(a.size(0) == b.size(0), "matmul: vectors of sizes ", a.size(0), " and ", b.size(0));
    return sum(mul(a, b));
  }
  if (da == 2 && db == 2) return mm(a, b);
  if (da == 1) return matmul(a.unsqueeze(0), b).squeeze(-2);
  if (db == 1) return matmul(a, b.unsqueeze(-1)).squeeze(-1);
  EMBER_CHECK(a.size(-1) == b.size(-2), "matmul: shapes ", a.shape_str(), " and ", b.shape_str(),
              " cannot be multiplied (", a.size(-1), " != ", b.size(-2), ")");
  if (db == 2) {  // fold the batch of a into its rows: one GEMM
    Shape out_shape = a.sizes();
    out_shape.back() = b.size(1);
    return mm(a.reshape({-1, a.size(-1)}), b).reshape(out_shape);
  }
  Shape ba(a.sizes().begin(), a.sizes().end() - 2), bb(b.sizes().begin(), b.sizes().end() - 2);
  Shape batch = broadcast_shapes("matmul", {ba, bb});
  const int64_t nb = shape_numel(batch);
  Shape ea = batch, eb = batch;
  ea.push_back(a.size(-2));
  ea.push_back(a.size(-1));
  eb.push_back(b.size(-2));
  eb.push_back(b.size(-1));
  Tensor r = bmm(a.expand(ea).reshape({nb, a.size(-2), a.size(-1)}),
                 b.expand(eb).reshape({nb, b.size(-2), b.size(-1)}));
  Shape out_shape = batch;
  out_shape.push_back(a.size(-2));
  out_shape.push_back(b.size(-1));
  return r.reshape(out_shape);
}

Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b, double beta, double alpha) {
  check_matrix_args("addmm", a, b);
  EMBER_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "addmm: shapes ",
              a.shape_str(), " and ", b.shape_str(), " cannot be multiplied");
  Shape shape{a.size(0), b.size(1)};
  EMBER_CHECK(bias.defined() && broadcast_shapes("addmm", {bias.sizes(), shape}) == shape,
              "addmm: bias of shape ", bias.defined() ? bias.shape_str() : "undefined",
              " does not broadcast to ", shape_str(shape));
  Tensor out = empty(shape, a.dtype(), a.device());
  {
    autograd::NoGradGuard ng;
    out.copy_(bias);  // C starts as the bias, the GEMM adds alpha * A @ B to beta * C
    gemm_3d(a.unsqueeze(0), b.unsqueeze(0), out.unsqueeze(0), alpha, beta);
  }
  if (autograd::needs_grad({&bias, &a, &b})) {
    autograd::SavedTensor sa(a, "addmm"), sb(b, "addmm");
    autograd::record_backward(
        "addmm", {bias, a, b}, {&out},
        [sa, sb, alpha, beta, bshape = bias.sizes()](const Grads& g, const auto& node) {
          Grads r(3);
          if (node.needs_input_grad(0)) r[0] = autograd::sum_to(mul(g[0], beta), bshape);
          if (node.needs_input_grad(1)) r[1] = mul(mm(g[0], sb.unpack().t()), alpha);
          if (node.needs_input_grad(2)) r[2] = mul(mm(sa.unpack().t(), g[0]), alpha);
          return r;
        });
  }
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_matrix_args("linear", x, weight);
  EMBER_CHECK(weight.dim() == 2, "linear: weight must be 2-D [out_features, in_features], got ",
              weight.shape_str());
  EMBER_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "linear: input of shape ",
              x.shape_str(), " does not match weight of shape ", weight.shape_str(),
              " (in_features ", weight.size(1), ")");
  if (bias.defined())
    EMBER_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "linear: bias of shape ",
                bias.shape_str(), " does not match out_features ", weight.size(0));
  Shape out_shape = x.sizes();
  out_shape.back() = weight.size(0);
  Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, x.size(-1)});
  Tensor out = empty({x2.size(0), weight.size(0)}, x.dtype(), x.device());
  {
    autograd::NoGradGuard ng;
    if (bias.defined()) out.copy_(bias);
    gemm_3d(x2.unsqueeze(0), weight.t().unsqueeze(0), out.unsqueeze(0), 1, bias.defined() ? 1 : 0);
  }
  if (autograd::needs_grad({&x, &weight, &bias})) {
    autograd::SavedTensor sx(weight.requires_grad() ? x2 : Tensor(), "linear"),
        sw(x.requires_grad() ? weight : Tensor(), "linear");
    autograd::record_backward("linear", {x2, weight, bias}, {&out},
                              [sx, sw](const Grads& g, const auto& node) {
                                Grads r(3);
                                if (node.needs_input_grad(0)) r[0] = mm(g[0], sw.unpack());
                                if (node.needs_input_grad(1)) r[1] = mm(g[0].t(), sx.unpack());
                                if (node.needs_input_grad(2)) r[2] = sum(g[0], {0});
                                return r;
                              });
  }
  return x.dim() == 2 ? out : out.reshape(out_shape);
}

}  // namespace ember
