// libtorch's Tensor methods for access and conversion: options(), to(options), type_as, half,
// bfloat16. data_ptr<T>() is inline in tensor/tensor.h, accessor<T, N>() in tensor/accessor.h.
#include "ember/ops/ops.h"

namespace ember {

// ---- access and conversion ----
TensorOptions Tensor::options() const {
  EMBER_CHECK(defined(), "options: undefined tensor");
  return TensorOptions(dtype()).with_device(device());
}
Tensor Tensor::to(const TensorOptions& o) const {
  EMBER_CHECK(defined(), "to: undefined tensor");
  return to(o.has_device ? o.device : device(), o.has_dtype ? o.dtype : dtype());
}
Tensor Tensor::type_as(const Tensor& other) const { return to(other.dtype()); }
Tensor Tensor::half() const { return to(DType::f16); }
Tensor Tensor::bfloat16() const { return to(DType::bf16); }

}  // namespace ember
