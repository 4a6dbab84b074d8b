// The CPU GEMM entry of cpu_kernels/gemm.h: OpenBLAS's cblas_sgemm / cblas_dgemm when the build
// links it (EMBER_WITH_OPENBLAS), Eigen's GEMM otherwise and inside parallel regions, and the
// bridge that keeps OpenBLAS's thread count equal to Ember's.
#include <Eigen/Core>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "ember/cpu_kernels/gemm.h"
#include "ember/tensor/error.h"
#include "ember/tensor/parallel.h"

#ifdef EMBER_WITH_OPENBLAS
#include <cblas.h>
#endif

namespace ember::cpu {
namespace {

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstMatrixMap = Eigen::Map<const RowMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T>
using MatrixMap = Eigen::Map<RowMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

// C = beta * C without reading C when beta == 0.
template <typename T>
void scale_c(int64_t m, int64_t n, T beta, T* c, int64_t ldc) {
  MatrixMap<T> cm(c, m, n, Eigen::OuterStride<>(ldc));
  if (beta == T(0))
    cm.setZero();
  else if (beta != T(1))
    cm *= beta;
}

// Eigen's blocked, vectorized GEMM on one thread (Ember is not built with OpenMP). m, n, k > 0.
template <typename T>
void gemm_eigen(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  MatrixMap<T> cm(c, m, n, Eigen::OuterStride<>(ldc));
  ConstMatrixMap<T> am(a, trans_a ? k : m, trans_a ? m : k, Eigen::OuterStride<>(lda));
  ConstMatrixMap<T> bm(b, trans_b ? n : k, trans_b ? k : n, Eigen::OuterStride<>(ldb));
  auto multiply = [&](const auto& op_a, const auto& op_b) {
    if (beta == T(0)) {
      cm.noalias() = alpha * op_a * op_b;  // assigns: C is never read
    } else {
      if (beta != T(1)) cm *= beta;
      cm.noalias() += alpha * op_a * op_b;
    }
  };
  if (!trans_a && !trans_b)
    multiply(am, bm);
  else if (trans_a && !trans_b)
    multiply(am.transpose(), bm);
  else if (!trans_a && trans_b)
    multiply(am, bm.transpose());
  else
    multiply(am.transpose(), bm.transpose());
}

GemmLibrary library_from_environment() {
  const char* env = std::getenv("EMBER_CPU_GEMM");
  const std::string_view choice = env ? env : "";
  if (choice == "eigen") return GemmLibrary::eigen;
  EMBER_CHECK(choice.empty() || choice == "openblas", "EMBER_CPU_GEMM=", choice,
              " is not a CPU GEMM library: set it to openblas or eigen, or unset it");
  return gemm_has_openblas() ? GemmLibrary::openblas : GemmLibrary::eigen;
}

std::atomic<GemmLibrary>& library_choice() {
  static std::atomic<GemmLibrary> choice{library_from_environment()};
  return choice;
}

#ifdef EMBER_WITH_OPENBLAS
// OpenBLAS's thread count as last set here; 0 before the first GEMM. openblas_set_num_threads
// is global and may start threads, so one caller at a time sets it.
std::atomic<int> openblas_threads{0};
std::mutex openblas_threads_mutex;

void follow_ember_thread_count() {
  const int wanted = get_num_threads();
  if (openblas_threads.load(std::memory_order_acquire) == wanted) return;
  std::lock_guard<std::mutex> lock(openblas_threads_mutex);
  if (openblas_threads.load(std::memory_order_relaxed) == wanted) return;
  openblas_set_num_threads(wanted);
  openblas_threads.store(wanted, std::memory_order_release);
}

bool fits_blas_int(int64_t v) { return v <= int64_t(INT_MAX); }

void cblas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void cblas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, double alpha,
                const double* a, int lda, const double* b, int ldb, double beta, double* c,
                int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
#endif

}  // namespace

bool gemm_has_openblas() {
#ifdef EMBER_WITH_OPENBLAS
  return true;
#else
  return false;
#endif
}

GemmLibrary gemm_library() { return library_choice().load(std::memory_order_relaxed); }

void set_gemm_library(GemmLibrary library) {
  EMBER_CHECK_STATUS(library == GemmLibrary::eigen || gemm_has_openblas(), not_supported,
                     "set_gemm_library: this build has no OpenBLAS (install libopenblas-dev and "
                     "configure with -DEMBER_WITH_BLAS=ON); use GemmLibrary::eigen");
  library_choice().store(library, std::memory_order_relaxed);
}

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  EMBER_INTERNAL_ASSERT(m >= 0 && n >= 0 && k >= 0, "gemm: negative size m=", m, " n=", n,
                        " k=", k);
  if (m == 0 || n == 0) return;
  EMBER_INTERNAL_ASSERT(ldc >= n, "gemm: ldc ", ldc, " < n ", n);
  if (k == 0 || alpha == T(0)) return scale_c(m, n, beta, c, ldc);
  EMBER_INTERNAL_ASSERT(lda >= (trans_a ? m : k), "gemm: lda ", lda, " too small");
  EMBER_INTERNAL_ASSERT(ldb >= (trans_b ? k : n), "gemm: ldb ", ldb, " too small");
#ifdef EMBER_WITH_OPENBLAS
  if (gemm_library() == GemmLibrary::openblas && !in_parallel_region() && fits_blas_int(m) &&
      fits_blas_int(n) && fits_blas_int(k) && fits_blas_int(lda) && fits_blas_int(ldb) &&
      fits_blas_int(ldc)) {
    follow_ember_thread_count();
    cblas_gemm(trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, int(m),
               int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
    return;
  }
#endif
  gemm_eigen(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);

namespace {
template <typename T>
void gemm_batched_typed(const GemmArgs& g) {
  const T* a = static_cast<const T*>(g.a);
  const T* b = static_cast<const T*>(g.b);
  T* c = static_cast<T*>(g.c);
  for (int64_t i = 0; i < g.batch; ++i)
    gemm<T>(g.trans_a, g.trans_b, g.m, g.n, g.k, T(g.alpha), a + i * g.stride_a, g.lda,
            b + i * g.stride_b, g.ldb, T(g.beta), c + i * g.stride_c, g.ldc);
}
}  // namespace

void gemm_batched_native(const GemmArgs& g) {
  switch (g.dtype) {
    case DType::f32:
      return gemm_batched_typed<float>(g);
    case DType::f64:
      return gemm_batched_typed<double>(g);
    default:
      EMBER_INTERNAL_ASSERT(false, "gemm_batched_native: dtype ", dtype_name(g.dtype),
                            " is not float32 or float64");
  }
}

}  // namespace ember::cpu
