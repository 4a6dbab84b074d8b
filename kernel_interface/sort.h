// The sort kernel interface: a stable sort of every row of a dense [rows, len] input (sort,
// argsort, topk, kthvalue, median and nanmedian in ops/reduction_more_sort.cpp build on it).
#pragma once
#include <cstdint>

#include "ember/dispatch/registry.h"
#include "ember/tensor/tensor.h"

namespace ember {

// `values` (the input's dtype) and `indices` (int64: each element's position in its row) are
// dense [rows, len]. Stable in both directions: equal keys keep their input order. NaN sorts above
// every number (last ascending, first descending) and -0.0 equals 0.0, as PyTorch.
using SortKernel = void (*)(const Tensor& values, const Tensor& indices, const Tensor& in,
                            int64_t rows, int64_t len, bool descending);
EMBER_DECLARE_KERNEL(sort_kernel, SortKernel)  // selected by the input dtype

}  // namespace ember
