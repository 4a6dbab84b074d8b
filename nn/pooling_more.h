// More pooling layers, as torch.nn's: MaxPool1d/3d, AvgPool1d/3d, AdaptiveAvgPool1d/3d,
// AdaptiveMaxPool1d/2d/3d, LPPool1d/2d/3d and MaxUnpool1d/2d/3d, on the ops of ops/pooling.h and
// ops/pooling_more.h. Options are templates over the spatial rank D, as libtorch's
// (MaxPoolOptions<1> is MaxPool1dOptions); inputs are [N, C, *spatial] or unbatched [C, *spatial].
// None of them holds parameters or buffers.
#pragma once
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ember/nn/module.h"
#include "ember/nn/options.h"

namespace ember::nn {

// ---- options -----------------------------------------------------------------------------------

// torch.nn.MaxPoolNd's arguments (with their defaults).
template <size_t D>
struct MaxPoolOptions {
  // Implicit from the window size, so `MaxPool1d(2)` works; stride defaults to it.
  /* implicit */ MaxPoolOptions(ExpandingArray<D> kernel_size)  // NOLINT
      : kernel_size_(kernel_size), stride_(kernel_size) {}
  EMBER_ARG(ExpandingArray<D>, kernel_size);   // the window
  EMBER_ARG(ExpandingArray<D>, stride);        // defaults to kernel_size
  EMBER_ARG(ExpandingArray<D>, padding) = 0;   // implicit -inf padding, at most half the window
  EMBER_ARG(ExpandingArray<D>, dilation) = 1;  // spacing between window elements
  EMBER_ARG(bool, ceil_mode) = false;          // round the output size up instead of down
};
using MaxPool1dOptions = MaxPoolOptions<1>;
using MaxPool3dOptions = MaxPoolOptions<3>;

// torch.nn.AvgPoolNd's arguments (with their defaults).
template <size_t D>
struct AvgPoolOptions {
  // Implicit from the window size, so `AvgPool1d(2)` works; stride defaults to it.
  /* implicit */ AvgPoolOptions(ExpandingArray<D> kernel_size)  // NOLINT
      : kernel_size_(kernel_size), stride_(kernel_size) {}
  EMBER_ARG(ExpandingArray<D>, kernel_size);  // the window
  EMBER_ARG(ExpandingArray<D>, stride);       // defaults to kernel_size
  EMBER_ARG(ExpandingArray<D>, padding) = 0;  // zero padding, at most half the window
  EMBER_ARG(bool, ceil_mode) = false;         // round the output size up instead of down
  EMBER_ARG(bool, count_include_pad) = true;  // whether the padding counts in the divisor
};
using AvgPool1dOptions = AvgPoolOptions<1>;
using AvgPool3dOptions = AvgPoolOptions<3>;

// The output size of adaptive pooling, as torch.nn.AdaptiveAvgPoolNd / AdaptiveMaxPoolNd's.
template <size_t D>
struct AdaptivePoolOptions {
  // Implicit from the output size, so `AdaptiveMaxPool2d(1)` works.
  /* implicit */ AdaptivePoolOptions(ExpandingArray<D> output_size)  // NOLINT
      : output_size_(output_size) {}
  EMBER_ARG(ExpandingArray<D>, output_size);  // each > 0
};
template <size_t D>
using AdaptiveAvgPoolOptions = AdaptivePoolOptions<D>;
template <size_t D>
using AdaptiveMaxPoolOptions = AdaptivePoolOptions<D>;
using AdaptiveAvgPool1dOptions = AdaptiveAvgPoolOptions<1>;
using AdaptiveAvgPool3dOptions = AdaptiveAvgPoolOptions<3>;
using AdaptiveMaxPool1dOptions = AdaptiveMaxPoolOptions<1>;
using AdaptiveMaxPool2dOptions = AdaptiveMaxPoolOptions<2>;
using AdaptiveMaxPool3dOptions = AdaptiveMaxPoolOptions<3>;

// torch.nn.LPPoolNd's arguments (with their defaults).
template <size_t D>
struct LPPoolOptions {
  // The power and the window; stride defaults to the window.
  LPPoolOptions(double norm_type, ExpandingArray<D> kernel_size)
      : norm_type_(norm_type), kernel_size_(kernel_size), stride_(kernel_size) {}
  EMBER_ARG(double, norm_type);               // p > 0 of (sum x^p)^(1/p)
  EMBER_ARG(ExpandingArray<D>, kernel_size);  // the window
  EMBER_ARG(ExpandingArray<D>, stride);       // defaults to kernel_size
  EMBER_ARG(bool, ceil_mode) = false;         // round the output size up instead of down
};
using LPPool1dOptions = LPPoolOptions<1>;
using LPPool2dOptions = LPPoolOptions<2>;
using LPPool3dOptions = LPPoolOptions<3>;

// torch.nn.MaxUnpoolNd's arguments (with their defaults): those of the max pooling it inverts.
template <size_t D>
struct MaxUnpoolOptions {
  // Implicit from the window size, so `MaxUnpool2d(2)` works; stride defaults to it.
  /* implicit */ MaxUnpoolOptions(ExpandingArray<D> kernel_size)  // NOLINT
      : kernel_size_(kernel_size), stride_(kernel_size) {}
  EMBER_ARG(ExpandingArray<D>, kernel_size);
  EMBER_ARG(ExpandingArray<D>, stride);  // defaults to kernel_size
  EMBER_ARG(ExpandingArray<D>, padding) = 0;
};
using MaxUnpool1dOptions = MaxUnpoolOptions<1>;
using MaxUnpool2dOptions = MaxUnpoolOptions<2>;
using MaxUnpool3dOptions = MaxUnpoolOptions<3>;

// ---- the shared implementations (one per kind, over the rank D) --------------------------------

// max_poolNd with the options.
template <size_t D>
class MaxPoolNdImpl : public Module {
 public:
  // Registers the module as `name` (the layer's class name) with its options.
  MaxPoolNdImpl(const char* name, const MaxPoolOptions<D>& options)
      : Module(name), options(options) {}
  // Applies the layer (see the class comment for shapes).
  Tensor forward(const Tensor& x);
  // The maxima and their flat positions in each input plane (Python's return_indices=True),
  // which MaxUnpool consumes.
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  MaxPoolOptions<D> options;  // the options it was built with
};

// avg_poolNd with the options.
template <size_t D>
class AvgPoolNdImpl : public Module {
 public:
  // Registers the module as `name` (the layer's class name) with its options.
  AvgPoolNdImpl(const char* name, const AvgPoolOptions<D>& options)
      : Module(name), options(options) {}
  // Applies the layer (see the class comment for shapes).
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  AvgPoolOptions<D> options;  // the options it was built with
};

// adaptive_avg_poolNd to options.output_size.
template <size_t D>
class AdaptiveAvgPoolNdImpl : public Module {
 public:
  // Registers the module as `name` (the layer's class name) with its options.
  AdaptiveAvgPoolNdImpl(const char* name, const AdaptivePoolOptions<D>& options)
      : Module(name), options(options) {}
  // Applies the layer (see the class comment for shapes).
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  AdaptivePoolOptions<D> options;  // the options it was built with
};

// adaptive_max_poolNd to options.output_size; forward_with_indices also returns the argmax
// positions (Python's return_indices=True), which MaxUnpool consumes.
template <size_t D>
class AdaptiveMaxPoolNdImpl : public Module {
 public:
  // Registers the module as `name` (the layer's class name) with its options.
  AdaptiveMaxPoolNdImpl(const char* name, const AdaptivePoolOptions<D>& options)
      : Module(name), options(options) {}
  // Applies the layer (see the class comment for shapes).
  Tensor forward(const Tensor& x);
  // (output, indices): the indices as max pooling returns them, for MaxUnpool.
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  AdaptivePoolOptions<D> options;  // the options it was built with
};

// lp_poolNd with the options.
template <size_t D>
class LPPoolNdImpl : public Module {
 public:
  // Registers the module as `name` (the layer's class name) with its options.
  LPPoolNdImpl(const char* name, const LPPoolOptions<D>& options)
      : Module(name), options(options) {}
  // Applies the layer (see the class comment for shapes).
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  LPPoolOptions<D> options;  // the options it was built with
};

// max_unpoolNd with the options: x and indices as max pooling returned them; output_size (the
// spatial sizes or a full shape) picks among the sizes that pooling maps to x's size.
template <size_t D>
class MaxUnpoolNdImpl : public Module {
 public:
  // Registers the module as `name` (the layer's class name) with its options.
  MaxUnpoolNdImpl(const char* name, const MaxUnpoolOptions<D>& options)
      : Module(name), options(options) {}
  // Applies the layer (see the class comment for shapes).
  Tensor forward(const Tensor& x, const Tensor& indices,
                 const std::optional<std::vector<int64_t>>& output_size = std::nullopt);
  void pretty_print(std::ostream& os) const override;
  MaxUnpoolOptions<D> options;  // the options it was built with
};

// ---- the layers --------------------------------------------------------------------------------

// Declares `Name##Impl` as Base<D> named "Name", built from its options or from the arguments of
// the options' constructor (`MaxPool1d(2)`, `LPPool2d(2.0, 3)`), cloneable, and its holder `Name`.
#define EMBER_POOLING_LAYER(Name, Base, D, Options)                                           \
  class Name##Impl : public Base<D> {                                                         \
   public:                                                                                    \
    EMBER_CLONEABLE(Name##Impl);                                                              \
    explicit Name##Impl(const Options& options) : Base<D>(#Name, options) {}                  \
    template <typename... Args>                                                               \
    requires(sizeof...(Args) >= 1 && std::is_constructible_v<Options, Args&&...> &&           \
             !(sizeof...(Args) == 1 && (std::is_same_v<std::remove_cvref_t<Args>, Options> && \
                                        ...))) explicit Name##Impl(Args&&... args)            \
        : Name##Impl(Options(std::forward<Args>(args)...)) {}                                 \
  };                                                                                          \
  EMBER_MODULE(Name)

// torch.nn.MaxPool1d.
EMBER_POOLING_LAYER(MaxPool1d, MaxPoolNdImpl, 1, MaxPoolOptions<1>);
// torch.nn.MaxPool3d.
EMBER_POOLING_LAYER(MaxPool3d, MaxPoolNdImpl, 3, MaxPoolOptions<3>);
// torch.nn.AvgPool1d.
EMBER_POOLING_LAYER(AvgPool1d, AvgPoolNdImpl, 1, AvgPoolOptions<1>);
// torch.nn.AvgPool3d.
EMBER_POOLING_LAYER(AvgPool3d, AvgPoolNdImpl, 3, AvgPoolOptions<3>);
EMBER_POOLING_LAYER(AdaptiveAvgPool1d, AdaptiveAvgPoolNdImpl, 1,
                    AdaptivePoolOptions<1>);  // torch.nn.AdaptiveAvgPool1d
EMBER_POOLING_LAYER(AdaptiveAvgPool3d, AdaptiveAvgPoolNdImpl, 3,
                    AdaptivePoolOptions<3>);  // torch.nn.AdaptiveAvgPool3d
EMBER_POOLING_LAYER(AdaptiveMaxPool1d, AdaptiveMaxPoolNdImpl, 1,
                    AdaptivePoolOptions<1>);  // torch.nn.AdaptiveMaxPool1d
EMBER_POOLING_LAYER(AdaptiveMaxPool2d, AdaptiveMaxPoolNdImpl, 2,
                    AdaptivePoolOptions<2>);  // torch.nn.AdaptiveMaxPool2d
EMBER_POOLING_LAYER(AdaptiveMaxPool3d, AdaptiveMaxPoolNdImpl, 3,
                    AdaptivePoolOptions<3>);  // torch.nn.AdaptiveMaxPool3d
// torch.nn.LPPool1d.
EMBER_POOLING_LAYER(LPPool1d, LPPoolNdImpl, 1, LPPoolOptions<1>);
// torch.nn.LPPool2d.
EMBER_POOLING_LAYER(LPPool2d, LPPoolNdImpl, 2, LPPoolOptions<2>);
// torch.nn.LPPool3d.
EMBER_POOLING_LAYER(LPPool3d, LPPoolNdImpl, 3, LPPoolOptions<3>);
// torch.nn.MaxUnpool1d.
EMBER_POOLING_LAYER(MaxUnpool1d, MaxUnpoolNdImpl, 1, MaxUnpoolOptions<1>);
// torch.nn.MaxUnpool2d.
EMBER_POOLING_LAYER(MaxUnpool2d, MaxUnpoolNdImpl, 2, MaxUnpoolOptions<2>);
// torch.nn.MaxUnpool3d.
EMBER_POOLING_LAYER(MaxUnpool3d, MaxUnpoolNdImpl, 3, MaxUnpoolOptions<3>);

#undef EMBER_POOLING_LAYER

}  // namespace ember::nn
