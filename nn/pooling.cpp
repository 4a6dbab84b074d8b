// MaxPool2d, AvgPool2d and AdaptiveAvgPool2d (see pooling.h).
#include "ember/nn/pooling.h"

#include <ostream>

#include "ember/ops/pooling.h"

namespace ember::nn {

Tensor MaxPool2dImpl::forward(const Tensor& x) {
  const auto& o = options;
  return max_pool2d(x, o.kernel_size().vec(), o.stride().vec(), o.padding().vec(),
                    o.dilation().vec(), o.ceil_mode());
}

void MaxPool2dImpl::pretty_print(std::ostream& os) const {
  const auto& o = options;
  os << "MaxPool2d(kernel_size=" << o.kernel_size() << ", stride=" << o.stride()
     << ", padding=" << o.padding() << ", dilation=" << o.dilation()
     << ", ceil_mode=" << detail::bool_str(o.ceil_mode()) << ")";
}

Tensor AvgPool2dImpl::forward(const Tensor& x) {
  const auto& o = options;
  return avg_pool2d(x, o.kernel_size().vec(), o.stride().vec(), o.padding().vec(), o.ceil_mode(),
                    o.count_include_pad());
}

void AvgPool2dImpl::pretty_print(std::ostream& os) const {
  const auto& o = options;
  os << "AvgPool2d(kernel_size=" << o.kernel_size() << ", stride=" << o.stride()
     << ", padding=" << o.padding();
  if (o.ceil_mode()) os << ", ceil_mode=true";
  if (!o.count_include_pad()) os << ", count_include_pad=false";
  os << ")";
}

Tensor AdaptiveAvgPool2dImpl::forward(const Tensor& x) {
  return adaptive_avg_pool2d(x, options.output_size().vec());
}

void AdaptiveAvgPool2dImpl::pretty_print(std::ostream& os) const {
  os << "AdaptiveAvgPool2d(output_size=" << options.output_size() << ")";
}

}  // namespace ember::nn
