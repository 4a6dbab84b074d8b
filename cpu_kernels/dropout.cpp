// CPU kernels behind dropout_kernel and dropout_backward_kernel (ops/dropout.h). The keep mask is
// drawn exactly as the CPU random_kernel draws bernoulli(1 - p) (tensor/philox.h: element i takes
// lane i % 4 of subsequence i / 4), so it matches the CUDA kernel's mask bit for bit.
#include <type_traits>

#include "ops/dropout.h"
#include "tensor/philox.h"

namespace ember {
namespace {

template <typename T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
void dropout_typed(const DropoutArgs& a) {
  using A = compute_t<T>;
  const T* x = static_cast<const T*>(a.input.data_ptr());
  T* y = static_cast<T*>(a.output.data_ptr());
  bool* mask = a.mask.data<bool>();
  const int64_t n = a.input.numel();
  const double keep = 1.0 - a.p;
  const A scale = A(a.p >= 1 ? 0.0 : 1.0 / keep);
  for (int64_t g = 0; g < (n + 3) / 4; ++g) {
    const philox::F32x4 u =
        philox::uniform4_from_bits(philox::draw4(a.random.seed, uint64_t(g), a.random.offset));
    for (int l = 0; l < 4 && 4 * g + l < n; ++l) {
      const int64_t i = 4 * g + l;
      const bool kept = philox::bernoulli_from_uniform(philox::lane(u, l), keep);
      mask[i] = kept;
      y[i] = T(kept ? A(x[i]) * scale : A(0));
    }
  }
}

template <typename T>
void dropout_backward_typed(const Tensor& grad_input, const Tensor& grad_output, const Tensor& mask,
                            double scale) {
  using A = compute_t<T>;
  const T* g = static_cast<const T*>(grad_output.data_ptr());
  const bool* m = mask.data<bool>();
  T* gx = static_cast<T*>(grad_input.data_ptr());
  const A s = A(scale);
  for (int64_t i = 0; i < grad_input.numel(); ++i) gx[i] = T(m[i] ? A(g[i]) * s : A(0));
}

void dropout_cpu(const DropoutArgs& a) {
  EMBER_INTERNAL_ASSERT(a.random.device_offset == nullptr,
                        "dropout: a CPU draw got a device offset (CPU generators never capture)");
  EMBER_DISPATCH_FLOATING_DTYPES(a.input.dtype(), "dropout", [&] { dropout_typed<scalar_t>(a); });
}

void dropout_backward_cpu(const Tensor& grad_input, const Tensor& grad_output, const Tensor& mask,
                          double scale) {
  EMBER_DISPATCH_FLOATING_DTYPES(grad_input.dtype(), "dropout", [&] {
    dropout_backward_typed<scalar_t>(grad_input, grad_output, mask, scale);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(dropout_kernel, CPU, dispatch::kFloatingTypes, &dropout_cpu);
EMBER_REGISTER_KERNEL(dropout_backward_kernel, CPU, dispatch::kFloatingTypes, &dropout_backward_cpu);

}  // namespace ember
