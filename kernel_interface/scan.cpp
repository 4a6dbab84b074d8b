// The scan kernel table (kernel_interface/scan.h), filled by cpu_kernels/scan.cpp and
// cuda_kernels/reduce/scan.cu.
#include "ember/kernel_interface/scan.h"

namespace ember {

EMBER_DEFINE_KERNEL(scan_kernel, ScanKernel)

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
