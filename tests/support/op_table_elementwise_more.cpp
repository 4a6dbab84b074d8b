// Op-table rows (see op_table.h) for issue 34's elementwise ops (ops/elementwise_more.h): the
// transcendental and error functions (inputs kept inside their domains and away from their
// singularities), atan2 / hypot with broadcasting, lerp with number and tensor weights, addcmul,
// addcdiv, clamp with tensor bounds, nan_to_num on finite inputs and the piecewise-constant
// trunc / round(decimals) (zero gradient). Rows whose value jumps within a 16-bit rounding skip
// the bf16 comparison.
#include "support/op_table.h"

namespace ember::testing {

namespace {
using V = const std::vector<Tensor>&;
}  // namespace

const std::vector<OpCase>& op_cases_ewise() {
  static const std::vector<OpCase> cases = {
      {"log2", {{3, 4}}, [](V x) { return log2(x[0]); }, 0.5, 2},
      {"log10", {{3, 4}}, [](V x) { return x[0].log10(); }, 0.5, 2},
      {"tan", {{3, 4}}, [](V x) { return tan(x[0]); }},
      {"asin", {{3, 4}}, [](V x) { return asin(x[0]); }, -0.8, 0.8},
      {"acos", {{3, 4}}, [](V x) { return x[0].acos(); }, -0.8, 0.8},
      {"atan", {{3, 4}}, [](V x) { return atan(x[0]); }, -2, 2},
      {"sinh", {{3, 4}}, [](V x) { return sinh(x[0]); }},
      {"cosh", {{3, 4}}, [](V x) { return x[0].cosh(); }},
      {"asinh", {{3, 4}}, [](V x) { return asinh(x[0]); }, -2, 2},
      {"acosh", {{3, 4}}, [](V x) { return acosh(x[0]); }, 1.5, 3},
      {"atanh", {{3, 4}}, [](V x) { return x[0].atanh(); }, -0.8, 0.8},
      {"erf", {{3, 4}}, [](V x) { return erf(x[0]); }, -2, 2},
      {"erfc", {{3, 4}}, [](V x) { return x[0].erfc(); }, -2, 2},
      {"erfinv", {{3, 4}}, [](V x) { return erfinv(x[0]); }, -0.8, 0.8},
      {"frac", {{3, 4}}, [](V x) { return frac(x[0] * 3); }, -1, 1, false},
      {"trunc_round_decimals",
       {{2, 3}},
       [](V x) { return trunc(x[0] * 3) + x[0].round(2) + x[0]; },
       -1,
       1,
       false},
      {"nan_to_num", {{3, 4}}, [](V x) { return nan_to_num(x[0] * 2); }},
      {"atan2", {{3, 4}, {4}}, [](V x) { return atan2(x[0], x[1] + 2); }},
      {"atan2_both_signs", {{2, 3}, {2, 1}}, [](V x) { return x[0].atan2(x[1] * 3); }, 0.2, 1},
      {"hypot", {{3, 4}, {3, 1}}, [](V x) { return hypot(x[0], x[1] + 2); }},
      {"lerp_scalar_small", {{3, 4}, {4}}, [](V x) { return lerp(x[0], x[1], 0.3); }},
      {"lerp_scalar_large", {{3, 4}, {3, 4}}, [](V x) { return x[0].lerp(x[1], 0.8); }},
      {"lerp_tensor",
       {{3, 4}, {3, 4}, {4}},
       [](V x) { return lerp(x[0], x[1], x[2]); },
       -1,
       1,
       false},
      {"addcmul", {{3, 4}, {4}, {3, 1}}, [](V x) { return addcmul(x[0], x[1], x[2], 0.5); }},
      {"addcdiv", {{3, 4}, {3, 4}, {4}}, [](V x) { return x[0].addcdiv(x[1], x[2] + 2, -0.7); }},
      {"clamp_tensor_bounds",
       {{3, 4}, {4}, {3, 1}},
       [](V x) { return clamp(x[0], x[1] - 0.5, x[2] + 1.5); },
       -1,
       1,
       false},
      {"clamp_tensor_min_only",
       {{3, 4}, {3, 4}},
       [](V x) { return x[0].clamp(x[1], std::nullopt); },
       -1,
       1,
       false},
  };
  return cases;
}

}  // namespace ember::testing
