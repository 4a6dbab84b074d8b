// The elementwise kernel interfaces: unary and binary maps, where, and dtype-converting copies
// over an ElementwiseIter (tensor/tensor_iter.h). Kernels run on the current stream of the output's
// device and never synchronize the host; unless noted, the output's dtype selects the kernel.
#pragma once
#include <cstdint>

#include "ember/dispatch/registry.h"
#include "ember/tensor/tensor.h"
#include "ember/tensor/tensor_iter.h"

namespace ember {

// out = f(in). Comparison-like ops (isnan...) write bool; everything else writes the input dtype.
enum class UnaryOp : uint8_t {
  neg,
  exp,
  log,
  sqrt,
  rsqrt,
  abs,
  tanh,
  sigmoid,
  relu,
  sin,
  cos,
  sign,
  reciprocal,
  square,
  log1p,
  expm1,
  floor,
  ceil,
  round,
  logical_not,
  isnan,
  isfinite,
  clamp,        // param a = min (NaN: none), b = max (NaN: none)
  pow_scalar,   // in ^ a
  add_scalar,   // in + a
  mul_scalar,   // in * a
  rsub_scalar,  // a - in
  rdiv_scalar,  // a / in
  fill,         // a (inputs ignored: iter has only the output)
  // floating inputs only (ops/ converts integral inputs to float32 first)
  log2,
  log10,
  tan,
  asin,
  acos,
  atan,
  sinh,
  cosh,
  asinh,
  acosh,
  atanh,
  erf,
  erfc,
  erfinv,
  frac,            // x - trunc(x)
  nan_to_num,      // NaN -> a, +inf -> b, -inf -> c
  round_decimals,  // b == 0: rint(x * a) / a; b != 0: rint(x / a) * a (a = 10^|decimals|)
  trunc,           // integral inputs too (identity)
  isinf,           // writes bool, any input dtype
};
struct UnaryParams {
  double a = 0, b = 0, c = 0;
};
using UnaryKernel = void (*)(const ElementwiseIter& iter, UnaryOp op, UnaryParams p);
EMBER_DECLARE_KERNEL(unary_kernel, UnaryKernel)

// out = f(a, b) with a, b and out of one dtype, except comparisons and logical ops, which write
// bool (the kernel is selected by the INPUT dtype, iter.dtypes[1]).
enum class BinaryOp : uint8_t {
  add,  // a + alpha * b
  sub,  // a - alpha * b
  mul,
  div,
  pow,
  maximum,
  minimum,
  atan2,
  remainder,
  eq,
  ne,
  lt,
  le,
  gt,
  ge,
  logical_and,
  logical_or,
  // gradient helpers: a is the incoming gradient, b the saved forward value
  relu_backward,     // b > 0 ? a : 0           (b = relu output or input)
  sigmoid_backward,  // a * b * (1 - b)         (b = sigmoid output)
  tanh_backward,     // a * (1 - b * b)         (b = tanh output)
  // integer and bool only (bool: and / or / xor)
  bitwise_and,
  bitwise_or,
  bitwise_xor,
  logical_xor,  // writes bool, any input dtype
  fmod,         // C's fmod: the result takes the dividend's sign (torch.fmod)
  hypot,        // sqrt(a^2 + b^2) without overflow; floating only
};
bool binary_op_writes_bool(BinaryOp op);
using BinaryKernel = void (*)(const ElementwiseIter& iter, BinaryOp op, double alpha);
EMBER_DECLARE_KERNEL(binary_kernel, BinaryKernel)

// out = cond ? a : b; iter operands (out, cond[bool], a, b). Selected by out's dtype.
using WhereKernel = void (*)(const ElementwiseIter& iter);
EMBER_DECLARE_KERNEL(where_kernel, WhereKernel)

// out = in converted to out's dtype; iter operands (out, in). Selected by out's dtype; the kernel
// handles every input dtype. Same-device only (cross-device copies are ops/copy.cpp's job).
using CopyKernel = void (*)(const ElementwiseIter& iter);
EMBER_DECLARE_KERNEL(copy_kernel, CopyKernel)

}  // namespace ember
