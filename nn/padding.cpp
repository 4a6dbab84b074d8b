// The padding layers of nn/padding.h.
#include "ember/nn/padding.h"

#include <ostream>

#include "ember/ops/shape_more.h"

namespace ember::nn {

namespace {
template <size_t D>
double fill_value(const PadOptions<D>&) {
  return 0;
}
template <size_t D>
double fill_value(const ConstantPadOptions<D>& o) {
  return o.value();
}
}  // namespace

template <size_t D, typename Options>
Tensor PadNdImpl<D, Options>::forward(const Tensor& x) {
  EMBER_CHECK(x.defined(), type_name(), ": the input is undefined");
  EMBER_CHECK(x.dim() >= int64_t(D), type_name(), ": expected an input of at least ", D,
              " dims, got ", x.shape_str());
  return pad(x, options.padding().vec(), mode_, fill_value(options));
}

template <size_t D, typename Options>
void PadNdImpl<D, Options>::pretty_print(std::ostream& os) const {
  os << type_name() << "(padding=" << options.padding();
  if constexpr (std::is_same_v<Options, ConstantPadOptions<D>>)
    os << ", value=" << detail::float_str(options.value());
  os << ")";
}

// The layers of padding.h.
template class PadNdImpl<1, PadOptions<1>>;
template class PadNdImpl<2, PadOptions<2>>;
template class PadNdImpl<3, PadOptions<3>>;
template class PadNdImpl<1, ConstantPadOptions<1>>;
template class PadNdImpl<2, ConstantPadOptions<2>>;
template class PadNdImpl<3, ConstantPadOptions<3>>;

}  // namespace ember::nn
