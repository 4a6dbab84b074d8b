// CUDA elementwise kernels behind unary_kernel and binary_kernel (kernel_interface/elementwise.h;
// where_kernel and copy_kernel are in copy.cu). Two paths per kernel:
//  - contiguous: every operand dense in loop order (or, for inputs, one broadcast value) and
//    16-byte aligned: a thread per 16-byte vector (blocks_for: no grid-stride loop), the last
//    n % vector elements done by the first threads;
//  - strided: any layout (misaligned views too), a flat index turned into byte offsets by
//    OffsetCalc (32-bit divmods when the loop has < 2^31 elements), 4 elements per thread in
//    flight. Broadcast operands are simply stride 0 here.
// The op is a runtime switch inside the kernel (uniform across the grid), so there is one
// instantiation per dtype and path, not per op. f16/bf16 compute in float, f64 in double, the
// integral types in int64 (stored back with wrap-around).
#include <cmath>
#include <limits>

#include "ember/cuda_kernels/common/common.cuh"
#include "ember/cuda_kernels/elementwise/elementwise.cuh"
#include "ember/kernel_interface/elementwise.h"

namespace ember::cuda {
namespace {

// The contiguous kernels take one 16-byte vector per thread and exit (blocks_for): faster on large
// tensors than one vector per grid-stride iteration, which left them a few percent under
// PyTorch's add (docs/perf-notes.md, "Elementwise and activations").

// Resident blocks per SM the unary and binary contiguous kernels are compiled for: all 2048
// threads (32 registers) for f32, f16 and bf16 (unbounded, bf16 add took 35 registers and 6
// blocks and streamed slower); kBlocksPerSm for the others (16 bool or uint8 values a vector, or
// doubles).
template <typename T>
inline constexpr int kContiguousBlocksPerSm =
    is_device_floating_v<T> && !std::is_same_v<T, double> ? 8 : kBlocksPerSm;

// ---- math on the accumulation type (float or double overloads picked at compile time) ----------
#define EMBER_DEFINE_MATH1(name, float_fn, double_fn) \
  template <typename A>                               \
  __device__ __forceinline__ A name(A x) {            \
    if constexpr (std::is_same_v<A, float>)           \
      return float_fn(x);                             \
    else                                              \
      return double_fn(x);                            \
  }
EMBER_DEFINE_MATH1(m_exp, expf, exp)
EMBER_DEFINE_MATH1(m_log, logf, log)
EMBER_DEFINE_MATH1(m_sqrt, sqrtf, sqrt)
EMBER_DEFINE_MATH1(m_fabs, fabsf, fabs)
EMBER_DEFINE_MATH1(m_tanh, tanhf, tanh)
EMBER_DEFINE_MATH1(m_sin, sinf, sin)
EMBER_DEFINE_MATH1(m_cos, cosf, cos)
EMBER_DEFINE_MATH1(m_log1p, log1pf, log1p)
EMBER_DEFINE_MATH1(m_expm1, expm1f, expm1)
EMBER_DEFINE_MATH1(m_floor, floorf, floor)
EMBER_DEFINE_MATH1(m_ceil, ceilf, ceil)
EMBER_DEFINE_MATH1(m_rint, rintf, rint)  // round half to even, as torch.round
EMBER_DEFINE_MATH1(m_log2, log2f, log2)
EMBER_DEFINE_MATH1(m_log10, log10f, log10)
EMBER_DEFINE_MATH1(m_tan, tanf, tan)
EMBER_DEFINE_MATH1(m_asin, asinf, asin)
EMBER_DEFINE_MATH1(m_acos, acosf, acos)
EMBER_DEFINE_MATH1(m_atan, atanf, atan)
EMBER_DEFINE_MATH1(m_sinh, sinhf, sinh)
EMBER_DEFINE_MATH1(m_cosh, coshf, cosh)
EMBER_DEFINE_MATH1(m_asinh, asinhf, asinh)
EMBER_DEFINE_MATH1(m_acosh, acoshf, acosh)
EMBER_DEFINE_MATH1(m_atanh, atanhf, atanh)
EMBER_DEFINE_MATH1(m_erf, erff, erf)
EMBER_DEFINE_MATH1(m_erfc, erfcf, erfc)
EMBER_DEFINE_MATH1(m_erfinv, erfinvf, erfinv)
EMBER_DEFINE_MATH1(m_trunc, truncf, trunc)
#undef EMBER_DEFINE_MATH1
#define EMBER_DEFINE_MATH2(name, float_fn, double_fn) \
  template <typename A>                               \
  __device__ __forceinline__ A name(A x, A y) {       \
    if constexpr (std::is_same_v<A, float>)           \
      return float_fn(x, y);                          \
    else                                              \
      return double_fn(x, y);                         \
  }
EMBER_DEFINE_MATH2(m_pow, powf, pow)
EMBER_DEFINE_MATH2(m_atan2, atan2f, atan2)
EMBER_DEFINE_MATH2(m_fmod, fmodf, fmod)
EMBER_DEFINE_MATH2(m_hypot, hypotf, hypot)
#undef EMBER_DEFINE_MATH2

// NaN-propagating max/min (torch.maximum / clamp semantics).
template <typename A>
__device__ __forceinline__ A max_propagate_nan(A a, A b) {
  if (is_nan(a)) return a;
  if (is_nan(b)) return b;
  return a > b ? a : b;
}
template <typename A>
__device__ __forceinline__ A min_propagate_nan(A a, A b) {
  if (is_nan(a)) return a;
  if (is_nan(b)) return b;
  return a < b ? a : b;
}

// ---- op names and dtype coverage (host) ---------------------------------------------------------

const char* unary_op_name(UnaryOp op) {
  static constexpr const char* kNames[] = {
      "neg",      "exp",   "log",        "sqrt",       "rsqrt",      "abs",         "tanh",
      "sigmoid",  "relu",  "sin",        "cos",        "sign",       "reciprocal",  "square",
      "log1p",    "expm1", "floor",      "ceil",       "round",      "logical_not", "isnan",
      "isfinite", "clamp", "pow_scalar", "add_scalar", "mul_scalar", "rsub_scalar", "rdiv_scalar",
      "fill",     "log2",  "log10",      "tan",        "asin",       "acos",        "atan",
      "sinh",     "cosh",  "asinh",      "acosh",      "atanh",      "erf",         "erfc",
      "erfinv",   "frac",  "nan_to_num", "round",      "trunc",      "isinf"};
  const size_t i = size_t(op);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "unknown unary op";
}

const char* binary_op_name(BinaryOp op) {
  static constexpr const char* kNames[] = {"add",
                                           "sub",
                                           "mul",
                                           "div",
                                           "pow",
                                           "maximum",
                                           "minimum",
                                           "atan2",
                                           "remainder",
                                           "eq",
                                           "ne",
                                           "lt",
                                           "le",
                                           "gt",
                                           "ge",
                                           "logical_and",
                                           "logical_or",
                                           "relu_backward",
                                           "sigmoid_backward",
                                           "tanh_backward",
                                           "bitwise_and",
                                           "bitwise_or",
                                           "bitwise_xor",
                                           "logical_xor",
                                           "fmod",
                                           "hypot"};
  const size_t i = size_t(op);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "unknown binary op";
}

// The same coverage as the CPU kernels (cpu_kernels/elementwise.cpp): floating dtypes support
// every op; integral dtypes the ops that are exact in integers (ops/ converts to float32 before
// the others); bool only the logical ones and fill.
bool unary_supported(UnaryOp op, DType t) {
  if (is_floating(t)) return true;
  switch (op) {
    case UnaryOp::fill:
    case UnaryOp::isnan:
    case UnaryOp::isfinite:
    case UnaryOp::isinf:
    case UnaryOp::logical_not:
      return true;
    case UnaryOp::neg:
    case UnaryOp::abs:
    case UnaryOp::relu:
    case UnaryOp::sign:
    case UnaryOp::square:
    case UnaryOp::clamp:
    case UnaryOp::add_scalar:
    case UnaryOp::mul_scalar:
    case UnaryOp::rsub_scalar:
    case UnaryOp::floor:
    case UnaryOp::ceil:
    case UnaryOp::round:
    case UnaryOp::trunc:
      return t != DType::boolean;
    default:
      return false;
  }
}

bool binary_supported(BinaryOp op, DType t) {
  if (is_floating(t)) return true;
  switch (op) {
    case BinaryOp::mul:
    case BinaryOp::maximum:
    case BinaryOp::minimum:  // and / or / and on bool
    case BinaryOp::eq:
    case BinaryOp::ne:
    case BinaryOp::lt:
    case BinaryOp::le:
    case BinaryOp::gt:
    case BinaryOp::ge:
    case BinaryOp::logical_and:
    case BinaryOp::logical_or:
    case BinaryOp::logical_xor:
    case BinaryOp::bitwise_and:
    case BinaryOp::bitwise_or:
    case BinaryOp::bitwise_xor:
      return true;
    case BinaryOp::add:
    case BinaryOp::sub:
    case BinaryOp::remainder:
    case BinaryOp::fmod:
      return t != DType::boolean;
    default:  // div (true division), pow, atan2 and the gradient helpers: floating only
      return false;
  }
}

// The scalar of an integer op must be a whole number (a fractional one means ops/ forgot to
// promote the tensor to floating).
void check_integral_scalar(const char* op, DType t, double v) {
  EMBER_CHECK(is_floating(t) || std::trunc(v) == v, op, ": the scalar ", v,
              " is not an integer but the tensor has dtype ", dtype_name(t),
              "; convert the tensor to a floating dtype first");
}

// A clamp bound of an integer clamp: the tightest integer bound (ceil for min, floor for max)
// saturated to T's range; NaN means no bound. As the CPU kernel.
template <typename T>
int64_t integral_bound(double v, bool is_min) {
  const double lowest = double(std::numeric_limits<T>::lowest());
  const double highest = double(std::numeric_limits<T>::max());
  if (std::isnan(v))
    return is_min ? int64_t(std::numeric_limits<T>::lowest())
                  : int64_t(std::numeric_limits<T>::max());
  const double r = is_min ? std::ceil(v) : std::floor(v);
  if (r <= lowest) return int64_t(std::numeric_limits<T>::lowest());
  if (r >= highest) return int64_t(std::numeric_limits<T>::max());
  return int64_t(r);
}

// A double scalar parameter in an integral accumulation type, saturated instead of undefined.
int64_t saturate_to_int64(double v) {
  if (v != v) return 0;
  if (v >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return int64_t(v);
}

template <typename A>
A scalar_param(double v) {
  if constexpr (std::is_floating_point_v<A>)
    return A(v);
  else
    return saturate_to_int64(v);
}

// ---- unary ------------------------------------------------------------------------------------

template <typename T>
struct UnaryFunctor {
  using acc_t = OpMath<T>;
  UnaryOp op;
  acc_t a, b, c;      // UnaryParams in the accumulation type
  bool has_a, has_b;  // clamp: whether the min / max bound is present

  __device__ __forceinline__ acc_t operator()(acc_t x) const {
    constexpr bool kFloating = std::is_floating_point_v<acc_t>;
    switch (op) {
      case UnaryOp::neg:
        return -x;
      case UnaryOp::abs:
        if constexpr (kFloating)
          return m_fabs(x);
        else
          return x < 0 ? -x : x;
      case UnaryOp::relu:
        return x < acc_t(0) ? acc_t(0) : x;  // NaN stays NaN
      case UnaryOp::sign:
        return acc_t((acc_t(0) < x) - (x < acc_t(0)));
      case UnaryOp::square:
        return x * x;
      case UnaryOp::clamp:
        if (has_a) x = is_nan(x) ? x : (x < a ? a : x);
        if (has_b) x = is_nan(x) ? x : (x > b ? b : x);
        return x;
      case UnaryOp::add_scalar:
        return x + a;
      case UnaryOp::mul_scalar:
        return x * a;
      case UnaryOp::rsub_scalar:
        return a - x;
      case UnaryOp::fill:
        return a;
      case UnaryOp::logical_not:
        return acc_t(x == acc_t(0));
      case UnaryOp::isnan:
        return acc_t(is_nan(x));
      case UnaryOp::isfinite:
        if constexpr (kFloating)
          return acc_t(isfinite(x));
        else
          return acc_t(1);
      case UnaryOp::isinf:
        if constexpr (kFloating)
          return acc_t(isinf(x));
        else
          return acc_t(0);
      default:
        break;
    }
    if constexpr (kFloating) {
      if (op >= UnaryOp::log2) return more(x);
      switch (op) {
        case UnaryOp::exp:
          return m_exp(x);
        case UnaryOp::log:
          return m_log(x);
        case UnaryOp::sqrt:
          return m_sqrt(x);
        case UnaryOp::rsqrt:
          return acc_t(1) / m_sqrt(x);  // correctly rounded, like the CPU
        case UnaryOp::tanh:
          return m_tanh(x);
        case UnaryOp::sigmoid:
          return acc_t(1) / (acc_t(1) + m_exp(-x));
        case UnaryOp::sin:
          return m_sin(x);
        case UnaryOp::cos:
          return m_cos(x);
        case UnaryOp::reciprocal:
          return acc_t(1) / x;
        case UnaryOp::log1p:
          return m_log1p(x);
        case UnaryOp::expm1:
          return m_expm1(x);
        case UnaryOp::floor:
          return m_floor(x);
        case UnaryOp::ceil:
          return m_ceil(x);
        case UnaryOp::round:
          return m_rint(x);
        case UnaryOp::pow_scalar:  // the exponents PyTorch (and the CPU kernel) special-case
          if (a == acc_t(2)) return x * x;
          if (a == acc_t(3)) return x * x * x;
          if (a == acc_t(1)) return x;
          if (a == acc_t(0.5)) return m_sqrt(x);
          if (a == acc_t(-0.5)) return acc_t(1) / m_sqrt(x);
          if (a == acc_t(-1)) return acc_t(1) / x;
          if (a == acc_t(-2)) return acc_t(1) / (x * x);
          return m_pow(x, a);
        case UnaryOp::rdiv_scalar:
          return a / x;
        default:
          break;
      }
    } else {
      switch (op) {
        case UnaryOp::floor:
        case UnaryOp::ceil:
        case UnaryOp::round:
        case UnaryOp::trunc:
          return x;
        default:
          break;
      }
    }
    return x;  // unreachable: unary_supported filtered the op on the host
  }

  // The floating ops from UnaryOp::log2 on (issue 34's transcendental and rounding ops).
  __device__ __forceinline__ acc_t more(acc_t x) const {
    if constexpr (std::is_floating_point_v<acc_t>) {
      switch (op) {
        case UnaryOp::log2:
          return m_log2(x);
        case UnaryOp::log10:
          return m_log10(x);
        case UnaryOp::tan:
          return m_tan(x);
        case UnaryOp::asin:
          return m_asin(x);
        case UnaryOp::acos:
          return m_acos(x);
        case UnaryOp::atan:
          return m_atan(x);
        case UnaryOp::sinh:
          return m_sinh(x);
        case UnaryOp::cosh:
          return m_cosh(x);
        case UnaryOp::asinh:
          return m_asinh(x);
        case UnaryOp::acosh:
          return m_acosh(x);
        case UnaryOp::atanh:
          return m_atanh(x);
        case UnaryOp::erf:
          return m_erf(x);
        case UnaryOp::erfc:
          return m_erfc(x);
        case UnaryOp::erfinv:
          return m_erfinv(x);
        case UnaryOp::trunc:
          return m_trunc(x);
        case UnaryOp::frac:
          return x - m_trunc(x);
        case UnaryOp::nan_to_num:
          if (is_nan(x)) return a;
          if (isinf(x)) return x > acc_t(0) ? b : c;
          return x;
        case UnaryOp::round_decimals:
          return has_b_flag() ? m_rint(x / a) * a : m_rint(x * a) / a;
        default:
          break;
      }
    }
    return x;
  }
  // round_decimals: b != 0 marks negative decimals.
  __device__ __forceinline__ bool has_b_flag() const { return b != acc_t(0); }
};

template <typename T>
UnaryFunctor<T> make_unary_functor(UnaryOp op, UnaryParams p) {
  using acc_t = OpMath<T>;
  UnaryFunctor<T> f;
  f.op = op;
  f.has_a = !std::isnan(p.a);
  f.has_b = !std::isnan(p.b);
  f.a = scalar_param<acc_t>(p.a);
  f.b = scalar_param<acc_t>(p.b);
  f.c = scalar_param<acc_t>(p.c);
  if constexpr (std::is_same_v<T, bool>) {
    f.a = acc_t(p.a != 0);  // fill(true) for any non-zero value
  } else if constexpr (std::is_integral_v<T>) {
    if (op == UnaryOp::clamp) {
      f.a = integral_bound<T>(p.a, true);
      f.b = integral_bound<T>(p.b, false);
      f.has_a = f.has_b = true;
    }
  }
  return f;
}

// out[i] = f(in[i]) over n dense elements, a 16-byte vector per thread; in == nullptr for fill.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads, kContiguousBlocksPerSm<T>)
    unary_contiguous_kernel(UnaryFunctor<T> f, T* out, const T* in, int64_t n) {
  using acc_t = OpMath<T>;
  constexpr int V = 16 / sizeof(T);
  using Vec = AlignedVec<T, V>;
  const int64_t nvec = n / V;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // this thread's vector
  if (i < nvec) {
    Vec x;
    if (in != nullptr) x = reinterpret_cast<const Vec*>(in)[i];
    Vec y;
#pragma unroll
    for (int j = 0; j < V; ++j)
      y.v[j] = convert<T>(f(in != nullptr ? convert<acc_t>(x.v[j]) : acc_t(0)));
    reinterpret_cast<Vec*>(out)[i] = y;
  }
  const int64_t t = nvec * V + i;  // the n % V elements past the last whole vector
  if (t < n) out[t] = convert<T>(f(in != nullptr ? convert<acc_t>(in[t]) : acc_t(0)));
}

// Any layout. out_bool: the output is bool (isnan, isfinite on a non-bool input).
template <typename T>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    unary_strided_kernel(UnaryFunctor<T> f, OffsetCalc<2> oc, char* out, const char* in, int64_t n,
                         bool out_bool) {
  using acc_t = OpMath<T>;
  // A block takes tiles of kStridedUnroll * blockDim consecutive elements (thread t gets t,
  // t + blockDim, ...): coalesced, and its loads stay within a few DRAM pages.
  const int64_t tile = int64_t(blockDim.x) * kStridedUnroll;
  for (int64_t first = int64_t(blockIdx.x) * tile + threadIdx.x; first < n;
       first += int64_t(gridDim.x) * tile) {
    int64_t out_off[kStridedUnroll];
    acc_t x[kStridedUnroll];
#pragma unroll
    for (int u = 0; u < kStridedUnroll; ++u) {
      if (first + u * int64_t(blockDim.x) < n) {
        int64_t off[2];
        oc.get(first + u * int64_t(blockDim.x), off);
        out_off[u] = off[0];
        x[u] = in != nullptr ? convert<acc_t>(*reinterpret_cast<const T*>(in + off[1])) : acc_t(0);
      }
    }
#pragma unroll
    for (int u = 0; u < kStridedUnroll; ++u) {
      if (first + u * int64_t(blockDim.x) < n) {
        const acc_t y = f(x[u]);
        if (out_bool)
          *reinterpret_cast<bool*>(out + out_off[u]) = convert<bool>(y);
        else
          *reinterpret_cast<T*>(out + out_off[u]) = convert<T>(y);
      }
    }
  }
}

template <typename T>
void launch_unary(const ElementwiseIter& iter, UnaryOp op, UnaryParams p, bool out_bool,
                  cudaStream_t stream) {
  const UnaryFunctor<T> f = make_unary_functor<T>(op, p);
  const bool has_input = iter.num_operands >= 2;
  const int device = iter.device.index;
  const int64_t n = iter.numel;
  const bool contiguous =
      !out_bool && operand_is_flat(iter, 0) && is_aligned(iter.data[0], 16) &&
      (!has_input || (operand_is_flat(iter, 1) && is_aligned(iter.data[1], 16)));
  if (contiguous) {
    constexpr int V = 16 / sizeof(T);
    unary_contiguous_kernel<T><<<blocks_for((n + V - 1) / V), kBlockThreads, 0, stream>>>(
        f, reinterpret_cast<T*>(iter.data[0]),
        has_input ? reinterpret_cast<const T*>(iter.data[1]) : nullptr, n);
    EMBER_CUDA_LAUNCH_CHECK();
  } else {
    unary_strided_kernel<T>
        <<<grid_for((n + kStridedUnroll - 1) / kStridedUnroll, device, strided_blocks_per_sm(iter)),
           kBlockThreads, 0, stream>>>(f, make_offset_calc<2>(iter), iter.data[0],
                                       has_input ? iter.data[1] : nullptr, n, out_bool);
    EMBER_CUDA_LAUNCH_CHECK();
  }
}

void unary_cuda(const ElementwiseIter& iter, UnaryOp op, UnaryParams p) {
  if (iter.numel == 0) return;
  const bool has_input = iter.num_operands >= 2;
  EMBER_INTERNAL_ASSERT(has_input || op == UnaryOp::fill, "unary_kernel: op ", unary_op_name(op),
                        " needs an input operand");
  const DType out_dtype = iter.dtypes[0];
  const DType in_dtype = has_input ? iter.dtypes[1] : out_dtype;
  EMBER_CHECK_STATUS(unary_supported(op, in_dtype), not_supported, "unary op ", unary_op_name(op),
                     ": dtype ", dtype_name(in_dtype),
                     " is not supported on CUDA; convert the input to a floating dtype first");
  if (op == UnaryOp::add_scalar || op == UnaryOp::mul_scalar || op == UnaryOp::rsub_scalar)
    check_integral_scalar(unary_op_name(op), in_dtype, p.a);
  const bool out_bool = out_dtype == DType::boolean && in_dtype != DType::boolean;
  EMBER_INTERNAL_ASSERT(out_dtype == in_dtype || out_bool, "unary_kernel: op ", unary_op_name(op),
                        " got output dtype ", dtype_name(out_dtype), " for input dtype ",
                        dtype_name(in_dtype));
  DeviceGuard device_guard(iter.device);
  cudaStream_t stream = stream_of(iter.device);
  dispatch_all_dtypes(in_dtype, "unary_kernel", [&](auto tag) {
    using scalar_t = decltype(tag);
    launch_unary<scalar_t>(iter, op, p, out_bool, stream);
  });
}

// ---- binary -----------------------------------------------------------------------------------

template <typename T>
struct BinaryFunctor {
  using acc_t = OpMath<T>;
  BinaryOp op;
  acc_t alpha;

  __device__ __forceinline__ acc_t operator()(acc_t a, acc_t b) const {
    constexpr bool kFloating = std::is_floating_point_v<acc_t>;
    switch (op) {
      case BinaryOp::add:
        return a + alpha * b;
      case BinaryOp::sub:
        return a - alpha * b;
      case BinaryOp::mul:
        return a * b;
      case BinaryOp::maximum:
        return max_propagate_nan(a, b);
      case BinaryOp::minimum:
        return min_propagate_nan(a, b);
      case BinaryOp::remainder: {  // Python's modulus: the result takes the divisor's sign
        if constexpr (kFloating) {
          acc_t r = m_fmod(a, b);
          if (r != acc_t(0) && ((r < acc_t(0)) != (b < acc_t(0)))) r += b;
          return r;
        } else {
          // b == 0: the CPU throws, a kernel cannot; 0 instead of a trap. b == -1: always 0
          // (and lowest % -1 would overflow).
          if (b == 0 || b == -1) return acc_t(0);
          acc_t r = a % b;
          if (r != 0 && ((r < 0) != (b < 0))) r += b;
          return r;
        }
      }
      case BinaryOp::eq:
        return acc_t(a == b);
      case BinaryOp::ne:
        return acc_t(a != b);
      case BinaryOp::lt:
        return acc_t(a < b);
      case BinaryOp::le:
        return acc_t(a <= b);
      case BinaryOp::gt:
        return acc_t(a > b);
      case BinaryOp::ge:
        return acc_t(a >= b);
      case BinaryOp::logical_and:
        return acc_t(a != acc_t(0) && b != acc_t(0));
      case BinaryOp::logical_or:
        return acc_t(a != acc_t(0) || b != acc_t(0));
      case BinaryOp::logical_xor:
        return acc_t((a != acc_t(0)) != (b != acc_t(0)));
      default:
        break;
    }
    if constexpr (!kFloating) {
      switch (op) {
        // bool computes as 0/1, where the bitwise ops are the logical ones
        case BinaryOp::bitwise_and:
          return a & b;
        case BinaryOp::bitwise_or:
          return a | b;
        case BinaryOp::bitwise_xor:
          return a ^ b;
        case BinaryOp::fmod:  // b == 0: the CPU throws, a kernel cannot; 0 instead of a trap
          return (b == 0 || b == -1) ? acc_t(0) : acc_t(a % b);
        default:
          break;
      }
    }
    if constexpr (kFloating) {
      switch (op) {
        case BinaryOp::fmod:
          return m_fmod(a, b);
        case BinaryOp::div:
          return a / b;
        case BinaryOp::relu_backward:
          return b > acc_t(0) ? a : acc_t(0);
        case BinaryOp::pow:
          return m_pow(a, b);
        case BinaryOp::atan2:
          return m_atan2(a, b);
        case BinaryOp::hypot:
          return m_hypot(a, b);
        case BinaryOp::sigmoid_backward:
          return a * b * (acc_t(1) - b);
        case BinaryOp::tanh_backward:
          return a * (acc_t(1) - b * b);
        default:
          break;
      }
    }
    return a;  // unreachable: binary_supported filtered the op on the host
  }
};

// out[i] = f(a[i], b[i]) over n dense elements, a 16-byte vector per thread; an input flagged
// scalar is one value broadcast.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads, kContiguousBlocksPerSm<T>)
    binary_contiguous_kernel(BinaryFunctor<T> f, T* out, const T* a, const T* b, int64_t n,
                             bool a_scalar, bool b_scalar) {
  using acc_t = OpMath<T>;
  constexpr int V = 16 / sizeof(T);
  using Vec = AlignedVec<T, V>;
  const acc_t a0 = a_scalar ? convert<acc_t>(a[0]) : acc_t(0);
  const acc_t b0 = b_scalar ? convert<acc_t>(b[0]) : acc_t(0);
  const int64_t nvec = n / V;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // this thread's vector
  if (i < nvec) {
    Vec va, vb;
    if (!a_scalar) va = reinterpret_cast<const Vec*>(a)[i];
    if (!b_scalar) vb = reinterpret_cast<const Vec*>(b)[i];
    Vec y;
#pragma unroll
    for (int j = 0; j < V; ++j)
      y.v[j] = convert<T>(
          f(a_scalar ? a0 : convert<acc_t>(va.v[j]), b_scalar ? b0 : convert<acc_t>(vb.v[j])));
    reinterpret_cast<Vec*>(out)[i] = y;
  }
  const int64_t t = nvec * V + i;  // the n % V elements past the last whole vector
  if (t < n)
    out[t] =
        convert<T>(f(a_scalar ? a0 : convert<acc_t>(a[t]), b_scalar ? b0 : convert<acc_t>(b[t])));
}

// The comparisons and logical ops on a non-bool input over dense operands: the same 16-byte input
// vectors, the V bool results of a thread stored as one V-byte word.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads, kContiguousBlocksPerSm<T>)
    binary_contiguous_bool_kernel(BinaryFunctor<T> f, bool* out, const T* a, const T* b, int64_t n,
                                  bool a_scalar, bool b_scalar) {
  using acc_t = OpMath<T>;
  constexpr int V = 16 / sizeof(T);
  using Vec = AlignedVec<T, V>;
  using OutVec = AlignedVec<bool, V>;
  const acc_t a0 = a_scalar ? convert<acc_t>(a[0]) : acc_t(0);
  const acc_t b0 = b_scalar ? convert<acc_t>(b[0]) : acc_t(0);
  const int64_t nvec = n / V;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // this thread's vector
  if (i < nvec) {
    Vec va, vb;
    if (!a_scalar) va = reinterpret_cast<const Vec*>(a)[i];
    if (!b_scalar) vb = reinterpret_cast<const Vec*>(b)[i];
    OutVec y;
#pragma unroll
    for (int j = 0; j < V; ++j)
      y.v[j] = convert<bool>(
          f(a_scalar ? a0 : convert<acc_t>(va.v[j]), b_scalar ? b0 : convert<acc_t>(vb.v[j])));
    reinterpret_cast<OutVec*>(out)[i] = y;
  }
  const int64_t t = nvec * V + i;  // the n % V elements past the last whole vector
  if (t < n)
    out[t] = convert<bool>(
        f(a_scalar ? a0 : convert<acc_t>(a[t]), b_scalar ? b0 : convert<acc_t>(b[t])));
}

template <typename T>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    binary_strided_kernel(BinaryFunctor<T> f, OffsetCalc<3> oc, char* out, const char* a,
                          const char* b, int64_t n, bool out_bool) {
  using acc_t = OpMath<T>;
  // A block takes tiles of kStridedUnroll * blockDim consecutive elements (thread t gets t,
  // t + blockDim, ...): coalesced, and its loads stay within a few DRAM pages.
  const int64_t tile = int64_t(blockDim.x) * kStridedUnroll;
  for (int64_t first = int64_t(blockIdx.x) * tile + threadIdx.x; first < n;
       first += int64_t(gridDim.x) * tile) {
    int64_t out_off[kStridedUnroll];
    acc_t xa[kStridedUnroll], xb[kStridedUnroll];
#pragma unroll
    for (int u = 0; u < kStridedUnroll; ++u) {
      if (first + u * int64_t(blockDim.x) < n) {
        int64_t off[3];
        oc.get(first + u * int64_t(blockDim.x), off);
        out_off[u] = off[0];
        xa[u] = convert<acc_t>(*reinterpret_cast<const T*>(a + off[1]));
        xb[u] = convert<acc_t>(*reinterpret_cast<const T*>(b + off[2]));
      }
    }
#pragma unroll
    for (int u = 0; u < kStridedUnroll; ++u) {
      if (first + u * int64_t(blockDim.x) < n) {
        const acc_t y = f(xa[u], xb[u]);
        if (out_bool)
          *reinterpret_cast<bool*>(out + out_off[u]) = convert<bool>(y);
        else
          *reinterpret_cast<T*>(out + out_off[u]) = convert<T>(y);
      }
    }
  }
}

template <typename T>
void launch_binary(const ElementwiseIter& iter, BinaryOp op, double alpha, bool out_bool,
                   cudaStream_t stream) {
  using acc_t = OpMath<T>;
  const BinaryFunctor<T> f{op, scalar_param<acc_t>(alpha)};
  const int device = iter.device.index;
  const int64_t n = iter.numel;
  constexpr int V = 16 / sizeof(T);
  // A bool output takes V bytes per thread (one word), so it needs V-byte alignment only.
  bool contiguous = operand_is_flat(iter, 0) && is_aligned(iter.data[0], out_bool ? V : 16);
  bool scalar[2] = {false, false};
  for (int k = 0; k < 2 && contiguous; ++k) {
    scalar[k] = operand_is_broadcast_scalar(iter, k + 1);
    contiguous = scalar[k] || (operand_is_flat(iter, k + 1) && is_aligned(iter.data[k + 1], 16));
  }
  if (contiguous && out_bool) {
    binary_contiguous_bool_kernel<T><<<blocks_for((n + V - 1) / V), kBlockThreads, 0, stream>>>(
        f, reinterpret_cast<bool*>(iter.data[0]), reinterpret_cast<const T*>(iter.data[1]),
        reinterpret_cast<const T*>(iter.data[2]), n, scalar[0], scalar[1]);
    EMBER_CUDA_LAUNCH_CHECK();
  } else if (contiguous) {
    binary_contiguous_kernel<T><<<blocks_for((n + V - 1) / V), kBlockThreads, 0, stream>>>(
        f, reinterpret_cast<T*>(iter.data[0]), reinterpret_cast<const T*>(iter.data[1]),
        reinterpret_cast<const T*>(iter.data[2]), n, scalar[0], scalar[1]);
    EMBER_CUDA_LAUNCH_CHECK();
  } else {
    binary_strided_kernel<T>
        <<<grid_for((n + kStridedUnroll - 1) / kStridedUnroll, device, strided_blocks_per_sm(iter)),
           kBlockThreads, 0, stream>>>(f, make_offset_calc<3>(iter), iter.data[0], iter.data[1],
                                       iter.data[2], n, out_bool);
    EMBER_CUDA_LAUNCH_CHECK();
  }
}

void binary_cuda(const ElementwiseIter& iter, BinaryOp op, double alpha) {
  if (iter.numel == 0) return;
  EMBER_INTERNAL_ASSERT(iter.num_operands == 3, "binary_kernel: expected 3 operands, got ",
                        iter.num_operands);
  const DType dtype = iter.dtypes[1];
  EMBER_INTERNAL_ASSERT(iter.dtypes[2] == dtype, "binary_kernel: op ", binary_op_name(op),
                        " got inputs of dtypes ", dtype_name(dtype), " and ",
                        dtype_name(iter.dtypes[2]), "; ops/ must convert them to one dtype");
  EMBER_CHECK_STATUS(binary_supported(op, dtype), not_supported, "binary op ", binary_op_name(op),
                     ": dtype ", dtype_name(dtype),
                     " is not supported on CUDA; convert the inputs to a floating dtype first");
  if (op == BinaryOp::add || op == BinaryOp::sub)
    check_integral_scalar(binary_op_name(op), dtype, alpha);
  const DType out_dtype = iter.dtypes[0];
  const bool out_bool = out_dtype == DType::boolean && dtype != DType::boolean;
  EMBER_INTERNAL_ASSERT(out_dtype == dtype || out_bool, "binary_kernel: op ", binary_op_name(op),
                        " got output dtype ", dtype_name(out_dtype), " for inputs of dtype ",
                        dtype_name(dtype));
  DeviceGuard device_guard(iter.device);
  cudaStream_t stream = stream_of(iter.device);
  dispatch_all_dtypes(dtype, "binary_kernel", [&](auto tag) {
    using scalar_t = decltype(tag);
    launch_binary<scalar_t>(iter, op, alpha, out_bool, stream);
  });
}

}  // namespace
}  // namespace ember::cuda

namespace ember {
EMBER_REGISTER_KERNEL(unary_kernel, CUDA, dispatch::kAllTypes, &cuda::unary_cuda);
EMBER_REGISTER_KERNEL(binary_kernel, CUDA, dispatch::kAllTypes, &cuda::binary_cuda);
}  // namespace ember
