// DType: the element types of a tensor, their sizes and names, type promotion, and
// EMBER_DISPATCH_DTYPES, the switch that turns a runtime dtype into a C++ type for a CPU kernel.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "ember/tensor/error.h"
#include "ember/tensor/half.h"

namespace ember {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8, boolean };
inline constexpr int kNumDTypes = 8;

size_t element_size(DType t);
const char* dtype_name(DType t);
DType dtype_from_name(const std::string& name);  // "float32"/"f32", ... ; throws bad_param
bool is_floating(DType t);
bool is_integral(DType t);  // includes bool
// The common dtype of a binary op, as PyTorch's result_type for two tensors.
DType promote_types(DType a, DType b);

template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct dtype_of<Half> {
  static constexpr DType value = DType::f16;
};
template <>
struct dtype_of<BFloat16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::u8;
};
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::boolean;
};

}  // namespace ember

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
