// The definitions behind kernel_interface/activation.h: the activation kernel tables and the ops'
// names.
#include "ember/kernel_interface/activation.h"

namespace ember {

EMBER_DEFINE_KERNEL(activation_kernel, ActivationKernel)
EMBER_DEFINE_KERNEL(activation_backward_kernel, ActivationKernel)

const char* activation_op_name(ActivationOp op) {
  switch (op) {
    case ActivationOp::leaky_relu:
      return "leaky_relu";
    case ActivationOp::elu:
      return "elu";
    case ActivationOp::gelu:
      return "gelu";
    case ActivationOp::gelu_tanh:
      return "gelu(approximate=tanh)";
    case ActivationOp::silu:
      return "silu";
  }
  return "activation";
}

}  // namespace ember
