// CTCLoss (see loss_ctc.h).
#include "ember/nn/loss_ctc.h"

#include <ostream>

#include "ember/nn/loss.h"

namespace ember::nn {

Tensor CTCLossImpl::forward(const Tensor& log_probs, const Tensor& targets,
                            const Tensor& input_lengths, const Tensor& target_lengths) {
  CtcLossParams p;
  p.blank = options.blank();
  p.reduction = options.reduction();
  p.zero_infinity = options.zero_infinity();
  return ctc_loss(log_probs, targets, input_lengths, target_lengths, p);
}

void CTCLossImpl::pretty_print(std::ostream& os) const {
  os << "CTCLoss(blank=" << options.blank() << ", reduction=" << reduction_name(options.reduction())
     << ", zero_infinity=" << detail::bool_str(options.zero_infinity()) << ")";
}

}  // namespace ember::nn
