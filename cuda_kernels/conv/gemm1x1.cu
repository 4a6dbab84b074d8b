// gemm_1x1: 1x1 convolutions without padding as cuBLAS GEMMs, no unfold (f32 with TF32 when
// allowed, f16/bf16 with fp32 accumulation, f64; any groups).
//   NHWC form, X [N*H*W, C], Y [N*P*Q, K], W [K, Cg] (KCRS and KRSC are the same memory for 1x1):
//     forward          Y[:, g]  = X[:, g] @ W_g^T       one strided-batched GEMM over groups
//     backward_data    dX[:, g] = dY[:, g] @ W_g
//     backward_filter  dW_g     = dY[:, g]^T @ X[:, g]  (the whole pixel reduction in one GEMM)
//   NCHW form (stride 1, forward and backward_data): per group, a GEMM batched over images,
//     Y_n,g = W_g @ X_n,g and dX_n,g = W_g^T @ dY_n,g.
//   NCHW backward_filter (one group, stride 1, f32/f16/bf16, when the partials are smaller than
//     the activations): every image's pixels are cut into slices and one pointer-array batched
//     GEMM computes partial[n, slice] = dY_n,slice @ X_n,slice^T in fp32 (enough independent
//     products to fill the GPU, no transposition of the activations), then the partials are summed
//     in a fixed order into dW.
// Strided 1x1 convolutions (the ResNet downsampling shortcut) run in the NHWC form on the
// subsampled input x[:, :, ::sh, ::sw], gathered into a compact workspace with 16-byte channel
// vectors; backward_data computes that compact gradient and one kernel writes every element of dx
// once (the gradient where a pixel was read, zero elsewhere). Operands that are not dense in the
// form used are staged through the workspace. The tensor a direction writes is OVERWRITTEN.
#include <algorithm>

#include "ember/cuda_kernels/conv/conv_common.cuh"

namespace ember::cuda::conv {
namespace {

bool strided(const ConvDims& d) { return d.sh != 1 || d.sw != 1; }

constexpr int64_t kMaxInt32 = (int64_t(1) << 31) - 1;
// Products per image slice in the NCHW filter gradient hold at least this many pixels.
constexpr int64_t kMinSlicePixels = 512;

// compact[n, p, q, :] = x[n, p * sh, q * sw, :] for channels_last x: a thread per 16-byte vector.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    gather_subsampled_nhwc_kernel(const T* __restrict__ x, T* __restrict__ compact, int H, int W,
                                  int sh, int sw, FastDivmod vecs_per_pixel, FastDivmod Q,
                                  FastDivmod P, int C, int total) {
  constexpr int VEC = 16 / int(sizeof(T));
  using Vec = AlignedVec<T, VEC>;
  const int step = int(gridDim.x) * blockDim.x;
  for (int idx = int(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const uint32_t pix = vecs_per_pixel.div(uint32_t(idx));
    const int cv = idx - int(pix * vecs_per_pixel.divisor);
    const uint32_t t = Q.div(pix);
    const int q = int(pix - t * Q.divisor);
    const uint32_t n = P.div(t);
    const int p = int(t - n * P.divisor);
    const int64_t src = ((int64_t(n) * H + int64_t(p) * sh) * W + int64_t(q) * sw) * C + cv * VEC;
    *reinterpret_cast<Vec*>(compact + int64_t(idx) * VEC) = *reinterpret_cast<const Vec*>(x + src);
  }
}

// dx[n, c, h, w] = compact[n, h / sh, w / sw, c] where (h, w) is on the stride grid, else 0, for
// channels_last dx: a thread per 16-byte vector, every element written once.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    scatter_subsampled_nhwc_kernel(const T* __restrict__ compact, T* __restrict__ dx, int sh,
                                   int sw, int P, int Q, FastDivmod vecs_per_pixel, FastDivmod W,
                                   FastDivmod H, int C, int total) {
  constexpr int VEC = 16 / int(sizeof(T));
  using Vec = AlignedVec<T, VEC>;
  const int step = int(gridDim.x) * blockDim.x;
  for (int idx = int(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const uint32_t pix = vecs_per_pixel.div(uint32_t(idx));
    const int cv = idx - int(pix * vecs_per_pixel.divisor);
    const uint32_t t = W.div(pix);
    const int w = int(pix - t * W.divisor);
    const uint32_t n = H.div(t);
    const int h = int(t - n * H.divisor);
    const int p = h / sh, q = w / sw;
    Vec v;
    if (p * sh == h && q * sw == w && p < P && q < Q) {
      v = *reinterpret_cast<const Vec*>(compact + ((int64_t(n) * P + p) * Q + q) * C + cv * VEC);
    } else {
#pragma unroll
      for (int i = 0; i < VEC; ++i) v.v[i] = convert<T>(0.0f);
    }
    *reinterpret_cast<Vec*>(dx + int64_t(idx) * VEC) = v;
  }
}

// The same scatter for a dx of any strides, an element per thread (index in dx's logical
// [N, C, H, W] order, channels innermost when dx is channels_last).
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    scatter_subsampled_kernel(const T* __restrict__ compact, T* __restrict__ dx, int64_t C,
                              int64_t H, int64_t W, int64_t P, int64_t Q, int64_t sh, int64_t sw,
                              int64_t xs0, int64_t xs1, int64_t xs2, int64_t xs3,
                              bool channels_fastest, int64_t total) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    int64_t n, c, h, w, rest = idx;
    if (channels_fastest) {
      c = rest % C, rest /= C;
      w = rest % W, rest /= W;
      h = rest % H, n = rest / H;
    } else {
      w = rest % W, rest /= W;
      h = rest % H, rest /= H;
      c = rest % C, n = rest / C;
    }
    const int64_t p = h / sh, q = w / sw;
    T v = convert<T>(0.0f);
    if (p * sh == h && q * sw == w && p < P && q < Q) v = compact[((n * P + p) * Q + q) * C + c];
    dx[n * xs0 + c * xs1 + h * xs2 + w * xs3] = v;
  }
}

// Pointers of the NCHW filter-gradient products: product b = n * slices + s multiplies the
// pixels [s * L, s * L + L) of image n into partial[b].
__global__ void split_product_pointers_kernel(const char* dy, const char* x, float* partial,
                                              int64_t images, int64_t slices,
                                              int64_t dy_image_bytes, int64_t x_image_bytes,
                                              int64_t slice_bytes, int64_t partial_elems,
                                              const void** a, const void** b, void** c) {
  const int64_t total = images * slices;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / slices, s = i - n * slices;
    a[i] = dy + n * dy_image_bytes + s * slice_bytes;
    b[i] = x + n * x_image_bytes + s * slice_bytes;
    c[i] = partial + i * partial_elems;
  }
}

// The gather/scatter kernels' 16-byte path applies: channels_last t, channels a multiple of the
// vector width, aligned base, and a vector count that fits 32-bit indexing.
bool nhwc_vectors(const Tensor& t, int64_t vectors_total) {
  const int64_t vec = 16 / int64_t(t.element_size());
  return dense_as(t, Form::nhwc) && t.size(1) % vec == 0 &&
         reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && vectors_total <= kMaxInt32;
}

// The input positions a strided 1x1 convolution reads: a [N, C, P, Q] view of x (or of dx).
Tensor subsampled(const Tensor& t, const ConvDims& d) {
  if (!strided(d)) return t;
  return t.slice(2, 0, d.H, d.sh).slice(3, 0, d.W, d.sw);
}

struct Plan {
  Form form;
  bool stage_weight;
  int64_t slices;  // > 0: the NCHW filter gradient in image slices (pixels per slice: slice_pixels)
  int64_t slice_pixels;
  size_t pointer_bytes, partial_bytes;
  size_t workspace;
};

// The NCHW filter gradient as per-image products: its slices per image, or 0 when the NHWC form
// (staging both activations) is used instead.
int64_t nchw_filter_slices(const ConvProblem& pr, const ConvDims& d) {
  const DType t = pr.input.dtype();
  if (pr.direction != Direction::backward_filter || strided(d) || d.G != 1 || t == DType::f64 ||
      !dense_as(pr.input, Form::nchw) || !dense_as(pr.output, Form::nchw))
    return 0;
  // About two waves of 64x64 output tiles; slices long enough to amortise their partials.
  const int64_t tiles = ((d.K + 63) / 64) * ((d.C + 63) / 64);
  const int64_t want = (2 * sm_count(pr.device()) + d.N * tiles - 1) / (d.N * tiles);
  const int64_t slices =
      std::clamp<int64_t>(want, 1, std::max<int64_t>(1, d.PQ() / kMinSlicePixels));
  // fp32 partials no larger than the activations the NHWC form would transpose.
  const double partials = double(d.N * slices) * double(d.K * d.C);
  if (partials > double(d.N) * double(d.C * d.HW() + d.K * d.PQ())) return 0;
  return slices;
}

Plan plan_of(const ConvProblem& pr) {
  const ConvDims d = conv_dims(pr);
  Plan p{};
  p.slices = nchw_filter_slices(pr, d);
  if (p.slices > 0) {
    // Slices start 16-byte aligned (multiples of 8 pixels) where possible; the pixels past
    // slices * slice_pixels join slice 0 of each image.
    p.slice_pixels = d.PQ() / p.slices;
    if (p.slices > 1) p.slice_pixels = p.slice_pixels / 8 * 8;
    p.form = Form::nchw;
    p.stage_weight = false;
    p.pointer_bytes = size_t(d.N * p.slices) * sizeof(void*);
    p.partial_bytes = size_t(d.N * p.slices * d.K * d.C) * sizeof(float);
    WorkspacePlan ws;
    for (int i = 0; i < 3; ++i) ws.add(p.pointer_bytes);
    ws.add(p.partial_bytes);
    p.workspace = ws.bytes;
    return p;
  }
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

// compact (dense channels_last [N, C, P, Q]) = x[:, :, ::sh, ::sw].
void gather_subsampled(const Tensor& x, const Tensor& compact, const ConvDims& d) {
  // Test emptiness on the elements, not on the vector count: with fewer channels than a 16-byte
  // vector holds (5 bf16 channels), C / vec is 0 yet every element must still be copied.
  if (compact.numel() == 0) return;
  const int64_t vec = 16 / int64_t(x.element_size());
  const int64_t total = compact.numel() / vec;  // the 16-byte path's vectors, when C % vec == 0
  if (!nhwc_vectors(x, total)) {
    Tensor dst = compact;
    dst.copy_(subsampled(x, d).detach());
    return;
  }
  const Device dev = x.device();
  dispatch_conv_dtype<true>(x.dtype(), "gemm_1x1", [&](auto tag) {
    using T = decltype(tag);
    gather_subsampled_nhwc_kernel<T>
        <<<grid_for(total, dev.index, 8), kBlockThreads, 0, stream_of(dev)>>>(
            static_cast<const T*>(x.data_ptr()), static_cast<T*>(compact.data_ptr()), int(d.H),
            int(d.W), int(d.sh), int(d.sw), FastDivmod(uint32_t(d.C / vec)),
            FastDivmod(uint32_t(d.Q)), FastDivmod(uint32_t(d.P)), int(d.C), int(total));
    EMBER_CUDA_LAUNCH_CHECK();
  });
}

// dx = compact on the stride grid, zero elsewhere, each element written once.
void scatter_subsampled(const Tensor& compact, const Tensor& dx, const ConvDims& d) {
  if (dx.numel() == 0) return;
  const int64_t vec = 16 / int64_t(dx.element_size());
  const int64_t vectors = dx.numel() / vec;  // the 16-byte path's vectors, when C % vec == 0
  const Device dev = dx.device();
  cudaStream_t stream = stream_of(dev);
  dispatch_conv_dtype<true>(dx.dtype(), "gemm_1x1", [&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(compact.data_ptr());
    T* dst = static_cast<T*>(dx.data_ptr());
    if (nhwc_vectors(dx, vectors)) {
      scatter_subsampled_nhwc_kernel<T>
          <<<grid_for(vectors, dev.index, 8), kBlockThreads, 0, stream>>>(
              src, dst, int(d.sh), int(d.sw), int(d.P), int(d.Q), FastDivmod(uint32_t(d.C / vec)),
              FastDivmod(uint32_t(d.W)), FastDivmod(uint32_t(d.H)), int(d.C), int(vectors));
    } else {
      const int64_t total = d.N * d.C * d.H * d.W;
      scatter_subsampled_kernel<T><<<grid_for(total, dev.index), kBlockThreads, 0, stream>>>(
          src, dst, d.C, d.H, d.W, d.P, d.Q, d.sh, d.sw, dx.stride(0), dx.stride(1), dx.stride(2),
          dx.stride(3), dx.suggest_memory_format() == MemoryFormat::channels_last, total);
    }
    EMBER_CUDA_LAUNCH_CHECK();
  });
}

// The NCHW filter gradient as image-slice products into fp32 partials, summed into dW.
void run_nchw_filter_slices(const ConvProblem& pr, const Plan& plan, WorkspaceArena& arena) {
  const ConvDims d = conv_dims(pr);
  const Device dev = pr.device();
  const size_t es = pr.input.element_size();
  const int64_t products = d.N * plan.slices, PQ = d.PQ(), L = plan.slice_pixels;
  auto** a = static_cast<const void**>(arena.take(plan.pointer_bytes));
  auto** b = static_cast<const void**>(arena.take(plan.pointer_bytes));
  auto** c = static_cast<void**>(arena.take(plan.pointer_bytes));
  auto* partial = static_cast<float*>(arena.take(plan.partial_bytes));
  const char* dy = static_cast<const char*>(pr.output.data_ptr());
  const char* x = static_cast<const char*>(pr.input.data_ptr());
  split_product_pointers_kernel<<<grid_for(products, dev.index), kBlockThreads, 0,
                                  stream_of(dev)>>>(dy, x, partial, d.N, plan.slices,
                                                    int64_t(d.K * PQ * es), int64_t(d.C * PQ * es),
                                                    int64_t(L * es), d.K * d.C, a, b, c);
  EMBER_CUDA_LAUNCH_CHECK();

  // partial[n, s] [K, C] = dY_n[:, slice] [K, L] @ X_n[:, slice]^T (rows of PQ pixels).
  GemmArgs g;
  g.dtype = pr.input.dtype();
  g.device = dev;
  g.allow_tf32 = pr.allow_tf32;
  g.m = d.K, g.n = d.C, g.k = L;
  g.a = a, g.lda = PQ;
  g.b = b, g.ldb = PQ, g.trans_b = true;
  g.c = c, g.ldc = d.C;
  g.batch = products;
  gemm_f32_out_pointer_array(g);
  const int64_t tail = PQ - plan.slices * L;
  if (tail > 0) {
    g.k = tail;
    g.a = dy + size_t(plan.slices * L) * es, g.stride_a = d.K * PQ;
    g.b = x + size_t(plan.slices * L) * es, g.stride_b = d.C * PQ;
    g.c = partial, g.stride_c = plan.slices * d.K * d.C;
    g.beta = 1.0;
    g.batch = d.N;
    gemm_f32_out(g);
  }
  dispatch_conv_dtype(pr.weight.dtype(), "gemm_1x1", [&](auto tag) {
    using T = decltype(tag);
    sum_split_partials<T>(partial, products, d.K, d.C, pr.weight.stride(0), pr.weight.stride(1),
                          static_cast<T*>(pr.weight.data_ptr()), dev);
  });
}

void run_gemm1x1(const ConvProblem& pr, void* workspace, size_t workspace_bytes) {
  const ConvDims d = conv_dims(pr);
  const Plan plan = plan_of(pr);
  WorkspaceArena arena(workspace, workspace_bytes);
  if (plan.slices > 0) {
    run_nchw_filter_slices(pr, plan, arena);
    return;
  }
  const size_t es = pr.input.element_size();
  const Shape sub_shape = {d.N, d.C, d.P, d.Q};

  // Operands in the plan's form. x: the (subsampled) input or its gradient; y: output or dy.
  Tensor x, y, w = pr.weight;
  if (pr.direction == Direction::backward_data) {
    x = strided(d) ? workspace_tensor(arena, sub_shape, pr.input.dtype(), pr.device(), Form::nhwc)
                   : stage_write(pr.input, plan.form, arena);
  } else if (strided(d)) {
    x = workspace_tensor(arena, sub_shape, pr.input.dtype(), pr.device(), Form::nhwc);
    gather_subsampled(pr.input, x, d);
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
    scatter_subsampled(x, pr.input, d);
  } else {
    finish_write(pr.input, x);
  }
}

bool gemm1x1_applies(const ConvProblem& pr) {
  const ConvDims d = conv_dims(pr);
  return d.R == 1 && d.S == 1 && d.ph == 0 && d.pw == 0;
}

size_t gemm1x1_workspace(const ConvProblem& pr) { return plan_of(pr).workspace; }

// Memory-bound at small channel counts, math-bound at large ones; staging and the strided
// gather/scatter cost a read and a write each. A strided forward or filter gradient of a
// channels_last x reads only its sampled pixels, whole runs of channels: 1/(sh*sw) of its bytes
// (an NCHW x is charged whole: gathering its samples is slower than im2col_gemm on strided 1x1
// layers, which keeps im2col_gemm ranked first there).
double gemm1x1_cost_us(const ConvProblem& pr) {
  const ConvDims d = conv_dims(pr);
  const Plan plan = plan_of(pr);
  double x_bytes = double(pr.input.nbytes());
  if (pr.direction != Direction::backward_data && dense_as(pr.input, Form::nhwc) &&
      !dense_as(pr.input, Form::nchw))
    x_bytes /= double(d.sh * d.sw);
  const double operands = x_bytes + double(pr.output.nbytes() + pr.weight.nbytes());
  const double math = math_time_us(d.macs(), pr.input.dtype(), pr.allow_tf32, 0.7);
  const int64_t calls = plan.form == Form::nhwc || plan.slices > 0 ? 1 : d.G;
  return std::max(math, memory_time_us(operands) / 0.8) +
         memory_time_us(2.0 * double(plan.workspace)) + double(calls) * kLaunchUs;
}

const std::vector<DType> kGemm1x1Types = {DType::f32, DType::f64, DType::f16, DType::bf16};

const auto gemm1x1_forward =
    register_conv_algorithm({"gemm_1x1", Direction::forward, true, kGemm1x1Types, gemm1x1_applies,
                             gemm1x1_workspace, gemm1x1_cost_us, run_gemm1x1});
const auto gemm1x1_backward_data =
    register_conv_algorithm({"gemm_1x1", Direction::backward_data, true, kGemm1x1Types,
                             gemm1x1_applies, gemm1x1_workspace, gemm1x1_cost_us, run_gemm1x1});
const auto gemm1x1_backward_filter =
    register_conv_algorithm({"gemm_1x1", Direction::backward_filter, true, kGemm1x1Types,
                             gemm1x1_applies, gemm1x1_workspace, gemm1x1_cost_us, run_gemm1x1});

}  // namespace
}  // namespace ember::cuda::conv
