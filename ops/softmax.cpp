// softmax / log_softmax (argument checks, the [outer, dim, inner] view of dense memory, autograd)
// and the fused cross_entropy / nll_loss (checks, layouts, reductions with PyTorch's semantics,
// autograd), plus the registration of the out-of-range-target device error. SoftmaxProblem's
// algorithm slots and the cross-entropy kernel tables are defined in kernel_interface/softmax.cpp.
//
// Cross-entropy design: the forward kernel reads each row once and saves its log-sum-exp (4 bytes
// per row); the backward kernel reads the logits again and writes the gradient. That is 2 reads
// and 1 write of the logits in all, the minimum when the upstream gradient is not known in the
// forward; writing the gradient in the forward would add a pass to scale it by that gradient.
#include "ember/ops/softmax.h"

#include <cmath>

#include "ember/autograd/graph/graph.h"
#include "ember/ops/layout.h"
#include "ember/ops/ops.h"
#include "ember/tensor/autocast_mode.h"
#include "ember/tensor/runtime/device_errors.h"

namespace ember {

using dispatch::Direction;

namespace {

std::string describe_class_out_of_range(int64_t index, int64_t classes) {
  return detail::concat("target ", index, " is not a class index for ", classes,
                        " classes (valid: 0 to ", classes - 1,
                        ", or ignore_index); check the targets given to cross_entropy / nll_loss");
}
const bool g_registered_class_error = [] {
  cuda::register_device_error(kDeviceErrorClassIndexOutOfRange,
                              "class index out of range in cross_entropy / nll_loss",
                              &describe_class_out_of_range);
  return true;
}();

// ---- softmax ----------------------------------------------------------------------------------

// The [outer, dim_size, inner] view of a dense tensor along `dim`.
void view_along(const Tensor& x, int64_t dim, SoftmaxProblem& p) {
  const int64_t n = x.numel();
  p.dim_size = x.dim() == 0 ? 1 : x.size(dim);
  // A dim of size 1 makes every element its own row, whatever the strides.
  p.inner = p.dim_size == 1 ? 1 : x.stride(dim);
  p.outer = n / (p.dim_size * p.inner);
}

Tensor softmax_backward(const Tensor& grad_y, const Tensor& y, bool log, int64_t dim) {
  SoftmaxProblem p;
  p.direction = Direction::backward;
  p.log = log;
  p.input = y;
  p.grad_output = to_layout_of(grad_y, y);
  p.output = empty_with_layout_of(y, y.dtype());
  if (y.numel() == 0) return p.output;
  view_along(y, dim, p);
  softmax_run(p);
  return p.output;
}

Tensor softmax_forward(const Tensor& x0, int64_t dim0, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  EMBER_CHECK(x0.defined(), op, ": the input is an undefined tensor");
  EMBER_CHECK_STATUS(is_floating(x0.dtype()), not_supported, op, ": input has dtype ",
                     dtype_name(x0.dtype()), " (shape ", x0.shape_str(),
                     "); convert it to a floating dtype with .to(DType::f32)");
  const int64_t dim = wrap_dim(dim0, std::max<int64_t>(x0.dim(), 1), op);
  // Dense layouts (contiguous, channels_last, transposed views) are used as they are.
  Tensor x = x0.detach();
  if (!is_dense_layout(x)) x = x.contiguous();
  SoftmaxProblem p;
  p.direction = Direction::forward;
  p.log = log;
  p.input = x;
  p.output = empty_with_layout_of(x, x.dtype());
  if (x.numel() > 0) {
    view_along(x, dim, p);
    softmax_run(p);
  }
  Tensor y = p.output;
  if (autograd::needs_grad({&x0})) {
    autograd::SavedTensor saved_y(y, op);
    autograd::record_backward(
        op, {x0}, {&y}, [saved_y, log, dim](const std::vector<Tensor>& g, const auto&) {
          const Tensor yv = saved_y.unpack();
          if (autograd::grad_enabled()) {
            // A create_graph backward: the same formula in differentiable ops.
            Tensor gy = g[0].dtype() == yv.dtype() ? g[0] : g[0].to(yv.dtype());
            if (log) return std::vector<Tensor>{sub(gy, mul(exp(yv), sum(gy, {dim}, true)))};
            return std::vector<Tensor>{mul(yv, sub(gy, sum(mul(gy, yv), {dim}, true)))};
          }
          return std::vector<Tensor>{softmax_backward(g[0], yv, log, dim)};
        });
  }
  return y;
}

// ---- cross-entropy ----------------------------------------------------------------------------

// Whether logits [N, C, d1, ...] hold their classes innermost with the other dims in order (a 2-D
// contiguous or a channels_last tensor): rows of C contiguous values in target order.
bool classes_innermost(const Tensor& x) {
  int64_t expect = x.size(1);
  for (int64_t d = x.dim() - 1; d >= 2; --d) {
    if (x.size(d) != 1 && x.stride(d) != expect) return false;
    expect *= x.size(d);
  }
  if (x.size(0) != 1 && x.stride(0) != expect) return false;
  return x.size(1) == 1 || x.stride(1) == 1;
}

// The gradient of class_loss written with differentiable ops, for create_graph backwards.
// x: the input as given ([C] or [N, C, d...]), target: [N, d...] int64. Per row, with a the
// derivative of the row's loss with respect to the log-probabilities,
//   a = -w * valid * ((1 - ls) onehot(target) + ls / C),
// the gradient is r * a for log-probability inputs and r * (a - softmax(x) * sum(a)) for logits,
// where r is the incoming gradient of the row (divided by the weight total for the mean).
Tensor class_loss_grad_differentiable(const Tensor& x, const Tensor& class_weight,
                                      const CrossEntropyArgs& args, const Tensor& grad,
                                      const Tensor& weight_total, LossReduction reduction,
                                      bool unbatched) {
  Tensor xin = unbatched ? x.unsqueeze(0) : x;
  const Tensor& target = args.target;
  const int64_t C = args.classes;
  const DType dtype = x.dtype();
  const Device device = x.device();
  Shape class_shape(size_t(xin.dim()), 1);
  class_shape[1] = C;
  Tensor classes =
      arange(double(C), TensorOptions(DType::i64).with_device(device)).reshape(class_shape);
  Tensor t = target.unsqueeze(1);
  Tensor onehot = eq(classes, t).to(dtype);
  Tensor valid =
      ne(t, full({}, double(args.ignore_index), TensorOptions(DType::i64).with_device(device)))
          .to(dtype);
  const double ls = args.label_smoothing;
  Tensor a = mul(add(mul(onehot, 1.0 - ls), ls / double(C)), valid);
  if (class_weight.defined()) a = mul(a, class_weight.to(dtype).reshape(class_shape));
  a = neg(a);
  Tensor g = grad.dtype() == dtype ? grad : grad.to(dtype);
  Tensor r;
  switch (reduction) {
    case LossReduction::none:
      r = g.reshape(target.sizes()).unsqueeze(1);
      break;
    case LossReduction::sum:
      r = g;
      break;
    case LossReduction::mean:
      r = div(g, weight_total.to(dtype));
      break;
  }
  Tensor dx =
      args.input_is_log_probs ? mul(a, r) : mul(sub(a, mul(softmax(xin, 1), sum(a, {1}, true))), r);
  return unbatched ? dx.squeeze(0) : dx;
}

struct LossSpec {
  const char* op;
  Tensor weight;
  int64_t ignore_index;
  double label_smoothing;
  LossReduction reduction;
  bool input_is_log_probs;
};

// Under autocast the losses compute in float32, as PyTorch casts them at the op (its fp32 list):
// float16/bfloat16 input and weight are cast (differentiably), float64 stays.
Tensor autocast_to_f32(const Tensor& t) {
  const bool low = t.defined() && (t.dtype() == DType::f16 || t.dtype() == DType::bf16);
  return autocast_enabled() && low ? cast(t, DType::f32) : t;
}

Tensor class_loss(const Tensor& input_given, const Tensor& target0, const LossSpec& spec_given) {
  const Tensor input0 = autocast_to_f32(input_given);
  LossSpec spec = spec_given;
  spec.weight = autocast_to_f32(spec.weight);
  const char* op = spec.op;
  const char* input_name = spec.input_is_log_probs ? "input" : "logits";
  EMBER_CHECK(input0.defined(), op, ": ", input_name, " is an undefined tensor");
  EMBER_CHECK(target0.defined(), op, ": target is an undefined tensor");
  EMBER_CHECK_STATUS(is_floating(input0.dtype()), not_supported, op, ": ", input_name,
                     " has dtype ", dtype_name(input0.dtype()), " (shape ", input0.shape_str(),
                     "); it must be floating (float32, float64, float16, bfloat16)");
  EMBER_CHECK_STATUS(!is_floating(target0.dtype()), not_supported, op, ": target has dtype ",
                     dtype_name(target0.dtype()),
                     "; class-probability targets are not supported, pass int64 class indices");
  EMBER_CHECK(target0.dtype() == DType::i64 || target0.dtype() == DType::i32, op,
              ": target has dtype ", dtype_name(target0.dtype()),
              "; class indices must be int64 (convert with .to(DType::i64))");
  EMBER_CHECK(input0.device() == target0.device(), op, ": ", input_name, " is on ",
              input0.device().str(), " but target is on ", target0.device().str(),
              "; move them to one device");
  EMBER_CHECK(spec.label_smoothing >= 0 && spec.label_smoothing <= 1, op,
              ": label_smoothing must be in [0, 1], got ", spec.label_smoothing);
  EMBER_CHECK(input0.dim() >= 1, op, ": ", input_name,
              " must be [C], [N, C] or [N, C, d1, ...], got a 0-d tensor");

  // Unbatched [C] with a 0-d target is [1, C] with [1].
  const bool unbatched = input0.dim() == 1;
  Tensor input = input0.detach(), target = target0;
  if (unbatched) {
    EMBER_CHECK(target0.dim() == 0, op, ": for ", input_name, " of shape ", input0.shape_str(),
                " (one prediction over ", input0.size(0), " classes) target must be 0-d, got ",
                target0.shape_str());
    input = input.unsqueeze(0);
    target = target.reshape({1});
  }
  const int64_t N = input.size(0), C = input.size(1);
  Shape expected_target = {N};
  for (int64_t d = 2; d < input.dim(); ++d) expected_target.push_back(input.size(d));
  EMBER_CHECK(target.sizes() == expected_target, op, ": target has shape ", target0.shape_str(),
              " but ", input_name, " has shape ", input0.shape_str(), "; expected target ",
              shape_str(expected_target), " (", input_name, "' shape without the class dim 1)");
  EMBER_CHECK(C >= 1, op, ": ", input_name, " ", input0.shape_str(),
              " has no classes (dim 1 is 0)");

  Tensor weight;
  if (spec.weight.defined()) {
    EMBER_CHECK(spec.weight.dim() == 1 && spec.weight.size(0) == C, op, ": weight must be [", C,
                "] (one value per class of ", input_name, " ", input0.shape_str(), "), got ",
                spec.weight.shape_str());
    EMBER_CHECK(spec.weight.device() == input0.device(), op, ": weight is on ",
                spec.weight.device().str(), " but ", input_name, " is on ", input0.device().str());
    EMBER_CHECK(is_floating(spec.weight.dtype()), op, ": weight has dtype ",
                dtype_name(spec.weight.dtype()), "; it must be floating");
  }

  CrossEntropyArgs a;
  {
    autograd::NoGradGuard no_grad;
    if (input.dim() >= 2 && classes_innermost(input)) {
      a.outer = input.numel() / C;
      a.inner = 1;
    } else {
      input = input.contiguous();
      a.outer = N;
      a.inner = input.numel() / std::max<int64_t>(N * C, 1);
    }
    a.input = input;
    a.target = target.dtype() == DType::i64 ? target.contiguous() : target.to(DType::i64);
    // Per-row values and weights in the accumulation dtype: float32, float64 for float64 input.
    const DType acc = input.dtype() == DType::f64 ? DType::f64 : DType::f32;
    if (spec.weight.defined()) a.weight = spec.weight.detach().to(acc).contiguous();
    a.classes = C;
    a.ignore_index = spec.ignore_index;
    a.label_smoothing = spec.input_is_log_probs ? 0.0 : spec.label_smoothing;
    a.input_is_log_probs = spec.input_is_log_probs;
    // The smoothing term needs sum(w) (a device scalar, so no host sync).
    if (a.weight.defined() && a.label_smoothing > 0) a.weight_sum = sum(a.weight);
    const int64_t rows = a.outer * a.inner;
    const Device dev = input.device();
    a.loss = empty({rows}, acc, dev);
    a.lse = empty({rows}, acc, dev);
    a.target_weight = empty({rows}, acc, dev);
    if (rows > 0) cross_entropy_forward_kernel().get(dev.type, input.dtype())(a);
  }

  // Reduction (in the accumulation dtype, then the input's dtype, as PyTorch returns).
  Tensor result, weight_total;
  {
    autograd::NoGradGuard no_grad;
    switch (spec.reduction) {
      case LossReduction::none:
        result = a.loss.view(unbatched ? Shape{} : target.sizes());
        break;
      case LossReduction::sum:
        result = sum(a.loss);
        break;
      case LossReduction::mean:
        weight_total = sum(a.target_weight);
        result = div(sum(a.loss), weight_total);
        break;
    }
    if (result.dtype() != input0.dtype()) result = result.to(input0.dtype());
  }

  if (autograd::needs_grad({&input0})) {
    autograd::SavedTensor saved_input(a.input, op), saved_input0(input0, op);
    const Tensor class_weight = spec.weight.defined() ? spec.weight.detach() : Tensor();
    CrossEntropyArgs saved = a;
    saved.input = Tensor();  // held by saved_input (checked for in-place writes)
    saved.loss = Tensor();
    const LossReduction reduction = spec.reduction;
    const Shape input_shape = input0.sizes();
    autograd::record_backward(
        op, {input0}, {&result},
        [saved, saved_input, saved_input0, class_weight, unbatched, weight_total, reduction,
         input_shape](const std::vector<Tensor>& grads, const auto&) {
          if (autograd::grad_enabled())
            return std::vector<Tensor>{
                class_loss_grad_differentiable(saved_input0.unpack(), class_weight, saved, grads[0],
                                               weight_total, reduction, unbatched)};
          CrossEntropyArgs b = saved;
          b.input = saved_input.unpack();
          Tensor g = grads[0].to(b.lse.dtype());
          if (reduction == LossReduction::none) {
            b.row_scale = g.contiguous();
            b.row_scale_stride = 1;
          } else {
            b.row_scale = reduction == LossReduction::mean ? div(g, weight_total) : g;
            b.row_scale_stride = 0;
          }
          b.grad_input = empty_with_layout_of(b.input, b.input.dtype());
          if (b.grad_input.numel() > 0)
            cross_entropy_backward_kernel().get(b.input.device().type, b.input.dtype())(b);
          Tensor grad = b.grad_input;
          if (grad.sizes() != input_shape) grad = grad.view(input_shape);  // unbatched [C]
          return std::vector<Tensor>{grad};
        });
  }
  return result;
}

}  // namespace

// ---- public ops -------------------------------------------------------------------------------

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_forward(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_forward(x, dim, true); }

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o) {
  (void)g_registered_class_error;
  return class_loss(
      logits, target,
      {"cross_entropy", o.weight, o.ignore_index, o.label_smoothing, o.reduction, false});
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& o) {
  (void)g_registered_class_error;
  return class_loss(log_probs, target,
                    {"nll_loss", o.weight, o.ignore_index, 0.0, o.reduction, true});
}

}  // namespace ember
