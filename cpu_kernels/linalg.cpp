// CPU GEMM kernel: row-major batched C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b] on Eigen
// (its blocked, vectorized GEMM; multithreaded when Eigen is built with OpenMP). float16 and
// bfloat16 are converted to float, multiplied with float accumulation and rounded back once,
// which is what the CUDA kernels compute too. allow_tf32 has no meaning on the CPU: fp32 stays
// fp32.
#include <Eigen/Core>
#include <vector>

#include "ember/kernel_interface/gemm.h"

namespace ember {
namespace {

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstMatrixMap = Eigen::Map<const RowMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T>
using MatrixMap = Eigen::Map<RowMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

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

// One GEMM of the batch in T (float or double).
template <typename T>
void gemm_one(const GemmArgs& g, const T* a_ptr, const T* b_ptr, T* c_ptr) {
  MatrixMap<T> c(c_ptr, g.m, g.n, Eigen::OuterStride<>(g.ldc));
  const T alpha = T(g.alpha), beta = T(g.beta);
  if (g.k == 0 || alpha == T(0)) {
    // No product: C = beta * C, and C is not read when beta == 0 (it may hold NaN).
    if (beta == T(0))
      c.setZero();
    else if (beta != T(1))
      c *= beta;
    return;
  }
  const StoredShape as = stored_shape(g.trans_a, g.m, g.k), bs = stored_shape(g.trans_b, g.k, g.n);
  ConstMatrixMap<T> a(a_ptr, as.rows, as.cols, Eigen::OuterStride<>(g.lda));
  ConstMatrixMap<T> b(b_ptr, bs.rows, bs.cols, Eigen::OuterStride<>(g.ldb));
  auto multiply = [&](const auto& op_a, const auto& op_b) {
    if (beta == T(0)) {
      c.noalias() = alpha * op_a * op_b;  // assigns: C is never read
    } else {
      if (beta != T(1)) c *= beta;
      c.noalias() += alpha * op_a * op_b;
    }
  };
  if (!g.trans_a && !g.trans_b)
    multiply(a, b);
  else if (g.trans_a && !g.trans_b)
    multiply(a.transpose(), b);
  else if (!g.trans_a && g.trans_b)
    multiply(a, b.transpose());
  else
    multiply(a.transpose(), b.transpose());
}

template <typename T>
void gemm_native(const GemmArgs& g) {
  const T* a = static_cast<const T*>(g.a);
  const T* b = static_cast<const T*>(g.b);
  T* c = static_cast<T*>(g.c);
  for (int64_t i = 0; i < g.batch; ++i)
    gemm_one<T>(g, a + i * g.stride_a, b + i * g.stride_b, c + i * g.stride_c);
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
  GemmArgs wide = g;
  wide.lda = as.cols;
  wide.ldb = bs.cols;
  wide.ldc = g.n;
  std::vector<float> a_wide, b_wide, c_wide(size_t(g.m * g.n));
  for (int64_t i = 0; i < g.batch; ++i) {
    widen(a + i * g.stride_a, as.rows, as.cols, g.lda, a_wide);
    widen(b + i * g.stride_b, bs.rows, bs.cols, g.ldb, b_wide);
    H* c_batch = c + i * g.stride_c;
    if (g.beta != 0) widen(c_batch, g.m, g.n, g.ldc, c_wide);
    gemm_one<float>(wide, a_wide.data(), b_wide.data(), c_wide.data());
    for (int64_t r = 0; r < g.m; ++r)
      for (int64_t j = 0; j < g.n; ++j) c_batch[r * g.ldc + j] = H(c_wide[size_t(r * g.n + j)]);
  }
}

void gemm_cpu(const GemmArgs& g) {
  check_gemm_args(g);
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  switch (g.dtype) {
    case DType::f32:
      return gemm_native<float>(g);
    case DType::f64:
      return gemm_native<double>(g);
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
