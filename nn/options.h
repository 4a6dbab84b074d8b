// What the layer options builders are made of, as in libtorch's torch/arg.h and expanding_array.h:
// EMBER_ARG declares an option with a named setter that returns the options object (so calls
// chain: `Conv2dOptions(3, 64, 3).stride(2).bias(false)`) and a getter of the same name;
// ExpandingArray<D> is a per-dimension value (kernel size, stride, ...) given as one number for all
// dimensions or as a braced list of D numbers.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "ember/tensor/error.h"

// Declares option `name` of type T: `auto& name(const T&)` sets it and returns *this,
// `const T& name() const` reads it. Follow the macro with `= default_value;` where one exists.
// Written EMBER_ARG(T, name); a type with commas may be written as is, e.g.
// EMBER_ARG(std::pair<double, double>, betas) (up to two commas), through the alias name_arg_t.
#define EMBER_ARG(...) \
  EMBER_ARG_PICK(__VA_ARGS__, EMBER_ARG_4, EMBER_ARG_3, EMBER_ARG_2, )(__VA_ARGS__)
// EMBER_ARG's dispatch: picks EMBER_ARG_2, _3 or _4 by the number of macro arguments.
#define EMBER_ARG_PICK(a1, a2, a3, a4, chosen, ...) chosen
// EMBER_ARG for a type without commas: the alias name_arg_t = T, then the members.
#define EMBER_ARG_2(T, name) \
 public:                     \
  using name##_arg_t = T;    \
  EMBER_ARG_MEMBERS(name)
// EMBER_ARG for a type with one comma (split by the preprocessor into T1, T2).
#define EMBER_ARG_3(T1, T2, name) \
 public:                          \
  using name##_arg_t = T1, T2;    \
  EMBER_ARG_MEMBERS(name)
// EMBER_ARG for a type with two commas (T1, T2, T3).
#define EMBER_ARG_4(T1, T2, T3, name) \
 public:                              \
  using name##_arg_t = T1, T2, T3;    \
  EMBER_ARG_MEMBERS(name)
// The setter, the getter and the private member name_ of an option (its default follows the
// macro as `= value;`).
#define EMBER_ARG_MEMBERS(name)                                       \
  auto& name(const name##_arg_t& new_##name) {                        \
    this->name##_ = new_##name;                                       \
    return *this;                                                     \
  }                                                                   \
  const name##_arg_t& name() const noexcept { return this->name##_; } \
                                                                      \
 private:                                                             \
  name##_arg_t name##_

namespace ember::nn {

// D per-dimension sizes, as libtorch's ExpandingArray: implicitly built from one value (every
// dim), a braced list or vector of D values (other lengths throw), or a std::array.
template <size_t D>
class ExpandingArray {
 public:
  // Implicit, so options take `3`, `{3, 5}` or a vector alike.
  ExpandingArray(int64_t value) { values_.fill(value); }  // NOLINT: one value for every dim
  ExpandingArray(std::initializer_list<int64_t> list) {
    EMBER_CHECK(list.size() == D, "expected ", D, " values (one per spatial dim), got ",
                list.size());
    std::copy(list.begin(), list.end(), values_.begin());
  }
  ExpandingArray(const std::vector<int64_t>& list) {  // NOLINT
    EMBER_CHECK(list.size() == D, "expected ", D, " values (one per spatial dim), got ",
                list.size());
    std::copy(list.begin(), list.end(), values_.begin());
  }
  // From D values as they are.
  ExpandingArray(const std::array<int64_t, D>& values) : values_(values) {}  // NOLINT

  // The value of dim i (0 <= i < D, unchecked).
  int64_t operator[](size_t i) const { return values_[i]; }
  // D, the number of dims.
  static constexpr size_t size() { return D; }
  // The values as an array, and as a vector (what the ops take).
  const std::array<int64_t, D>& values() const { return values_; }
  std::vector<int64_t> vec() const { return std::vector<int64_t>(values_.begin(), values_.end()); }
  // Whether every dim's value is v (printing leaves out options at their default).
  bool all_equal(int64_t v) const {
    return std::all_of(values_.begin(), values_.end(), [v](int64_t x) { return x == v; });
  }
  // Equal when every dim's value is.
  bool operator==(const ExpandingArray& o) const { return values_ == o.values_; }

 private:
  std::array<int64_t, D> values_{};
};

// "[3, 3]", as libtorch prints per-dimension options.
template <size_t D>
std::ostream& operator<<(std::ostream& os, const ExpandingArray<D>& a) {
  os << "[";
  for (size_t i = 0; i < D; ++i) os << (i ? ", " : "") << a[i];
  return os << "]";
}

namespace detail {
inline const char* bool_str(bool b) { return b ? "true" : "false"; }
// A double printed as Python prints floats in reprs (1e-05, 0.1, 1.0).
inline std::string float_str(double v) {
  std::ostringstream os;
  os << v;
  std::string s = os.str();
  if (s.find_first_of(".eninf") == std::string::npos) s += ".0";
  return s;
}
}  // namespace detail

}  // namespace ember::nn
