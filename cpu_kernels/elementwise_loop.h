// The loop machinery shared by the CPU elementwise kernels (elementwise.cpp: where and copy;
// elementwise_unary.cpp; elementwise_binary.cpp). They are the reference every CUDA elementwise
// kernel is tested against, so they use the exact library math (std::exp, std::tanh, ...) rather
// than fast approximations (Eigen's packet sqrt and exp are approximate under its default
// EIGEN_FAST_MATH), and they write plain loops over contiguous arrays that the compiler
// vectorizes. float16/bfloat16 compute in float and round once.
//
// Structure: each op is a "span function" over contiguous arrays of its compute type, instantiated
// once per (op, compute type). ElementwiseLoop feeds it either the operands' memory directly (dense
// rows whose storage type is the compute type) or chunks gathered into buffers (strided and
// broadcast operands, and float16/bfloat16 converted to float) and scatters the results back. The
// loop driver is instantiated per dtype combination only: the span is passed type-erased.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>

#include "ember/kernel_interface/elementwise.h"
#include "ember/tensor/parallel.h"

// Internal to cpu_kernels/: only the elementwise kernel files include this header.
namespace ember::cpu_elementwise {

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

// Floating to integer as the GPU's conversion instructions do it: truncation toward zero, NaN to 0,
// values beyond the integer's range clamped to its ends (a plain cast of those is undefined).
template <typename To, typename From>
inline To saturating_float_to_int(From v) {
  using Limits = std::numeric_limits<To>;
  if (v != v) return To(0);
  if (v <= From(Limits::min())) return Limits::min();
  if (v >= From(Limits::max())) return Limits::max();
  return static_cast<To>(v);
}

// Converts one value between any two dtypes: 16-bit floats through float (round to nearest even,
// tensor/half.h), floating to integer truncates toward zero and saturates (as on the GPU),
// anything to bool is `!= 0` (NaN is true), floating to uint8 goes through int64 so that -1.0
// wraps to 255 as in PyTorch.
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
    return static_cast<uint8_t>(saturating_float_to_int<int64_t>(v));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    return saturating_float_to_int<To>(v);
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
    return saturating_float_to_int<int64_t>(v);
  } else {
    return static_cast<T>(saturating_float_to_int<int64_t>(v));
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

[[noreturn]] inline void throw_unsupported(const char* op, DType dtype) {
  EMBER_THROW(not_supported, op, ": dtype ", dtype_name(dtype),
              " is not supported on the CPU; convert the input to a supported dtype first "
              "(every op supports float32 and float64)");
}

// ---- the loop -------------------------------------------------------------------------------

// Elements per thread below which an elementwise loop stays on one thread: waking a worker costs
// a few microseconds, about what one core needs for ~32K simple elements.
inline constexpr int64_t kParallelGrain = 32768;

// Calls row(ptrs, strides, n) for the rows of the loop's flat elements [lo, hi) in loop order: ptrs
// are the operands' addresses at the start of the (partial) row, strides their byte strides along
// it. A contiguous loop is one row. The outer dims are walked with a counter, never with a
// per-element offset computation.
template <typename RowFn>
void for_each_row_in(const ElementwiseIter& iter, int64_t lo, int64_t hi, RowFn&& row) {
  if (hi <= lo) return;
  const int num_ops = iter.num_operands;
  char* ptrs[kMaxIterOperands];
  int64_t row_strides[kMaxIterOperands];
  if (iter.ndim == 0 || iter.is_contiguous()) {
    for (int k = 0; k < num_ops; ++k) {
      row_strides[k] = int64_t(element_size(iter.dtypes[k]));
      ptrs[k] = iter.data[k] + lo * row_strides[k];
    }
    row(ptrs, row_strides, hi - lo);
    return;
  }
  const int last = iter.ndim - 1;
  const int64_t row_len = iter.sizes[last];
  for (int k = 0; k < num_ops; ++k) row_strides[k] = iter.strides[k][last];
  // The counter of the outer dims at flat element lo, and the operands' row starts there.
  int64_t counter[kMaxIterDims] = {};
  int64_t rest = lo / row_len;
  for (int d = last - 1; d >= 0; --d) {
    counter[d] = rest % iter.sizes[d];
    rest /= iter.sizes[d];
  }
  int64_t col = lo % row_len;
  for (int k = 0; k < num_ops; ++k) {
    ptrs[k] = iter.data[k];
    for (int d = 0; d < last; ++d) ptrs[k] += counter[d] * iter.strides[k][d];
  }
  char* at[kMaxIterOperands];
  for (int64_t i = lo; i < hi;) {
    const int64_t n = std::min(row_len - col, hi - i);
    for (int k = 0; k < num_ops; ++k) at[k] = ptrs[k] + col * row_strides[k];
    row(at, row_strides, n);
    i += n;
    col = 0;
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

// Runs body(lo, hi) over the loop's flat elements on the thread pool, in chunks of at least
// kParallelGrain elements. Every element belongs to one chunk, so elementwise results do not
// depend on the thread count.
template <typename Body>
void parallel_elements(const ElementwiseIter& iter, const Body& body) {
  if (iter.numel == 0) return;
  parallel_for(0, iter.numel, kParallelGrain, [&](int64_t lo, int64_t hi) { body(lo, hi); });
}

// for_each_row over the whole loop, split across the thread pool: `row` must be safe to call from
// several threads at once (no shared mutable state).
template <typename RowFn>
void for_each_row(const ElementwiseIter& iter, const RowFn& row) {
  parallel_elements(iter, [&](int64_t lo, int64_t hi) { for_each_row_in(iter, lo, hi, row); });
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

    parallel_elements(iter, [&](int64_t lo, int64_t hi) {
      InC in_buf[NIn][kChunk];
      InC splat[NIn][kChunk];  // broadcast values repeated, for the dense-output rows
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

      for_each_row_in(iter, lo, hi, [&](char* const* ptrs, const int64_t* strides, int64_t n) {
        if constexpr (kNative) {
          bool dense = strides[0] == int64_t(sizeof(Out));
          for (int k = 1; k <= NIn; ++k) dense = dense && strides[k] == int64_t(sizeof(In));
          if (dense && (n >= kMinDirectRow || n == hi - lo)) {
            Inputs inputs;
            for (int k = 0; k < NIn; ++k) inputs[k] = reinterpret_cast<const In*>(ptrs[k + 1]);
            span(reinterpret_cast<Out*>(ptrs[0]), inputs, n);
            return;
          }
          // A dense output whose inputs are dense or broadcast along the row (stride 0, e.g. a
          // bias): the broadcast values are repeated into a buffer once, and the span runs over
          // the row in kChunk pieces straight from and to memory.
          bool broadcast = strides[0] == int64_t(sizeof(Out)) && n >= kMinDirectRow;
          for (int k = 1; k <= NIn; ++k)
            broadcast = broadcast && (strides[k] == 0 || strides[k] == int64_t(sizeof(In)));
          if (broadcast) {
            for (int k = 0; k < NIn; ++k)
              if (strides[k + 1] == 0)
                std::fill(splat[k], splat[k] + std::min(n, kChunk),
                          *reinterpret_cast<const In*>(ptrs[k + 1]));
            Out* out = reinterpret_cast<Out*>(ptrs[0]);
            for (int64_t i = 0; i < n; i += kChunk) {
              Inputs inputs;
              for (int k = 0; k < NIn; ++k)
                inputs[k] =
                    strides[k + 1] == 0 ? splat[k] : reinterpret_cast<const In*>(ptrs[k + 1]) + i;
              span(out + i, inputs, std::min(kChunk, n - i));
            }
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
    });
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

}  // namespace ember::cpu_elementwise
