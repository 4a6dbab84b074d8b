// im2col_gemm: the general GEMM-based conv2d on CUDA (any stride, padding, dilation, groups,
// layout; f32 with TF32 when allowed, f16/bf16 with fp32 accumulation, f64). The receptive fields
// of a chunk of images are unfolded into a workspace (`col`), then cuBLAS multiplies:
//   NHWC form (pixels-major col [G][Nc*P*Q][Jc], J = Cg*R*S used columns of Jc):
//     forward          Y[:, g]  = col_g  @ W_g^T        (one strided-batched GEMM over groups)
//     backward_data    dcol_g   = dY[:, g] @ W_g        then col2im gathers into dx
//     backward_filter  dW_g    += dY[:, g]^T @ col_g   (chunks accumulate with beta = 1)
//   NCHW form (col [Nc][G][J][P*Q]), forward and backward_data only:
//     forward          Y_n,g    = W_g @ col_n,g         (batched over images, one call per group)
//     backward_data    dcol_n,g = W_g^T @ dY_n,g        then col2im
// backward_filter always uses the NHWC form (dY staged to channels_last when it is not), so the
// whole reduction over pixels runs inside GEMMs with fp32 accumulation; with one group and a
// 16-bit or f32 dtype and a reduction of over 256K pixels per output tile the pixels are split
// into slices multiplied as one batched GEMM into fp32 partials (split-K: a narrow filter gradient
// such as the 7x7 RGB stem's [64, 147] then fills the GPU), summed in a fixed order afterwards.
// Rows of col and of the weight are padded to Jc = J rounded up to 8 elements so every row
// starts 16-byte aligned for cuBLAS (the stem's J = 147 becomes 152); the GEMMs use k = J, so the
// padding is never read. The unfold order J is (r, s, c) when the input is channels_last (then
// each tap is a contiguous channel vector, unfolded with 16-byte copies; with channels per group
// not a multiple of the vector width, as in the stem's C = 3, a thread instead gathers one 16-byte
// vector of a col row element by element, stepping the taps of the row without divisions) or the
// weight is KRSC, else (c, r, s); a weight not dense in that order (or with unaligned rows) is
// copied into the workspace in it. col2im gathers (a thread per input element, per 16-byte
// channel vector in NHWC, or per pixel for NHWC with one group and few channels; each sums the
// taps that reach it, found by the one tap walk all three share): no atomics, deterministic. The
// tensor a direction writes is OVERWRITTEN.
#include <algorithm>

#include "ember/cuda_kernels/conv/conv_common.cuh"

namespace ember::cuda::conv {
namespace {

// Workspace for `col` is bounded: images are processed in chunks.
constexpr size_t kColBudgetBytes = size_t(256) << 20;
// Kernels index within a chunk in 32 bits (fast divmod): a chunk's col and dx hold fewer elements.
constexpr int64_t kMaxChunkElements = (int64_t(1) << 31) - 1;
constexpr int64_t kRowAlignElements = 8;
// Split-K slices of the filter gradient hold at least this many pixels each.
constexpr int64_t kMinSplitRows = 1024;
// The filter gradient splits only when each of its 128x128 output tiles reduces over at least this
// many pixels (the 7x7 RGB stem's [64, 147] at batch 64: 401K): below it one unsplit cuBLAS GEMM
// is faster than the sliced ones (the partials' traffic and the extra reduction outweigh the
// added parallelism), on small-image layers and on the 7x7 stem alike.
constexpr int64_t kMinSplitPixelsPerTile = int64_t(1) << 18;
// The unfold kernels stream memory: more resident blocks than the grid-stride default.
constexpr int kStreamBlocksPerSm = 8;

int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// Flat-index decomposition with common.cuh's FastDivmod (all dividends below 2^31). Empty dims
// (no work) get divisor 1 so the magic numbers stay defined.
FastDivmod divisor_of(int64_t d) { return FastDivmod(uint32_t(std::max<int64_t>(d, 1))); }
// q = n / d, returns n % d.
__device__ __forceinline__ int split(const FastDivmod& d, int n, int& q) {
  q = int(d.div(uint32_t(n)));
  return n - q * int(d.divisor);
}

struct UnfoldArgs {
  int64_t n0;  // first image of the chunk
  int Nc, M;   // images in this chunk, and their pixels Nc * P * Q
  int C, H, W, P, Q, R, S, G, Cg, J, col_ld;
  int sh, sw, ph, pw, dh, dw;
  int64_t xs[4];      // element strides of the unfolded (or gathered-into) activation [N, C, H, W]
  bool pixels_major;  // col is [G][M][col_ld], else [Nc][G][J][P*Q] (col_ld == J)
  bool taps_outer;    // J order (r, s, c), else (c, r, s)
  bool channels_fastest;  // col2im: walk dx with channels innermost (NHWC dx)
  // Divisors of the index maps.
  FastDivmod d_J, d_M, d_PQ, d_Q, d_R, d_S, d_RS, d_Cg, d_G, d_C, d_W, d_H;
  FastDivmod d_group_vecs, d_pixel_vecs;  // 16-byte channel vectors per group / per pixel
  FastDivmod d_row_vecs;                  // 16-byte vectors per pixels-major col row (col_ld / VEC)
  FastDivmod d_sh, d_sw;                  // strides, for the col2im tap search
};

// (c, r, s) of unfold column j.
__device__ __forceinline__ void unfold_tap(const UnfoldArgs& a, int j, int& c, int& r, int& s) {
  int t;
  if (a.taps_outer) {
    c = split(a.d_Cg, j, t);  // j = (r * S + s) * Cg + c
    s = split(a.d_S, t, r);
  } else {
    s = split(a.d_S, j, t);  // j = (c * R + r) * S + s
    r = split(a.d_R, t, c);
  }
}

__device__ __forceinline__ int unfold_column(const UnfoldArgs& a, int c, int r, int s) {
  return a.taps_outer ? (r * a.S + s) * a.Cg + c : (c * a.R + r) * a.S + s;
}

// col = unfold(x) for the chunk's images, an element per thread; zeros where a tap falls in the
// padding. Pixels-major col rows are written up to J (their padding columns are never read).
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    im2col_kernel(UnfoldArgs a, const T* __restrict__ x, T* __restrict__ col, int total) {
  const int step = int(gridDim.x) * blockDim.x;
  for (int idx = int(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    int j, n, g, p, q;
    int64_t at;
    if (a.pixels_major) {
      int gm, m, pq;
      j = split(a.d_J, idx, gm);
      m = split(a.d_M, gm, g);
      pq = split(a.d_PQ, m, n);
      q = split(a.d_Q, pq, p);
      at = int64_t(g * a.M + m) * a.col_ld + j;
    } else {
      int t, t2, pq;
      pq = split(a.d_PQ, idx, t);
      j = split(a.d_J, t, t2);
      g = split(a.d_G, t2, n);
      q = split(a.d_Q, pq, p);
      at = idx;
    }
    int c, r, s;
    unfold_tap(a, j, c, r, s);
    const int h = p * a.sh - a.ph + r * a.dh, w = q * a.sw - a.pw + s * a.dw;
    T v = convert<T>(0.0f);
    if (h >= 0 && h < a.H && w >= 0 && w < a.W)
      v = x[(a.n0 + n) * a.xs[0] + int64_t(g * a.Cg + c) * a.xs[1] + int64_t(h) * a.xs[2] +
            int64_t(w) * a.xs[3]];
    col[at] = v;
  }
}

// The same unfold for channels_last x and (r, s, c) columns with Cg a multiple of the vector
// width: a thread copies one 16-byte channel vector of one tap (or writes zeros in the padding).
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    im2col_nhwc_vector_kernel(UnfoldArgs a, const T* __restrict__ x, T* __restrict__ col,
                              int total) {
  constexpr int VEC = 16 / int(sizeof(T));
  using Vec = AlignedVec<T, VEC>;
  const int step = int(gridDim.x) * blockDim.x;
  for (int idx = int(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    int t, rs, gm, g, n, p, r;
    const int cv = split(a.d_group_vecs, idx, t);  // vector within the group's channels
    rs = split(a.d_RS, t, gm);
    const int m = split(a.d_M, gm, g);
    const int pq = split(a.d_PQ, m, n);
    const int q = split(a.d_Q, pq, p);
    const int s = split(a.d_S, rs, r);
    const int h = p * a.sh - a.ph + r * a.dh, w = q * a.sw - a.pw + s * a.dw;
    Vec v;
    if (h >= 0 && h < a.H && w >= 0 && w < a.W) {
      v = *reinterpret_cast<const Vec*>(x + ((a.n0 + n) * a.H + h) * int64_t(a.W) * a.C +
                                        int64_t(w) * a.C + g * a.Cg + cv * VEC);
    } else {
#pragma unroll
      for (int i = 0; i < VEC; ++i) v.v[i] = convert<T>(0.0f);
    }
    *reinterpret_cast<Vec*>(col + int64_t(gm) * a.col_ld + rs * a.Cg + cv * VEC) = v;
  }
}

// The same unfold for channels_last x and (r, s, c) columns when Cg is not a multiple of the
// vector width (the 3-channel stem): a thread writes one 16-byte vector of a col row, gathering
// its elements one by one. For a fixed pixel and filter row the taps (s, c) of a row are S * Cg
// consecutive columns, so after one decomposition of the vector's first column the thread steps
// c, s, r incrementally (no division per element). Col stores are dense and coalesced (the row
// padding past J is written with zeros); the loads of neighbouring threads are neighbouring
// input elements (with one group and no dilation the S * C elements of a tap row are contiguous).
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    im2col_nhwc_gather_kernel(UnfoldArgs a, const T* __restrict__ x, T* __restrict__ col,
                              int total) {
  constexpr int VEC = 16 / int(sizeof(T));
  using Vec = AlignedVec<T, VEC>;
  const int step = int(gridDim.x) * blockDim.x;
  for (int idx = int(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    int gm, g, n, p, t, r;
    const int v = split(a.d_row_vecs, idx, gm);  // col element idx * VEC is row gm, column v * VEC
    const int m = split(a.d_M, gm, g);
    const int pq = split(a.d_PQ, m, n);
    const int q = split(a.d_Q, pq, p);
    int c = split(a.d_Cg, v * VEC, t);  // first column = (r * S + s) * Cg + c; r >= R past J
    int s = split(a.d_S, t, r);
    const int h0 = p * a.sh - a.ph, w0 = q * a.sw - a.pw;
    const T* image = x + (a.n0 + n) * (int64_t(a.H) * a.W * a.C) + g * a.Cg;
    Vec out;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const int h = h0 + r * a.dh, w = w0 + s * a.dw;
      T e = convert<T>(0.0f);
      if (r < a.R && h >= 0 && h < a.H && w >= 0 && w < a.W) e = image[(h * a.W + w) * a.C + c];
      out.v[i] = e;
      if (++c == a.Cg) {
        c = 0;
        if (++s == a.S) {
          s = 0;
          ++r;
        }
      }
    }
    *reinterpret_cast<Vec*>(col + int64_t(idx) * VEC) = out;
  }
}

// The output position along one axis that tap t of input coordinate i feeds, or -1.
__device__ __forceinline__ int tap_source(int i, int t, const FastDivmod& stride, int pad, int dil,
                                          int limit) {
  const int num = i + pad - t * dil;
  if (num < 0) return -1;
  int o;
  return split(stride, num, o) == 0 && o < limit ? o : -1;
}

// The tap walk of every col2im kernel: calls visit(r, s, p, q) for each filter tap (r, s) through
// which output pixel (p, q) read input position (h, w), in a fixed order (deterministic sums).
template <typename Visit>
__device__ __forceinline__ void for_each_tap_reaching(const UnfoldArgs& a, int h, int w,
                                                      Visit&& visit) {
  for (int r = 0; r < a.R; ++r) {
    const int p = tap_source(h, r, a.d_sh, a.ph, a.dh, a.P);
    if (p < 0) continue;
    for (int s = 0; s < a.S; ++s) {
      const int q = tap_source(w, s, a.d_sw, a.pw, a.dw, a.Q);
      if (q >= 0) visit(r, s, p, q);
    }
  }
}

// The row of a pixels-major col holding group g's columns of output pixel (p, q) of chunk image n.
__device__ __forceinline__ int64_t col_row(const UnfoldArgs& a, int g, int n, int p, int q) {
  return int64_t(g * a.M + (n * a.P + p) * a.Q + q);
}

// dx[n, c, h, w] = sum of dcol over the taps whose output position reaches (h, w), for the
// chunk's images; an element per thread, accumulation in fp32 (fp64 for f64).
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    col2im_kernel(UnfoldArgs a, const T* __restrict__ col, T* __restrict__ dx, int total) {
  using Acc = OpMath<T>;
  const int PQ = a.P * a.Q;
  const int step = int(gridDim.x) * blockDim.x;
  for (int idx = int(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    int n, c, h, w, t, t2;
    if (a.channels_fastest) {
      c = split(a.d_C, idx, t);
      w = split(a.d_W, t, t2);
      h = split(a.d_H, t2, n);
    } else {
      w = split(a.d_W, idx, t);
      h = split(a.d_H, t, t2);
      c = split(a.d_C, t2, n);
    }
    int g;
    const int ci = split(a.d_Cg, c, g);
    Acc acc = 0;
    for_each_tap_reaching(a, h, w, [&](int r, int s, int p, int q) {
      const int j = unfold_column(a, ci, r, s);
      const int64_t at = a.pixels_major ? col_row(a, g, n, p, q) * a.col_ld + j
                                        : (int64_t(n * a.G + g) * a.J + j) * PQ + p * a.Q + q;
      acc += convert<Acc>(col[at]);
    });
    dx[(a.n0 + n) * a.xs[0] + int64_t(c) * a.xs[1] + int64_t(h) * a.xs[2] + int64_t(w) * a.xs[3]] =
        convert<T>(acc);
  }
}

// col2im for channels_last dx and (r, s, c) columns with Cg a multiple of the vector width: a
// thread sums one 16-byte channel vector over the taps.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    col2im_nhwc_vector_kernel(UnfoldArgs a, const T* __restrict__ col, T* __restrict__ dx,
                              int total) {
  constexpr int VEC = 16 / int(sizeof(T));
  using Vec = AlignedVec<T, VEC>;
  using Acc = OpMath<T>;
  const int step = int(gridDim.x) * blockDim.x;
  for (int idx = int(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    int pix, t, n, h, g;
    const int cv = split(a.d_pixel_vecs, idx, pix);  // vector among the C / VEC of a pixel
    const int w = split(a.d_W, pix, t);
    h = split(a.d_H, t, n);
    const int c0 = cv * VEC;
    const int ci = split(a.d_Cg, c0, g);
    Acc acc[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[i] = 0;
    for_each_tap_reaching(a, h, w, [&](int r, int s, int p, int q) {
      const Vec v = *reinterpret_cast<const Vec*>(col + col_row(a, g, n, p, q) * a.col_ld +
                                                  (r * a.S + s) * a.Cg + ci);
#pragma unroll
      for (int i = 0; i < VEC; ++i) acc[i] += convert<Acc>(v.v[i]);
    });
    Vec out;
#pragma unroll
    for (int i = 0; i < VEC; ++i) out.v[i] = convert<T>(acc[i]);
    *reinterpret_cast<Vec*>(dx + ((a.n0 + n) * a.H + h) * int64_t(a.W) * a.C + int64_t(w) * a.C +
                            c0) = out;
  }
}

// col2im for channels_last dx, one group and at most kPixelFoldChannels channels (the stem's
// backward_data): a thread sums all C channels of one dx pixel, so the tap search is shared by
// the channels and each tap reads C consecutive col elements.
constexpr int kPixelFoldChannels = 8;

template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    col2im_nhwc_pixel_kernel(UnfoldArgs a, const T* __restrict__ col, T* __restrict__ dx,
                             int total) {
  using Acc = OpMath<T>;
  const int step = int(gridDim.x) * blockDim.x;
  for (int idx = int(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    int t, n;
    const int w = split(a.d_W, idx, t);
    const int h = split(a.d_H, t, n);
    Acc acc[kPixelFoldChannels];
#pragma unroll
    for (int i = 0; i < kPixelFoldChannels; ++i) acc[i] = 0;
    for_each_tap_reaching(a, h, w, [&](int r, int s, int p, int q) {
      const T* tap = col + col_row(a, 0, n, p, q) * a.col_ld + (r * a.S + s) * a.C;
#pragma unroll
      for (int i = 0; i < kPixelFoldChannels; ++i)
        if (i < a.C) acc[i] += convert<Acc>(tap[i]);
    });
    T* out = dx + (a.n0 * a.H * a.W + idx) * int64_t(a.C);  // idx = (n * H + h) * W + w
#pragma unroll
    for (int i = 0; i < kPixelFoldChannels; ++i)
      if (i < a.C) out[i] = convert<T>(acc[i]);
  }
}

// ---- planning ---------------------------------------------------------------------------------

// Everything a run decides, derived from the problem alone (so workspace_bytes and run agree).
struct Plan {
  bool pixels_major;   // NHWC form
  bool taps_outer;     // J order (r, s, c)
  bool weight_direct;  // the weight is used in place; else a [K][w_ld] copy in the workspace
  Form dy_form;        // form of the GEMM's activation operand (output / output gradient)
  int64_t J, col_ld, w_ld;
  int64_t chunk;     // images per col chunk
  int64_t splits;    // backward_filter split-K slices (1: no split, accumulate in the weight)
  size_t col_bytes;  // one chunk's col
  size_t partial_bytes;
  size_t staging;    // bytes of staged operands (activation, weight)
  size_t workspace;  // total
};

Plan plan_of(const ConvProblem& pr) {
  const ConvDims d = conv_dims(pr);
  Plan p{};
  const Tensor& act = pr.output;  // y (forward) or dy (backward)
  if (pr.direction == Direction::backward_filter) {
    p.pixels_major = true;
  } else {
    p.pixels_major = dense_as(act, Form::nhwc) && !dense_as(act, Form::nchw);
  }
  p.dy_form = p.pixels_major ? Form::nhwc : Form::nchw;
  const bool w_kcrs = dense_as(pr.weight, Form::nchw), w_krsc = dense_as(pr.weight, Form::nhwc);
  p.taps_outer = (p.pixels_major && dense_as(pr.input, Form::nhwc)) || (w_krsc && !w_kcrs);
  p.J = d.Cg * d.R * d.S;
  const int64_t j_padded = round_up(p.J, kRowAlignElements);
  p.col_ld = p.pixels_major ? j_padded : p.J;
  p.weight_direct = (p.taps_outer ? w_krsc : w_kcrs) && p.J == j_padded;
  p.w_ld = p.weight_direct ? p.J : j_padded;

  const int64_t PQ = d.P * d.Q;
  const int64_t per_image_elems = d.G * p.col_ld * PQ;
  const size_t per_image = size_t(per_image_elems) * pr.input.element_size();
  int64_t chunk = int64_t(kColBudgetBytes / std::max<size_t>(per_image, 1));
  chunk = std::min(chunk, kMaxChunkElements / std::max<int64_t>(per_image_elems, 1));
  chunk = std::min(chunk, kMaxChunkElements / std::max<int64_t>(d.C * d.H * d.W, 1));
  p.chunk = std::clamp<int64_t>(chunk, 1, std::max<int64_t>(d.N, 1));
  p.col_bytes = per_image * size_t(p.chunk);

  p.splits = 1;
  const DType t = pr.input.dtype();
  const int64_t tiles = ((d.K + 127) / 128) * ((p.J + 127) / 128);
  // Problems in several chunks split as they did before the threshold: their chunks' sums then
  // meet in the fp32 partials (unless one slice fills the GPU), where unsplit they would be added
  // in the weight's dtype (beta = 1), rounding once per chunk in 16 bits.
  const bool chunked = p.chunk < d.N;
  if (pr.direction == Direction::backward_filter && d.G == 1 && t != DType::f64 &&
      (d.N * PQ >= kMinSplitPixelsPerTile * tiles || chunked)) {
    // Enough slices for about two waves of 128x128 output tiles, each slice long enough to
    // amortise its partial; the last (smallest) chunk bounds the slice count.
    const int64_t want = (2 * sm_count(pr.device()) + tiles - 1) / tiles;
    const int64_t last_chunk = d.N - (d.N - 1) / p.chunk * p.chunk;
    p.splits = std::clamp<int64_t>(want, 1, std::max<int64_t>(1, last_chunk * PQ / kMinSplitRows));
  }
  p.partial_bytes = p.splits > 1 ? size_t(p.splits * d.K * p.J) * sizeof(float) : 0;

  WorkspacePlan ws;
  ws.add(staging_bytes(act, p.dy_form));
  if (!p.weight_direct) ws.add(size_t(d.K * p.w_ld) * pr.weight.element_size());
  p.staging = ws.bytes;
  ws.add(p.col_bytes);
  if (p.partial_bytes) ws.add(p.partial_bytes);
  p.workspace = ws.bytes;
  return p;
}

// The weight's [K, Cg, R, S] element strides in a [K][w_ld] buffer with the plan's J order.
Shape weight_buffer_strides(const ConvDims& d, const Plan& plan) {
  if (plan.taps_outer) return {plan.w_ld, 1, d.S * d.Cg, d.Cg};
  return {plan.w_ld, d.R * d.S, d.S, 1};
}

UnfoldArgs unfold_args(const ConvProblem& pr, const Plan& plan, int64_t n0, int64_t nc) {
  const ConvDims d = conv_dims(pr);
  UnfoldArgs a{};
  a.n0 = n0;
  a.Nc = int(nc);
  a.M = int(nc * d.P * d.Q);
  a.C = int(d.C), a.H = int(d.H), a.W = int(d.W), a.P = int(d.P), a.Q = int(d.Q);
  a.R = int(d.R), a.S = int(d.S), a.G = int(d.G), a.Cg = int(d.Cg);
  a.J = int(plan.J), a.col_ld = int(plan.col_ld);
  a.sh = int(d.sh), a.sw = int(d.sw), a.ph = int(d.ph), a.pw = int(d.pw), a.dh = int(d.dh),
  a.dw = int(d.dw);
  for (int i = 0; i < 4; ++i) a.xs[i] = pr.input.stride(i);
  a.pixels_major = plan.pixels_major;
  a.taps_outer = plan.taps_outer;
  a.channels_fastest = pr.input.suggest_memory_format() == MemoryFormat::channels_last;
  const int vec = int(16 / pr.input.element_size());
  a.d_J = divisor_of(a.J), a.d_M = divisor_of(a.M), a.d_PQ = divisor_of(d.P * d.Q);
  a.d_Q = divisor_of(a.Q), a.d_R = divisor_of(a.R), a.d_S = divisor_of(a.S);
  a.d_RS = divisor_of(a.R * a.S), a.d_Cg = divisor_of(a.Cg), a.d_G = divisor_of(a.G);
  a.d_C = divisor_of(a.C), a.d_W = divisor_of(a.W), a.d_H = divisor_of(a.H);
  a.d_group_vecs = divisor_of(a.Cg % vec == 0 ? a.Cg / vec : 1);
  a.d_pixel_vecs = divisor_of(a.C % vec == 0 ? a.C / vec : 1);
  a.d_row_vecs = divisor_of(a.col_ld / vec);
  a.d_sh = divisor_of(a.sh), a.d_sw = divisor_of(a.sw);
  return a;
}

// The 16-byte channel-vector kernels apply: NHWC col with (r, s, c) columns over a channels_last
// activation with 16-byte aligned channel vectors.
bool vector_path(const ConvProblem& pr, const Plan& plan) {
  const ConvDims d = conv_dims(pr);
  const int64_t vec = 16 / int64_t(pr.input.element_size());
  return plan.pixels_major && plan.taps_outer && dense_as(pr.input, Form::nhwc) &&
         d.Cg % vec == 0 && reinterpret_cast<uintptr_t>(pr.input.data_ptr()) % 16 == 0;
}

// The gathering unfold applies to the other NHWC-col, (r, s, c), channels_last cases (channels
// per group not a multiple of the vector width, or an unaligned input): col rows are whole
// 16-byte vectors (col_ld is a multiple of 8 elements and the workspace is 16-byte aligned).
bool gather_path(const ConvProblem& pr, const Plan& plan) {
  return plan.pixels_major && plan.taps_outer && dense_as(pr.input, Form::nhwc);
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
  const ConvDims d = conv_dims(pr);
  const Plan plan = plan_of(pr);
  WorkspaceArena arena(workspace, workspace_bytes);
  const Device dev = pr.device();
  cudaStream_t stream = stream_of(dev);
  const int64_t J = plan.J, PQ = d.P * d.Q, col_ld = plan.col_ld, w_ld = plan.w_ld;
  const size_t es = pr.input.element_size();
  const bool vectors = vector_path(pr, plan);
  const bool gather = !vectors && gather_path(pr, plan);

  Tensor act = pr.direction == Direction::forward ? stage_write(pr.output, plan.dy_form, arena)
                                                  : stage_read(pr.output, plan.dy_form, arena);
  Tensor weight = pr.weight;
  if (!plan.weight_direct) {
    const int64_t elems = d.K * w_ld;
    weight = workspace_view(arena.take(size_t(elems) * es), elems, pr.weight.sizes(),
                            weight_buffer_strides(d, plan), pr.weight.dtype(), dev);
    if (pr.direction != Direction::backward_filter) weight.copy_(pr.weight.detach());
  }
  T* col = static_cast<T*>(arena.take(plan.col_bytes));
  float* partial = plan.splits > 1 ? static_cast<float*>(arena.take(plan.partial_bytes)) : nullptr;
  char* act_ptr = static_cast<char*>(act.data_ptr());
  char* w_ptr = static_cast<char*>(weight.data_ptr());
  const T* x_ptr = static_cast<const T*>(pr.input.data_ptr());
  const int64_t vec = 16 / int64_t(es);

  for (int64_t n0 = 0; n0 < d.N; n0 += plan.chunk) {
    const int64_t nc = std::min(plan.chunk, d.N - n0);
    const int64_t M = nc * PQ;
    const UnfoldArgs ua = unfold_args(pr, plan, n0, nc);
    if (pr.direction != Direction::backward_data) {
      if (vectors) {
        const int64_t total = d.G * M * d.R * d.S * (d.Cg / vec);
        im2col_nhwc_vector_kernel<T>
            <<<grid_for(total, dev.index, kStreamBlocksPerSm), kBlockThreads, 0, stream>>>(
                ua, x_ptr, col, int(total));
      } else if (gather) {
        const int64_t total = d.G * M * (col_ld / vec);
        im2col_nhwc_gather_kernel<T>
            <<<grid_for(total, dev.index, kStreamBlocksPerSm), kBlockThreads, 0, stream>>>(
                ua, x_ptr, col, int(total));
      } else {
        const int64_t total = d.G * J * M;
        im2col_kernel<T>
            <<<grid_for(total, dev.index, kStreamBlocksPerSm), kBlockThreads, 0, stream>>>(
                ua, x_ptr, col, int(total));
      }
      EMBER_CUDA_LAUNCH_CHECK();
    }
    GemmArgs g = gemm_base(pr);
    if (pr.direction == Direction::forward && plan.pixels_major) {
      g.m = M, g.n = d.Kg, g.k = J;
      g.a = col, g.lda = col_ld, g.stride_a = M * col_ld;
      g.b = w_ptr, g.ldb = w_ld, g.stride_b = d.Kg * w_ld, g.trans_b = true;
      g.c = act_ptr + size_t(n0 * PQ * d.K) * es, g.ldc = d.K, g.stride_c = d.Kg;
      g.batch = d.G;
      gemm(g);
    } else if (pr.direction == Direction::forward) {
      for (int64_t grp = 0; grp < d.G; ++grp) {
        g.m = d.Kg, g.n = PQ, g.k = J;
        g.a = w_ptr + size_t(grp * d.Kg * w_ld) * es, g.lda = w_ld, g.stride_a = 0;
        g.b = col + grp * J * PQ, g.ldb = PQ, g.stride_b = d.G * J * PQ;
        g.c = act_ptr + size_t((n0 * d.K + grp * d.Kg) * PQ) * es, g.ldc = PQ,
        g.stride_c = d.K * PQ;
        g.batch = nc;
        gemm(g);
      }
    } else if (pr.direction == Direction::backward_data) {
      if (plan.pixels_major) {
        g.m = M, g.n = J, g.k = d.Kg;
        g.a = act_ptr + size_t(n0 * PQ * d.K) * es, g.lda = d.K, g.stride_a = d.Kg;
        g.b = w_ptr, g.ldb = w_ld, g.stride_b = d.Kg * w_ld;
        g.c = col, g.ldc = col_ld, g.stride_c = M * col_ld;
        g.batch = d.G;
        gemm(g);
      } else {
        for (int64_t grp = 0; grp < d.G; ++grp) {
          g.m = J, g.n = PQ, g.k = d.Kg;
          g.a = w_ptr + size_t(grp * d.Kg * w_ld) * es, g.lda = w_ld, g.stride_a = 0,
          g.trans_a = true;
          g.b = act_ptr + size_t((n0 * d.K + grp * d.Kg) * PQ) * es, g.ldb = PQ,
          g.stride_b = d.K * PQ;
          g.c = col + grp * J * PQ, g.ldc = PQ, g.stride_c = d.G * J * PQ;
          g.batch = nc;
          gemm(g);
        }
      }
      T* dx = static_cast<T*>(pr.input.data_ptr());
      if (vectors && reinterpret_cast<uintptr_t>(dx) % 16 == 0) {
        const int64_t total = nc * d.H * d.W * (d.C / vec);
        col2im_nhwc_vector_kernel<T>
            <<<grid_for(total, dev.index, kStreamBlocksPerSm), kBlockThreads, 0, stream>>>(
                ua, col, dx, int(total));
      } else if (gather && d.G == 1 && d.C <= kPixelFoldChannels) {
        const int64_t total = nc * d.H * d.W;
        col2im_nhwc_pixel_kernel<T>
            <<<grid_for(total, dev.index, kStreamBlocksPerSm), kBlockThreads, 0, stream>>>(
                ua, col, dx, int(total));
      } else {
        const int64_t total = nc * d.C * d.H * d.W;
        col2im_kernel<T>
            <<<grid_for(total, dev.index, kStreamBlocksPerSm), kBlockThreads, 0, stream>>>(
                ua, col, dx, int(total));
      }
      EMBER_CUDA_LAUNCH_CHECK();
    } else if (plan.splits > 1) {
      // dW partial[sp] (+)= dY[slice sp]^T @ col[slice sp]; the rows past splits * L are added
      // to slice 0's partial. L is a multiple of 8 so every slice starts 16-byte aligned.
      const int64_t L = M / plan.splits / 8 * 8;
      const char* dy_chunk = act_ptr + size_t(n0 * PQ * d.K) * es;
      g.m = d.K, g.n = J, g.k = L;
      g.a = dy_chunk, g.lda = d.K, g.stride_a = L * d.K, g.trans_a = true;
      g.b = col, g.ldb = col_ld, g.stride_b = L * col_ld;
      g.c = partial, g.ldc = J, g.stride_c = d.K * J;
      g.beta = n0 == 0 ? 0.0 : 1.0;
      g.batch = plan.splits;
      gemm_f32_out(g);
      const int64_t tail = M - plan.splits * L;
      if (tail > 0) {
        g.k = tail;
        g.a = dy_chunk + size_t(plan.splits * L * d.K) * es;
        g.b = col + plan.splits * L * col_ld;
        g.beta = 1.0;
        g.batch = 1;
        gemm_f32_out(g);
      }
    } else {
      g.m = d.Kg, g.n = J, g.k = M;
      g.a = act_ptr + size_t(n0 * PQ * d.K) * es, g.lda = d.K, g.stride_a = d.Kg, g.trans_a = true;
      g.b = col, g.ldb = col_ld, g.stride_b = M * col_ld;
      g.c = w_ptr, g.ldc = w_ld, g.stride_c = d.Kg * w_ld;
      g.beta = n0 == 0 ? 0.0 : 1.0;
      g.batch = d.G;
      gemm(g);
    }
  }
  if (pr.direction == Direction::forward) finish_write(pr.output, act);
  if (pr.direction == Direction::backward_filter) {
    if constexpr (!std::is_same_v<T, double>) {  // f64 never splits (no fp32 partials)
      if (plan.splits > 1)
        sum_split_partials<T>(partial, plan.splits, d.K, J, w_ld, 1, reinterpret_cast<T*>(w_ptr),
                              dev);
    }
    if (!plan.weight_direct) {
      Tensor dw = pr.weight;
      dw.copy_(weight);
    }
  }
}

void run_im2col_gemm(const ConvProblem& pr, void* workspace, size_t workspace_bytes) {
  dispatch_conv_dtype<true>(pr.input.dtype(), "im2col_gemm", [&](auto tag) {
    run_im2col_gemm_typed<decltype(tag)>(pr, workspace, workspace_bytes);
  });
}

size_t im2col_workspace(const ConvProblem& pr) { return plan_of(pr).workspace; }

// The unfold writes and the GEMM reads col (R*S times the input), plus staging copies, plus the
// GEMMs at about 60% of the math peak, plus one launch per chunk and group. The image-major
// layout (NCHW activations) runs one GEMM per image with P*Q columns; below ~512 columns cuBLAS
// falls well short of that, so their efficiency scales with P*Q / 512. Then a calibration to
// measured times: 16-bit pixel-major GEMMs over several taps run faster than the estimate (x0.85),
// fp32 backward_filter from NCHW activations slower (x1.5).
double im2col_cost_us(const ConvProblem& pr) {
  const ConvDims d = conv_dims(pr);
  const Plan plan = plan_of(pr);
  constexpr double kFullEfficiencyColumns = 512;
  const double gemm_efficiency =
      0.6 * (plan.pixels_major ? 1.0 : std::min(1.0, double(d.P * d.Q) / kFullEfficiencyColumns));
  const double col_total = double(plan.col_bytes) / double(plan.chunk) * double(d.N);
  const int64_t chunks = (d.N + plan.chunk - 1) / plan.chunk;
  const int64_t calls_per_chunk = plan.pixels_major ? 2 : 1 + d.G;
  const double operands = double(pr.input.nbytes() + pr.output.nbytes() + pr.weight.nbytes());
  double calibration = 1.0;
  if (pr.input.element_size() == 2 && plan.pixels_major && d.R * d.S > 1) calibration = 0.85;
  if (pr.input.dtype() == DType::f32 && pr.direction == Direction::backward_filter &&
      !dense_as(pr.input, Form::nhwc))
    calibration = 1.5;
  return calibration *
         (memory_time_us(2.0 * col_total + 2.0 * double(plan.staging + plan.partial_bytes)) +
          std::max(math_time_us(d.macs(), pr.input.dtype(), pr.allow_tf32, gemm_efficiency),
                   memory_time_us(operands) / 0.8) +
          double(chunks * calls_per_chunk) * kLaunchUs);
}

bool im2col_applies(const ConvProblem& pr) {
  // Kernels index within a chunk in 32 bits: one image's col and input must fit.
  const ConvDims d = conv_dims(pr);
  const double per_image_col =
      double(d.G) * double(round_up(d.Cg * d.R * d.S, kRowAlignElements)) * double(d.P * d.Q);
  return per_image_col < double(kMaxChunkElements) &&
         double(d.C * d.H * d.W) < double(kMaxChunkElements);
}

const std::vector<DType> kIm2colTypes = {DType::f32, DType::f64, DType::f16, DType::bf16};

const auto im2col_forward =
    register_conv_algorithm({"im2col_gemm", Direction::forward, true, kIm2colTypes, im2col_applies,
                             im2col_workspace, im2col_cost_us, run_im2col_gemm});
const auto im2col_backward_data =
    register_conv_algorithm({"im2col_gemm", Direction::backward_data, true, kIm2colTypes,
                             im2col_applies, im2col_workspace, im2col_cost_us, run_im2col_gemm});
const auto im2col_backward_filter =
    register_conv_algorithm({"im2col_gemm", Direction::backward_filter, true, kIm2colTypes,
                             im2col_applies, im2col_workspace, im2col_cost_us, run_im2col_gemm});

}  // namespace
}  // namespace ember::cuda::conv
