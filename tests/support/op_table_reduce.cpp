// Rows of the shared gradcheck / CUDA parity table (support/op_table.h) for the reductions and
// scans of ops/reduction_more.h: aminmax, var_mean / std_mean, norm / linalg_vector_norm (several
// ords and dims), cumsum, cumprod, cummax and cummin; sort,
// topk, kthvalue, median and nanmedian. Ops returning two tensors are checked
// through a weighted sum of both, so both gradients take part. Rows whose gradient follows the
// position of an extremum skip bf16, where rounding can create ties the fp32 input did not have.
#include <limits>

#include "support/op_table.h"

namespace ember::testing {

const std::vector<OpCase>& op_cases_reduce();

namespace {
using V = const std::vector<Tensor>&;
constexpr double kInf = std::numeric_limits<double>::infinity();
Tensor pair_sum(const std::tuple<Tensor, Tensor>& t) {
  return add(std::get<0>(t), std::get<1>(t), 0.5);
}
}  // namespace

const std::vector<OpCase>& op_cases_reduce() {
  static const std::vector<OpCase> cases = {
      {"aminmax_all", {{3, 4, 5}}, [](V x) { return pair_sum(aminmax(x[0])); }, -1, 1, false},
      {"aminmax_dim",
       {{3, 4, 5}},
       [](V x) { return pair_sum(aminmax(x[0], 1, true)); },
       -1,
       1,
       false},
      {"var_mean_dims",
       {{3, 4, 5}},
       [](V x) {
         return pair_sum(var_mean(x[0], {0, 2}));
       }},
      {"var_mean_all", {{6, 7}}, [](V x) { return pair_sum(var_mean(x[0], {}, 0)); }},
      {"std_mean_last", {{4, 33}}, [](V x) { return pair_sum(std_mean(x[0], {-1}, 1, true)); }},
      {"norm_2_all", {{3, 4, 5}}, [](V x) { return norm(x[0]); }},
      {"norm_2_dim", {{3, 4, 5}}, [](V x) { return norm(x[0], 2, {1}, true); }},
      {"vector_norm_1",
       {{3, 4, 5}},
       [](V x) {
         return linalg_vector_norm(x[0], 1, {0, 2});
       }},
      {"vector_norm_3", {{4, 6}}, [](V x) { return linalg_vector_norm(x[0], 3, {-1}); }},
      {"vector_norm_1p5", {{4, 6}}, [](V x) { return linalg_vector_norm(x[0], 1.5, {0}); }},
      {"vector_norm_inf",
       {{4, 6}},
       [](V x) { return linalg_vector_norm(x[0], kInf, {1}); },
       -1,
       1,
       false},
      {"vector_norm_neginf",
       {{4, 6}},
       [](V x) { return linalg_vector_norm(x[0], -kInf); },
       -1,
       1,
       false},
      {"cumsum_last", {{3, 37}}, [](V x) { return cumsum(x[0], -1); }},
      {"cumsum_mid", {{3, 4, 5}}, [](V x) { return cumsum(x[0], 1); }},
      {"cumprod_dim0", {{5, 4}}, [](V x) { return cumprod(x[0], 0); }, 0.5, 1.5},
      {"cumprod_last", {{3, 40}}, [](V x) { return cumprod(x[0], 1); }, 0.8, 1.2},
      {"cumprod_with_zeros",
       {{3, 6}},
       [](V x) {
         Tensor holes = from_vector({1, 0, 1, 1, 0, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0}, {3, 6},
                                    TensorOptions(x[0].dtype()).with_device(x[0].device()));
         return cumprod(mul(x[0], holes), 1);
       }},
      {"cummax_last", {{3, 37}}, [](V x) { return std::get<0>(cummax(x[0], -1)); }, -1, 1, false},
      {"cummin_mid", {{3, 4, 5}}, [](V x) { return std::get<0>(cummin(x[0], 1)); }, -1, 1, false},
      {"sort_last", {{3, 37}}, [](V x) { return std::get<0>(sort(x[0])); }, -1, 1, false},
      {"sort_desc_mid",
       {{3, 4, 5}},
       [](V x) { return std::get<0>(sort(x[0], 1, true)); },
       -1,
       1,
       false},
      {"topk_last", {{4, 33}}, [](V x) { return std::get<0>(topk(x[0], 5)); }, -1, 1, false},
      {"topk_smallest_dim0",
       {{6, 5}},
       [](V x) { return std::get<0>(topk(x[0], 2, 0, false)); },
       -1,
       1,
       false},
      {"kthvalue_mid",
       {{3, 5, 4}},
       [](V x) { return std::get<0>(kthvalue(x[0], 3, 1)); },
       -1,
       1,
       false},
      {"median_dim",
       {{4, 7}},
       [](V x) { return std::get<0>(median(x[0], 1, true)); },
       -1,
       1,
       false},
      {"median_all", {{4, 6}}, [](V x) { return median(x[0]); }, -1, 1, false},
      {"nanmedian_dim0",
       {{5, 3}},
       [](V x) { return std::get<0>(nanmedian(x[0], 0)); },
       -1,
       1,
       false},
  };
  return cases;
}

}  // namespace ember::testing
