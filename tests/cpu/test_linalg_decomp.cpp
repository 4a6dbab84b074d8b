// fp64 gradcheck of the torch.linalg decompositions (op_cases_linalg_decomp in
// tests/support/op_table_linalg.cpp: CPU-only rows, kept out of op_cases() because the CUDA parity
// suite walks that table and the decompositions have no CUDA kernels yet), in contiguous and
// transposed input layouts.
#include <doctest/doctest.h>

#include "support/op_table.h"

namespace ember::testing {
const std::vector<OpCase>& op_cases_linalg_decomp();  // op_table_linalg.cpp
}  // namespace ember::testing

using namespace ember;
using ember::testing::Layout;

TEST_CASE("gradcheck: every linalg decomposition row") {
  int checked = 0;
  for (Layout layout : {Layout::contiguous, Layout::transposed}) {
    for (const auto& c : ember::testing::op_cases_linalg_decomp()) {
      CAPTURE(c.name);
      CAPTURE(int(layout));
      auto inputs = ember::testing::make_inputs(c, DType::f64, Device::cpu(), 1234, layout, true);
      std::string report;
      bool ok = autograd::gradcheck(c.fn, inputs, 1e-6, 1e-5, 1e-4, &report);
      CHECK_MESSAGE(ok, report);
      ++checked;
    }
  }
  CHECK(checked >= 40);
}
