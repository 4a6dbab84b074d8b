// The definition of the layout transpose kernel table (kernel_interface/layout.h).
#include "ember/kernel_interface/layout.h"

namespace ember {

EMBER_DEFINE_KERNEL(layout_transpose_kernel, LayoutTransposeKernel)

}  // namespace ember
