// Internal to ops/: runs one BinaryOp kernel on two tensors converted to a given dtype, without
// autograd (the comparison, bitwise and remainder ops of ops/comparison.cpp and ops/bitwise.cpp
// build on it; each adds its own backward where it has one).
#pragma once
#include "ember/kernel_interface/elementwise.h"
#include "ember/ops/ops.h"

namespace ember::ops_internal {

// out = op(a, b) with a and b converted to `compute` and broadcast; out is bool for the ops that
// write bool (binary_op_writes_bool), else `compute`. Errors name `op`, the arguments and shapes.
Tensor binary_dispatch(const char* op, const Tensor& a, const Tensor& b, BinaryOp bop,
                       DType compute);

// out = op(in) on the unary kernel, in's dtype (no autograd).
Tensor unary_dispatch(const char* op, const Tensor& in, UnaryOp uop, UnaryParams params = {});

}  // namespace ember::ops_internal
