// gradcheck (fp64 finite differences) for every row of the op table, in contiguous, transposed
// and channels_last input layouts.
#include <doctest/doctest.h>

#include "support/op_table.h"

using namespace ember;
using ember::testing::Layout;

TEST_CASE("gradcheck: every op in the table") {
  for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::channels_last}) {
    for (const auto& c : ember::testing::op_cases()) {
      if (!c.fp64_gradcheck) continue;
      CAPTURE(c.name);
      CAPTURE(int(layout));
      auto inputs = ember::testing::make_inputs(c, DType::f64, Device::cpu(), 1234, layout, true);
      std::string report;
      bool ok = autograd::gradcheck(c.fn, inputs, 1e-6, 1e-5, 1e-4, &report);
      CHECK_MESSAGE(ok, report);
    }
  }
}

TEST_CASE("gradcheck: detects a wrong backward formula") {
  // A deliberately wrong gradient (hook doubles it) must be caught, so the checker can fail.
  auto fn = [](const std::vector<Tensor>& x) {
    Tensor y = x[0] * 3.0;
    if (y.requires_grad())  // numeric evaluations run without grad
      y.register_hook([](const Tensor& g) { return g * 2.0; });
    return y;
  };
  Tensor x = rand({3}, TensorOptions(DType::f64)).set_requires_grad(true);
  CHECK_FALSE(autograd::gradcheck(fn, {x}));
}
