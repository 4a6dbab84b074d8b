// Normalization layers, as torch.nn.BatchNorm1d/2d, LayerNorm and GroupNorm, on the ops of
// ops/norm.h. State dict names are PyTorch's: weight, bias, running_mean, running_var,
// num_batches_tracked (an int64 0-d tensor).
//
// Autocast (nn/amp.h): BatchNorm takes a float16/bfloat16 input as it is (the op keeps statistics
// and parameters in float32 and returns the input's dtype, as PyTorch's CUDA batch_norm does);
// LayerNorm and GroupNorm cast their input to float32 and return float32 (PyTorch's fp32 list).
#pragma once
#include <functional>
#include <optional>
#include <vector>

#include "ember/nn/module.h"
#include "ember/nn/options.h"

namespace ember::nn {

// The options of BatchNorm1d / BatchNorm2d, as torch.nn.BatchNormNd's arguments.
struct BatchNormOptions {
  // Implicit from C, so `BatchNorm2d(64)` works; the rest default as PyTorch's.
  /* implicit */ BatchNormOptions(int64_t num_features) : num_features_(num_features) {}  // NOLINT
  EMBER_ARG(int64_t, num_features);  // C, the channel dim (dim 1) of the input; > 0
  EMBER_ARG(double, eps) = 1e-5;     // added to the variance before its square root; > 0
  // nullopt: a cumulative moving average (factor 1 / num_batches_tracked), as momentum=None in
  // PyTorch; it reads num_batches_tracked on the host each training step (a sync on CUDA).
  EMBER_ARG(std::optional<double>, momentum) = 0.1;
  EMBER_ARG(bool, affine) = true;  // whether to learn weight (scale) and bias (shift) per channel
  // Whether to keep running_mean / running_var buffers (updated in training, used in eval).
  EMBER_ARG(bool, track_running_stats) = true;
};

// The shared implementation of BatchNorm1d and BatchNorm2d (they differ in the input ranks they
// accept). Parameters weight [C] = 1, bias [C] = 0 (when affine); buffers running_mean [C] = 0,
// running_var [C] = 1, num_batches_tracked = 0 (when track_running_stats). In training the batch
// statistics normalize and the running statistics are updated; in eval the running statistics
// normalize (the batch statistics when running stats are not tracked).
class BatchNormImplBase : public Module {
 public:
  // Checks the options (num_features and eps positive, momentum in [0, 1]) and registers the
  // parameters and buffers above; name is the type name ("BatchNorm2d").
  BatchNormImplBase(const char* name, const BatchNormOptions& options);
  // running_mean = 0, running_var = 1, num_batches_tracked = 0 (when tracked).
  void reset_running_stats();
  // reset_running_stats(), then weight = 1 and bias = 0 (when affine), as PyTorch.
  void reset_parameters();
  // x [N, C, *] -> the same shape: (x - mean) / sqrt(var + eps) * weight + bias per channel, the
  // statistics over N and the spatial dims (biased variance normalizes; the running variance is
  // updated with the unbiased one). Errors when x.size(1) != num_features or the rank is wrong.
  Tensor forward(const Tensor& x);
  // relu(bn(x)) and relu(bn(x) + residual) in one fused op (the ResNet block tails).
  Tensor forward_relu(const Tensor& x);
  Tensor forward_add_relu(const Tensor& x, const Tensor& residual);
  void pretty_print(std::ostream& os) const override;

  BatchNormOptions options;  // the options it was built with
  // The parameters and buffers, under PyTorch's state-dict names:
  Tensor weight;               // parameter [C], the scale (undefined without affine)
  Tensor bias;                 // parameter [C], the shift (undefined without affine)
  Tensor running_mean;         // buffer [C] (undefined without track_running_stats)
  Tensor running_var;          // buffer [C] (undefined without track_running_stats)
  Tensor num_batches_tracked;  // buffer, int64 0-d (undefined without track_running_stats)

  // Training-mode normalization, when set, in place of ember::batch_norm and its fused tails; it
  // is how distributed::convert_sync_batchnorm makes an existing layer (held by its parent as a
  // BatchNorm2d) compute its batch statistics across a process group. Arguments as
  // batch_norm_add_relu (residual undefined and relu false for the plain forward).
  using TrainingForward =
      std::function<Tensor(const Tensor& x, const Tensor& residual, const Tensor& weight,
                           const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, bool relu, double momentum, double eps)>;
  TrainingForward training_forward;

 protected:
  // clone's fresh instance of Impl, keeping training_forward (a converted layer stays
  // synchronized, as a deepcopy in PyTorch).
  template <typename Impl>
  std::shared_ptr<Module> clone_keeping_training_forward() const {
    if (typeid(*this) != typeid(Impl)) return Module::clone_instance();
    auto copy = std::make_shared<Impl>(options);
    copy->training_forward = training_forward;
    return copy;
  }
  virtual void check_input_dim(const Tensor& x) const = 0;

 private:
  enum class Tail { none, relu, add_relu };
  Tensor run(const Tensor& x, const Tensor& residual, Tail tail);
};

// x [N, C] or [N, C, L].
class BatchNorm1dImpl : public BatchNormImplBase {
 public:
  std::shared_ptr<Module> clone_instance() const override {
    return clone_keeping_training_forward<BatchNorm1dImpl>();
  }
  // From options or from num_features alone (`BatchNorm1d(64)`).
  explicit BatchNorm1dImpl(const BatchNormOptions& options)
      : BatchNormImplBase("BatchNorm1d", options) {}

 protected:
  void check_input_dim(const Tensor& x) const override;
};
EMBER_MODULE(BatchNorm1d);

// x [N, C, H, W] (NCHW or channels_last).
class BatchNorm2dImpl : public BatchNormImplBase {
 public:
  std::shared_ptr<Module> clone_instance() const override {
    return clone_keeping_training_forward<BatchNorm2dImpl>();
  }
  // From options or from num_features alone (`BatchNorm2d(64)`).
  explicit BatchNorm2dImpl(const BatchNormOptions& options)
      : BatchNormImplBase("BatchNorm2d", options) {}

 protected:
  void check_input_dim(const Tensor& x) const override;
};
EMBER_MODULE(BatchNorm2d);

// The options of LayerNorm, as torch.nn.LayerNorm's arguments.
struct LayerNormOptions {
  // Implicit from the normalized shape, so `LayerNorm(std::vector<int64_t>{512})` works.
  /* implicit */ LayerNormOptions(std::vector<int64_t> normalized_shape)  // NOLINT
      : normalized_shape_(std::move(normalized_shape)) {}
  // The trailing dims to normalize over (non-empty, sizes > 0), e.g. {C} or {C, H, W}.
  EMBER_ARG(std::vector<int64_t>, normalized_shape);
  EMBER_ARG(double, eps) = 1e-5;  // added to the variance before its square root
  // Whether to learn weight (and, with bias, bias) of shape normalized_shape.
  EMBER_ARG(bool, elementwise_affine) = true;
  EMBER_ARG(bool, bias) = true;  // only with elementwise_affine
};

// Normalizes over the trailing dims normalized_shape; weight = 1 and bias = 0 of that shape.
class LayerNormImpl : public Module {
 public:
  // clone() builds a fresh LayerNormImpl from options, then copies the parameters.
  EMBER_CLONEABLE(LayerNormImpl);
  // Checks normalized_shape and registers weight and bias (as the options ask).
  explicit LayerNormImpl(const LayerNormOptions& options);
  // weight = 1, bias = 0, as PyTorch.
  void reset_parameters();
  // x [*, *normalized_shape] -> the same shape, each sample normalized over the trailing dims
  // (biased variance), then scaled and shifted elementwise. Errors when x's trailing dims differ.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  LayerNormOptions options;  // the options it was built with
  // weight and bias of shape normalized_shape (undefined when the options leave them out).
  Tensor weight, bias;  // bias: normalized_shape, undefined without elementwise_affine and bias
};
EMBER_MODULE(LayerNorm);

// The options of GroupNorm, as torch.nn.GroupNorm's arguments.
struct GroupNormOptions {
  // The required arguments; eps and affine default as PyTorch's.
  GroupNormOptions(int64_t num_groups, int64_t num_channels)
      : num_groups_(num_groups), num_channels_(num_channels) {}
  EMBER_ARG(int64_t, num_groups);    // groups the channels are split into; divides num_channels
  EMBER_ARG(int64_t, num_channels);  // C, the input's dim 1
  EMBER_ARG(double, eps) = 1e-5;     // added to the variance before its square root
  EMBER_ARG(bool, affine) = true;    // whether to learn weight and bias per channel
};

// x [N, C, *]: statistics per sample and group of C / num_groups channels; weight = 1, bias = 0
// [C].
class GroupNormImpl : public Module {
 public:
  // clone() builds a fresh GroupNormImpl from options, then copies the parameters.
  EMBER_CLONEABLE(GroupNormImpl);
  // Checks that num_groups divides num_channels (both > 0), registers weight and bias [C] (when
  // affine) and initializes them.
  explicit GroupNormImpl(const GroupNormOptions& options);
  GroupNormImpl(int64_t num_groups, int64_t num_channels)
      : GroupNormImpl(GroupNormOptions(num_groups, num_channels)) {}
  // weight = 1, bias = 0, as PyTorch.
  void reset_parameters();
  // x [N, C, *] -> the same shape. Errors when x has fewer than 2 dims or C != num_channels.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  GroupNormOptions options;  // the options it was built with
  // weight [C] (scale) and bias [C] (shift); undefined without affine.
  Tensor weight, bias;  // bias: [C], undefined without affine
};
EMBER_MODULE(GroupNorm);

}  // namespace ember::nn
