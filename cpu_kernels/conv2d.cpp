// CPU conv2d algorithms (NCHW, float32 and float64, any stride / padding / dilation / groups), for
// the forward, backward-data and backward-filter directions, registered in the algorithm cache:
//   im2col_gemm  unfold the receptive fields into a [C/g * R * S, P * Q] workspace, then one Eigen
//                GEMM per image and group (1x1 stride-1 unpadded convolutions skip the unfold and
//                need no workspace)
//   direct       a loop nest over the output (or the gradient), no workspace
// Both are deterministic (fixed summation order). Every direction OVERWRITES the tensor it writes
// (see ConvProblem in ops/conv.h). float16/bfloat16 never reach here: the op computes them in fp32.
#include <Eigen/Core>
#include <algorithm>
#include <cstring>

#include "dispatch/algorithm.h"
#include "ops/conv.h"

namespace ember {
namespace {

using dispatch::Direction;



// The output positions o in [0, count) whose input coordinate o * stride + offset falls in
// [0, limit): returns [lo, hi). Lets the inner loops run without bounds checks.
inline void valid_range(int64_t offset, int64_t stride, int64_t limit, int64_t count, int64_t& lo,
                        int64_t& hi) {
  // smallest o with o * stride + offset >= 0
  lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  // largest o with o * stride + offset <= limit - 1, plus one
  int64_t top = limit - 1 - offset;
  hi = top < 0 ? 0 : top / stride + 1;
  lo = std::min(lo, count);
  hi = std::clamp(hi, lo, count);
}

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstMap = Eigen::Map<const RowMatrix<T>>;
template <typename T>
using MutMap = Eigen::Map<RowMatrix<T>>;

// Unfolds the receptive fields of one image and group, zero outside the input:
//   col[(c * R + r) * S + s][p * Q + q] = x[c][p * sh - ph + r * dh][q * sw - pw + s * dw]
// x: [Cg, H, W]; col: [Cg * R * S, P * Q].
template <typename T>
void im2col(const T* x, const ConvDims& d, T* col) {
  for (int64_t c = 0; c < d.Cg; ++c)
    for (int64_t r = 0; r < d.R; ++r)
      for (int64_t s = 0; s < d.S; ++s) {
        T* row = col + ((c * d.R + r) * d.S + s) * d.PQ();
        std::fill(row, row + d.PQ(), T(0));
        int64_t p_lo, p_hi, q_lo, q_hi;
        valid_range(r * d.dh - d.ph, d.sh, d.H, d.P, p_lo, p_hi);
        valid_range(s * d.dw - d.pw, d.sw, d.W, d.Q, q_lo, q_hi);
        for (int64_t p = p_lo; p < p_hi; ++p) {
          const T* xrow = x + (c * d.H + p * d.sh - d.ph + r * d.dh) * d.W;
          T* out = row + p * d.Q;
          for (int64_t q = q_lo; q < q_hi; ++q) out[q] = xrow[q * d.sw - d.pw + s * d.dw];
        }
      }
}

// The adjoint of im2col: dx[c][h][w] += col[...] for every receptive field covering (h, w).
template <typename T>
void col2im_add(const T* col, const ConvDims& d, T* dx) {
  for (int64_t c = 0; c < d.Cg; ++c)
    for (int64_t r = 0; r < d.R; ++r)
      for (int64_t s = 0; s < d.S; ++s) {
        const T* row = col + ((c * d.R + r) * d.S + s) * d.PQ();
        int64_t p_lo, p_hi, q_lo, q_hi;
        valid_range(r * d.dh - d.ph, d.sh, d.H, d.P, p_lo, p_hi);
        valid_range(s * d.dw - d.pw, d.sw, d.W, d.Q, q_lo, q_hi);
        for (int64_t p = p_lo; p < p_hi; ++p) {
          T* dxrow = dx + (c * d.H + p * d.sh - d.ph + r * d.dh) * d.W;
          const T* in = row + p * d.Q;
          for (int64_t q = q_lo; q < q_hi; ++q) dxrow[q * d.sw - d.pw + s * d.dw] += in[q];
        }
      }
}

// ---- im2col + GEMM ----------------------------------------------------------------------------

template <typename T>
void forward_im2col_gemm(const ConvProblem& pr, void* workspace) {
  ConvDims d = conv_dims(pr);
  const T* x = pr.input.data<T>();
  const T* w = pr.weight.data<T>();
  T* y = pr.output.data<T>();
  T* col = static_cast<T*>(workspace);
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t g = 0; g < d.G; ++g) {
      const T* xg = x + (n * d.C + g * d.Cg) * d.HW();
      const T* unfolded = xg;
      if (!d.pointwise()) {
        im2col(xg, d, col);
        unfolded = col;
      }
      ConstMap<T> wg(w + g * d.Kg * d.CgRS(), d.Kg, d.CgRS());  // [Kg, Cg*R*S]
      ConstMap<T> cols(unfolded, d.CgRS(), d.PQ());             // [Cg*R*S, P*Q]
      MutMap<T> yg(y + (n * d.K + g * d.Kg) * d.PQ(), d.Kg, d.PQ());
      yg.noalias() = wg * cols;
    }
}

template <typename T>
void backward_data_im2col_gemm(const ConvProblem& pr, void* workspace) {
  ConvDims d = conv_dims(pr);
  T* dx = pr.input.data<T>();
  const T* w = pr.weight.data<T>();
  const T* dy = pr.output.data<T>();
  T* col = static_cast<T*>(workspace);
  if (!d.pointwise()) std::fill(dx, dx + d.N * d.C * d.HW(), T(0));
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t g = 0; g < d.G; ++g) {
      ConstMap<T> wg(w + g * d.Kg * d.CgRS(), d.Kg, d.CgRS());
      ConstMap<T> dyg(dy + (n * d.K + g * d.Kg) * d.PQ(), d.Kg, d.PQ());
      T* dxg = dx + (n * d.C + g * d.Cg) * d.HW();
      if (d.pointwise()) {
        MutMap<T>(dxg, d.Cg, d.HW()).noalias() = wg.transpose() * dyg;
      } else {
        MutMap<T>(col, d.CgRS(), d.PQ()).noalias() = wg.transpose() * dyg;
        col2im_add(col, d, dxg);
      }
    }
}

template <typename T>
void backward_filter_im2col_gemm(const ConvProblem& pr, void* workspace) {
  ConvDims d = conv_dims(pr);
  const T* x = pr.input.data<T>();
  T* dw = pr.weight.data<T>();
  const T* dy = pr.output.data<T>();
  T* col = static_cast<T*>(workspace);
  std::fill(dw, dw + d.K * d.CgRS(), T(0));
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t g = 0; g < d.G; ++g) {
      const T* xg = x + (n * d.C + g * d.Cg) * d.HW();
      const T* unfolded = xg;
      if (!d.pointwise()) {
        im2col(xg, d, col);
        unfolded = col;
      }
      ConstMap<T> cols(unfolded, d.CgRS(), d.PQ());
      ConstMap<T> dyg(dy + (n * d.K + g * d.Kg) * d.PQ(), d.Kg, d.PQ());
      MutMap<T> dwg(dw + g * d.Kg * d.CgRS(), d.Kg, d.CgRS());
      dwg.noalias() += dyg * cols.transpose();
    }
}

// ---- direct loop nests ------------------------------------------------------------------------

template <typename T>
void forward_direct(const ConvProblem& pr, void*) {
  ConvDims d = conv_dims(pr);
  const T* x = pr.input.data<T>();
  const T* w = pr.weight.data<T>();
  T* y = pr.output.data<T>();
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t k = 0; k < d.K; ++k) {
      int64_t g = k / d.Kg;
      T* yp = y + (n * d.K + k) * d.PQ();
      std::fill(yp, yp + d.PQ(), T(0));
      for (int64_t c = 0; c < d.Cg; ++c) {
        const T* xp = x + (n * d.C + g * d.Cg + c) * d.HW();
        for (int64_t r = 0; r < d.R; ++r)
          for (int64_t s = 0; s < d.S; ++s) {
            T wv = w[((k * d.Cg + c) * d.R + r) * d.S + s];
            int64_t p_lo, p_hi, q_lo, q_hi;
            valid_range(r * d.dh - d.ph, d.sh, d.H, d.P, p_lo, p_hi);
            valid_range(s * d.dw - d.pw, d.sw, d.W, d.Q, q_lo, q_hi);
            for (int64_t p = p_lo; p < p_hi; ++p) {
              const T* xrow = xp + (p * d.sh - d.ph + r * d.dh) * d.W;
              const int64_t col0 = s * d.dw - d.pw;
              T* yrow = yp + p * d.Q;
              for (int64_t q = q_lo; q < q_hi; ++q) yrow[q] += wv * xrow[q * d.sw + col0];
            }
          }
      }
    }
}

template <typename T>
void backward_data_direct(const ConvProblem& pr, void*) {
  ConvDims d = conv_dims(pr);
  T* dx = pr.input.data<T>();
  const T* w = pr.weight.data<T>();
  const T* dy = pr.output.data<T>();
  std::fill(dx, dx + d.N * d.C * d.HW(), T(0));
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t k = 0; k < d.K; ++k) {
      int64_t g = k / d.Kg;
      const T* dyp = dy + (n * d.K + k) * d.PQ();
      for (int64_t c = 0; c < d.Cg; ++c) {
        T* dxp = dx + (n * d.C + g * d.Cg + c) * d.HW();
        for (int64_t r = 0; r < d.R; ++r)
          for (int64_t s = 0; s < d.S; ++s) {
            T wv = w[((k * d.Cg + c) * d.R + r) * d.S + s];
            int64_t p_lo, p_hi, q_lo, q_hi;
            valid_range(r * d.dh - d.ph, d.sh, d.H, d.P, p_lo, p_hi);
            valid_range(s * d.dw - d.pw, d.sw, d.W, d.Q, q_lo, q_hi);
            for (int64_t p = p_lo; p < p_hi; ++p) {
              T* dxrow = dxp + (p * d.sh - d.ph + r * d.dh) * d.W;
              const int64_t col0 = s * d.dw - d.pw;
              const T* dyrow = dyp + p * d.Q;
              for (int64_t q = q_lo; q < q_hi; ++q) dxrow[q * d.sw + col0] += wv * dyrow[q];
            }
          }
      }
    }
}

template <typename T>
void backward_filter_direct(const ConvProblem& pr, void*) {
  ConvDims d = conv_dims(pr);
  const T* x = pr.input.data<T>();
  T* dw = pr.weight.data<T>();
  const T* dy = pr.output.data<T>();
  for (int64_t k = 0; k < d.K; ++k) {
    int64_t g = k / d.Kg;
    for (int64_t c = 0; c < d.Cg; ++c)
      for (int64_t r = 0; r < d.R; ++r)
        for (int64_t s = 0; s < d.S; ++s) {
          int64_t p_lo, p_hi, q_lo, q_hi;
          valid_range(r * d.dh - d.ph, d.sh, d.H, d.P, p_lo, p_hi);
          valid_range(s * d.dw - d.pw, d.sw, d.W, d.Q, q_lo, q_hi);
          T acc = 0;
          for (int64_t n = 0; n < d.N; ++n) {
            const T* xp = x + (n * d.C + g * d.Cg + c) * d.HW();
            const T* dyp = dy + (n * d.K + k) * d.PQ();
            for (int64_t p = p_lo; p < p_hi; ++p) {
              const T* xrow = xp + (p * d.sh - d.ph + r * d.dh) * d.W;
              const int64_t col0 = s * d.dw - d.pw;
              const T* dyrow = dyp + p * d.Q;
              for (int64_t q = q_lo; q < q_hi; ++q) acc += dyrow[q] * xrow[q * d.sw + col0];
            }
          }
          dw[((k * d.Cg + c) * d.R + r) * d.S + s] = acc;
        }
  }
}

// ---- registration -----------------------------------------------------------------------------

bool cpu_applies(const ConvProblem& pr) {
  DType t = pr.input.dtype();
  return (t == DType::f32 || t == DType::f64) && pr.input.dim() == 4 && pr.input.is_contiguous() &&
         pr.weight.is_contiguous() && pr.output.is_contiguous() && pr.weight.dtype() == t &&
         pr.output.dtype() == t;
}

size_t im2col_workspace_bytes(const ConvProblem& pr) {
  ConvDims d = conv_dims(pr);
  if (d.pointwise()) return 0;
  return size_t(d.CgRS()) * size_t(d.PQ()) * pr.input.element_size();
}

// Heuristic costs, in "multiply-adds of the direct loop": a GEMM does about 8 of them in the time
// the loop nest does one, but im2col first copies R*S times the input and each of the N*G GEMMs
// has a fixed overhead. So im2col_gemm wins for ordinary layers, direct for depthwise and tiny
// layers.
double direct_cost(const ConvProblem& pr) { return conv_dims(pr).macs(); }
double im2col_gemm_cost(const ConvProblem& pr) {
  ConvDims d = conv_dims(pr);
  double unfold = d.pointwise() ? 0.0 : double(d.N) * d.G * d.CgRS() * d.PQ();
  return d.macs() / 8 + unfold + double(d.N) * d.G * 2000;
}

using Kernel = void (*)(const ConvProblem&, void*);

dispatch::Algorithm<ConvProblem> make_algorithm(const char* name, Kernel f32, Kernel f64,
                                                bool uses_workspace) {
  dispatch::Algorithm<ConvProblem> a;
  a.name = name;
  a.deterministic = true;
  a.applies = cpu_applies;
  if (uses_workspace) a.workspace_bytes = im2col_workspace_bytes;
  a.heuristic_cost = uses_workspace ? im2col_gemm_cost : direct_cost;
  a.run = [f32, f64](const ConvProblem& pr, void* workspace) {
    (pr.input.dtype() == DType::f64 ? f64 : f32)(pr, workspace);
  };
  return a;
}

EMBER_REGISTER_ALGORITHM(ConvProblem, "conv2d", forward, CPU,
                         make_algorithm("im2col_gemm", forward_im2col_gemm<float>,
                                        forward_im2col_gemm<double>, true));
EMBER_REGISTER_ALGORITHM(ConvProblem, "conv2d", forward, CPU,
                         make_algorithm("direct", forward_direct<float>, forward_direct<double>,
                                        false));
EMBER_REGISTER_ALGORITHM(ConvProblem, "conv2d", backward_data, CPU,
                         make_algorithm("im2col_gemm", backward_data_im2col_gemm<float>,
                                        backward_data_im2col_gemm<double>, true));
EMBER_REGISTER_ALGORITHM(ConvProblem, "conv2d", backward_data, CPU,
                         make_algorithm("direct", backward_data_direct<float>,
                                        backward_data_direct<double>, false));
EMBER_REGISTER_ALGORITHM(ConvProblem, "conv2d", backward_filter, CPU,
                         make_algorithm("im2col_gemm", backward_filter_im2col_gemm<float>,
                                        backward_filter_im2col_gemm<double>, true));
EMBER_REGISTER_ALGORITHM(ConvProblem, "conv2d", backward_filter, CPU,
                         make_algorithm("direct", backward_filter_direct<float>,
                                        backward_filter_direct<double>, false));

}  // namespace
}  // namespace ember
