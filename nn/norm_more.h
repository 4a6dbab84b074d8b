// More normalization layers, as torch.nn's: InstanceNorm1d/2d/3d, BatchNorm3d and RMSNorm
// (PyTorch 2.4), on the ops of ops/norm.h and ops/norm_more.h. State dict names are PyTorch's:
// weight, bias, running_mean, running_var, num_batches_tracked.
#pragma once
#include <optional>
#include <vector>

#include "ember/nn/module.h"
#include "ember/nn/norm.h"
#include "ember/nn/options.h"

namespace ember::nn {

// ---- InstanceNorm ------------------------------------------------------------------------------

// The options of InstanceNorm1d/2d/3d, as torch.nn.InstanceNormNd's arguments (their defaults
// differ from BatchNorm's: no affine parameters and no running statistics).
struct InstanceNormOptions {
  // Implicit from C, so `InstanceNorm2d(64)` works.
  /* implicit */ InstanceNormOptions(int64_t num_features)  // NOLINT
      : num_features_(num_features) {}
  EMBER_ARG(int64_t, num_features);   // C, the channel dim of the input; > 0
  EMBER_ARG(double, eps) = 1e-5;      // added to the variance before its square root; > 0
  EMBER_ARG(double, momentum) = 0.1;  // the running statistics' update factor, in [0, 1]
  EMBER_ARG(bool, affine) = false;    // whether to learn weight and bias per channel
  // Whether to keep running_mean / running_var (updated in training with the batch mean of the
  // per-instance statistics, used to normalize in eval).
  EMBER_ARG(bool, track_running_stats) = false;
};

// The shared implementation of InstanceNorm1d/2d/3d: statistics per (sample, channel) over the
// spatial dims. Parameters weight [C] = 1, bias [C] = 0 (affine); buffers running_mean [C] = 0,
// running_var [C] = 1, num_batches_tracked = 0 (track_running_stats; PyTorch registers the count
// but its instance norm never advances it, and neither does this one).
class InstanceNormImplBase : public Module {
 public:
  // Checks the options and registers the parameters and buffers; name is the type name and
  // spatial_dims the rank it normalizes (1 for InstanceNorm1d).
  InstanceNormImplBase(const char* name, int64_t spatial_dims, const InstanceNormOptions& options);
  // running_mean = 0, running_var = 1, num_batches_tracked = 0 (when tracked).
  void reset_running_stats();
  // reset_running_stats(), then weight = 1 and bias = 0 (when affine).
  void reset_parameters();
  // x [N, C, *spatial] or unbatched [C, *spatial] -> the same shape. Input statistics in training
  // or without running statistics; the running statistics in eval when tracked.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  InstanceNormOptions options;  // the options it was built with
  Tensor weight;                // parameter [C] (undefined without affine)
  Tensor bias;                  // parameter [C] (undefined without affine)
  Tensor running_mean;          // buffer [C] (undefined without track_running_stats)
  Tensor running_var;           // buffer [C] (undefined without track_running_stats)
  Tensor num_batches_tracked;   // buffer, int64 0-d (undefined without track_running_stats)

 private:
  int64_t spatial_dims_;
};

// Declares `Name##Impl` (an InstanceNormImplBase of `rank` spatial dims) and its holder `Name`.
#define EMBER_INSTANCE_NORM_LAYER(Name, rank)               \
  class Name##Impl : public InstanceNormImplBase {          \
   public:                                                  \
    EMBER_CLONEABLE(Name##Impl);                            \
    explicit Name##Impl(const InstanceNormOptions& options) \
        : InstanceNormImplBase(#Name, rank, options) {}     \
  };                                                        \
  EMBER_MODULE(Name)

EMBER_INSTANCE_NORM_LAYER(InstanceNorm1d, 1);  // x [N, C, L] or [C, L]
EMBER_INSTANCE_NORM_LAYER(InstanceNorm2d, 2);  // x [N, C, H, W] or [C, H, W]
EMBER_INSTANCE_NORM_LAYER(InstanceNorm3d, 3);  // x [N, C, D, H, W] or [C, D, H, W]

#undef EMBER_INSTANCE_NORM_LAYER

// ---- BatchNorm3d -------------------------------------------------------------------------------

// BatchNorm over x [N, C, D, H, W], as torch.nn.BatchNorm3d (see BatchNormImplBase in norm.h).
class BatchNorm3dImpl : public BatchNormImplBase {
 public:
  std::shared_ptr<Module> clone_instance() const override {
    return clone_keeping_training_forward<BatchNorm3dImpl>();
  }
  // From options or from num_features alone (`BatchNorm3d(16)`).
  explicit BatchNorm3dImpl(const BatchNormOptions& options)
      : BatchNormImplBase("BatchNorm3d", options) {}

 protected:
  void check_input_dim(const Tensor& x) const override;
};
EMBER_MODULE(BatchNorm3d);

// ---- RMSNorm -----------------------------------------------------------------------------------

// The options of RMSNorm, as torch.nn.RMSNorm's arguments (PyTorch 2.4).
struct RMSNormOptions {
  // Implicit from the normalized shape, so `RMSNorm(std::vector<int64_t>{512})` works.
  /* implicit */ RMSNormOptions(std::vector<int64_t> normalized_shape)  // NOLINT
      : normalized_shape_(std::move(normalized_shape)) {}
  // The trailing dims to normalize over (non-empty, sizes > 0).
  EMBER_ARG(std::vector<int64_t>, normalized_shape);
  // Added to the mean square; unset: the machine epsilon of the input's computation dtype.
  EMBER_ARG(std::optional<double>, eps) = std::nullopt;
  EMBER_ARG(bool, elementwise_affine) = true;  // whether to learn weight of normalized_shape
};

// rms_norm over the trailing dims normalized_shape, scaled by weight (= 1) when affine.
class RMSNormImpl : public Module {
 public:
  // clone() builds a fresh RMSNormImpl from options, then copies the parameters.
  EMBER_CLONEABLE(RMSNormImpl);
  // Checks normalized_shape and registers weight (with elementwise_affine).
  explicit RMSNormImpl(const RMSNormOptions& options);
  // weight = 1, as PyTorch.
  void reset_parameters();
  // x [*, *normalized_shape] -> the same shape.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  RMSNormOptions options;  // the options it was built with
  Tensor weight;           // parameter of normalized_shape (undefined without elementwise_affine)
};
EMBER_MODULE(RMSNorm);

}  // namespace ember::nn
