// conv2d_bias_relu (ops/conv_fused.h): the fused path (the convolution with a bias + ReLU
// epilogue) with its backward, and the composite relu(conv2d(...)) everywhere else (the CPU, and
// any call conv2d must reject: conv2d then throws its own error message).
#include "ember/ops/conv_fused.h"

#include <vector>

#include "ember/autograd/graph/grad_mode.h"
#include "ember/autograd/graph/node.h"
#include "ember/kernel_interface/elementwise.h"
#include "ember/ops/ops.h"

namespace ember {

namespace {

using dispatch::Direction;

// True where the device's conv algorithms take an epilogue for the input's dtype and no operand
// is empty; everything else
// goes through the composite relu(conv2d(...)). The arguments themselves are checked by conv2d's
// own check_conv2d either way, so there is one set of checks and messages.
bool fused_path_applies(const Tensor& x, const Tensor& w) {
  return x.defined() && w.defined() && conv2d_epilogue_kernel().has(x.device().type, x.dtype()) &&
         x.numel() > 0 && w.numel() > 0;
}

}  // namespace

Tensor conv2d_bias_relu(const Tensor& input, const Tensor& weight, const Tensor& bias,
                        const Conv2dParams& p) {
  if (p.padding_mode != ConvPaddingMode::explicit_sizes) {
    const ResolvedConv2dPadding r = resolve_conv2d_padding("conv2d_bias_relu", input, weight, p);
    return conv2d_bias_relu(r.input, weight, bias, r.params);
  }
  if (!fused_path_applies(input, weight)) return relu(conv2d(input, weight, bias, p));
  const Shape out_shape = check_conv2d(input, weight, bias, p);

  const DType dtype = input.dtype();
  const Device device = input.device();
  const bool has_bias = bias.defined();
  std::vector<Tensor> inputs = {input, weight};
  if (has_bias) inputs.push_back(bias);
  const bool record = autograd::needs_grad(inputs);
  const bool tf32 = conv_allow_tf32();

  // conv2d's rule for the output and the gradients, so the fused op and conv2d agree.
  const MemoryFormat format = conv_result_memory_format(input, weight);

  Tensor x, w, out;
  {
    autograd::NoGradGuard no_grad;
    x = input.detach();
    w = weight.detach();
    out = empty(out_shape, dtype, device, format);
    // One cache lookup: the chosen algorithm runs with the cache's workspace and applies the
    // epilogue (in its kernel where it can).
    conv2d_run(ConvProblem{Direction::forward, x, w, out, p, tf32,
                           ConvEpilogue{has_bias ? bias.detach() : Tensor(), true}});
  }

  if (record) {
    // Backward needs the output (the ReLU mask), x for the weight gradient, w for the input's.
    autograd::SavedTensor saved_out(out, "conv2d_bias_relu");
    autograd::SavedTensor saved_x, saved_w, saved_input, saved_weight;
    if (weight.requires_grad()) saved_x = autograd::SavedTensor(x, "conv2d_bias_relu");
    if (input.requires_grad()) saved_w = autograd::SavedTensor(w, "conv2d_bias_relu");
    // With their history, for create_graph backwards.
    if (weight.requires_grad()) saved_input = autograd::SavedTensor(input, "conv2d_bias_relu");
    if (input.requires_grad()) saved_weight = autograd::SavedTensor(weight, "conv2d_bias_relu");
    const Shape x_shape = input.sizes(), w_shape = weight.sizes();
    autograd::record_backward(
        "Conv2dBiasReluBackward", inputs, {&out},
        [saved_out, saved_x, saved_w, saved_input, saved_weight, x_shape, w_shape, format, device,
         dtype, p, tf32, has_bias](const std::vector<Tensor>& grads, const autograd::Node& node) {
          std::vector<Tensor> result(has_bias ? 3 : 2);
          if (!grads[0].defined()) return result;
          if (autograd::grad_enabled()) {
            // A create_graph backward: the ReLU mask (piecewise constant) times the gradient,
            // then conv2d's differentiable backward.
            const Tensor y = saved_out.unpack();
            Tensor g = grads[0].dtype() == dtype ? grads[0] : grads[0].to(dtype);
            Tensor pre = mul(g, gt(y.detach(), zeros_like(y.detach())).to(dtype));
            if (node.needs_input_grad(0))
              result[0] = conv2d_backward_input(pre, saved_weight.unpack(), x_shape, p);
            if (node.needs_input_grad(1))
              result[1] = conv2d_backward_weight(saved_input.unpack(), pre, w_shape, p);
            if (has_bias && node.needs_input_grad(2)) result[2] = sum(pre, {0, 2, 3});
            return result;
          }
          // The gradient of the pre-activation: grad where the output is positive, else 0.
          const Tensor& y = saved_out.unpack();
          Tensor grad_pre = empty_like(y);
          ElementwiseIter it = make_elementwise_iter("conv2d_bias_relu", grad_pre, {grads[0], y});
          binary_kernel().get(device.type, dtype)(it, BinaryOp::relu_backward, 1);
          if (node.needs_input_grad(0)) {
            Tensor grad_input = empty(x_shape, dtype, device, format);
            conv2d_run({Direction::backward_data, grad_input, saved_w.unpack(), grad_pre, p, tf32});
            result[0] = grad_input;
          }
          if (node.needs_input_grad(1)) {
            Tensor grad_weight = empty(w_shape, dtype, device, format);
            conv2d_run(
                {Direction::backward_filter, saved_x.unpack(), grad_weight, grad_pre, p, tf32});
            result[1] = grad_weight;
          }
          if (has_bias && node.needs_input_grad(2)) result[2] = sum(grad_pre, {0, 2, 3});
          return result;
        });
  }
  return out;
}

}  // namespace ember
