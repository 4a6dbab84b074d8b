// CTCLoss, as torch.nn.CTCLoss: the module form of ctc_loss (ops/ctc_loss.h).
#pragma once
#include "ember/nn/module.h"
#include "ember/nn/options.h"
#include "ember/ops/ctc_loss.h"

namespace ember::nn {

// The options of CTCLoss, as torch.nn.CTCLoss's arguments (with their defaults).
struct CTCLossOptions {
  EMBER_ARG(int64_t, blank) = 0;  // the blank label
  // none: per sample; mean: each loss over its target length (at least 1), then the batch mean;
  // sum: the total.
  EMBER_ARG(LossReduction, reduction) = LossReduction::mean;
  EMBER_ARG(bool, zero_infinity) = false;  // infinite losses and their gradients become 0
};

// ctc_loss as a module, as torch.nn.CTCLoss.
class CTCLossImpl : public Module {
 public:
  // clone() builds a fresh CTCLossImpl from options.
  EMBER_CLONEABLE(CTCLossImpl);
  explicit CTCLossImpl(const CTCLossOptions& options = {}) : Module("CTCLoss"), options(options) {}
  // log_probs [T, N, C], targets [N, S] or concatenated, input_lengths [N], target_lengths [N]
  // -> the loss (see ops/ctc_loss.h).
  Tensor forward(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                 const Tensor& target_lengths);
  void pretty_print(std::ostream& os) const override;
  CTCLossOptions options;  // the options it was built with
};
EMBER_MODULE(CTCLoss);

}  // namespace ember::nn
