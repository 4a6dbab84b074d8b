// CPU binary elementwise kernels (BinaryOp): arithmetic on floating, integer and bool operands,
// and the comparisons and logical ops, which write bool. The loop machinery and the exact-math rule
// are in elementwise_loop.h.
#include "ember/cpu_kernels/elementwise_loop.h"

namespace ember {
namespace {

using namespace cpu_elementwise;

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
    case BinaryOp::bitwise_and:
      return "bitwise_and";
    case BinaryOp::bitwise_or:
      return "bitwise_or";
    case BinaryOp::bitwise_xor:
      return "bitwise_xor";
    case BinaryOp::logical_xor:
      return "logical_xor";
    case BinaryOp::fmod:
      return "fmod";
    case BinaryOp::hypot:
      return "hypot";
  }
  return "binary op";
}

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
    case BinaryOp::logical_xor:
      run([](C a, C b) { return (a != C(0)) != (b != C(0)); });
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
    case BinaryOp::hypot:
      return run([](C a, C b) { return std::hypot(a, b); });
    // Python's modulo: the result takes the divisor's sign (torch.remainder).
    case BinaryOp::remainder:
      return run([](C a, C b) {
        C r = std::fmod(a, b);
        if (r != C(0) && ((r < C(0)) != (b < C(0)))) r += b;
        return r;
      });
    // C's fmod: the result takes the dividend's sign (torch.fmod).
    case BinaryOp::fmod:
      return run([](C a, C b) { return std::fmod(a, b); });
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
    case BinaryOp::bitwise_and:
      return run([](T a, T b) { return T(a & b); });
    case BinaryOp::bitwise_or:
      return run([](T a, T b) { return T(a | b); });
    case BinaryOp::bitwise_xor:
      return run([](T a, T b) { return T(a ^ b); });
    case BinaryOp::fmod:
      // C's truncated modulus: the result takes the dividend's sign.
      return ElementwiseLoop<T, T, 2>::run(iter, [](T* out, const std::array<const T*, 2>& in,
                                                    int64_t n) {
        for (int64_t i = 0; i < n; ++i)
          EMBER_CHECK(in[1][i] != 0, "fmod: integer division by zero (the divisor has a zero at ",
                      "some position); use a floating dtype for IEEE semantics");
        for (int64_t i = 0; i < n; ++i) {
          const T b = in[1][i];
          if constexpr (std::is_signed_v<T>) {
            out[i] = b == T(-1) ? T(0) : T(in[0][i] % b);  // lowest % -1 traps on x86
          } else {
            out[i] = T(in[0][i] % b);
          }
        }
      });
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
    case BinaryOp::bitwise_and:
      return run([](bool a, bool b) { return a && b; });
    case BinaryOp::bitwise_or:
      return run([](bool a, bool b) { return a || b; });
    case BinaryOp::bitwise_xor:
      return run([](bool a, bool b) { return a != b; });
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

}  // namespace

// binary picks the input dtype itself (comparison-like ops write bool), so one entry serves every
// table slot, whichever dtype the op selects by.
EMBER_REGISTER_KERNEL(binary_kernel, CPU, dispatch::kAllTypes, &binary_cpu);

}  // namespace ember
