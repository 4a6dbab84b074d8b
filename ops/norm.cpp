// Normalization ops (batch_norm and its fused ReLU / residual-add-ReLU tails, layer_norm,
// group_norm, instance_norm): argument checks, layouts, running statistics, and each op's backward
// formula beside its forward. The arithmetic is in the kernel tables of kernel_interface/norm.h.
//
// Backward formulas (M values per statistic, xhat = (x - mean) * rstd, g = the incoming gradient,
// gated by the saved output for the ReLU tails):
//   batch norm, training: dx = (g - mean(g) - xhat * mean(g * xhat)) * rstd * w
//   batch norm, eval:     dx = g * rstd * w        (the running statistics are constants)
//   layer / group norm:   dx = rstd * (g w - mean(g w) - xhat * mean(g w xhat)) per row
//   all:                  dweight = sum(g * xhat),  dbias = sum(g)  over everything but the channel
#include "ember/ops/norm.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "ember/autograd/graph/graph.h"
#include "ember/ops/ops.h"

namespace ember {

using Grads = std::vector<Tensor>;

namespace {

// ---- layouts ----------------------------------------------------------------------------------

// Dim orders, outermost first: channels-outer is [0, 1, 2, ...] (NCHW), channels-inner is
// [0, 2, ..., nd - 1, 1] (NHWC).
std::vector<int64_t> dim_order(int64_t nd, bool channels_inner) {
  std::vector<int64_t> order(static_cast<size_t>(nd));
  std::iota(order.begin(), order.end(), 0);
  if (channels_inner && nd > 2) std::rotate(order.begin() + 1, order.begin() + 2, order.end());
  return order;
}

// True when t has no gaps and its dims nest in `order` (size-1 dims may have any stride).
bool dense_in_order(const Tensor& t, const std::vector<int64_t>& order) {
  int64_t expect = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const int64_t d = *it;
    if (t.size(d) != 1 && t.stride(d) != expect) return false;
    expect *= t.size(d);
  }
  return true;
}

// An uninitialised tensor of logical shape `sizes` whose memory follows the channel layout.
Tensor empty_channel_dense(const Shape& sizes, DType dtype, Device device, bool channels_inner) {
  Tensor base = empty({shape_numel(sizes)}, dtype, device);
  Shape strides(sizes.size());
  int64_t expect = 1;
  const std::vector<int64_t> order = dim_order(int64_t(sizes.size()), channels_inner);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    strides[size_t(*it)] = expect;
    expect *= sizes[size_t(*it)];
  }
  return make_view(base, sizes, strides, 0);
}

int64_t spatial_size(const Tensor& x) {
  int64_t s = 1;
  for (int64_t d = 2; d < x.dim(); ++d) s *= x.size(d);
  return s;
}

// x made dense in a channel layout, without a copy when it already is one.
struct ChannelDense {
  Tensor t;
  ChannelLayout layout;
};

ChannelDense to_channel_dense(const Tensor& x) {
  const int64_t nd = x.dim();
  ChannelDense r;
  r.layout.N = x.size(0);
  r.layout.C = x.size(1);
  r.layout.S = spatial_size(x);
  const bool outer_dense = dense_in_order(x, dim_order(nd, false));
  if (outer_dense) {
    r.t = x;
    // With one spatial position both orders are the same memory; the channels-inner kernels
    // (a thread per channel vector, walking rows) suit it better.
    r.layout.channels_inner = r.layout.S == 1;
  } else if (dense_in_order(x, dim_order(nd, true))) {
    r.t = x;
    r.layout.channels_inner = true;
  } else {
    const bool nhwc =
        (nd == 4 || nd == 5) && x.suggest_memory_format() == MemoryFormat::channels_last;
    r.layout.channels_inner = nhwc || r.layout.S == 1;
    r.t = empty_channel_dense(x.sizes(), x.dtype(), x.device(), r.layout.channels_inner);
    r.t.copy_(x);
  }
  return r;
}

// t (of x's shape) in the memory order of `layout`, copied only when its strides differ.
Tensor match_layout(const Tensor& t, const ChannelLayout& layout) {
  if (dense_in_order(t, dim_order(t.dim(), layout.channels_inner))) return t;
  Tensor out = empty_channel_dense(t.sizes(), t.dtype(), t.device(), layout.channels_inner);
  out.copy_(t);
  return out;
}

// A fresh contiguous copy of a [C] parameter in the statistics dtype (never an alias, so later
// in-place updates of the parameter cannot change what backward sees).
Tensor fresh_stats_copy(const Tensor& p, DType stats_dtype) {
  Tensor r = empty({p.numel()}, stats_dtype, p.device());
  r.copy_(p.reshape({p.numel()}));
  return r;
}

// The gradient of a parameter, from a statistics-dtype [C] result.
Tensor param_grad(const Tensor& g, const Shape& shape, DType dtype) {
  Tensor r = g.reshape(shape);
  return r.dtype() == dtype ? r : r.to(dtype);
}

// ---- argument checks --------------------------------------------------------------------------

void check_input(const char* op, const Tensor& x, int64_t min_dim, int64_t max_dim,
                 const char* shapes) {
  EMBER_CHECK(x.defined(), op, ": the input is an undefined tensor");
  EMBER_CHECK_STATUS(is_floating(x.dtype()), not_supported, op, ": dtype ", dtype_name(x.dtype()),
                     " is not supported; use float32, float64, float16 or bfloat16");
  EMBER_CHECK(x.dim() >= min_dim && x.dim() <= max_dim, op, ": expected input of shape ", shapes,
              ", got ", x.shape_str());
}

// A parameter: undefined, or of `shape` on x's device; its dtype is checked by check_param_dtypes.
void check_param_shape(const char* op, const char* name, const Tensor& p, const Shape& shape,
                       const Tensor& x, const char* what) {
  if (!p.defined()) return;
  EMBER_CHECK(p.sizes() == shape, op, ": ", name, " must have shape ", shape_str(shape), " (", what,
              " of input ", x.shape_str(), "), got ", p.shape_str());
  EMBER_CHECK(p.device() == x.device(), op, ": ", name, " ", p.shape_str(), " is on ",
              p.device().str(), " but the input ", x.shape_str(), " is on ", x.device().str(),
              "; move them to one device");
}

// Parameters share one dtype: the input's, or float32 for a float16 / bfloat16 input.
void check_param_dtypes(const char* op, const Tensor& x,
                        std::initializer_list<std::pair<const char*, const Tensor*>> params) {
  const char* first_name = nullptr;
  DType first = x.dtype();
  const bool reduced = x.dtype() == DType::f16 || x.dtype() == DType::bf16;
  for (const auto& [name, p] : params) {
    if (!p->defined()) continue;
    const DType d = p->dtype();
    EMBER_CHECK(d == x.dtype() || (reduced && d == DType::f32), op, ": ", name, " has dtype ",
                dtype_name(d), " but the input has ", dtype_name(x.dtype()),
                "; parameters must have the input's dtype (or float32 for a float16 / bfloat16 "
                "input): convert one with .to(dtype)");
    if (first_name == nullptr) {
      first_name = name;
      first = d;
    }
    EMBER_CHECK(d == first, op, ": ", name, " has dtype ", dtype_name(d), " but ", first_name,
                " has ", dtype_name(first), "; give all parameters one dtype");
  }
}

void check_running_stats(const char* op, const Tensor& running_mean, const Tensor& running_var,
                         bool required) {
  EMBER_CHECK(running_mean.defined() == running_var.defined(), op,
              ": running_mean and running_var must be given together (got only ",
              running_mean.defined() ? "running_mean" : "running_var", ")");
  EMBER_CHECK(!required || running_mean.defined(), op,
              ": evaluation mode (training = false) normalizes with running_mean and running_var, "
              "which are undefined; pass them or use training = true");
  for (const Tensor* t : {&running_mean, &running_var})
    EMBER_CHECK(!t->defined() || !t->requires_grad(), op,
                ": running statistics are updated in place and must not require grad; pass "
                "buffers (detach() them)");
}

// ---- batch norm -------------------------------------------------------------------------------

// ---- differentiable backward (create_graph) ----------------------------------------------------

// A normalization's backward in differentiable ops, for create_graph backwards: x with its
// history, dy the gradient of the affine output (already through any ReLU gate), w_b the weight
// shaped to broadcast against x (undefined: no weight), stats over `dims` of x recomputed from x
// (training) or the constant mean / invstd given (eval, shaped like w_b). Returns dx and the
// per-element terms whose sums are the parameter gradients: dy * xhat (weight) and dy (bias).
struct NormGradTerms {
  Tensor dx, dy_xhat;
};
NormGradTerms norm_backward_differentiable(const Tensor& x, const Tensor& dy, const Tensor& w_b,
                                           const Shape& dims, double eps, bool training,
                                           const Tensor& eval_mean, const Tensor& eval_invstd) {
  Tensor mean_x = training ? mean(x, dims, true) : eval_mean.to(x.dtype());
  Tensor xc = sub(x, mean_x);
  Tensor rstd =
      training ? rsqrt(add(mean(square(xc), dims, true), eps)) : eval_invstd.to(x.dtype());
  Tensor xhat = mul(xc, rstd);
  Tensor dxhat = w_b.defined() ? mul(dy, w_b.to(x.dtype())) : dy;
  Tensor dx = training ? mul(rstd, sub(sub(dxhat, mean(dxhat, dims, true)),
                                       mul(xhat, mean(mul(dxhat, xhat), dims, true))))
                       : mul(dxhat, rstd);
  return {dx, mul(dy, xhat)};
}

// The reduction dims of batch norm for an input of `rank` dims: all but the channel dim 1.
Shape batch_norm_dims(int64_t rank) {
  Shape dims = {0};
  for (int64_t d = 2; d < rank; ++d) dims.push_back(d);
  return dims;
}

// A [C] tensor shaped to broadcast against [N, C, ...] of `rank` dims.
Tensor channel_broadcast(const Tensor& t, int64_t rank) {
  if (!t.defined()) return t;
  Shape shape = {t.numel()};
  for (int64_t d = 2; d < rank; ++d) shape.push_back(1);
  return t.reshape(shape);
}

enum class BnTail { none, relu, add_relu };

Tensor batch_norm_impl(const char* op, const Tensor& x, const Tensor& residual,
                       const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, bool training, double momentum, double eps,
                       BnTail tail) {
  check_input(op, x, 2, 5, "[N, C], [N, C, L], [N, C, H, W] or [N, C, D, H, W]");
  const int64_t C = x.size(1);
  const Shape cshape{C};
  check_param_shape(op, "weight", weight, cshape, x, "one value per channel");
  check_param_shape(op, "bias", bias, cshape, x, "one value per channel");
  check_param_shape(op, "running_mean", running_mean, cshape, x, "one value per channel");
  check_param_shape(op, "running_var", running_var, cshape, x, "one value per channel");
  check_param_dtypes(op, x,
                     {{"weight", &weight},
                      {"bias", &bias},
                      {"running_mean", &running_mean},
                      {"running_var", &running_var}});
  check_running_stats(op, running_mean, running_var, !training);
  if (tail == BnTail::add_relu) {
    EMBER_CHECK(residual.defined(), op, ": the residual is an undefined tensor");
    EMBER_CHECK(residual.sizes() == x.sizes(), op, ": residual must have the input's shape ",
                x.shape_str(), ", got ", residual.shape_str());
    EMBER_CHECK(residual.device() == x.device(), op, ": residual ", residual.shape_str(), " is on ",
                residual.device().str(), " but the input ", x.shape_str(), " is on ",
                x.device().str(), "; move them to one device");
    EMBER_CHECK(residual.dtype() == x.dtype(), op, ": residual has dtype ",
                dtype_name(residual.dtype()), " but the input has ", dtype_name(x.dtype()),
                "; convert one with .to(dtype)");
  }
  const int64_t per_channel = x.numel() / std::max<int64_t>(C, 1);
  EMBER_CHECK(!training || x.numel() == 0 || per_channel > 1, op,
              ": expected more than 1 value per channel when training, got input of shape ",
              x.shape_str(), "; use a larger batch or training = false");

  const DType stats_dtype = norm_stats_dtype(x.dtype());
  const Device device = x.device();
  const bool relu = tail != BnTail::none;
  Tensor y, xd, mean, invstd, weight_k;
  ChannelLayout layout;
  {
    autograd::NoGradGuard no_grad;
    ChannelDense dense = to_channel_dense(x.detach());
    xd = dense.t;
    layout = dense.layout;
    Tensor residual_d =
        tail == BnTail::add_relu ? match_layout(residual.detach(), layout) : Tensor();
    weight_k = norm_param_for_kernel(weight);
    Tensor bias_k = norm_param_for_kernel(bias);
    y = empty_channel_dense(x.sizes(), x.dtype(), device, layout.channels_inner);
    if (training) {
      mean = empty({C}, stats_dtype, device);
      invstd = empty({C}, stats_dtype, device);
      if (x.numel() > 0) {
        // The kernels write [C] contiguous running statistics; a strided view is updated through
        // a contiguous temporary.
        Tensor rm = running_mean, rv = running_var;
        const bool strided = rm.defined() && !(rm.is_contiguous() && rv.is_contiguous());
        if (strided) {
          rm = running_mean.detach().contiguous().clone();
          rv = running_var.detach().contiguous().clone();
        }
        BatchNormForwardProblem problem;
        problem.x = xd;
        problem.residual = residual_d;
        problem.weight = weight_k;
        problem.bias = bias_k;
        problem.layout = layout;
        problem.eps = eps;
        problem.momentum = momentum;
        problem.relu = relu;
        problem.y = y;
        problem.save_mean = mean;
        problem.save_invstd = invstd;
        problem.running_mean = rm;
        problem.running_var = rv;
        batch_norm_forward_run(problem);
        if (strided) {
          Tensor m = running_mean, v = running_var;
          m.copy_(rm);
          v.copy_(rv);
        } else if (rm.defined()) {
          running_mean.bump_version();
          running_var.bump_version();
        }
      } else {
        mean.zero_();
        invstd.zero_();
      }
    } else {
      mean = fresh_stats_copy(running_mean.detach(), stats_dtype);
      invstd = rsqrt(fresh_stats_copy(running_var.detach(), stats_dtype) + eps);
    }
    if (!training && x.numel() > 0)
      batch_norm_apply_kernel().get(device.type, x.dtype())(
          BatchNormApplyArgs{y, xd, residual_d, mean, invstd, weight_k, bias_k, layout, relu});
  }

  std::vector<Tensor> inputs = {x, weight, bias};
  if (tail == BnTail::add_relu) inputs.push_back(residual);
  if (!autograd::needs_grad(inputs)) return y;

  autograd::SavedTensor saved_x(xd, op), saved_y(relu ? y : Tensor(), op), saved_w(weight, op);
  autograd::SavedTensor saved_input(x, op);  // with its history, for create_graph backwards
  const bool has_residual = tail == BnTail::add_relu;
  const Shape x_shape = x.sizes();
  const DType x_dtype = x.dtype();
  const DType w_dtype = weight.defined() ? weight.dtype() : stats_dtype;
  const DType b_dtype = bias.defined() ? bias.dtype() : stats_dtype;
  autograd::record_backward(op, inputs, {&y}, [=](const Grads& grads, const autograd::Node& node) {
    Grads result(has_residual ? 4 : 3);
    const bool need_x = node.needs_input_grad(0), need_w = node.needs_input_grad(1),
               need_b = node.needs_input_grad(2), need_r = has_residual && node.needs_input_grad(3);
    if (layout.numel() == 0) {
      if (need_x) result[0] = zeros(x_shape, TensorOptions(x_dtype).with_device(device));
      if (need_w) result[1] = zeros({C}, TensorOptions(w_dtype).with_device(device));
      if (need_b) result[2] = zeros({C}, TensorOptions(b_dtype).with_device(device));
      if (need_r) result[3] = zeros(x_shape, TensorOptions(x_dtype).with_device(device));
      return result;
    }
    if (autograd::grad_enabled()) {
      const Tensor xv = saved_input.unpack();
      const int64_t rank = xv.dim();
      Tensor dy = grads[0].dtype() == x_dtype ? grads[0] : grads[0].to(x_dtype);
      if (relu) {
        const Tensor gate = saved_y.unpack().detach();
        dy = mul(dy, gt(gate, zeros_like(gate)).to(x_dtype));
      }
      const Shape dims = batch_norm_dims(rank);
      NormGradTerms t = norm_backward_differentiable(
          xv, dy, channel_broadcast(saved_w.unpack(), rank), dims, eps, training,
          channel_broadcast(mean, rank), channel_broadcast(invstd, rank));
      if (need_x) result[0] = t.dx;
      if (need_r) result[3] = dy;
      if (need_w) result[1] = sum(t.dy_xhat, dims).to(w_dtype);
      if (need_b) result[2] = sum(dy, dims).to(b_dtype);
      return result;
    }
    autograd::NoGradGuard no_grad;
    const Tensor& xs = saved_x.unpack();
    const Tensor& gate = saved_y.unpack();
    Tensor dy = match_layout(grads[0].dtype() == x_dtype ? grads[0] : grads[0].to(x_dtype), layout);
    Tensor sum_dy, sum_dy_xhat;
    if ((training && need_x) || need_w || need_b) {
      sum_dy = empty({C}, stats_dtype, device);
      sum_dy_xhat = empty({C}, stats_dtype, device);
      channel_grad_sums_kernel().get(device.type, x_dtype)(ChannelGradSumsArgs{
          dy, xs, gate, mean, invstd, layout, StatIndex{0, 1}, sum_dy, sum_dy_xhat});
    }
    if (need_x || need_r) {
      Tensor dx =
          need_x ? empty_channel_dense(x_shape, x_dtype, device, layout.channels_inner) : Tensor();
      Tensor dres =
          need_r ? empty_channel_dense(x_shape, x_dtype, device, layout.channels_inner) : Tensor();
      Tensor w = norm_param_for_kernel(saved_w.unpack());
      batch_norm_backward_elemt_kernel().get(device.type, x_dtype)(BatchNormBackwardArgs{
          dx, dres, dy, xs, gate, mean, invstd, w, sum_dy, sum_dy_xhat, layout, training});
      result[0] = dx;
      if (need_r) result[3] = dres;
    }
    if (need_w) result[1] = param_grad(sum_dy_xhat, {C}, w_dtype);
    if (need_b) result[2] = param_grad(sum_dy, {C}, b_dtype);
    return result;
  });
  return y;
}

// ---- row norms (layer norm, group norm) -------------------------------------------------------

// Forward and backward of a row normalization. `param_shape` is the shape of weight and bias;
// `grad_layout` / `grad_stats` describe how the parameter gradients reduce (see StatIndex).
Tensor row_norm_impl(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                     double eps, const RowNormLayout& layout, const Shape& param_shape,
                     const ChannelLayout& grad_layout, const StatIndex& grad_stats) {
  const DType stats_dtype = norm_stats_dtype(x.dtype());
  const Device device = x.device();
  Tensor y, xd, mean, rstd, weight_k;
  {
    autograd::NoGradGuard no_grad;
    xd = x.detach().contiguous();
    weight_k = norm_param_for_kernel(weight);
    Tensor bias_k = norm_param_for_kernel(bias);
    y = empty(x.sizes(), x.dtype(), device);
    mean = empty({layout.rows}, stats_dtype, device);
    rstd = empty({layout.rows}, stats_dtype, device);
    if (x.numel() > 0)
      row_norm_forward_kernel().get(device.type, x.dtype())(
          RowNormForwardArgs{y, mean, rstd, xd, weight_k, bias_k, layout, eps});
  }
  if (!autograd::needs_grad({&x, &weight, &bias})) return y;

  autograd::SavedTensor saved_x(xd, op), saved_w(weight, op);
  autograd::SavedTensor saved_input(x, op);  // with its history, for create_graph backwards
  const Shape x_shape = x.sizes();
  const DType x_dtype = x.dtype();
  const DType w_dtype = weight.defined() ? weight.dtype() : stats_dtype;
  const DType b_dtype = bias.defined() ? bias.dtype() : stats_dtype;
  autograd::record_backward(
      op, {x, weight, bias}, {&y}, [=](const Grads& grads, const autograd::Node& node) {
        Grads result(3);
        const bool need_x = node.needs_input_grad(0), need_w = node.needs_input_grad(1),
                   need_b = node.needs_input_grad(2);
        if (autograd::grad_enabled() && shape_numel(x_shape) > 0) {
          // Rows of D elements: layer norm's weight covers a row (groups == 1, S == 1), group
          // norm's [C] spans groups of S positions per channel.
          const Tensor xv = saved_input.unpack();
          Tensor dy = grads[0].dtype() == x_dtype ? grads[0] : grads[0].to(x_dtype);
          Tensor w = saved_w.unpack();
          const bool per_channel = !(layout.groups == 1 && layout.S == 1);
          Tensor w_b = w.defined() && per_channel ? channel_broadcast(w, xv.dim()) : w;
          if (w_b.defined()) w_b = w_b.expand(x_shape).reshape({layout.rows, layout.D});
          NormGradTerms t = norm_backward_differentiable(xv.reshape({layout.rows, layout.D}),
                                                         dy.reshape({layout.rows, layout.D}), w_b,
                                                         {1}, eps, true, Tensor(), Tensor());
          const Shape param_b =
              per_channel ? channel_broadcast(zeros(param_shape), xv.dim()).sizes() : param_shape;
          if (need_x) result[0] = t.dx.reshape(x_shape);
          if (need_w)
            result[1] = autograd::sum_to(t.dy_xhat.reshape(x_shape), param_b)
                            .reshape(param_shape)
                            .to(w_dtype);
          if (need_b) result[2] = autograd::sum_to(dy, param_b).reshape(param_shape).to(b_dtype);
          return result;
        }
        autograd::NoGradGuard no_grad;
        const bool empty_input = shape_numel(x_shape) == 0;
        Tensor dy = grads[0].dtype() == x_dtype ? grads[0] : grads[0].to(x_dtype);
        dy = dy.contiguous();
        const Tensor& xs = saved_x.unpack();
        const bool need_sums = need_w || need_b;
        Tensor sum_dy, sum_dy_xhat;
        if (need_sums) {
          const int64_t C = grad_layout.C;
          const TensorOptions stats_options = TensorOptions(stats_dtype).with_device(device);
          sum_dy = empty_input ? zeros({C}, stats_options) : empty({C}, stats_options);
          sum_dy_xhat = empty_input ? zeros({C}, stats_options) : empty({C}, stats_options);
        }
        // Layer norm's parameter sums come from the data kernel's pass over dy and x; group
        // norm's (per channel, over samples and positions) from channel_grad_sums.
        const bool sums_in_data_pass = need_x && need_sums && layout.groups == 1 && layout.S == 1;
        if (need_x) {
          Tensor dx = empty(x_shape, x_dtype, device);
          if (!empty_input)
            row_norm_backward_data_kernel().get(device.type, x_dtype)(RowNormBackwardArgs{
                dx, dy, xs, mean, rstd, norm_param_for_kernel(saved_w.unpack()), layout,
                sums_in_data_pass ? sum_dy : Tensor(), sums_in_data_pass ? sum_dy_xhat : Tensor()});
          result[0] = dx;
        }
        if (need_sums) {
          if (!empty_input && !sums_in_data_pass)
            channel_grad_sums_kernel().get(device.type, x_dtype)(ChannelGradSumsArgs{
                dy, xs, Tensor(), mean, rstd, grad_layout, grad_stats, sum_dy, sum_dy_xhat});
          if (need_w) result[1] = param_grad(sum_dy_xhat, param_shape, w_dtype);
          if (need_b) result[2] = param_grad(sum_dy, param_shape, b_dtype);
        }
        return result;
      });
  return y;
}

}  // namespace

// ---- public ops -------------------------------------------------------------------------------

Tensor norm_param_for_kernel(const Tensor& p) {
  if (!p.defined()) return Tensor();
  return p.reshape({p.numel()}).contiguous();
}

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum, double eps) {
  return batch_norm_impl("batch_norm", x, Tensor(), weight, bias, running_mean, running_var,
                         training, momentum, eps, BnTail::none);
}

Tensor batch_norm_relu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       const Tensor& running_mean, const Tensor& running_var, bool training,
                       double momentum, double eps) {
  return batch_norm_impl("batch_norm_relu", x, Tensor(), weight, bias, running_mean, running_var,
                         training, momentum, eps, BnTail::relu);
}

Tensor batch_norm_add_relu(const Tensor& x, const Tensor& residual, const Tensor& weight,
                           const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, bool training, double momentum, double eps) {
  return batch_norm_impl("batch_norm_add_relu", x, residual, weight, bias, running_mean,
                         running_var, training, momentum, eps, BnTail::add_relu);
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  const char* op = "layer_norm";
  check_input(op, x, 1, 64, "[..., *normalized_shape]");
  const int64_t k = int64_t(normalized_shape.size());
  EMBER_CHECK(k >= 1, op, ": normalized_shape is empty; give the trailing dims to normalize over");
  bool matches = x.dim() >= k;
  for (int64_t i = 0; matches && i < k; ++i)
    matches = x.size(x.dim() - k + i) == normalized_shape[size_t(i)];
  EMBER_CHECK(matches, op, ": normalized_shape ", shape_str(normalized_shape),
              " does not match the trailing dims of the input ", x.shape_str(),
              "; it must equal the input's last ", k, " sizes");
  check_param_shape(op, "weight", weight, normalized_shape, x, "normalized_shape");
  check_param_shape(op, "bias", bias, normalized_shape, x, "normalized_shape");
  check_param_dtypes(op, x, {{"weight", &weight}, {"bias", &bias}});
  const int64_t D = shape_numel(normalized_shape);
  int64_t rows = 1;
  for (int64_t d = 0; d < x.dim() - k; ++d) rows *= x.size(d);
  const RowNormLayout layout{rows, D, 1, 1};
  // Parameter gradients: rows are the "batch", features the "channels", one statistic per row.
  const ChannelLayout grad_layout{rows, D, 1, true};
  return row_norm_impl(op, x, weight, bias, eps, layout, normalized_shape, grad_layout,
                       StatIndex{1, std::max<int64_t>(D, 1)});
}

Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias,
                  double eps) {
  const char* op = "group_norm";
  check_input(op, x, 2, 64, "[N, C, *]");
  const int64_t N = x.size(0), C = x.size(1), S = spatial_size(x);
  EMBER_CHECK(groups >= 1, op, ": groups must be >= 1, got ", groups);
  EMBER_CHECK(C % groups == 0, op, ": groups = ", groups, " does not divide the ", C,
              " channels of input ", x.shape_str(), "; choose a divisor of ", C);
  check_param_shape(op, "weight", weight, {C}, x, "one value per channel");
  check_param_shape(op, "bias", bias, {C}, x, "one value per channel");
  check_param_dtypes(op, x, {{"weight", &weight}, {"bias", &bias}});
  const int64_t group_channels = C / groups;
  const RowNormLayout layout{N * groups, group_channels * S, groups, S};
  const ChannelLayout grad_layout{N, C, S, false};
  return row_norm_impl(op, x, weight, bias, eps, layout, {C}, grad_layout,
                       StatIndex{groups, std::max<int64_t>(group_channels, 1)});
}

Tensor instance_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                     const Tensor& running_mean, const Tensor& running_var, bool use_input_stats,
                     double momentum, double eps) {
  const char* op = "instance_norm";
  check_input(op, x, 3, 64, "[N, C, *] with at least one spatial dim");
  const int64_t C = x.size(1);
  check_param_shape(op, "weight", weight, {C}, x, "one value per channel");
  check_param_shape(op, "bias", bias, {C}, x, "one value per channel");
  check_param_shape(op, "running_mean", running_mean, {C}, x, "one value per channel");
  check_param_shape(op, "running_var", running_var, {C}, x, "one value per channel");
  check_param_dtypes(op, x,
                     {{"weight", &weight},
                      {"bias", &bias},
                      {"running_mean", &running_mean},
                      {"running_var", &running_var}});
  check_running_stats(op, running_mean, running_var, !use_input_stats);
  if (!use_input_stats)
    return batch_norm_impl(op, x, Tensor(), weight, bias, running_mean, running_var, false,
                           momentum, eps, BnTail::none);

  const int64_t S = spatial_size(x);
  EMBER_CHECK(x.numel() == 0 || S > 1, op,
              ": expected more than 1 spatial element per instance when using input statistics, "
              "got input of shape ",
              x.shape_str());
  Tensor y = group_norm(x, C, weight, bias, eps);
  if (running_mean.defined() && x.numel() > 0) {
    // running = (1 - momentum) * running + momentum * (batch mean of the per-instance statistic),
    // the per-instance variance unbiased, as PyTorch's instance norm does.
    autograd::NoGradGuard no_grad;
    Shape spatial_dims;
    for (int64_t d = 2; d < x.dim(); ++d) spatial_dims.push_back(d);
    const DType stats_dtype = norm_stats_dtype(x.dtype());
    Tensor xs = x.detach().to(stats_dtype);
    Tensor batch_mean = mean(mean(xs, spatial_dims), {0});
    Tensor batch_var = mean(var(xs, spatial_dims, 1), {0});
    for (auto [running, stat] :
         {std::pair{running_mean, batch_mean}, std::pair{running_var, batch_var}}) {
      Tensor updated = running.to(stats_dtype) * (1.0 - momentum) + stat * momentum;
      running.copy_(updated);
    }
  }
  return y;
}

}  // namespace ember
