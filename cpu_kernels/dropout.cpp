// CPU kernels behind dropout_kernel and dropout_backward_kernel (kernel_interface/dropout.h): the
// element loops of cpu_kernels/dropout.h over dense tensors. The keep mask is drawn exactly as the
// CPU random_kernel draws bernoulli(1 - p) (tensor/philox.h: element i takes lane i % 4 of
// subsequence i / 4), so it matches the CUDA kernel's mask bit for bit.
#include "ember/cpu_kernels/dropout.h"

#include "ember/kernel_interface/dropout.h"

namespace ember {
namespace {

void dropout_cpu(const DropoutArgs& a) {
  EMBER_INTERNAL_ASSERT(a.random.device_offset == nullptr,
                        "dropout: a CPU draw got a device offset (CPU generators never capture)");
  EMBER_DISPATCH_FLOATING_DTYPES(a.input.dtype(), "dropout", [&] {
    cpu::dropout_forward_elements(static_cast<const scalar_t*>(a.input.data_ptr()),
                                  static_cast<scalar_t*>(a.output.data_ptr()), a.mask.data<bool>(),
                                  a.input.numel(), a.p, a.random);
  });
}

void dropout_backward_cpu(const Tensor& grad_input, const Tensor& grad_output, const Tensor& mask,
                          double scale) {
  EMBER_DISPATCH_FLOATING_DTYPES(grad_input.dtype(), "dropout", [&] {
    cpu::dropout_backward_elements(static_cast<const scalar_t*>(grad_output.data_ptr()),
                                   mask.data<bool>(), static_cast<scalar_t*>(grad_input.data_ptr()),
                                   grad_input.numel(), scale);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(dropout_kernel, CPU, dispatch::kFloatingTypes, &dropout_cpu);
EMBER_REGISTER_KERNEL(dropout_backward_kernel, CPU, dispatch::kFloatingTypes,
                      &dropout_backward_cpu);

}  // namespace ember
