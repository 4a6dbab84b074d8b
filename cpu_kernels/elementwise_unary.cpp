// CPU unary elementwise kernels (UnaryOp): the floating, integer and predicate forms, and fill.
// The loop machinery and the exact-math rule are in elementwise_loop.h.
#include "ember/cpu_kernels/elementwise_loop.h"

namespace ember {
namespace {

using namespace cpu_elementwise;

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
    case UnaryOp::log2:
      return "log2";
    case UnaryOp::log10:
      return "log10";
    case UnaryOp::tan:
      return "tan";
    case UnaryOp::asin:
      return "asin";
    case UnaryOp::acos:
      return "acos";
    case UnaryOp::atan:
      return "atan";
    case UnaryOp::sinh:
      return "sinh";
    case UnaryOp::cosh:
      return "cosh";
    case UnaryOp::asinh:
      return "asinh";
    case UnaryOp::acosh:
      return "acosh";
    case UnaryOp::atanh:
      return "atanh";
    case UnaryOp::erf:
      return "erf";
    case UnaryOp::erfc:
      return "erfc";
    case UnaryOp::erfinv:
      return "erfinv";
    case UnaryOp::frac:
      return "frac";
    case UnaryOp::nan_to_num:
      return "nan_to_num";
    case UnaryOp::trunc:
      return "trunc";
    case UnaryOp::isinf:
      return "isinf";
    case UnaryOp::round_decimals:
      return "round";
  }
  return "unary op";
}

// The inverse error function: a rational first guess refined by two Newton steps on std::erf (the
// scheme PyTorch's CPU kernel uses); erfinv(+-1) = +-inf, |y| > 1 gives NaN.
template <typename C>
C erfinv_scalar(C y) {
  constexpr C a[4] = {C(0.886226899), C(-1.645349621), C(0.914624893), C(-0.140543331)};
  constexpr C b[4] = {C(-2.118377725), C(1.442710462), C(-0.329097515), C(0.012229801)};
  constexpr C c[4] = {C(-1.970840454), C(-1.624906493), C(3.429567803), C(1.641345311)};
  constexpr C d[2] = {C(3.543889200), C(1.637067800)};
  const C y_abs = std::abs(y);
  if (!(y_abs <= C(1))) return std::numeric_limits<C>::quiet_NaN();
  if (y_abs == C(1)) return std::copysign(std::numeric_limits<C>::infinity(), y);
  C x;
  if (y_abs <= C(0.7)) {
    const C z = y * y;
    const C num = ((a[3] * z + a[2]) * z + a[1]) * z + a[0];
    const C den = (((b[3] * z + b[2]) * z + b[1]) * z + b[0]) * z + C(1);
    x = y * num / den;
  } else {
    const C z = std::sqrt(-std::log((C(1) - y_abs) / C(2)));
    const C num = ((c[3] * z + c[2]) * z + c[1]) * z + c[0];
    const C den = (d[1] * z + d[0]) * z + C(1);
    x = std::copysign(num, y) / den;
  }
  const C two_over_sqrt_pi = C(1.12837916709551257390);
  x = x - (std::erf(x) - y) / (two_over_sqrt_pi * std::exp(-x * x));
  x = x - (std::erf(x) - y) / (two_over_sqrt_pi * std::exp(-x * x));
  return x;
}

// Ops that write bool (isnan, isfinite, isinf, logical_not), for any input dtype T.
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
    case UnaryOp::isinf:
      if constexpr (kIsFloating<T>)
        run([](C x) { return std::isinf(x); });
      else
        run([](C) { return false; });
      return true;
    default:
      return false;
  }
}

// The transcendental and rounding ops added for issue 34 (log2 ... isinf in UnaryOp).
template <typename T>
void unary_floating_more(const ElementwiseIter& iter, UnaryOp op, const UnaryParams& p) {
  using C = compute_t<T>;
  auto run = [&](auto f) { ElementwiseLoop<T, T, 1>::run(iter, unary_span<C, C>(f)); };
  switch (op) {
    case UnaryOp::log2:
      return run([](C x) { return std::log2(x); });
    case UnaryOp::log10:
      return run([](C x) { return std::log10(x); });
    case UnaryOp::tan:
      return run([](C x) { return std::tan(x); });
    case UnaryOp::asin:
      return run([](C x) { return std::asin(x); });
    case UnaryOp::acos:
      return run([](C x) { return std::acos(x); });
    case UnaryOp::atan:
      return run([](C x) { return std::atan(x); });
    case UnaryOp::sinh:
      return run([](C x) { return std::sinh(x); });
    case UnaryOp::cosh:
      return run([](C x) { return std::cosh(x); });
    case UnaryOp::asinh:
      return run([](C x) { return std::asinh(x); });
    case UnaryOp::acosh:
      return run([](C x) { return std::acosh(x); });
    case UnaryOp::atanh:
      return run([](C x) { return std::atanh(x); });
    case UnaryOp::erf:
      return run([](C x) { return std::erf(x); });
    case UnaryOp::erfc:
      return run([](C x) { return std::erfc(x); });
    case UnaryOp::erfinv:
      return run([](C x) { return erfinv_scalar(x); });
    case UnaryOp::trunc:
      return run([](C x) { return std::trunc(x); });
    case UnaryOp::frac:
      return run([](C x) { return x - std::trunc(x); });
    case UnaryOp::nan_to_num: {
      // ops/ passes replacements within T's finite range.
      const C nan_v = C(p.a), pos_v = C(p.b), neg_v = C(p.c);
      return run([=](C x) {
        return x != x ? nan_v
                      : (x == std::numeric_limits<C>::infinity()
                             ? pos_v
                             : (x == -std::numeric_limits<C>::infinity() ? neg_v : x));
      });
    }
    case UnaryOp::round_decimals: {
      const C scale = C(p.a);
      if (p.b != 0) return run([scale](C x) { return std::nearbyint(x / scale) * scale; });
      return run([scale](C x) { return std::nearbyint(x * scale) / scale; });
    }
    default:
      throw_unsupported(unary_op_name(op), dtype_of<T>::value);
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
      return unary_floating_more<T>(iter, op, p);
  }
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
    case UnaryOp::trunc:
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

}  // namespace

// unary picks the input dtype itself (isnan and the like write bool), so one entry serves every
// table slot, whichever dtype the op selects by.
EMBER_REGISTER_KERNEL(unary_kernel, CPU, dispatch::kAllTypes, &unary_cpu);

}  // namespace ember
