// CUDA kernels behind activation_kernel and activation_backward_kernel
// (kernel_interface/activation.h): leaky_relu, elu, gelu (erf and tanh forms) and silu, forward and
// backward. The same two paths as the elementwise kernels
// (cuda_kernels/elementwise/elementwise.cu), built from the helpers of elementwise.cuh:
//  - contiguous: every operand dense in loop order and 16-byte aligned: a thread per 16-byte
//    vector (blocks_for), the n % vector tail done by the first threads; one kernel per dtype and
//    direction, the op a uniform switch around op-specialized code; exact gelu on bf16 looks its
//    values up in a table each block builds (gelu_bf16_table_kernel: a grid-stride loop, so
//    that a block's table serves many vectors, the next vector loading while one computes;
//    bit-identical results);
//  - strided: any layout, a flat index turned into byte offsets by OffsetCalc, the op a runtime
//    switch per element.
// f16/bf16/f32 compute in float, f64 in double. Gradients are written, never accumulated.
#include "ember/cuda_kernels/common/common.cuh"
#include "ember/kernel_interface/activation.h"

namespace ember::cuda {
namespace {

// Resident blocks per SM the contiguous kernel is compiled for (a 16-byte vector per thread, with
// memory-level parallelism from occupancy: 2048 threads per SM, so registers stay at 32). The
// erf/tanh/exp forms cost 20-40 instructions per element, which for bf16 is about the budget of a
// thread at copy bandwidth, so the op is a template parameter of the per-vector code (no
// per-element switch). Backward holds a second vector (g) and spills at 32 registers: 6 blocks
// (40 registers). f64 computes in double: 4 blocks. A thread per vector is faster than one vector
// per grid-stride iteration over a full grid of 8 blocks per SM.
template <typename T, bool Backward>
inline constexpr int kContiguousBlocksPerSm = std::is_same_v<T, double> ? 4 : (Backward ? 6 : 8);

template <typename A>
__device__ __forceinline__ A d_exp(A x) {
  if constexpr (std::is_same_v<A, float>)
    return expf(x);
  else
    return exp(x);
}
template <typename A>
__device__ __forceinline__ A d_expm1(A x) {
  if constexpr (std::is_same_v<A, float>)
    return expm1f(x);
  else
    return expm1(x);
}
template <typename A>
__device__ __forceinline__ A d_erf(A x) {
  if constexpr (std::is_same_v<A, float>)
    return erff(x);
  else
    return erf(x);
}
template <typename A>
__device__ __forceinline__ A d_tanh(A x) {
  if constexpr (std::is_same_v<A, float>)
    return tanhf(x);
  else
    return tanh(x);
}

inline constexpr double kSqrtHalf = 0.70710678118654752440;     // 1 / sqrt(2)
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)
inline constexpr double kKappa = 0.044715;

// The activation of a compile-time op, in the accumulation type A.
template <ActivationOp Op, typename A>
__device__ __forceinline__ A activation_forward(A x, A param) {
  if constexpr (Op == ActivationOp::leaky_relu) {
    return x > A(0) ? x : x * param;
  } else if constexpr (Op == ActivationOp::elu) {
    return x > A(0) ? x : param * d_expm1(x);
  } else if constexpr (Op == ActivationOp::gelu) {
    return A(0.5) * x * (A(1) + d_erf(x * A(kSqrtHalf)));
  } else if constexpr (Op == ActivationOp::gelu_tanh) {
    const A inner = A(kSqrt2OverPi) * (x + A(kKappa) * x * x * x);
    return A(0.5) * x * (A(1) + d_tanh(inner));
  } else {
    static_assert(Op == ActivationOp::silu);
    return x / (A(1) + d_exp(-x));
  }
}

// Its derivative.
template <ActivationOp Op, typename A>
__device__ __forceinline__ A activation_derivative(A x, A param) {
  if constexpr (Op == ActivationOp::leaky_relu) {
    return x > A(0) ? A(1) : param;
  } else if constexpr (Op == ActivationOp::elu) {
    return x > A(0) ? A(1) : param * d_exp(x);
  } else if constexpr (Op == ActivationOp::gelu) {
    const A cdf = A(0.5) * (A(1) + d_erf(x * A(kSqrtHalf)));
    const A pdf = A(kInvSqrt2Pi) * d_exp(A(-0.5) * x * x);
    return cdf + x * pdf;
  } else if constexpr (Op == ActivationOp::gelu_tanh) {
    const A x_sq = x * x;
    const A tanh_inner = d_tanh(A(kSqrt2OverPi) * (x + A(kKappa) * x_sq * x));
    const A left = A(0.5) * (A(1) + tanh_inner);
    const A right = A(0.5) * x * (A(1) - tanh_inner * tanh_inner) * A(kSqrt2OverPi) *
                    (A(1) + A(3 * kKappa) * x_sq);
    return left + right;
  } else {
    static_assert(Op == ActivationOp::silu);
    const A s = A(1) / (A(1) + d_exp(-x));
    return s * (A(1) + x * (A(1) - s));
  }
}

// The runtime-op form used by the strided kernel (a uniform switch per element is cheap next to
// its scattered accesses).
template <typename T>
struct ActivationFunctor {
  using acc_t = OpMath<T>;
  ActivationOp op;
  acc_t param;

  __device__ __forceinline__ acc_t forward(acc_t x) const {
    switch (op) {
      case ActivationOp::leaky_relu:
        return activation_forward<ActivationOp::leaky_relu>(x, param);
      case ActivationOp::elu:
        return activation_forward<ActivationOp::elu>(x, param);
      case ActivationOp::gelu:
        return activation_forward<ActivationOp::gelu>(x, param);
      case ActivationOp::gelu_tanh:
        return activation_forward<ActivationOp::gelu_tanh>(x, param);
      case ActivationOp::silu:
        return activation_forward<ActivationOp::silu>(x, param);
    }
    return x;
  }
  __device__ __forceinline__ acc_t derivative(acc_t x) const {
    switch (op) {
      case ActivationOp::leaky_relu:
        return activation_derivative<ActivationOp::leaky_relu>(x, param);
      case ActivationOp::elu:
        return activation_derivative<ActivationOp::elu>(x, param);
      case ActivationOp::gelu:
        return activation_derivative<ActivationOp::gelu>(x, param);
      case ActivationOp::gelu_tanh:
        return activation_derivative<ActivationOp::gelu_tanh>(x, param);
      case ActivationOp::silu:
        return activation_derivative<ActivationOp::silu>(x, param);
    }
    return acc_t(1);
  }
};

// y = f(x) (forward) or g * f'(x) (backward) for one element.
template <ActivationOp Op, bool Backward, typename T>
__device__ __forceinline__ OpMath<T> activation_value(T x, T g, OpMath<T> param) {
  using acc_t = OpMath<T>;
  const acc_t xv = convert<acc_t>(x);
  if constexpr (Backward)
    return convert<acc_t>(g) * activation_derivative<Op>(xv, param);
  else
    return activation_forward<Op>(xv, param);
}

// The contiguous kernel's thread for one op: vector i of out from vector i of x (and g), and
// element nvec * V + i of the n % V tail. Reduced floats are rounded two at a time (one packed
// conversion instruction).
template <ActivationOp Op, bool Backward, typename T>
__device__ __forceinline__ void activation_contiguous_vector(OpMath<T> param, T* out, const T* g,
                                                             const T* x, int64_t n) {
  constexpr int V = 16 / sizeof(T);
  using Vec = AlignedVec<T, V>;
  const int64_t nvec = n / V;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // this thread's vector
  if (i < nvec) {
    const Vec vx = reinterpret_cast<const Vec*>(x)[i];
    Vec vg{};
    if constexpr (Backward) vg = reinterpret_cast<const Vec*>(g)[i];
    Vec y;
    if constexpr (is_reduced_float_v<T>) {
#pragma unroll
      for (int j = 0; j < V; j += 2) {
        const float y0 = activation_value<Op, Backward>(vx.v[j], Backward ? vg.v[j] : T(), param);
        const float y1 =
            activation_value<Op, Backward>(vx.v[j + 1], Backward ? vg.v[j + 1] : T(), param);
        if constexpr (std::is_same_v<T, __half>) {
          const __half2 h = __floats2half2_rn(y0, y1);
          y.v[j] = __low2half(h);
          y.v[j + 1] = __high2half(h);
        } else {
          const __nv_bfloat162 h = __floats2bfloat162_rn(y0, y1);
          y.v[j] = __low2bfloat16(h);
          y.v[j + 1] = __high2bfloat16(h);
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j)
        y.v[j] =
            convert<T>(activation_value<Op, Backward>(vx.v[j], Backward ? vg.v[j] : T(), param));
    }
    reinterpret_cast<Vec*>(out)[i] = y;
  }
  const int64_t t = nvec * V + i;  // the n % V elements past the last whole vector
  if (t < n)
    out[t] = convert<T>(activation_value<Op, Backward>(x[t], Backward ? g[t] : T(), param));
}

// Dense, 16-byte aligned operands: out = f(x) or g * f'(x) over n elements (g unused forward), a
// 16-byte vector per thread. One kernel per dtype and direction; the op switch is uniform.
template <typename T, bool Backward>
__global__ void __launch_bounds__(kBlockThreads, kContiguousBlocksPerSm<T, Backward>)
    activation_contiguous_kernel(ActivationOp op, OpMath<T> param, T* out, const T* g, const T* x,
                                 int64_t n) {
  switch (op) {
    case ActivationOp::leaky_relu:
      activation_contiguous_vector<ActivationOp::leaky_relu, Backward>(param, out, g, x, n);
      break;
    case ActivationOp::elu:
      activation_contiguous_vector<ActivationOp::elu, Backward>(param, out, g, x, n);
      break;
    case ActivationOp::gelu:
      activation_contiguous_vector<ActivationOp::gelu, Backward>(param, out, g, x, n);
      break;
    case ActivationOp::gelu_tanh:
      activation_contiguous_vector<ActivationOp::gelu_tanh, Backward>(param, out, g, x, n);
      break;
    case ActivationOp::silu:
      activation_contiguous_vector<ActivationOp::silu, Backward>(param, out, g, x, n);
      break;
  }
}

// ---- exact gelu on bf16 through a per-block table ---------------------------------------------
//
// erff costs about 30 instructions per element (two polynomials chosen by selects, an ex2), and
// with 8 bf16 values per 16-byte vector the erf gelu is issue-bound, well below copy bandwidth. A
// bf16 input has only 256 values per binade, so each block first tabulates the op for every bf16
// value with 2^-12 <= |x| < 16 (4096 entries; forward the rounded bf16 result, backward the float
// derivative), then does a table lookup per element (a few integer instructions and a shared-memory
// load). The entries come from the same activation_forward / activation_derivative code and are
// rounded the same way, so every result is bit-identical to the direct path; values outside the
// table (tiny, large, inf, NaN) take the direct path.
constexpr unsigned kGeluTableLowBits = (127u - 12u) << 7;   // bf16 bits of 2^-12
constexpr unsigned kGeluTableSpan = 16u * 128u;             // 16 binades of 128 mantissas
constexpr int kGeluTableEntries = 2 * int(kGeluTableSpan);  // both signs

// The table slot of a bf16 value, or -1 outside the table.
__device__ __forceinline__ int gelu_table_slot(__nv_bfloat16 v) {
  const unsigned bits = __bfloat16_as_ushort(v);
  const unsigned rel = (bits & 0x7fffu) - kGeluTableLowBits;  // wraps to large below the table
  return rel < kGeluTableSpan ? int(rel | ((bits >> 15) * kGeluTableSpan)) : -1;
}

// The input of table slot e.
__device__ __forceinline__ float gelu_table_input(int e) {
  const unsigned sign = unsigned(e) / kGeluTableSpan, rel = unsigned(e) % kGeluTableSpan;
  return __uint_as_float(((sign << 15) | (kGeluTableLowBits + rel)) << 16);
}

// 8 blocks per SM forward (8 KiB of table each), 6 backward (16 KiB, and the g vector).
template <bool Backward>
inline constexpr int kGeluTableBlocksPerSm = Backward ? 6 : 8;

// out = gelu(x) or g * gelu'(x), bf16, dense and 16-byte aligned, n elements.
template <bool Backward>
__global__ void __launch_bounds__(kBlockThreads, kGeluTableBlocksPerSm<Backward>)
    gelu_bf16_table_kernel(__nv_bfloat16* out, const __nv_bfloat16* g, const __nv_bfloat16* x,
                           int64_t n) {
  using T = __nv_bfloat16;
  using Entry = std::conditional_t<Backward, float, T>;
  constexpr int V = 8;
  using Vec = AlignedVec<T, V>;
  __shared__ Entry table[kGeluTableEntries];
  for (int e = threadIdx.x; e < kGeluTableEntries; e += blockDim.x) {
    const float xv = gelu_table_input(e);
    if constexpr (Backward)
      table[e] = activation_derivative<ActivationOp::gelu>(xv, 0.0f);
    else
      table[e] = __float2bfloat16_rn(activation_forward<ActivationOp::gelu>(xv, 0.0f));
  }
  __syncthreads();
  // One element: the table, or the direct path (activation_value) outside it.
  auto value = [&](T xv, T gv) -> T {
    const int slot = gelu_table_slot(xv);
    if constexpr (Backward) {
      const float d = slot >= 0
                          ? table[slot]
                          : activation_derivative<ActivationOp::gelu>(convert<float>(xv), 0.0f);
      return __float2bfloat16_rn(convert<float>(gv) * d);
    } else {
      return slot >= 0 ? table[slot]
                       : __float2bfloat16_rn(
                             activation_forward<ActivationOp::gelu>(convert<float>(xv), 0.0f));
    }
  };
  const Vec* xv = reinterpret_cast<const Vec*>(x);
  const Vec* gv = reinterpret_cast<const Vec*>(g);
  const int64_t nvec = n / V;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  // Loads one iteration ahead: a thread keeps a load in flight while it computes (out may alias
  // x, so the compiler would not move the next load above this iteration's store; each element is
  // still read before its own write).
  Vec next_x{}, next_g{};
  if (tid < nvec) {
    next_x = xv[tid];
    if constexpr (Backward) next_g = gv[tid];
  }
  for (int64_t i = tid; i < nvec; i += step) {
    const Vec cx = next_x, cg = next_g;
    if (i + step < nvec) {
      next_x = xv[i + step];
      if constexpr (Backward) next_g = gv[i + step];
    }
    Vec y;
#pragma unroll
    for (int j = 0; j < V; ++j) y.v[j] = value(cx.v[j], cg.v[j]);
    reinterpret_cast<Vec*>(out)[i] = y;
  }
  const int64_t t = nvec * V + tid;  // the n % V elements past the last whole vector
  if (t < n) out[t] = value(x[t], Backward ? g[t] : T());
}

// Any layout. Operands: forward (out, x), backward (out, g, x); `backward` selects the meaning.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    activation_strided_kernel(ActivationFunctor<T> f, OffsetCalc<3> oc, char* out, const char* a,
                              const char* b, int64_t n, bool backward) {
  using acc_t = OpMath<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[3];
    oc.get(i, off);
    acc_t y;
    if (backward) {
      const acc_t gv = convert<acc_t>(*reinterpret_cast<const T*>(a + off[1]));
      y = gv * f.derivative(convert<acc_t>(*reinterpret_cast<const T*>(b + off[2])));
    } else {
      y = f.forward(convert<acc_t>(*reinterpret_cast<const T*>(a + off[1])));
    }
    *reinterpret_cast<T*>(out + off[0]) = convert<T>(y);
  }
}

template <typename T>
void launch_activation(const ElementwiseIter& iter, ActivationOp op, double param, bool backward,
                       cudaStream_t stream) {
  using acc_t = OpMath<T>;
  const ActivationFunctor<T> f{op, acc_t(param)};
  const int device = iter.device.index;
  const int64_t n = iter.numel;
  bool contiguous = true;
  for (int k = 0; k < iter.num_operands; ++k)
    contiguous = contiguous && operand_is_flat(iter, k) && is_aligned(iter.data[k], 16);
  if (contiguous) {
    constexpr int V = 16 / sizeof(T);
    const T* x = reinterpret_cast<const T*>(iter.data[backward ? 2 : 1]);
    const T* g = backward ? reinterpret_cast<const T*>(iter.data[1]) : nullptr;
    T* out = reinterpret_cast<T*>(iter.data[0]);
    const int64_t nvec = (n + V - 1) / V;
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      if (op == ActivationOp::gelu) {
        if (backward)
          gelu_bf16_table_kernel<true>
              <<<grid_for(nvec, device, kGeluTableBlocksPerSm<true>), kBlockThreads, 0, stream>>>(
                  out, g, x, n);
        else
          gelu_bf16_table_kernel<false>
              <<<grid_for(nvec, device, kGeluTableBlocksPerSm<false>), kBlockThreads, 0, stream>>>(
                  out, g, x, n);
        EMBER_CUDA_LAUNCH_CHECK();
        return;
      }
    }
    if (backward)
      activation_contiguous_kernel<T, true>
          <<<blocks_for(nvec), kBlockThreads, 0, stream>>>(op, f.param, out, g, x, n);
    else
      activation_contiguous_kernel<T, false>
          <<<blocks_for(nvec), kBlockThreads, 0, stream>>>(op, f.param, out, g, x, n);
    EMBER_CUDA_LAUNCH_CHECK();
  } else {
    activation_strided_kernel<T><<<grid_for(n, device), kBlockThreads, 0, stream>>>(
        f, make_offset_calc<3>(iter), iter.data[0], iter.data[1], backward ? iter.data[2] : nullptr,
        n, backward);
    EMBER_CUDA_LAUNCH_CHECK();
  }
}

void run_activation(const ElementwiseIter& iter, ActivationOp op, double param, bool backward) {
  if (iter.numel == 0) return;
  const int operands = backward ? 3 : 2;
  EMBER_INTERNAL_ASSERT(iter.num_operands == operands, activation_op_name(op), ": expected ",
                        operands, " operands, got ", iter.num_operands);
  const DType dtype = iter.dtypes[0];
  for (int k = 1; k < operands; ++k)
    EMBER_INTERNAL_ASSERT(iter.dtypes[k] == dtype, activation_op_name(op), ": operands of dtypes ",
                          dtype_name(dtype), " and ", dtype_name(iter.dtypes[k]));
  DeviceGuard device_guard(iter.device);
  cudaStream_t stream = stream_of(iter.device);
  dispatch_floating(dtype, activation_op_name(op), [&](auto tag) {
    launch_activation<decltype(tag)>(iter, op, param, backward, stream);
  });
}

void activation_cuda(const ElementwiseIter& iter, ActivationOp op, double param) {
  run_activation(iter, op, param, false);
}
void activation_backward_cuda(const ElementwiseIter& iter, ActivationOp op, double param) {
  run_activation(iter, op, param, true);
}

}  // namespace
}  // namespace ember::cuda

namespace ember {
EMBER_REGISTER_KERNEL(activation_kernel, CUDA, dispatch::kFloatingTypes, &cuda::activation_cuda);
EMBER_REGISTER_KERNEL(activation_backward_kernel, CUDA, dispatch::kFloatingTypes,
                      &cuda::activation_backward_cuda);
}  // namespace ember
