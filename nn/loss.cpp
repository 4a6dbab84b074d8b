// Losses and their module forms (see loss.h).
#include "ember/nn/loss.h"

#include <ostream>

#include "ember/autograd/autograd.h"
#include "ember/nn/amp.h"

namespace ember::nn {

const char* reduction_name(LossReduction r) {
  switch (r) {
    case LossReduction::none:
      return "none";
    case LossReduction::mean:
      return "mean";
    case LossReduction::sum:
      return "sum";
  }
  return "?";
}

Tensor apply_reduction(const Tensor& loss, LossReduction r) {
  switch (r) {
    case LossReduction::none:
      return loss;
    case LossReduction::mean:
      return mean(loss);
    case LossReduction::sum:
      return sum(loss);
  }
  EMBER_INTERNAL_ASSERT(false, "unknown reduction");
  return loss;
}

namespace {

void check_pair(const char* op, const Tensor& input, const Tensor& target) {
  EMBER_CHECK(input.defined() && target.defined(), op,
              ": input and target must be defined tensors");
  EMBER_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()), op,
              ": input and target must be floating tensors, got ", dtype_name(input.dtype()),
              " and ", dtype_name(target.dtype()));
  EMBER_CHECK(input.sizes() == target.sizes(), op, ": target of shape ", target.shape_str(),
              " must have the input's shape ", input.shape_str());
  EMBER_CHECK(input.device() == target.device(), op, ": input is on ", input.device().str(),
              " but target on ", target.device().str());
}

// softplus(-x) = log(1 + exp(-x)) without overflow: max(-x, 0) + log(1 + exp(-|x|)).
Tensor softplus_neg(const Tensor& x) { return add(relu(neg(x)), log(add(exp(neg(abs(x))), 1.0))); }

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const CrossEntropyOptions& options) {
  CrossEntropyOptions o = options;
  o.weight = autocast_input(options.weight, OpClass::fp32);
  return ::ember::cross_entropy(autocast_input(logits, OpClass::fp32), target, o);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options) {
  NllLossOptions o = options;
  o.weight = autocast_input(options.weight, OpClass::fp32);
  return ::ember::nll_loss(autocast_input(log_probs, OpClass::fp32), target, o);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, LossReduction reduction) {
  check_pair("mse_loss", input, target);
  auto in = autocast_inputs({input, target}, OpClass::fp32);
  return apply_reduction(square(sub(in[0], in[1])), reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, LossReduction reduction) {
  check_pair("l1_loss", input, target);
  auto in = autocast_inputs({input, target}, OpClass::fp32);
  return apply_reduction(abs(sub(in[0], in[1])), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BCEWithLogitsOptions& options) {
  constexpr const char* op = "binary_cross_entropy_with_logits";
  check_pair(op, input, target);
  for (const Tensor* w : {&options.weight, &options.pos_weight}) {
    if (!w->defined()) continue;
    EMBER_CHECK(is_floating(w->dtype()) && w->device() == input.device(), op,
                ": weight and pos_weight must be floating tensors on the input's device");
    EMBER_CHECK(!(autograd::grad_enabled() && w->requires_grad()), op,
                ": no gradient is defined for weight or pos_weight; pass them detached");
  }
  if (options.pos_weight.defined())
    EMBER_CHECK(
        options.pos_weight.dim() <= input.dim() &&
            (options.pos_weight.dim() == 0 || options.pos_weight.size(-1) == input.size(-1) ||
             options.pos_weight.size(-1) == 1),
        op, ": pos_weight of shape ", options.pos_weight.shape_str(),
        " must broadcast along the last dim of the input ", input.shape_str());
  auto in = autocast_inputs({input, target, options.weight, options.pos_weight}, OpClass::fp32);
  const Tensor &x = in[0], &y = in[1], &w = in[2], &pw = in[3];

  // Forward without recording: the backward below is the closed form, which (unlike autograd
  // through |x| and max(-x, 0)) is exact where x == 0.
  Tensor loss;
  {
    autograd::NoGradGuard no_grad;
    Tensor sp = softplus_neg(x);
    Tensor log_weight = pw.defined() ? add(mul(sub(pw, 1.0), y), 1.0) : Tensor();
    loss = add(mul(rsub(y, 1.0), x), log_weight.defined() ? mul(log_weight, sp) : sp);
    if (w.defined()) loss = mul(loss, w);
    EMBER_CHECK(loss.sizes() == x.sizes(), op, ": weight ",
                w.defined() ? w.shape_str() : std::string("-"), " and pos_weight ",
                pw.defined() ? pw.shape_str() : std::string("-"),
                " must broadcast to the input's shape ", x.shape_str());
    if (loss.dtype() != x.dtype()) loss = loss.to(x.dtype());
  }
  if (autograd::needs_grad({&x, &y})) {
    autograd::SavedTensor sx(x, op), sy(y, op), sw(w, op), spw(pw, op);
    autograd::record_backward(
        op, {x, y}, {&loss},
        [sx, sy, sw, spw, xdt = x.dtype(), ydt = y.dtype()](const std::vector<Tensor>& g,
                                                            const autograd::Node& node) {
          const Tensor &xv = sx.unpack(), &yv = sy.unpack(), &wv = sw.unpack(), &pwv = spw.unpack();
          Tensor scale = wv.defined() ? mul(g[0], wv) : g[0];
          std::vector<Tensor> r(2);
          if (node.needs_input_grad(0)) {
            // sigmoid(x) * (1 + (p - 1) y) - p y; with p = 1: sigmoid(x) - y.
            Tensor dx = pwv.defined()
                            ? sub(mul(sigmoid(xv), add(mul(sub(pwv, 1.0), yv), 1.0)), mul(pwv, yv))
                            : sub(sigmoid(xv), yv);
            r[0] = mul(scale, dx);
            if (r[0].dtype() != xdt) r[0] = r[0].to(xdt);
          }
          if (node.needs_input_grad(1)) {
            // (p - 1) softplus(-x) - x; with p = 1: -x.
            Tensor dy = pwv.defined() ? sub(mul(sub(pwv, 1.0), softplus_neg(xv)), xv) : neg(xv);
            r[1] = mul(scale, dy);
            if (r[1].dtype() != ydt) r[1] = r[1].to(ydt);
          }
          return r;
        });
  }
  return apply_reduction(loss, options.reduction);
}

// ---- modules ----------------------------------------------------------------------------------

CrossEntropyLossImpl::CrossEntropyLossImpl(const CrossEntropyLossOptions& options_)
    : Module("CrossEntropyLoss"), options(options_) {
  if (options.weight().defined()) weight = register_buffer("weight", options.weight());
}

Tensor CrossEntropyLossImpl::forward(const Tensor& logits, const Tensor& target) {
  return nn::cross_entropy(logits, target,
                           CrossEntropyOptions()
                               .with_weight(weight)
                               .with_ignore_index(options.ignore_index())
                               .with_label_smoothing(options.label_smoothing())
                               .with_reduction(options.reduction()));
}

void CrossEntropyLossImpl::pretty_print(std::ostream& os) const {
  os << "CrossEntropyLoss(ignore_index=" << options.ignore_index()
     << ", label_smoothing=" << detail::float_str(options.label_smoothing())
     << ", reduction=" << reduction_name(options.reduction()) << ")";
}

NLLLossImpl::NLLLossImpl(const NLLLossOptions& options_) : Module("NLLLoss"), options(options_) {
  if (options.weight().defined()) weight = register_buffer("weight", options.weight());
}

Tensor NLLLossImpl::forward(const Tensor& log_probs, const Tensor& target) {
  return nn::nll_loss(log_probs, target,
                      NllLossOptions()
                          .with_weight(weight)
                          .with_ignore_index(options.ignore_index())
                          .with_reduction(options.reduction()));
}

void NLLLossImpl::pretty_print(std::ostream& os) const {
  os << "NLLLoss(ignore_index=" << options.ignore_index()
     << ", reduction=" << reduction_name(options.reduction()) << ")";
}

void MSELossImpl::pretty_print(std::ostream& os) const {
  os << "MSELoss(reduction=" << reduction_name(options.reduction()) << ")";
}

void L1LossImpl::pretty_print(std::ostream& os) const {
  os << "L1Loss(reduction=" << reduction_name(options.reduction()) << ")";
}

BCEWithLogitsLossImpl::BCEWithLogitsLossImpl(const BCEWithLogitsLossOptions& options_)
    : Module("BCEWithLogitsLoss"), options(options_) {
  if (options.weight().defined()) weight = register_buffer("weight", options.weight());
  if (options.pos_weight().defined())
    pos_weight = register_buffer("pos_weight", options.pos_weight());
}

Tensor BCEWithLogitsLossImpl::forward(const Tensor& input, const Tensor& target) {
  return binary_cross_entropy_with_logits(input, target,
                                          BCEWithLogitsOptions()
                                              .with_weight(weight)
                                              .with_pos_weight(pos_weight)
                                              .with_reduction(options.reduction()));
}

void BCEWithLogitsLossImpl::pretty_print(std::ostream& os) const {
  os << "BCEWithLogitsLoss(reduction=" << reduction_name(options.reduction()) << ")";
}

}  // namespace ember::nn
