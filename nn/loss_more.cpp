// More losses and their modules (see loss_more.h), composed from differentiable ops.
#include "ember/nn/loss_more.h"

#include <cmath>
#include <numbers>
#include <ostream>

#include "ember/nn/amp.h"
#include "ember/nn/functional_more.h"
#include "ember/nn/loss.h"
#include "ember/ops/ops.h"

namespace ember::nn {

namespace {

void check_floating(const char* op, const char* arg, const Tensor& t) {
  EMBER_CHECK(t.defined(), op, ": ", arg, " must be a defined tensor");
  EMBER_CHECK(is_floating(t.dtype()), op, ": ", arg, " must be a floating tensor, got ",
              dtype_name(t.dtype()), " of shape ", t.shape_str());
}

// `t` (named `arg`) must be floating, on input's device and of input's shape.
void check_like(const char* op, const Tensor& input, const char* arg, const Tensor& t) {
  check_floating(op, arg, t);
  EMBER_CHECK(t.sizes() == input.sizes(), op, ": ", arg, " of shape ", t.shape_str(),
              " must have the input's shape ", input.shape_str());
  EMBER_CHECK(t.device() == input.device(), op, ": input is on ", input.device().str(), " but ",
              arg, " on ", t.device().str());
}

// An optional per-class weight: floating, on input's device, of shape [classes].
void check_weight(const char* op, const Tensor& input, const Tensor& w, int64_t classes) {
  if (!w.defined()) return;
  check_floating(op, "weight", w);
  EMBER_CHECK(w.device() == input.device(), op, ": input is on ", input.device().str(),
              " but weight on ", w.device().str());
  EMBER_CHECK(w.dim() == 1 && w.size(0) == classes, op, ": weight of shape ", w.shape_str(),
              " must have one entry per class, [", classes, "], for input ", input.shape_str());
}

// log(sigmoid(x)) without overflow.
Tensor log_sigmoid(const Tensor& x) { return neg(add(relu(neg(x)), log1p(exp(neg(abs(x)))))); }

// t with every entry outside `keep` replaced by 1: a safe argument for log where those entries are
// masked out afterwards (the discarded branch's gradient stays finite).
Tensor safe_where(const Tensor& keep, const Tensor& t) { return where(keep, t, 1.0); }

// log(v) clamped at -100 as PyTorch's binary_cross_entropy; where v == 0 the value is -100 and the
// gradient 0 (log is taken of 1 there, so no 0 * inf). PyTorch's fused backward divides by
// max(x (1 - x), 1e-12) instead, a large finite gradient at the ends.
Tensor clamped_log(const Tensor& v) {
  Tensor pos = gt(v, Scalar(0.0));
  return where(pos, clamp_min(log(safe_where(pos, v)), -100.0), -100.0);
}

}  // namespace

namespace functional {

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target,
                      const SmoothL1LossFuncOptions& options) {
  check_floating("smooth_l1_loss", "input", input);
  check_like("smooth_l1_loss", input, "target", target);
  const double beta = options.beta();
  EMBER_CHECK(beta >= 0, "smooth_l1_loss: beta must be >= 0, got ", beta);
  auto in = autocast_inputs({input, target}, OpClass::fp32);
  Tensor d = abs(sub(in[0], in[1]));
  if (beta == 0) return apply_reduction(d, options.reduction());
  Tensor loss = where(lt(d, Scalar(beta)), mul(square(d), 0.5 / beta), sub(d, 0.5 * beta));
  return apply_reduction(loss, options.reduction());
}

Tensor huber_loss(const Tensor& input, const Tensor& target, const HuberLossFuncOptions& options) {
  check_floating("huber_loss", "input", input);
  check_like("huber_loss", input, "target", target);
  const double delta = options.delta();
  EMBER_CHECK(delta > 0, "huber_loss: delta must be > 0, got ", delta);
  auto in = autocast_inputs({input, target}, OpClass::fp32);
  Tensor d = abs(sub(in[0], in[1]));
  Tensor loss = where(lt(d, Scalar(delta)), mul(square(d), 0.5), mul(sub(d, 0.5 * delta), delta));
  return apply_reduction(loss, options.reduction());
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                            const BinaryCrossEntropyFuncOptions& options) {
  const char* op = "binary_cross_entropy";
  check_floating(op, "input", input);
  check_like(op, input, "target", target);
  if (input.device().is_cpu() && input.numel() > 0) {
    Tensor x = input.detach();
    EMBER_CHECK(!any(logical_or(lt(x, Scalar(0.0)), gt(x, Scalar(1.0)))).item<bool>(), op,
                ": all elements of input (shape ", input.shape_str(),
                ") should be between 0 and 1 (pass probabilities, e.g. sigmoid(logits), or use "
                "binary_cross_entropy_with_logits)");
  }
  auto in = autocast_inputs({input, target, options.weight()}, OpClass::fp32);
  Tensor log_x = clamped_log(in[0]);
  Tensor log_1mx = clamped_log(rsub(in[0], 1.0));
  Tensor loss = neg(add(mul(in[1], log_x), mul(rsub(in[1], 1.0), log_1mx)));
  if (in[2].defined()) {
    EMBER_CHECK(in[2].device() == input.device(), op, ": input is on ", input.device().str(),
                " but weight on ", in[2].device().str());
    loss = mul(loss, in[2]);
    EMBER_CHECK(loss.sizes() == input.sizes(), op, ": weight of shape ", in[2].shape_str(),
                " must broadcast to the input's shape ", input.shape_str());
  }
  return apply_reduction(loss, options.reduction());
}

Tensor kl_div(const Tensor& input, const Tensor& target, const KLDivFuncOptions& options) {
  check_floating("kl_div", "input", input);
  check_like("kl_div", input, "target", target);
  auto in = autocast_inputs({input, target}, OpClass::fp32);
  const Tensor &x = in[0], &t = in[1];
  Tensor loss;
  if (options.log_target()) {
    loss = mul(exp(t), sub(t, x));
  } else {
    Tensor pos = gt(t, Scalar(0.0));
    loss = where(pos, mul(t, sub(log(safe_where(pos, t)), x)), 0.0);
  }
  switch (options.reduction()) {
    case KLDivReduction::none:
      return loss;
    case KLDivReduction::sum:
      return sum(loss);
    case KLDivReduction::mean:
      return mean(loss);
    case KLDivReduction::batchmean:
      return input.dim() == 0 ? sum(loss) : div(sum(loss), double(input.size(0)));
  }
  EMBER_INTERNAL_ASSERT(false, "unknown kl_div reduction");
  return loss;
}

Tensor poisson_nll_loss(const Tensor& input, const Tensor& target,
                        const PoissonNLLLossFuncOptions& options) {
  check_floating("poisson_nll_loss", "input", input);
  check_like("poisson_nll_loss", input, "target", target);
  auto in = autocast_inputs({input, target}, OpClass::fp32);
  const Tensor &x = in[0], &t = in[1];
  Tensor loss =
      options.log_input() ? sub(exp(x), mul(t, x)) : sub(x, mul(t, log(add(x, options.eps()))));
  if (options.full()) {
    Tensor big = gt(t, Scalar(1.0));
    Tensor ts = safe_where(big, t);
    Tensor stirling = add(sub(mul(ts, log(ts)), ts), mul(log(mul(ts, 2 * std::numbers::pi)), 0.5));
    loss = add(loss, where(big, stirling, 0.0));
  }
  return apply_reduction(loss, options.reduction());
}

Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var,
                         const GaussianNLLLossFuncOptions& options) {
  const char* op = "gaussian_nll_loss";
  check_floating(op, "input", input);
  check_like(op, input, "target", target);
  check_floating(op, "var", var);
  EMBER_CHECK(var.device() == input.device(), op, ": input is on ", input.device().str(),
              " but var on ", var.device().str());
  EMBER_CHECK(options.eps() >= 0, op, ": eps must be >= 0, got ", options.eps());
  Tensor v = var;
  if (v.sizes() != input.sizes()) {
    Shape last_dropped = input.sizes();
    if (!last_dropped.empty()) last_dropped.pop_back();
    Shape last_one = input.sizes();
    if (!last_one.empty()) last_one.back() = 1;
    const bool ok = input.dim() > 0 && (v.sizes() == last_one || v.sizes() == last_dropped);
    EMBER_CHECK(ok, op, ": var of shape ", var.shape_str(), " must have the input's shape ",
                input.shape_str(), ", or it with the last dim 1 or dropped");
    if (v.sizes() == last_dropped && v.sizes() != last_one) v = v.unsqueeze(-1);
  }
  if (v.numel() > 0)
    EMBER_CHECK(!any(lt(v.detach(), Scalar(0.0))).item<bool>(), op, ": var (shape ",
                var.shape_str(), ") has negative entries; variances must be >= 0");
  auto in = autocast_inputs({input, target, v}, OpClass::fp32);
  // Clamped at eps with the identity's gradient: v + (max(v, eps) - v) with the bracket detached.
  Tensor vd = in[2].detach();
  Tensor vc = add(in[2], sub(clamp_min(vd, options.eps()), vd));
  Tensor loss = mul(add(log(vc), div(square(sub(in[0], in[1])), vc)), 0.5);
  if (options.full()) loss = add(loss, 0.5 * std::log(2 * std::numbers::pi));
  return apply_reduction(loss, options.reduction());
}

Tensor margin_ranking_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                           const MarginRankingLossFuncOptions& options) {
  const char* op = "margin_ranking_loss";
  check_floating(op, "input1", input1);
  check_like(op, input1, "input2", input2);
  check_like(op, input1, "target", target);
  auto in = autocast_inputs({input1, input2, target}, OpClass::fp32);
  Tensor loss = relu(add(mul(neg(in[2]), sub(in[0], in[1])), options.margin()));
  return apply_reduction(loss, options.reduction());
}

Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target,
                            const HingeEmbeddingLossFuncOptions& options) {
  const char* op = "hinge_embedding_loss";
  check_floating(op, "input", input);
  check_like(op, input, "target", target);
  auto in = autocast_inputs({input, target}, OpClass::fp32);
  Tensor margin_part = where(ne(in[1], Scalar(1.0)), relu(rsub(in[0], options.margin())), 0.0);
  Tensor self_part = where(ne(in[1], Scalar(-1.0)), in[0], 0.0);
  return apply_reduction(add(margin_part, self_part), options.reduction());
}

Tensor multilabel_soft_margin_loss(const Tensor& input, const Tensor& target,
                                   const MultilabelSoftMarginLossFuncOptions& options) {
  const char* op = "multilabel_soft_margin_loss";
  check_floating(op, "input", input);
  check_like(op, input, "target", target);
  EMBER_CHECK(input.dim() == 2 || input.dim() == 1, op, ": input must be [N, C] or [C], got ",
              input.shape_str());
  const int64_t classes = input.size(-1);
  check_weight(op, input, options.weight(), classes);
  auto in = autocast_inputs({input, target, options.weight()}, OpClass::fp32);
  Tensor loss =
      neg(add(mul(in[1], log_sigmoid(in[0])), mul(rsub(in[1], 1.0), log_sigmoid(neg(in[0])))));
  if (in[2].defined()) loss = mul(loss, in[2]);
  loss = div(sum(loss, {-1}), double(classes));
  return apply_reduction(loss, options.reduction());
}

Tensor multi_margin_loss(const Tensor& input, const Tensor& target,
                         const MultiMarginLossFuncOptions& options) {
  const char* op = "multi_margin_loss";
  check_floating(op, "input", input);
  EMBER_CHECK(options.p() == 1 || options.p() == 2, op, ": only p == 1 and p == 2 are supported, ",
              "got ", options.p());
  EMBER_CHECK(input.dim() == 2 || input.dim() == 1, op, ": input must be [N, C] or [C], got ",
              input.shape_str());
  EMBER_CHECK(target.defined() && (target.dtype() == DType::i64 || target.dtype() == DType::i32),
              op, ": target must be an int64 (or int32) tensor of class indices");
  EMBER_CHECK(target.device() == input.device(), op, ": input is on ", input.device().str(),
              " but target on ", target.device().str());
  const bool batched = input.dim() == 2;
  Tensor x = batched ? input : input.unsqueeze(0);
  const int64_t n = x.size(0), classes = x.size(1);
  EMBER_CHECK(target.numel() == n && target.dim() <= 1 && (batched ? target.dim() == 1 : true), op,
              ": target of shape ", target.shape_str(), " must hold one class per sample of input ",
              input.shape_str(), (batched ? " ([N])" : " ([] or [1])"));
  check_weight(op, input, options.weight(), classes);
  Tensor y = target.to(DType::i64).reshape({n, 1});
  if (y.numel() > 0 && y.device().is_cpu()) {
    EMBER_CHECK(!any(logical_or(lt(y, Scalar(0)), ge(y, Scalar(classes)))).item<bool>(), op,
                ": target values must be class indices in [0, ", classes, ") for input ",
                input.shape_str());
  }
  auto in = autocast_inputs({x, options.weight()}, OpClass::fp32);
  x = in[0];
  Tensor x_y = gather(x, 1, y);                         // [N, 1]
  Tensor z = relu(add(sub(x, x_y), options.margin()));  // [N, C]
  if (options.p() == 2) z = square(z);
  if (in[1].defined()) z = mul(z, index_select(in[1], 0, y.reshape({n})).unsqueeze(1));
  Tensor not_target = ne(
      arange(double(classes), TensorOptions(DType::i64).with_device(x.device())).unsqueeze(0), y);
  z = where(not_target, z, 0.0);
  Tensor loss = div(sum(z, {1}), double(classes));  // [N]
  if (!batched) loss = loss.reshape({});
  return apply_reduction(loss, options.reduction());
}

Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                             const CosineEmbeddingLossFuncOptions& options) {
  const char* op = "cosine_embedding_loss";
  check_floating(op, "input1", input1);
  check_like(op, input1, "input2", input2);
  EMBER_CHECK(input1.dim() == 1 || input1.dim() == 2, op, ": inputs must be [N, D] or [D], got ",
              input1.shape_str());
  check_floating(op, "target", target);
  const Shape expected = input1.dim() == 2 ? Shape{input1.size(0)} : Shape{};
  EMBER_CHECK(target.sizes() == expected && target.device() == input1.device(), op,
              ": target of shape ", target.shape_str(), " must be ",
              input1.dim() == 2 ? "[N]" : "0-dim", " for inputs ", input1.shape_str(),
              " (on their device)");
  auto in = autocast_inputs({input1, input2, target}, OpClass::fp32);
  constexpr double kEps = 1e-12;
  Tensor prod = sum(mul(in[0], in[1]), {-1});
  Tensor m1 = add(sum(square(in[0]), {-1}), kEps);
  Tensor m2 = add(sum(square(in[1]), {-1}), kEps);
  Tensor cos = div(prod, sqrt(mul(m1, m2)));
  Tensor pos = where(eq(in[2], Scalar(1.0)), rsub(cos, 1.0), 0.0);
  Tensor negative = where(eq(in[2], Scalar(-1.0)), relu(sub(cos, options.margin())), 0.0);
  return apply_reduction(add(pos, negative), options.reduction());
}

Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           const TripletMarginLossFuncOptions& options) {
  const char* op = "triplet_margin_loss";
  check_floating(op, "anchor", anchor);
  check_like(op, anchor, "positive", positive);
  check_like(op, anchor, "negative", negative);
  EMBER_CHECK(anchor.dim() == 1 || anchor.dim() == 2, op,
              ": anchor, positive and negative must be [N, D] or [D], got ", anchor.shape_str());
  auto in = autocast_inputs({anchor, positive, negative}, OpClass::fp32);
  auto dist_options = PairwiseDistanceFuncOptions().p(options.p()).eps(options.eps());
  Tensor d_pos = pairwise_distance(in[0], in[1], dist_options);
  Tensor d_neg = pairwise_distance(in[0], in[2], dist_options);
  if (options.swap()) d_neg = minimum(d_neg, pairwise_distance(in[1], in[2], dist_options));
  Tensor loss = relu(add(sub(d_pos, d_neg), options.margin()));
  return apply_reduction(loss, options.reduction());
}

}  // namespace functional

namespace F = functional;

Tensor SmoothL1LossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::smooth_l1_loss(input, target, options);
}
void SmoothL1LossImpl::pretty_print(std::ostream& os) const {
  os << "SmoothL1Loss(reduction=" << reduction_name(options.reduction())
     << ", beta=" << detail::float_str(options.beta()) << ")";
}
Tensor HuberLossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::huber_loss(input, target, options);
}
void HuberLossImpl::pretty_print(std::ostream& os) const {
  os << "HuberLoss(reduction=" << reduction_name(options.reduction())
     << ", delta=" << detail::float_str(options.delta()) << ")";
}
Tensor KLDivLossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::kl_div(input, target, options);
}
void KLDivLossImpl::pretty_print(std::ostream& os) const {
  static const char* names[] = {"none", "batchmean", "sum", "mean"};
  os << "KLDivLoss(reduction=" << names[int(options.reduction())]
     << ", log_target=" << detail::bool_str(options.log_target()) << ")";
}
Tensor PoissonNLLLossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::poisson_nll_loss(input, target, options);
}
void PoissonNLLLossImpl::pretty_print(std::ostream& os) const {
  os << "PoissonNLLLoss(log_input=" << detail::bool_str(options.log_input())
     << ", full=" << detail::bool_str(options.full())
     << ", eps=" << detail::float_str(options.eps())
     << ", reduction=" << reduction_name(options.reduction()) << ")";
}
Tensor HingeEmbeddingLossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::hinge_embedding_loss(input, target, options);
}
void HingeEmbeddingLossImpl::pretty_print(std::ostream& os) const {
  os << "HingeEmbeddingLoss(margin=" << detail::float_str(options.margin())
     << ", reduction=" << reduction_name(options.reduction()) << ")";
}

BCELossImpl::BCELossImpl(const BCELossOptions& options_) : Module("BCELoss"), options(options_) {
  if (options.weight().defined()) weight = register_buffer("weight", options.weight());
}
Tensor BCELossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::binary_cross_entropy(input, target, BCELossOptions(options).weight(weight));
}
void BCELossImpl::pretty_print(std::ostream& os) const {
  os << "BCELoss(reduction=" << reduction_name(options.reduction()) << ")";
}
MultiLabelSoftMarginLossImpl::MultiLabelSoftMarginLossImpl(
    const MultiLabelSoftMarginLossOptions& options_)
    : Module("MultiLabelSoftMarginLoss"), options(options_) {
  if (options.weight().defined()) weight = register_buffer("weight", options.weight());
}
Tensor MultiLabelSoftMarginLossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::multilabel_soft_margin_loss(input, target,
                                        MultiLabelSoftMarginLossOptions(options).weight(weight));
}
void MultiLabelSoftMarginLossImpl::pretty_print(std::ostream& os) const {
  os << "MultiLabelSoftMarginLoss(reduction=" << reduction_name(options.reduction()) << ")";
}
MultiMarginLossImpl::MultiMarginLossImpl(const MultiMarginLossOptions& options_)
    : Module("MultiMarginLoss"), options(options_) {
  EMBER_CHECK(options.p() == 1 || options.p() == 2,
              "MultiMarginLoss: only p == 1 and p == 2 are supported, got ", options.p());
  if (options.weight().defined()) weight = register_buffer("weight", options.weight());
}
Tensor MultiMarginLossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::multi_margin_loss(input, target, MultiMarginLossOptions(options).weight(weight));
}
void MultiMarginLossImpl::pretty_print(std::ostream& os) const {
  os << "MultiMarginLoss(p=" << options.p() << ", margin=" << detail::float_str(options.margin())
     << ", reduction=" << reduction_name(options.reduction()) << ")";
}

Tensor GaussianNLLLossImpl::forward(const Tensor& input, const Tensor& target, const Tensor& var) {
  return F::gaussian_nll_loss(input, target, var, options);
}
void GaussianNLLLossImpl::pretty_print(std::ostream& os) const {
  os << "GaussianNLLLoss(full=" << detail::bool_str(options.full())
     << ", eps=" << detail::float_str(options.eps())
     << ", reduction=" << reduction_name(options.reduction()) << ")";
}
Tensor MarginRankingLossImpl::forward(const Tensor& input1, const Tensor& input2,
                                      const Tensor& target) {
  return F::margin_ranking_loss(input1, input2, target, options);
}
void MarginRankingLossImpl::pretty_print(std::ostream& os) const {
  os << "MarginRankingLoss(margin=" << detail::float_str(options.margin())
     << ", reduction=" << reduction_name(options.reduction()) << ")";
}
Tensor CosineEmbeddingLossImpl::forward(const Tensor& input1, const Tensor& input2,
                                        const Tensor& target) {
  return F::cosine_embedding_loss(input1, input2, target, options);
}
void CosineEmbeddingLossImpl::pretty_print(std::ostream& os) const {
  os << "CosineEmbeddingLoss(margin=" << detail::float_str(options.margin())
     << ", reduction=" << reduction_name(options.reduction()) << ")";
}
Tensor TripletMarginLossImpl::forward(const Tensor& anchor, const Tensor& positive,
                                      const Tensor& negative) {
  return F::triplet_margin_loss(anchor, positive, negative, options);
}
void TripletMarginLossImpl::pretty_print(std::ostream& os) const {
  os << "TripletMarginLoss(margin=" << detail::float_str(options.margin())
     << ", p=" << detail::float_str(options.p()) << ", eps=" << detail::float_str(options.eps())
     << ", swap=" << detail::bool_str(options.swap())
     << ", reduction=" << reduction_name(options.reduction()) << ")";
}

}  // namespace ember::nn
