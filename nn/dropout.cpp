// Dropout (see dropout.h).
#include "ember/nn/dropout.h"

#include <ostream>

#include "ember/ops/dropout.h"

namespace ember::nn {

DropoutImpl::DropoutImpl(const DropoutOptions& options_) : Module("Dropout"), options(options_) {
  EMBER_CHECK(options.p() >= 0 && options.p() <= 1, "Dropout: p must be in [0, 1], got ",
              options.p());
}

Tensor DropoutImpl::forward(const Tensor& x) { return dropout(x, options.p(), is_training()); }

void DropoutImpl::pretty_print(std::ostream& os) const {
  os << "Dropout(p=" << detail::float_str(options.p()) << ")";
}

}  // namespace ember::nn
