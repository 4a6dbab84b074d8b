// Op-table rows (see op_table.h) for the shape ops of ops/shape_more.h: dim moves, splits,
// diagonals, repeats, flips, rolls, triangles, padding in every mode and the pixel shuffles.
// Multi-output ops (splits, meshgrid) are joined into one output by cat so one row checks all.
#include "support/op_table.h"

namespace ember::testing {

namespace {
using V = const std::vector<Tensor>&;
Tensor cat_flat(const std::vector<Tensor>& parts) {
  std::vector<Tensor> flat;
  for (const Tensor& p : parts) flat.push_back(p.reshape({-1}));
  return cat(flat, 0);
}
}  // namespace

const std::vector<OpCase>& op_cases_shape() {
  static const std::vector<OpCase> cases = {
      {"movedim",
       {{2, 3, 4}},
       [](V x) {
         return x[0].movedim({0, -1}, {-1, 1}) * 1.0;
       }},
      {"swapaxes", {{2, 3, 4}}, [](V x) { return swapaxes(x[0], 0, -1) * 1.0; }},
      {"unflatten",
       {{2, 12}},
       [](V x) {
         return x[0].unflatten(-1, {3, -1}) * 1.0;
       }},
      {"narrow_copy", {{5, 4}}, [](V x) { return x[0].narrow_copy(0, 1, 3); }},
      {"tensor_split_sections", {{7, 3}}, [](V x) { return cat_flat(x[0].tensor_split(3, 0)); }},
      {"tensor_split_indices",
       {{3, 6}},
       [](V x) {
         return cat_flat(x[0].tensor_split(Shape{1, 4, 9}, -1));
       }},
      {"hsplit", {{3, 4}}, [](V x) { return cat_flat(x[0].hsplit(2)); }},
      {"diagonal", {{3, 4}}, [](V x) { return x[0].diagonal(1) * 1.0; }},
      {"diagonal_neg_batch", {{2, 4, 3}}, [](V x) { return x[0].diagonal(-1, 1, 2) * 1.0; }},
      {"diagonal_dims_swapped", {{3, 2, 4}}, [](V x) { return x[0].diagonal(0, 2, 0) * 1.0; }},
      {"meshgrid_xy",
       {{3}, {2}},
       [](V x) {
         return cat_flat(meshgrid({x[0], x[1]}, "xy"));
       }},
      {"cartesian_prod",
       {{3}, {2}},
       [](V x) {
         return cartesian_prod({x[0], x[1]});
       }},
      {"repeat",
       {{2, 3}},
       [](V x) {
         return x[0].repeat({2, 1, 2});
       }},
      {"tile", {{2, 3}}, [](V x) { return x[0].tile({2}); }},
      {"flip",
       {{2, 3, 4}},
       [](V x) {
         return x[0].flip({0, -1});
       }},
      {"roll",
       {{3, 4}},
       [](V x) {
         return x[0].roll({1, -5}, {0, 1});
       }},
      {"roll_flat", {{3, 4}}, [](V x) { return x[0].roll({5}); }},
      {"rot90",
       {{2, 3, 4}},
       [](V x) {
         return x[0].rot90(1, {1, 2});
       }},
      {"rot90_k3", {{3, 4}}, [](V x) { return x[0].rot90(-1); }},
      {"repeat_interleave", {{2, 3}}, [](V x) { return x[0].repeat_interleave(2, 1); }},
      {"repeat_interleave_tensor",
       {{3, 2}},
       [](V x) {
         return x[0].repeat_interleave(
             from_vector({2, 0, 3}, {3}, TensorOptions(DType::i64).with_device(x[0].device())), 0);
       }},
      {"diag_embed", {{2, 3}}, [](V x) { return x[0].diag_embed(1, 0, 2); }},
      {"diag_1d", {{3}}, [](V x) { return x[0].diag(-1); }},
      {"diag_2d", {{3, 4}}, [](V x) { return x[0].diag(1); }},
      {"block_diag",
       {{2, 3}, {3}, {}},
       [](V x) {
         return block_diag({x[0], x[1], x[2]});
       }},
      {"trace", {{4, 3}}, [](V x) { return x[0].trace(); }},
      {"tril", {{2, 3, 4}}, [](V x) { return x[0].tril(); }},
      {"triu_offset", {{4, 3}}, [](V x) { return x[0].triu(-1); }},
      {"pad_constant",
       {{2, 3, 4}},
       [](V x) {
         return pad(x[0], {1, 2, -1, 1}, "constant", 0.5);
       }},
      {"pad_reflect_1d",
       {{2, 5}},
       [](V x) {
         return pad(x[0], {2, 4}, "reflect");
       }},
      {"pad_reflect_2d",
       {{1, 2, 3, 4}},
       [](V x) {
         return pad(x[0], {1, 3, 2, 1}, "reflect");
       }},
      {"pad_replicate_2d",
       {{2, 3, 3}},
       [](V x) {
         return pad(x[0], {2, 1, 0, 3}, "replicate");
       }},
      {"pad_circular_1d",
       {{2, 3, 4}},
       [](V x) {
         return pad(x[0], {4, 1}, "circular");
       }},
      {"pad_replicate_3d",
       {{1, 2, 2, 3}},
       [](V x) {
         return pad(x[0], {1, 1, 2, 0, 0, 1}, "replicate");
       }},
      {"pad_circular_3d",
       {{1, 1, 2, 2, 3}},
       [](V x) {
         return pad(x[0], {1, 2, 2, 0, 1, 1}, "circular");
       }},
      {"pixel_shuffle", {{1, 8, 2, 3}}, [](V x) { return pixel_shuffle(x[0], 2); }},
      {"pixel_unshuffle", {{2, 4, 6}}, [](V x) { return pixel_unshuffle(x[0], 2); }},
  };
  return cases;
}

}  // namespace ember::testing
