// CUDA kernels of cross_entropy / nll_loss (cross_entropy_forward_kernel,
// cross_entropy_backward_kernel of kernel_interface/softmax.h):
//   forward, classes innermost: a warp per row (<= 1024 classes) or a block of up to 256 threads
//   per row (several blocks per SM) reads the row once: online max / sum, the target logit, and
//   with label smoothing the weighted logit sum;
//   forward, classes strided (inner > 1) and nll_loss: a thread per row;
//   backward: one pass over the logits, each element recomputing its softmax probability from the
//   saved log-sum-exp: tiles of a row in 16-byte vectors (several loads in flight per thread, the
//   row's coefficients loaded once per tile) when rows allow, else a flat pass per element.
// An out-of-range target is reported through the device error flag
// (kDeviceErrorClassIndexOutOfRange, details: the index and the class count) and its row is
// treated as ignored; no host sync. f16/bf16/f32 compute in float, f64 in double. Every kernel
// writes its output (gradients are never accumulated) and is deterministic.
#include "ember/cuda_kernels/softmax/launch.cuh"
#include "ember/tensor/runtime/device_errors.h"

namespace ember::cuda::softmax_impl {
namespace {

// Pointers and parameters of one call; A is the accumulation type (float, or double for f64),
// also the type of the per-row buffers and the weights.
template <typename A>
struct CeDevice {
  const void* input;
  void* grad;
  const int64_t* target;
  const A* weight;      // null: all ones
  const A* weight_sum;  // null: no weights (the sum is `classes`)
  A* loss;
  A* lse;
  A* target_weight;
  const A* row_scale;
  int64_t row_scale_stride;
  int64_t outer, classes, inner;
  int64_t ignore_index;
  A smoothing;
  bool log_probs;
  int* error_flag;

  __device__ __forceinline__ A weight_of(int64_t c) const {
    return weight != nullptr ? weight[c] : A(1);
  }
  __device__ __forceinline__ A weight_total() const {
    return weight_sum != nullptr ? *weight_sum : A(classes);
  }
};

// The class of a row whose target entry is t, or -1 when ignored or out of range (reported).
template <typename A>
__device__ __forceinline__ int64_t checked_target(const CeDevice<A>& a, int64_t t) {
  if (t == a.ignore_index) return -1;
  if (t < 0 || t >= a.classes) {
    report_device_error(a.error_flag, kDeviceErrorClassIndexOutOfRange, t, a.classes);
    return -1;
  }
  return t;
}
template <typename A>
__device__ __forceinline__ int64_t row_target(const CeDevice<A>& a, int64_t r) {
  return checked_target(a, a.target[r]);
}

// Writes the row's outputs from its log-sum-exp, target logit and sum_c w[c] * x[c].
template <typename A>
__device__ __forceinline__ void finish_row(const CeDevice<A>& a, int64_t r, int64_t t, A lse, A x_t,
                                           A weighted_sum) {
  a.lse[r] = lse;
  if (t < 0) {
    a.loss[r] = A(0);
    a.target_weight[r] = A(0);
    return;
  }
  const A wt = a.weight_of(t);
  A loss = (A(1) - a.smoothing) * wt * (lse - x_t);
  if (a.smoothing > A(0))
    loss += a.smoothing / A(a.classes) * (a.weight_total() * lse - weighted_sum);
  a.loss[r] = loss;
  a.target_weight[r] = wt;
}

// Threads per block of the cross-entropy row kernels: long rows get 256 threads (not one 1024-
// thread block per row), so several blocks share an SM and one's reduction and per-row tail (the
// target, the target logit, the row's outputs) overlap the others' loads, which 2 blocks of 1024
// threads per SM cannot do.
constexpr int kCeRowThreads = 256;
// 4 blocks per SM at most 64 registers (4 vectors in flight per thread).
constexpr int kCeRowBlocksPerSm = 4;

// Classes innermost (inner == 1), logits: a group of threads per row, the group a warp
// (rows_per_block = blockDim / 32 rows a block) or the whole block (rows_per_block = 1).
template <typename T>
__global__ void __launch_bounds__(kCeRowThreads, kCeRowBlocksPerSm)
    cross_entropy_rows_kernel(CeDevice<OpMath<T>> a, int rows_per_block, bool vec) {
  using A = OpMath<T>;
  __shared__ MaxSum<A> scratch[kWarpSize];
  __shared__ A wx_scratch[kWarpSize];
  const T* x = static_cast<const T*>(a.input);
  const int64_t rows = a.outer, C = a.classes;
  const bool warp_groups = rows_per_block > 1;
  const int64_t group = warp_groups ? threadIdx.x / kWarpSize : 0;
  const int rank = warp_groups ? threadIdx.x % kWarpSize : threadIdx.x;
  const int group_size = warp_groups ? kWarpSize : blockDim.x;
  const bool smoothing = a.smoothing > A(0);
  for (int64_t r0 = int64_t(blockIdx.x) * rows_per_block; r0 < rows;
       r0 += int64_t(gridDim.x) * rows_per_block) {
    const int64_t r = r0 + group;
    if (warp_groups && r >= rows) break;  // warps leave independently; no block barrier below
    const T* row = x + r * C;
    // The target entry is loaded before the row (its latency overlaps the row's loads) and checked
    // after it.
    const int64_t target_entry = rank == 0 ? a.target[r] : 0;
    MaxSum<A> st = maxsum_identity<A>();
    A wx = 0;  // sum_c w[c] * x[c], only with label smoothing
    visit_row<A>(row, 0, C, vec, rank, group_size, [&](const auto& v, int64_t c0) {
      maxsum_add_n(st, v);
      if (smoothing) {
#pragma unroll
        for (int j = 0; j < int(sizeof(v) / sizeof(A)); ++j) wx += a.weight_of(c0 + j) * v[j];
      }
    });
    // The target logit (just read by this group: a cache hit) is loaded before the reduction.
    const int64_t t = rank == 0 ? checked_target(a, target_entry) : -1;
    const A x_t = t >= 0 ? convert<A>(row[t]) : A(0);
    if (warp_groups) {
      st = warp_maxsum(st);
      if (smoothing) wx = warp_reduce(wx, SumOp());
    } else {
      st = block_maxsum(st, scratch);
      if (smoothing) wx = block_reduce(wx, SumOp(), A(0), wx_scratch);
    }
    if (rank == 0) finish_row(a, r, t, st.max + log_acc(st.sum), x_t, wx);
  }
}

// Any layout (element (n, c, s) at (n * C + c) * S + s), and nll_loss: a thread per row r = n*S+s.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    cross_entropy_columns_kernel(CeDevice<OpMath<T>> a) {
  using A = OpMath<T>;
  const T* x = static_cast<const T*>(a.input);
  const int64_t S = a.inner, C = a.classes, rows = a.outer * a.inner;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += step) {
    const int64_t n = r / S;
    const T* row = x + n * C * S + (r - n * S);  // class c at row[c * S]
    const int64_t t = row_target(a, r);
    const A x_t = t >= 0 ? convert<A>(row[t * S]) : A(0);
    if (a.log_probs) {
      finish_row(a, r, t, A(0), x_t, A(0));
      continue;
    }
    MaxSum<A> st = maxsum_identity<A>();
    A wx = 0;
    for (int64_t c = 0; c < C; ++c) {
      const A v = convert<A>(row[c * S]);
      maxsum_add(st, v);
      if (a.smoothing > A(0)) wx += a.weight_of(c) * v;
    }
    finish_row(a, r, t, st.max + log_acc(st.sum), x_t, wx);
  }
}

// What the gradient of every element of row r shares (see cpu_kernels/softmax.cpp for the
// formula).
template <typename A>
struct CeRowCoef {
  int64_t t;  // target class, -1 when ignored
  A scale;    // upstream gradient of the row
  A lse;
  A p_coef;  // (1 - eps) w[t] + eps / C * sum(w)
  A hit;     // (1 - eps) w[t]: subtracted at c == t
};

template <typename A>
__device__ __forceinline__ CeRowCoef<A> row_coefficients(const CeDevice<A>& a, int64_t r) {
  CeRowCoef<A> k;
  k.t = row_target(a, r);
  k.scale = a.row_scale[r * a.row_scale_stride];
  k.lse = a.lse[r];
  const A wt = k.t >= 0 ? a.weight_of(k.t) : A(1);
  k.p_coef = (A(1) - a.smoothing) * wt + a.smoothing / A(a.classes) * a.weight_total();
  k.hit = (A(1) - a.smoothing) * wt;
  return k;
}

template <typename A>
__device__ __forceinline__ A ce_grad(const CeDevice<A>& a, const CeRowCoef<A>& k, bool is_target,
                                     int64_t c, A x) {
  if (k.t < 0) return A(0);
  A d = is_target ? -k.hit : A(0);
  if (!a.log_probs) {
    d += exp_acc(x - k.lse) * k.p_coef;
    if (a.smoothing > A(0)) d -= a.smoothing / A(a.classes) * a.weight_of(c);
  }
  return k.scale * d;
}

// Backward, classes innermost in 16-byte vectors (inner == 1, classes % V == 0, aligned): the
// grid strides over tiles of kCeTileVectors * 256 vectors of one row; a tile's row coefficients
// are loaded once (the same addresses for the whole block), and each thread has kCeTileVectors
// 16-byte loads in flight (one per thread leaves too few loads in flight for memory speed).
constexpr int kCeTileVectors = 4;
template <typename T>
inline constexpr int kCeTileBlocksPerSm = std::is_same_v<T, double> ? 2 : 4;

template <typename T>
__global__ void __launch_bounds__(kBlockThreads, kCeTileBlocksPerSm<T>)
    cross_entropy_backward_rows_kernel(CeDevice<OpMath<T>> a, int64_t tiles_per_row) {
  using A = OpMath<T>;
  constexpr int V = kVec<T>;
  using Vec = AlignedVec<T, V>;
  constexpr int64_t kTile = int64_t(kBlockThreads) * kCeTileVectors;  // vectors
  const int64_t vectors_per_row = a.classes / V;
  const int64_t tiles = a.outer * tiles_per_row;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t r = tile / tiles_per_row;
    const int64_t first = (tile - r * tiles_per_row) * kTile + threadIdx.x;  // vector in the row
    const Vec* xr = static_cast<const Vec*>(a.input) + r * vectors_per_row;
    Vec* gr = static_cast<Vec*>(a.grad) + r * vectors_per_row;
    const CeRowCoef<A> k = row_coefficients(a, r);
    Vec in[kCeTileVectors];
#pragma unroll
    for (int u = 0; u < kCeTileVectors; ++u) {
      const int64_t i = first + int64_t(u) * kBlockThreads;
      if (i < vectors_per_row) in[u] = xr[i];
    }
#pragma unroll
    for (int u = 0; u < kCeTileVectors; ++u) {
      const int64_t i = first + int64_t(u) * kBlockThreads;
      if (i >= vectors_per_row) continue;
      const int64_t target_slot = k.t - i * V;  // in [0, V) when the target is in this vector
      Vec out;
#pragma unroll
      for (int j = 0; j < V; ++j)
        out.v[j] = convert<T>(ce_grad(a, k, target_slot == j, i * V + j, convert<A>(in[u].v[j])));
      gr[i] = out;
    }
  }
}

// Blocks per SM of the flat pass: one element per thread and grid-stride iteration, so memory-
// level parallelism comes from a full SM (2048 threads, 32 registers); f64 needs more registers.
template <typename T>
inline constexpr int kCeBackwardBlocksPerSm = std::is_same_v<T, double> ? 4 : 8;

// Backward, any layout (and rows that are not whole aligned vectors): one flat pass, element
// e -> (n, c, s) with by_a dividing by inner and by_b by classes.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads, kCeBackwardBlocksPerSm<T>)
    cross_entropy_backward_flat_kernel(CeDevice<OpMath<T>> a, bool use32, FastDivmod64 by_a,
                                       FastDivmod64 by_b) {
  using A = OpMath<T>;
  const T* x = static_cast<const T*>(a.input);
  T* gx = static_cast<T*>(a.grad);
  const int64_t C = a.classes, S = a.inner;
  const int64_t total = a.outer * C * S;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t e = tid; e < total; e += step) {
    const int64_t q = by_a.div(e, use32), s = e - q * S;
    const int64_t n = by_b.div(q, use32), c = q - n * C;
    const CeRowCoef<A> k = row_coefficients(a, n * S + s);
    gx[e] = convert<T>(ce_grad(a, k, c == k.t, c, convert<A>(x[e])));
  }
}

template <typename A>
CeDevice<A> make_ce_device(const CrossEntropyArgs& a) {
  auto ptr = [](const Tensor& t) -> A* { return t.defined() ? t.data<A>() : nullptr; };
  CeDevice<A> d{};
  d.input = a.input.data_ptr();
  d.grad = a.grad_input.defined() ? a.grad_input.data_ptr() : nullptr;
  d.target = a.target.data<int64_t>();
  d.weight = ptr(a.weight);
  d.weight_sum = a.weight.defined() ? ptr(a.weight_sum) : nullptr;
  d.loss = ptr(a.loss);
  d.lse = ptr(a.lse);
  d.target_weight = ptr(a.target_weight);
  d.row_scale = ptr(a.row_scale);
  d.row_scale_stride = a.row_scale_stride;
  d.outer = a.outer;
  d.classes = a.classes;
  d.inner = a.inner;
  d.ignore_index = a.ignore_index;
  d.smoothing = A(a.label_smoothing);
  d.log_probs = a.input_is_log_probs;
  d.error_flag = device_error_flag(a.input.device().index);
  return d;
}

template <typename T>
void launch_ce_forward(const CrossEntropyArgs& a, cudaStream_t stream) {
  const CeDevice<OpMath<T>> d = make_ce_device<OpMath<T>>(a);
  const int device = a.input.device().index;
  const int64_t rows = a.outer * a.inner;
  if (a.inner == 1 && !a.input_is_log_probs) {
    const int64_t V = kVec<T>;
    const bool vec = a.classes % V == 0 && is_aligned(a.input.data_ptr(), 16);
    if (a.classes <= 32 * kWarpSize) {
      const int rows_per_block = kWarpRowsPerBlock;
      const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
      cross_entropy_rows_kernel<T>
          <<<row_grid(blocks), rows_per_block * kWarpSize, 0, stream>>>(d, rows_per_block, vec);
    } else {
      const int threads = std::min(block_threads_for(a.classes, sizeof(T)), kCeRowThreads);
      cross_entropy_rows_kernel<T><<<row_grid(rows), threads, 0, stream>>>(d, 1, vec);
    }
  } else {
    cross_entropy_columns_kernel<T><<<grid_for(rows, device), kBlockThreads, 0, stream>>>(d);
  }
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void launch_ce_backward(const CrossEntropyArgs& a, cudaStream_t stream) {
  const CeDevice<OpMath<T>> d = make_ce_device<OpMath<T>>(a);
  const int64_t V = kVec<T>;
  const int64_t total = a.outer * a.classes * a.inner;
  const bool vec = a.inner == 1 && a.classes % V == 0 && is_aligned(a.input.data_ptr(), 16) &&
                   is_aligned(a.grad_input.data_ptr(), 16);
  const int device = a.input.device().index;
  if (vec) {
    const int64_t tile_vectors = int64_t(kBlockThreads) * kCeTileVectors;
    const int64_t tiles_per_row = (a.classes / V + tile_vectors - 1) / tile_vectors;
    const int64_t tiles = a.outer * tiles_per_row;
    cross_entropy_backward_rows_kernel<T>
        <<<grid_for(tiles * kBlockThreads, device, kCeTileBlocksPerSm<T>), kBlockThreads, 0,
           stream>>>(d, tiles_per_row);
  } else {
    const bool use32 = total <= std::numeric_limits<int32_t>::max();
    const FastDivmod64 by_a(a.inner, use32), by_b(a.classes, use32);
    cross_entropy_backward_flat_kernel<T>
        <<<grid_for(total, device, kCeBackwardBlocksPerSm<T>), kBlockThreads, 0, stream>>>(
            d, use32, by_a, by_b);
  }
  EMBER_CUDA_LAUNCH_CHECK();
}

void cross_entropy_forward_cuda(const CrossEntropyArgs& a) {
  if (a.outer * a.inner == 0) return;
  DeviceGuard device_guard(a.input.device());
  cudaStream_t stream = stream_of(a.input.device());
  dispatch_floating(a.input.dtype(), "cross_entropy",
                    [&](auto tag) { launch_ce_forward<decltype(tag)>(a, stream); });
}

void cross_entropy_backward_cuda(const CrossEntropyArgs& a) {
  if (a.grad_input.numel() == 0) return;
  DeviceGuard device_guard(a.input.device());
  cudaStream_t stream = stream_of(a.input.device());
  dispatch_floating(a.input.dtype(), "cross_entropy",
                    [&](auto tag) { launch_ce_backward<decltype(tag)>(a, stream); });
}

}  // namespace
}  // namespace ember::cuda::softmax_impl

namespace ember {
EMBER_REGISTER_KERNEL(cross_entropy_forward_kernel, CUDA, dispatch::kFloatingTypes,
                      &cuda::softmax_impl::cross_entropy_forward_cuda);
EMBER_REGISTER_KERNEL(cross_entropy_backward_kernel, CUDA, dispatch::kFloatingTypes,
                      &cuda::softmax_impl::cross_entropy_backward_cuda);
}  // namespace ember
