// Op-table rows (see op_table.h) for activations, softmax, the class losses, pooling, dropout and
// the layout conversion: fp64 gradcheck on the CPU and CUDA-vs-CPU parity. Shapes stay small for
// gradcheck (it builds the full Jacobian); long rows are parity-only (fp64_gradcheck false).
// Class-index targets and class weights are constants made on the input's device inside each
// function. Dropout draws from a fresh generator with a fixed seed on every call, so gradcheck's
// repeated evaluations and both devices see the same mask.
#include "ember/ops/activation.h"
#include "ember/ops/dropout.h"
#include "ember/ops/layout.h"
#include "ember/ops/pooling.h"
#include "ember/ops/softmax.h"
#include "support/op_table.h"

namespace ember::testing {

namespace {
using V = const std::vector<Tensor>&;
Tensor targets(V x, std::vector<double> v, Shape s) {
  return from_vector(v, s, TensorOptions(DType::i64).with_device(x[0].device()));
}
Tensor class_weights(V x, std::vector<double> v) {
  return from_vector(v, {int64_t(v.size())}, TensorOptions(DType::f32).with_device(x[0].device()));
}
CrossEntropyOptions ce(LossReduction r) { return CrossEntropyOptions().with_reduction(r); }
}  // namespace

const std::vector<OpCase>& op_cases_act() {
  static const std::vector<OpCase> cases = {
      // activations
      {"leaky_relu", {{4, 5}}, [](V x) { return leaky_relu(x[0], 0.1); }},
      {"elu", {{4, 5}}, [](V x) { return elu(x[0], 1.3); }, -2, 2},
      {"gelu", {{4, 5}}, [](V x) { return gelu(x[0]); }, -3, 3},
      {"gelu_tanh", {{4, 5}}, [](V x) { return gelu(x[0], GeluApproximation::tanh); }, -3, 3},
      {"silu", {{2, 3, 2, 2}}, [](V x) { return silu(x[0]); }, -3, 3},
      // softmax family
      {"softmax_last", {{4, 9}}, [](V x) { return softmax(x[0], -1); }, -3, 3},
      {"softmax_dim0", {{5, 3}}, [](V x) { return softmax(x[0], 0); }, -3, 3},
      {"softmax_dim1_4d", {{2, 4, 3, 2}}, [](V x) { return softmax(x[0], 1); }, -3, 3},
      {"log_softmax_last", {{3, 7}}, [](V x) { return log_softmax(x[0], 1); }, -3, 3},
      {"log_softmax_mid", {{2, 5, 3}}, [](V x) { return log_softmax(x[0], 1); }, -3, 3},
      {"softmax_long_rows",
       {{3, 1500}},
       [](V x) { return softmax(x[0], 1) * 100.0; },
       -4,
       4,
       true,
       false},
      {"log_softmax_long_rows",
       {{2, 3000}},
       [](V x) { return log_softmax(x[0], 1); },
       -4,
       4,
       true,
       false},
      // class losses
      {"cross_entropy",
       {{5, 7}},
       [](V x) {
         return cross_entropy(x[0], targets(x, {0, 6, 3, 3, 1}, {5}));
       },
       -2,
       2},
      {"cross_entropy_none",
       {{4, 6}},
       [](V x) {
         return cross_entropy(x[0], targets(x, {5, 0, 2, 2}, {4}), ce(LossReduction::none));
       },
       -2,
       2},
      {"cross_entropy_sum_smooth",
       {{4, 6}},
       [](V x) {
         return cross_entropy(x[0], targets(x, {1, 4, 0, 5}, {4}),
                              ce(LossReduction::sum).with_label_smoothing(0.2));
       },
       -2,
       2},
      {"cross_entropy_weight_ignore_smooth",
       {{5, 4}},
       [](V x) {
         return cross_entropy(x[0], targets(x, {3, -100, 0, 2, 3}, {5}),
                              CrossEntropyOptions()
                                  .with_weight(class_weights(x, {0.5, 2.0, 1.0, 3.0}))
                                  .with_label_smoothing(0.1));
       },
       -2,
       2},
      {"cross_entropy_spatial",
       {{2, 4, 3, 2}},
       [](V x) {
         return cross_entropy(x[0], targets(x, {0, 1, 2, 3, 3, 2, 1, 0, 0, 2, 1, 3}, {2, 3, 2}),
                              ce(LossReduction::none).with_ignore_index(2));
       },
       -2,
       2},
      {"cross_entropy_long_rows",
       {{3, 2500}},
       [](V x) {
         return cross_entropy(x[0], targets(x, {7, 2499, 1200}, {3}),
                              ce(LossReduction::none).with_label_smoothing(0.05));
       },
       -4,
       4,
       true,
       false},
      {"nll_loss",
       {{5, 4}},
       [](V x) {
         return nll_loss(log_softmax(x[0], 1), targets(x, {3, 1, -100, 0, 3}, {5}),
                         NllLossOptions().with_weight(class_weights(x, {1.0, 0.5, 2.0, 1.5})));
       },
       -2,
       2},
      // pooling
      {"max_pool2d", {{2, 3, 7, 6}}, [](V x) { return max_pool2d(x[0], {3}, {2}, {1}); }},
      {"max_pool2d_ceil_dilated",
       {{1, 2, 8, 7}},
       [](V x) {
         return max_pool2d(x[0], {2, 3}, {2, 1}, {1, 0}, {2, 1}, true);
       }},
      {"max_pool1d", {{2, 3, 9}}, [](V x) { return max_pool1d(x[0], {3}, {2}); }},
      {"max_pool3d", {{1, 2, 4, 5, 4}}, [](V x) { return max_pool3d(x[0], {2}, {2}, {1}); }},
      {"avg_pool2d", {{2, 3, 7, 6}}, [](V x) { return avg_pool2d(x[0], {3}, {2}, {1}); }},
      {"avg_pool2d_ceil_exclude_pad",
       {{1, 2, 7, 8}},
       [](V x) {
         return avg_pool2d(x[0], {3, 2}, {2, 3}, {1, 1}, true, false);
       }},
      {"avg_pool1d", {{2, 2, 10}}, [](V x) { return avg_pool1d(x[0], {4}, {3}, {2}); }},
      {"avg_pool3d",
       {{1, 2, 5, 4, 4}},
       [](V x) {
         return avg_pool3d(x[0], {3, 2, 2}, {2}, {1});
       }},
      {"adaptive_avg_pool2d",
       {{2, 3, 7, 5}},
       [](V x) {
         return adaptive_avg_pool2d(x[0], {3, 4});
       }},
      {"adaptive_avg_pool1d", {{2, 2, 11}}, [](V x) { return adaptive_avg_pool1d(x[0], {4}); }},
      {"global_avg_pool2d", {{2, 5, 4, 3}}, [](V x) { return global_avg_pool2d(x[0]); }},
      // dropout and layout
      {"dropout",
       {{4, 7}},
       [](V x) {
         Generator gen(x[0].device(), 7);
         return dropout(x[0], 0.3, true, &gen);
       }},
      {"nchw_to_nhwc", {{2, 3, 4, 5}}, [](V x) { return nchw_to_nhwc(x[0]) * 2.0; }},
  };
  return cases;
}

}  // namespace ember::testing
