// Op-table rows (see op_table.h) for indexing: x.index / index_put with every index kind, the
// mask ops, where with a number, scatter / scatter_reduce and the index family. Index tensors and
// masks are constants made on the input's device inside each function. Rows whose indices repeat
// under an overwriting op are left out: the winning write is unspecified on CUDA (as in PyTorch).
#include "support/op_table.h"

namespace ember::testing {

namespace {
using V = const std::vector<Tensor>&;
using namespace ember::indexing;
Tensor ix(V x, std::vector<double> v, Shape s) {
  return from_vector(v, s, TensorOptions(DType::i64).with_device(x[0].device()));
}
Tensor ix(V x, std::vector<double> v) {
  const int64_t n = int64_t(v.size());
  return ix(x, std::move(v), {n});
}
Tensor mask(V x, std::vector<double> v, Shape s) {
  return from_vector(v, s, TensorOptions(DType::boolean).with_device(x[0].device()));
}
}  // namespace

const std::vector<OpCase>& op_cases_index() {
  static const std::vector<OpCase> cases = {
      // x.index
      {"index_int_tensor",
       {{4, 5}},
       [](V x) {
         return x[0].index({Slice(), ix(x, {3, 1, 3, -1})});
       }},
      {"index_mask",
       {{3, 4}},
       [](V x) {
         return x[0].index({mask(x, {1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 1, 1}, {3, 4})});
       }},
      {"index_separated_broadcast",
       {{3, 4, 5}},
       [](V x) {
         return x[0].index({ix(x, {2, 0}, {2, 1}), Slice(1, None, 2), ix(x, {4, 1, 1})});
       }},
      {"index_mixed_none_ellipsis_mask",
       {{2, 3, 4}},
       [](V x) {
         return x[0].index({None, Ellipsis, mask(x, {1, 0, 1}, {3}), -2});
       }},
      // index_put
      {"index_put",
       {{4, 5}, {2, 5}},
       [](V x) {
         return index_put(x[0], {ix(x, {3, 1})}, x[1]);
       }},
      {"index_put_accumulate",
       {{6}, {4}},
       [](V x) {
         return index_put(x[0], {ix(x, {1, 4, 1, -1})}, x[1], true);
       }},
      {"index_put_mask_broadcast",
       {{3, 4}, {1}},
       [](V x) {
         return index_put(x[0], {Slice(), mask(x, {0, 1, 1, 0}, {4})}, x[1]);
       }},
      // masks and where
      {"masked_fill",
       {{3, 4}},
       [](V x) {
         return x[0].masked_fill(mask(x, {1, 0, 0, 1}, {4}), 0.5);
       }},
      {"masked_fill_tensor",
       {{3, 4}, {}},
       [](V x) {
         return x[0].masked_fill(mask(x, {0, 1, 1}, {3, 1}), x[1]);
       }},
      {"masked_select",
       {{3, 4}},
       [](V x) {
         return x[0].masked_select(mask(x, {1, 0, 1, 1}, {4}));
       }},
      {"masked_scatter",
       {{2, 3}, {7}},
       [](V x) {
         return x[0].masked_scatter(mask(x, {1, 0, 1, 0, 1, 1}, {2, 3}), x[1]);
       }},
      {"where_scalar_left",
       {{3, 4}},
       [](V x) {
         return where(mask(x, {1, 0, 0, 1}, {4}), 0.25, x[0]);
       }},
      // scatter family
      {"scatter",
       {{3, 4}, {3, 4}},
       [](V x) {
         return x[0].scatter(1, ix(x, {3, 0, 1, 2, 0, 3}, {3, 2}), x[1]);
       }},
      {"scatter_value",
       {{3, 4}},
       [](V x) {
         return x[0].scatter(0, ix(x, {2, 0}, {1, 2}), -0.5);
       }},
      {"scatter_reduce_sum",
       {{3, 4}, {2, 4}},
       [](V x) {
         return x[0].scatter_reduce(0, ix(x, {1, 1, 0, 1, 1, 2, 1, 1}, {2, 4}), x[1], "sum");
       }},
      {"scatter_reduce_mean_no_self",
       {{3, 4}, {2, 4}},
       [](V x) {
         return x[0].scatter_reduce(0, ix(x, {1, 1, 0, 1, 1, 2, 1, 1}, {2, 4}), x[1], "mean",
                                    false);
       }},
      {"scatter_reduce_amax",
       {{3, 4}, {2, 4}},
       [](V x) {
         return x[0].scatter_reduce(0, ix(x, {1, 1, 0, 1, 1, 2, 1, 1}, {2, 4}), x[1], "amax");
       },
       -1,
       1,
       false},
      {"scatter_reduce_prod",
       {{3, 4}, {2, 4}},
       [](V x) {
         return x[0].scatter_reduce(0, ix(x, {1, 1, 0, 1, 1, 2, 1, 1}, {2, 4}), x[1], "prod");
       },
       0.5,
       1.5},
      {"index_add",
       {{4, 3}, {3, 3}},
       [](V x) {
         return x[0].index_add(0, ix(x, {0, 2, 0}), x[1], 2.0);
       }},
      {"index_copy",
       {{4, 3}, {2, 3}},
       [](V x) {
         return x[0].index_copy(0, ix(x, {3, 1}), x[1]);
       }},
      {"index_fill",
       {{4, 3}},
       [](V x) {
         return x[0].index_fill(1, ix(x, {0, 2}), -1.0);
       }},
      {"index_fill_tensor",
       {{4, 3}, {}},
       [](V x) {
         return x[0].index_fill(0, ix(x, {1, 3}), x[1]);
       }},
      {"take_along_dim",
       {{3, 4}},
       [](V x) {
         return x[0].take_along_dim(ix(x, {3, 0, 1, 1, 2, 0}, {3, 2}), 1);
       }},
  };
  return cases;
}

}  // namespace ember::testing
