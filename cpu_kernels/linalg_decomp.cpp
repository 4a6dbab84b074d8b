// CPU decomposition kernels (kernel_interface/linalg.h) on Eigen, float32 and float64: LU with
// partial pivoting (inverse, solve, log-determinant), LLT (Cholesky), Householder QR, the
// self-adjoint eigensolver and the Jacobi SVD (accurate to full precision for any shape). The
// matrices of a batch are independent and run in parallel, one matrix per task.
#include <Eigen/Dense>
#include <cmath>
#include <limits>

#include "ember/cpu_kernels/parallel.h"
#include "ember/kernel_interface/linalg.h"

namespace ember {
namespace {

template <typename T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using MapMat = Eigen::Map<Mat<T>>;
template <typename T>
using MapVec = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>;

// The b-th matrix of a dense [batch, rows, cols] tensor.
template <typename T>
MapMat<T> matrix(const Tensor& t, int64_t b) {
  const int64_t r = t.size(1), c = t.size(2);
  return MapMat<T>(static_cast<T*>(t.data_ptr()) + b * r * c, r, c);
}
template <typename T>
MapVec<T> vec_of(const Tensor& t, int64_t b) {
  const int64_t n = t.size(1);
  return MapVec<T>(static_cast<T*>(t.data_ptr()) + b * n, n);
}

template <typename F>
void for_each_matrix(int64_t batch, const F& f) {
  parallel_for(0, batch, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) f(b);
  });
}

// 0, or the 1-based index of the first exactly zero pivot (LAPACK getrf's info).
template <typename T>
int64_t zero_pivot(const Eigen::PartialPivLU<Mat<T>>& lu) {
  const auto d = lu.matrixLU().diagonal();
  for (int64_t i = 0; i < d.size(); ++i)
    if (d(i) == T(0)) return i + 1;
  return 0;
}

template <typename T>
void inv_typed(const Tensor& out, const Tensor& a, int64_t* info) {
  for_each_matrix(a.size(0), [&](int64_t b) {
    if (a.size(1) == 0) return;
    Eigen::PartialPivLU<Mat<T>> lu(Mat<T>(matrix<T>(a, b)));
    info[b] = zero_pivot(lu);
    if (info[b] == 0) matrix<T>(out, b) = lu.inverse();
  });
}

template <typename T>
void solve_typed(const Tensor& x, const Tensor& a, const Tensor& rhs, int64_t* info) {
  for_each_matrix(a.size(0), [&](int64_t b) {
    if (a.size(1) == 0 || rhs.size(2) == 0) return;
    Eigen::PartialPivLU<Mat<T>> lu(Mat<T>(matrix<T>(a, b)));
    info[b] = zero_pivot(lu);
    if (info[b] == 0) matrix<T>(x, b) = lu.solve(Mat<T>(matrix<T>(rhs, b)));
  });
}

template <typename T>
void cholesky_typed(const Tensor& l, const Tensor& a, int64_t* info) {
  for_each_matrix(a.size(0), [&](int64_t b) {
    if (a.size(1) == 0) return;
    Eigen::LLT<Mat<T>, Eigen::Lower> llt(Mat<T>(matrix<T>(a, b)));
    info[b] = llt.info() == Eigen::Success ? 0 : 1;
    if (info[b] == 0) matrix<T>(l, b) = llt.matrixL().toDenseMatrix();
  });
}

template <typename T>
void slogdet_typed(const Tensor& sign, const Tensor& logabs, const Tensor& a) {
  for_each_matrix(a.size(0), [&](int64_t b) {
    T* s = static_cast<T*>(sign.data_ptr()) + b;
    T* l = static_cast<T*>(logabs.data_ptr()) + b;
    if (a.size(1) == 0) {  // det of the empty matrix is 1
      *s = 1;
      *l = 0;
      return;
    }
    Eigen::PartialPivLU<Mat<T>> lu(Mat<T>(matrix<T>(a, b)));
    T sg = T(lu.permutationP().determinant()), la = 0;
    const auto d = lu.matrixLU().diagonal();
    for (int64_t i = 0; i < d.size(); ++i) {
      if (d(i) == T(0)) {
        sg = 0;
        la = -std::numeric_limits<T>::infinity();
        break;
      }
      if (d(i) < 0) sg = -sg;
      la += std::log(std::abs(d(i)));
    }
    *s = sg;
    *l = la;
  });
}

template <typename T>
void qr_typed(const Tensor& q, const Tensor& r, const Tensor& a) {
  const int64_t m = a.size(1), n = a.size(2), qc = r.size(1);
  for_each_matrix(a.size(0), [&](int64_t b) {
    if (m == 0 || n == 0) {  // Q is the identity block, R is empty or zero
      if (q.defined()) matrix<T>(q, b) = Mat<T>::Identity(m, q.size(2));
      if (r.numel() > 0) matrix<T>(r, b).setZero();
      return;
    }
    Eigen::HouseholderQR<Mat<T>> qr(Mat<T>(matrix<T>(a, b)));
    matrix<T>(r, b) = qr.matrixQR().topRows(qc).template triangularView<Eigen::Upper>();
    if (q.defined()) matrix<T>(q, b) = qr.householderQ() * Mat<T>::Identity(m, qc);
  });
}

template <typename T>
void eigh_typed(const Tensor& w, const Tensor& v, const Tensor& a) {
  for_each_matrix(a.size(0), [&](int64_t b) {
    if (a.size(1) == 0) return;
    Eigen::SelfAdjointEigenSolver<Mat<T>> es(
        Mat<T>(matrix<T>(a, b)), v.defined() ? Eigen::ComputeEigenvectors : Eigen::EigenvaluesOnly);
    vec_of<T>(w, b) = es.eigenvalues();
    if (v.defined()) matrix<T>(v, b) = es.eigenvectors();
  });
}

template <typename T>
void svd_typed(const Tensor& u, const Tensor& s, const Tensor& vh, const Tensor& a) {
  const int64_t m = a.size(1), n = a.size(2), k = std::min(m, n);
  const bool full = u.size(2) == m && vh.size(1) == n;
  for_each_matrix(a.size(0), [&](int64_t b) {
    if (k == 0) {  // no singular values; the full factors are identities
      if (u.numel() > 0) matrix<T>(u, b) = Mat<T>::Identity(m, u.size(2));
      if (vh.numel() > 0) matrix<T>(vh, b) = Mat<T>::Identity(vh.size(1), n);
      return;
    }
    using Dyn = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
    const int opts = full ? (Eigen::ComputeFullU | Eigen::ComputeFullV)
                          : (Eigen::ComputeThinU | Eigen::ComputeThinV);
    Eigen::JacobiSVD<Dyn> svd(Dyn(matrix<T>(a, b)), opts);
    vec_of<T>(s, b) = svd.singularValues();
    matrix<T>(u, b) = svd.matrixU();
    matrix<T>(vh, b) = svd.matrixV().transpose();
  });
}

template <typename Fn>
Fn pick(DType dt, Fn f32, Fn f64) {
  return dt == DType::f64 ? f64 : f32;
}

void inv_cpu(const Tensor& out, const Tensor& a, int64_t* info) {
  pick(a.dtype(), &inv_typed<float>, &inv_typed<double>)(out, a, info);
}
void solve_cpu(const Tensor& x, const Tensor& a, const Tensor& b, int64_t* info) {
  pick(a.dtype(), &solve_typed<float>, &solve_typed<double>)(x, a, b, info);
}
void cholesky_cpu(const Tensor& l, const Tensor& a, int64_t* info) {
  pick(a.dtype(), &cholesky_typed<float>, &cholesky_typed<double>)(l, a, info);
}
void slogdet_cpu(const Tensor& sign, const Tensor& logabs, const Tensor& a) {
  pick(a.dtype(), &slogdet_typed<float>, &slogdet_typed<double>)(sign, logabs, a);
}
void qr_cpu(const Tensor& q, const Tensor& r, const Tensor& a) {
  pick(a.dtype(), &qr_typed<float>, &qr_typed<double>)(q, r, a);
}
void eigh_cpu(const Tensor& w, const Tensor& v, const Tensor& a) {
  pick(a.dtype(), &eigh_typed<float>, &eigh_typed<double>)(w, v, a);
}
void svd_cpu(const Tensor& u, const Tensor& s, const Tensor& vh, const Tensor& a) {
  pick(a.dtype(), &svd_typed<float>, &svd_typed<double>)(u, s, vh, a);
}

constexpr std::initializer_list<DType> kDecompTypes = {DType::f32, DType::f64};

}  // namespace

EMBER_REGISTER_KERNEL(linalg_inv_kernel, CPU, kDecompTypes, &inv_cpu);
EMBER_REGISTER_KERNEL(linalg_solve_kernel, CPU, kDecompTypes, &solve_cpu);
EMBER_REGISTER_KERNEL(linalg_cholesky_kernel, CPU, kDecompTypes, &cholesky_cpu);
EMBER_REGISTER_KERNEL(linalg_slogdet_kernel, CPU, kDecompTypes, &slogdet_cpu);
EMBER_REGISTER_KERNEL(linalg_qr_kernel, CPU, kDecompTypes, &qr_cpu);
EMBER_REGISTER_KERNEL(linalg_eigh_kernel, CPU, kDecompTypes, &eigh_cpu);
EMBER_REGISTER_KERNEL(linalg_svd_kernel, CPU, kDecompTypes, &svd_cpu);

}  // namespace ember
