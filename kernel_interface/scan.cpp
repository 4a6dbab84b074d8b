// The scan and sort kernel tables (kernel_interface/scan.h, sort.h), filled by
// cpu_kernels/scan.cpp, cpu_kernels/sort.cpp and cuda_kernels/reduce/scan.cu, sort.cu.
#include "ember/kernel_interface/scan.h"

#include "ember/kernel_interface/sort.h"

namespace ember {

EMBER_DEFINE_KERNEL(scan_kernel, ScanKernel)
EMBER_DEFINE_KERNEL(sort_kernel, SortKernel)

const char* scan_op_name(ScanOp op) {
  switch (op) {
    case ScanOp::sum:
      return "cumsum";
    case ScanOp::prod:
      return "cumprod";
    case ScanOp::max:
      return "cummax";
    case ScanOp::min:
      return "cummin";
  }
  return "scan";
}

}  // namespace ember
