// Dropout, as torch.nn.Dropout: in training each element is zeroed with probability p and the
// rest scaled by 1 / (1 - p), drawing from the input device's Philox generator (ops/dropout.h);
// in eval it returns its input. Runs in the dtype it is given (autocast leaves it alone).
#pragma once
#include "ember/nn/module.h"
#include "ember/nn/options.h"

namespace ember::nn {

// The options of Dropout, as torch.nn.Dropout's arguments.
struct DropoutOptions {
  // Implicit from p (PyTorch's default 0.5), so `Dropout(0.1)` works.
  /* implicit */ DropoutOptions(double p = 0.5) : p_(p) {}  // NOLINT
  EMBER_ARG(double, p);  // the probability of zeroing an element, in [0, 1]
};

// Zeroes random elements in training, as torch.nn.Dropout (see the file comment).
class DropoutImpl : public Module {
 public:
  // clone() builds a fresh DropoutImpl from options.
  EMBER_CLONEABLE(DropoutImpl);
  // Checks that p is in [0, 1]; p = 0.5 by default, as PyTorch.
  explicit DropoutImpl(const DropoutOptions& options = {});
  // x (any shape) -> the same shape: in training x * mask / (1 - p) (all zeros for p = 1), in
  // eval x itself.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  DropoutOptions options;  // the options it was built with
};
EMBER_MODULE(Dropout);

}  // namespace ember::nn
