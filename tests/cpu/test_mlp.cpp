// End to end on the CPU: the primitives-only MLP learns (loss falls, accuracy high).
#include <doctest/doctest.h>

#include "support/mlp.h"

TEST_CASE("an MLP from primitives trains on the CPU (fp32 and fp64)") {
  for (ember::DType d : {ember::DType::f32, ember::DType::f64}) {
    auto r = ember::testing::train_mlp(ember::Device::cpu(), d, 60);
    CAPTURE(r.first_loss);
    CAPTURE(r.last_loss);
    CHECK(r.last_loss < 0.5 * r.first_loss);
    CHECK(r.accuracy > 0.9);
  }
}
