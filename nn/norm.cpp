// BatchNorm1d/2d, LayerNorm and GroupNorm (see norm.h).
#include "ember/nn/norm.h"

#include <ostream>

#include "ember/autograd/graph/grad_mode.h"
#include "ember/nn/amp.h"
#include "ember/nn/init.h"
#include "ember/ops/norm.h"

namespace ember::nn {

// ---- BatchNorm ---------------------------------------------------------------------------------

BatchNormImplBase::BatchNormImplBase(const char* name, const BatchNormOptions& options_)
    : Module(name), options(options_) {
  const int64_t c = options.num_features();
  EMBER_CHECK(c > 0, name, ": num_features must be positive, got ", c);
  EMBER_CHECK(options.eps() > 0, name, ": eps must be positive, got ", options.eps());
  if (options.momentum())
    EMBER_CHECK(*options.momentum() >= 0 && *options.momentum() <= 1, name,
                ": momentum must be in [0, 1], got ", *options.momentum());
  if (options.affine()) {
    weight = register_parameter("weight", empty({c}));
    bias = register_parameter("bias", empty({c}));
  }
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", empty({c}));
    running_var = register_buffer("running_var", empty({c}));
    num_batches_tracked =
        register_buffer("num_batches_tracked", zeros({}, TensorOptions(DType::i64)));
  }
  reset_parameters();
}

void BatchNormImplBase::reset_running_stats() {
  if (!options.track_running_stats()) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  init::zeros_(num_batches_tracked);
}

void BatchNormImplBase::reset_parameters() {
  reset_running_stats();
  if (options.affine()) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

Tensor BatchNormImplBase::run(const Tensor& x, const Tensor& residual, Tail tail) {
  EMBER_CHECK(x.defined(), type_name(), ": the input is undefined");
  check_input_dim(x);
  EMBER_CHECK(x.size(1) == options.num_features(), type_name(), ": expected ",
              options.num_features(), " channels (dim 1) but the input has shape ", x.shape_str());
  double factor = options.momentum().value_or(0.0);
  if (is_training() && options.track_running_stats()) {
    autograd::NoGradGuard no_grad;
    add_(num_batches_tracked, 1.0);
    // A cumulative average needs the count on the host (a sync on CUDA); the default momentum
    // never reads it.
    if (!options.momentum()) factor = 1.0 / num_batches_tracked.item();
  }
  // Eval with tracked statistics normalizes with them; otherwise with the batch's.
  const bool use_batch_stats = is_training() || !options.track_running_stats();
  const bool update_running = is_training() && options.track_running_stats();
  Tensor rm = update_running || !use_batch_stats ? running_mean : Tensor();
  Tensor rv = update_running || !use_batch_stats ? running_var : Tensor();
  if (is_training() && training_forward)
    return training_forward(x, residual, weight, bias, rm, rv, tail != Tail::none, factor,
                            options.eps());
  switch (tail) {
    case Tail::none:
      return batch_norm(x, weight, bias, rm, rv, use_batch_stats, factor, options.eps());
    case Tail::relu:
      return batch_norm_relu(x, weight, bias, rm, rv, use_batch_stats, factor, options.eps());
    case Tail::add_relu:
      return batch_norm_add_relu(x, residual, weight, bias, rm, rv, use_batch_stats, factor,
                                 options.eps());
  }
  EMBER_INTERNAL_ASSERT(false, "unknown batch norm tail");
  return Tensor();
}

Tensor BatchNormImplBase::forward(const Tensor& x) { return run(x, Tensor(), Tail::none); }
Tensor BatchNormImplBase::forward_relu(const Tensor& x) { return run(x, Tensor(), Tail::relu); }
Tensor BatchNormImplBase::forward_add_relu(const Tensor& x, const Tensor& residual) {
  return run(x, residual, Tail::add_relu);
}

void BatchNormImplBase::pretty_print(std::ostream& os) const {
  os << type_name() << "(" << options.num_features() << ", eps=" << detail::float_str(options.eps())
     << ", momentum=";
  if (options.momentum())
    os << detail::float_str(*options.momentum());
  else
    os << "None";
  os << ", affine=" << detail::bool_str(options.affine())
     << ", track_running_stats=" << detail::bool_str(options.track_running_stats()) << ")";
}

void BatchNorm1dImpl::check_input_dim(const Tensor& x) const {
  EMBER_CHECK(x.dim() == 2 || x.dim() == 3,
              "BatchNorm1d: expected a 2-D [N, C] or 3-D [N, C, L] input, got ", x.shape_str());
}

void BatchNorm2dImpl::check_input_dim(const Tensor& x) const {
  EMBER_CHECK(x.dim() == 4, "BatchNorm2d: expected a 4-D [N, C, H, W] input, got ", x.shape_str());
}

// ---- LayerNorm ---------------------------------------------------------------------------------

LayerNormImpl::LayerNormImpl(const LayerNormOptions& options_)
    : Module("LayerNorm"), options(options_) {
  EMBER_CHECK(!options.normalized_shape().empty(), "LayerNorm: normalized_shape must not be empty");
  for (int64_t s : options.normalized_shape())
    EMBER_CHECK(s > 0, "LayerNorm: normalized_shape ", shape_str(options.normalized_shape()),
                " must have positive sizes");
  if (options.elementwise_affine()) {
    weight = register_parameter("weight", empty(options.normalized_shape()));
    if (options.bias()) bias = register_parameter("bias", empty(options.normalized_shape()));
  }
  reset_parameters();
}

void LayerNormImpl::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNormImpl::forward(const Tensor& x) {
  auto in = autocast_inputs({x, weight, bias}, OpClass::fp32);
  return layer_norm(in[0], options.normalized_shape(), in[1], in[2], options.eps());
}

void LayerNormImpl::pretty_print(std::ostream& os) const {
  os << "LayerNorm(" << shape_str(options.normalized_shape())
     << ", eps=" << detail::float_str(options.eps())
     << ", elementwise_affine=" << detail::bool_str(options.elementwise_affine());
  if (options.elementwise_affine() && !options.bias()) os << ", bias=false";
  os << ")";
}

// ---- GroupNorm ---------------------------------------------------------------------------------

GroupNormImpl::GroupNormImpl(const GroupNormOptions& options_)
    : Module("GroupNorm"), options(options_) {
  EMBER_CHECK(options.num_groups() > 0 && options.num_channels() > 0 &&
                  options.num_channels() % options.num_groups() == 0,
              "GroupNorm: num_channels (", options.num_channels(),
              ") must be a positive multiple of num_groups (", options.num_groups(), ")");
  if (options.affine()) {
    weight = register_parameter("weight", empty({options.num_channels()}));
    bias = register_parameter("bias", empty({options.num_channels()}));
  }
  reset_parameters();
}

void GroupNormImpl::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor GroupNormImpl::forward(const Tensor& x) {
  EMBER_CHECK(x.defined() && x.dim() >= 2 && x.size(1) == options.num_channels(),
              "GroupNorm: expected an input ", "[N, ", options.num_channels(), ", *], got ",
              x.defined() ? x.shape_str() : std::string("undefined"));
  auto in = autocast_inputs({x, weight, bias}, OpClass::fp32);
  return group_norm(in[0], options.num_groups(), in[1], in[2], options.eps());
}

void GroupNormImpl::pretty_print(std::ostream& os) const {
  os << "GroupNorm(" << options.num_groups() << ", " << options.num_channels()
     << ", eps=" << detail::float_str(options.eps())
     << ", affine=" << detail::bool_str(options.affine()) << ")";
}

}  // namespace ember::nn
