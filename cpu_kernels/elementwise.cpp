// CPU elementwise kernels: unary (UnaryOp), binary (BinaryOp), where, and copy (dtype conversion).
// They are the reference every CUDA elementwise kernel is tested against, so they use the exact
// library math (std::exp, std::tanh, ...) rather than fast approximations (Eigen's packet sqrt and
// exp are approximate under its default EIGEN_FAST_MATH), and they write plain loops over
// contiguous arrays that the compiler vectorizes. float16/bfloat16 compute in float and round once.
//
// Structure: each op is a "span function" over contiguous arrays of its compute type, instantiated
// once per (op, compute type). ElementwiseLoop feeds it either the operands' memory directly (dense
// rows whose storage type is the compute type) or chunks gathered into buffers (strided and
// broadcast operands, and float16/bfloat16 converted to float) and scatters the results back. The
// loop driver is instantiated per dtype combination only: the span is passed type-erased.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>

#include "ember/kernel_interface/elementwise.h"

namespace ember {
namespace {

// ---- helpers --------------------------------------------------------------------------------

// A non-owning reference to a callable (like C++26 std::function_ref): lets the loop driver take
// any span lambda without being instantiated once per lambda.
template <typename Sig>
class FunctionRef;
template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef>)
      FunctionRef(F&& f)  // NOLINT: implicit by design, the callable outlives the call
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

// The type an op computes in: float for the 16-bit floats, the storage type otherwise.
template <typename T>
struct ComputeType {
  using type = T;
};
template <>
struct ComputeType<Half> {
  using type = float;
};
template <>
struct ComputeType<BFloat16> {
  using type = float;
};
template <typename T>
using compute_t = typename ComputeType<T>::type;

template <typename T>
inline constexpr bool kIsHalfType = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <typename T>
inline constexpr bool kIsFloating = std::is_floating_point_v<T> || kIsHalfType<T>;

template <typename T>
inline compute_t<T> load_compute(const char* p) {
  return compute_t<T>(*reinterpret_cast<const T*>(p));
}
template <typename T>
inline void store_compute(char* p, compute_t<T> v) {
  *reinterpret_cast<T*>(p) = T(v);
}

// Converts one value between any two dtypes: 16-bit floats through float (round to nearest even,
// tensor/half.h), floating to integer truncates toward zero, anything to bool is `!= 0` (NaN is
// true), floating to uint8 goes through int64 so that -1.0 wraps to 255 as in PyTorch.
template <typename To, typename From>
inline To convert_value(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return compute_t<From>(v) != compute_t<From>(0);
  } else if constexpr (kIsHalfType<From>) {
    return convert_value<To>(float(v));
  } else if constexpr (kIsHalfType<To>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, uint8_t> && std::is_floating_point_v<From>) {
    return static_cast<uint8_t>(static_cast<int64_t>(v));
  } else {
    return static_cast<To>(v);
  }
}

// A double op parameter (fill value, scalar operand) as the value of dtype T.
template <typename T>
inline T scalar_as(double v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else if constexpr (kIsFloating<T>) {
    return T(static_cast<compute_t<T>>(v));
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return static_cast<int64_t>(v);
  } else {
    return static_cast<T>(static_cast<int64_t>(v));
  }
}

const char* unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg:
      return "neg";
    case UnaryOp::exp:
      return "exp";
    case UnaryOp::log:
      return "log";
    case UnaryOp::sqrt:
      return "sqrt";
    case UnaryOp::rsqrt:
      return "rsqrt";
    case UnaryOp::abs:
      return "abs";
    case UnaryOp::tanh:
      return "tanh";
    case UnaryOp::sigmoid:
      return "sigmoid";
    case UnaryOp::relu:
      return "relu";
    case UnaryOp::sin:
      return "sin";
    case UnaryOp::cos:
      return "cos";
    case UnaryOp::sign:
      return "sign";
    case UnaryOp::reciprocal:
      return "reciprocal";
    case UnaryOp::square:
      return "square";
    case UnaryOp::log1p:
      return "log1p";
    case UnaryOp::expm1:
      return "expm1";
    case UnaryOp::floor:
      return "floor";
    case UnaryOp::ceil:
      return "ceil";
    case UnaryOp::round:
      return "round";
    case UnaryOp::logical_not:
      return "logical_not";
    case UnaryOp::isnan:
      return "isnan";
    case UnaryOp::isfinite:
      return "isfinite";
    case UnaryOp::clamp:
      return "clamp";
    case UnaryOp::pow_scalar:
      return "pow";
    case UnaryOp::add_scalar:
      return "add";
    case UnaryOp::mul_scalar:
      return "mul";
    case UnaryOp::rsub_scalar:
      return "rsub";
    case UnaryOp::rdiv_scalar:
      return "div";
    case UnaryOp::fill:
      return "fill";
  }
  return "unary op";
}

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add:
      return "add";
    case BinaryOp::sub:
      return "sub";
    case BinaryOp::mul:
      return "mul";
    case BinaryOp::div:
      return "div";
    case BinaryOp::pow:
      return "pow";
    case BinaryOp::maximum:
      return "maximum";
    case BinaryOp::minimum:
      return "minimum";
    case BinaryOp::atan2:
      return "atan2";
    case BinaryOp::remainder:
      return "remainder";
    case BinaryOp::eq:
      return "eq";
    case BinaryOp::ne:
      return "ne";
    case BinaryOp::lt:
      return "lt";
    case BinaryOp::le:
      return "le";
    case BinaryOp::gt:
      return "gt";
    case BinaryOp::ge:
      return "ge";
    case BinaryOp::logical_and:
      return "logical_and";
    case BinaryOp::logical_or:
      return "logical_or";
    case BinaryOp::relu_backward:
      return "relu_backward";
    case BinaryOp::sigmoid_backward:
      return "sigmoid_backward";
    case BinaryOp::tanh_backward:
      return "tanh_backward";
  }
  return "binary op";
}

[[noreturn]] void throw_unsupported(const char* op, DType dtype) {
  EMBER_THROW(not_supported, op, ": dtype ", dtype_name(dtype),
              " is not supported on the CPU; convert the input to a supported dtype first "
              "(every op supports float32 and float64)");
}

// ---- the loop -------------------------------------------------------------------------------

// Calls row(ptrs, strides, n) for every innermost row of the loop: ptrs are the operands' addresses
// at the start of the row, strides their byte strides along it. A contiguous loop is one row. The
// outer dims are walked with a counter, never with a per-element offset computation.
template <typename RowFn>
void for_each_row(const ElementwiseIter& iter, RowFn&& row) {
  if (iter.numel == 0) return;
  const int num_ops = iter.num_operands;
  char* ptrs[kMaxIterOperands];
  int64_t row_strides[kMaxIterOperands];
  for (int k = 0; k < num_ops; ++k) ptrs[k] = iter.data[k];
  if (iter.ndim == 0 || iter.is_contiguous()) {
    for (int k = 0; k < num_ops; ++k) row_strides[k] = int64_t(element_size(iter.dtypes[k]));
    row(ptrs, row_strides, iter.numel);
    return;
  }
  const int last = iter.ndim - 1;
  const int64_t row_len = iter.sizes[last];
  for (int k = 0; k < num_ops; ++k) row_strides[k] = iter.strides[k][last];
  int64_t counter[kMaxIterDims] = {};
  const int64_t num_rows = iter.numel / row_len;
  for (int64_t r = 0; r < num_rows; ++r) {
    row(ptrs, row_strides, row_len);
    for (int d = last - 1; d >= 0; --d) {
      if (++counter[d] < iter.sizes[d]) {
        for (int k = 0; k < num_ops; ++k) ptrs[k] += iter.strides[k][d];
        break;
      }
      counter[d] = 0;
      for (int k = 0; k < num_ops; ++k) ptrs[k] -= iter.strides[k][d] * (iter.sizes[d] - 1);
    }
  }
}

// Values per gathered chunk: big enough to amortise the span call, small enough for the stack.
inline constexpr int64_t kChunk = 256;
// Dense rows shorter than this are gathered too (a call per tiny row costs more than a copy).
inline constexpr int64_t kMinDirectRow = 16;

// Runs a span function of NIn inputs (storage type In) and one output (storage type Out) over the
// loop. The span sees contiguous arrays of the compute types and must be elementwise (output i
// depends only on inputs i), which also makes exact in-place aliasing safe.
template <typename Out, typename In, int NIn>
struct ElementwiseLoop {
  static_assert(NIn >= 1 && NIn + 1 <= kMaxIterOperands);
  using OutC = compute_t<Out>;
  using InC = compute_t<In>;
  using Inputs = std::array<const InC*, NIn>;
  using Span = FunctionRef<void(OutC*, const Inputs&, int64_t)>;

  static void run(const ElementwiseIter& iter, Span span) {
    EMBER_INTERNAL_ASSERT(iter.num_operands == NIn + 1, "elementwise loop expects ", NIn + 1,
                          " operands, the iterator has ", iter.num_operands);
    EMBER_INTERNAL_ASSERT(iter.dtypes[0] == dtype_of<Out>::value, "output dtype ",
                          dtype_name(iter.dtypes[0]), " but the kernel writes ",
                          dtype_name(dtype_of<Out>::value));
    for (int k = 1; k <= NIn; ++k)
      EMBER_INTERNAL_ASSERT(iter.dtypes[k] == dtype_of<In>::value, "input ", k, " has dtype ",
                            dtype_name(iter.dtypes[k]), " but the kernel reads ",
                            dtype_name(dtype_of<In>::value));
    constexpr bool kNative = std::is_same_v<Out, OutC> && std::is_same_v<In, InC>;

    InC in_buf[NIn][kChunk];
    OutC out_buf[kChunk];
    char* out_ptrs[kChunk];
    int64_t filled = 0;
    auto flush = [&] {
      Inputs inputs;
      for (int k = 0; k < NIn; ++k) inputs[k] = in_buf[k];
      span(out_buf, inputs, filled);
      for (int64_t j = 0; j < filled; ++j) store_compute<Out>(out_ptrs[j], out_buf[j]);
      filled = 0;
    };

    for_each_row(iter, [&](char* const* ptrs, const int64_t* strides, int64_t n) {
      if constexpr (kNative) {
        bool dense = strides[0] == int64_t(sizeof(Out));
        for (int k = 1; k <= NIn; ++k) dense = dense && strides[k] == int64_t(sizeof(In));
        if (dense && (n >= kMinDirectRow || n == iter.numel)) {
          Inputs inputs;
          for (int k = 0; k < NIn; ++k) inputs[k] = reinterpret_cast<const In*>(ptrs[k + 1]);
          span(reinterpret_cast<Out*>(ptrs[0]), inputs, n);
          return;
        }
      }
      for (int64_t i = 0; i < n;) {
        const int64_t take = std::min(n - i, kChunk - filled);
        for (int64_t j = 0; j < take; ++j) out_ptrs[filled + j] = ptrs[0] + (i + j) * strides[0];
        for (int k = 0; k < NIn; ++k) {
          const char* src = ptrs[k + 1] + i * strides[k + 1];
          const int64_t stride = strides[k + 1];
          for (int64_t j = 0; j < take; ++j)
            in_buf[k][filled + j] = load_compute<In>(src + j * stride);
        }
        filled += take;
        i += take;
        if (filled == kChunk) flush();
      }
    });
    if (filled > 0) flush();
  }
};

template <typename OutC, typename C, typename F>
auto unary_span(F f) {
  return [f](OutC* out, const std::array<const C*, 1>& in, int64_t n) {
    const C* x = in[0];
    for (int64_t i = 0; i < n; ++i) out[i] = f(x[i]);
  };
}

template <typename OutC, typename C, typename F>
auto binary_span(F f) {
  return [f](OutC* out, const std::array<const C*, 2>& in, int64_t n) {
    const C* a = in[0];
    const C* b = in[1];
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
  };
}

// ---- unary ------------------------------------------------------------------------------------

// Ops that write bool (isnan, isfinite, logical_not), for any input dtype T.
template <typename T>
bool try_unary_predicate(const ElementwiseIter& iter, UnaryOp op) {
  using C = compute_t<T>;
  auto run = [&](auto pred) {
    EMBER_INTERNAL_ASSERT(iter.dtypes[0] == DType::boolean, unary_op_name(op),
                          " writes bool, the output has dtype ", dtype_name(iter.dtypes[0]));
    ElementwiseLoop<bool, T, 1>::run(iter, unary_span<bool, C>(pred));
  };
  switch (op) {
    case UnaryOp::logical_not:
      run([](C x) { return x == C(0); });
      return true;
    case UnaryOp::isnan:
      if constexpr (kIsFloating<T>)
        run([](C x) { return x != x; });
      else
        run([](C) { return false; });
      return true;
    case UnaryOp::isfinite:
      if constexpr (kIsFloating<T>)
        run([](C x) { return std::isfinite(x); });
      else
        run([](C) { return true; });
      return true;
    default:
      return false;
  }
}

template <typename T>
void unary_floating(const ElementwiseIter& iter, UnaryOp op, const UnaryParams& p) {
  using C = compute_t<T>;
  if (try_unary_predicate<T>(iter, op)) return;
  auto run = [&](auto f) { ElementwiseLoop<T, T, 1>::run(iter, unary_span<C, C>(f)); };
  const C a = C(p.a);
  switch (op) {
    case UnaryOp::neg:
      return run([](C x) { return -x; });
    case UnaryOp::exp:
      return run([](C x) { return std::exp(x); });
    case UnaryOp::log:
      return run([](C x) { return std::log(x); });
    case UnaryOp::sqrt:
      return run([](C x) { return std::sqrt(x); });
    case UnaryOp::rsqrt:
      return run([](C x) { return C(1) / std::sqrt(x); });
    case UnaryOp::abs:
      return run([](C x) { return std::abs(x); });
    case UnaryOp::tanh:
      return run([](C x) { return std::tanh(x); });
    case UnaryOp::sigmoid:
      return run([](C x) { return C(1) / (C(1) + std::exp(-x)); });
    // NaN < 0 is false: NaN passes through, as PyTorch's relu (clamp_min) does.
    case UnaryOp::relu:
      return run([](C x) { return x < C(0) ? C(0) : x; });
    case UnaryOp::sin:
      return run([](C x) { return std::sin(x); });
    case UnaryOp::cos:
      return run([](C x) { return std::cos(x); });
    // (0 < x) - (x < 0), as PyTorch: sign(NaN) = 0.
    case UnaryOp::sign:
      return run([](C x) { return C(int(C(0) < x) - int(x < C(0))); });
    case UnaryOp::reciprocal:
      return run([](C x) { return C(1) / x; });
    case UnaryOp::square:
      return run([](C x) { return x * x; });
    case UnaryOp::log1p:
      return run([](C x) { return std::log1p(x); });
    case UnaryOp::expm1:
      return run([](C x) { return std::expm1(x); });
    case UnaryOp::floor:
      return run([](C x) { return std::floor(x); });
    case UnaryOp::ceil:
      return run([](C x) { return std::ceil(x); });
    // Half to even, as torch.round (nearbyint in the default rounding mode).
    case UnaryOp::round:
      return run([](C x) { return std::nearbyint(x); });
    case UnaryOp::clamp: {
      // NaN bound = no bound. Two steps so that min > max gives max, as torch.clamp; a NaN input
      // fails both comparisons and passes through.
      const C lo = std::isnan(p.a) ? -std::numeric_limits<C>::infinity() : C(p.a);
      const C hi = std::isnan(p.b) ? std::numeric_limits<C>::infinity() : C(p.b);
      return run([lo, hi](C x) {
        const C y = x < lo ? lo : x;
        return y > hi ? hi : y;
      });
    }
    case UnaryOp::pow_scalar:
      // The exponents PyTorch special-cases (exact products, sqrt) before falling back to pow.
      if (p.a == 2) return run([](C x) { return x * x; });
      if (p.a == 3) return run([](C x) { return x * x * x; });
      if (p.a == 1) return run([](C x) { return x; });
      if (p.a == 0.5) return run([](C x) { return std::sqrt(x); });
      if (p.a == -0.5) return run([](C x) { return C(1) / std::sqrt(x); });
      if (p.a == -1) return run([](C x) { return C(1) / x; });
      if (p.a == -2) return run([](C x) { return C(1) / (x * x); });
      return run([a](C x) { return std::pow(x, a); });
    case UnaryOp::add_scalar:
      return run([a](C x) { return x + a; });
    case UnaryOp::mul_scalar:
      return run([a](C x) { return x * a; });
    case UnaryOp::rsub_scalar:
      return run([a](C x) { return a - x; });
    case UnaryOp::rdiv_scalar:
      return run([a](C x) { return a / x; });
    default:
      throw_unsupported(unary_op_name(op), dtype_of<T>::value);
  }
}

// The integer scalar of an integer op; a fractional scalar means the op forgot to promote.
template <typename T>
T integral_scalar(const char* op, double v) {
  EMBER_CHECK(std::trunc(v) == v, op, ": the scalar ", v,
              " is not an integer but the tensor has dtype ", dtype_name(dtype_of<T>::value),
              "; convert the tensor to a floating dtype first");
  return scalar_as<T>(v);
}

// A clamp bound of an integer clamp: the tightest integer bound (ceil for min, floor for max),
// saturated to T's range; NaN means no bound.
template <typename T>
T integral_bound(double v, bool is_min) {
  constexpr T kLowest = std::numeric_limits<T>::lowest();
  constexpr T kMax = std::numeric_limits<T>::max();
  if (std::isnan(v)) return is_min ? kLowest : kMax;
  const double r = is_min ? std::ceil(v) : std::floor(v);
  if (r <= double(kLowest)) return kLowest;
  if (r >= double(kMax)) return kMax;
  return static_cast<T>(r);
}

// int32, int64, uint8: arithmetic wraps around (done in the unsigned type), as in PyTorch.
template <typename T>
void unary_integral(const ElementwiseIter& iter, UnaryOp op, const UnaryParams& p) {
  using U = std::make_unsigned_t<T>;
  if (try_unary_predicate<T>(iter, op)) return;
  auto run = [&](auto f) { ElementwiseLoop<T, T, 1>::run(iter, unary_span<T, T>(f)); };
  switch (op) {
    case UnaryOp::neg:
      return run([](T x) { return T(U(0) - U(x)); });
    case UnaryOp::abs:
      if constexpr (std::is_signed_v<T>)
        return run([](T x) { return x < 0 ? T(U(0) - U(x)) : x; });
      else
        return run([](T x) { return x; });
    case UnaryOp::sign:
      if constexpr (std::is_signed_v<T>)
        return run([](T x) { return T(int(T(0) < x) - int(x < T(0))); });
      else
        return run([](T x) { return T(x != 0); });
    case UnaryOp::square:
      return run([](T x) { return T(U(x) * U(x)); });
    case UnaryOp::relu:
      if constexpr (std::is_signed_v<T>)
        return run([](T x) { return x < 0 ? T(0) : x; });
      else
        return run([](T x) { return x; });
    // Integers are already whole.
    case UnaryOp::floor:
    case UnaryOp::ceil:
    case UnaryOp::round:
      return run([](T x) { return x; });
    case UnaryOp::clamp: {
      const T lo = integral_bound<T>(p.a, true), hi = integral_bound<T>(p.b, false);
      return run([lo, hi](T x) {
        const T y = x < lo ? lo : x;
        return y > hi ? hi : y;
      });
    }
    case UnaryOp::add_scalar: {
      const U a = U(integral_scalar<T>("add", p.a));
      return run([a](T x) { return T(U(x) + a); });
    }
    case UnaryOp::mul_scalar: {
      const U a = U(integral_scalar<T>("mul", p.a));
      return run([a](T x) { return T(U(x) * a); });
    }
    case UnaryOp::rsub_scalar: {
      const U a = U(integral_scalar<T>("rsub", p.a));
      return run([a](T x) { return T(a - U(x)); });
    }
    default:
      throw_unsupported(unary_op_name(op), dtype_of<T>::value);
  }
}

template <typename T>
void fill_loop(const ElementwiseIter& iter, T value) {
  EMBER_INTERNAL_ASSERT(iter.num_operands == 1, "fill expects only the output operand, got ",
                        iter.num_operands);
  for_each_row(iter, [value](char* const* ptrs, const int64_t* strides, int64_t n) {
    if (strides[0] == int64_t(sizeof(T))) {
      T* out = reinterpret_cast<T*>(ptrs[0]);
      for (int64_t i = 0; i < n; ++i) out[i] = value;
    } else {
      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(ptrs[0] + i * strides[0]) = value;
    }
  });
}

void unary_cpu(const ElementwiseIter& iter, UnaryOp op, UnaryParams p) {
  if (op == UnaryOp::fill) {
    EMBER_DISPATCH_ALL_DTYPES(iter.dtypes[0], "fill",
                              [&] { fill_loop<scalar_t>(iter, scalar_as<scalar_t>(p.a)); });
    return;
  }
  EMBER_INTERNAL_ASSERT(iter.num_operands == 2, unary_op_name(op),
                        " expects an output and one input, the iterator has ", iter.num_operands,
                        " operands");
  const DType in_dtype = iter.dtypes[1];
  switch (in_dtype) {
    case DType::f32:
      return unary_floating<float>(iter, op, p);
    case DType::f64:
      return unary_floating<double>(iter, op, p);
    case DType::f16:
      return unary_floating<Half>(iter, op, p);
    case DType::bf16:
      return unary_floating<BFloat16>(iter, op, p);
    case DType::i32:
      return unary_integral<int32_t>(iter, op, p);
    case DType::i64:
      return unary_integral<int64_t>(iter, op, p);
    case DType::u8:
      return unary_integral<uint8_t>(iter, op, p);
    case DType::boolean:
      if (try_unary_predicate<bool>(iter, op)) return;
      throw_unsupported(unary_op_name(op), in_dtype);
  }
}

// ---- binary -----------------------------------------------------------------------------------

// Comparisons and logical ops, for any input dtype T; they write bool.
template <typename T>
bool try_binary_predicate(const ElementwiseIter& iter, BinaryOp op) {
  using C = compute_t<T>;
  auto run = [&](auto pred) { ElementwiseLoop<bool, T, 2>::run(iter, binary_span<bool, C>(pred)); };
  switch (op) {
    case BinaryOp::eq:
      run([](C a, C b) { return a == b; });
      return true;
    case BinaryOp::ne:
      run([](C a, C b) { return a != b; });
      return true;
    case BinaryOp::lt:
      run([](C a, C b) { return a < b; });
      return true;
    case BinaryOp::le:
      run([](C a, C b) { return a <= b; });
      return true;
    case BinaryOp::gt:
      run([](C a, C b) { return a > b; });
      return true;
    case BinaryOp::ge:
      run([](C a, C b) { return a >= b; });
      return true;
    case BinaryOp::logical_and:
      run([](C a, C b) { return a != C(0) && b != C(0); });
      return true;
    case BinaryOp::logical_or:
      run([](C a, C b) { return a != C(0) || b != C(0); });
      return true;
    default:
      return false;
  }
}

template <typename T>
void binary_floating(const ElementwiseIter& iter, BinaryOp op, double alpha) {
  using C = compute_t<T>;
  if (try_binary_predicate<T>(iter, op)) return;
  auto run = [&](auto f) { ElementwiseLoop<T, T, 2>::run(iter, binary_span<C, C>(f)); };
  const C al = C(alpha);
  switch (op) {
    case BinaryOp::add:
      return run([al](C a, C b) { return a + al * b; });
    case BinaryOp::sub:
      return run([al](C a, C b) { return a - al * b; });
    case BinaryOp::mul:
      return run([](C a, C b) { return a * b; });
    case BinaryOp::div:
      return run([](C a, C b) { return a / b; });
    case BinaryOp::pow:
      return run([](C a, C b) { return std::pow(a, b); });
    // NaN in either input gives NaN, as torch.maximum/minimum.
    case BinaryOp::maximum:
      return run([](C a, C b) { return (a > b || a != a) ? a : b; });
    case BinaryOp::minimum:
      return run([](C a, C b) { return (a < b || a != a) ? a : b; });
    case BinaryOp::atan2:
      return run([](C a, C b) { return std::atan2(a, b); });
    // Python's modulo: the result takes the divisor's sign (torch.remainder).
    case BinaryOp::remainder:
      return run([](C a, C b) {
        C r = std::fmod(a, b);
        if (r != C(0) && ((r < C(0)) != (b < C(0)))) r += b;
        return r;
      });
    case BinaryOp::relu_backward:
      return run([](C a, C b) { return b > C(0) ? a : C(0); });
    case BinaryOp::sigmoid_backward:
      return run([](C a, C b) { return a * b * (C(1) - b); });
    case BinaryOp::tanh_backward:
      return run([](C a, C b) { return a * (C(1) - b * b); });
    default:
      throw_unsupported(binary_op_name(op), dtype_of<T>::value);
  }
}

template <typename T>
T integer_pow(T base, T exponent) {
  using U = std::make_unsigned_t<T>;
  U result = 1, b = U(base);
  for (U e = U(exponent); e != 0; e >>= 1) {
    if (e & 1) result = U(result * b);
    b = U(b * b);
  }
  return T(result);
}

template <typename T>
void binary_integral(const ElementwiseIter& iter, BinaryOp op, double alpha) {
  using U = std::make_unsigned_t<T>;
  if (try_binary_predicate<T>(iter, op)) return;
  auto run = [&](auto f) { ElementwiseLoop<T, T, 2>::run(iter, binary_span<T, T>(f)); };
  switch (op) {
    case BinaryOp::add: {
      const U al = U(integral_scalar<T>("add (alpha)", alpha));
      return run([al](T a, T b) { return T(U(a) + al * U(b)); });
    }
    case BinaryOp::sub: {
      const U al = U(integral_scalar<T>("sub (alpha)", alpha));
      return run([al](T a, T b) { return T(U(a) - al * U(b)); });
    }
    case BinaryOp::mul:
      return run([](T a, T b) { return T(U(a) * U(b)); });
    case BinaryOp::maximum:
      return run([](T a, T b) { return a > b ? a : b; });
    case BinaryOp::minimum:
      return run([](T a, T b) { return a < b ? a : b; });
    case BinaryOp::pow:
      // Checked per span, before any value of the span is written.
      return ElementwiseLoop<T, T, 2>::run(
          iter, [](T* out, const std::array<const T*, 2>& in, int64_t n) {
            if constexpr (std::is_signed_v<T>) {
              for (int64_t i = 0; i < n; ++i)
                EMBER_CHECK(in[1][i] >= 0,
                            "pow: integers to negative integer powers are not allowed (exponent ",
                            int64_t(in[1][i]), "); convert the base to a floating dtype");
            }
            for (int64_t i = 0; i < n; ++i) out[i] = integer_pow(in[0][i], in[1][i]);
          });
    case BinaryOp::remainder:
      return ElementwiseLoop<T, T, 2>::run(
          iter, [](T* out, const std::array<const T*, 2>& in, int64_t n) {
            for (int64_t i = 0; i < n; ++i)
              EMBER_CHECK(in[1][i] != 0,
                          "remainder: integer division by zero (the divisor has a zero at ",
                          "some position); use a floating dtype for IEEE semantics");
            for (int64_t i = 0; i < n; ++i) {
              const T a = in[0][i], b = in[1][i];
              if constexpr (std::is_signed_v<T>) {
                if (b == T(-1)) {  // a % -1 traps on x86 for the lowest value
                  out[i] = 0;
                  continue;
                }
                T r = T(a % b);
                if (r != 0 && ((r < 0) != (b < 0))) r = T(r + b);
                out[i] = r;
              } else {
                out[i] = T(a % b);
              }
            }
          });
    case BinaryOp::div:
      EMBER_THROW(not_supported, "div: dtype ", dtype_name(dtype_of<T>::value),
                  " is not supported (division is true division); convert the inputs to a "
                  "floating dtype first");
    default:
      throw_unsupported(binary_op_name(op), dtype_of<T>::value);
  }
}

void binary_bool(const ElementwiseIter& iter, BinaryOp op) {
  if (try_binary_predicate<bool>(iter, op)) return;
  auto run = [&](auto f) { ElementwiseLoop<bool, bool, 2>::run(iter, binary_span<bool, bool>(f)); };
  switch (op) {
    case BinaryOp::maximum:
      return run([](bool a, bool b) { return a || b; });
    case BinaryOp::minimum:
    case BinaryOp::mul:
      return run([](bool a, bool b) { return a && b; });
    default:
      throw_unsupported(binary_op_name(op), DType::boolean);
  }
}

void binary_cpu(const ElementwiseIter& iter, BinaryOp op, double alpha) {
  EMBER_INTERNAL_ASSERT(iter.num_operands == 3, binary_op_name(op),
                        " expects an output and two inputs, the iterator has ", iter.num_operands,
                        " operands");
  EMBER_INTERNAL_ASSERT(iter.dtypes[1] == iter.dtypes[2], binary_op_name(op),
                        ": inputs of different dtypes ", dtype_name(iter.dtypes[1]), " and ",
                        dtype_name(iter.dtypes[2]), " (the op must promote them first)");
  EMBER_INTERNAL_ASSERT(binary_op_writes_bool(op) == (iter.dtypes[0] == DType::boolean) ||
                            iter.dtypes[1] == DType::boolean,
                        binary_op_name(op), ": output dtype ", dtype_name(iter.dtypes[0]),
                        " does not match the op");
  const DType in_dtype = iter.dtypes[1];
  switch (in_dtype) {
    case DType::f32:
      return binary_floating<float>(iter, op, alpha);
    case DType::f64:
      return binary_floating<double>(iter, op, alpha);
    case DType::f16:
      return binary_floating<Half>(iter, op, alpha);
    case DType::bf16:
      return binary_floating<BFloat16>(iter, op, alpha);
    case DType::i32:
      return binary_integral<int32_t>(iter, op, alpha);
    case DType::i64:
      return binary_integral<int64_t>(iter, op, alpha);
    case DType::u8:
      return binary_integral<uint8_t>(iter, op, alpha);
    case DType::boolean:
      return binary_bool(iter, op);
  }
}

// ---- where and copy ---------------------------------------------------------------------------

template <typename T>
void where_loop(const ElementwiseIter& iter) {
  for_each_row(iter, [](char* const* p, const int64_t* s, int64_t n) {
    constexpr int64_t kSize = sizeof(T);
    if (s[0] == kSize && s[1] == 1 && s[2] == kSize && s[3] == kSize) {
      T* out = reinterpret_cast<T*>(p[0]);
      const bool* cond = reinterpret_cast<const bool*>(p[1]);
      const T* a = reinterpret_cast<const T*>(p[2]);
      const T* b = reinterpret_cast<const T*>(p[3]);
      for (int64_t i = 0; i < n; ++i) out[i] = cond[i] ? a[i] : b[i];
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const bool c = *reinterpret_cast<const bool*>(p[1] + i * s[1]);
        *reinterpret_cast<T*>(p[0] + i * s[0]) =
            *reinterpret_cast<const T*>(c ? p[2] + i * s[2] : p[3] + i * s[3]);
      }
    }
  });
}

void where_cpu(const ElementwiseIter& iter) {
  EMBER_INTERNAL_ASSERT(iter.num_operands == 4,
                        "where expects (out, cond, a, b), the iterator has ", iter.num_operands,
                        " operands");
  EMBER_INTERNAL_ASSERT(iter.dtypes[1] == DType::boolean && iter.dtypes[2] == iter.dtypes[0] &&
                            iter.dtypes[3] == iter.dtypes[0],
                        "where: operand dtypes (", dtype_name(iter.dtypes[0]), ", ",
                        dtype_name(iter.dtypes[1]), ", ", dtype_name(iter.dtypes[2]), ", ",
                        dtype_name(iter.dtypes[3]), "), expected (T, bool, T, T)");
  EMBER_DISPATCH_ALL_DTYPES(iter.dtypes[0], "where", [&] { where_loop<scalar_t>(iter); });
}

template <typename To, typename From>
void copy_loop(const ElementwiseIter& iter) {
  for_each_row(iter, [](char* const* p, const int64_t* s, int64_t n) {
    if (s[0] == int64_t(sizeof(To)) && s[1] == int64_t(sizeof(From))) {
      To* out = reinterpret_cast<To*>(p[0]);
      const From* in = reinterpret_cast<const From*>(p[1]);
      for (int64_t i = 0; i < n; ++i) out[i] = convert_value<To>(in[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<To*>(p[0] + i * s[0]) =
            convert_value<To>(*reinterpret_cast<const From*>(p[1] + i * s[1]));
    }
  });
}

void copy_cpu(const ElementwiseIter& iter) {
  EMBER_INTERNAL_ASSERT(iter.num_operands == 2, "copy expects (out, in), the iterator has ",
                        iter.num_operands, " operands");
  EMBER_DISPATCH_ALL_DTYPES(iter.dtypes[0], "copy", [&] {
    using out_t = scalar_t;
    EMBER_DISPATCH_ALL_DTYPES(iter.dtypes[1], "copy", [&] { copy_loop<out_t, scalar_t>(iter); });
  });
}

}  // namespace

// unary and binary pick the input dtype themselves (comparison-like ops write bool), so one entry
// serves every table slot, whichever dtype the op selects by.
EMBER_REGISTER_KERNEL(unary_kernel, CPU, dispatch::kAllTypes, &unary_cpu);
EMBER_REGISTER_KERNEL(binary_kernel, CPU, dispatch::kAllTypes, &binary_cpu);
EMBER_REGISTER_KERNEL(where_kernel, CPU, dispatch::kAllTypes, &where_cpu);
EMBER_REGISTER_KERNEL(copy_kernel, CPU, dispatch::kAllTypes, &copy_cpu);

}  // namespace ember
