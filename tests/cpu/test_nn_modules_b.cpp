// nn breadth on the CPU: embedding_bag (every mode, offsets and 2-D input, per_sample_weights,
// padding_idx) and ctc_loss (reductions, zero_infinity, repeated labels, empty targets) against
// values from libtorch 1.13.1, their input checks, and the modules built on them.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "ember/ember.h"
#include "support/compare.h"
#include "support/errors.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
using ember::testing::rel_err;

namespace {

// scale * sin(a * i + b) over the flat positions of `shape`, in fp64: the inputs the libtorch
// reference program used.
Tensor pattern(const Shape& shape, double a, double b, double scale) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = scale * std::sin(a * double(i) + b);
  return from_vector(v, shape, TensorOptions(DType::f64));
}
Tensor i64(std::vector<double> v, Shape s = {}) {
  if (s.empty()) s = {int64_t(v.size())};
  return from_vector(v, s, TensorOptions(DType::i64));
}
Tensor f64(std::vector<double> v, Shape s) { return from_vector(v, s, TensorOptions(DType::f64)); }

const std::vector<double> kBagIndices = {1, 2, 4, 5, 4, 3, 2, 9};

// out and weight.grad of sum(embedding_bag(...) * G) for the reference bags.
std::pair<Tensor, Tensor> bag_run(EmbeddingBagParams p, const Tensor& indices, Shape g_shape) {
  Tensor w = pattern({10, 3}, 0.37, 0.1, 1.0).requires_grad_(true);
  Tensor out = embedding_bag(indices, w, p);
  (out * pattern(g_shape, 0.71, 0.3, 1.0)).sum().backward();
  return {out, w.grad()};
}

}  // namespace

TEST_CASE("embedding_bag: sum, mean and max with offsets match libtorch") {
  struct Ref {
    EmbeddingBagMode mode;
    std::vector<double> out, grad;
  };
  const std::vector<Ref> refs = {
      {EmbeddingBagMode::sum,
       {1.66784744558, 1.43635672866, 1.01046186676, 0, 0, 0, -2.56207114364, -2.22123428702,
        -1.57976378993, -0.169428112419, -1.03543450084, -1.76129968702},
       {0,
        0,
        0,
        0.295520206661,
        0.846831844618,
        0.988889766005,
        0.691206205865,
        1.74553994043,
        1.95629568182,
        0.395685999203,
        0.898708095812,
        0.967405915812,
        -1.97682250388,
        -1.69704337095,
        -0.597123484987,
        -0.988411251939,
        -0.848521685476,
        -0.298561742494,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0.395685999203,
        0.898708095812,
        0.967405915812}},
      {EmbeddingBagMode::mean,
       {0.833923722792, 0.718178364329, 0.505230933382, 0, 0, 0, -0.854023714546, -0.740411429006,
        -0.526587929977, -0.0564760374731, -0.345144833615, -0.587099895674},
       {0,
        0,
        0,
        0.147760103331,
        0.423415922309,
        0.494444883002,
        0.279655436398,
        0.72298528758,
        0.816913521606,
        0.131895333068,
        0.299569365271,
        0.322468638604,
        -0.658940834626,
        -0.565681123651,
        -0.199041161662,
        -0.329470417313,
        -0.282840561825,
        -0.0995205808312,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0.131895333068,
        0.299569365271,
        0.322468638604}},
      {EmbeddingBagMode::max,
       {0.935616001553, 0.999957646499, 0.928959715004, 0, 0, 0, -0.591715580631, -0.26015749143,
        0.106611693781, 0.73223144403, 0.43639908216, 0.0815021517603},
       {0,
        0,
        0,
        0.295520206661,
        0.846831844618,
        0.988889766005,
        0.395685999203,
        0.898708095812,
        0.967405915812,
        0,
        0,
        0,
        0,
        0,
        0,
        -0.988411251939,
        -0.848521685476,
        -0.298561742494,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0}},
  };
  for (const Ref& ref : refs) {
    CAPTURE(embedding_bag_mode_name(ref.mode));
    EmbeddingBagParams p;
    p.offsets = i64({0, 2, 2, 5});
    p.mode = ref.mode;
    auto [out, grad] = bag_run(p, i64(kBagIndices), {4, 3});
    CHECK(out.sizes() == Shape{4, 3});
    CHECK(rel_err(out, f64(ref.out, {4, 3})) < 1e-10);
    CHECK(rel_err(grad, f64(ref.grad, {10, 3})) < 1e-10);
    // include_last_offset with the end appended, and int32 indices, give the same bags.
    p.offsets = from_vector({0, 2, 2, 5, 8}, {5}, TensorOptions(DType::i32));
    p.include_last_offset = true;
    auto [out2, grad2] = bag_run(p, i64(kBagIndices).to(DType::i32), {4, 3});
    CHECK(rel_err(out2, out) == 0);
    CHECK(rel_err(grad2, grad) == 0);
  }
}

TEST_CASE("embedding_bag: per_sample_weights with padding_idx, and 2-D mean, match libtorch") {
  Tensor w = pattern({10, 3}, 0.37, 0.1, 1.0).requires_grad_(true);
  Tensor psw = pattern({8}, 0.9, 0.2, 1.0).requires_grad_(true);
  EmbeddingBagParams p;
  p.offsets = i64({0, 2, 2, 5});
  p.mode = EmbeddingBagMode::sum;
  p.per_sample_weights = psw;
  p.padding_idx = 2;
  Tensor out = embedding_bag(i64(kBagIndices), w, p);
  (out * pattern({4, 3}, 0.71, 0.3, 1.0)).sum().backward();
  CHECK(rel_err(out, f64({0.18587820491, 0.198660916453, 0.184555804915, 0, 0, 0, -0.434598377844,
                          -0.35389339127, -0.225290594376, 0.151624547864, 0.426812974846,
                          0.644234267952},
                         {4, 3})) < 1e-10);
  CHECK(rel_err(w.grad(), f64({0,
                               0,
                               0,
                               0.0587108016938,
                               0.168239515866,
                               0.196462068042,
                               0,
                               0,
                               0,
                               -0.395655633296,
                               -0.898639126763,
                               -0.967331674725,
                               -0.293992584038,
                               -0.252383896315,
                               -0.0888040661197,
                               -0.236476729014,
                               -0.203008244074,
                               -0.0714306966206,
                               0,
                               0,
                               0,
                               0,
                               0,
                               0,
                               0,
                               0,
                               0,
                               0.0851199674351,
                               0.193330074865,
                               0.208108349086},
                              {10, 3})) < 1e-10);
  CHECK(rel_err(psw.grad(), f64({2.04192816766, 0, 2.05751249983, 0.773777437896, 2.05751249983,
                                 -1.49098677131, 0, -1.97127344846},
                                {8})) < 1e-10);

  EmbeddingBagParams q;
  q.padding_idx = 4;  // mode mean by default
  auto [out2, grad2] = bag_run(q, i64({1, 4, 0, 4, 4, 7}, {2, 3}), {2, 3});
  CHECK(rel_err(out2, f64({0.5177247091, 0.726421965939, 0.836801417487, 0.999871708718,
                           0.926415495497, 0.727573290971},
                          {2, 3})) < 1e-10);
  CHECK(rel_err(grad2, f64({0.147760103331,
                            0.423415922309,
                            0.494444883002,
                            0.147760103331,
                            0.423415922309,
                            0.494444883002,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0.653040751572,
                            0.00159265291649,
                            -0.650625137065,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0},
                           {10, 3})) < 1e-10);
}

TEST_CASE("embedding_bag: empty inputs, all-padding bags and float32") {
  Tensor w = pattern({5, 4}, 0.3, 0.0, 1.0).to(DType::f32);
  EmbeddingBagParams p;
  p.offsets = i64({0, 0});
  p.mode = EmbeddingBagMode::max;
  Tensor out = embedding_bag(i64({}, {0}), w, p);
  CHECK(out.sizes() == Shape{2, 4});
  CHECK(out.abs().sum().item<double>() == 0);
  p.offsets = i64({}, {0});
  CHECK(embedding_bag(i64({}, {0}), w, p).sizes() == Shape{0, 4});
  EmbeddingBagParams q;
  q.padding_idx = -1;  // row 4
  Tensor bags = embedding_bag(i64({4, 4, 1, 4}, {2, 2}), w, q);
  CHECK(bags.dtype() == DType::f32);
  CHECK(rel_err(bags.select(0, 0), zeros({4})) == 0);
  CHECK(rel_err(bags.select(0, 1), w.select(0, 1)) == 0);
}

TEST_CASE("embedding_bag: bad input names the op, the argument and the shapes") {
  Tensor w = zeros({5, 4});
  EmbeddingBagParams p;
  CHECK(contains(error_of([&] { embedding_bag(i64({1, 2}), w, p); }), "offsets"));
  p.offsets = i64({0});
  CHECK(contains(error_of([&] {
                   embedding_bag(i64({1, 2}, {1, 2}), w, p);
                 }),
                 "offsets must be undefined when input is 2-D [1, 2]"));
  CHECK(contains(error_of([&] { embedding_bag(i64({1, 7}), w, p); }), "index 7 is out of range"));
  p.offsets = i64({1});
  CHECK(contains(error_of([&] { embedding_bag(i64({1, 2}), w, p); }), "offsets[0] must be 0"));
  p.offsets = i64({0});
  p.per_sample_weights = zeros({2});
  CHECK(contains(error_of([&] {
                   embedding_bag(i64({1, 2}), w, p);
                 }),
                 "per_sample_weights is only supported with mode sum, got mode mean"));
  p.mode = EmbeddingBagMode::sum;
  p.per_sample_weights = zeros({3});
  CHECK(contains(error_of([&] {
                   embedding_bag(i64({1, 2}), w, p);
                 }),
                 "per_sample_weights [3] must have the input's shape [2]"));
  p.per_sample_weights = Tensor();
  p.padding_idx = 5;
  CHECK(contains(error_of([&] { embedding_bag(i64({1, 2}), w, p); }), "padding_idx 5"));
  CHECK(contains(error_of([&] { embedding_bag(i64({1}), zeros({5})); }),
                 "weight must be a 2-D floating tensor"));
  CHECK(contains(error_of([&] { embedding_bag(zeros({2}), w); }), "int64 or int32"));
}

// ---- ctc_loss ----------------------------------------------------------------------------------

namespace {
const std::vector<double> kCtcTargets = {1, 2, 2, 3, 1, 0, 4, 4, 4};
Tensor ctc_logits() { return pattern({6, 3, 5}, 0.53, 0.2, 2.0); }
Tensor ctc_run(const Tensor& log_probs, LossReduction r, bool concatenated = false) {
  CtcLossParams p;
  p.reduction = r;
  Tensor targets = concatenated ? i64({1, 2, 2, 3, 1}) : i64(kCtcTargets, {3, 3});
  return ctc_loss(log_probs, targets, i64({6, 5, 4}), i64({3, 2, 0}), p);
}
}  // namespace

TEST_CASE("ctc_loss: values and gradients match libtorch (repeats, empty target)") {
  Tensor logits = ctc_logits().requires_grad_(true);
  Tensor lp = log_softmax(logits, 2);
  CHECK(rel_err(ctc_run(lp, LossReduction::none),
                f64({7.82316878615, 3.61293980005, 8.56265689629}, {3})) < 1e-10);
  CHECK(rel_err(ctc_run(lp, LossReduction::none, true), ctc_run(lp, LossReduction::none)) == 0);
  Tensor mean = ctc_run(lp, LossReduction::mean);
  CHECK(mean.dim() == 0);
  CHECK(mean.item<double>() == doctest::Approx(4.32561657501).epsilon(1e-10));
  mean.backward();
  const std::vector<double> mean_grad_logits = {-0.000570383520288,
                                                -0.0854183787896,
                                                0.0319263455693,
                                                0.0334948839627,
                                                0.0205675327779,
                                                -0.0531738117907,
                                                0.0353497694922,
                                                0.0141204000886,
                                                -0.00449197686625,
                                                0.00819561907615,
                                                -0.327447920273,
                                                0.0146227657594,
                                                0.0416850923827,
                                                0.102281831493,
                                                0.168858230637,
                                                0.0339965583703,
                                                0.012008995266,
                                                -0.0525445557788,
                                                0.00461673408854,
                                                0.001922268054,
                                                -0.011295927592,
                                                0.00691554543231,
                                                0.0139255747488,
                                                -0.111496062211,
                                                0.101950869622,
                                                -0.265643155249,
                                                0.103979931833,
                                                0.0928928627019,
                                                0.049780587095,
                                                0.0189897736196,
                                                -0.0395237289098,
                                                0.0127098181798,
                                                -0.0139925682034,
                                                0.0139440142592,
                                                0.0268624646742,
                                                -0.00433569816807,
                                                -0.0252555049505,
                                                0.0396025856547,
                                                -0.0565928414419,
                                                0.0465814589058,
                                                -0.126173472941,
                                                0.0767905519101,
                                                0.0275261580168,
                                                0.0126437238838,
                                                0.00921303913084,
                                                -0.0259118458522,
                                                0.00400235964199,
                                                -0.0723148464796,
                                                0.0302197171854,
                                                0.0640046155045,
                                                0.0197215121412,
                                                -0.0550266802458,
                                                0.0261886956941,
                                                0.00564894204965,
                                                0.0034675303609,
                                                -0.304744783535,
                                                0.0225117131442,
                                                0.0306766985117,
                                                0.0664530414123,
                                                0.185103330467,
                                                -0.0300151189055,
                                                0.0279770932051,
                                                -0.032934933679,
                                                0.0241272643519,
                                                0.0108456950275,
                                                -0.0168843964184,
                                                -0.0337882378306,
                                                0.0163200033996,
                                                0.0139071214351,
                                                0.0204455094144,
                                                0,
                                                0,
                                                0,
                                                0,
                                                0,
                                                -0.00620526088641,
                                                0.0284798921976,
                                                -0.0282909353602,
                                                0.00388053852872,
                                                0.00213576552034,
                                                0,
                                                0,
                                                0,
                                                0,
                                                0,
                                                0,
                                                0,
                                                0,
                                                0,
                                                0};
  CHECK(rel_err(logits.grad(), f64(mean_grad_logits, {6, 3, 5})) < 1e-9);

  // With log_probs as the leaf, the gradient is PyTorch's (the logits' gradient of the
  // log_softmax that made them), not the plain derivative.
  Tensor lp_leaf = lp.detach().requires_grad_(true);
  Tensor total = ctc_run(lp_leaf, LossReduction::sum);
  CHECK(total.item<double>() == doctest::Approx(19.9987654825).epsilon(1e-10));
  total.backward();
  const std::vector<double> first_rows = {
      -0.00513345168259, -0.768765409106, 0.287337110123,  0.301453955664,   0.185107795001,
      -0.319042870744,   0.212098616953,  0.0847224005317, -0.0269518611975, 0.0491737144569};
  CHECK(rel_err(lp_leaf.grad().reshape({-1}).narrow(0, 0, 10), f64(first_rows, {10})) < 1e-9);
  // t >= input_length: no gradient (sample 1 at t = 5, sample 2 at t = 4, 5).
  CHECK(lp_leaf.grad().select(0, 5).narrow(0, 1, 2).abs().sum().item<double>() == 0);
  CHECK(lp_leaf.grad().select(0, 4).select(0, 2).abs().sum().item<double>() == 0);
}

TEST_CASE("ctc_loss: zero_infinity, unbatched input and float32") {
  Tensor logits = pattern({3, 2, 4}, 0.61, 0.4, 1.5).requires_grad_(true);
  Tensor lp = log_softmax(logits, 2);
  Tensor targets = i64({1, 1, 2, 3});
  CtcLossParams p;
  p.reduction = LossReduction::none;
  Tensor raw = ctc_loss(lp, targets, i64({2, 3}), i64({3, 1}), p);
  CHECK(std::isinf(raw.to_vector()[0]));
  CHECK(raw.to_vector()[1] == doctest::Approx(2.24549701291).epsilon(1e-10));
  p.zero_infinity = true;
  Tensor zeroed = ctc_loss(lp, targets, i64({2, 3}), i64({3, 1}), p);
  CHECK(zeroed.to_vector()[0] == 0);
  p.reduction = LossReduction::sum;
  ctc_loss(lp, targets, i64({2, 3}), i64({3, 1}), p).backward();
  CHECK(rel_err(logits.grad(),
                f64({0, 0, 0, 0, -0.373346474295, 0.232950930534, 0.111518051789, 0.028877491973,
                     0, 0, 0, 0, -0.394520742777, 0.343097071772, 0.181960840961, -0.130537169956,
                     0, 0, 0, 0, 0.0199865759825, 0.207160031755, 0.350206107472, -0.577352715209},
                    {3, 2, 4})) < 1e-9);

  // One unbatched sample [T, C] equals the batched sample.
  Tensor lp3 = log_softmax(ctc_logits(), 2);
  CtcLossParams none;
  none.reduction = LossReduction::none;
  Tensor single = ctc_loss(lp3.select(1, 0), i64({1, 2, 2}), i64({6}, {}), i64({3}, {}), none);
  CHECK(single.dim() == 0);
  CHECK(single.item<double>() == doctest::Approx(7.82316878615).epsilon(1e-10));
  Tensor f32 = ctc_run(lp3.to(DType::f32), LossReduction::none);
  CHECK(f32.dtype() == DType::f32);
  CHECK(rel_err(f32, f64({7.82316878615, 3.61293980005, 8.56265689629}, {3})) < 1e-5);
}

TEST_CASE("ctc_loss: bad input names the op, the argument and the shapes") {
  Tensor lp = log_softmax(ctc_logits(), 2);
  Tensor tg = i64(kCtcTargets, {3, 3});
  CHECK(contains(error_of([&] {
                   ctc_loss(lp, tg, i64({6, 7, 4}), i64({3, 2, 0}));
                 }),
                 "input_lengths[1] = 7 must be in [0, 6]"));
  CHECK(contains(error_of([&] {
                   ctc_loss(lp, tg, i64({6, 5}), i64({3, 2, 0}));
                 }),
                 "input_lengths must be [3]"));
  CHECK(contains(error_of([&] {
                   ctc_loss(lp, tg, i64({6, 5, 4}), i64({3, 4, 0}));
                 }),
                 "target_lengths[1] = 4 exceeds the padded targets' length 3"));
  CHECK(contains(error_of([&] {
                   ctc_loss(lp, i64({1, 2}), i64({6, 5, 4}), i64({3, 2, 0}));
                 }),
                 "fewer labels than sum(target_lengths) = 5"));
  CHECK(contains(error_of([&] {
                   ctc_loss(lp.to(DType::f16), tg, i64({6, 5, 4}), i64({3, 2, 0}));
                 }),
                 "float32 or float64"));
  CtcLossParams p;
  p.blank = 5;
  CHECK(contains(error_of([&] {
                   ctc_loss(lp, tg, i64({6, 5, 4}), i64({3, 2, 0}), p);
                 }),
                 "blank 5 must be a class index in [0, 5)"));
  CHECK(contains(
      error_of([&] {
        ctc_loss(lp, i64({1, 2, 9, 3, 1, 0, 4, 4, 4}, {3, 3}), i64({6, 5, 4}), i64({3, 2, 0}));
      }),
      "target 9 of sample 0"));
}

// ---- modules ---------------------------------------------------------------------------------

namespace {
std::vector<std::string> parameter_names(const nn::Module& m) {
  std::vector<std::string> out;
  for (auto& [name, t] : m.named_parameters()) out.push_back(name);
  return out;
}
// Every parameter set to 0.5 * sin(a * i + 0.2), a = 0.37, 0.48, ... in registration order, as
// the libtorch reference program did.
void set_patterns(nn::Module& m) {
  autograd::NoGradGuard no_grad;
  double a = 0.37;
  for (auto& [name, p] : m.named_parameters()) {
    p.copy_(pattern(p.sizes(), a, 0.2, 0.5));
    a += 0.11;
  }
}
Tensor gate_grad() { return pattern({2, 4}, 0.71, 0.3, 1.0); }
}  // namespace

TEST_CASE("RNNCell, LSTMCell, GRUCell: PyTorch's parameters and values") {
  nn::RNNCell rnn(nn::RNNCellOptions(3, 4));
  CHECK(parameter_names(*rnn) ==
        std::vector<std::string>{"weight_ih", "weight_hh", "bias_ih", "bias_hh"});
  CHECK(rnn->weight_ih.sizes() == Shape{4, 3});
  nn::LSTMCell lstm(3, 4);
  CHECK(lstm->weight_hh.sizes() == Shape{16, 4});
  nn::GRUCell gru(nn::GRUCellOptions(3, 4).bias(false));
  CHECK(parameter_names(*gru) == std::vector<std::string>{"weight_ih", "weight_hh"});
  CHECK(gru->weight_ih.sizes() == Shape{12, 3});
  // U(-1/sqrt(hidden), 1/sqrt(hidden)).
  CHECK(lstm->weight_ih.abs().max().item<double>() <= 0.5);

  const Tensor h = pattern({2, 4}, 0.8, 0.4, 1.0);
  rnn->to(DType::f64);
  set_patterns(*rnn);
  Tensor x = pattern({2, 3}, 0.3, 0.1, 1.0).requires_grad_(true);
  Tensor y = rnn->forward(x, h);
  (y * gate_grad()).sum().backward();
  CHECK(rel_err(y, f64({0.903215800659, 0.92756840907, -0.0812523979788, 0.675853491243,
                        0.0582924050483, 0.931726758621, 0.988798098395, -0.462971434567},
                       {2, 4})) < 1e-10);
  CHECK(rel_err(x.grad(), f64({0.31981512467, 0.120619526135, -0.0949013594098, 0.077666131784,
                               0.183236863433, 0.26400734522},
                              {2, 3})) < 1e-10);
  nn::RNNCell relu(nn::RNNCellOptions(3, 4).nonlinearity(nn::RNNNonlinearity::relu));
  relu->to(DType::f64);
  set_patterns(*relu);
  CHECK(
      rel_err(relu->forward(x.detach(), h), f64({1.48940825505, 1.64068602643, 0, 0.821441130193,
                                                 0.0583585659411, 1.67132583318, 2.58960110728, 0},
                                                {2, 4})) < 1e-10);
  // Unbatched input and a missing state (zeros).
  CHECK(rel_err(rnn->forward(x.detach().select(0, 1), h.select(0, 1)), y.select(0, 1)) < 1e-15);
  CHECK(rnn->forward(x.detach()).sizes() == Shape{2, 4});

  lstm->to(DType::f64);
  set_patterns(*lstm);
  Tensor xl = pattern({2, 3}, 0.3, 0.1, 1.0).requires_grad_(true);
  auto [h2, c2] = lstm->forward(xl, std::make_tuple(h, pattern({2, 4}, 0.9, 0.5, 1.0)));
  (h2 * gate_grad() + c2 * gate_grad() * 0.5).sum().backward();
  CHECK(rel_err(h2, f64({-0.217374833437, -0.414192487165, 0.348375235492, 0.0503941833137,
                         -0.206659106334, -0.534737159587, -0.217513198225, 0.154263659864},
                        {2, 4})) < 1e-10);
  CHECK(rel_err(c2, f64({-0.407304109017, -0.544498615611, 0.669721707149, 0.44949935269,
                         -0.218592131192, -1.1246105454, -1.11965094701, 0.430554165759},
                        {2, 4})) < 1e-10);
  CHECK(rel_err(xl.grad(), f64({-0.214096558153, -0.215585360022, -0.187895694768, 0.213642662922,
                                0.219808895505, 0.196225025251},
                               {2, 3})) < 1e-10);

  nn::GRUCell gru_b(3, 4);
  gru_b->to(DType::f64);
  set_patterns(*gru_b);
  Tensor xg = pattern({2, 3}, 0.3, 0.1, 1.0).requires_grad_(true);
  Tensor yg = gru_b->forward(xg, h);
  (yg * gate_grad()).sum().backward();
  CHECK(rel_err(yg, f64({-0.0175691585928, -0.491735975567, 0.518026342006, 0.434008071535,
                         -0.369366930167, -0.856507665497, -0.90526757147, 0.347805892099},
                        {2, 4})) < 1e-10);
  CHECK(rel_err(xg.grad(), f64({-0.347955762235, -0.261056520712, -0.138824503781, 0.156923115524,
                                0.0988109381023, 0.0273251637514},
                               {2, 3})) < 1e-10);

  CHECK(contains(error_of([&] {
                   rnn->forward(zeros({2, 5}, TensorOptions(DType::f64)));
                 }),
                 "RNNCell: input [2, 5] has 5 features, expected input_size = 3"));
  CHECK(contains(error_of([&] {
                   lstm->forward(zeros({2, 3}, TensorOptions(DType::f64)),
                                 std::make_tuple(zeros({3, 4}), zeros({2, 4})));
                 }),
                 "LSTMCell: h [3, 4] must be [2, 4]"));
}

TEST_CASE("ConvTranspose1d / 3d and Bilinear: PyTorch's parameters and values") {
  nn::ConvTranspose1d ct1(
      nn::ConvTranspose1dOptions(4, 6, 3).stride(2).padding(1).output_padding(1).groups(2));
  CHECK(parameter_names(*ct1) == std::vector<std::string>{"weight", "bias"});
  CHECK(ct1->weight.sizes() == Shape{4, 3, 3});
  ct1->to(DType::f64);
  set_patterns(*ct1);
  Tensor x1 = pattern({2, 4, 5}, 0.3, 0.1, 1.0).requires_grad_(true);
  Tensor y1 = ct1->forward(x1);
  CHECK(y1.sizes() == Shape{2, 6, 10});
  (y1 * pattern(y1.sizes(), 0.23, 0.5, 1.0)).sum().backward();
  CHECK(rel_err(y1.reshape({-1}).narrow(0, 0, 8),
                f64({-0.217465127917, -0.452533997363, -0.121010614037, -0.26012863354,
                     -0.00487331258963, -0.0356134837956, 0.120572577174, 0.200956182207},
                    {8})) < 1e-10);
  CHECK((y1 * y1).sum().item<double>() == doctest::Approx(34.5191769659).epsilon(1e-10));
  CHECK(rel_err(x1.grad().reshape({-1}).narrow(0, 0, 8),
                f64({0.462610628899, 0.126868369562, -0.196887804331, -0.479711987168,
                     -0.66280644406, -0.678558766701, -0.480155845504, -0.112635115433},
                    {8})) < 1e-10);
  CHECK((ct1->weight.grad() * ct1->weight.grad()).sum().item<double>() ==
        doctest::Approx(371.147350401).epsilon(1e-10));
  CHECK(ct1->forward(x1.detach().select(0, 0)).sizes() == Shape{6, y1.size(2)});  // unbatched

  nn::ConvTranspose3d ct3(nn::ConvTranspose3dOptions(4, 6, {2, 3, 2})
                              .stride({2, 1, 2})
                              .padding({1, 1, 0})
                              .output_padding({1, 0, 1})
                              .dilation({1, 2, 1})
                              .groups(2));
  CHECK(ct3->weight.sizes() == Shape{4, 3, 2, 3, 2});
  ct3->to(DType::f64);
  set_patterns(*ct3);
  Tensor x3 = pattern({2, 4, 3, 4, 3}, 0.3, 0.1, 1.0).requires_grad_(true);
  Tensor y3 = ct3->forward(x3);
  CHECK(y3.sizes() == Shape{2, 6, 5, 6, 7});
  (y3 * pattern(y3.sizes(), 0.23, 0.5, 1.0)).sum().backward();
  CHECK(rel_err(y3.reshape({-1}).narrow(0, 0, 8),
                f64({0.388371860829, 0.379919145058, 0.424790262872, 0.353228299916, 0.432136685682,
                     0.303857892562, 0.0993346653975, 0.75604227995},
                    {8})) < 1e-10);
  CHECK((y3 * y3).sum().item<double>() == doctest::Approx(839.995015311).epsilon(1e-10));
  CHECK((x3.grad() * x3.grad()).sum().item<double>() ==
        doctest::Approx(287.662009508).epsilon(1e-10));
  CHECK((ct3->weight.grad() * ct3->weight.grad()).sum().item<double>() ==
        doctest::Approx(1243.6142224).epsilon(1e-10));
  CHECK(rel_err(ct3->bias.grad(), f64({2.81296733949, 11.0416176881, -11.3043792084, -2.34813250397,
                                       13.1101798417, -7.73408007173},
                                      {6})) < 1e-10);

  nn::Bilinear bil(3, 4, 5);
  CHECK(parameter_names(*bil) == std::vector<std::string>{"weight", "bias"});
  CHECK(bil->weight.sizes() == Shape{5, 3, 4});
  bil->to(DType::f64);
  set_patterns(*bil);
  Tensor a = pattern({2, 3}, 0.3, 0.1, 1.0).requires_grad_(true);
  Tensor b = pattern({2, 4}, 0.5, 0.2, 1.0).requires_grad_(true);
  Tensor yb = bil->forward(a, b);
  (yb * pattern({2, 5}, 0.71, 0.3, 1.0)).sum().backward();
  CHECK(rel_err(yb, f64({-0.0347255406539, 1.23008173827, 0.0997624846366, -0.223910471936,
                         1.17397710915, 0.663196585331, 0.0962214847452, 0.0119322436675,
                         0.957208266142, 0.626287271611},
                        {2, 5})) < 1e-10);
  CHECK(rel_err(a.grad(), f64({-0.206085029031, -0.398624870772, 0.133797099862, -0.0467095317239,
                               0.141891219482, 0.0724405464591},
                              {2, 3})) < 1e-10);
  CHECK(
      rel_err(b.grad(), f64({-0.101371260379, -0.0726269246372, -0.0340528753544, 0.00913007085832,
                             0.175529533972, 0.156718018194, 0.116695453852, 0.0608787072732},
                            {2, 4})) < 1e-10);
  CHECK(contains(error_of([&] {
                   bil->forward(a.detach(), zeros({2, 3}, TensorOptions(DType::f64)));
                 }),
                 "bilinear: x1 [2, 3] and x2 [2, 3]"));
}

TEST_CASE("Unflatten, ParameterList and ParameterDict") {
  nn::Unflatten unflatten(nn::UnflattenOptions(1, {3, -1}));
  CHECK(unflatten->forward(zeros({2, 12, 5})).sizes() == Shape{2, 3, 4, 5});

  nn::ParameterList list;
  list->append(zeros({2}).requires_grad_(true));
  list->append(ones({3}), true);
  list->append(ones({1}));  // keeps requires_grad false, as libtorch
  CHECK(list->size() == 3);
  CHECK(parameter_names(*list) == std::vector<std::string>{"0", "1", "2"});
  CHECK((*list)[1].requires_grad());
  CHECK_FALSE((*list)[2].requires_grad());
  CHECK(contains(error_of([&] { (*list)[3]; }), "index 3 is out of range for 3"));

  nn::ParameterDict dict;
  dict->insert("scale", ones({4}).requires_grad_(true));
  dict->insert("shift", zeros({4}).requires_grad_(true));
  dict->insert("scale", full({4}, 2.0));  // replaced in place, keeps its position
  CHECK(dict->keys() == std::vector<std::string>{"scale", "shift"});
  CHECK(parameter_names(*dict) == std::vector<std::string>{"scale", "shift"});
  CHECK((*dict)["scale"].sum().item<double>() == 8);
  CHECK(contains(error_of([&] { (*dict)["bias"]; }), "the keys are [scale, shift]"));

  // Nested under a Sequential-like parent, the names join with '.', as PyTorch's state_dict.
  struct Holder : nn::Module {
    Holder() : nn::Module("Holder") {
      params = register_module("params", nn::ParameterList(std::vector<Tensor>{zeros({1})}));
    }
    nn::ParameterList params{nullptr};
  } holder;
  CHECK(parameter_names(holder) == std::vector<std::string>{"params.0"});
  nn::ParameterDict copy = dict.clone();
  CHECK(copy->keys() == dict->keys());
  CHECK((*copy)["scale"].data_ptr() != (*dict)["scale"].data_ptr());
}

TEST_CASE("EmbeddingBag and CTCLoss modules") {
  nn::EmbeddingBag bag(nn::EmbeddingBagOptions(10, 3).mode(EmbeddingBagMode::sum).padding_idx(-1));
  CHECK(parameter_names(*bag) == std::vector<std::string>{"weight"});
  CHECK(bag->weight.select(0, 9).abs().sum().item<double>() == 0);  // the padding row
  Tensor out = bag->forward(i64(kBagIndices), i64({0, 2, 2, 5}));
  EmbeddingBagParams p;
  p.offsets = i64({0, 2, 2, 5});
  p.mode = EmbeddingBagMode::sum;
  p.padding_idx = 9;
  CHECK(rel_err(out, embedding_bag(i64(kBagIndices), bag->weight, p)) == 0);
  out.sum().backward();
  CHECK(bag->weight.grad().select(0, 9).abs().sum().item<double>() == 0);
  std::ostringstream printed;
  printed << *bag;
  CHECK(printed.str() == "EmbeddingBag(10, 3, mode='sum', padding_idx=9)");

  nn::CTCLoss ctc(nn::CTCLossOptions().reduction(LossReduction::sum));
  Tensor lp = log_softmax(ctc_logits(), 2);
  CHECK(ctc->forward(lp, i64(kCtcTargets, {3, 3}), i64({6, 5, 4}), i64({3, 2, 0})).item<double>() ==
        doctest::Approx(19.9987654825).epsilon(1e-10));
}
