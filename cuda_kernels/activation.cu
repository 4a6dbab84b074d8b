// CUDA kernels behind activation_kernel and activation_backward_kernel (ops/activation.h):
// leaky_relu, elu, gelu (erf and tanh forms) and silu, forward and backward. The same two paths as
// the elementwise kernels (cuda_kernels/elementwise.cu), built from the helpers of
// elementwise.cuh:
//  - contiguous: every operand dense in loop order and 16-byte aligned: 16-byte vector accesses,
//    a grid-stride loop sized to the SM count, the n % vector tail done by the first threads;
//  - strided: any layout, a flat index turned into byte offsets by OffsetCalc.
// The op is a runtime switch (uniform over the grid), so there is one instantiation per floating
// dtype, path and direction. f16/bf16/f32 compute in float, f64 in double. Gradients are written,
// never accumulated.
#include "cuda_kernels/elementwise.cuh"
#include "ops/activation.h"

namespace ember::cuda {
namespace {

constexpr int kUnroll = 2;  // vectors in flight per thread and grid-stride iteration

template <typename A>
__device__ __forceinline__ A d_exp(A x) {
  if constexpr (std::is_same_v<A, float>) return expf(x);
  else return exp(x);
}
template <typename A>
__device__ __forceinline__ A d_expm1(A x) {
  if constexpr (std::is_same_v<A, float>) return expm1f(x);
  else return expm1(x);
}
template <typename A>
__device__ __forceinline__ A d_erf(A x) {
  if constexpr (std::is_same_v<A, float>) return erff(x);
  else return erf(x);
}
template <typename A>
__device__ __forceinline__ A d_tanh(A x) {
  if constexpr (std::is_same_v<A, float>) return tanhf(x);
  else return tanh(x);
}

// The activation, its derivative, and the op parameter in the accumulation type.
template <typename T>
struct ActivationFunctor {
  using acc_t = OpMath<T>;
  ActivationOp op;
  acc_t param;

  static constexpr double kSqrtHalf = 0.70710678118654752440;      // 1 / sqrt(2)
  static constexpr double kSqrt2OverPi = 0.79788456080286535588;   // sqrt(2 / pi)
  static constexpr double kInvSqrt2Pi = 0.39894228040143267794;    // 1 / sqrt(2 pi)
  static constexpr double kKappa = 0.044715;

  __device__ __forceinline__ acc_t forward(acc_t x) const {
    switch (op) {
      case ActivationOp::leaky_relu: return x > acc_t(0) ? x : x * param;
      case ActivationOp::elu: return x > acc_t(0) ? x : param * d_expm1(x);
      case ActivationOp::gelu: return acc_t(0.5) * x * (acc_t(1) + d_erf(x * acc_t(kSqrtHalf)));
      case ActivationOp::gelu_tanh: {
        const acc_t inner = acc_t(kSqrt2OverPi) * (x + acc_t(kKappa) * x * x * x);
        return acc_t(0.5) * x * (acc_t(1) + d_tanh(inner));
      }
      case ActivationOp::silu: return x / (acc_t(1) + d_exp(-x));
    }
    return x;
  }

  __device__ __forceinline__ acc_t derivative(acc_t x) const {
    switch (op) {
      case ActivationOp::leaky_relu: return x > acc_t(0) ? acc_t(1) : param;
      case ActivationOp::elu: return x > acc_t(0) ? acc_t(1) : param * d_exp(x);
      case ActivationOp::gelu: {
        const acc_t cdf = acc_t(0.5) * (acc_t(1) + d_erf(x * acc_t(kSqrtHalf)));
        const acc_t pdf = acc_t(kInvSqrt2Pi) * d_exp(acc_t(-0.5) * x * x);
        return cdf + x * pdf;
      }
      case ActivationOp::gelu_tanh: {
        const acc_t x_sq = x * x;
        const acc_t tanh_inner = d_tanh(acc_t(kSqrt2OverPi) * (x + acc_t(kKappa) * x_sq * x));
        const acc_t left = acc_t(0.5) * (acc_t(1) + tanh_inner);
        const acc_t right = acc_t(0.5) * x * (acc_t(1) - tanh_inner * tanh_inner) *
                            acc_t(kSqrt2OverPi) * (acc_t(1) + acc_t(3 * kKappa) * x_sq);
        return left + right;
      }
      case ActivationOp::silu: {
        const acc_t s = acc_t(1) / (acc_t(1) + d_exp(-x));
        return s * (acc_t(1) + x * (acc_t(1) - s));
      }
    }
    return acc_t(1);
  }
};

// Forward: out[i] = f(x[i]); backward: out[i] = g[i] * f'(x[i]). n dense elements; `g` is null
// in the forward direction.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
activation_contiguous_kernel(ActivationFunctor<T> f, T* out, const T* g, const T* x, int64_t n) {
  using acc_t = OpMath<T>;
  constexpr int V = 16 / sizeof(T);
  using Vec = AlignedVec<T, V>;
  const bool backward = g != nullptr;
  const int64_t nvec = n / V;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t base = tid; base < nvec; base += step * kUnroll) {
    Vec vx[kUnroll], vg[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * step;
      if (i < nvec) {
        vx[u] = reinterpret_cast<const Vec*>(x)[i];
        if (backward) vg[u] = reinterpret_cast<const Vec*>(g)[i];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * step;
      if (i < nvec) {
        Vec y;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const acc_t xv = convert<acc_t>(vx[u].v[j]);
          y.v[j] = convert<T>(backward ? convert<acc_t>(vg[u].v[j]) * f.derivative(xv)
                                       : f.forward(xv));
        }
        reinterpret_cast<Vec*>(out)[i] = y;
      }
    }
  }
  const int64_t t = nvec * V + tid;  // the n % V elements past the last whole vector
  if (t < n) {
    const acc_t xv = convert<acc_t>(x[t]);
    out[t] = convert<T>(backward ? convert<acc_t>(g[t]) * f.derivative(xv) : f.forward(xv));
  }
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
    activation_contiguous_kernel<T><<<grid_for((n + V * kUnroll - 1) / (V * kUnroll), device),
                                      kBlockThreads, 0, stream>>>(
        f, reinterpret_cast<T*>(iter.data[0]), g, x, n);
    EMBER_CUDA_LAUNCH_CHECK();
  } else {
    activation_strided_kernel<T><<<grid_for(n, device), kBlockThreads, 0, stream>>>(
        f, make_offset_calc<3>(iter), iter.data[0], iter.data[1],
        backward ? iter.data[2] : nullptr, n, backward);
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
  switch (dtype) {
    case DType::f32: launch_activation<float>(iter, op, param, backward, stream); break;
    case DType::f64: launch_activation<double>(iter, op, param, backward, stream); break;
    case DType::f16: launch_activation<__half>(iter, op, param, backward, stream); break;
    case DType::bf16: launch_activation<__nv_bfloat16>(iter, op, param, backward, stream); break;
    default:
      EMBER_THROW(not_supported, activation_op_name(op), ": dtype ", dtype_name(dtype),
                  " is not supported on CUDA; use a floating dtype");
  }
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
