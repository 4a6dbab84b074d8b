// The reduction kernel interface: sum, mean, max, min, arg-max/min, var, prod over the middle dim
// of a dense [outer, reduce, inner] view.
#pragma once
#include <cstdint>

#include "ember/dispatch/registry.h"
#include "ember/tensor/tensor.h"

namespace ember {

// The input is dense, viewed as [outer, reduce, inner]; out is dense [outer, inner].
enum class ReduceOp : uint8_t { sum, mean, max, min, argmax, argmin, var, prod, amax_abs };
// The op's name, for messages.
inline const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::mean:
      return "mean";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
    case ReduceOp::argmax:
      return "argmax";
    case ReduceOp::argmin:
      return "argmin";
    case ReduceOp::var:
      return "var";
    case ReduceOp::prod:
      return "prod";
    case ReduceOp::amax_abs:
      return "amax(abs)";
  }
  return "?";
}
struct ReduceShape {
  int64_t outer = 1, reduce = 1, inner = 1;
};
// out gets the input's dtype except argmax/argmin (int64). `indices` (int64, may be null) receives
// the arg positions for max/min. var uses Welford; `correction` is Bessel's (1 = unbiased).
// Floating inputs accumulate in fp32 or better (fp64 for fp64; the CPU reference uses double).
using ReduceKernel = void (*)(const Tensor& out, const Tensor* indices, const Tensor& in,
                              ReduceShape shape, ReduceOp op, int64_t correction);
EMBER_DECLARE_KERNEL(reduce_kernel, ReduceKernel)  // selected by the input dtype

}  // namespace ember
