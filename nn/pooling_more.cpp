// The pooling layers of nn/pooling_more.h: each forward picks its op by the rank D.
#include "ember/nn/pooling_more.h"

#include <ostream>

#include "ember/ops/pooling.h"
#include "ember/ops/pooling_more.h"

namespace ember::nn {

template <size_t D>
Tensor MaxPoolNdImpl<D>::forward(const Tensor& x) {
  const auto& o = options;
  auto pool = D == 1 ? &max_pool1d : D == 2 ? &max_pool2d : &max_pool3d;
  return pool(x, o.kernel_size().vec(), o.stride().vec(), o.padding().vec(), o.dilation().vec(),
              o.ceil_mode());
}

template <size_t D>
std::tuple<Tensor, Tensor> MaxPoolNdImpl<D>::forward_with_indices(const Tensor& x) {
  const auto& o = options;
  auto pool = D == 1   ? &max_pool1d_with_indices
              : D == 2 ? &max_pool2d_with_indices
                       : &max_pool3d_with_indices;
  auto [values, indices] = pool(x, o.kernel_size().vec(), o.stride().vec(), o.padding().vec(),
                                o.dilation().vec(), o.ceil_mode());
  return {values, indices};
}

template <size_t D>
void MaxPoolNdImpl<D>::pretty_print(std::ostream& os) const {
  const auto& o = options;
  os << type_name() << "(kernel_size=" << o.kernel_size() << ", stride=" << o.stride()
     << ", padding=" << o.padding() << ", dilation=" << o.dilation()
     << ", ceil_mode=" << detail::bool_str(o.ceil_mode()) << ")";
}

template <size_t D>
Tensor AvgPoolNdImpl<D>::forward(const Tensor& x) {
  const auto& o = options;
  auto pool = D == 1 ? &avg_pool1d : D == 2 ? &avg_pool2d : &avg_pool3d;
  return pool(x, o.kernel_size().vec(), o.stride().vec(), o.padding().vec(), o.ceil_mode(),
              o.count_include_pad());
}

template <size_t D>
void AvgPoolNdImpl<D>::pretty_print(std::ostream& os) const {
  const auto& o = options;
  os << type_name() << "(kernel_size=" << o.kernel_size() << ", stride=" << o.stride()
     << ", padding=" << o.padding();
  if (o.ceil_mode()) os << ", ceil_mode=true";
  if (!o.count_include_pad()) os << ", count_include_pad=false";
  os << ")";
}

template <size_t D>
Tensor AdaptiveAvgPoolNdImpl<D>::forward(const Tensor& x) {
  auto pool = D == 1 ? &adaptive_avg_pool1d : D == 2 ? &adaptive_avg_pool2d : &adaptive_avg_pool3d;
  return pool(x, options.output_size().vec());
}

template <size_t D>
void AdaptiveAvgPoolNdImpl<D>::pretty_print(std::ostream& os) const {
  os << type_name() << "(output_size=" << options.output_size() << ")";
}

template <size_t D>
std::tuple<Tensor, Tensor> AdaptiveMaxPoolNdImpl<D>::forward_with_indices(const Tensor& x) {
  auto pool = D == 1   ? &adaptive_max_pool1d_with_indices
              : D == 2 ? &adaptive_max_pool2d_with_indices
                       : &adaptive_max_pool3d_with_indices;
  auto [values, indices] = pool(x, options.output_size().vec());
  return {values, indices};
}

template <size_t D>
Tensor AdaptiveMaxPoolNdImpl<D>::forward(const Tensor& x) {
  return std::get<0>(forward_with_indices(x));
}

template <size_t D>
void AdaptiveMaxPoolNdImpl<D>::pretty_print(std::ostream& os) const {
  os << type_name() << "(output_size=" << options.output_size() << ")";
}

template <size_t D>
Tensor LPPoolNdImpl<D>::forward(const Tensor& x) {
  const auto& o = options;
  auto pool = D == 1 ? &lp_pool1d : D == 2 ? &lp_pool2d : &lp_pool3d;
  return pool(x, o.norm_type(), o.kernel_size().vec(), o.stride().vec(), o.ceil_mode());
}

template <size_t D>
void LPPoolNdImpl<D>::pretty_print(std::ostream& os) const {
  const auto& o = options;
  os << type_name() << "(norm_type=" << detail::float_str(o.norm_type())
     << ", kernel_size=" << o.kernel_size() << ", stride=" << o.stride()
     << ", ceil_mode=" << detail::bool_str(o.ceil_mode()) << ")";
}

template <size_t D>
Tensor MaxUnpoolNdImpl<D>::forward(const Tensor& x, const Tensor& indices,
                                   const std::optional<std::vector<int64_t>>& output_size) {
  const auto& o = options;
  auto unpool = D == 1 ? &max_unpool1d : D == 2 ? &max_unpool2d : &max_unpool3d;
  return unpool(x, indices, o.kernel_size().vec(), o.stride().vec(), o.padding().vec(),
                output_size);
}

template <size_t D>
void MaxUnpoolNdImpl<D>::pretty_print(std::ostream& os) const {
  const auto& o = options;
  os << type_name() << "(kernel_size=" << o.kernel_size() << ", stride=" << o.stride()
     << ", padding=" << o.padding() << ")";
}

// The ranks the layers of pooling_more.h use.
template class MaxPoolNdImpl<1>;
template class MaxPoolNdImpl<3>;
template class AvgPoolNdImpl<1>;
template class AvgPoolNdImpl<3>;
template class AdaptiveAvgPoolNdImpl<1>;
template class AdaptiveAvgPoolNdImpl<3>;
template class AdaptiveMaxPoolNdImpl<1>;
template class AdaptiveMaxPoolNdImpl<2>;
template class AdaptiveMaxPoolNdImpl<3>;
template class LPPoolNdImpl<1>;
template class LPPoolNdImpl<2>;
template class LPPoolNdImpl<3>;
template class MaxUnpoolNdImpl<1>;
template class MaxUnpoolNdImpl<2>;
template class MaxUnpoolNdImpl<3>;

}  // namespace ember::nn
