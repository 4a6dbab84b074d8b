// conv1d, conv3d and conv_transpose2d (see conv_variants.h): argument checks, output shapes
// ('same'/'valid' padding included), and the mapping onto conv2d and its ConvProblem directions;
// conv_transpose2d's backward formula lives beside its forward.
#include "ember/ops/conv_variants.h"

#include <algorithm>
#include <string>
#include <vector>

#include "ember/autograd/graph/grad_mode.h"
#include "ember/autograd/graph/node.h"
#include "ember/ops/ops.h"

namespace ember {

using dispatch::Direction;

namespace {

template <size_t D>
std::string ints(const std::array<int64_t, D>& v) {
  std::string s = "[";
  for (size_t i = 0; i < D; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// The checks every convolution shares, for `op` with D spatial dims.
template <size_t D>
void check_common(const char* op, const Tensor& input, const Tensor& weight, const Tensor& bias,
                  const std::array<int64_t, D>& stride, const std::array<int64_t, D>& padding,
                  const std::array<int64_t, D>& dilation, int64_t groups, const char* input_dims,
                  const char* weight_dims) {
  EMBER_CHECK(input.defined() && weight.defined(), op, ": input and weight must be defined");
  EMBER_CHECK(input.dim() == int64_t(D) + 2, op, ": input must be ", D + 2, "-D ", input_dims,
              ", got shape ", input.shape_str(),
              (input.dim() == int64_t(D) + 1 ? "; add a batch dim with unsqueeze(0)" : ""));
  EMBER_CHECK(weight.dim() == int64_t(D) + 2, op, ": weight must be ", D + 2, "-D ", weight_dims,
              ", got shape ", weight.shape_str());
  EMBER_CHECK(input.device() == weight.device(), op, ": input is on ", input.device().str(),
              " but weight is on ", weight.device().str(), "; move them to one device");
  EMBER_CHECK(input.dtype() == weight.dtype(), op, ": input has dtype ", dtype_name(input.dtype()),
              " but weight has ", dtype_name(weight.dtype()), "; convert one with .to(dtype)");
  EMBER_CHECK_STATUS(is_floating(input.dtype()), not_supported, op, ": dtype ",
                     dtype_name(input.dtype()),
                     " is not supported; use float32, float64, float16 or bfloat16");
  for (size_t i = 0; i < D; ++i) {
    EMBER_CHECK(stride[i] >= 1, op, ": stride must be >= 1, got ", ints(stride));
    EMBER_CHECK(dilation[i] >= 1, op, ": dilation must be >= 1, got ", ints(dilation));
    EMBER_CHECK(padding[i] >= 0, op, ": padding must be >= 0, got ", ints(padding));
  }
  EMBER_CHECK(groups >= 1, op, ": groups must be >= 1, got ", groups);
  if (bias.defined()) {
    EMBER_CHECK(bias.device() == input.device(), op, ": bias is on ", bias.device().str(),
                " but input is on ", input.device().str(), "; move them to one device");
    EMBER_CHECK(bias.dtype() == input.dtype(), op, ": bias has dtype ", dtype_name(bias.dtype()),
                " but input has ", dtype_name(input.dtype()));
  }
}

// padding='same' keeps the input's size, which only a stride of 1 does (PyTorch's rule).
template <size_t D>
void check_same_stride(const char* op, ConvPaddingMode mode, const std::array<int64_t, D>& stride,
                       const Tensor& input, const Tensor& weight) {
  if (mode != ConvPaddingMode::same) return;
  for (size_t i = 0; i < D; ++i)
    EMBER_CHECK(stride[i] == 1, op,
                ": padding='same' needs stride 1 (the output keeps the input's size), got stride ",
                ints(stride), " for input ", input.shape_str(), " and weight ", weight.shape_str(),
                "; give explicit padding for a strided convolution");
}

// The CPU algorithms read dense NCHW tensors; CUDA ones take any strides.
Tensor dense_for(const Tensor& t) { return t.device().is_cpu() ? t.contiguous() : t; }

}  // namespace

// ---- conv1d -----------------------------------------------------------------------------------

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias,
              const Conv1dParams& p) {
  check_common<1>("conv1d", input, weight, bias, {p.stride}, {p.padding}, {p.dilation}, p.groups,
                  "[N, C, L]", "[K, C / groups, S]");
  check_same_stride<1>("conv1d", p.padding_mode, {p.stride}, input, weight);
  Conv2dParams q;
  q.stride = {1, p.stride};
  q.padding = {0, p.padding};
  q.dilation = {1, p.dilation};
  q.groups = p.groups;
  q.padding_mode = p.padding_mode;  // conv2d resolves it (the height axis, kernel 1, needs none)
  return conv2d(input.unsqueeze(2), weight.unsqueeze(2), bias, q).squeeze(2);
}

// ---- conv3d -----------------------------------------------------------------------------------

Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias,
              const Conv3dParams& p) {
  check_common<3>("conv3d", input, weight, bias, p.stride, p.padding, p.dilation, p.groups,
                  "[N, C, D, H, W]", "[K, C / groups, T, R, S]");
  check_same_stride<3>("conv3d", p.padding_mode, p.stride, input, weight);
  const int64_t N = input.size(0), C = input.size(1), D = input.size(2);
  const int64_t K = weight.size(0), T = weight.size(2);
  EMBER_CHECK(C % p.groups == 0 && K % p.groups == 0 && weight.size(1) * p.groups == C,
              "conv3d: weight ", weight.shape_str(), " and input ", input.shape_str(),
              " do not match groups = ", p.groups,
              "; weight must be [K, C / groups, T, R, S] with C and K divisible by groups");
  // Depth padding before and after; valid/same also set the H and W padding, which conv2d
  // resolves (an odd 'same' total gets its extra zero at the back, as on H and W).
  int64_t pad_front = p.padding[0], pad_back = p.padding[0];
  if (p.padding_mode != ConvPaddingMode::explicit_sizes) {
    const int64_t total =
        p.padding_mode == ConvPaddingMode::same ? p.dilation[0] * std::max<int64_t>(T - 1, 0) : 0;
    pad_front = total / 2;
    pad_back = total - pad_front;
  }
  const int64_t T_eff = p.dilation[0] * (T - 1) + 1, D_pad = D + pad_front + pad_back;
  EMBER_CHECK(T >= 1 && T_eff <= D_pad, "conv3d: the kernel depth (", T, ", ", T_eff,
              " with dilation ", p.dilation[0], ") is larger than the padded input depth (", D_pad,
              " for input ", input.shape_str(), "); use a smaller kernel or more padding");
  if (bias.defined())
    EMBER_CHECK(bias.dim() == 1 && bias.size(0) == K, "conv3d: bias must be [", K,
                "] (one value per output channel of weight ", weight.shape_str(), "), got ",
                bias.shape_str());
  const int64_t Do = (D_pad - T_eff) / p.stride[0] + 1;
  const bool channels_last = input.suggest_memory_format() == MemoryFormat::channels_last;

  // Zero padding along depth, so that every tap reads one strided slice of depth positions.
  Tensor x = input;
  if (pad_front > 0 || pad_back > 0) {
    auto depth_zeros = [&](int64_t depth) {
      return zeros({N, C, depth, input.size(3), input.size(4)},
                   TensorOptions(input.dtype()).with_device(input.device()));
    };
    std::vector<Tensor> pieces;
    if (pad_front > 0) pieces.push_back(depth_zeros(pad_front));
    pieces.push_back(input);
    if (pad_back > 0) pieces.push_back(depth_zeros(pad_back));
    x = cat(pieces, 2);
  }
  Conv2dParams q;
  q.stride = {p.stride[1], p.stride[2]};
  q.padding = {p.padding[1], p.padding[2]};
  q.dilation = {p.dilation[1], p.dilation[2]};
  q.groups = p.groups;
  q.padding_mode = p.padding_mode;
  Tensor sum;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t first = t * p.dilation[0];
    Tensor slices = x.slice(2, first, first + (Do - 1) * p.stride[0] + 1, p.stride[0]);
    // [N, C, Do, H, W] -> [N * Do, C, H, W]: the depth positions become images.
    Tensor planes = slices.permute({0, 2, 1, 3, 4}).reshape({N * Do, C, x.size(3), x.size(4)});
    if (channels_last) planes = planes.contiguous(MemoryFormat::channels_last);
    Tensor y = conv2d(planes, weight.select(2, t), Tensor(), q);
    sum = t == 0 ? y : sum + y;
  }
  Tensor out = sum.reshape({N, Do, K, sum.size(2), sum.size(3)}).permute({0, 2, 1, 3, 4});
  if (bias.defined()) out = out + bias.view({1, K, 1, 1, 1});
  return out.contiguous(channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous);
}

// ---- conv_transpose2d -------------------------------------------------------------------------

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                        const ConvTranspose2dParams& p) {
  check_common<2>("conv_transpose2d", input, weight, bias, p.stride, p.padding, p.dilation,
                  p.groups, "[N, Cin, H, W]", "[Cin, Cout / groups, R, S]");
  const int64_t N = input.size(0), Cin = input.size(1), H = input.size(2), W = input.size(3);
  const int64_t R = weight.size(2), S = weight.size(3);
  EMBER_CHECK(Cin % p.groups == 0 && weight.size(0) == Cin, "conv_transpose2d: weight ",
              weight.shape_str(), " must be [Cin, Cout / groups, R, S] with Cin = ", Cin,
              " (input ", input.shape_str(), ") divisible by groups = ", p.groups);
  const int64_t Cout = weight.size(1) * p.groups;
  std::array<int64_t, 2> out_size{};
  for (int i = 0; i < 2; ++i) {
    EMBER_CHECK(p.output_padding[i] >= 0 && p.output_padding[i] < p.stride[i],
                "conv_transpose2d: output_padding must be >= 0 and smaller than the stride, got ",
                ints(p.output_padding), " with stride ", ints(p.stride));
    const int64_t in = i == 0 ? H : W, k = i == 0 ? R : S;
    out_size[i] = (in - 1) * p.stride[i] - 2 * p.padding[i] + p.dilation[i] * (k - 1) +
                  p.output_padding[i] + 1;
    EMBER_CHECK(out_size[i] >= 1, "conv_transpose2d: the output would be ", out_size[0], " x ",
                out_size[1], " for input ", input.shape_str(), ", weight ", weight.shape_str(),
                " and padding ", ints(p.padding), "; use less padding");
  }
  if (bias.defined())
    EMBER_CHECK(bias.dim() == 1 && bias.size(0) == Cout, "conv_transpose2d: bias must be [", Cout,
                "] (one value per output channel of weight ", weight.shape_str(), "), got ",
                bias.shape_str());

  const DType dtype = input.dtype();
  if (input.device().is_cpu() && (dtype == DType::f16 || dtype == DType::bf16)) {
    // As conv2d: the CPU computes 16-bit types in fp32 through differentiable casts.
    Tensor bias32 = bias.defined() ? cast(bias, DType::f32) : Tensor();
    return cast(conv_transpose2d(cast(input, DType::f32), cast(weight, DType::f32), bias32, p),
                dtype);
  }

  // The convolution whose backward-data this is: its input has conv_transpose2d's output shape.
  Conv2dParams q;
  q.stride = p.stride;
  q.padding = p.padding;
  q.dilation = p.dilation;
  q.groups = p.groups;
  const bool has_bias = bias.defined();
  std::vector<Tensor> inputs = {input, weight};
  if (has_bias) inputs.push_back(bias);
  const bool record = autograd::needs_grad(inputs);
  const bool tf32 = conv_allow_tf32();
  const Device device = input.device();
  // conv2d's rule (PyTorch's for cudnn_convolution_transpose too) for the output and both
  // gradients.
  const MemoryFormat format = conv_result_memory_format(input, weight);

  Tensor x, w, out;
  {
    autograd::NoGradGuard no_grad;
    x = dense_for(input.detach());
    w = dense_for(weight.detach());
    out = empty({N, Cout, out_size[0], out_size[1]}, dtype, device, format);
    conv2d_run_or_zero({Direction::backward_data, out, w, x, q, tf32});
    if (has_bias) add_(out, bias.detach().view({1, Cout, 1, 1}));
  }

  if (record) {
    autograd::SavedTensor saved_x, saved_w, saved_input, saved_weight;
    if (weight.requires_grad()) saved_x = autograd::SavedTensor(x, "conv_transpose2d");
    if (input.requires_grad()) saved_w = autograd::SavedTensor(w, "conv_transpose2d");
    // With their history, for create_graph backwards.
    if (weight.requires_grad()) saved_input = autograd::SavedTensor(input, "conv_transpose2d");
    if (input.requires_grad()) saved_weight = autograd::SavedTensor(weight, "conv_transpose2d");
    const Shape x_shape = input.sizes(), w_shape = weight.sizes();
    autograd::record_backward(
        "ConvTranspose2dBackward", inputs, {&out},
        [saved_x, saved_w, saved_input, saved_weight, x_shape, w_shape, device, dtype, format, q,
         tf32, has_bias](const std::vector<Tensor>& grads, const autograd::Node& node) {
          std::vector<Tensor> result(has_bias ? 3 : 2);
          if (!grads[0].defined()) return result;
          if (autograd::grad_enabled()) {
            // conv_transpose2d(x, w) is conv2d's input gradient with x as the output gradient:
            // its gradients are conv2d (for x) and conv2d's weight gradient (for w), both
            // differentiable.
            if (node.needs_input_grad(0))
              result[0] = conv2d(grads[0], saved_weight.unpack(), {}, q);
            if (node.needs_input_grad(1))
              result[1] = conv2d_backward_weight(grads[0], saved_input.unpack(), w_shape, q);
            if (has_bias && node.needs_input_grad(2)) result[2] = sum(grads[0], {0, 2, 3});
            return result;
          }
          const Tensor g = dense_for(grads[0]);
          if (node.needs_input_grad(0)) {
            // d input = conv2d(grad, w): the forward of the convolution we are the adjoint of.
            Tensor grad_input = empty(x_shape, dtype, device, format);
            conv2d_run_or_zero({Direction::forward, g, saved_w.unpack(), grad_input, q, tf32});
            result[0] = grad_input;
          }
          if (node.needs_input_grad(1)) {
            Tensor grad_weight = empty(w_shape, dtype, device, format);
            conv2d_run_or_zero(
                {Direction::backward_filter, g, grad_weight, saved_x.unpack(), q, tf32});
            result[1] = grad_weight;
          }
          if (has_bias && node.needs_input_grad(2)) result[2] = sum(grads[0], {0, 2, 3});
          return result;
        });
  }
  return out;
}

}  // namespace ember
