// Padding layers, as torch.nn's ZeroPad1d/2d/3d, ConstantPad1d/2d/3d, ReflectionPad1d/2d/3d,
// ReplicationPad1d/2d/3d and CircularPad1d/2d/3d, on ember::pad (ops/shape_more.h). The padding
// holds (left, right) pairs starting from the last dim, 2 * D values (or one for all of them).
// Reflection, replication and circular padding take [N, C, *spatial] or [C, *spatial]; zero and
// constant padding any input of at least D dims (negative pads crop).
#pragma once
#include <string>
#include <type_traits>
#include <utility>

#include "ember/nn/module.h"
#include "ember/nn/options.h"

namespace ember::nn {

// The padding of a layer of D spatial dims: 2 * D values (left, right, top, bottom, front, back).
template <size_t D>
struct PadOptions {
  /* implicit */ PadOptions(ExpandingArray<2 * D> padding) : padding_(padding) {}  // NOLINT
  EMBER_ARG(ExpandingArray<2 * D>, padding);
};
template <size_t D>
using ZeroPadOptions = PadOptions<D>;
template <size_t D>
using ReflectionPadOptions = PadOptions<D>;
template <size_t D>
using ReplicationPadOptions = PadOptions<D>;
template <size_t D>
using CircularPadOptions = PadOptions<D>;
using ZeroPad1dOptions = ZeroPadOptions<1>;
using ZeroPad2dOptions = ZeroPadOptions<2>;
using ZeroPad3dOptions = ZeroPadOptions<3>;
using ReflectionPad1dOptions = ReflectionPadOptions<1>;
using ReflectionPad2dOptions = ReflectionPadOptions<2>;
using ReflectionPad3dOptions = ReflectionPadOptions<3>;
using ReplicationPad1dOptions = ReplicationPadOptions<1>;
using ReplicationPad2dOptions = ReplicationPadOptions<2>;
using ReplicationPad3dOptions = ReplicationPadOptions<3>;
using CircularPad1dOptions = CircularPadOptions<1>;
using CircularPad2dOptions = CircularPadOptions<2>;
using CircularPad3dOptions = CircularPadOptions<3>;

// torch.nn.ConstantPadNd's arguments: the padding and the fill value.
template <size_t D>
struct ConstantPadOptions {
  ConstantPadOptions(ExpandingArray<2 * D> padding, double value)
      : padding_(padding), value_(value) {}
  EMBER_ARG(ExpandingArray<2 * D>, padding);
  EMBER_ARG(double, value);  // what the padded positions hold
};
using ConstantPad1dOptions = ConstantPadOptions<1>;
using ConstantPad2dOptions = ConstantPadOptions<2>;
using ConstantPad3dOptions = ConstantPadOptions<3>;

// The shared implementation: ember::pad(x, padding, mode, value).
template <size_t D, typename Options>
class PadNdImpl : public Module {
 public:
  // Registers the module as `name` (the layer's class name) with its options.
  PadNdImpl(const char* name, const char* mode, const Options& options)
      : Module(name), options(options), mode_(mode) {}
  // Applies the layer (see the class comment for shapes).
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  Options options;  // the options it was built with

 private:
  std::string mode_;  // "constant", "reflect", "replicate" or "circular"
};

// Declares `Name##Impl` (padding of D dims in `mode`) and its holder `Name`, built from the
// options or from the arguments of the options' constructor (`ReflectionPad2d(1)`,
// `ConstantPad1d(2, 3.5)`).
#define EMBER_PADDING_LAYER(Name, D, Options, mode)                                              \
  class Name##Impl : public PadNdImpl<D, Options> {                                              \
   public:                                                                                       \
    EMBER_CLONEABLE(Name##Impl);                                                                 \
    explicit Name##Impl(const Options& options) : PadNdImpl<D, Options>(#Name, mode, options) {} \
    template <typename... Args>                                                                  \
    requires(sizeof...(Args) >= 1 && std::is_constructible_v<Options, Args&&...> &&              \
             !(sizeof...(Args) == 1 && (std::is_same_v<std::remove_cvref_t<Args>, Options> &&    \
                                        ...))) explicit Name##Impl(Args&&... args)               \
        : Name##Impl(Options(std::forward<Args>(args)...)) {}                                    \
  };                                                                                             \
  EMBER_MODULE(Name)

// torch.nn.ZeroPad1d.
EMBER_PADDING_LAYER(ZeroPad1d, 1, PadOptions<1>, "constant");
// torch.nn.ZeroPad2d.
EMBER_PADDING_LAYER(ZeroPad2d, 2, PadOptions<2>, "constant");
// torch.nn.ZeroPad3d.
EMBER_PADDING_LAYER(ZeroPad3d, 3, PadOptions<3>, "constant");
// torch.nn.ConstantPad1d.
EMBER_PADDING_LAYER(ConstantPad1d, 1, ConstantPadOptions<1>, "constant");
// torch.nn.ConstantPad2d.
EMBER_PADDING_LAYER(ConstantPad2d, 2, ConstantPadOptions<2>, "constant");
// torch.nn.ConstantPad3d.
EMBER_PADDING_LAYER(ConstantPad3d, 3, ConstantPadOptions<3>, "constant");
// torch.nn.ReflectionPad1d.
EMBER_PADDING_LAYER(ReflectionPad1d, 1, PadOptions<1>, "reflect");
// torch.nn.ReflectionPad2d.
EMBER_PADDING_LAYER(ReflectionPad2d, 2, PadOptions<2>, "reflect");
// torch.nn.ReflectionPad3d.
EMBER_PADDING_LAYER(ReflectionPad3d, 3, PadOptions<3>, "reflect");
// torch.nn.ReplicationPad1d.
EMBER_PADDING_LAYER(ReplicationPad1d, 1, PadOptions<1>, "replicate");
// torch.nn.ReplicationPad2d.
EMBER_PADDING_LAYER(ReplicationPad2d, 2, PadOptions<2>, "replicate");
// torch.nn.ReplicationPad3d.
EMBER_PADDING_LAYER(ReplicationPad3d, 3, PadOptions<3>, "replicate");
// torch.nn.CircularPad1d.
EMBER_PADDING_LAYER(CircularPad1d, 1, PadOptions<1>, "circular");
// torch.nn.CircularPad2d.
EMBER_PADDING_LAYER(CircularPad2d, 2, PadOptions<2>, "circular");
// torch.nn.CircularPad3d.
EMBER_PADDING_LAYER(CircularPad3d, 3, PadOptions<3>, "circular");

#undef EMBER_PADDING_LAYER

}  // namespace ember::nn
