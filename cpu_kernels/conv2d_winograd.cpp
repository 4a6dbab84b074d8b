// CPU conv2d algorithm "winograd": Winograd's minimal filtering F(2x2, 3x3) for 3x3, stride-1,
// dilation-1, ungrouped NCHW convolutions in float32 and float64, forward and backward-data.
//
// Each 2x2 output tile is computed from a 4x4 input tile as Y = A^T [(G g G^T) . (B^T d B)] A:
// the 4x4 transformed filter U = G g G^T of every (output channel, input channel) pair is made
// once per call, each input tile is transformed (V = B^T d B), and the 16 transformed positions
// are 16 independent GEMMs M[xi][Kout, tiles] = U[xi][Kout, Cin] * V[xi][Cin, tiles] (float32 on
// our packed AVX2 / AVX-512 GEMM, float64 and float32 without AVX2 + FMA on Eigen's), after which
// every tile is transformed back. That is 16 multiply-adds per 4 outputs per channel pair, against
// 36 for im2col, for a few additions per element in the transforms. F(2x2, 3x3) rather than
// F(4x4, 3x3): its transforms have only 0, +-1 and +-1/2 in them, so the float32 result stays
// within a few ulps of the direct sum (F(4x4) multiplies rounding errors by up to ~100).
//
// Backward-data is the same computation on dy: for a stride-1 3x3 convolution with padding p,
// dx is the convolution of dy, padded by 2 - p, with the filter flipped in both spatial axes and
// its two channel axes swapped (so it needs p <= 2).
//
// Tiles of all images are numbered in order (image, tile row, tile column) and processed in blocks
// of `block` tiles, blocks split across threads; each output element is computed by one thread
// from its tile alone, in a fixed order: results do not depend on the number of threads. The
// workspace holds the transformed filter (dense, and packed for float32) and, per thread, the
// block's V, M and the GEMM's packed B.
#include <Eigen/Core>
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ember/cpu_kernels/conv2d_packed_gemm.h"
#include "ember/cpu_kernels/parallel.h"
#include "ember/dispatch/algorithm.h"
#include "ember/kernel_interface/conv.h"
#include "ember/tensor/parallel.h"

namespace ember {
namespace {

using dispatch::Direction;

// The convolution Winograd computes, in its own terms: src [N, Cin, Hs, Ws] convolved with a
// 3x3 filter (padding ph, pw) into dst [N, Kout, Hd, Wd], Hd = Hs + 2 ph - 2. Forward: src = x,
// dst = y. Backward-data: src = dy, dst = dx, padding 2 - p, the filter flipped and transposed.
struct WinogradShape {
  int64_t N, Cin, Hs, Ws, Kout, Hd, Wd, ph, pw;
  bool flip_transpose;  // filter value (kout, cin, r, s) = W[cin][kout][2 - r][2 - s]
  int64_t tiles_h() const { return (Hd + 1) / 2; }
  int64_t tiles_w() const { return (Wd + 1) / 2; }
  int64_t tiles_per_image() const { return tiles_h() * tiles_w(); }
  int64_t tiles() const { return N * tiles_per_image(); }
};

WinogradShape winograd_shape(const ConvProblem& pr) {
  const ConvDims d = conv_dims(pr);
  if (pr.direction == Direction::backward_data)
    return {d.N, d.K, d.P, d.Q, d.C, d.H, d.W, 2 - d.ph, 2 - d.pw, true};
  return {d.N, d.C, d.H, d.W, d.K, d.P, d.Q, d.ph, d.pw, false};
}

// Tiles per block: V and M of a block (16 * (Cin + Kout) values per tile) take about 4 MiB of
// float32, in multiples of the GEMM's register-tile width, at most its N block.
int64_t block_tiles(const WinogradShape& s) {
  const int64_t fit = (int64_t(1) << 20) / (16 * (s.Cin + s.Kout));
  const int64_t most = std::clamp<int64_t>(cpu::round_up(s.tiles(), cpu::kNR), cpu::kNR, cpu::kNC);
  return std::clamp<int64_t>(fit / cpu::kNR * cpu::kNR, cpu::kNR, most);
}

// The workspace, in elements of the problem's type: dense U [16][Kout][Cin], packed U (float32
// packed path only), then per worker V [16][Cin][block], M [16][Kout][block], four padded rows of
// a tile row and the packed B.
struct WinogradLayout {
  int workers = 1;
  int64_t block = 0, blocks = 0;
  int64_t u_dense = 0, u_packed = 0, v = 0, m = 0, rows = 0, b_packed = 0;
  int64_t per_worker() const { return v + m + rows + b_packed; }
  int64_t total() const { return u_dense + u_packed + workers * per_worker(); }
};

WinogradLayout winograd_layout(const ConvProblem& pr) {
  const WinogradShape s = winograd_shape(pr);
  const bool packed = cpu::uses_packed_gemm(pr);
  WinogradLayout l;
  l.block = block_tiles(s);
  l.blocks = (s.tiles() + l.block - 1) / l.block;
  l.workers = cpu::thread_count(conv_dims(pr), l.blocks);
  l.u_dense = cpu::aligned_floats(16 * s.Kout * s.Cin);
  l.u_packed = packed ? cpu::aligned_floats(16 * cpu::round_up(s.Kout, cpu::kMR) * s.Cin) : 0;
  l.v = cpu::aligned_floats(16 * s.Cin * l.block);
  l.m = cpu::aligned_floats(16 * s.Kout * l.block);
  l.rows = cpu::aligned_floats(4 * (2 * s.tiles_w() + 2));
  l.b_packed = packed ? cpu::kPackedBFloats : 0;
  return l;
}

// U[xi][kout][cin] = (G g G^T)[xi] for the filter g of (kout, cin), G = [1 0 0; .5 .5 .5;
// .5 -.5 .5; 0 0 1]. Output channels split across threads.
template <typename T>
void transform_filter(const WinogradShape& s, const T* w, T* u) {
  const int64_t plane = s.Kout * s.Cin;
  parallel_for(0, s.Kout, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, s.Cin)),
               [&](int64_t k_lo, int64_t k_hi) {
                 for (int64_t k = k_lo; k < k_hi; ++k)
                   for (int64_t c = 0; c < s.Cin; ++c) {
                     T g[3][3];
                     for (int r = 0; r < 3; ++r)
                       for (int q = 0; q < 3; ++q)
                         g[r][q] = s.flip_transpose ? w[((c * s.Kout + k) * 3 + 2 - r) * 3 + 2 - q]
                                                    : w[((k * s.Cin + c) * 3 + r) * 3 + q];
                     T gg[4][3];  // G g
                     for (int q = 0; q < 3; ++q) {
                       gg[0][q] = g[0][q];
                       gg[1][q] = T(0.5) * (g[0][q] + g[1][q] + g[2][q]);
                       gg[2][q] = T(0.5) * (g[0][q] - g[1][q] + g[2][q]);
                       gg[3][q] = g[2][q];
                     }
                     T* out = u + k * s.Cin + c;
                     for (int i = 0; i < 4; ++i) {  // (G g) G^T
                       out[(i * 4 + 0) * plane] = gg[i][0];
                       out[(i * 4 + 1) * plane] = T(0.5) * (gg[i][0] + gg[i][1] + gg[i][2]);
                       out[(i * 4 + 2) * plane] = T(0.5) * (gg[i][0] - gg[i][1] + gg[i][2]);
                       out[(i * 4 + 3) * plane] = gg[i][2];
                     }
                   }
               });
}

// Calls f(j, n, ti, tj0, len) for the runs of tiles t0 + j .. t0 + j + len - 1 of [t0, t0 + count)
// that lie in one tile row (image n, tile row ti, tile columns from tj0).
template <typename F>
void for_each_tile_run(const WinogradShape& s, int64_t t0, int64_t count, F&& f) {
  const int64_t per_image = s.tiles_per_image(), tw = s.tiles_w();
  for (int64_t j = 0; j < count;) {
    const int64_t t = t0 + j, n = t / per_image, ti = t % per_image / tw, tj = t % tw;
    const int64_t len = std::min(count - j, tw - tj);
    f(j, n, ti, tj, len);
    j += len;
  }
}

// V[xi][cin][j] = (B^T d B)[xi] for the input tile d of tile t0 + j, j < count, B^T =
// [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]; zero outside the input. The four input rows of a tile
// row are copied into zero-padded rows first, so the loop over tiles has no bounds checks and
// writes each of the 16 planes contiguously (the compiler vectorizes it over tiles).
template <typename T>
void transform_input(const WinogradShape& s, const T* src, int64_t t0, int64_t count, int64_t block,
                     T* v, T* rows) {
  const int64_t plane = s.Cin * block, width = 2 * s.tiles_w() + 2;
  for_each_tile_run(s, t0, count, [&](int64_t j0, int64_t n, int64_t ti, int64_t tj0, int64_t len) {
    const int64_t h0 = 2 * ti - s.ph;
    // rows[r][x] = src[h0 + r][x - pw], zero outside; x in [2 tj0, 2 (tj0 + len) + 2)
    const int64_t x_lo = 2 * tj0, x_hi = 2 * (tj0 + len) + 2;
    const int64_t w_lo = std::max<int64_t>(x_lo - s.pw, 0), w_hi = std::min(x_hi - s.pw, s.Ws);
    for (int64_t c = 0; c < s.Cin; ++c) {
      const T* img = src + (n * s.Cin + c) * s.Hs * s.Ws;
      for (int r = 0; r < 4; ++r) {
        T* row = rows + r * width;
        const int64_t h = h0 + r;
        std::fill(row + x_lo, row + x_hi, T(0));
        if (h >= 0 && h < s.Hs && w_lo < w_hi)
          std::memcpy(row + w_lo + s.pw, img + h * s.Ws + w_lo, size_t(w_hi - w_lo) * sizeof(T));
      }
      const T* r0 = rows + 2 * tj0;
      const T* r1 = r0 + width;
      const T* r2 = r1 + width;
      const T* r3 = r2 + width;
      T* out = v + c * block + j0;
      // The rows and the 16 planes never overlap: vectorize over tiles without alias checks.
#pragma GCC ivdep
      for (int64_t j = 0; j < len; ++j) {
        const int64_t x = 2 * j;
        T bd[4][4];  // B^T d
        for (int q = 0; q < 4; ++q) {
          bd[0][q] = r0[x + q] - r2[x + q];
          bd[1][q] = r1[x + q] + r2[x + q];
          bd[2][q] = r2[x + q] - r1[x + q];
          bd[3][q] = r1[x + q] - r3[x + q];
        }
        for (int i = 0; i < 4; ++i) {  // (B^T d) B
          out[(i * 4 + 0) * plane + j] = bd[i][0] - bd[i][2];
          out[(i * 4 + 1) * plane + j] = bd[i][1] + bd[i][2];
          out[(i * 4 + 2) * plane + j] = bd[i][2] - bd[i][1];
          out[(i * 4 + 3) * plane + j] = bd[i][1] - bd[i][3];
        }
      }
    }
  });
}

// dst tile t0 + j = A^T M A (the part inside dst), A^T = [1 1 1 0; 0 1 -1 -1]. A tile row's two
// output rows are assembled in `rows` and copied out, so the loop over tiles reads each of the 16
// planes contiguously.
template <typename T>
void transform_output(const WinogradShape& s, const T* m, int64_t t0, int64_t count, int64_t block,
                      T* dst, T* rows) {
  const int64_t plane = s.Kout * block, width = 2 * s.tiles_w() + 2;
  for_each_tile_run(s, t0, count, [&](int64_t j0, int64_t n, int64_t ti, int64_t tj0, int64_t len) {
    const int64_t h0 = 2 * ti, out_rows = std::min<int64_t>(2, s.Hd - h0);
    const int64_t x_lo = 2 * tj0, x_hi = std::min(2 * (tj0 + len), s.Wd);
    for (int64_t k = 0; k < s.Kout; ++k) {
      const T* in = m + k * block + j0;
      T* y0 = rows;
      T* y1 = rows + width;
#pragma GCC ivdep
      for (int64_t j = 0; j < len; ++j) {
        T e[16];
        for (int i = 0; i < 16; ++i) e[i] = in[i * plane + j];
        T a[2][4];  // A^T e
        for (int q = 0; q < 4; ++q) {
          a[0][q] = e[q] + e[4 + q] + e[8 + q];
          a[1][q] = e[4 + q] - e[8 + q] - e[12 + q];
        }
        y0[2 * j] = a[0][0] + a[0][1] + a[0][2];
        y0[2 * j + 1] = a[0][1] - a[0][2] - a[0][3];
        y1[2 * j] = a[1][0] + a[1][1] + a[1][2];
        y1[2 * j + 1] = a[1][1] - a[1][2] - a[1][3];
      }
      T* out = dst + ((n * s.Kout + k) * s.Hd + h0) * s.Wd;
      for (int64_t r = 0; r < out_rows; ++r)
        std::memcpy(out + r * s.Wd + x_lo, rows + r * width, size_t(x_hi - x_lo) * sizeof(T));
    }
  });
}

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Runs the convolution of `s` from src with the filter w into dst.
template <typename T>
void winograd(const ConvProblem& pr, const T* src, const T* w, T* dst, void* workspace) {
  const WinogradShape s = winograd_shape(pr);
  const WinogradLayout l = winograd_layout(pr);
  if (s.tiles() == 0 || s.Kout == 0) return;
  T* base = static_cast<T*>(workspace);
  T* u = base;
  const bool packed = l.u_packed > 0;
  float* u_packed = reinterpret_cast<float*>(base + l.u_dense);
  if (s.Cin == 0) {
    std::fill(dst, dst + s.N * s.Kout * s.Hd * s.Wd, T(0));
    return;
  }
  transform_filter(s, w, u);
  const int64_t a_floats = cpu::round_up(s.Kout, cpu::kMR) * s.Cin;
  if constexpr (std::is_same_v<T, float>)
    if (packed)
      parallel_for(0, 16, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t xi = lo; xi < hi; ++xi)
          cpu::pack_a(u + xi * s.Kout * s.Cin, s.Cin, 1, s.Kout, s.Cin, u_packed + xi * a_floats);
      });
  cpu::run_workers(l.workers, [&](int worker) {
    T* v = base + l.u_dense + l.u_packed + worker * l.per_worker();
    T* m = v + l.v;
    T* rows = m + l.m;
    float* b_packed = reinterpret_cast<float*>(rows + l.rows);
    int64_t b_lo, b_hi;
    cpu::share_of(l.blocks, l.workers, worker, b_lo, b_hi);
    for (int64_t b = b_lo; b < b_hi; ++b) {
      const int64_t t0 = b * l.block, count = std::min(l.block, s.tiles() - t0);
      transform_input(s, src, t0, count, l.block, v, rows);
      for (int64_t xi = 0; xi < 16; ++xi) {
        T* mx = m + xi * s.Kout * l.block;
        const T* vx = v + xi * s.Cin * l.block;
        if constexpr (std::is_same_v<T, float>) {
          if (packed) {
            cpu::gemm_packed(u_packed + xi * a_floats, s.Kout, count, s.Cin, vx, l.block, 1, mx,
                             l.block, false, b_packed);
            continue;
          }
        }
        using Stride = Eigen::OuterStride<>;
        Eigen::Map<const RowMatrix<T>> ux(u + xi * s.Kout * s.Cin, s.Kout, s.Cin);
        Eigen::Map<const RowMatrix<T>, 0, Stride> vmap(vx, s.Cin, count, Stride(l.block));
        Eigen::Map<RowMatrix<T>, 0, Stride> mmap(mx, s.Kout, count, Stride(l.block));
        mmap.noalias() = ux * vmap;
      }
      transform_output(s, m, t0, count, l.block, dst, rows);
    }
  });
}

template <typename T>
void run_winograd(const ConvProblem& pr, void* workspace) {
  if (pr.direction == Direction::backward_data)
    winograd<T>(pr, pr.output.data<T>(), pr.weight.data<T>(), pr.input.data<T>(), workspace);
  else
    winograd<T>(pr, pr.input.data<T>(), pr.weight.data<T>(), pr.output.data<T>(), workspace);
}

bool winograd_applies(const ConvProblem& pr) {
  const DType t = pr.input.dtype();
  if (!((t == DType::f32 || t == DType::f64) && pr.input.dim() == 4 && pr.input.is_contiguous() &&
        pr.weight.is_contiguous() && pr.output.is_contiguous() && pr.weight.dtype() == t &&
        pr.output.dtype() == t))
    return false;
  const ConvDims d = conv_dims(pr);
  return d.R == 3 && d.S == 3 && d.sh == 1 && d.sw == 1 && d.dh == 1 && d.dw == 1 && d.G == 1 &&
         d.ph <= 2 && d.pw <= 2 && d.P > 0 && d.Q > 0;
}

size_t winograd_workspace_bytes(const ConvProblem& pr) {
  return size_t(winograd_layout(pr).total()) * pr.input.element_size();
}

// In the units of the other CPU conv algorithms' costs (multiply-adds of the direct loop nest,
// cpu_kernels/conv2d.cpp): the 16 GEMMs at 1.3 times the packed GEMM's cost per thread (short
// reductions, 16 GEMMs per block; Eigen's rate for float64), the input and output transforms at
// 2.4 units per element and the filter transform at 6 units per transformed value. Calibrated
// against measured times on ResNet-18's (batch 64, 28x28 input) and ResNet-50's (batch 8) 3x3
// layers: winograd wins from 64 channels on larger maps and at 128..512 channels on ResNet-18's
// maps, loses at 512 channels on small batches (the filter transform) and on the 1-channel stem
// (the transforms); at 64 channels on 28x28 the two are within about 15%.
double winograd_cost(const ConvProblem& pr) {
  const WinogradShape s = winograd_shape(pr);
  const WinogradLayout l = winograd_layout(pr);
  const double tiles = double(s.tiles());
  const double gemm_macs = 16.0 * tiles * double(s.Kout) * double(s.Cin);
  const double gemm = cpu::uses_packed_gemm(pr) ? gemm_macs / (32.0 * l.workers) : gemm_macs / 8;
  const double transforms = 16.0 * tiles * double(s.Cin + s.Kout) * 2.4 / l.workers;
  const double filter = 16.0 * double(s.Kout) * double(s.Cin) * 6;
  return 1.3 * gemm + transforms + filter + double(l.blocks) * 16 * 2000 / l.workers;
}

dispatch::Algorithm<ConvProblem> make_winograd() {
  dispatch::Algorithm<ConvProblem> a;
  a.name = "winograd";
  a.deterministic = true;
  a.applies = winograd_applies;
  a.workspace_bytes = winograd_workspace_bytes;
  a.heuristic_cost = winograd_cost;
  a.run = [](const ConvProblem& pr, void* workspace) {
    pr.input.dtype() == DType::f64 ? run_winograd<double>(pr, workspace)
                                   : run_winograd<float>(pr, workspace);
  };
  return a;
}

EMBER_REGISTER_ALGORITHM(ConvProblem, "conv2d", forward, CPU, make_winograd());
EMBER_REGISTER_ALGORITHM(ConvProblem, "conv2d", backward_data, CPU, make_winograd());

}  // namespace
}  // namespace ember
