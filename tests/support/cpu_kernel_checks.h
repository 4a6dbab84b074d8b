// Helpers of the CPU kernel tests (tests/cpu/test_cpu_kernels*.cpp): tensors from lists of
// doubles in any dtype, values of any view back as doubles, the rounding and tolerance of each
// dtype, error checks, and one-line calls of the unary, binary and copy kernels through the CPU
// kernel tables (no ops, no autograd). Header-only.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ember/kernel_interface/elementwise.h"

namespace ember::testing::cpu_kernels {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr DType kFloatTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

// ---- helpers ------------------------------------------------------------------------------------

// A std::string, so that doctest's lazily captured INFO prints the name rather than a pointer.
inline std::string name_of(DType dtype) { return dtype_name(dtype); }

template <typename T>
inline T from_double(double v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return T(float(v));
  else if constexpr (std::is_same_v<T, bool>)
    return v != 0;
  else
    return static_cast<T>(v);
}

template <typename T>
inline double to_double(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return double(float(v));
  else
    return static_cast<double>(v);
}

// A contiguous CPU tensor holding `values` (row-major), converted to `dtype`.
inline Tensor make(const Shape& sizes, DType dtype, const std::vector<double>& values) {
  Tensor t = empty(sizes, dtype);
  REQUIRE(t.numel() == int64_t(values.size()));
  EMBER_DISPATCH_ALL_DTYPES(dtype, "test", [&] {
    scalar_t* p = t.data<scalar_t>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = from_double<scalar_t>(values[i]);
  });
  return t;
}

// The elements of a view (any strides) in logical order, as double.
inline std::vector<double> values_of(const Tensor& t) {
  std::vector<double> out;
  const int64_t nd = t.dim();
  std::vector<int64_t> idx(size_t(nd), 0);
  EMBER_DISPATCH_ALL_DTYPES(t.dtype(), "test", [&] {
    const scalar_t* base = static_cast<const scalar_t*>(t.data_ptr());
    for (int64_t n = 0; n < t.numel(); ++n) {
      int64_t off = 0;
      for (int64_t d = 0; d < nd; ++d) off += idx[size_t(d)] * t.stride(d);
      out.push_back(to_double(base[off]));
      for (int64_t d = nd - 1; d >= 0; --d) {
        if (++idx[size_t(d)] < t.size(d)) break;
        idx[size_t(d)] = 0;
      }
    }
  });
  return out;
}

// The value `v` takes once stored in `dtype` (the rounding the kernels must reproduce).
inline double rounded(DType dtype, double v) {
  double r = 0;
  EMBER_DISPATCH_ALL_DTYPES(dtype, "test", [&] { r = to_double(from_double<scalar_t>(v)); });
  return r;
}

inline double tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return 1e-12;
    case DType::f32:
      return 1e-6;
    case DType::f16:
      return 1e-3;
    case DType::bf16:
      return 8e-3;
    default:
      return 0;
  }
}

// Equal within rtol (relative, plus the same absolute floor), NaN matching NaN.
inline void check_close(const std::vector<double>& got, const std::vector<double>& want,
                        double rtol, const std::string& what) {
  REQUIRE_MESSAGE(got.size() == want.size(), what);
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(what, " element ", i, ": got ", got[i], ", want ", want[i]);
    if (std::isnan(want[i])) {
      CHECK(std::isnan(got[i]));
    } else if (std::isinf(want[i])) {
      CHECK(got[i] == want[i]);
    } else {
      CHECK(std::abs(got[i] - want[i]) <= rtol * (1 + std::abs(want[i])));
    }
  }
}

// Runs fn and checks it throws ember::Error with `status` and a message holding every part.
template <typename Fn>
inline void check_error(Fn&& fn, Status status, const std::vector<std::string>& parts) {
  try {
    fn();
    FAIL("expected an ember::Error");
  } catch (const Error& e) {
    CHECK(e.status() == status);
    for (const std::string& part : parts)
      CHECK_MESSAGE(e.message().find(part) != std::string::npos, "'", part,
                    "' not in: ", e.message());
  }
}

inline void unary(const Tensor& out, const Tensor& in, UnaryOp op, UnaryParams p = {}) {
  ElementwiseIter it = make_elementwise_iter("test", out, {in});
  unary_kernel().get(DeviceType::CPU, in.dtype())(it, op, p);
}
inline void binary(const Tensor& out, const Tensor& a, const Tensor& b, BinaryOp op,
                   double alpha = 1) {
  ElementwiseIter it = make_elementwise_iter("test", out, {a, b});
  binary_kernel().get(DeviceType::CPU, a.dtype())(it, op, alpha);
}
inline void copy(const Tensor& out, const Tensor& in) {
  ElementwiseIter it = make_elementwise_iter("test", out, {in});
  copy_kernel().get(DeviceType::CPU, out.dtype())(it);
}

}  // namespace ember::testing::cpu_kernels
