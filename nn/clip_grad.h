// Gradient clipping, as torch.nn.utils.clip_grad_norm_ / clip_grad_value_, without a host sync:
// the global norm is computed on the device (deterministic fused multi-tensor partial sums, see
// grad_norm_kernel in kernel_interface/optim.h), returned as a device tensor, and the clip
// coefficient min(1, max_norm / (norm + 1e-6)) is computed and applied on the device. So clipping
// can sit inside a captured CUDA graph, and `clip_grad_norm_(...).item()` is the only sync, if
// wanted. With GradScaler, unscale_ the optimizer first (see nn/grad_scaler.h).
#pragma once
#include <vector>

#include "ember/tensor/tensor.h"

namespace ember::nn {

// Scales the gradients of `parameters` (those that have one; all on one device) in place so that
// their global `norm_type`-norm is at most max_norm, and returns the norm before clipping as a
// float32 0-dim tensor on their device (zero, on the CPU, when no parameter has a gradient).
// norm_type: any p > 0, or INFINITY for the largest magnitude. A non-finite norm makes every
// gradient NaN, as PyTorch does without error_if_nonfinite (checking would need a host sync).
Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm,
                       double norm_type = 2.0);

// The global norm alone (torch.nn.utils.get_total_norm of the gradients), no clipping.
Tensor grad_norm(const std::vector<Tensor>& parameters, double norm_type = 2.0);

// Clamps every gradient element into [-clip_value, clip_value] in place.
void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value);

}  // namespace ember::nn
