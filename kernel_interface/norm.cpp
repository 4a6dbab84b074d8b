// The normalization kernel tables of kernel_interface/norm.h, and the glue of the training
// forward's algorithm slot "batch_norm.forward": its op id, slot, key, scratch outputs, the cache's
// choice and run, and the "two_pass" algorithm (registered by each backend).
#include "ember/kernel_interface/norm.h"

namespace ember {

EMBER_DEFINE_KERNEL(batch_norm_stats_kernel, BatchNormStatsKernel)
EMBER_DEFINE_KERNEL(batch_norm_apply_kernel, BatchNormApplyKernel)
EMBER_DEFINE_KERNEL(channel_grad_sums_kernel, ChannelGradSumsKernel)
EMBER_DEFINE_KERNEL(batch_norm_backward_elemt_kernel, BatchNormBackwardKernel)
EMBER_DEFINE_KERNEL(row_norm_forward_kernel, RowNormForwardKernel)
EMBER_DEFINE_KERNEL(row_norm_backward_data_kernel, RowNormBackwardKernel)

DType norm_stats_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// ---- the training forward's algorithm slot -----------------------------------------------------

BatchNormForwardProblem BatchNormForwardProblem::with_scratch_outputs() const {
  BatchNormForwardProblem scratch = *this;
  // y is dense in `layout` (see above): a fresh buffer viewed with y's own sizes and strides is
  // dense in the same layout.
  scratch.y = make_view(empty({y.numel()}, y.dtype(), y.device()), y.sizes(), y.strides(), 0);
  scratch.save_mean = empty_like(save_mean);
  scratch.save_invstd = empty_like(save_invstd);
  if (running_mean.defined()) {
    scratch.running_mean = running_mean.clone();
    scratch.running_var = running_var.clone();
  }
  return scratch;
}

dispatch::OpId batch_norm_op() {
  static const dispatch::OpId id = dispatch::op_id("batch_norm");
  return id;
}

dispatch::AlgoSlot& batch_norm_forward_slot(DeviceType device_type) {
  return dispatch::algo_slot(batch_norm_op(), dispatch::Direction::forward, device_type);
}

dispatch::AlgoKey batch_norm_forward_key(const BatchNormForwardProblem& p) {
  using Operand = dispatch::AlgoKey::Operand;
  dispatch::AlgoKey key =
      dispatch::make_algo_key(batch_norm_op(), dispatch::Direction::forward, p.device());
  key.describe(Operand::input, p.x);
  key.describe(Operand::output, p.y);
  // The residual is x's shape and dtype: describing it as the weight operand adds its layout and
  // lowers the key's alignment to its own.
  if (p.residual.defined()) key.describe(Operand::weight, p.residual);
  key.extra[0] = p.layout.channels_inner ? 1 : 0;
  key.extra[1] = p.residual.defined() ? 2 : (p.relu ? 1 : 0);
  key.extra[2] = (p.weight.defined() ? 1 : 0) | (p.bias.defined() ? 2 : 0) |
                 (p.running_mean.defined() ? 4 : 0);
  key.extra[3] = p.running_mean.defined() ? int32_t(p.running_mean.dtype()) : -1;
  return key;
}

const dispatch::Algorithm<BatchNormForwardProblem>& batch_norm_forward_choose(
    const BatchNormForwardProblem& p) {
  return dispatch::algo_cache().choose(batch_norm_forward_slot(p.device().type),
                                       batch_norm_forward_key(p), p);
}

void batch_norm_forward_run(const BatchNormForwardProblem& p) {
  dispatch::algo_cache().run(batch_norm_forward_slot(p.device().type), batch_norm_forward_key(p),
                             p);
}

dispatch::Algorithm<BatchNormForwardProblem> batch_norm_two_pass_algorithm() {
  dispatch::Algorithm<BatchNormForwardProblem> a;
  a.name = "two_pass";
  a.deterministic = true;
  // Bytes moved (x read twice, y written, the residual read), plus three launches (statistics,
  // their merge, apply) counted as 2 MB each.
  a.heuristic_cost = [](const BatchNormForwardProblem& p) {
    const double bytes = double(p.layout.numel()) * double(element_size(p.x.dtype()));
    return bytes * (p.residual.defined() ? 4.0 : 3.0) + 3 * 2e6;
  };
  a.run = [](const BatchNormForwardProblem& p, void*) {
    const Device device = p.device();
    batch_norm_stats_kernel().get(
        device.type, p.x.dtype())(BatchNormStatsArgs{p.x, p.layout, p.eps, p.momentum, p.save_mean,
                                                     p.save_invstd, p.running_mean, p.running_var});
    batch_norm_apply_kernel().get(device.type, p.x.dtype())(BatchNormApplyArgs{
        p.y, p.x, p.residual, p.save_mean, p.save_invstd, p.weight, p.bias, p.layout, p.relu});
  };
  return a;
}

}  // namespace ember
