// CPU kernels behind activation_kernel and activation_backward_kernel
// (kernel_interface/activation.h): leaky_relu, elu, gelu (erf and tanh forms) and silu, forward and
// backward, for every floating dtype. They are the reference the CUDA kernels are tested against,
// so they use the exact library math (std::erf, std::tanh, std::expm1). float16/bfloat16 compute in
// float and round once; float in float; double in double. The loops run over the iterator's rows
// on the thread pool (cpu_kernels/elementwise_loop.h), with a flat loop over dense rows.
#include "ember/kernel_interface/activation.h"

#include <cmath>
#include <type_traits>

#include "ember/cpu_kernels/elementwise_loop.h"

namespace ember {
namespace {

template <typename T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Calls f(std::integral_constant<ActivationOp, op>{}), so that the element loops are compiled
// once per op with no switch inside them.
template <typename F>
void with_op(ActivationOp op, F&& f) {
  switch (op) {
    case ActivationOp::leaky_relu:
      return f(std::integral_constant<ActivationOp, ActivationOp::leaky_relu>{});
    case ActivationOp::elu:
      return f(std::integral_constant<ActivationOp, ActivationOp::elu>{});
    case ActivationOp::gelu:
      return f(std::integral_constant<ActivationOp, ActivationOp::gelu>{});
    case ActivationOp::gelu_tanh:
      return f(std::integral_constant<ActivationOp, ActivationOp::gelu_tanh>{});
    case ActivationOp::silu:
      return f(std::integral_constant<ActivationOp, ActivationOp::silu>{});
  }
}

template <typename A>
A activation_forward(ActivationOp op, A x, A param) {
  switch (op) {
    case ActivationOp::leaky_relu:
      return x > A(0) ? x : x * param;
    case ActivationOp::elu:
      return x > A(0) ? x : param * std::expm1(x);
    case ActivationOp::gelu:
      return A(0.5) * x * (A(1) + std::erf(x * A(M_SQRT1_2)));
    case ActivationOp::gelu_tanh: {
      const A kBeta = A(M_SQRT2 * M_2_SQRTPI * 0.5);  // sqrt(2 / pi)
      const A inner = kBeta * (x + A(0.044715) * x * x * x);
      return A(0.5) * x * (A(1) + std::tanh(inner));
    }
    case ActivationOp::silu:
      return x / (A(1) + std::exp(-x));
  }
  return x;
}

template <typename A>
A activation_derivative(ActivationOp op, A x, A param) {
  switch (op) {
    case ActivationOp::leaky_relu:
      return x > A(0) ? A(1) : param;
    case ActivationOp::elu:
      return x > A(0) ? A(1) : param * std::exp(x);
    case ActivationOp::gelu: {
      const A kAlpha = A(M_2_SQRTPI * M_SQRT1_2 * 0.5);  // 1 / sqrt(2 pi)
      const A cdf = A(0.5) * (A(1) + std::erf(x * A(M_SQRT1_2)));
      const A pdf = kAlpha * std::exp(A(-0.5) * x * x);
      return cdf + x * pdf;
    }
    case ActivationOp::gelu_tanh: {
      const A kBeta = A(M_SQRT2 * M_2_SQRTPI * 0.5);
      const A kKappa = A(0.044715);
      const A x_sq = x * x;
      const A tanh_inner = std::tanh(kBeta * (x + kKappa * x_sq * x));
      const A left_derivative = A(0.5) * (A(1) + tanh_inner);
      const A right_derivative =
          A(0.5) * x * (A(1) - tanh_inner * tanh_inner) * kBeta * (A(1) + A(3) * kKappa * x_sq);
      return left_derivative + right_derivative;
    }
    case ActivationOp::silu: {
      const A s = A(1) / (A(1) + std::exp(-x));
      return s * (A(1) + x * (A(1) - s));
    }
  }
  return A(1);
}

// The loops run on the thread pool over rows of the iterator (cpu_kernels/elementwise_loop.h);
// each element is computed once by one thread, so results do not depend on the thread count.
template <typename T>
void activation_forward_typed(const ElementwiseIter& it, ActivationOp op, double param) {
  using A = compute_t<T>;
  const A p = A(param);
  with_op(op, [&](auto kOp) {
    cpu_elementwise::for_each_row(it, [&](char* const* ptr, const int64_t* s, int64_t n) {
      if (s[0] == int64_t(sizeof(T)) && s[1] == int64_t(sizeof(T))) {
        T* y = reinterpret_cast<T*>(ptr[0]);
        const T* x = reinterpret_cast<const T*>(ptr[1]);
        for (int64_t i = 0; i < n; ++i) y[i] = T(activation_forward<A>(kOp, A(x[i]), p));
        return;
      }
      for (int64_t i = 0; i < n; ++i) {
        const A x = A(*reinterpret_cast<const T*>(ptr[1] + i * s[1]));
        *reinterpret_cast<T*>(ptr[0] + i * s[0]) = T(activation_forward<A>(kOp, x, p));
      }
    });
  });
}

template <typename T>
void activation_backward_typed(const ElementwiseIter& it, ActivationOp op, double param) {
  using A = compute_t<T>;
  const A p = A(param);
  with_op(op, [&](auto kOp) {
    cpu_elementwise::for_each_row(it, [&](char* const* ptr, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        const A g = A(*reinterpret_cast<const T*>(ptr[1] + i * s[1]));
        const A x = A(*reinterpret_cast<const T*>(ptr[2] + i * s[2]));
        *reinterpret_cast<T*>(ptr[0] + i * s[0]) = T(g * activation_derivative<A>(kOp, x, p));
      }
    });
  });
}

void check_iter(const ElementwiseIter& it, int operands, ActivationOp op) {
  EMBER_INTERNAL_ASSERT(it.num_operands == operands, activation_op_name(op), ": expected ",
                        operands, " operands, got ", it.num_operands);
  for (int k = 1; k < operands; ++k)
    EMBER_INTERNAL_ASSERT(it.dtypes[k] == it.dtypes[0], activation_op_name(op),
                          ": operands of dtypes ", dtype_name(it.dtypes[0]), " and ",
                          dtype_name(it.dtypes[k]));
}

void activation_cpu(const ElementwiseIter& it, ActivationOp op, double param) {
  check_iter(it, 2, op);
  EMBER_DISPATCH_FLOATING_DTYPES(it.dtypes[0], activation_op_name(op),
                                 [&] { activation_forward_typed<scalar_t>(it, op, param); });
}

void activation_backward_cpu(const ElementwiseIter& it, ActivationOp op, double param) {
  check_iter(it, 3, op);
  EMBER_DISPATCH_FLOATING_DTYPES(it.dtypes[0], activation_op_name(op),
                                 [&] { activation_backward_typed<scalar_t>(it, op, param); });
}

}  // namespace

EMBER_REGISTER_KERNEL(activation_kernel, CPU, dispatch::kFloatingTypes, &activation_cpu);
EMBER_REGISTER_KERNEL(activation_backward_kernel, CPU, dispatch::kFloatingTypes,
                      &activation_backward_cpu);

}  // namespace ember
