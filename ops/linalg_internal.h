// Helpers shared by the decomposition ops (ops/linalg_decomp.cpp, linalg_spectral.cpp,
// linalg_norms.cpp): argument checks, the [batch, rows, cols] view the kernels take, and the
// transpose of the last two dims.
#pragma once
#include <string>

#include "ember/ops/linalg.h"
#include "ember/ops/ops.h"

namespace ember::linalg_detail {

// The transpose of the last two dims (torch's .mT).
inline Tensor mT(const Tensor& x) { return x.transpose(-2, -1); }

// Checks a is a defined float32/float64 tensor of >= 2 dims (square when `square`) on a device
// with decomposition kernels: the CPU. On CUDA the decompositions raise not_supported: there is
// no cuSOLVER path yet, and a silent copy to the host would stall a training step.
inline void check_matrix_input(const char* op, const Tensor& a, bool square) {
  EMBER_CHECK(a.defined(), op, ": undefined input");
  EMBER_CHECK(a.dim() >= 2, op, ": expects a matrix or a batch of matrices [..., rows, cols], got ",
              a.shape_str());
  if (square)
    EMBER_CHECK(a.size(-1) == a.size(-2), op, ": expects square matrices, got ", a.shape_str(),
                " (", a.size(-2), " x ", a.size(-1), ")");
  EMBER_CHECK(a.dtype() == DType::f32 || a.dtype() == DType::f64, op,
              ": supports float32 and float64 inputs, got ", dtype_name(a.dtype()),
              "; convert with .to(kFloat64)");
  if (!a.device().is_cpu())
    EMBER_THROW(not_supported, op, ": has no ", a.device().str(),
                " implementation yet (the decompositions run on the CPU through Eigen); move the "
                "input with .to(kCPU) explicitly if a host round-trip is acceptable");
}

// The leading (batch) dims of a [..., rows, cols] tensor.
inline Shape batch_shape(const Tensor& a) { return Shape(a.sizes().begin(), a.sizes().end() - 2); }
inline Shape with_matrix(Shape batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}
// a as a dense [batch, rows, cols] tensor (a copy when a is not contiguous).
inline Tensor as_batch3(const Tensor& a) {
  return a.reshape({shape_numel(batch_shape(a)), a.size(-2), a.size(-1)}).contiguous();
}

// Raises the error for the first matrix of a batch whose factorisation failed.
void check_info(const char* op, const std::vector<int64_t>& info, const Shape& batch,
                const char* what);

}  // namespace ember::linalg_detail
