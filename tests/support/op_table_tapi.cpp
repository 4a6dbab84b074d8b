// Op-table rows (see op_table.h) for the libtorch-style Tensor API: remainder and fmod (tensor and
// number divisors, broadcasting), log1p, expm1, clamp_min / clamp_max, the piecewise-constant ops
// (zero gradient), the in-place methods on non-leaf tensors (their gradient flows through the
// recorded copy), unbind and unflatten. Divisors are kept away from zero and inputs random, so no
// finite-difference step crosses a jump of remainder or floor; the rounding-sensitive rows skip
// the 16-bit comparison.
#include "support/op_table.h"

namespace ember::testing {

namespace {
using V = const std::vector<Tensor>&;
}  // namespace

const std::vector<OpCase>& op_cases_tapi() {
  static const std::vector<OpCase> cases = {
      {"remainder", {{3, 4}, {4}}, [](V x) { return (x[0] * 3) % (x[1] + 2); }, -1, 1, false},
      {"remainder_neg_divisor",
       {{2, 5}, {2, 1}},
       [](V x) { return remainder(x[0] * 3, x[1] - 2); },
       -1,
       1,
       false},
      {"remainder_scalar", {{4, 3}}, [](V x) { return (x[0] * 3) % 1.25; }, -1, 1, false},
      {"remainder_scalar_left", {{5}}, [](V x) { return 2.5 % (x[0] + 2); }, -1, 1, false},
      {"fmod", {{3, 4}, {3, 1}}, [](V x) { return fmod(x[0] * 3, x[1] + 2); }, -1, 1, false},
      {"fmod_scalar", {{6}}, [](V x) { return x[0].mul(3).fmod(-1.25); }, -1, 1, false},
      {"log1p", {{3, 4}}, [](V x) { return log1p(x[0]); }, -0.5, 2},
      {"expm1", {{3, 4}}, [](V x) { return x[0].expm1(); }},
      {"clamp_min", {{3, 4}}, [](V x) { return x[0].clamp_min(-0.3); }},
      {"clamp_max", {{3, 4}}, [](V x) { return clamp_max(x[0], 0.4); }},
      {"floor_sign_round",
       {{2, 3}},
       [](V x) { return x[0].floor() + x[0].sign() + x[0].round() + x[0]; },
       -3,
       3,
       false},
      {"sub_method_alpha", {{3, 4}, {4}}, [](V x) { return x[0].sub(x[1], 0.5).add(1.5, 2); }},
      {"exp_inplace",
       {{3, 4}},
       [](V x) {
         Tensor y = x[0] * 1.0;
         y.exp_();
         return y;
       }},
      {"inplace_chain",
       {{3, 4}, {4}},
       [](V x) {
         Tensor y = x[0] + 0;
         y.sigmoid_().pow_(2).add_(x[1], 0.5).mul_(x[1]).clamp_(-0.5, 0.5);
         return y;
       }},
      {"compound_assign",
       {{2, 3}, {3}},
       [](V x) {
         Tensor y = x[0] * 1.0;
         y += x[1];
         y *= x[1];
         y -= 0.25;
         y /= 2;
         return y;
       }},
      {"unbind_stack", {{3, 4}}, [](V x) { return stack(x[0].unbind(1), 0); }},
      {"unflatten",
       {{2, 12}},
       [](V x) {
         return x[0].unflatten(1, {3, -1}).sum(2);
       }},
  };
  return cases;
}

}  // namespace ember::testing
