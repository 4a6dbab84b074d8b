// A small MLP classifier built only from primitives (linear, relu, a log-softmax made of
// logsumexp, gather), trained with plain SGD: the Foundation issue's end-to-end check, run on the
// CPU in CI and on CUDA on the GPU machine.
#pragma once
#include "ember/ember.h"

namespace ember::testing {

struct MlpResult {
  double first_loss = 0, last_loss = 0, accuracy = 0;
};

// Trains on a synthetic 3-class problem (points around three centres) for `steps` steps.
MlpResult train_mlp(Device device, DType dtype, int steps);

}  // namespace ember::testing
