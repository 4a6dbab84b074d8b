// DType: the element types of a tensor, their sizes and names, type promotion, and
// EMBER_DISPATCH_DTYPES, the switch that turns a runtime dtype into a C++ type for a CPU kernel.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "ember/tensor/error.h"
#include "ember/tensor/half.h"

namespace ember {

// A tensor's element type, as PyTorch's torch.dtype: f32 (float32, the default floating dtype),
// f64 (float64), f16 (IEEE float16, ember::Half), bf16 (bfloat16, ember::BFloat16), i32 (int32),
// i64 (int64, the default integer dtype), u8 (uint8) and boolean (bool, one byte per element).
// ops/ops.h has PyTorch-style aliases (kFloat, kInt64, ...).
enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8, boolean };
// How many DTypes there are (the size of tables indexed by dtype).
inline constexpr int kNumDTypes = 8;

// Bytes per element of `t` (4 for float32, 2 for float16/bfloat16, 1 for uint8/bool, ...).
size_t element_size(DType t);
// PyTorch's name of `t` without the "torch." prefix: "float32", "bfloat16", "int64", "bool", ...
const char* dtype_name(DType t);
DType dtype_from_name(const std::string& name);  // "float32"/"f32", ... ; throws bad_param
// True for the floating dtypes: float32, float64, float16 and bfloat16.
bool is_floating(DType t);
bool is_integral(DType t);  // includes bool
// The common dtype of a binary op, as PyTorch's result_type for two tensors.
DType promote_types(DType a, DType b);

// dtype_of<T>::value: the DType of the C++ element type T (float, double, Half, BFloat16, int32_t,
// int64_t, uint8_t, bool); other types do not compile. Tensor::data<T>() and item<T>() check it.
template <typename T>
struct dtype_of;
// ---- dtype_of<T> for each element type ----
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;  // the DType of this T
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;  // the DType of this T
};
template <>
struct dtype_of<Half> {
  static constexpr DType value = DType::f16;  // the DType of this T
};
template <>
struct dtype_of<BFloat16> {
  static constexpr DType value = DType::bf16;  // the DType of this T
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::i32;  // the DType of this T
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::i64;  // the DType of this T
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::u8;  // the DType of this T
};
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::boolean;  // the DType of this T
};

}  // namespace ember

// One case of the dtype switches below: binds scalar_t to `type` and calls the lambda.
#define EMBER_DTYPE_CASE(enum_v, type, ...) \
  case ::ember::DType::enum_v: {            \
    using scalar_t = type;                  \
    __VA_ARGS__();                          \
    break;                                  \
  }

// Runs the lambda body with scalar_t bound to the C++ type of `dtype` (all eight dtypes).
#define EMBER_DISPATCH_ALL_DTYPES(dtype, op_name, ...)       \
  do {                                                       \
    switch (dtype) {                                         \
      EMBER_DTYPE_CASE(f32, float, __VA_ARGS__)              \
      EMBER_DTYPE_CASE(f64, double, __VA_ARGS__)             \
      EMBER_DTYPE_CASE(f16, ::ember::Half, __VA_ARGS__)      \
      EMBER_DTYPE_CASE(bf16, ::ember::BFloat16, __VA_ARGS__) \
      EMBER_DTYPE_CASE(i32, int32_t, __VA_ARGS__)            \
      EMBER_DTYPE_CASE(i64, int64_t, __VA_ARGS__)            \
      EMBER_DTYPE_CASE(u8, uint8_t, __VA_ARGS__)             \
      EMBER_DTYPE_CASE(boolean, bool, __VA_ARGS__)           \
    }                                                        \
  } while (0)

// Floating dtypes only; others throw not_supported naming the op.
#define EMBER_DISPATCH_FLOATING_DTYPES(dtype, op_name, ...)                                \
  do {                                                                                     \
    switch (dtype) {                                                                       \
      EMBER_DTYPE_CASE(f32, float, __VA_ARGS__)                                            \
      EMBER_DTYPE_CASE(f64, double, __VA_ARGS__)                                           \
      EMBER_DTYPE_CASE(f16, ::ember::Half, __VA_ARGS__)                                    \
      EMBER_DTYPE_CASE(bf16, ::ember::BFloat16, __VA_ARGS__)                               \
      default:                                                                             \
        EMBER_THROW(not_supported, op_name, ": dtype ", ::ember::dtype_name(dtype),        \
                    " is not supported; use a floating dtype (float32, float64, float16, " \
                    "bfloat16)");                                                          \
    }                                                                                      \
  } while (0)
