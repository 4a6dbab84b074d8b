// Rows of the shared gradcheck / CUDA parity table (support/op_table.h) for the normalization ops
// of ops/norm.h: batch norm (2-D to 5-D, training with running statistics, eval, no affine) and
// its fused ReLU / residual-add-ReLU tails, layer norm, group norm and instance norm.
// op_cases_norm() is meant to be chained into op_cases(); tests/cpu/test_norm.cpp and
// tests/cuda/test_norm_cuda.cpp also run these rows directly.
#include "ember/ops/norm.h"
#include "support/op_table.h"

namespace ember::testing {

const std::vector<OpCase>& op_cases_norm();

namespace {
using V = const std::vector<Tensor>&;

TensorOptions options_of(const Tensor& t) {
  return TensorOptions(t.dtype()).with_device(t.device());
}

// Fresh running statistics for a training call (buffers, never inputs of the gradient check).
Tensor fresh_running_mean(const Tensor& x) { return zeros({x.size(1)}, options_of(x)); }
Tensor fresh_running_var(const Tensor& x) { return ones({x.size(1)}, options_of(x)); }

// Eval-mode running statistics: constants of the op (never derived from the checked inputs, whose
// perturbation would then change them behind autograd's back).
Tensor eval_mean(const Tensor& x) {
  return arange(0, double(x.size(1)), 1, options_of(x)) * 0.1 - 0.2;
}
Tensor eval_var(const Tensor& x) {
  return arange(0, double(x.size(1)), 1, options_of(x)) * 0.25 + 0.5;
}

Tensor bn_train(V x, bool with_running) {
  Tensor rm = with_running ? fresh_running_mean(x[0]) : Tensor();
  Tensor rv = with_running ? fresh_running_var(x[0]) : Tensor();
  return batch_norm(x[0], x[1], x[2], rm, rv, true, 0.1, 1e-5);
}
}  // namespace

const std::vector<OpCase>& op_cases_norm() {
  static const std::vector<OpCase> cases = {
      // batch norm, training (batch statistics), 2-D to 5-D
      {"batch_norm_train_2d", {{6, 5}, {5}, {5}}, [](V x) { return bn_train(x, false); }},
      {"batch_norm_train_3d", {{3, 4, 5}, {4}, {4}}, [](V x) { return bn_train(x, true); }},
      {"batch_norm_train_4d", {{3, 5, 4, 3}, {5}, {5}}, [](V x) { return bn_train(x, true); }},
      {"batch_norm_train_5d", {{2, 3, 2, 3, 2}, {3}, {3}}, [](V x) { return bn_train(x, false); }},
      {"batch_norm_train_noaffine",
       {{4, 3, 5}},
       [](V x) { return batch_norm(x[0], {}, {}, {}, {}, true, 0.1, 1e-5); }},
      // batch norm, eval (running statistics)
      {"batch_norm_eval_4d",
       {{3, 5, 4, 3}, {5}, {5}},
       [](V x) { return batch_norm(x[0], x[1], x[2], eval_mean(x[0]), eval_var(x[0]), false); }},
      // fused tails
      {"batch_norm_relu_train",
       {{3, 5, 4, 3}, {5}, {5}},
       [](V x) {
         return batch_norm_relu(x[0], x[1], x[2], fresh_running_mean(x[0]), fresh_running_var(x[0]),
                                true);
       }},
      {"batch_norm_relu_eval",
       {{4, 3, 6}, {3}, {3}},
       [](V x) {
         return batch_norm_relu(x[0], x[1], x[2], eval_mean(x[0]), eval_var(x[0]), false);
       }},
      {"batch_norm_add_relu_train",
       {{3, 5, 4, 3}, {3, 5, 4, 3}, {5}, {5}},
       [](V x) { return batch_norm_add_relu(x[0], x[1], x[2], x[3], {}, {}, true); }},
      {"batch_norm_add_relu_eval",
       {{2, 4, 3, 3}, {2, 4, 3, 3}, {4}, {4}},
       [](V x) {
         return batch_norm_add_relu(x[0], x[1], x[2], x[3], eval_mean(x[0]), eval_var(x[0]), false);
       }},
      // layer norm
      {"layer_norm_last",
       {{4, 6}, {6}, {6}},
       [](V x) { return layer_norm(x[0], {6}, x[1], x[2]); }},
      {"layer_norm_2dims",
       {{3, 4, 5}, {4, 5}, {4, 5}},
       [](V x) {
         return layer_norm(x[0], {4, 5}, x[1], x[2]);
       }},
      {"layer_norm_noaffine", {{5, 7}}, [](V x) { return layer_norm(x[0], {7}); }},
      // group norm and instance norm
      {"group_norm_4d",
       {{2, 6, 3, 2}, {6}, {6}},
       [](V x) { return group_norm(x[0], 3, x[1], x[2]); }},
      {"group_norm_3d", {{3, 4, 5}, {4}, {4}}, [](V x) { return group_norm(x[0], 2, x[1], x[2]); }},
      {"group_norm_2d_noaffine", {{4, 6}}, [](V x) { return group_norm(x[0], 2); }},
      {"instance_norm",
       {{2, 3, 4, 3}, {3}, {3}},
       [](V x) {
         return instance_norm(x[0], x[1], x[2], fresh_running_mean(x[0]), fresh_running_var(x[0]));
       }},
  };
  return cases;
}

}  // namespace ember::testing
