// Gradient clipping (nn/clip_grad.h): the norm and the scaling are fused kernels of
// nn/optim_kernels.h, grouped by dtype; the small finishing steps (root of the accumulated sum,
// conversion to float32) are device ops on one-element tensors.
#include "nn/clip_grad.h"

#include <cmath>
#include <map>

#include "autograd/autograd.h"
#include "nn/optim_kernels.h"
#include "ops/ops.h"

namespace ember::nn {

namespace {

struct GradLists {
  Device device;
  std::map<DType, std::vector<Tensor>> by_dtype;
  bool empty() const { return by_dtype.empty(); }
};

// The gradients of `parameters` grouped by dtype, made dense where they were not (the fused
// kernels walk whole dense tensors; a replaced gradient is set back on its parameter).
GradLists gather_grads(const std::vector<Tensor>& parameters, const char* op) {
  GradLists lists;
  bool have_device = false;
  for (const Tensor& p : parameters) {
    EMBER_CHECK(p.defined(), op, ": a parameter is an undefined tensor");
    if (!p.grad().defined()) continue;
    Tensor param = p;
    if (!is_dense_tensor(param.grad())) param.set_grad(param.grad().contiguous());
    const Tensor& g = param.grad();
    EMBER_CHECK(is_floating(g.dtype()), op, ": a gradient has dtype ", dtype_name(g.dtype()));
    if (!have_device) {
      lists.device = g.device();
      have_device = true;
    }
    EMBER_CHECK(g.device() == lists.device, op, ": gradients live on ", lists.device.str(), " and ",
                g.device().str(), "; clip the parameters of each device separately");
    lists.by_dtype[g.dtype()].push_back(g);
  }
  return lists;
}

Tensor total_norm(const GradLists& lists, double norm_type, const char* op) {
  EMBER_CHECK(norm_type > 0, op, ": norm_type ", norm_type, " must be positive (or INFINITY)");
  if (lists.empty()) return zeros({}, TensorOptions(DType::f32));
  Tensor accumulator = zeros({}, TensorOptions(DType::f64).with_device(lists.device));
  for (const auto& [dtype, grads] : lists.by_dtype)
    grad_norm_kernel().get(lists.device.type, dtype)(grads, norm_type, accumulator);
  Tensor norm = std::isinf(norm_type) ? accumulator
                : norm_type == 2       ? sqrt(accumulator)
                : norm_type == 1       ? accumulator
                                       : pow(accumulator, 1.0 / norm_type);
  return norm.to(DType::f32);
}

}  // namespace

Tensor grad_norm(const std::vector<Tensor>& parameters, double norm_type) {
  autograd::NoGradGuard no_grad;
  return total_norm(gather_grads(parameters, "grad_norm"), norm_type, "grad_norm");
}

Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type) {
  autograd::NoGradGuard no_grad;
  EMBER_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm ", max_norm, " is negative");
  const GradLists lists = gather_grads(parameters, "clip_grad_norm_");
  Tensor norm = total_norm(lists, norm_type, "clip_grad_norm_");
  for (const auto& [dtype, grads] : lists.by_dtype) {
    clip_by_norm_kernel().get(lists.device.type, dtype)(grads, norm, max_norm);
    for (const Tensor& g : grads) g.bump_version();
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
