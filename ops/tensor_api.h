// The libtorch-style surface beside the core ops of ops/ops.h: Scalar operands, comparisons with
// scalars, remainder / fmod, bitwise and logical ops and their operators (ops/comparison.cpp,
// ops/bitwise.cpp), a few more unary ops whose kernels exist (sign, floor, ceil, round, log1p,
// expm1; ops/unary_extra.cpp), and the factories libtorch users reach for: tensor({...}),
// from_blob, the *_like family with options, linspace, logspace, eye (ops/factory_api.cpp).
// Included at the end of ops/ops.h.
#pragma once
#include <functional>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "ember/ops/ops.h"

namespace ember {

// A number operand (libtorch's Scalar). It remembers whether it was written as a bool, an integer
// or a floating value, which decides the dtype it computes in beside a tensor (PyTorch's rule for
// numbers: a floating number makes an integral or bool tensor compute in float32; an integer
// makes a bool tensor compute in int64; otherwise the tensor's dtype wins). Held as double, so
// integers beyond 2^53 lose precision.
class Scalar {
 public:
  // How the number was written: as a bool, an integer type or a floating type.
  enum class Kind : uint8_t { boolean, integral, floating };
  // Any arithmetic value (bool, integer or floating type); its C++ type sets kind().
  template <typename T>
  requires std::is_arithmetic_v<T> Scalar(T v)  // NOLINT: implicit, as libtorch's
      : value_(static_cast<double>(v)),
        kind_(std::is_same_v<T, bool> ? Kind::boolean
                                      : (std::is_integral_v<T> ? Kind::integral : Kind::floating)) {
  }
  // The value as a double (exact for integers up to 2^53).
  double to_double() const { return value_; }
  // How it was written (boolean, integral or floating).
  Kind kind() const { return kind_; }
  // True when it was written as a floating value (PyTorch's Scalar::isFloatingPoint).
  bool is_floating_point() const { return kind_ == Kind::floating; }

 private:
  double value_;
  Kind kind_;
};

// The dtype `t` and `s` compute in (PyTorch's result_type for a tensor and a number).
DType result_type(const Tensor& t, const Scalar& s);
// `s` as a 0-dim tensor of result_type(t, s) on t's device: the operand the binary kernels
// broadcast.
Tensor scalar_operand(const Tensor& t, const Scalar& s);

// ---- comparisons with a number (ops/comparison.cpp); the results are bool ----
Tensor eq(const Tensor& a, const Scalar& b);
Tensor ne(const Tensor& a, const Scalar& b);
Tensor lt(const Tensor& a, const Scalar& b);
Tensor le(const Tensor& a, const Scalar& b);
Tensor gt(const Tensor& a, const Scalar& b);
Tensor ge(const Tensor& a, const Scalar& b);
// True when a and b have the same shape and the same values (any dtypes and devices).
bool equal(const Tensor& a, const Tensor& b);

// ---- remainder and fmod (ops/bitwise.cpp); broadcasting, differentiable in floating dtypes ----
// remainder: Python's modulus, the result takes the divisor's sign (torch.remainder).
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, const Scalar& b);
Tensor remainder(const Scalar& a, const Tensor& b);
// fmod: C's fmod, the result takes the dividend's sign (torch.fmod).
Tensor fmod(const Tensor& a, const Tensor& b);
Tensor fmod(const Tensor& a, const Scalar& b);

// ---- bitwise (integer and bool tensors) and logical (any dtype, bool result) ----
Tensor bitwise_and(const Tensor& a, const Tensor& b);
Tensor bitwise_or(const Tensor& a, const Tensor& b);
Tensor bitwise_xor(const Tensor& a, const Tensor& b);
Tensor bitwise_and(const Tensor& a, const Scalar& b);
Tensor bitwise_or(const Tensor& a, const Scalar& b);
Tensor bitwise_xor(const Tensor& a, const Scalar& b);
Tensor bitwise_not(const Tensor& a);  // logical not on bool
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);

// ---- more unary ops (ops/unary_extra.cpp) ----
Tensor sign(const Tensor& a);   // -1, 0, 1; zero gradient
Tensor floor(const Tensor& a);  // zero gradient
Tensor ceil(const Tensor& a);   // zero gradient
Tensor round(const Tensor& a);  // half to even, as torch.round; zero gradient
Tensor log1p(const Tensor& a);
Tensor expm1(const Tensor& a);
Tensor clamp_min(const Tensor& a, double min);
Tensor clamp_max(const Tensor& a, double max);
Tensor& sub_(Tensor& a, double b);
Tensor& div_(Tensor& a, double b);  // floating tensors only (the quotient is not an integer)

// ---- shape helpers (ops/unary_extra.cpp) ----
std::vector<Tensor> unbind(const Tensor& a, int64_t dim = 0);  // views, one per index of dim

// ---- operators (ops/comparison.cpp, ops/bitwise.cpp) ----
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, const Scalar& b);
Tensor operator!=(const Tensor& a, const Scalar& b);
Tensor operator<(const Tensor& a, const Scalar& b);
Tensor operator<=(const Tensor& a, const Scalar& b);
Tensor operator>(const Tensor& a, const Scalar& b);
Tensor operator>=(const Tensor& a, const Scalar& b);
Tensor operator==(const Scalar& a, const Tensor& b);
Tensor operator!=(const Scalar& a, const Tensor& b);
Tensor operator<(const Scalar& a, const Tensor& b);
Tensor operator<=(const Scalar& a, const Tensor& b);
Tensor operator>(const Scalar& a, const Tensor& b);
Tensor operator>=(const Scalar& a, const Tensor& b);
Tensor operator%(const Tensor& a, const Tensor& b);
Tensor operator%(const Tensor& a, const Scalar& b);
Tensor operator%(const Scalar& a, const Tensor& b);
Tensor operator&(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, const Tensor& b);
Tensor operator^(const Tensor& a, const Tensor& b);
Tensor operator&(const Tensor& a, const Scalar& b);
Tensor operator|(const Tensor& a, const Scalar& b);
Tensor operator^(const Tensor& a, const Scalar& b);
Tensor operator&(const Scalar& a, const Tensor& b);
Tensor operator|(const Scalar& a, const Tensor& b);
Tensor operator^(const Scalar& a, const Tensor& b);
Tensor operator~(const Tensor& a);

// ---- factories (ops/factory_api.cpp) ----
// The *_like factories take shape from `like` and, from `options`, the dtype and device when
// given (has_dtype / has_device), else like's; requires_grad and memory format from options.
Tensor empty_like(const Tensor& like, const TensorOptions& options);
Tensor zeros_like(const Tensor& like, const TensorOptions& options);
Tensor ones_like(const Tensor& like, const TensorOptions& options);
Tensor full_like(const Tensor& like, double value, const TensorOptions& options);
Tensor rand_like(const Tensor& like, const TensorOptions& options = {});
Tensor randn_like(const Tensor& like, const TensorOptions& options = {});
Tensor randint_like(const Tensor& like, int64_t high, const TensorOptions& options = {});
Tensor randint_like(const Tensor& like, int64_t low, int64_t high,
                    const TensorOptions& options = {});
// `steps` values from start to end inclusive, evenly spaced (logspace: base^those values).
Tensor linspace(double start, double end, int64_t steps, const TensorOptions& options = {});
Tensor logspace(double start, double end, int64_t steps, double base = 10,
                const TensorOptions& options = {});
// The n x m identity (m = n when omitted).
// Options that make a factory's result require grad: ember::ones({2}, ember::requires_grad()).
inline TensorOptions requires_grad(bool on = true) {
  return TensorOptions().with_requires_grad(on);
}
Tensor eye(int64_t n, const TensorOptions& options = {});
Tensor eye(int64_t n, int64_t m, const TensorOptions& options = {});

// A tensor over memory the caller owns (no copy). Without a deleter the tensor does not own the
// memory, which must outlive it; with one, the deleter runs when the last view of the tensor goes.
// `strides` default to contiguous; data must lie on options.device.
using BlobDeleter = std::function<void(void*)>;
Tensor from_blob(void* data, const Shape& sizes, const Shape& strides, const BlobDeleter& deleter,
                 const TensorOptions& options = {});
Tensor from_blob(void* data, const Shape& sizes, const BlobDeleter& deleter,
                 const TensorOptions& options = {});
Tensor from_blob(void* data, const Shape& sizes, const Shape& strides,
                 const TensorOptions& options = {});
Tensor from_blob(void* data, const Shape& sizes, const TensorOptions& options = {});

// tensor({...}): a tensor from a number or nested braced lists (1 to 4 levels, rectangular).
// Integers make int64, floating values float32, bools bool, as libtorch; options.dtype (when
// given) converts, options.device places it.
namespace detail {
// The type a literal's values are gathered in: int64 for integers, double for floating values,
// one byte for bools.
template <typename T>
using LiteralValue = std::conditional_t<std::is_same_v<T, bool>, uint8_t,
                                        std::conditional_t<std::is_integral_v<T>, int64_t, double>>;
template <typename T>
inline constexpr DType kLiteralValueDType = std::is_same_v<T, bool> ? DType::boolean
                                            : std::is_integral_v<T> ? DType::i64
                                                                    : DType::f64;
template <typename T>
inline constexpr DType kLiteralDefaultDType = std::is_same_v<T, bool> ? DType::boolean
                                              : std::is_integral_v<T> ? DType::i64
                                                                      : DType::f32;
// Records the size of the list at `depth` (the first list seen there) or checks it against it.
void literal_list_size(Shape& sizes, size_t depth, size_t size);
Tensor tensor_from_literal(const void* values, DType values_dtype, const Shape& sizes,
                           DType default_dtype, const TensorOptions& options);

template <typename V, typename T>
void gather_literal(const T& value, std::vector<V>& out, Shape&, size_t) {
  out.push_back(static_cast<V>(value));
}
template <typename V, typename T>
void gather_literal(std::initializer_list<T> list, std::vector<V>& out, Shape& sizes,
                    size_t depth) {
  literal_list_size(sizes, depth, list.size());
  for (const T& x : list) gather_literal<V>(x, out, sizes, depth + 1);
}
template <typename T, typename List>
Tensor tensor_from_list(const List& list, const TensorOptions& options) {
  std::vector<LiteralValue<T>> values;
  Shape sizes;
  gather_literal<LiteralValue<T>>(list, values, sizes, 0);
  return tensor_from_literal(values.data(), kLiteralValueDType<T>, sizes, kLiteralDefaultDType<T>,
                             options);
}
}  // namespace detail

template <typename T>
requires std::is_arithmetic_v<T> Tensor tensor(T value, const TensorOptions& options = {}) {
  const detail::LiteralValue<T> v = static_cast<detail::LiteralValue<T>>(value);
  return detail::tensor_from_literal(&v, detail::kLiteralValueDType<T>, {},
                                     detail::kLiteralDefaultDType<T>, options);
}
template <typename T>
requires std::is_arithmetic_v<T> Tensor tensor(std::initializer_list<T> values,
                                               const TensorOptions& options = {}) {
  return detail::tensor_from_list<T>(values, options);
}
template <typename T>
requires std::is_arithmetic_v<T> Tensor
tensor(std::initializer_list<std::initializer_list<T>> values, const TensorOptions& options = {}) {
  return detail::tensor_from_list<T>(values, options);
}
template <typename T>
requires std::is_arithmetic_v<T> Tensor
tensor(std::initializer_list<std::initializer_list<std::initializer_list<T>>> values,
       const TensorOptions& options = {}) {
  return detail::tensor_from_list<T>(values, options);
}
template <typename T>
requires std::is_arithmetic_v<T> Tensor
tensor(std::initializer_list<std::initializer_list<std::initializer_list<std::initializer_list<T>>>>
           values,
       const TensorOptions& options = {}) {
  return detail::tensor_from_list<T>(values, options);
}
template <typename T>
requires std::is_arithmetic_v<T> Tensor tensor(const std::vector<T>& values,
                                               const TensorOptions& options = {}) {
  std::vector<detail::LiteralValue<T>> v(values.begin(), values.end());
  return detail::tensor_from_literal(v.data(), detail::kLiteralValueDType<T>,
                                     {int64_t(values.size())}, detail::kLiteralDefaultDType<T>,
                                     options);
}

}  // namespace ember
