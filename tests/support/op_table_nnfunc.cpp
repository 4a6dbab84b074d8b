// Op-table rows (see op_table.h) for the functionals of nn/functional_more.h: the activations of
// nn/activation_more.h, the distances and normalizations, and the losses of nn/loss_more.h, in
// fp64 gradcheck on the CPU and CUDA-vs-CPU parity. Input ranges keep samples off each function's
// kinks in expectation (uniform draws land within gradcheck's step of a kink with negligible
// probability); class indices, +-1 labels and class weights are constants made on the input's
// device inside each function. The random ones (rrelu in training, gumbel_softmax) draw from a
// fresh generator with a fixed seed on every call, so gradcheck's evaluations and both devices
// see the same noise.
#include "ember/nn/functional_more.h"
#include "support/op_table.h"

namespace ember::testing {

namespace {
using V = const std::vector<Tensor>&;
namespace F = nn::functional;
using nn::LossReduction;
Tensor consts(V x, std::vector<double> v, Shape s, DType d) {
  return from_vector(v, s, TensorOptions(d).with_device(x[0].device()));
}
// +-1 labels in the inputs' dtype.
Tensor signs(V x, std::vector<double> v) { return consts(x, v, {int64_t(v.size())}, x[0].dtype()); }
}  // namespace

const std::vector<OpCase>& op_cases_nnfunc() {
  static const std::vector<OpCase> cases = {
      // activations
      {"softplus", {{4, 5}}, [](V x) { return F::softplus(x[0]); }, -3, 3},
      {"softplus_beta_threshold",
       {{4, 5}},
       [](V x) { return F::softplus(x[0], F::SoftplusFuncOptions().beta(2).threshold(1.5)); },
       -2,
       2},
      {"softsign", {{3, 4}}, [](V x) { return F::softsign(x[0]); }, -3, 3},
      {"hardtanh",
       {{4, 5}},
       [](V x) { return F::hardtanh(x[0], F::HardtanhFuncOptions().min_val(-0.5).max_val(0.7)); }},
      {"relu6", {{4, 5}}, [](V x) { return F::relu6(x[0]); }, -8, 8},
      {"hardsigmoid", {{4, 5}}, [](V x) { return F::hardsigmoid(x[0]); }, -5, 5},
      {"hardswish", {{4, 5}}, [](V x) { return F::hardswish(x[0]); }, -5, 5},
      {"mish", {{2, 3, 2, 2}}, [](V x) { return F::mish(x[0]); }, -4, 4},
      {"celu", {{4, 5}}, [](V x) { return F::celu(x[0], F::CELUFuncOptions().alpha(1.5)); }, -3, 3},
      {"selu", {{4, 5}}, [](V x) { return F::selu(x[0]); }, -3, 3},
      {"glu_last", {{3, 6}}, [](V x) { return F::glu(x[0]); }, -2, 2},
      {"glu_dim1", {{2, 4, 3}}, [](V x) { return F::glu(x[0], 1); }, -2, 2},
      {"prelu_channels", {{2, 3, 4}, {3}}, [](V x) { return F::prelu(x[0], x[1]); }},
      {"prelu_scalar", {{5, 2}, {1}}, [](V x) { return F::prelu(x[0], x[1]); }},
      {"rrelu_eval", {{4, 5}}, [](V x) { return F::rrelu(x[0]); }},
      {"rrelu_train",
       {{4, 5}},
       [](V x) {
         Generator gen(x[0].device(), 11);
         return F::rrelu(x[0], F::RReLUFuncOptions().training(true).generator(&gen));
       }},
      {"logsigmoid", {{4, 5}}, [](V x) { return F::logsigmoid(x[0]); }, -4, 4},
      {"softmin", {{3, 5}}, [](V x) { return F::softmin(x[0], 1); }, -3, 3},
      {"gumbel_softmax",
       {{3, 5}},
       [](V x) {
         Generator gen(x[0].device(), 5);
         return F::gumbel_softmax(x[0], F::GumbelSoftmaxFuncOptions().tau(0.7).generator(&gen));
       },
       -2,
       2},
      {"gumbel_softmax_hard",
       {{3, 5}},
       [](V x) {
         Generator gen(x[0].device(), 5);
         // The hard sample's value is a one-hot; weighting it keeps the straight-through
         // gradient (the soft sample's) visible to the CUDA parity check.
         return F::gumbel_softmax(x[0], F::GumbelSoftmaxFuncOptions().hard(true).generator(&gen)) *
                consts(x, {1, 2, 3, 4, 5}, {5}, x[0].dtype());
       },
       -2,
       2,
       false,  // a bf16 rounding of the noise can move the argmax: the one-hot differs
       false,  // straight-through: the gradient is the soft sample's, not the one-hot's (0)
       false},
      {"threshold",
       {{4, 5}},
       [](V x) { return F::threshold(x[0], F::ThresholdFuncOptions(0.1, -2.0)); }},
      {"tanhshrink", {{4, 5}}, [](V x) { return F::tanhshrink(x[0]); }, -2, 2},
      {"softshrink", {{4, 5}}, [](V x) { return F::softshrink(x[0], 0.3); }},
      {"hardshrink", {{4, 5}}, [](V x) { return F::hardshrink(x[0]); }},
      // distances and normalization
      {"cosine_similarity", {{4, 5}, {4, 5}}, [](V x) { return F::cosine_similarity(x[0], x[1]); }},
      {"cosine_similarity_bcast_dim0",
       {{3, 4}, {3, 1}},
       [](V x) {
         return F::cosine_similarity(x[0], x[1], F::CosineSimilarityFuncOptions().dim(0));
       }},
      {"pairwise_distance", {{4, 5}, {4, 5}}, [](V x) { return F::pairwise_distance(x[0], x[1]); }},
      {"pairwise_distance_p1_keepdim",
       {{3, 5}, {5}},
       [](V x) {
         return F::pairwise_distance(x[0], x[1],
                                     F::PairwiseDistanceFuncOptions().p(1).keepdim(true));
       }},
      {"cdist", {{2, 3, 4}, {2, 5, 4}}, [](V x) { return F::cdist(x[0], x[1]); }},
      {"cdist_p3", {{3, 4}, {2, 4}}, [](V x) { return F::cdist(x[0], x[1], 3.0); }},
      {"normalize", {{4, 5}}, [](V x) { return F::normalize(x[0]); }},
      {"normalize_p1_last",
       {{3, 4}},
       [](V x) { return F::normalize(x[0], F::NormalizeFuncOptions().p(1).dim(-1)); }},
      {"local_response_norm",
       {{2, 5, 3, 2}},
       [](V x) {
         return F::local_response_norm(x[0], F::LocalResponseNormFuncOptions(3).alpha(0.5).k(2));
       },
       -2,
       2},
      {"local_response_norm_3d_even",
       {{2, 4, 3}},
       [](V x) {
         return F::local_response_norm(x[0], F::LocalResponseNormFuncOptions(2).alpha(1));
       },
       -2,
       2},
      // losses
      {"smooth_l1_loss",
       {{4, 5}, {4, 5}},
       [](V x) { return F::smooth_l1_loss(x[0], x[1], F::SmoothL1LossFuncOptions().beta(0.5)); }},
      {"smooth_l1_loss_none",
       {{3, 4}, {3, 4}},
       [](V x) {
         return F::smooth_l1_loss(x[0], x[1],
                                  F::SmoothL1LossFuncOptions().reduction(LossReduction::none));
       }},
      {"huber_loss",
       {{4, 5}, {4, 5}},
       [](V x) {
         return F::huber_loss(x[0], x[1],
                              F::HuberLossFuncOptions().delta(0.6).reduction(LossReduction::sum));
       }},
      {"binary_cross_entropy",
       {{4, 5}, {4, 5}},
       [](V x) { return F::binary_cross_entropy(x[0], x[1]); },
       0.05,
       0.95},
      {"binary_cross_entropy_weight",
       {{3, 4}, {3, 4}},
       [](V x) {
         return F::binary_cross_entropy(x[0], x[1],
                                        F::BinaryCrossEntropyFuncOptions()
                                            .weight(consts(x, {0.5, 1, 2, 0.25}, {4}, x[0].dtype()))
                                            .reduction(LossReduction::none));
       },
       0.05,
       0.95},
      {"kl_div_batchmean",
       {{3, 5}, {3, 5}},
       [](V x) {
         return F::kl_div(x[0], x[1],
                          F::KLDivFuncOptions().reduction(nn::KLDivReduction::batchmean));
       },
       0.1,
       1},
      {"kl_div_log_target_none",
       {{3, 4}, {3, 4}},
       [](V x) {
         return F::kl_div(
             x[0], x[1],
             F::KLDivFuncOptions().log_target(true).reduction(nn::KLDivReduction::none));
       },
       -2,
       0},
      {"poisson_nll_loss",
       {{4, 5}, {4, 5}},
       [](V x) { return F::poisson_nll_loss(x[0], x[1]); },
       0,
       2},
      {"poisson_nll_loss_full_no_log",
       {{4, 5}, {4, 5}},
       [](V x) {
         return F::poisson_nll_loss(x[0], x[1],
                                    F::PoissonNLLLossFuncOptions().log_input(false).full(true));
       },
       0.1,
       3},
      {"gaussian_nll_loss",
       {{4, 5}, {4, 5}, {4, 5}},
       [](V x) { return F::gaussian_nll_loss(x[0], x[1], x[2]); },
       0.1,
       2},
      {"gaussian_nll_loss_full_var_last1",
       {{4, 3}, {4, 3}, {4, 1}},
       [](V x) {
         return F::gaussian_nll_loss(
             x[0], x[1], x[2],
             F::GaussianNLLLossFuncOptions().full(true).reduction(LossReduction::sum));
       },
       0.1,
       2},
      {"margin_ranking_loss",
       {{5}, {5}},
       [](V x) {
         return F::margin_ranking_loss(x[0], x[1], signs(x, {1, -1, -1, 1, 1}),
                                       F::MarginRankingLossFuncOptions().margin(0.1));
       }},
      {"hinge_embedding_loss",
       {{6}},
       [](V x) {
         return F::hinge_embedding_loss(x[0], signs(x, {1, -1, -1, 1, -1, 1}),
                                        F::HingeEmbeddingLossFuncOptions().margin(0.5));
       }},
      {"multilabel_soft_margin_loss",
       {{3, 4}, {3, 4}},
       [](V x) {
         // Soft targets in (0, 1) made from the second input, so the target's gradient is
         // checked too.
         return F::multilabel_soft_margin_loss(x[0], x[1] * 0.5 + 0.5,
                                               F::MultilabelSoftMarginLossFuncOptions().weight(
                                                   consts(x, {1, 0.5, 2, 1.5}, {4}, x[0].dtype())));
       },
       -2,
       2},
      {"multi_margin_loss",
       {{4, 5}},
       [](V x) {
         return F::multi_margin_loss(x[0], consts(x, {0, 4, 2, 2}, {4}, DType::i64),
                                     F::MultiMarginLossFuncOptions().margin(0.7));
       }},
      {"multi_margin_loss_p2_weight",
       {{3, 4}},
       [](V x) {
         return F::multi_margin_loss(x[0], consts(x, {3, 0, 1}, {3}, DType::i64),
                                     F::MultiMarginLossFuncOptions().p(2).weight(
                                         consts(x, {1, 0.5, 2, 1.5}, {4}, x[0].dtype())));
       }},
      {"cosine_embedding_loss",
       {{4, 5}, {4, 5}},
       [](V x) {
         return F::cosine_embedding_loss(x[0], x[1], signs(x, {1, -1, 1, -1}),
                                         F::CosineEmbeddingLossFuncOptions().margin(-0.5));
       }},
      {"triplet_margin_loss",
       {{4, 5}, {4, 5}, {4, 5}},
       [](V x) {
         return F::triplet_margin_loss(x[0], x[1], x[2],
                                       F::TripletMarginLossFuncOptions().margin(2));
       }},
      {"triplet_margin_loss_swap_p1",
       {{4, 5}, {4, 5}, {4, 5}},
       [](V x) {
         return F::triplet_margin_loss(x[0], x[1], x[2],
                                       F::TripletMarginLossFuncOptions().margin(3).p(1).swap(true));
       }},
  };
  return cases;
}

}  // namespace ember::testing
