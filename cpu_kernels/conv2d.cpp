// CPU conv2d algorithms im2col_gemm and direct (NCHW, float32 and float64, any stride / padding /
// dilation / groups), for the forward, backward-data and backward-filter directions, registered in
// the algorithm cache (winograd, for 3x3 stride-1 layers, is in cpu_kernels/conv2d_winograd.cpp):
//   im2col_gemm  unfold the receptive fields into a [C/g * R * S, P * Q] workspace, then GEMMs
//                (1x1 stride-1 unpadded convolutions may skip the unfold). float32 on a CPU with
//                AVX2 and FMA runs our own packed GEMM (cpu_kernels/conv2d_packed_gemm.h; the
//                weights packed once per call, small feature maps of several images side by
//                side in one GEMM) on all cores: images are split across threads (forward,
//                backward-data), or the weight gradient's columns are (backward-filter).
//                float64, and float32 elsewhere, use cpu_kernels/gemm.h per image and group.
//   direct       a loop nest over the output (or the gradient), no workspace
// Both are deterministic: every output element is summed in a fixed order that does not depend on
// the number of threads. Every direction OVERWRITES the tensor it writes (see ConvProblem in
// kernel_interface/conv.h). float16/bfloat16 never reach here: the op computes them in fp32.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ember/cpu_kernels/conv2d_packed_gemm.h"
#include "ember/cpu_kernels/gemm.h"
#include "ember/cpu_kernels/parallel.h"
#include "ember/dispatch/algorithm.h"
#include "ember/kernel_interface/conv.h"

namespace ember {
namespace {

using cpu::aligned_floats;
using cpu::gemm_packed;
using cpu::kKC;
using cpu::kMR;
using cpu::kNC;
using cpu::kNR;
using cpu::kPackedBFloats;
using cpu::pack_a;
using cpu::round_up;
using cpu::thread_count;
using cpu::uses_packed_gemm;
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

// Unfolds the receptive fields of one image and group, zero outside the input:
//   col[(c * R + r) * S + s][p * Q + q] = x[c][p * sh - ph + r * dh][q * sw - pw + s * dw]
// x: [Cg, H, W]; col: [Cg * R * S, P * Q] with rows `ld` elements apart (ld >= P * Q, so several
// images can sit side by side). im2col_rows writes only rows [row_lo, row_hi), from `col` on.
template <typename T>
void im2col_rows(const T* x, const ConvDims& d, int64_t row_lo, int64_t row_hi, T* col,
                 int64_t ld) {
  for (int64_t row_index = row_lo; row_index < row_hi; ++row_index) {
    const int64_t c = row_index / d.RS(), r = row_index / d.S % d.R, s = row_index % d.S;
    T* row = col + (row_index - row_lo) * ld;
    std::fill(row, row + d.PQ(), T(0));
    int64_t p_lo, p_hi, q_lo, q_hi;
    valid_range(r * d.dh - d.ph, d.sh, d.H, d.P, p_lo, p_hi);
    valid_range(s * d.dw - d.pw, d.sw, d.W, d.Q, q_lo, q_hi);
    const int64_t col0 = s * d.dw - d.pw;
    for (int64_t p = p_lo; p < p_hi; ++p) {
      const T* xrow = x + (c * d.H + p * d.sh - d.ph + r * d.dh) * d.W;
      T* out = row + p * d.Q;
      if (d.sw == 1)
        std::memcpy(out + q_lo, xrow + q_lo + col0, size_t(q_hi - q_lo) * sizeof(T));
      else
        for (int64_t q = q_lo; q < q_hi; ++q) out[q] = xrow[q * d.sw + col0];
    }
  }
}
template <typename T>
void im2col(const T* x, const ConvDims& d, T* col, int64_t ld) {
  im2col_rows(x, d, 0, d.CgRS(), col, ld);
}

// The adjoint of im2col: dx[c][h][w] += col[...] for every receptive field covering (h, w).
template <typename T>
void col2im_add(const T* col, const ConvDims& d, T* dx, int64_t ld) {
  for (int64_t c = 0; c < d.Cg; ++c)
    for (int64_t r = 0; r < d.R; ++r)
      for (int64_t s = 0; s < d.S; ++s) {
        const T* row = col + ((c * d.R + r) * d.S + s) * ld;
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

// ---- im2col + the CPU GEMM entry (float64; float32 without AVX2 + FMA) -------------------------

template <typename T>
void forward_im2col_gemm_unpacked(const ConvProblem& pr, void* workspace) {
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
        im2col(xg, d, col, d.PQ());
        unfolded = col;
      }
      // y_g [Kg, P*Q] = w_g [Kg, Cg*R*S] @ cols [Cg*R*S, P*Q]
      cpu::gemm<T>(false, false, d.Kg, d.PQ(), d.CgRS(), T(1), w + g * d.Kg * d.CgRS(), d.CgRS(),
                   unfolded, d.PQ(), T(0), y + (n * d.K + g * d.Kg) * d.PQ(), d.PQ());
    }
}

template <typename T>
void backward_data_im2col_gemm_unpacked(const ConvProblem& pr, void* workspace) {
  ConvDims d = conv_dims(pr);
  T* dx = pr.input.data<T>();
  const T* w = pr.weight.data<T>();
  const T* dy = pr.output.data<T>();
  T* col = static_cast<T*>(workspace);
  if (!d.pointwise()) std::fill(dx, dx + d.N * d.C * d.HW(), T(0));
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t g = 0; g < d.G; ++g) {
      T* dxg = dx + (n * d.C + g * d.Cg) * d.HW();
      // cols [Cg*R*S, P*Q] = w_g^T @ dy_g [Kg, P*Q]; a pointwise convolution's cols are dx_g.
      T* cols = d.pointwise() ? dxg : col;
      cpu::gemm<T>(true, false, d.CgRS(), d.PQ(), d.Kg, T(1), w + g * d.Kg * d.CgRS(), d.CgRS(),
                   dy + (n * d.K + g * d.Kg) * d.PQ(), d.PQ(), T(0), cols, d.PQ());
      if (!d.pointwise()) col2im_add(col, d, dxg, d.PQ());
    }
}

template <typename T>
void backward_filter_im2col_gemm_unpacked(const ConvProblem& pr, void* workspace) {
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
        im2col(xg, d, col, d.PQ());
        unfolded = col;
      }
      // dw_g [Kg, Cg*R*S] += dy_g [Kg, P*Q] @ cols^T
      cpu::gemm<T>(false, true, d.Kg, d.CgRS(), d.PQ(), T(1), dy + (n * d.K + g * d.Kg) * d.PQ(),
                   d.PQ(), unfolded, d.PQ(), T(1), dw + g * d.Kg * d.CgRS(), d.CgRS());
    }
}

// ---- im2col + packed GEMM for float32 on AVX2 + FMA, multithreaded ----------------------------

// How the packed path splits a problem, and its workspace in floats: the packed weights of every
// group (shared), then one region per thread holding, in order, `a_dense`, `a_packed`, `col`,
// `c_buffer` and the packed B block (sizes 0 where a direction does not use them).
//   forward          C[Kg, b*PQ] = W[g] * col[CgRS, b*PQ] for b images side by side
//   backward_data    col[CgRS, b*PQ] = W[g]^T * dy[Kg, b*PQ], then col2im per image
//   backward_filter  dW[g][:, cols] += dy[Kg, b*PQ] * col[cols, b*PQ]^T
// Putting b images side by side keeps the GEMMs wide on small feature maps (a 4x4 map alone is one
// register tile wide, and the weights would be streamed once per image).
struct PackedLayout {
  int workers = 1;
  int64_t batch = 1;          // images per GEMM
  int64_t weights = 0;        // packed weights of all groups (forward, backward-data)
  int64_t a_dense = 0;        // dy of `batch` images side by side (backward-data, backward-filter)
  int64_t a_packed = 0;       // packed dy (backward-filter)
  int64_t col = 0;            // im2col of `batch` images (a column range in backward-filter)
  int64_t c_buffer = 0;       // forward output of `batch` images, before it is scattered
  int64_t filter_panels = 0;  // backward-filter: NR-column panels of dW, split across threads
  int64_t per_worker() const { return a_dense + a_packed + col + c_buffer + kPackedBFloats; }
  int64_t total() const { return weights + workers * per_worker(); }
};

PackedLayout packed_layout(const ConvProblem& pr) {
  ConvDims d = conv_dims(pr);
  PackedLayout l;
  // Enough images for a full N block (forward, backward-data) or two K blocks (backward-filter).
  auto images_for = [&](int64_t columns) {
    return std::clamp<int64_t>((columns + d.PQ() - 1) / d.PQ(), 1, d.N);
  };
  switch (pr.direction) {
    case Direction::backward_data:
      l.workers = thread_count(d, d.N);
      l.batch = images_for(kNC);
      l.weights = aligned_floats(d.G * round_up(d.CgRS(), kMR) * d.Kg);
      l.a_dense = l.batch > 1 ? aligned_floats(d.Kg * l.batch * d.PQ()) : 0;
      l.col = d.pointwise() && l.batch == 1 ? 0 : aligned_floats(d.CgRS() * l.batch * d.PQ());
      break;
    case Direction::backward_filter: {
      l.filter_panels = (d.CgRS() + kNR - 1) / kNR;
      l.workers = thread_count(d, l.filter_panels);
      l.batch = images_for(2 * kKC);
      const int64_t max_cols = (l.filter_panels + l.workers - 1) / l.workers * kNR;
      l.a_dense = l.batch > 1 ? aligned_floats(d.Kg * l.batch * d.PQ()) : 0;
      l.a_packed = aligned_floats(round_up(d.Kg, kMR) * l.batch * d.PQ());
      l.col = aligned_floats(max_cols * l.batch * d.PQ());
      break;
    }
    default:
      l.workers = thread_count(d, d.N);
      l.batch = images_for(kNC);
      l.weights = aligned_floats(d.G * round_up(d.Kg, kMR) * d.CgRS());
      l.col = d.pointwise() && l.batch == 1 ? 0 : aligned_floats(d.CgRS() * l.batch * d.PQ());
      l.c_buffer = l.batch > 1 ? aligned_floats(d.Kg * l.batch * d.PQ()) : 0;
      break;
  }
  return l;
}

// One thread's buffers in the workspace.
struct WorkerBuffers {
  float *a_dense, *a_packed, *col, *c_buffer, *b_packed;
  WorkerBuffers(const PackedLayout& l, void* workspace, int worker) {
    a_dense = static_cast<float*>(workspace) + l.weights + worker * l.per_worker();
    a_packed = a_dense + l.a_dense;
    col = a_packed + l.a_packed;
    c_buffer = col + l.col;
    b_packed = c_buffer + l.c_buffer;
  }
};

// Copies the [Kg, PQ] blocks of group g of images [n0, n0 + count) of t ([N, K, P, Q]) side by
// side into dense [Kg, count * PQ] (gather), or back (scatter).
void gather_images(const ConvDims& d, const float* t, int64_t n0, int64_t count, int64_t g,
                   float* dense) {
  for (int64_t j = 0; j < count; ++j)
    for (int64_t i = 0; i < d.Kg; ++i)
      std::memcpy(dense + i * count * d.PQ() + j * d.PQ(),
                  t + ((n0 + j) * d.K + g * d.Kg + i) * d.PQ(), size_t(d.PQ()) * sizeof(float));
}
void scatter_images(const ConvDims& d, const float* dense, int64_t n0, int64_t count, int64_t g,
                    float* t) {
  for (int64_t j = 0; j < count; ++j)
    for (int64_t i = 0; i < d.Kg; ++i)
      std::memcpy(t + ((n0 + j) * d.K + g * d.Kg + i) * d.PQ(),
                  dense + i * count * d.PQ() + j * d.PQ(), size_t(d.PQ()) * sizeof(float));
}

// Splits the images across the layout's workers and walks each worker's share in runs of at most
// `batch` images: f(buffers, n0, count) for images [n0, n0 + count). Forward and backward-data
// share it.
template <typename F>
void for_each_image_run(const ConvDims& d, const PackedLayout& l, void* workspace, F&& f) {
  cpu::run_workers(l.workers, [&](int t) {
    WorkerBuffers buf(l, workspace, t);
    int64_t n_lo, n_hi;
    cpu::share_of(d.N, l.workers, t, n_lo, n_hi);
    for (int64_t n0 = n_lo; n0 < n_hi; n0 += l.batch) f(buf, n0, std::min(l.batch, n_hi - n0));
  });
}

// y = conv(x, W): images split across threads, `batch` images per GEMM.
void forward_packed(const ConvProblem& pr, void* workspace) {
  ConvDims d = conv_dims(pr);
  const PackedLayout l = packed_layout(pr);
  const float* x = pr.input.data<float>();
  const float* w = pr.weight.data<float>();
  float* y = pr.output.data<float>();
  float* weights = static_cast<float*>(workspace);
  const int64_t a_floats = round_up(d.Kg, kMR) * d.CgRS();
  for (int64_t g = 0; g < d.G; ++g)
    pack_a(w + g * d.Kg * d.CgRS(), d.CgRS(), 1, d.Kg, d.CgRS(), weights + g * a_floats);
  for_each_image_run(d, l, workspace, [&](WorkerBuffers& buf, int64_t n0, int64_t count) {
    const int64_t cols = count * d.PQ();
    for (int64_t g = 0; g < d.G; ++g) {
      const float* b = x + (n0 * d.C + g * d.Cg) * d.HW();  // pointwise, one image: x itself
      if (!d.pointwise() || count > 1) {
        for (int64_t j = 0; j < count; ++j)
          im2col(x + ((n0 + j) * d.C + g * d.Cg) * d.HW(), d, buf.col + j * d.PQ(), cols);
        b = buf.col;
      }
      float* out = count > 1 ? buf.c_buffer : y + (n0 * d.K + g * d.Kg) * d.PQ();
      gemm_packed(weights + g * a_floats, d.Kg, cols, d.CgRS(), b, cols, 1, out, cols, false,
                  buf.b_packed);
      if (count > 1) scatter_images(d, buf.c_buffer, n0, count, g, y);
    }
  });
}

// dx = conv_backward_data(dy, W): images split across threads, `batch` images per GEMM.
void backward_data_packed(const ConvProblem& pr, void* workspace) {
  ConvDims d = conv_dims(pr);
  const PackedLayout l = packed_layout(pr);
  float* dx = pr.input.data<float>();
  const float* w = pr.weight.data<float>();
  const float* dy = pr.output.data<float>();
  float* weights = static_cast<float*>(workspace);
  const int64_t a_floats = round_up(d.CgRS(), kMR) * d.Kg;
  for (int64_t g = 0; g < d.G; ++g)  // A = W[g]^T: [Cg*R*S, Kg]
    pack_a(w + g * d.Kg * d.CgRS(), 1, d.CgRS(), d.CgRS(), d.Kg, weights + g * a_floats);
  for_each_image_run(d, l, workspace, [&](WorkerBuffers& buf, int64_t n0, int64_t count) {
    const int64_t cols = count * d.PQ();
    // col2im adds: clear the images first, unless one pointwise GEMM writes dx directly
    const bool direct = d.pointwise() && count == 1;
    if (!direct) std::fill(dx + n0 * d.C * d.HW(), dx + (n0 + count) * d.C * d.HW(), 0.0f);
    for (int64_t g = 0; g < d.G; ++g) {
      const float* b = dy + (n0 * d.K + g * d.Kg) * d.PQ();
      if (count > 1) {
        gather_images(d, dy, n0, count, g, buf.a_dense);
        b = buf.a_dense;
      }
      float* out = direct ? dx + (n0 * d.C + g * d.Cg) * d.HW() : buf.col;
      gemm_packed(weights + g * a_floats, d.CgRS(), cols, d.Kg, b, cols, 1, out, cols, false,
                  buf.b_packed);
      if (!direct)
        for (int64_t j = 0; j < count; ++j)
          col2im_add(buf.col + j * d.PQ(), d, dx + ((n0 + j) * d.C + g * d.Cg) * d.HW(), cols);
    }
  });
}

// dW = conv_backward_filter(x, dy): the columns of dW (input channel, r, s) split across threads,
// `batch` images per GEMM, so each element is summed over (image, pixel) in order whatever the
// number of threads.
void backward_filter_packed(const ConvProblem& pr, void* workspace) {
  ConvDims d = conv_dims(pr);
  const PackedLayout l = packed_layout(pr);
  const float* x = pr.input.data<float>();
  float* dw = pr.weight.data<float>();
  const float* dy = pr.output.data<float>();
  cpu::run_workers(l.workers, [&](int t) {
    WorkerBuffers buf(l, workspace, t);
    int64_t p_lo, p_hi;
    cpu::share_of(l.filter_panels, l.workers, t, p_lo, p_hi);
    const int64_t lo = p_lo * kNR, hi = std::min(p_hi * kNR, d.CgRS());
    if (lo >= hi) return;
    for (int64_t n0 = 0; n0 < d.N; n0 += l.batch) {
      const int64_t count = std::min(l.batch, d.N - n0), cols = count * d.PQ();
      for (int64_t g = 0; g < d.G; ++g) {
        const float* a = dy + (n0 * d.K + g * d.Kg) * d.PQ();
        if (count > 1) {
          gather_images(d, dy, n0, count, g, buf.a_dense);
          a = buf.a_dense;
        }
        pack_a(a, cols, 1, d.Kg, cols, buf.a_packed);
        for (int64_t j = 0; j < count; ++j)
          im2col_rows(x + ((n0 + j) * d.C + g * d.Cg) * d.HW(), d, lo, hi, buf.col + j * d.PQ(),
                      cols);
        // B = col^T: [count * P * Q, hi - lo]
        gemm_packed(buf.a_packed, d.Kg, hi - lo, cols, buf.col, 1, cols,
                    dw + g * d.Kg * d.CgRS() + lo, d.CgRS(), n0 > 0, buf.b_packed);
      }
    }
  });
}

// float32 takes the packed path where the CPU has AVX2 and FMA; float64 always takes the CPU GEMM
// entry (cpu_kernels/gemm.h: OpenBLAS, or Eigen).
void forward_im2col_gemm_f32(const ConvProblem& pr, void* workspace) {
  uses_packed_gemm(pr) ? forward_packed(pr, workspace)
                       : forward_im2col_gemm_unpacked<float>(pr, workspace);
}
void backward_data_im2col_gemm_f32(const ConvProblem& pr, void* workspace) {
  uses_packed_gemm(pr) ? backward_data_packed(pr, workspace)
                       : backward_data_im2col_gemm_unpacked<float>(pr, workspace);
}
void backward_filter_im2col_gemm_f32(const ConvProblem& pr, void* workspace) {
  uses_packed_gemm(pr) ? backward_filter_packed(pr, workspace)
                       : backward_filter_im2col_gemm_unpacked<float>(pr, workspace);
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
  if (uses_packed_gemm(pr)) return size_t(packed_layout(pr).total()) * sizeof(float);
  ConvDims d = conv_dims(pr);
  if (d.pointwise()) return 0;
  return size_t(d.CgRS()) * size_t(d.PQ()) * pr.input.element_size();
}

// Heuristic costs, in "multiply-adds of the direct loop": the GEMM entry (cpu_kernels/gemm.h) does
// about 8 of them in the time the loop nest does one, the packed float32 GEMM about 32 per thread,
// but im2col first copies R*S times the input and each of the N*G GEMMs has a fixed overhead. So
// im2col_gemm wins for ordinary layers, direct for depthwise and tiny layers. The packed GEMM's
// rate falls as the reduction C/g * R * S grows past what its packed weights keep in cache:
// calibrated on ResNet-18's and ResNet-50's 3x3 layers (C*R*S 576 to 4608), it loses about a fifth
// per doubling.
double direct_cost(const ConvProblem& pr) { return conv_dims(pr).macs(); }
double im2col_gemm_cost(const ConvProblem& pr) {
  ConvDims d = conv_dims(pr);
  double unfold = d.pointwise() ? 0.0 : double(d.N) * d.G * d.CgRS() * d.PQ();
  double gemm = d.macs() / 8;
  if (uses_packed_gemm(pr)) {
    const double doublings = std::log2(std::max(1.0, double(d.CgRS()) / 576));
    gemm = d.macs() / (32.0 * packed_layout(pr).workers) * (1 + doublings / 4.5);
  }
  return gemm + unfold + double(d.N) * d.G * 2000;
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
                         make_algorithm("im2col_gemm", forward_im2col_gemm_f32,
                                        forward_im2col_gemm_unpacked<double>, true));
EMBER_REGISTER_ALGORITHM(ConvProblem, "conv2d", forward, CPU,
                         make_algorithm("direct", forward_direct<float>, forward_direct<double>,
                                        false));
EMBER_REGISTER_ALGORITHM(ConvProblem, "conv2d", backward_data, CPU,
                         make_algorithm("im2col_gemm", backward_data_im2col_gemm_f32,
                                        backward_data_im2col_gemm_unpacked<double>, true));
EMBER_REGISTER_ALGORITHM(ConvProblem, "conv2d", backward_data, CPU,
                         make_algorithm("direct", backward_data_direct<float>,
                                        backward_data_direct<double>, false));
EMBER_REGISTER_ALGORITHM(ConvProblem, "conv2d", backward_filter, CPU,
                         make_algorithm("im2col_gemm", backward_filter_im2col_gemm_f32,
                                        backward_filter_im2col_gemm_unpacked<double>, true));
EMBER_REGISTER_ALGORITHM(ConvProblem, "conv2d", backward_filter, CPU,
                         make_algorithm("direct", backward_filter_direct<float>,
                                        backward_filter_direct<double>, false));

}  // namespace
}  // namespace ember
