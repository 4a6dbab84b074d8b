// Direct conv2d kernels (no GEMM, no im2col), registered in the algorithm cache:
//   direct            any layout (reads and writes through strides), any dtype (f64 included), any
//                     stride / padding / dilation / groups, zero workspace: the fallback every
//                     problem has. forward: a thread per output element; backward_data: a thread
//                     per input element gathering the taps that reach it (no atomics);
//                     backward_filter: a block per weight element reducing over N*P*Q in a fixed
//                     order. Deterministic, slow.
//   depthwise_direct  depthwise (groups == C == K) in NHWC: a thread owns one 16-byte vector of
//                     channels and keeps its filter taps (up to 9) in registers, walking pixels;
//                     backward_data is the same kernel with the transposed index map;
//                     backward_filter accumulates every tap in registers, reduces the block in a
//                     fixed order and the pixel splits in a second kernel (deterministic).
// The 3-channel stem (7x7 stride 2) has no kernel of its own: im2col_gemm (a memory-bound unfold
// into 16-byte aligned rows, then cuBLAS) beats a CUDA-core direct kernel in every direction.
// Every direction OVERWRITES the tensor it writes. Accumulation is in fp32 (fp64 for f64).
#include <algorithm>

#include "ember/cuda_kernels/common/reduce.cuh"
#include "ember/cuda_kernels/conv/conv_common.cuh"

namespace ember::cuda::conv {
namespace {

// ---- direct (generic) -------------------------------------------------------------------------

struct DirectArgs {
  int64_t N, C, H, W, K, R, S, P, Q, Cg, Kg;
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t xs[4], ws[4], ys[4];  // element strides of input [N,C,H,W], weight, output [N,K,P,Q]
  bool channels_fastest;        // walk the written tensor with channels innermost (NHWC)
};

DirectArgs direct_args(const ConvProblem& pr) {
  const ConvDims d = conv_dims(pr);
  DirectArgs a{};
  a.N = d.N, a.C = d.C, a.H = d.H, a.W = d.W, a.K = d.K, a.R = d.R, a.S = d.S, a.P = d.P, a.Q = d.Q,
  a.Cg = d.Cg, a.Kg = d.Kg;
  a.sh = d.sh, a.sw = d.sw, a.ph = d.ph, a.pw = d.pw, a.dh = d.dh, a.dw = d.dw;
  for (int i = 0; i < 4; ++i) {
    a.xs[i] = pr.input.stride(i);
    a.ws[i] = pr.weight.stride(i);
    a.ys[i] = pr.output.stride(i);
  }
  a.channels_fastest = pr.written().suggest_memory_format() == MemoryFormat::channels_last;
  return a;
}

// Splits a flat index over [n, c, h, w] of sizes (-, C, H, W), channels innermost or outermost.
__device__ __forceinline__ void split_nchw(int64_t idx, int64_t C, int64_t H, int64_t W,
                                           bool channels_fastest, int64_t& n, int64_t& c,
                                           int64_t& h, int64_t& w) {
  if (channels_fastest) {
    c = idx % C;
    idx /= C;
    w = idx % W;
    idx /= W;
    h = idx % H;
    n = idx / H;
  } else {
    w = idx % W;
    idx /= W;
    h = idx % H;
    idx /= H;
    c = idx % C;
    n = idx / C;
  }
}

template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    conv2d_direct_forward_kernel(DirectArgs a, const T* __restrict__ x, const T* __restrict__ w,
                                 T* __restrict__ y, int64_t total) {
  using Acc = OpMath<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    int64_t n, k, p, q;
    split_nchw(idx, a.K, a.P, a.Q, a.channels_fastest, n, k, p, q);
    const int64_t group = k / a.Kg;
    const T* xn = x + n * a.xs[0] + group * a.Cg * a.xs[1];
    const T* wk = w + k * a.ws[0];
    Acc acc = 0;
    for (int64_t r = 0; r < a.R; ++r) {
      const int64_t h = p * a.sh - a.ph + r * a.dh;
      if (h < 0 || h >= a.H) continue;
      for (int64_t s = 0; s < a.S; ++s) {
        const int64_t ww = q * a.sw - a.pw + s * a.dw;
        if (ww < 0 || ww >= a.W) continue;
        const T* xp = xn + h * a.xs[2] + ww * a.xs[3];
        const T* wp = wk + r * a.ws[2] + s * a.ws[3];
        for (int64_t c = 0; c < a.Cg; ++c)
          acc += convert<Acc>(xp[c * a.xs[1]]) * convert<Acc>(wp[c * a.ws[1]]);
      }
    }
    y[n * a.ys[0] + k * a.ys[1] + p * a.ys[2] + q * a.ys[3]] = convert<T>(acc);
  }
}

// dx[n, c, h, w] = sum over k of its group and the taps (r, s) whose output position
// p = (h + ph - r * dh) / sh (exact division) lies in [0, P), likewise q.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    conv2d_direct_backward_data_kernel(DirectArgs a, T* __restrict__ dx, const T* __restrict__ w,
                                       const T* __restrict__ dy, int64_t total) {
  using Acc = OpMath<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += step) {
    int64_t n, c, h, ww;
    split_nchw(idx, a.C, a.H, a.W, a.channels_fastest, n, c, h, ww);
    const int64_t group = c / a.Cg, ci = c - group * a.Cg;
    const T* dyn = dy + n * a.ys[0] + group * a.Kg * a.ys[1];
    const T* wc = w + group * a.Kg * a.ws[0] + ci * a.ws[1];
    Acc acc = 0;
    for (int64_t r = 0; r < a.R; ++r) {
      const int64_t ph = h + a.ph - r * a.dh;
      if (ph < 0 || ph % a.sh != 0 || ph / a.sh >= a.P) continue;
      const int64_t p = ph / a.sh;
      for (int64_t s = 0; s < a.S; ++s) {
        const int64_t qw = ww + a.pw - s * a.dw;
        if (qw < 0 || qw % a.sw != 0 || qw / a.sw >= a.Q) continue;
        const int64_t q = qw / a.sw;
        const T* dyp = dyn + p * a.ys[2] + q * a.ys[3];
        const T* wp = wc + r * a.ws[2] + s * a.ws[3];
        for (int64_t k = 0; k < a.Kg; ++k)
          acc += convert<Acc>(dyp[k * a.ys[1]]) * convert<Acc>(wp[k * a.ws[0]]);
      }
    }
    dx[n * a.xs[0] + c * a.xs[1] + h * a.xs[2] + ww * a.xs[3]] = convert<T>(acc);
  }
}

// A block per weight element: dw[k, ci, r, s] = sum over (n, p, q) of dy * x, each thread summing
// a fixed strided subset, then a fixed-order block reduction.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    conv2d_direct_backward_filter_kernel(DirectArgs a, const T* __restrict__ x, T* __restrict__ dw,
                                         const T* __restrict__ dy, int64_t total) {
  using Acc = OpMath<T>;
  __shared__ Acc scratch[kWarpSize];
  const int64_t npq = a.N * a.P * a.Q;
  for (int64_t e = blockIdx.x; e < total; e += gridDim.x) {
    const int64_t s = e % a.S, r = (e / a.S) % a.R, ci = (e / (a.S * a.R)) % a.Cg;
    const int64_t k = e / (a.S * a.R * a.Cg);
    const int64_t c = (k / a.Kg) * a.Cg + ci;
    Acc acc = 0;
    for (int64_t i = threadIdx.x; i < npq; i += blockDim.x) {
      const int64_t q = i % a.Q, p = (i / a.Q) % a.P, n = i / (a.Q * a.P);
      const int64_t h = p * a.sh - a.ph + r * a.dh, ww = q * a.sw - a.pw + s * a.dw;
      if (h < 0 || h >= a.H || ww < 0 || ww >= a.W) continue;
      acc += convert<Acc>(dy[n * a.ys[0] + k * a.ys[1] + p * a.ys[2] + q * a.ys[3]]) *
             convert<Acc>(x[n * a.xs[0] + c * a.xs[1] + h * a.xs[2] + ww * a.xs[3]]);
    }
    acc = block_reduce(acc, SumOp(), Acc(0), scratch);
    if (threadIdx.x == 0)
      dw[k * a.ws[0] + ci * a.ws[1] + r * a.ws[2] + s * a.ws[3]] = convert<T>(acc);
  }
}

void run_direct(const ConvProblem& pr, void*, size_t) {
  const DirectArgs a = direct_args(pr);
  const Device dev = pr.device();
  cudaStream_t stream = stream_of(dev);
  dispatch_conv_dtype<true>(pr.input.dtype(), "direct", [&](auto tag) {
    using scalar_t = decltype(tag);
    const auto* x = static_cast<const scalar_t*>(pr.input.data_ptr());
    const auto* w = static_cast<const scalar_t*>(pr.weight.data_ptr());
    const auto* y = static_cast<const scalar_t*>(pr.output.data_ptr());
    if (pr.direction == Direction::forward) {
      const int64_t total = a.N * a.K * a.P * a.Q;
      conv2d_direct_forward_kernel<scalar_t>
          <<<grid_for(total, dev.index), kBlockThreads, 0, stream>>>(
              a, x, w, const_cast<scalar_t*>(y), total);
      EMBER_CUDA_LAUNCH_CHECK();
    } else if (pr.direction == Direction::backward_data) {
      const int64_t total = a.N * a.C * a.H * a.W;
      conv2d_direct_backward_data_kernel<scalar_t>
          <<<grid_for(total, dev.index), kBlockThreads, 0, stream>>>(a, const_cast<scalar_t*>(x), w,
                                                                     y, total);
      EMBER_CUDA_LAUNCH_CHECK();
    } else {
      const int64_t total = a.K * a.Cg * a.R * a.S;
      const unsigned blocks = unsigned(std::min<int64_t>(total, int64_t(sm_count(dev)) * 64));
      conv2d_direct_backward_filter_kernel<scalar_t>
          <<<blocks, kBlockThreads, 0, stream>>>(a, x, const_cast<scalar_t*>(w), y, total);
      EMBER_CUDA_LAUNCH_CHECK();
    }
  });
}

// Scalar loads through strides on CUDA cores: a few percent of fp32 peak; the filter gradient's
// block-per-element reduction is worse still.
double direct_cost_us(const ConvProblem& pr) {
  const double efficiency = pr.direction == Direction::backward_filter ? 0.01 : 0.03;
  return math_time_us(conv_dims(pr).macs(), DType::f32, false, efficiency) + kLaunchUs;
}

const auto direct_forward =
    register_conv_algorithm({"direct",
                             Direction::forward,
                             true,
                             {DType::f32, DType::f64, DType::f16, DType::bf16},
                             nullptr,
                             nullptr,
                             direct_cost_us,
                             run_direct});
const auto direct_backward_data =
    register_conv_algorithm({"direct",
                             Direction::backward_data,
                             true,
                             {DType::f32, DType::f64, DType::f16, DType::bf16},
                             nullptr,
                             nullptr,
                             direct_cost_us,
                             run_direct});
const auto direct_backward_filter =
    register_conv_algorithm({"direct",
                             Direction::backward_filter,
                             true,
                             {DType::f32, DType::f64, DType::f16, DType::bf16},
                             nullptr,
                             nullptr,
                             direct_cost_us,
                             run_direct});

// ---- depthwise, NHWC --------------------------------------------------------------------------

constexpr int kDepthwiseMaxTaps = 9;  // filters up to 3x3 (or 9x1, 1x9) stay in registers
constexpr int kDepthwiseThreads = 256;

// The kernel maps destination pixels to source pixels: forward reads x (src) for y (dst);
// backward_data reads dy (src) for dx (dst) through the transposed map.
struct DepthwiseArgs {
  int64_t N, C, CV;  // channels and 16-byte channel vectors
  int64_t src_h, src_w, dst_h, dst_w;
  int S, taps;
  int64_t sh, sw, ph, pw, dh, dw;
  bool transposed;
};

// Source coordinate of destination coordinate o at tap t along one axis, or false when the tap
// reaches no source element.
__device__ __forceinline__ bool depthwise_source(int64_t o, int64_t t, int64_t stride, int64_t pad,
                                                 int64_t dil, int64_t limit, bool transposed,
                                                 int64_t& src) {
  if (!transposed) {
    src = o * stride - pad + t * dil;
    return src >= 0 && src < limit;
  }
  const int64_t num = o + pad - t * dil;
  if (num < 0 || num % stride != 0) return false;
  src = num / stride;
  return src < limit;
}

template <typename T>
__global__ void __launch_bounds__(kDepthwiseThreads)
    depthwise_nhwc_kernel(DepthwiseArgs a, const T* __restrict__ src, const T* __restrict__ w,
                          T* __restrict__ dst) {
  constexpr int VEC = 16 / int(sizeof(T));
  using Vec = AlignedVec<T, VEC>;
  const int64_t cvec = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (cvec >= a.CV) return;  // no block-wide synchronisation below
  const int64_t c0 = cvec * VEC;
  float wr[kDepthwiseMaxTaps][VEC];
#pragma unroll
  for (int t = 0; t < kDepthwiseMaxTaps; ++t)
#pragma unroll
    for (int v = 0; v < VEC; ++v)
      wr[t][v] = t < a.taps ? convert<float>(w[(c0 + v) * a.taps + t]) : 0.f;

  const int64_t pixels = a.N * a.dst_h * a.dst_w;
  const int64_t step = int64_t(gridDim.x) * blockDim.y;
  for (int64_t pix = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; pix < pixels; pix += step) {
    const int64_t ow = pix % a.dst_w, oh = (pix / a.dst_w) % a.dst_h, n = pix / (a.dst_w * a.dst_h);
    float acc[VEC];
#pragma unroll
    for (int v = 0; v < VEC; ++v) acc[v] = 0.f;
#pragma unroll
    for (int t = 0; t < kDepthwiseMaxTaps; ++t) {
      if (t < a.taps) {
        const int r = t / a.S, s = t - r * a.S;
        int64_t ih, iw;
        if (depthwise_source(oh, r, a.sh, a.ph, a.dh, a.src_h, a.transposed, ih) &&
            depthwise_source(ow, s, a.sw, a.pw, a.dw, a.src_w, a.transposed, iw)) {
          const Vec in =
              *reinterpret_cast<const Vec*>(src + ((n * a.src_h + ih) * a.src_w + iw) * a.C + c0);
#pragma unroll
          for (int v = 0; v < VEC; ++v) acc[v] += convert<float>(in.v[v]) * wr[t][v];
        }
      }
    }
    Vec out;
#pragma unroll
    for (int v = 0; v < VEC; ++v) out.v[v] = convert<T>(acc[v]);
    *reinterpret_cast<Vec*>(dst + pix * a.C + c0) = out;
  }
}

// Partial filter gradients of one pixel split: partial[split][tap][c] (fp32), each tap reduced
// over the block's rows in a fixed order.
template <typename T>
__global__ void __launch_bounds__(kDepthwiseThreads)
    depthwise_nhwc_backward_filter_kernel(DepthwiseArgs a, const T* __restrict__ x,
                                          const T* __restrict__ dy, float* __restrict__ partial) {
  constexpr int VEC = 16 / int(sizeof(T));
  using Vec = AlignedVec<T, VEC>;
  __shared__ float rows[kDepthwiseThreads * VEC];
  const int64_t cvec = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  const bool active = cvec < a.CV;
  const int64_t c0 = cvec * VEC;
  float acc[kDepthwiseMaxTaps][VEC];
#pragma unroll
  for (int t = 0; t < kDepthwiseMaxTaps; ++t)
#pragma unroll
    for (int v = 0; v < VEC; ++v) acc[t][v] = 0.f;

  // Here dst is the output gradient's grid (P x Q) and src the input's (H x W).
  const int64_t pixels = a.N * a.dst_h * a.dst_w;
  const int64_t step = int64_t(gridDim.x) * blockDim.y;
  for (int64_t pix = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; active && pix < pixels;
       pix += step) {
    const int64_t oq = pix % a.dst_w, op = (pix / a.dst_w) % a.dst_h, n = pix / (a.dst_w * a.dst_h);
    const Vec g = *reinterpret_cast<const Vec*>(dy + pix * a.C + c0);
    float gf[VEC];
#pragma unroll
    for (int v = 0; v < VEC; ++v) gf[v] = convert<float>(g.v[v]);
#pragma unroll
    for (int t = 0; t < kDepthwiseMaxTaps; ++t) {
      if (t < a.taps) {
        const int r = t / a.S, s = t - r * a.S;
        int64_t ih, iw;
        if (depthwise_source(op, r, a.sh, a.ph, a.dh, a.src_h, false, ih) &&
            depthwise_source(oq, s, a.sw, a.pw, a.dw, a.src_w, false, iw)) {
          const Vec in =
              *reinterpret_cast<const Vec*>(x + ((n * a.src_h + ih) * a.src_w + iw) * a.C + c0);
#pragma unroll
          for (int v = 0; v < VEC; ++v) acc[t][v] += gf[v] * convert<float>(in.v[v]);
        }
      }
    }
  }
  const int lane_row = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
  for (int t = 0; t < kDepthwiseMaxTaps; ++t) {
    if (t >= a.taps) break;  // uniform over the block
#pragma unroll
    for (int v = 0; v < VEC; ++v) rows[lane_row * VEC + v] = acc[t][v];
    __syncthreads();
    if (threadIdx.y == 0 && active) {
      float sum[VEC];
#pragma unroll
      for (int v = 0; v < VEC; ++v) sum[v] = 0.f;
      for (unsigned row = 0; row < blockDim.y; ++row)
#pragma unroll
        for (int v = 0; v < VEC; ++v) sum[v] += rows[(row * blockDim.x + threadIdx.x) * VEC + v];
      float* out = partial + (int64_t(blockIdx.x) * a.taps + t) * a.C + c0;
#pragma unroll
      for (int v = 0; v < VEC; ++v) out[v] = sum[v];
    }
    __syncthreads();
  }
}

// dw[c, 0, r, s] = sum over splits of partial[split][tap][c], in split order.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    depthwise_filter_reduce_kernel(const float* __restrict__ partial, int64_t splits, int64_t taps,
                                   int64_t C, int S, int64_t ws0, int64_t ws2, int64_t ws3,
                                   T* __restrict__ dw) {
  const int64_t total = taps * C;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t c = i % C, t = i / C;
    float sum = 0.f;
    for (int64_t sp = 0; sp < splits; ++sp) sum += partial[(sp * taps + t) * C + c];
    dw[c * ws0 + (t / S) * ws2 + (t % S) * ws3] = convert<T>(sum);
  }
}

struct DepthwiseLaunch {
  dim3 block, grid;
  int64_t splits = 1;  // backward_filter: pixel splits, each writing a partial
};

DepthwiseLaunch depthwise_launch(const ConvProblem& pr) {
  const ConvDims d = conv_dims(pr);
  const int64_t vec = 16 / int64_t(pr.input.element_size());
  const int64_t cv = d.C / vec;
  const unsigned bx = unsigned(std::min<int64_t>(cv, 32));
  const unsigned by = unsigned(kDepthwiseThreads) / bx;
  DepthwiseLaunch l;
  l.block = dim3(bx, by);
  const int64_t channel_blocks = (cv + bx - 1) / bx;
  const int64_t dst_pixels = pr.direction == Direction::backward_data ? d.NHW() : d.NPQ();
  const int64_t sms = sm_count(pr.device());
  int64_t pixel_blocks = std::max<int64_t>(
      1, std::min<int64_t>((dst_pixels + by - 1) / by, sms * 8 / channel_blocks + 1));
  if (pr.direction == Direction::backward_filter) {
    // Enough splits to fill the GPU twice, each walking at least 64 rows of pixels.
    pixel_blocks = std::clamp<int64_t>((dst_pixels + by * 64 - 1) / (by * 64), 1,
                                       std::max<int64_t>(1, 2 * sms / channel_blocks));
  }
  l.grid = dim3(unsigned(std::min<int64_t>(pixel_blocks, 65535)), unsigned(channel_blocks));
  l.splits = l.grid.x;
  return l;
}

bool depthwise_applies(const ConvProblem& pr) {
  const ConvDims d = conv_dims(pr);
  const int64_t vec = 16 / int64_t(pr.input.element_size());
  return d.depthwise() && d.RS() <= kDepthwiseMaxTaps && d.C % vec == 0 &&
         d.C / vec <= 65535 * 32 && operand_alignment(pr) == 16 &&
         (dense_as(pr.weight, Form::nchw) || dense_as(pr.weight, Form::nhwc));
}

size_t depthwise_workspace(const ConvProblem& pr) {
  WorkspacePlan plan;
  if (pr.direction != Direction::backward_filter) {
    plan.add(staging_bytes(pr.input, Form::nhwc));
    plan.add(staging_bytes(pr.output, Form::nhwc));
  } else {
    plan.add(staging_bytes(pr.input, Form::nhwc));
    plan.add(staging_bytes(pr.output, Form::nhwc));
    const ConvDims d = conv_dims(pr);
    plan.add(size_t(depthwise_launch(pr).splits) * size_t(d.RS() * d.C) * sizeof(float));
  }
  return plan.bytes;
}

void run_depthwise(const ConvProblem& pr, void* workspace, size_t workspace_bytes) {
  const ConvDims d = conv_dims(pr);
  WorkspaceArena arena(workspace, workspace_bytes);
  const DepthwiseLaunch l = depthwise_launch(pr);
  cudaStream_t stream = stream_of(pr.device());
  DepthwiseArgs a{};
  a.N = d.N;
  a.C = d.C;
  a.CV = d.C / (16 / int64_t(pr.input.element_size()));
  a.S = int(d.S);
  a.taps = int(d.RS());
  a.sh = d.sh, a.sw = d.sw, a.ph = d.ph, a.pw = d.pw, a.dh = d.dh, a.dw = d.dw;
  dispatch_conv_dtype(pr.input.dtype(), "depthwise_direct", [&](auto tag) {
    using T = decltype(tag);
    const T* w = static_cast<const T*>(pr.weight.data_ptr());
    if (pr.direction == Direction::forward) {
      Tensor x = stage_read(pr.input, Form::nhwc, arena);
      Tensor y = stage_write(pr.output, Form::nhwc, arena);
      a.src_h = d.H, a.src_w = d.W, a.dst_h = d.P, a.dst_w = d.Q, a.transposed = false;
      depthwise_nhwc_kernel<T><<<l.grid, l.block, 0, stream>>>(
          a, static_cast<const T*>(x.data_ptr()), w, static_cast<T*>(y.data_ptr()));
      EMBER_CUDA_LAUNCH_CHECK();
      finish_write(pr.output, y);
    } else if (pr.direction == Direction::backward_data) {
      Tensor dy = stage_read(pr.output, Form::nhwc, arena);
      Tensor dx = stage_write(pr.input, Form::nhwc, arena);
      a.src_h = d.P, a.src_w = d.Q, a.dst_h = d.H, a.dst_w = d.W, a.transposed = true;
      depthwise_nhwc_kernel<T><<<l.grid, l.block, 0, stream>>>(
          a, static_cast<const T*>(dy.data_ptr()), w, static_cast<T*>(dx.data_ptr()));
      EMBER_CUDA_LAUNCH_CHECK();
      finish_write(pr.input, dx);
    } else {
      Tensor x = stage_read(pr.input, Form::nhwc, arena);
      Tensor dy = stage_read(pr.output, Form::nhwc, arena);
      auto* partial =
          static_cast<float*>(arena.take(size_t(l.splits) * size_t(d.RS() * d.C) * sizeof(float)));
      a.src_h = d.H, a.src_w = d.W, a.dst_h = d.P, a.dst_w = d.Q, a.transposed = false;
      depthwise_nhwc_backward_filter_kernel<T><<<l.grid, l.block, 0, stream>>>(
          a, static_cast<const T*>(x.data_ptr()), static_cast<const T*>(dy.data_ptr()), partial);
      EMBER_CUDA_LAUNCH_CHECK();
      const int64_t total = d.RS() * d.C;
      depthwise_filter_reduce_kernel<T>
          <<<grid_for(total, pr.device().index), kBlockThreads, 0, stream>>>(
              partial, l.splits, d.RS(), d.C, int(d.S), pr.weight.stride(0), pr.weight.stride(2),
              pr.weight.stride(3), static_cast<T*>(pr.weight.data_ptr()));
      EMBER_CUDA_LAUNCH_CHECK();
    }
  });
}

// Bandwidth-bound: both activations once (plus staging copies) at about half the copy rate.
double depthwise_cost_us(const ConvProblem& pr) {
  const double bytes = double(pr.input.nbytes() + pr.output.nbytes());
  const double staging =
      double(staging_bytes(pr.input, Form::nhwc) + staging_bytes(pr.output, Form::nhwc));
  return memory_time_us(bytes) / 0.5 + memory_time_us(2 * staging) + 2 * kLaunchUs;
}

const auto depthwise_forward = register_conv_algorithm({"depthwise_direct",
                                                        Direction::forward,
                                                        true,
                                                        {DType::f32, DType::f16, DType::bf16},
                                                        depthwise_applies,
                                                        depthwise_workspace,
                                                        depthwise_cost_us,
                                                        run_depthwise});
const auto depthwise_backward_data = register_conv_algorithm({"depthwise_direct",
                                                              Direction::backward_data,
                                                              true,
                                                              {DType::f32, DType::f16, DType::bf16},
                                                              depthwise_applies,
                                                              depthwise_workspace,
                                                              depthwise_cost_us,
                                                              run_depthwise});
const auto depthwise_backward_filter =
    register_conv_algorithm({"depthwise_direct",
                             Direction::backward_filter,
                             true,
                             {DType::f32, DType::f16, DType::bf16},
                             depthwise_applies,
                             depthwise_workspace,
                             depthwise_cost_us,
                             run_depthwise});

}  // namespace
}  // namespace ember::cuda::conv
