// The kernel interfaces between ops/ and the backends (cpu_kernels/, cuda_kernels/). Each op's table
// maps (device type, dtype) to a kernel; ops check arguments, allocate outputs and pick the table
// entry, kernels only compute. Kernels run on the current stream of the output's device and never
// synchronize the host. Unless noted, the dtype that selects the kernel is the output's.
#pragma once
#include <cstdint>

#include "dispatch/registry.h"
#include "tensor/tensor.h"
#include "tensor/tensor_iter.h"

namespace ember {

// ---- elementwise ----------------------------------------------------------------------------
// out = f(in). Comparison-like ops (isnan...) write bool; everything else writes the input dtype.
enum class UnaryOp : uint8_t {
  neg, exp, log, sqrt, rsqrt, abs, tanh, sigmoid, relu, sin, cos, sign, reciprocal, square,
  log1p, expm1, floor, ceil, round, logical_not, isnan, isfinite,
  clamp,        // param a = min (NaN: none), b = max (NaN: none)
  pow_scalar,   // in ^ a
  add_scalar,   // in + a
  mul_scalar,   // in * a
  rsub_scalar,  // a - in
  rdiv_scalar,  // a / in
  fill,         // a (inputs ignored: iter has only the output)
};
struct UnaryParams {
  double a = 0, b = 0;
};
using UnaryKernel = void (*)(const ElementwiseIter& iter, UnaryOp op, UnaryParams p);
EMBER_DECLARE_KERNEL(unary_kernel, UnaryKernel)

// out = f(a, b) with a, b and out of one dtype, except comparisons and logical ops, which write
// bool (the kernel is selected by the INPUT dtype, iter.dtypes[1]).
enum class BinaryOp : uint8_t {
  add,  // a + alpha * b
  sub,  // a - alpha * b
  mul, div, pow, maximum, minimum, atan2, remainder,
  eq, ne, lt, le, gt, ge, logical_and, logical_or,
  // gradient helpers: a is the incoming gradient, b the saved forward value
  relu_backward,     // b > 0 ? a : 0           (b = relu output or input)
  sigmoid_backward,  // a * b * (1 - b)         (b = sigmoid output)
  tanh_backward,     // a * (1 - b * b)         (b = tanh output)
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

// ---- reductions -----------------------------------------------------------------------------
// The input is dense, viewed as [outer, reduce, inner]; out is dense [outer, inner].
enum class ReduceOp : uint8_t { sum, mean, max, min, argmax, argmin, var, prod, amax_abs };
struct ReduceShape {
  int64_t outer = 1, reduce = 1, inner = 1;
};
// out gets the input's dtype except argmax/argmin (int64). `indices` (int64, may be null) receives
// the arg positions for max/min. var uses Welford; `correction` is Bessel's (1 = unbiased).
// Floating inputs accumulate in fp32 or better (fp64 for fp64; the CPU reference uses double).
using ReduceKernel = void (*)(const Tensor& out, const Tensor* indices, const Tensor& in,
                              ReduceShape shape, ReduceOp op, int64_t correction);
EMBER_DECLARE_KERNEL(reduce_kernel, ReduceKernel)  // selected by the input dtype

// ---- matrix multiply --------------------------------------------------------------------------
// Row-major batched GEMM: C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b], op = transpose when
// trans_*. Leading dims and batch strides in elements; A, B, C of one dtype (f16/bf16 accumulate
// in fp32). allow_tf32 lets fp32 GEMMs use TF32 tensor cores.
struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  double alpha = 1, beta = 0;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
  DType dtype = DType::f32;
  Device device;
  bool allow_tf32 = false;
};
using GemmKernel = void (*)(const GemmArgs& args);
EMBER_DECLARE_KERNEL(gemm_kernel, GemmKernel)

// ---- indexing (all tensors dense) -------------------------------------------------------------
// index_select: out[o, i, n] = in[o, index[i], n], shapes [outer, size, inner] / [outer, nidx, inner]
using IndexSelectKernel = void (*)(const Tensor& out, const Tensor& in, const Tensor& index,
                                   int64_t outer, int64_t in_size, int64_t inner);
EMBER_DECLARE_KERNEL(index_select_kernel, IndexSelectKernel)
// index_add: out[o, index[i], n] += src[o, i, n] (the backward of index_select / embedding).
using IndexAddKernel = void (*)(const Tensor& out, const Tensor& index, const Tensor& src,
                                int64_t outer, int64_t out_size, int64_t inner);
EMBER_DECLARE_KERNEL(index_add_kernel, IndexAddKernel)
// gather: out[..i..] = in[..index[..i..]..] along dim (index and out share a shape).
using GatherKernel = void (*)(const Tensor& out, const Tensor& in, const Tensor& index, int64_t dim);
EMBER_DECLARE_KERNEL(gather_kernel, GatherKernel)
// scatter_add: out[..index[..i..]..] += src[..i..] along dim (index and src share a shape).
using ScatterAddKernel = void (*)(const Tensor& out, const Tensor& index, const Tensor& src,
                                  int64_t dim);
EMBER_DECLARE_KERNEL(scatter_add_kernel, ScatterAddKernel)

// ---- random (counter-based Philox; see tensor/generator.h) ------------------------------------
enum class RandomKind : uint8_t { uniform, normal, bernoulli, randint };
struct RandomParams {
  RandomKind kind = RandomKind::uniform;
  double a = 0, b = 1;  // uniform [a, b); normal mean a, std b; bernoulli p = a; randint [a, b)
  uint64_t seed = 0;
  uint64_t offset = 0;  // Philox offset in 32-bit values, as curand_init's `offset`
  const uint64_t* device_offset = nullptr;  // device memory added to offset when set (graphs)
};
// Fills the dense tensor `out` (logical order). Element i takes lane i % 4 of the four values that
// cuRAND's Philox4x32-10 yields for (seed, subsequence i / 4, offset): curand_uniform4 for uniform,
// bernoulli and randint, curand_normal4 for normal. The CPU kernel replicates this bit for bit, so
// one seed gives the same numbers on both. A call consumes 4 values of offset per subsequence.
using RandomKernel = void (*)(const Tensor& out, const RandomParams& p);
EMBER_DECLARE_KERNEL(random_kernel, RandomKernel)

}  // namespace ember
