// conv2d: argument checks, 'same'/'valid' padding, output shape and memory format, autograd
// formula (backward-data, backward-filter and the bias gradient), and running its algorithms
// through the algorithm cache. Where the device's algorithms take an epilogue
// (conv2d_epilogue_kernel is registered), a bias is added by the algorithm that runs.
#include "ember/ops/conv.h"

#include <algorithm>
#include <atomic>

#include "ember/autograd/graph/grad_mode.h"
#include "ember/autograd/graph/node.h"
#include "ember/ops/ops.h"

namespace ember {

using dispatch::Direction;

namespace {
std::atomic<bool> g_conv_allow_tf32{true};

std::string ints(const std::array<int64_t, 2>& v) {
  return detail::concat("[", v[0], ", ", v[1], "]");
}

}  // namespace

Shape check_conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                   const Conv2dParams& p) {
  EMBER_CHECK(input.defined() && weight.defined(), "conv2d: input and weight must be defined");
  EMBER_CHECK(input.dim() == 4, "conv2d: input must be 4-D [N, C, H, W], got shape ",
              input.shape_str(), (input.dim() == 3 ? "; add a batch dim with unsqueeze(0)" : ""));
  EMBER_CHECK(weight.dim() == 4, "conv2d: weight must be 4-D [K, C / groups, R, S], got shape ",
              weight.shape_str());
  EMBER_CHECK(input.device() == weight.device(), "conv2d: input is on ", input.device().str(),
              " but weight is on ", weight.device().str(), "; move them to one device");
  EMBER_CHECK(input.dtype() == weight.dtype(), "conv2d: input has dtype ",
              dtype_name(input.dtype()), " but weight has ", dtype_name(weight.dtype()),
              "; convert one with .to(dtype)");
  EMBER_CHECK_STATUS(is_floating(input.dtype()), not_supported, "conv2d: dtype ",
                     dtype_name(input.dtype()),
                     " is not supported; use float32, float64, float16 or bfloat16");
  for (int i = 0; i < 2; ++i) {
    EMBER_CHECK(p.stride[i] >= 1, "conv2d: stride must be >= 1, got ", ints(p.stride));
    EMBER_CHECK(p.dilation[i] >= 1, "conv2d: dilation must be >= 1, got ", ints(p.dilation));
    EMBER_CHECK(p.padding[i] >= 0, "conv2d: padding must be >= 0, got ", ints(p.padding));
  }
  const int64_t N = input.size(0), C = input.size(1), H = input.size(2), W = input.size(3);
  const int64_t K = weight.size(0), R = weight.size(2), S = weight.size(3);
  EMBER_CHECK(p.groups >= 1, "conv2d: groups must be >= 1, got ", p.groups);
  EMBER_CHECK(C % p.groups == 0, "conv2d: input channels (", C, ", input shape ", input.shape_str(),
              ") are not divisible by groups = ", p.groups);
  EMBER_CHECK(K % p.groups == 0, "conv2d: output channels (", K, ", weight shape ",
              weight.shape_str(), ") are not divisible by groups = ", p.groups);
  EMBER_CHECK(weight.size(1) * p.groups == C, "conv2d: weight ", weight.shape_str(), " expects ",
              weight.size(1) * p.groups, " input channels (", weight.size(1), " per group x ",
              p.groups, " groups) but input ", input.shape_str(), " has ", C,
              "; weight must be [K, C / groups, R, S]");
  const int64_t R_eff = p.dilation[0] * (R - 1) + 1, S_eff = p.dilation[1] * (S - 1) + 1;
  const int64_t H_pad = H + 2 * p.padding[0], W_pad = W + 2 * p.padding[1];
  EMBER_CHECK(R >= 1 && S >= 1 && R_eff <= H_pad && S_eff <= W_pad, "conv2d: the kernel (", R,
              " x ", S, ", ", R_eff, " x ", S_eff, " with dilation ", ints(p.dilation),
              ") is larger than the padded input (", H_pad, " x ", W_pad, " for input ",
              input.shape_str(), " and padding ", ints(p.padding),
              "); use a smaller kernel or more padding");
  if (bias.defined()) {
    EMBER_CHECK(bias.dim() == 1 && bias.size(0) == K, "conv2d: bias must be [", K,
                "] (one value per output channel of weight ", weight.shape_str(), "), got ",
                bias.shape_str());
    EMBER_CHECK(bias.device() == input.device(), "conv2d: bias is on ", bias.device().str(),
                " but input is on ", input.device().str(), "; move them to one device");
    EMBER_CHECK(bias.dtype() == input.dtype(), "conv2d: bias has dtype ", dtype_name(bias.dtype()),
                " but input has ", dtype_name(input.dtype()));
  }
  const int64_t P = (H_pad - R_eff) / p.stride[0] + 1;
  const int64_t Q = (W_pad - S_eff) / p.stride[1] + 1;
  return {N, K, P, Q};
}

namespace {

// The CPU algorithms read dense NCHW tensors.
Tensor dense_for(const Tensor& t) { return t.device().is_cpu() ? t.contiguous() : t; }

// The forward with its bias: in the algorithm's epilogue where the device's algorithms take one
// (in its kernel when the algorithm the cache picks can, else one pass over the output), a
// separate add elsewhere.
void run_forward_with_bias(const ConvProblem& forward, const Tensor& bias) {
  const Device device = forward.device();
  const bool nonempty =
      forward.input.numel() > 0 && forward.weight.numel() > 0 && forward.output.numel() > 0;
  if (bias.defined() && nonempty &&
      conv2d_epilogue_kernel().has(device.type, forward.output.dtype())) {
    ConvProblem with_bias = forward;
    with_bias.epilogue = {bias, false};
    conv2d_run(with_bias);
    return;
  }
  conv2d_run_or_zero(forward);
  if (bias.defined()) {
    Tensor out = forward.output;
    add_(out, bias.view({1, bias.size(0), 1, 1}));
  }
}
}  // namespace

MemoryFormat conv_result_memory_format(const Tensor& input, const Tensor& weight) {
  if (!input.device().is_cuda() || input.dim() != 4 || weight.dim() != 4)
    return MemoryFormat::contiguous;
  const bool channels_last = input.suggest_memory_format() == MemoryFormat::channels_last ||
                             weight.suggest_memory_format() == MemoryFormat::channels_last;
  return channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous;
}

ResolvedConv2dPadding resolve_conv2d_padding(const char* op, const Tensor& input,
                                             const Tensor& weight, const Conv2dParams& p) {
  if (p.padding_mode == ConvPaddingMode::explicit_sizes) return {input, p};
  Conv2dParams q = p;
  q.padding_mode = ConvPaddingMode::explicit_sizes;
  q.padding = {0, 0};
  // Malformed operands get conv2d's own messages: resolve nothing more.
  const bool well_formed = input.defined() && weight.defined() && input.dim() == 4 &&
                           weight.dim() == 4 && p.dilation[0] >= 1 && p.dilation[1] >= 1;
  if (p.padding_mode == ConvPaddingMode::valid || !well_formed) return {input, q};
  EMBER_CHECK(p.stride[0] == 1 && p.stride[1] == 1, op,
              ": padding='same' needs stride 1 (the output keeps the input's size), got stride ",
              ints(p.stride), " for input ", input.shape_str(), " and weight ", weight.shape_str(),
              "; give explicit padding for a strided convolution");
  // Total padding dilation * (kernel - 1) per axis: half on each side; an odd one extra zero on
  // the bottom/right, appended to the input (torch.nn.functional.conv2d does the same).
  Tensor x = input;
  for (int i = 0; i < 2; ++i) {
    const int64_t total = p.dilation[i] * std::max<int64_t>(weight.size(2 + i) - 1, 0);
    q.padding[i] = total / 2;
    if (total % 2 == 0) continue;
    Shape zeros_shape = x.sizes();
    zeros_shape[2 + i] = 1;
    x = cat({x, zeros(zeros_shape, TensorOptions(x.dtype()).with_device(x.device()))}, 2 + i);
  }
  if (!x.is_same(input) && input.suggest_memory_format() == MemoryFormat::channels_last)
    x = x.contiguous(MemoryFormat::channels_last);
  return {x, q};
}

bool conv_allow_tf32() { return g_conv_allow_tf32.load(std::memory_order_relaxed); }
void set_conv_allow_tf32(bool allow) { g_conv_allow_tf32 = allow; }

// ---- running its algorithms ------------------------------------------------------------------

const dispatch::Algorithm<ConvProblem>& conv2d_choose(const ConvProblem& pr) {
  return dispatch::algo_cache().choose(conv2d_slot(pr.direction, pr.device().type), conv2d_key(pr),
                                       pr);
}

void conv2d_run_or_zero(const ConvProblem& pr) {
  const Tensor& written = pr.written();
  if (written.numel() == 0) return;
  if (pr.input.numel() == 0 || pr.weight.numel() == 0 || pr.output.numel() == 0) {
    Tensor w = written;
    w.zero_();
    return;
  }
  conv2d_run(pr);
}

void conv2d_run(const ConvProblem& pr) {
  dispatch::algo_cache().run(conv2d_slot(pr.direction, pr.device().type), conv2d_key(pr), pr);
}

// ---- differentiable backward ------------------------------------------------------------------

// conv2d is bilinear in (input, weight): with y = conv(x, w), dx = Jx(w)^T g and
// dw = Jw(x)^T g, the second derivatives reuse conv2d and the two backward directions:
//   d<dx, ggx>/dg = conv(ggx, w),  d<dx, ggx>/dw = Jw(ggx)^T g  (backward_weight(ggx, g)),
//   d<dw, ggw>/dg = conv(x, ggw),  d<dw, ggw>/dx = Jx(ggw)^T g  (backward_input(g, ggw)).
Tensor conv2d_backward_input(const Tensor& grad_output, const Tensor& weight,
                             const Shape& input_shape, const Conv2dParams& p) {
  Tensor grad_input = empty(input_shape, grad_output.dtype(), grad_output.device(),
                            conv_result_memory_format(grad_output, weight));
  {
    autograd::NoGradGuard no_grad;
    conv2d_run_or_zero({Direction::backward_data, grad_input, dense_for(weight.detach()),
                        dense_for(grad_output.detach()), p, conv_allow_tf32()});
  }
  if (autograd::needs_grad({&grad_output, &weight})) {
    autograd::SavedTensor saved_g(grad_output, "conv2d_backward_input"),
        saved_w(weight, "conv2d_backward_input");
    const Shape w_shape = weight.sizes();
    autograd::record_backward(
        "conv2d_backward_input", {grad_output, weight}, {&grad_input},
        [saved_g, saved_w, w_shape, p](const std::vector<Tensor>& gg, const autograd::Node& node) {
          std::vector<Tensor> r(2);
          if (node.needs_input_grad(0)) r[0] = conv2d(gg[0], saved_w.unpack(), {}, p);
          if (node.needs_input_grad(1))
            r[1] = conv2d_backward_weight(gg[0], saved_g.unpack(), w_shape, p);
          return r;
        });
  }
  return grad_input;
}

Tensor conv2d_backward_weight(const Tensor& input, const Tensor& grad_output,
                              const Shape& weight_shape, const Conv2dParams& p) {
  Tensor grad_weight = empty(weight_shape, grad_output.dtype(), grad_output.device(),
                             conv_result_memory_format(input, grad_output));
  {
    autograd::NoGradGuard no_grad;
    conv2d_run_or_zero({Direction::backward_filter, dense_for(input.detach()), grad_weight,
                        dense_for(grad_output.detach()), p, conv_allow_tf32()});
  }
  if (autograd::needs_grad({&input, &grad_output})) {
    autograd::SavedTensor saved_x(input, "conv2d_backward_weight"),
        saved_g(grad_output, "conv2d_backward_weight");
    const Shape x_shape = input.sizes();
    autograd::record_backward(
        "conv2d_backward_weight", {input, grad_output}, {&grad_weight},
        [saved_x, saved_g, x_shape, p](const std::vector<Tensor>& gg, const autograd::Node& node) {
          std::vector<Tensor> r(2);
          if (node.needs_input_grad(0))
            r[0] = conv2d_backward_input(saved_g.unpack(), gg[0], x_shape, p);
          if (node.needs_input_grad(1)) r[1] = conv2d(saved_x.unpack(), gg[0], {}, p);
          return r;
        });
  }
  return grad_weight;
}

// ---- the op -----------------------------------------------------------------------------------

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
              const Conv2dParams& p) {
  if (p.padding_mode != ConvPaddingMode::explicit_sizes) {
    const ResolvedConv2dPadding r = resolve_conv2d_padding("conv2d", input, weight, p);
    return conv2d(r.input, weight, bias, r.params);
  }
  const Shape out_shape = check_conv2d(input, weight, bias, p);
  const DType dtype = input.dtype();

  if (input.device().is_cpu() && (dtype == DType::f16 || dtype == DType::bf16)) {
    // The CPU has no 16-bit arithmetic worth having: compute in fp32 (fp32 accumulation, as on
    // the GPU) through differentiable casts, so gradients come back in the caller's dtype.
    Tensor bias32 = bias.defined() ? cast(bias, DType::f32) : Tensor();
    return cast(conv2d(cast(input, DType::f32), cast(weight, DType::f32), bias32, p), dtype);
  }

  const bool has_bias = bias.defined();
  std::vector<Tensor> inputs = {input, weight};
  if (has_bias) inputs.push_back(bias);
  const bool record = autograd::needs_grad(inputs);
  const bool tf32 = conv_allow_tf32();

  const MemoryFormat format = conv_result_memory_format(input, weight);

  Tensor x, w, out;
  {
    autograd::NoGradGuard no_grad;
    x = dense_for(input.detach());
    w = dense_for(weight.detach());
    out = empty(out_shape, dtype, input.device(), format);
    run_forward_with_bias({Direction::forward, x, w, out, p, tf32},
                          has_bias ? bias.detach() : Tensor());
  }

  if (record) {
    // Save only what backward needs: x for the weight gradient, w for the input gradient.
    // input and weight themselves carry the history a create_graph backward differentiates.
    autograd::SavedTensor saved_x, saved_w, saved_input, saved_weight;
    if (weight.requires_grad()) saved_x = autograd::SavedTensor(x, "conv2d");
    if (input.requires_grad()) saved_w = autograd::SavedTensor(w, "conv2d");
    if (weight.requires_grad()) saved_input = autograd::SavedTensor(input, "conv2d");
    if (input.requires_grad()) saved_weight = autograd::SavedTensor(weight, "conv2d");
    Shape x_shape = input.sizes(), w_shape = weight.sizes();
    Device device = input.device();
    autograd::record_backward(
        "Conv2dBackward", inputs, {&out},
        [saved_x, saved_w, saved_input, saved_weight, x_shape, w_shape, device, dtype, format, p,
         tf32, has_bias](const std::vector<Tensor>& grads, const autograd::Node& node) {
          std::vector<Tensor> result(has_bias ? 3 : 2);
          if (!grads[0].defined()) return result;
          if (autograd::grad_enabled()) {
            if (node.needs_input_grad(0))
              result[0] = conv2d_backward_input(grads[0], saved_weight.unpack(), x_shape, p);
            if (node.needs_input_grad(1))
              result[1] = conv2d_backward_weight(saved_input.unpack(), grads[0], w_shape, p);
            if (has_bias && node.needs_input_grad(2)) result[2] = sum(grads[0], {0, 2, 3});
            return result;
          }
          Tensor grad_out = dense_for(grads[0]);
          if (node.needs_input_grad(0)) {
            Tensor grad_input = empty(x_shape, dtype, device, format);
            conv2d_run_or_zero(
                {Direction::backward_data, grad_input, saved_w.unpack(), grad_out, p, tf32});
            result[0] = grad_input;
          }
          if (node.needs_input_grad(1)) {
            Tensor grad_weight = empty(w_shape, dtype, device, format);
            conv2d_run_or_zero(
                {Direction::backward_filter, saved_x.unpack(), grad_weight, grad_out, p, tf32});
            result[1] = grad_weight;
          }
          if (has_bias && node.needs_input_grad(2)) result[2] = sum(grad_out, {0, 2, 3});
          return result;
        });
  }
  return out;
}

}  // namespace ember
