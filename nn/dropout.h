// Dropout, as torch.nn.Dropout: in training each element is zeroed with probability p and the
// rest scaled by 1 / (1 - p), drawing from the input device's Philox generator (ops/dropout.h);
// in eval it returns its input. Runs in the dtype it is given (autocast leaves it alone).
#pragma once
#include "ember/nn/module.h"
#include "ember/nn/options.h"

namespace ember::nn {

struct DropoutOptions {
  /* implicit */ DropoutOptions(double p = 0.5) : p_(p) {}  // NOLINT
  EMBER_ARG(double, p);
};

class DropoutImpl : public Module {
 public:
  EMBER_CLONEABLE(DropoutImpl);
  explicit DropoutImpl(const DropoutOptions& options = {});
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  DropoutOptions options;
};
EMBER_MODULE(Dropout);

}  // namespace ember::nn
