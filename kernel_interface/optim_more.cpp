// The definition of the element-wise optimizer kernel table (kernel_interface/optim_more.h).
#include "ember/kernel_interface/optim_more.h"

namespace ember {

EMBER_DEFINE_KERNEL(elementwise_optimizer_kernel, ElementwiseOptimizerKernel)

}  // namespace ember
