// Gradient clipping (nn/clip_grad.h): the norm and the scaling are fused kernels of
// kernel_interface/optim.h over the lists of group_grads_by_dtype; the small finishing steps (root
// of the accumulated sum, conversion to float32) are device ops on one-element tensors.
#include "ember/nn/clip_grad.h"

#include <cmath>

#include "ember/autograd/autograd.h"
#include "ember/kernel_interface/optim.h"
#include "ember/ops/ops.h"

namespace ember::nn {

namespace {

// Each device needs its own norm: the kernels of one call run on one device.
constexpr const char* kMixedDevicesHint = "clip the parameters of each device separately";

Tensor total_norm(const GradsByDtype& grads, double norm_type, const char* op) {
  EMBER_CHECK(norm_type > 0, op, ": norm_type ", norm_type, " must be positive (or INFINITY)");
  if (grads.lists.empty()) return zeros({}, TensorOptions(DType::f32));
  Tensor accumulator = zeros({}, TensorOptions(DType::f64).with_device(grads.device));
  for (const auto& [dtype, list] : grads.lists)
    grad_norm_kernel().get(grads.device.type, dtype)(list, norm_type, accumulator);
  Tensor norm = std::isinf(norm_type) ? accumulator
                : norm_type == 2      ? sqrt(accumulator)
                : norm_type == 1      ? accumulator
                                      : pow(accumulator, 1.0 / norm_type);
  return norm.to(DType::f32);
}

}  // namespace

Tensor grad_norm(const std::vector<Tensor>& parameters, double norm_type) {
  autograd::NoGradGuard no_grad;
  return total_norm(group_grads_by_dtype(parameters, "grad_norm", kMixedDevicesHint), norm_type,
                    "grad_norm");
}

Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type) {
  autograd::NoGradGuard no_grad;
  EMBER_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm ", max_norm, " is negative");
  const GradsByDtype grads = group_grads_by_dtype(parameters, "clip_grad_norm_", kMixedDevicesHint);
  Tensor norm = total_norm(grads, norm_type, "clip_grad_norm_");
  for (const auto& [dtype, list] : grads.lists) {
    clip_by_norm_kernel().get(grads.device.type, dtype)(list, norm, max_norm);
    for (const Tensor& g : list) g.bump_version();
  }
  return norm;
}

void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value) {
  autograd::NoGradGuard no_grad;
  EMBER_CHECK(clip_value >= 0, "clip_grad_value_: clip_value ", clip_value, " is negative");
  for (const Tensor& p : parameters) {
    EMBER_CHECK(p.defined(), "clip_grad_value_: a parameter is an undefined tensor");
    if (!p.grad().defined()) continue;
    Tensor g = p.grad();
    clamp_(g, -clip_value, clip_value);
  }
}

}  // namespace ember::nn
