// The definitions of the dropout kernel tables (kernel_interface/dropout.h).
#include "ember/kernel_interface/dropout.h"

namespace ember {

EMBER_DEFINE_KERNEL(dropout_kernel, DropoutKernel)
EMBER_DEFINE_KERNEL(dropout_backward_kernel, DropoutBackwardKernel)

}  // namespace ember
