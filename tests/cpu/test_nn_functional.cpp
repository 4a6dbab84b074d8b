// nn functionals of nn/functional_more.h on the CPU: values against libtorch 1.13.1 (computed once
// by a throwaway program against torch::nn::functional and pasted here; gaussian_nll_loss, which
// libtorch lacks, from torch/nn/functional.py's formula run op for op in libtorch; smooth_l1 with
// beta passed as libtorch 1.13's separate argument, since its options' beta is ignored), fp64
// gradcheck and gradgradcheck of their op-table rows, the modules (options, printing, PReLU's
// parameter, RReLU's train / eval), and the errors bad input raises.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ember/autograd/gradcheck.h"
#include "ember/ember.h"
#include "ember/nn/nn.h"
#include "support/errors.h"
#include "support/op_table.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
namespace F = ember::nn::functional;
using nn::LossReduction;

namespace {

Tensor T(std::vector<double> v) { return from_vector(v, {int64_t(v.size())}, DType::f64); }

// libtorch 1.13.1's outputs (flattened), named as in the Ember expressions below.
const std::map<std::string, std::vector<double>>& libtorch_values() {
  static const std::map<std::string, std::vector<double>> values = {
      {"softplus",
       {0.078889734292549626, 0.26328246733803123, 0.55435524446852713, 0.91301525239995263,
        1.3873353251154308, 2.7650435617765909}},
      {"softplus_b2_t3",
       {0.0033576742445590342, 0.043418076076974843, 0.21874397524294281, 0.58555033297388892,
        1.1525416598843481, 2.7000000000000002}},
      {"softsign",
       {-0.7142857142857143, -0.54545454545454541, -0.23076923076923075, 0.28571428571428575,
        0.52380952380952384, 0.72972972972972971}},
      {"hardtanh", {-1, -1, -0.29999999999999999, 0.40000000000000002, 1, 1}},
      {"relu6", {0, 0, 0, 1.2000000000000002, 3.3000000000000003, 6}},
      {"hardsigmoid",
       {0, 0.10000000000000002, 0.39999999999999997, 0.6333333333333333, 0.8666666666666667, 1}},
      {"hardswish",
       {-0, -0.24000000000000002, -0.23999999999999999, 0.50666666666666671, 1.906666666666667,
        5.4000000000000012}},
      {"mish",
       {-0.19681620390653337, -0.30883579631486258, -0.15113317713833455, 0.28903053407236312,
        0.97084157989472353, 2.6786701114408404}},
      {"celu",
       {-1.2166865957436572, -0.82600655382416766, -0.27190387038302727, 0.40000000000000002,
        1.1000000000000001, 2.7000000000000002}},
      {"selu",
       {-1.6137857588732423, -1.2285699954174889, -0.45566731537912203, 0.42028039494219221,
        1.1557710860910286, 2.8368926658597973}},
      {"glu", {-0.57868804125245599, -0.1796062980337356, 1.0307293083373039}},
      {"prelu",
       {-0.25, -0.23999999999999999, -0.089999999999999997, 0.40000000000000002, 1.1000000000000001,
        2.7000000000000002}},
      {"rrelu_eval",
       {-0.57291666666666663, -0.27499999999999997, -0.068749999999999992, 0.40000000000000002,
        1.1000000000000001, 2.7000000000000002}},
      {"logsigmoid",
       {-2.5788897342925496, -1.4632824673380311, -0.85435524446852718, -0.5130152523999526,
        -0.28733532511543081, -0.065043561776590542}},
      {"softmin",
       {0.94784643692158232, 0.90887703898514383, 0.95257412682243336, 0.052153563078417738,
        0.091122961014856146, 0.047425873177566788}},
      {"threshold", {-1, -1, -1, -1, 1.1000000000000001, 2.7000000000000002}},
      {"tanhshrink",
       {-1.5133857018485697, -0.36634539298784474, -0.0086873875484090868, 0.020051037744775124,
        0.29950097823937039, 1.7089925463218827}},
      {"softshrink", {-2, -0.69999999999999996, 0, 0, 0.60000000000000009, 2.2000000000000002}},
      {"hardshrink", {-2.5, -1.2, 0, 0, 1.1000000000000001, 2.7000000000000002}},
      {"cosine_similarity", {-0.076721923851177709, 0.37550205266536901}},
      {"pairwise_distance", {3.3660050207928984, 2.9000005862073546}},
      {"pairwise_distance_p1", {5.0999970000000001, 4.9000010000000005}},
      {"cdist", {3.3660065359413669, 4.7191100855987669, 2.1656407827707715, 2.9000000000000004}},
      {"cdist_p3",
       {3.0332957635996718, 4.5336571039422688, 1.9627263184436798, 2.4708617033111846}},
      {"normalize",
       {-0.89629342422759339, -0.43022084362924479, -0.1075552109073112, 0.13592553320611694,
        0.37379521631682161, 0.91749734914128944}},
      {"normalize_p1_dim0",
       {-0.86206896551724144, -0.52173913043478259, -0.099999999999999992, 0.13793103448275862,
        0.47826086956521746, 0.90000000000000002}},
      {"lrn",
       {-0.55484480082114795, -0.40367231757463867, -0.22143332466016483, -0.056817327123915719,
        0.11303675086975018, 0.27262002000590085, 0.45641928323626429, 0.6000982054333982}},
      {"lrn4d",
       {-0.99996250164054967, -0.69998713777573351, -0.39998260088300308, -0.099998125041014699,
        0.19999850001312491, 0.49999512505545252, 0.799979600606881, 1.0999397788466145}},
      {"smooth_l1", {1.4166666666666667}},
      {"huber", {4.9249999999999998}},
      {"bce", {18.163204775168797}},
      {"bce_weight_none",
       {0.052680257828913141, 1.0498221244986778, 1.0397207708399179, 0.44628710262841942,
        17.269388197455338, 300}},
      {"kl_batchmean", {0.54993840281094719}},
      {"kl_sum", {1.0998768056218944}},
      {"kl_mean", {0.18331280093698241}},
      {"kl_log_target_none",
       {2.0247882113640046, -0.09931706075828188, 15.685911746183226, 19.950451467112757,
        1.2667723852503432, 1.6399069203514578}},
      {"poisson", {1.6249699796130599}},
      {"poisson_full_nolog_none",
       {0.5, 1.0176784348727121, 1.2655121134846454, 8.7718365225252075, 2.4506938539992786,
        4.157263118244181}},
      {"gaussian", {213334.22299847883}},
      {"gaussian_full_sum", {1280010.8516220723}},
      {"gaussian_var21_none",
       {7.4934264097200263, -0.096573590279972643, 2.8934264097200275, 0.98657359027997282,
        0.7065735902799728, 1.4490735902799727}},
      {"margin_ranking", {1.2166666666666668}},
      {"hinge_none", {-2.5, 2.2000000000000002, 1.3, 0.40000000000000002, 0, 2.7000000000000002}},
      {"hinge_mean", {0.68333333333333346}},
      {"mlsm_none", {1.1775440970676252, 1.2400692278397032}},
      {"mlsm_mean", {1.010320264231847}},
      {"multi_margin", {0.85000000000000009}},
      {"multi_margin_p2_none", {0, 3.0933333333333337}},
      {"cosine_embedding_none", {1.0767219238511592, 1.2755020526653043}},
      {"triplet_none", {0.032416900077802069, 1.9868862665696077}},
      {"triplet_swap_p1_none", {6.1999979999999999, 5.699997999999999}},
  };
  return values;
}

// The Ember expressions whose values libtorch_values() holds, on the same inputs.
std::map<std::string, std::function<Tensor()>> ember_expressions() {
  Tensor x = T({-2.5, -1.2, -0.3, 0.4, 1.1, 2.7});
  Tensor y = T({0.3, -0.7, 1.5, 2.0, -0.1, 0.6});
  Tensor a = x.view({2, 3}), b = y.view({2, 3});
  Tensor l = T({-1, -0.7, -0.4, -0.1, 0.2, 0.5, 0.8, 1.1}).view({1, 4, 2});
  Tensor p = T({0.1, 0.35, 0.5, 0.8, 0.999, 1.0}), t = T({0, 1, 0.3, 1, 0, 0});
  Tensor ki = T({-1.2, -0.5, -2.0, -0.7, -1.5, -0.3}).view({2, 3});
  Tensor kt = T({0.2, 0.0, 0.8, 0.5, 0.25, 0.25}).view({2, 3});
  Tensor pt = T({0, 1, 2, 3, 0.5, 4});
  Tensor var = T({0.5, 1.0, 2.0, 1e-8, 0.3, 1.5});
  Tensor s = T({1, -1, 1, -1, 1, -1}), hs = T({1, -1, -1, 1, -1, 1});
  Tensor mt = T({1, 0, 1, 0, 0, 1}).view({2, 3}), w3 = T({1, 2, 0.5});
  Tensor cls = from_vector({2, 0}, {2}, DType::i64);
  Tensor c = T({1, 1, 1, -1, 0, 2}).view({2, 3});
  using KL = nn::KLDivReduction;
  return {
      {"softplus", [=] { return F::softplus(x); }},
      {"softplus_b2_t3",
       [=] { return F::softplus(x, F::SoftplusFuncOptions().beta(2).threshold(3)); }},
      {"softsign", [=] { return F::softsign(x); }},
      {"hardtanh", [=] { return F::hardtanh(x); }},
      {"relu6", [=] { return F::relu6(x * 3.0); }},
      {"hardsigmoid", [=] { return F::hardsigmoid(x * 2.0); }},
      {"hardswish", [=] { return F::hardswish(x * 2.0); }},
      {"mish", [=] { return F::mish(x); }},
      {"celu", [=] { return F::celu(x, F::CELUFuncOptions().alpha(1.5)); }},
      {"selu", [=] { return F::selu(x); }},
      {"glu",
       [=] {
         return F::glu(x.view({3, 2}), -1);
       }},
      {"prelu",
       [=] {
         return F::prelu(a, T({0.1, 0.2, 0.3}));
       }},
      {"rrelu_eval", [=] { return F::rrelu(x); }},
      {"logsigmoid", [=] { return F::logsigmoid(x); }},
      {"softmin", [=] { return F::softmin(a, 0); }},
      {"threshold", [=] { return F::threshold(x, F::ThresholdFuncOptions(0.5, -1)); }},
      {"tanhshrink", [=] { return F::tanhshrink(x); }},
      {"softshrink", [=] { return F::softshrink(x, 0.5); }},
      {"hardshrink", [=] { return F::hardshrink(x, 0.5); }},
      {"cosine_similarity", [=] { return F::cosine_similarity(a, b); }},
      {"pairwise_distance", [=] { return F::pairwise_distance(a, b); }},
      {"pairwise_distance_p1",
       [=] { return F::pairwise_distance(a, b, F::PairwiseDistanceFuncOptions().p(1)); }},
      {"cdist", [=] { return F::cdist(a, b); }},
      {"cdist_p3", [=] { return F::cdist(a, b, 3); }},
      {"normalize", [=] { return F::normalize(a, F::NormalizeFuncOptions().dim(1)); }},
      {"normalize_p1_dim0", [=] { return F::normalize(a, F::NormalizeFuncOptions().p(1).dim(0)); }},
      {"lrn",
       [=] {
         return F::local_response_norm(
             l, F::LocalResponseNormFuncOptions(3).alpha(0.5).beta(0.75).k(2));
       }},
      {"lrn4d",
       [=] {
         return F::local_response_norm(l.view({1, 4, 2, 1}), F::LocalResponseNormFuncOptions(2));
       }},
      {"smooth_l1",
       [=] { return F::smooth_l1_loss(x, y, F::SmoothL1LossFuncOptions().beta(0.5)); }},
      {"huber",
       [=] {
         return F::huber_loss(x, y,
                              F::HuberLossFuncOptions().delta(0.6).reduction(LossReduction::sum));
       }},
      {"bce", [=] { return F::binary_cross_entropy(p, t); }},
      {"bce_weight_none",
       [=] {
         return F::binary_cross_entropy(p, t,
                                        F::BinaryCrossEntropyFuncOptions()
                                            .weight(T({0.5, 1, 1.5, 2, 2.5, 3}))
                                            .reduction(LossReduction::none));
       }},
      {"kl_batchmean",
       [=] { return F::kl_div(ki, kt, F::KLDivFuncOptions().reduction(KL::batchmean)); }},
      {"kl_sum", [=] { return F::kl_div(ki, kt, F::KLDivFuncOptions().reduction(KL::sum)); }},
      {"kl_mean", [=] { return F::kl_div(ki, kt); }},
      {"kl_log_target_none",
       [=] {
         return F::kl_div(ki, b, F::KLDivFuncOptions().reduction(KL::none).log_target(true));
       }},
      {"poisson", [=] { return F::poisson_nll_loss(x, pt); }},
      {"poisson_full_nolog_none",
       [=] {
         return F::poisson_nll_loss(
             T({0.5, 1.2, 2.0, 0.1, 3.0, 1.0}), pt,
             F::PoissonNLLLossFuncOptions().log_input(false).full(true).reduction(
                 LossReduction::none));
       }},
      {"gaussian", [=] { return F::gaussian_nll_loss(x, y, var); }},
      {"gaussian_full_sum",
       [=] {
         return F::gaussian_nll_loss(
             x, y, var, F::GaussianNLLLossFuncOptions().full(true).reduction(LossReduction::sum));
       }},
      {"gaussian_var21_none",
       [=] {
         return F::gaussian_nll_loss(
             a, b, T({0.5, 2.0}).view({2, 1}),
             F::GaussianNLLLossFuncOptions().reduction(LossReduction::none));
       }},
      {"margin_ranking",
       [=] {
         return F::margin_ranking_loss(x, y, s, F::MarginRankingLossFuncOptions().margin(0.2));
       }},
      {"hinge_none",
       [=] {
         return F::hinge_embedding_loss(
             x, hs, F::HingeEmbeddingLossFuncOptions().reduction(LossReduction::none));
       }},
      {"hinge_mean", [=] { return F::hinge_embedding_loss(x, hs); }},
      {"mlsm_none",
       [=] {
         return F::multilabel_soft_margin_loss(
             a, mt,
             F::MultilabelSoftMarginLossFuncOptions().weight(w3).reduction(LossReduction::none));
       }},
      {"mlsm_mean", [=] { return F::multilabel_soft_margin_loss(a, mt); }},
      {"multi_margin", [=] { return F::multi_margin_loss(a, cls); }},
      {"multi_margin_p2_none",
       [=] {
         return F::multi_margin_loss(
             a, cls,
             F::MultiMarginLossFuncOptions().p(2).margin(0.5).weight(w3).reduction(
                 LossReduction::none));
       }},
      {"cosine_embedding_none",
       [=] {
         return F::cosine_embedding_loss(
             a, b, T({1, -1}),
             F::CosineEmbeddingLossFuncOptions().margin(-0.9).reduction(LossReduction::none));
       }},
      {"triplet_none",
       [=] {
         return F::triplet_margin_loss(
             a, b, c, F::TripletMarginLossFuncOptions().margin(1).reduction(LossReduction::none));
       }},
      {"triplet_swap_p1_none",
       [=] {
         return F::triplet_margin_loss(
             a, b, c,
             F::TripletMarginLossFuncOptions().margin(4).p(1).swap(true).reduction(
                 LossReduction::none));
       }},
  };
}

}  // namespace

TEST_CASE("nn functionals: values equal libtorch 1.13.1's") {
  auto exprs = ember_expressions();
  CHECK(exprs.size() == libtorch_values().size());
  for (const auto& [name, expected] : libtorch_values()) {
    // CAPTURE takes a variable, not a structured binding (clang 14).
    const auto captured_name = name;
    CAPTURE(captured_name);
    REQUIRE(exprs.count(name) == 1);
    std::vector<double> got = exprs.at(name)().contiguous().reshape({-1}).to_vector();
    REQUIRE(got.size() == expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-10).scale(1.0));
    }
  }
}

TEST_CASE("nn functionals: fp64 gradcheck and gradgradcheck of the op-table rows") {
  for (const auto& c : ember::testing::op_cases_nnfunc()) {
    if (!c.fp64_gradcheck) continue;
    CAPTURE(c.name);
    auto inputs = ember::testing::make_inputs(c, DType::f64, Device::cpu(), 2024,
                                              ember::testing::Layout::contiguous, true);
    std::string report;
    CHECK_MESSAGE(autograd::gradcheck(c.fn, inputs, 1e-6, 1e-5, 1e-4, &report), report);
    if (!c.gradgradcheck) continue;
    report.clear();
    bool ok = false;
    try {
      ok = autograd::gradgradcheck(c.fn, inputs, Tensor(), 1e-6, 1e-5, 1e-4, &report);
    } catch (const Error& e) {
      report = e.what();
    }
    CHECK_MESSAGE(ok, report);
  }
}

TEST_CASE("nn functionals: behaviour beyond the values") {
  SUBCASE("rrelu in training draws slopes in [lower, upper] and keeps x >= 0") {
    Tensor x = full({1000}, -1.0, DType::f64);
    Generator gen(Device::cpu(), 3);
    auto o = F::RReLUFuncOptions().lower(0.1).upper(0.3).training(true).generator(&gen);
    std::vector<double> v = F::rrelu(x, o).to_vector();
    double lo = 1, hi = 0;
    for (double e : v) lo = std::min(lo, -e), hi = std::max(hi, -e);
    CHECK(lo >= 0.1);
    CHECK(hi <= 0.3);
    CHECK(hi - lo > 0.15);  // random, not one slope
    CHECK(F::rrelu(full({3}, 2.0, DType::f64), o).to_vector() == std::vector<double>{2, 2, 2});
  }
  SUBCASE("gumbel_softmax: rows sum to 1; hard gives one-hots with the soft gradient") {
    Tensor logits = T({0.5, -1, 2, 0.1, 0.3, -0.2, 1.5, 0.7}).view({2, 4}).set_requires_grad(true);
    Generator g1(Device::cpu(), 9), g2(Device::cpu(), 9);
    Tensor soft = F::gumbel_softmax(logits, F::GumbelSoftmaxFuncOptions().generator(&g1));
    Tensor hard =
        F::gumbel_softmax(logits, F::GumbelSoftmaxFuncOptions().hard(true).generator(&g2));
    CHECK(max_abs_diff(sum(soft, {1}), ones({2}, DType::f64)) < 1e-12);
    std::vector<double> h = hard.detach().to_vector();
    int ones_count = 0;
    for (double e : h) {
      CHECK((std::abs(e) < 1e-12 || std::abs(e - 1) < 1e-12));
      ones_count += std::abs(e - 1) < 1e-12;
    }
    CHECK(ones_count == 2);
    CHECK(allclose(argmax(hard.detach(), 1), argmax(soft.detach(), 1)));
    Tensor w = T({1, 2, 3, 4, 5, 6, 7, 8}).view({2, 4});
    Tensor gs = autograd::grad({sum(soft * w)}, {logits})[0];
    Tensor gh = autograd::grad({sum(hard * w)}, {logits})[0];
    CHECK(max_abs_diff(gs, gh) < 1e-12);
  }
  SUBCASE("softplus is the identity above the threshold, with gradient 1 and no overflow") {
    Tensor x = T({50, 800}).set_requires_grad(true);
    Tensor y = F::softplus(x);
    CHECK(y.to_vector() == std::vector<double>{50, 800});
    sum(y).backward();
    CHECK(x.grad().to_vector() == std::vector<double>{1, 1});
  }
  SUBCASE("binary_cross_entropy at 0 and 1 stays finite (log clamped at -100)") {
    Tensor p = T({0, 1}).set_requires_grad(true);
    Tensor loss = F::binary_cross_entropy(
        p, T({1, 0}), F::BinaryCrossEntropyFuncOptions().reduction(LossReduction::none));
    CHECK(loss.detach().to_vector() == std::vector<double>{100, 100});
    sum(loss).backward();
    CHECK(all(isfinite(p.grad())).item<bool>());
  }
  SUBCASE("kl_div: zero targets give zero loss and finite gradients") {
    Tensor t = T({0, 0.5, 0.5}).set_requires_grad(true);
    Tensor x = T({-1, -0.5, -1}).set_requires_grad(true);
    Tensor loss = F::kl_div(x, t, F::KLDivFuncOptions().reduction(nn::KLDivReduction::none));
    CHECK(loss.detach().to_vector()[0] == 0);
    sum(loss).backward();
    CHECK(all(isfinite(t.grad())).item<bool>());
    CHECK(x.grad().to_vector()[0] == 0);
  }
  SUBCASE("empty inputs give empty outputs") {
    Tensor e = zeros({0, 3}, DType::f64);
    CHECK(F::softplus(e).sizes() == Shape{0, 3});
    CHECK(F::hardswish(e).sizes() == Shape{0, 3});
    CHECK(F::cosine_similarity(e, e).sizes() == Shape{0});
    CHECK(F::cdist(e, zeros({2, 3}, DType::f64)).sizes() == Shape{0, 2});
    CHECK(F::smooth_l1_loss(e, e, F::SmoothL1LossFuncOptions().reduction(LossReduction::sum))
              .item() == 0);
  }
}

TEST_CASE("nn activation and loss modules: options, printing, state") {
  auto str = [](const nn::Module& m) {
    std::ostringstream os;
    m.pretty_print(os);
    return os.str();
  };
  SUBCASE("PReLU: one learnable parameter named weight, filled with init") {
    nn::PReLU m(nn::PReLUOptions().num_parameters(3).init(0.1));
    auto sd = m->state_dict();
    REQUIRE(sd.size() == 1);
    CHECK(sd[0].first == "weight");
    CHECK(m->weight.sizes() == Shape{3});
    CHECK(m->weight.requires_grad());
    CHECK(allclose(m->weight, full({3}, 0.1)));
    CHECK(str(*m) == "PReLU(num_parameters=3)");
    Tensor x = from_vector({-1, 2, -3, 4, -5, 6}, {2, 3});
    Tensor out = m(x);
    CHECK(allclose(out, from_vector({-0.1, 2, -0.3, 4, -0.5, 6}, {2, 3})));
    sum(out).backward();
    CHECK(allclose(m->weight.grad(), from_vector({-1, -5, -3}, {3})));
    nn::PReLU d;
    CHECK(d->weight.sizes() == Shape{1});
    CHECK(d->weight.item() == doctest::Approx(0.25));
  }
  SUBCASE("RReLU: random in train mode, the mean slope in eval mode") {
    nn::RReLU m(nn::RReLUOptions().lower(0.1).upper(0.5));
    Tensor x = full({200}, -1.0);
    Tensor train_out = m(x);
    CHECK(amax(train_out).item() - amin(train_out).item() > 0.1);
    m->eval();
    CHECK(allclose(m(x), full({200}, -0.3)));
    CHECK(str(*m) == "RReLU(lower=0.1, upper=0.5)");
    CHECK(m->state_dict().empty());
  }
  SUBCASE("option defaults as PyTorch's and forward through the functional") {
    CHECK(nn::SoftplusOptions().beta() == 1);
    CHECK(nn::SoftplusOptions().threshold() == 20);
    CHECK(nn::HardtanhOptions().min_val() == -1);
    CHECK(nn::HardshrinkOptions().lambda() == 0.5);
    CHECK(nn::GLUOptions().dim() == -1);
    CHECK(nn::RReLUOptions().lower() == doctest::Approx(1.0 / 8));
    CHECK(nn::RReLUOptions().upper() == doctest::Approx(1.0 / 3));
    CHECK(nn::SmoothL1LossOptions().beta() == 1);
    CHECK(nn::KLDivLossOptions().reduction() == nn::KLDivReduction::mean);
    CHECK(nn::PoissonNLLLossOptions().log_input());
    CHECK(nn::PoissonNLLLossOptions().eps() == 1e-8);
    CHECK(nn::GaussianNLLLossOptions().eps() == 1e-6);
    CHECK(nn::MultiMarginLossOptions().p() == 1);
    CHECK(nn::TripletMarginLossOptions().margin() == 1);
    CHECK(nn::LocalResponseNormOptions(5).alpha() == 1e-4);
    Tensor x = from_vector({-2, -0.5, 0.5, 3}, {1, 4});
    CHECK(allclose(nn::Softplus(nn::SoftplusOptions().beta(2))(x),
                   F::softplus(x, F::SoftplusFuncOptions().beta(2))));
    CHECK(allclose(nn::Hardswish()(x), F::hardswish(x)));
    CHECK(allclose(nn::GLU()(x), F::glu(x)));
    CHECK(allclose(nn::Softmin(1)(x), F::softmin(x, 1)));
    CHECK(allclose(nn::Threshold(nn::ThresholdOptions(0, 7))(x), F::threshold(x, {0, 7})));
    CHECK(allclose(nn::LocalResponseNorm(2)(x.view({1, 4, 1})),
                   F::local_response_norm(x.view({1, 4, 1}), 2)));
    CHECK(str(*nn::Softplus()) == "Softplus(beta=1.0, threshold=20.0)");
    CHECK(str(*nn::Hardtanh()) == "Hardtanh(min_val=-1.0, max_val=1.0)");
    CHECK(str(*nn::Softshrink()) == "Softshrink(0.5)");
    CHECK(str(*nn::SELU()) == "SELU()");
    CHECK(str(*nn::GLU()) == "GLU(dim=-1)");
    CHECK(str(*nn::LocalResponseNorm(3)) == "LocalResponseNorm(3, alpha=0.0001, beta=0.75, k=1.0)");
  }
  SUBCASE("losses: weights are buffers named weight; forward equals the functional") {
    Tensor w = from_vector({1, 2, 0.5}, {3});
    nn::MultiMarginLoss mm(nn::MultiMarginLossOptions().p(2).weight(w));
    auto sd = mm->state_dict();
    REQUIRE(sd.size() == 1);
    CHECK(sd[0].first == "weight");
    CHECK(mm->parameters().empty());
    Tensor x = from_vector({0.1, 0.5, -0.2, 0.9, -1, 0.3}, {2, 3});
    Tensor cls = from_vector({2, 0}, {2}, DType::i64);
    CHECK(allclose(mm(x, cls),
                   F::multi_margin_loss(x, cls, F::MultiMarginLossFuncOptions().p(2).weight(w))));
    nn::BCELoss bce(nn::BCELossOptions().weight(w).reduction(LossReduction::sum));
    CHECK(bce->state_dict().size() == 1);
    Tensor p = from_vector({0.2, 0.6, 0.9, 0.5, 0.1, 0.7}, {2, 3});
    Tensor t = from_vector({0, 1, 1, 0, 0, 1}, {2, 3});
    CHECK(allclose(
        bce(p, t),
        F::binary_cross_entropy(
            p, t, F::BinaryCrossEntropyFuncOptions().weight(w).reduction(LossReduction::sum))));
    CHECK(nn::SmoothL1Loss()->state_dict().empty());
    CHECK(allclose(nn::HuberLoss(nn::HuberLossOptions().delta(0.3))(x, p),
                   F::huber_loss(x, p, F::HuberLossFuncOptions().delta(0.3))));
    CHECK(allclose(
        nn::KLDivLoss(nn::KLDivLossOptions().reduction(nn::KLDivReduction::batchmean))(x, p),
        F::kl_div(x, p, F::KLDivFuncOptions().reduction(nn::KLDivReduction::batchmean))));
    CHECK(allclose(nn::GaussianNLLLoss()(x, p, p), F::gaussian_nll_loss(x, p, p)));
    CHECK(allclose(nn::TripletMarginLoss()(x, p, t), F::triplet_margin_loss(x, p, t)));
    CHECK(allclose(nn::CosineEmbeddingLoss()(x, p, from_vector({1, -1}, {2})),
                   F::cosine_embedding_loss(x, p, from_vector({1, -1}, {2}))));
    CHECK(str(*nn::SmoothL1Loss()) == "SmoothL1Loss(reduction=mean, beta=1.0)");
    CHECK(str(*nn::TripletMarginLoss()) ==
          "TripletMarginLoss(margin=1.0, p=2.0, eps=1e-06, swap=false, reduction=mean)");
    auto clone = mm.clone();
    CHECK(clone->options.p() == 2);
  }
}

TEST_CASE("nn functionals: bad input raises an Error naming the op, argument and shapes") {
  Tensor x = zeros({2, 3}), y = zeros({3, 2});
  CHECK(contains(error_of([&] { F::smooth_l1_loss(x, y); }),
                 "smooth_l1_loss: target of shape [3, 2]"));
  CHECK(contains(error_of([&] { F::huber_loss(x, y); }), "[2, 3]"));
  CHECK(contains(error_of([&] { F::binary_cross_entropy(full({2}, 1.5), zeros({2})); }),
                 "between 0 and 1"));
  CHECK(contains(error_of([&] { F::glu(zeros({2, 3})); }), "glu: halving dimension must be even"));
  CHECK(contains(error_of([&] {
                   F::prelu(zeros({2, 3}), zeros({4}));
                 }),
                 "prelu: weight of shape [4]"));
  CHECK(contains(error_of([&] { F::softplus(zeros({2}, DType::i64)); }),
                 "softplus: input must be a floating"));
  CHECK(contains(error_of([&] { F::cdist(zeros({2, 3}), zeros({2, 4})); }), "cdist: x1 [2, 3]"));
  CHECK(contains(error_of([&] {
                   F::local_response_norm(zeros({2, 3}), 2);
                 }),
                 "local_response_norm: expected an input of 3 or more dims"));
  CHECK(contains(error_of([&] {
                   F::multi_margin_loss(x, from_vector({0, 3}, {2}, DType::i64));
                 }),
                 "multi_margin_loss: target values must be class indices in [0, 3)"));
  CHECK(contains(error_of([&] { F::multi_margin_loss(x, from_vector({0}, {1}, DType::i64)); }),
                 "multi_margin_loss: target of shape [1]"));
  CHECK(contains(error_of([&] {
                   F::multi_margin_loss(x, from_vector({0, 1}, {2}, DType::i64),
                                        F::MultiMarginLossFuncOptions().p(3));
                 }),
                 "only p == 1 and p == 2"));
  CHECK(contains(error_of([&] {
                   F::multilabel_soft_margin_loss(
                       x, x, F::MultilabelSoftMarginLossFuncOptions().weight(zeros({2})));
                 }),
                 "multilabel_soft_margin_loss: weight of shape [2]"));
  CHECK(contains(error_of([&] { F::gaussian_nll_loss(x, x, zeros({3})); }),
                 "gaussian_nll_loss: var of shape [3]"));
  CHECK(contains(error_of([&] {
                   F::gaussian_nll_loss(x, x, full({2, 3}, -1.0));
                 }),
                 "negative entries"));
  CHECK(contains(error_of([&] { F::cosine_embedding_loss(x, x, zeros({3})); }),
                 "cosine_embedding_loss: target of shape [3]"));
  CHECK(contains(error_of([&] { F::triplet_margin_loss(x, x, y); }),
                 "triplet_margin_loss: negative of shape [3, 2]"));
  CHECK(contains(error_of([&] { F::margin_ranking_loss(x, x, zeros({2})); }),
                 "margin_ranking_loss: target of shape [2]"));
  CHECK(contains(error_of([&] { F::kl_div(x, y); }), "kl_div: target of shape [3, 2]"));
  CHECK(contains(error_of([&] { F::celu(x, F::CELUFuncOptions().alpha(0)); }), "celu: alpha"));
  CHECK(contains(error_of([&] { nn::PReLU(nn::PReLUOptions().num_parameters(0)); }),
                 "PReLU: num_parameters"));
}
