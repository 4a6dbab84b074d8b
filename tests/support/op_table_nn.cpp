// Op-table rows for the losses of nn/loss.h (mse_loss, l1_loss, binary_cross_entropy_with_logits,
// every reduction, weights and pos_weight), for the fp64 gradcheck and CUDA parity suites.
// The lead chains op_cases_nn() into op_cases(); tests/cpu/test_nn_modules.cpp also runs them.
#include "ember/nn/loss.h"
#include "support/op_table.h"

namespace ember::testing {

const std::vector<OpCase>& op_cases_nn();

namespace {
using V = const std::vector<Tensor>&;
Tensor constant(V x, std::vector<double> values, Shape shape) {
  return from_vector(values, shape, TensorOptions(x[0].dtype()).with_device(x[0].device()));
}
}  // namespace

const std::vector<OpCase>& op_cases_nn() {
  using nn::LossReduction;
  static const std::vector<OpCase> cases = {
      {"mse_loss_mean", {{3, 4}, {3, 4}}, [](V x) { return nn::mse_loss(x[0], x[1]); }},
      {"mse_loss_none",
       {{2, 3, 2}, {2, 3, 2}},
       [](V x) { return nn::mse_loss(x[0], x[1], LossReduction::none); }},
      {"l1_loss_sum",
       {{3, 4}, {3, 4}},
       [](V x) { return nn::l1_loss(x[0], x[1], LossReduction::sum); }},
      {"l1_loss_mean", {{5}, {5}}, [](V x) { return nn::l1_loss(x[0], x[1]); }},
      {"bce_with_logits_mean",
       {{4, 3}, {4, 3}},
       [](V x) { return nn::binary_cross_entropy_with_logits(x[0], x[1]); },
       -3,
       3},
      {"bce_with_logits_none_pos_weight",
       {{4, 3}, {4, 3}},
       [](V x) {
         return nn::binary_cross_entropy_with_logits(
             x[0], x[1],
             nn::BCEWithLogitsOptions()
                 .with_pos_weight(constant(x, {0.5, 2.0, 3.0}, {3}))
                 .with_reduction(LossReduction::none));
       },
       -3,
       3},
      {"bce_with_logits_sum_weight",
       {{2, 3}, {2, 3}},
       [](V x) {
         return nn::binary_cross_entropy_with_logits(
             x[0], x[1],
             nn::BCEWithLogitsOptions()
                 .with_weight(constant(x, {0.2, 1.5}, {2, 1}))
                 .with_pos_weight(constant(x, {2.0}, {1}))
                 .with_reduction(LossReduction::sum));
       },
       -3,
       3},
  };
  return cases;
}

}  // namespace ember::testing
