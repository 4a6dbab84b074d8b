// The wide value type the CPU reference reductions and scans (reduce.cpp, scan.cpp) compute in:
// double for floating dtypes (float16/bfloat16 included), int64 for integers and bool; both hold
// every input value exactly. Integer results narrow by wrapping, as PyTorch's do.
#pragma once
#include <cstdint>
#include <type_traits>

#include "ember/tensor/dtype.h"

namespace ember::cpu_reference {

template <typename T>
inline constexpr bool kIsFloating =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename T>
using value_t = std::conditional_t<kIsFloating<T>, double, int64_t>;

template <typename T>
inline value_t<T> load_value(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return double(float(v));
  else
    return value_t<T>(v);
}

template <typename T>
inline T store_value(value_t<T> v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return T(float(v));
  else if constexpr (std::is_same_v<T, bool>)
    return v != 0;
  else if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<uint64_t>(v));  // wraps
  else
    return static_cast<T>(v);
}

template <typename V>
inline bool is_nan(V v) {
  if constexpr (std::is_floating_point_v<V>)
    return v != v;
  else
    return false;
}

}  // namespace ember::cpu_reference
