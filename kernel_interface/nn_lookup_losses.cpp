// The kernel tables of embedding_bag (kernel_interface/embedding_bag.h) and the CTC loss
// (kernel_interface/ctc_loss.h), filled by registrations in cpu_kernels/ and cuda_kernels/.
#include "ember/kernel_interface/ctc_loss.h"
#include "ember/kernel_interface/embedding_bag.h"

namespace ember {

EMBER_DEFINE_KERNEL(embedding_bag_forward_kernel, EmbeddingBagForwardKernel)
EMBER_DEFINE_KERNEL(embedding_bag_backward_kernel, EmbeddingBagBackwardKernel)
EMBER_DEFINE_KERNEL(ctc_loss_forward_kernel, CtcLossForwardKernel)
EMBER_DEFINE_KERNEL(ctc_loss_backward_kernel, CtcLossBackwardKernel)

const char* embedding_bag_mode_name(EmbeddingBagMode mode) {
  switch (mode) {
    case EmbeddingBagMode::sum:
      return "sum";
    case EmbeddingBagMode::mean:
      return "mean";
    case EmbeddingBagMode::max:
      return "max";
  }
  return "?";
}

}  // namespace ember
