// InstanceNorm1d/2d/3d, BatchNorm3d and RMSNorm (see norm_more.h).
#include "ember/nn/norm_more.h"

#include <ostream>

#include "ember/nn/init.h"
#include "ember/ops/norm.h"
#include "ember/ops/norm_more.h"

namespace ember::nn {

// ---- InstanceNorm ------------------------------------------------------------------------------

InstanceNormImplBase::InstanceNormImplBase(const char* name, int64_t spatial_dims,
                                           const InstanceNormOptions& options_)
    : Module(name), options(options_), spatial_dims_(spatial_dims) {
  const int64_t c = options.num_features();
  EMBER_CHECK(c > 0, name, ": num_features must be positive, got ", c);
  EMBER_CHECK(options.eps() > 0, name, ": eps must be positive, got ", options.eps());
  EMBER_CHECK(options.momentum() >= 0 && options.momentum() <= 1, name,
              ": momentum must be in [0, 1], got ", options.momentum());
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

void InstanceNormImplBase::reset_running_stats() {
  if (!options.track_running_stats()) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  init::zeros_(num_batches_tracked);
}

void InstanceNormImplBase::reset_parameters() {
  reset_running_stats();
  if (options.affine()) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

Tensor InstanceNormImplBase::forward(const Tensor& x) {
  const int64_t k = spatial_dims_;
  EMBER_CHECK(x.defined() && (x.dim() == k + 1 || x.dim() == k + 2), type_name(), ": expected a ",
              k + 1, "-d (unbatched) or ", k + 2, "-d input, got ",
              x.defined() ? x.shape_str() : std::string("undefined"));
  const bool batched = x.dim() == k + 2;
  const int64_t c = x.size(batched ? 1 : 0);
  // Without parameters or running statistics the layer works for any channel count (PyTorch
  // only warns then).
  EMBER_CHECK(c == options.num_features() || !(options.affine() || options.track_running_stats()),
              type_name(), ": expected input's size at dim ", batched ? 1 : 0,
              " to match num_features (", options.num_features(), "), but got input of shape ",
              x.shape_str());
  const Tensor xb = batched ? x : x.unsqueeze(0);
  const bool use_input_stats = is_training() || !options.track_running_stats();
  Tensor y = instance_norm(xb, weight, bias, running_mean, running_var, use_input_stats,
                           options.momentum(), options.eps());
  return batched ? y : y.squeeze(0);
}

void InstanceNormImplBase::pretty_print(std::ostream& os) const {
  os << type_name() << "(" << options.num_features() << ", eps=" << detail::float_str(options.eps())
     << ", momentum=" << detail::float_str(options.momentum())
     << ", affine=" << detail::bool_str(options.affine())
     << ", track_running_stats=" << detail::bool_str(options.track_running_stats()) << ")";
}

// ---- BatchNorm3d -------------------------------------------------------------------------------

void BatchNorm3dImpl::check_input_dim(const Tensor& x) const {
  EMBER_CHECK(x.dim() == 5, "BatchNorm3d: expected a 5-D [N, C, D, H, W] input, got ",
              x.shape_str());
}

// ---- RMSNorm -----------------------------------------------------------------------------------

RMSNormImpl::RMSNormImpl(const RMSNormOptions& options_) : Module("RMSNorm"), options(options_) {
  EMBER_CHECK(!options.normalized_shape().empty(), "RMSNorm: normalized_shape must not be empty");
  for (int64_t s : options.normalized_shape())
    EMBER_CHECK(s > 0, "RMSNorm: normalized_shape ", shape_str(options.normalized_shape()),
                " must have positive sizes");
  if (options.eps()) EMBER_CHECK(*options.eps() >= 0, "RMSNorm: eps must be >= 0");
  if (options.elementwise_affine())
    weight = register_parameter("weight", empty(options.normalized_shape()));
  reset_parameters();
}

void RMSNormImpl::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
}

Tensor RMSNormImpl::forward(const Tensor& x) {
  return rms_norm(x, options.normalized_shape(), weight, options.eps());
}

void RMSNormImpl::pretty_print(std::ostream& os) const {
  os << "RMSNorm(" << shape_str(options.normalized_shape()) << ", eps=";
  if (options.eps())
    os << detail::float_str(*options.eps());
  else
    os << "None";
  os << ", elementwise_affine=" << detail::bool_str(options.elementwise_affine()) << ")";
}

}  // namespace ember::nn
