// Op-table rows (see op_table.h) for the nn breadth ops: embedding_bag in every mode and input
// form, ctc_loss through log_softmax (its gradient is PyTorch's, exact only with respect to the
// logits), conv_transpose1d/3d and bilinear. Index tensors and lengths are
// constants made on the input's device inside each function. embedding_bag and ctc_loss have no
// double backward (as PyTorch), and ctc_loss is float32/float64 only.
#include "support/op_table.h"

namespace ember::testing {

namespace {
using V = const std::vector<Tensor>&;
Tensor ix(V x, std::vector<double> v) {
  const int64_t n = int64_t(v.size());
  return from_vector(v, {n}, TensorOptions(DType::i64).with_device(x[0].device()));
}
Tensor ix2(V x, std::vector<double> v, Shape s) {
  return from_vector(v, s, TensorOptions(DType::i64).with_device(x[0].device()));
}
EmbeddingBagParams bag_params(V x, EmbeddingBagMode mode) {
  EmbeddingBagParams p;
  p.offsets = ix(x, {0, 2, 2, 5});
  p.mode = mode;
  return p;
}
const std::vector<double> kBagIndices = {1, 2, 4, 5, 4, 3, 2, 9};
}  // namespace

const std::vector<OpCase>& op_cases_nn_extra() {
  static const std::vector<OpCase> cases = {
      {"embedding_bag_sum",
       {{10, 3}},
       [](V x) {
         return embedding_bag(ix(x, kBagIndices), x[0], bag_params(x, EmbeddingBagMode::sum));
       },
       -1,
       1,
       true,
       true,
       false},
      {"embedding_bag_mean_last_offset",
       {{10, 3}},
       [](V x) {
         EmbeddingBagParams p = bag_params(x, EmbeddingBagMode::mean);
         p.offsets = ix(x, {0, 2, 2, 5, 7});
         p.include_last_offset = true;
         return embedding_bag(ix(x, kBagIndices), x[0], p);
       },
       -1,
       1,
       true,
       true,
       false},
      {"embedding_bag_max",
       {{10, 3}},
       [](V x) {
         return embedding_bag(ix(x, kBagIndices), x[0], bag_params(x, EmbeddingBagMode::max));
       },
       -1,
       1,
       true,
       true,
       false},
      {"embedding_bag_2d_mean_padding",
       {{6, 4}},
       [](V x) {
         EmbeddingBagParams p;
         p.padding_idx = 4;
         return embedding_bag(ix2(x, {1, 4, 0, 4, 4, 5, 3, 3, 1}, {3, 3}), x[0], p);
       },
       -1,
       1,
       true,
       true,
       false},
      {"embedding_bag_per_sample_weights",
       {{10, 3}, {8}},
       [](V x) {
         EmbeddingBagParams p = bag_params(x, EmbeddingBagMode::sum);
         p.per_sample_weights = x[1];
         p.padding_idx = 2;
         return embedding_bag(ix(x, kBagIndices), x[0], p);
       },
       -1,
       1,
       true,
       true,
       false},
      {"ctc_loss_mean",
       {{6, 3, 5}},
       [](V x) {
         return ctc_loss(log_softmax(x[0], 2), ix2(x, {1, 2, 2, 3, 1, 0, 4, 4, 4}, {3, 3}),
                         std::vector<int64_t>{6, 5, 4}, std::vector<int64_t>{3, 2, 0});
       },
       -2,
       2,
       false,
       true,
       false},
      {"ctc_loss_none_concatenated",
       {{5, 2, 4}},
       [](V x) {
         CtcLossParams p;
         p.reduction = LossReduction::none;
         p.blank = 3;
         return ctc_loss(log_softmax(x[0], 2), ix(x, {1, 1, 0, 2}), std::vector<int64_t>{5, 4},
                         std::vector<int64_t>{2, 2}, p);
       },
       -2,
       2,
       false,
       true,
       false},
      {"conv_transpose1d",
       {{2, 4, 5}, {4, 3, 3}, {6}},
       [](V x) {
         ConvTranspose1dParams p;
         p.stride = 2;
         p.padding = 1;
         p.output_padding = 1;
         p.groups = 2;
         return conv_transpose1d(x[0], x[1], x[2], p);
       }},
      {"conv_transpose3d",
       {{1, 4, 3, 3, 2}, {4, 3, 2, 3, 2}, {6}},
       [](V x) {
         ConvTranspose3dParams p;
         p.stride = {2, 1, 2};
         p.padding = {1, 1, 0};
         p.output_padding = {1, 0, 1};
         p.dilation = {1, 2, 1};
         p.groups = 2;
         return conv_transpose3d(x[0], x[1], x[2], p);
       }},
      {"bilinear",
       {{2, 3, 3}, {2, 3, 4}, {5, 3, 4}, {5}},
       [](V x) { return nn::bilinear(x[0], x[1], x[2], x[3]); }},
  };
  return cases;
}

}  // namespace ember::testing
