// CUDA reductions behind reduce_kernel (kernel_interface/): sum, mean, prod, max/min (with
// indices), argmax/argmin, var and amax_abs over a dense input viewed as [outer, reduce, inner].
//  - inner == 1 (row reductions): a group of up to 32 lanes per row (a warp, or fewer lanes for
//    short rows) combined with warp shuffles, or a 256-thread block per row for rows longer than
//    2048 loads, combined with shuffles and shared memory. Rows of whole 16-byte vectors are read
//    with vector loads.
//  - inner > 1 (column reductions): threads across inner (coalesced), the rest of the block
//    across the reduce dim, combined in shared memory.
// When the outputs alone cannot fill the GPU (a full sum, the batch-dim sum of a [4096, 16]
// gradient) the reduce dim is also split across blocks (grid.y); each block writes its partial
// state to a workspace and a second kernel merges the partials of each output in a fixed order.
// No atomics anywhere, so results are deterministic run to run.
// Accumulation: fp32 for f16/bf16/f32, fp64 for f64, int64 for integral types (as the CPU kernel:
// the same dtype coverage, integer sums wrap, integer means truncate). var uses Welford within a
// thread (one Chan merge per vector load on the vectorized path) and Chan's formula across
// threads; max/min/argmax/argmin propagate NaN (the first NaN wins) and break ties by the
// smallest index; mean divides in the accumulation type.
#include <limits>

#include "ember/cuda_kernels/common/common.cuh"
#include "ember/kernel_interface/reduce.h"
#include "ember/tensor/runtime/cuda_device.h"

namespace ember::cuda {
namespace {

// The running state of one output. sum/mean/prod: a = the running value. max/min/argmax/argmin/
// amax_abs: a = best value, n = its index. var: a = mean, b = M2, n = count.
template <typename A>
struct ReduceState {
  A a;
  A b;
  int64_t n;
};

template <typename T>
struct Reducer {
  using acc_t = OpMath<T>;
  using State = ReduceState<acc_t>;
  static constexpr bool kFloating = std::is_floating_point_v<acc_t>;
  ReduceOp op;
  int64_t reduce;      // the length of the reduced dim (mean's divisor)
  int64_t correction;  // var: divide M2 by max(count - correction, 0)

  __device__ __forceinline__ State init() const {
    State s{acc_t(0), acc_t(0), 0};
    switch (op) {
      case ReduceOp::prod:
        s.a = acc_t(1);
        break;
      case ReduceOp::max:
      case ReduceOp::argmax:
        s.a = kFloating ? -std::numeric_limits<acc_t>::infinity()
                        : std::numeric_limits<acc_t>::lowest();
        s.n = std::numeric_limits<int64_t>::max();
        break;
      case ReduceOp::min:
      case ReduceOp::argmin:
        s.a =
            kFloating ? std::numeric_limits<acc_t>::infinity() : std::numeric_limits<acc_t>::max();
        s.n = std::numeric_limits<int64_t>::max();
        break;
      case ReduceOp::amax_abs:
        s.n = std::numeric_limits<int64_t>::max();
        break;
      default:
        break;
    }
    return s;
  }

  // Whether (v, i) beats the current best (cur, ci): NaN beats numbers, then the larger (or
  // smaller) value, then the smaller index; so merging partial results in any order gives the
  // first index of the extreme value, or of the first NaN.
  __device__ __forceinline__ static bool beats(bool is_max, acc_t v, int64_t i, acc_t cur,
                                               int64_t ci) {
    if (is_nan(cur)) return is_nan(v) && i < ci;
    if (is_nan(v)) return true;
    if (v == cur) return i < ci;
    return is_max ? v > cur : v < cur;
  }

  __device__ __forceinline__ void add(State& s, acc_t x, int64_t i) const {
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::mean:
        s.a += x;
        break;
      case ReduceOp::prod:
        s.a *= x;
        break;
      case ReduceOp::max:
      case ReduceOp::argmax:
        if (beats(true, x, i, s.a, s.n)) {
          s.a = x;
          s.n = i;
        }
        break;
      case ReduceOp::min:
      case ReduceOp::argmin:
        if (beats(false, x, i, s.a, s.n)) {
          s.a = x;
          s.n = i;
        }
        break;
      case ReduceOp::amax_abs: {
        const acc_t ax = x < acc_t(0) ? -x : x;
        if (beats(true, ax, std::numeric_limits<int64_t>::max(), s.a, s.n)) s.a = ax;
        break;
      }
      case ReduceOp::var:
        if constexpr (kFloating) {  // Welford
          s.n += 1;
          const acc_t delta = x - s.a;
          s.a += delta / acc_t(s.n);
          s.b += delta * (x - s.a);
        }
        break;
    }
  }

  // The V elements of one aligned vector load, starting at index `first`. var folds them in with
  // one Chan merge (their own mean and M2) instead of a Welford division per element.
  template <int V>
  __device__ __forceinline__ void add_vector(State& s, const AlignedVec<T, V>& v,
                                             int64_t first) const {
    if constexpr (kFloating) {
      if (op == ReduceOp::var) {
        acc_t x[V];
        acc_t sum = acc_t(0);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          x[j] = convert<acc_t>(v.v[j]);
          sum += x[j];
        }
        const acc_t mean = sum / acc_t(V);
        acc_t m2 = acc_t(0);
#pragma unroll
        for (int j = 0; j < V; ++j) m2 += (x[j] - mean) * (x[j] - mean);
        merge(s, State{mean, m2, V});
        return;
      }
    }
#pragma unroll
    for (int j = 0; j < V; ++j) add(s, convert<acc_t>(v.v[j]), first + j);
  }

  __device__ __forceinline__ void merge(State& s, const State& o) const {
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::mean:
        s.a += o.a;
        break;
      case ReduceOp::prod:
        s.a *= o.a;
        break;
      case ReduceOp::max:
      case ReduceOp::argmax:
      case ReduceOp::amax_abs:
        if (beats(true, o.a, o.n, s.a, s.n)) {
          s.a = o.a;
          s.n = o.n;
        }
        break;
      case ReduceOp::min:
      case ReduceOp::argmin:
        if (beats(false, o.a, o.n, s.a, s.n)) {
          s.a = o.a;
          s.n = o.n;
        }
        break;
      case ReduceOp::var:
        if constexpr (kFloating) {  // Chan et al.
          if (o.n == 0) break;
          if (s.n == 0) {
            s = o;
            break;
          }
          const int64_t n = s.n + o.n;
          const acc_t delta = o.a - s.a;
          const acc_t w = acc_t(o.n) / acc_t(n);
          s.a += delta * w;
          s.b += o.b + delta * delta * acc_t(s.n) * w;
          s.n = n;
        }
        break;
    }
  }

  __device__ __forceinline__ void store(const State& s, void* out, int64_t* indices,
                                        int64_t o) const {
    if (op == ReduceOp::argmax || op == ReduceOp::argmin) {
      static_cast<int64_t*>(out)[o] = s.n;
      return;
    }
    acc_t value = s.a;
    if constexpr (kFloating) {
      if (op == ReduceOp::mean) value = s.a / acc_t(reduce);
      if (op == ReduceOp::var) {
        const int64_t divisor = s.n - correction > 0 ? s.n - correction : 0;
        value = s.b / acc_t(divisor);  // 0/0 = NaN, M2/0 = inf, as PyTorch
      }
    }
    if constexpr (!kFloating) {
      // Integer means: the exact (wrapping) int64 sum over the count, truncated toward zero.
      if (op == ReduceOp::mean) {
        static_cast<T*>(out)[o] = static_cast<T>(double(s.a) / double(reduce));
        return;
      }
    }
    static_cast<T*>(out)[o] = convert<T>(value);
    if (indices != nullptr && (op == ReduceOp::max || op == ReduceOp::min)) indices[o] = s.n;
  }
};

// The state of lane (lane ^ lane_mask); only the fields `op` merges travel (sum needs one shuffle,
// not four).
template <typename T>
__device__ __forceinline__ ReduceState<OpMath<T>> shfl_xor_state(const Reducer<T>& r,
                                                                 const ReduceState<OpMath<T>>& s,
                                                                 int lane_mask) {
  ReduceState<OpMath<T>> o = s;
  o.a = __shfl_xor_sync(0xffffffffu, s.a, lane_mask);
  if (r.op == ReduceOp::var) o.b = __shfl_xor_sync(0xffffffffu, s.b, lane_mask);
  if (r.op == ReduceOp::var || r.op == ReduceOp::max || r.op == ReduceOp::min ||
      r.op == ReduceOp::argmax || r.op == ReduceOp::argmin)
    o.n = __shfl_xor_sync(0xffffffffu, s.n, lane_mask);
  return o;
}

// How the [outer, reduce, inner] problem maps onto blocks (chosen on the host, see plan_reduce).
struct ReduceConfig {
  int64_t outer = 1, reduce = 1, inner = 1;
  bool row_mode = true;     // inner == 1: threadIdx.x walks the row, threadIdx.y picks the row
  bool vectorized = false;  // row mode: 16-byte loads (rows and chunks are whole vectors)
  int block_x = 32, block_y = 8;  // power-of-two sizes, block_x * block_y == kBlockThreads
  int64_t inner_blocks = 1;       // column mode: blocks across inner per outer index
  int splits = 1;                 // blocks across the reduce dim (grid.y)
  int64_t chunk = 1;              // reduce elements per split
};

// s accumulates p[i * stride] for i = begin, begin + step, ... < end, with kLoads loads in flight.
template <int kLoads, typename T>
__device__ __forceinline__ void accumulate_range(const Reducer<T>& r, ReduceState<OpMath<T>>& s,
                                                 const T* p, int64_t stride, int64_t begin,
                                                 int64_t end, int64_t step) {
  using acc_t = OpMath<T>;
  int64_t i = begin;
  for (; i + (kLoads - 1) * step < end; i += kLoads * step) {
    acc_t v[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) v[u] = convert<acc_t>(p[(i + u * step) * stride]);
#pragma unroll
    for (int u = 0; u < kLoads; ++u) r.add(s, v[u], i + u * step);
  }
  for (; i < end; i += step) r.add(s, convert<acc_t>(p[i * stride]), i);
}

// Same over whole 16-byte vectors [begin_v, end_v) of a row (vector i holds elements i*V..).
template <typename T>
__device__ __forceinline__ void accumulate_vectors(const Reducer<T>& r, ReduceState<OpMath<T>>& s,
                                                   const T* row, int64_t begin_v, int64_t end_v,
                                                   int64_t step) {
  constexpr int V = 16 / sizeof(T);
  using Vec = AlignedVec<T, V>;
  const Vec* p = reinterpret_cast<const Vec*>(row);
  int64_t i = begin_v;
  for (; i + 3 * step < end_v; i += 4 * step) {
    const Vec v0 = p[i], v1 = p[i + step], v2 = p[i + 2 * step], v3 = p[i + 3 * step];
    r.add_vector(s, v0, i * V);
    r.add_vector(s, v1, (i + step) * V);
    r.add_vector(s, v2, (i + 2 * step) * V);
    r.add_vector(s, v3, (i + 3 * step) * V);
  }
  for (; i < end_v; i += step) r.add_vector(s, p[i], i * V);
}

// One pass over the input. With splits == 1 it writes the outputs; otherwise the partial state of
// (output, split) goes to partials[output * splits + split].
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    reduce_dense_kernel(Reducer<T> r, ReduceConfig c, const T* in, void* out, int64_t* indices,
                        ReduceState<OpMath<T>>* partials) {
  using State = ReduceState<OpMath<T>>;
  __shared__ State smem[kBlockThreads];
  const int x = threadIdx.x, y = threadIdx.y;
  const int64_t begin = int64_t(blockIdx.y) * c.chunk;
  const int64_t end = begin + c.chunk < c.reduce ? begin + c.chunk : c.reduce;
  State s = r.init();
  int64_t out_index = 0;
  bool valid = false, leader = false;
  if (c.row_mode) {
    out_index = int64_t(blockIdx.x) * c.block_y + y;
    valid = out_index < c.outer;
    if (valid) {
      constexpr int V = 16 / sizeof(T);
      if (c.vectorized)
        accumulate_vectors(r, s, in + out_index * c.reduce, begin / V + x, end / V, c.block_x);
      else
        accumulate_range<4>(r, s, in + out_index * c.reduce, 1, begin + x, end, c.block_x);
    }
    // Lanes of one row are adjacent within a warp: butterfly over min(block_x, 32) lanes.
    for (int m = (c.block_x < 32 ? c.block_x : 32) / 2; m > 0; m /= 2)
      r.merge(s, shfl_xor_state(r, s, m));
    if (c.block_x > 32) {  // a block per row (block_y == 1): combine the warps' results
      if (x % 32 == 0) smem[x / 32] = s;
      __syncthreads();
      if (x == 0)
        for (int w = 1; w < c.block_x / 32; ++w) r.merge(s, smem[w]);
    }
    leader = x == 0;
  } else {
    const int64_t outer_index = int64_t(blockIdx.x) / c.inner_blocks;
    const int64_t col = (int64_t(blockIdx.x) % c.inner_blocks) * c.block_x + x;
    out_index = outer_index * c.inner + col;
    valid = col < c.inner;
    if (valid)
      // Each warp reads only 32 elements per load here: keep 8 loads in flight per thread.
      accumulate_range<8>(r, s, in + outer_index * c.reduce * c.inner + col, c.inner, begin + y,
                          end, c.block_y);
    smem[y * c.block_x + x] = s;
    __syncthreads();
    for (int half = c.block_y / 2; half > 0; half /= 2) {
      if (y < half) {
        State o = smem[(y + half) * c.block_x + x];
        r.merge(s, o);
        smem[y * c.block_x + x] = s;
      }
      __syncthreads();
    }
    leader = y == 0;
  }
  if (!valid || !leader) return;
  if (c.splits == 1)
    r.store(s, out, indices, out_index);
  else
    partials[out_index * c.splits + blockIdx.y] = s;
}

// Second pass: a warp per output merges its partials (lane l takes splits l, l + 32, ...), then
// a butterfly; fixed order, so deterministic.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    reduce_partials_kernel(Reducer<T> r, const ReduceState<OpMath<T>>* partials, int splits,
                           int64_t num_outputs, void* out, int64_t* indices) {
  const int64_t o = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (o >= num_outputs) return;  // uniform per warp
  ReduceState<OpMath<T>> s = r.init();
  for (int i = lane; i < splits; i += 32) r.merge(s, partials[o * splits + i]);
  for (int m = 16; m > 0; m /= 2) r.merge(s, shfl_xor_state(r, s, m));
  if (lane == 0) r.store(s, out, indices, o);
}

int next_pow2(int64_t v) {
  int p = 1;
  while (p < v && p < (1 << 30)) p *= 2;
  return p;
}

// vec: elements per 16-byte vector; aligned: the input pointer is 16-byte aligned.
ReduceConfig plan_reduce(ReduceShape shape, int device, int vec, bool aligned) {
  ReduceConfig c;
  c.outer = shape.outer;
  c.reduce = shape.reduce;
  c.inner = shape.inner;
  int64_t output_blocks = 0;
  int threads_along_reduce = 0;
  if (shape.inner == 1) {
    c.row_mode = true;
    // Every row starts on a vector boundary when the base does and the length is whole vectors.
    c.vectorized = aligned && shape.reduce % vec == 0 && shape.reduce >= 2 * vec;
    const int64_t units = c.vectorized ? shape.reduce / vec : shape.reduce;  // loads per row
    // Short rows: enough lanes for about four loads each (fewer lanes, fewer shuffle rounds); a
    // warp per row up to 2048 loads (a block per 16 KiB row spends more on its barrier and
    // launch than on the row); a block per row beyond.
    c.block_x = units <= 128    ? std::min(next_pow2((units + 3) / 4), 32)
                : units <= 2048 ? 32
                                : kBlockThreads;
    c.block_y = kBlockThreads / c.block_x;
    output_blocks = (shape.outer + c.block_y - 1) / c.block_y;
    threads_along_reduce = c.block_x;
  } else {
    c.row_mode = false;
    c.block_x = std::min(next_pow2(shape.inner), 32);
    c.block_y = kBlockThreads / c.block_x;
    c.inner_blocks = (shape.inner + c.block_x - 1) / c.block_x;
    output_blocks = shape.outer * c.inner_blocks;
    threads_along_reduce = c.block_y;
  }
  // Split the reduce dim when the outputs leave SMs idle, keeping >= 16 elements (or 4 vectors)
  // per thread.
  const int64_t target_blocks =
      int64_t(std::max(device_properties(device).sm_count, 1)) * kBlocksPerSm;
  const int64_t min_chunk = int64_t(threads_along_reduce) * (c.vectorized ? 4 * vec : 16);
  int64_t splits = 1;
  if (output_blocks < target_blocks && shape.reduce > min_chunk) {
    splits = std::min<int64_t>((target_blocks + output_blocks - 1) / output_blocks,
                               (shape.reduce + min_chunk - 1) / min_chunk);
    splits = std::min<int64_t>(splits, 65535);
  }
  c.chunk = std::max<int64_t>(1, (shape.reduce + splits - 1) / splits);
  if (c.vectorized) c.chunk = (c.chunk + vec - 1) / vec * vec;  // splits start on vector boundaries
  c.splits = shape.reduce > 0 ? int((shape.reduce + c.chunk - 1) / c.chunk) : 1;
  return c;
}

template <typename T>
void launch_reduce(const Tensor& out, const Tensor* indices, const Tensor& in, ReduceShape shape,
                   ReduceOp op, int64_t correction, cudaStream_t stream) {
  using State = ReduceState<OpMath<T>>;
  const int device = in.device().index;
  const Reducer<T> r{op, shape.reduce, correction};
  const ReduceConfig c =
      plan_reduce(shape, device, int(16 / sizeof(T)), is_aligned(in.data_ptr(), 16));
  const int64_t num_outputs = shape.outer * shape.inner;
  const int64_t output_blocks =
      c.row_mode ? (shape.outer + c.block_y - 1) / c.block_y : shape.outer * c.inner_blocks;
  EMBER_CHECK_STATUS(output_blocks < int64_t(std::numeric_limits<int32_t>::max()), not_supported,
                     "reduce op ", reduce_op_name(op), ": ", num_outputs,
                     " outputs need more CUDA blocks than a grid holds; reduce in pieces");
  const T* in_ptr = static_cast<const T*>(in.data_ptr());
  int64_t* idx_ptr = indices != nullptr ? static_cast<int64_t*>(indices->data_ptr()) : nullptr;
  Tensor workspace;
  State* partials = nullptr;
  if (c.splits > 1) {
    workspace =
        empty({int64_t(num_outputs * c.splits * int64_t(sizeof(State)))}, DType::u8, in.device());
    partials = static_cast<State*>(workspace.data_ptr());
  }
  const dim3 grid(unsigned(output_blocks), unsigned(c.splits));
  const dim3 block(unsigned(c.block_x), unsigned(c.block_y));
  reduce_dense_kernel<T>
      <<<grid, block, 0, stream>>>(r, c, in_ptr, out.data_ptr(), idx_ptr, partials);
  EMBER_CUDA_LAUNCH_CHECK();
  if (c.splits > 1) {
    const int64_t warps_per_block = kBlockThreads / 32;
    const int64_t blocks = (num_outputs + warps_per_block - 1) / warps_per_block;
    reduce_partials_kernel<T><<<unsigned(blocks), kBlockThreads, 0, stream>>>(
        r, partials, c.splits, num_outputs, out.data_ptr(), idx_ptr);
    EMBER_CUDA_LAUNCH_CHECK();
  }
  // `workspace` is released here; the stream-ordered allocator reuses it only for later work.
}

void reduce_cuda(const Tensor& out, const Tensor* indices, const Tensor& in, ReduceShape shape,
                 ReduceOp op, int64_t correction) {
  const DType dtype = in.dtype();
  const char* name = reduce_op_name(op);
  if (shape.outer * shape.inner == 0) return;  // nothing to write (checked first, as on the CPU)
  // The CPU kernel's coverage: var needs a floating dtype; bool has no sum, mean or prod.
  EMBER_CHECK_STATUS(is_floating(dtype) || op != ReduceOp::var, not_supported, "reduce op ", name,
                     ": dtype ", dtype_name(dtype),
                     " is not supported on CUDA; convert the input to a floating dtype first");
  EMBER_CHECK_STATUS(
      dtype != DType::boolean ||
          (op != ReduceOp::sum && op != ReduceOp::mean && op != ReduceOp::prod),
      not_supported, "reduce op ", name,
      ": dtype bool is not supported on CUDA; convert the bool tensor to int64 first");
  EMBER_CHECK(is_floating(dtype) || op != ReduceOp::mean || shape.reduce > 0,
              "reduce op mean: the mean of an empty ", dtype_name(dtype),
              " reduction is NaN, which the integer output cannot hold; reduce over a non-empty "
              "dim or convert the input to a floating dtype");
  const bool needs_elements = op == ReduceOp::max || op == ReduceOp::min ||
                              op == ReduceOp::argmax || op == ReduceOp::argmin;
  EMBER_CHECK(!needs_elements || shape.reduce > 0, "reduce op ", name,
              ": cannot reduce over an empty dimension (input viewed as [", shape.outer, ", 0, ",
              shape.inner, "]); it has no ", name, " to return");
  EMBER_INTERNAL_ASSERT(in.is_cuda() && out.device() == in.device(),
                        "reduce_kernel (CUDA): input on ", in.device().str(), ", output on ",
                        out.device().str());
  EMBER_INTERNAL_ASSERT(
      in.numel() == shape.outer * shape.reduce * shape.inner && in.is_contiguous(),
      "reduce_kernel: input ", in.shape_str(), " is not a dense [", shape.outer, ", ", shape.reduce,
      ", ", shape.inner, "]");
  EMBER_INTERNAL_ASSERT(out.numel() == shape.outer * shape.inner && out.is_contiguous(),
                        "reduce_kernel: output ", out.shape_str(), " is not a dense [", shape.outer,
                        ", ", shape.inner, "]");
  const DType expected_out = op == ReduceOp::argmax || op == ReduceOp::argmin ? DType::i64 : dtype;
  EMBER_INTERNAL_ASSERT(out.dtype() == expected_out, "reduce_kernel: op ", name,
                        " output has dtype ", dtype_name(out.dtype()), ", expected ",
                        dtype_name(expected_out));
  if (indices != nullptr) {
    EMBER_INTERNAL_ASSERT(indices->dtype() == DType::i64 && indices->numel() == out.numel() &&
                              indices->is_contiguous() && indices->device() == in.device(),
                          "reduce_kernel: indices must be a dense int64 tensor like the output");
  }
  DeviceGuard device_guard(in.device());
  cudaStream_t stream = stream_of(in.device());
  dispatch_all_dtypes(dtype, "reduce_kernel", [&](auto tag) {
    using scalar_t = decltype(tag);
    launch_reduce<scalar_t>(out, indices, in, shape, op, correction, stream);
  });
}

}  // namespace
}  // namespace ember::cuda

namespace ember {
EMBER_REGISTER_KERNEL(reduce_kernel, CUDA, dispatch::kAllTypes, &cuda::reduce_cuda);
}  // namespace ember
