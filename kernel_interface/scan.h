// The scan kernel interface: inclusive cumulative sum, product, max and min along the middle dim
// of a dense [outer, len, inner] view (cumsum, cumprod, cummax, cummin in ops/reduction_more_scan).
#pragma once
#include <cstdint>

#include "ember/dispatch/registry.h"
#include "ember/kernel_interface/reduce.h"
#include "ember/tensor/tensor.h"

namespace ember {

enum class ScanOp : uint8_t { sum, prod, max, min };
const char* scan_op_name(ScanOp op);

// `in` and `out` are dense, of the same dtype and [outer, len, inner] (ReduceShape's `reduce` is
// the scanned length). sum/prod accumulate in double (CPU) or the CUDA accumulation type (fp32 for
// f16/bf16/f32, fp64 for f64, int64 for integers) and round each prefix to the dtype. max/min
// write `indices` (dense int64 like out): the running extremum takes the later position on ties
// and NaN propagates (a later NaN takes over), as PyTorch's cummax/cummin.
using ScanKernel = void (*)(const Tensor& out, const Tensor* indices, const Tensor& in,
                            ReduceShape shape, ScanOp op);
EMBER_DECLARE_KERNEL(scan_kernel, ScanKernel)  // selected by the input dtype

}  // namespace ember
