// CPU GEMM kernel: row-major batched C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b] through the
// CPU backend's GEMM entry (cpu_kernels/gemm.h: OpenBLAS, or Eigen). float16 and bfloat16 are
// converted to float, multiplied with float accumulation and rounded back once, which is what the
// CUDA kernels compute too. allow_tf32 has no meaning on the CPU: fp32 stays fp32.
#include <vector>

#include "ember/cpu_kernels/gemm.h"
#include "ember/kernel_interface/gemm.h"

namespace ember {
namespace {

// Stored shape of an operand: op(X) is rows x cols, so X itself is cols x rows when transposed.
struct StoredShape {
  int64_t rows, cols;
};
StoredShape stored_shape(bool transposed, int64_t rows, int64_t cols) {
  return transposed ? StoredShape{cols, rows} : StoredShape{rows, cols};
}

void check_gemm_args(const GemmArgs& g) {
  EMBER_INTERNAL_ASSERT(g.m >= 0 && g.n >= 0 && g.k >= 0 && g.batch >= 0,
                        "gemm: negative size m=", g.m, " n=", g.n, " k=", g.k, " batch=", g.batch);
  const StoredShape a = stored_shape(g.trans_a, g.m, g.k), b = stored_shape(g.trans_b, g.k, g.n);
  EMBER_INTERNAL_ASSERT(a.rows == 0 || g.lda >= a.cols, "gemm: lda ", g.lda, " < ", a.cols);
  EMBER_INTERNAL_ASSERT(b.rows == 0 || g.ldb >= b.cols, "gemm: ldb ", g.ldb, " < ", b.cols);
  EMBER_INTERNAL_ASSERT(g.m == 0 || g.ldc >= g.n, "gemm: ldc ", g.ldc, " < ", g.n);
}

// Copies the stored rows x cols block (leading dim ld) of a 16-bit matrix into dense float.
template <typename H>
void widen(const H* src, int64_t rows, int64_t cols, int64_t ld, std::vector<float>& dst) {
  dst.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) dst[size_t(r * cols + j)] = float(src[r * ld + j]);
}

// float16/bfloat16: widen each batch entry to float, run the float GEMM on dense copies (leading
// dims = column counts), round C back. C is widened only when beta != 0.
template <typename H>
void gemm_half(const GemmArgs& g) {
  const H* a = static_cast<const H*>(g.a);
  const H* b = static_cast<const H*>(g.b);
  H* c = static_cast<H*>(g.c);
  const StoredShape as = stored_shape(g.trans_a, g.m, g.k), bs = stored_shape(g.trans_b, g.k, g.n);
  std::vector<float> a_wide, b_wide, c_wide(size_t(g.m * g.n));
  for (int64_t i = 0; i < g.batch; ++i) {
    widen(a + i * g.stride_a, as.rows, as.cols, g.lda, a_wide);
    widen(b + i * g.stride_b, bs.rows, bs.cols, g.ldb, b_wide);
    H* c_batch = c + i * g.stride_c;
    if (g.beta != 0) widen(c_batch, g.m, g.n, g.ldc, c_wide);
    cpu::gemm<float>(g.trans_a, g.trans_b, g.m, g.n, g.k, float(g.alpha), a_wide.data(), as.cols,
                     b_wide.data(), bs.cols, float(g.beta), c_wide.data(), g.n);
    for (int64_t r = 0; r < g.m; ++r)
      for (int64_t j = 0; j < g.n; ++j) c_batch[r * g.ldc + j] = H(c_wide[size_t(r * g.n + j)]);
  }
}

void gemm_cpu(const GemmArgs& g) {
  check_gemm_args(g);
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  switch (g.dtype) {
    case DType::f32:
    case DType::f64:
      return cpu::gemm_batched_native(g);
    case DType::f16:
      return gemm_half<Half>(g);
    case DType::bf16:
      return gemm_half<BFloat16>(g);
    default:
      EMBER_THROW(not_supported, "gemm: dtype ", dtype_name(g.dtype),
                  " is not supported on the CPU; use float32, float64, float16 or bfloat16");
  }
}

}  // namespace

EMBER_REGISTER_KERNEL(gemm_kernel, CPU, dispatch::kFloatingTypes, &gemm_cpu);

}  // namespace ember
