// CUDA tests of the nn functionals of nn/functional_more.h (activations, distances, losses, all
// composed from ops): parity with the CPU reference (fp64 on the same rounded inputs), forward and
// input gradients, over awkward shapes (empty, 1 element, odd and long rows, transposed views,
// broadcast operands, channels_last) in f32, bf16 and f64, and the device of the results. The
// op-table rows (tests/support/op_table_nnfunc.cpp) are compared by test_ops_parity.cpp. Skips
// without a GPU.
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/nn/nn.h"
#include "support/compare.h"
#include "support/gpu_parity.h"

using namespace ember;
namespace F = ember::nn::functional;
using nn::LossReduction;

namespace {

using ember::testing::cpu_f64;
using ember::testing::gpu_randn;
using ember::testing::parity_tolerance;
using ember::testing::rel_err;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// f on GPU inputs and on their exact values in fp64 on the CPU: outputs within tol (rel_err) and
// (with check_grad) the gradients of sum(out * w), for one uniform w, within 4 tol for every
// floating input. Functions whose gradient jumps at a kink of an intermediate value (x + 3 in
// hardswish, the hinge of the margin losses) skip the gradient in bf16: rounding that intermediate
// moves elements across the kink, which the fp64 reference does not.
void check_parity(const Fn& f, const std::vector<Tensor>& gpu_inputs, double tol,
                  bool check_grad = true) {
  std::vector<Tensor> g, c;
  for (const Tensor& t : gpu_inputs) {
    const bool diff = is_floating(t.dtype());
    g.push_back(diff ? t.detach().set_requires_grad(true) : t);
    c.push_back(diff ? cpu_f64(t).set_requires_grad(true) : t.to(Device::cpu()));
  }
  Tensor out_c = f(c);
  Tensor out_g = f(g);
  REQUIRE(out_g.sizes() == out_c.sizes());
  CHECK(out_g.device() == gpu_inputs[0].device());
  CHECK(rel_err(out_g, out_c) <= tol);
  if (out_c.numel() == 0 || !check_grad) return;
  Tensor w = rand(out_c.sizes(), TensorOptions(DType::f64));
  (out_c * w).sum().backward();
  (out_g * w.to(out_g.device(), out_g.dtype())).sum().backward();
  for (size_t i = 0; i < g.size(); ++i) {
    if (!c[i].requires_grad() || !c[i].grad().defined()) continue;
    CAPTURE(i);
    REQUIRE(g[i].grad().defined());
    CHECK(rel_err(g[i].grad(), c[i].grad()) <= 4 * tol);
  }
}

// Uniform values in [low, high) rounded to dtype on the GPU.
Tensor gpu_uniform(const Shape& s, DType dtype, double low, double high) {
  return (rand(s, TensorOptions(DType::f32)) * (high - low) + low).to(Device::cuda(), dtype);
}

// The thresholds of threshold / softshrink / hardshrink are exact in bf16: a number operand
// computes in the tensor's dtype, so an inexact one would move the cut between the devices'
// references and the rounded inputs.
struct Unary {
  std::string name;
  std::function<Tensor(const Tensor&)> f;
  double scale;                      // inputs are normal times scale
  bool kinked_intermediate = false;  // see check_parity
};

const std::vector<Unary>& unary_activations() {
  static const std::vector<Unary> ops = {
      {"softplus", [](const Tensor& x) { return F::softplus(x); }, 4},
      {"softplus_b2_t1",
       [](const Tensor& x) {
         return F::softplus(x, F::SoftplusFuncOptions().beta(2).threshold(1));
       },
       2},
      {"softsign", [](const Tensor& x) { return F::softsign(x); }, 3},
      {"hardtanh", [](const Tensor& x) { return F::hardtanh(x); }, 2},
      {"relu6", [](const Tensor& x) { return F::relu6(x); }, 5},
      {"hardsigmoid", [](const Tensor& x) { return F::hardsigmoid(x); }, 4, true},
      {"hardswish", [](const Tensor& x) { return F::hardswish(x); }, 4, true},
      {"mish", [](const Tensor& x) { return F::mish(x); }, 3},
      {"celu", [](const Tensor& x) { return F::celu(x, F::CELUFuncOptions().alpha(0.7)); }, 2},
      {"selu", [](const Tensor& x) { return F::selu(x); }, 2},
      {"rrelu_eval", [](const Tensor& x) { return F::rrelu(x); }, 2},
      {"rrelu_train",
       [](const Tensor& x) {
         Generator gen(x.device(), 21);
         return F::rrelu(x, F::RReLUFuncOptions().training(true).generator(&gen));
       },
       2},
      {"logsigmoid", [](const Tensor& x) { return F::logsigmoid(x); }, 4},
      {"threshold",
       [](const Tensor& x) {
         return F::threshold(x, {0.25, -3});
       },
       1},
      {"tanhshrink", [](const Tensor& x) { return F::tanhshrink(x); }, 2},
      {"softshrink", [](const Tensor& x) { return F::softshrink(x, 0.375); }, 1},
      {"hardshrink", [](const Tensor& x) { return F::hardshrink(x, 0.375); }, 1},
  };
  return ops;
}

}  // namespace

TEST_CASE("nn activations: CUDA matches the CPU on awkward shapes and views" *
          doctest::skip(!cuda::is_available())) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    const double tol = parity_tolerance(dtype);
    for (const auto& op : unary_activations()) {
      CAPTURE(op.name);
      CAPTURE(dtype_name(dtype));
      auto f = [&op](const std::vector<Tensor>& x) { return op.f(x[0]); };
      const bool grad = !(op.kinked_intermediate && dtype == DType::bf16);
      for (int64_t n : {0, 1, 7, 4099}) {
        CAPTURE(n);
        check_parity(f, {gpu_randn({n}, dtype, op.scale)}, tol, grad);
      }
      check_parity(f, {gpu_randn({65, 33}, dtype, op.scale).t()}, tol, grad);  // transposed
    }
    // The ones with a dim or a second operand.
    check_parity([](const std::vector<Tensor>& x) { return F::glu(x[0]); },
                 {gpu_randn({5, 66}, dtype)}, tol);
    check_parity([](const std::vector<Tensor>& x) { return F::glu(x[0], 0); },
                 {gpu_randn({7, 6}, dtype).t()}, tol);
    check_parity([](const std::vector<Tensor>& x) { return F::softmin(x[0], 0); },
                 {gpu_randn({33, 5}, dtype, 3)}, tol);
    check_parity([](const std::vector<Tensor>& x) { return F::prelu(x[0], x[1]); },
                 {gpu_randn({3, 5, 7}, dtype), gpu_uniform({5}, dtype, 0, 0.5)}, tol);
    check_parity([](const std::vector<Tensor>& x) { return F::prelu(x[0], x[1]); },
                 {gpu_randn({4, 9, 3, 2}, dtype).contiguous(MemoryFormat::channels_last),
                  gpu_uniform({1}, dtype, 0, 0.5)},
                 tol);
    check_parity(
        [](const std::vector<Tensor>& x) {
          Generator gen(x[0].device(), 4);
          return F::gumbel_softmax(x[0], F::GumbelSoftmaxFuncOptions().tau(0.5).generator(&gen));
        },
        {gpu_randn({9, 33}, dtype)}, dtype == DType::bf16 ? 0.1 : tol);
  }
}

TEST_CASE("nn distances and normalization: CUDA matches the CPU, broadcast and strided" *
          doctest::skip(!cuda::is_available())) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    CAPTURE(dtype_name(dtype));
    const double tol = parity_tolerance(dtype);
    check_parity([](const std::vector<Tensor>& x) { return F::cosine_similarity(x[0], x[1]); },
                 {gpu_randn({6, 33}, dtype), gpu_randn({33, 6}, dtype).t()}, tol);
    check_parity(
        [](const std::vector<Tensor>& x) {
          return F::cosine_similarity(x[0], x[1], F::CosineSimilarityFuncOptions().dim(-1));
        },
        {gpu_randn({5, 1, 7}, dtype), gpu_randn({1, 4, 7}, dtype)}, tol);
    check_parity([](const std::vector<Tensor>& x) { return F::pairwise_distance(x[0], x[1]); },
                 {gpu_randn({1, 7}, dtype), gpu_randn({9, 7}, dtype)}, tol);
    check_parity(
        [](const std::vector<Tensor>& x) {
          return F::pairwise_distance(x[0], x[1],
                                      F::PairwiseDistanceFuncOptions().p(1).keepdim(true));
        },
        {gpu_randn({17, 5}, dtype), gpu_randn({5, 17}, dtype).t()}, tol);
    check_parity([](const std::vector<Tensor>& x) { return F::cdist(x[0], x[1]); },
                 {gpu_randn({2, 33, 5}, dtype), gpu_randn({2, 17, 5}, dtype)}, tol);
    check_parity([](const std::vector<Tensor>& x) { return F::cdist(x[0], x[1], 1.5); },
                 {gpu_randn({1, 5}, dtype), gpu_randn({3, 5}, dtype)}, tol);
    check_parity([](const std::vector<Tensor>& x) { return F::cdist(x[0], x[1]); },
                 {gpu_randn({0, 5}, dtype), gpu_randn({3, 5}, dtype)}, tol);
    check_parity([](const std::vector<Tensor>& x) { return F::normalize(x[0]); },
                 {gpu_randn({6, 1025}, dtype)}, tol);
    check_parity(
        [](const std::vector<Tensor>& x) {
          return F::normalize(x[0], F::NormalizeFuncOptions().p(3).dim(0));
        },
        {gpu_randn({7, 1}, dtype)}, tol);
    check_parity(
        [](const std::vector<Tensor>& x) {
          return F::local_response_norm(x[0], F::LocalResponseNormFuncOptions(4).alpha(0.3));
        },
        {gpu_randn({2, 7, 5, 3}, dtype).contiguous(MemoryFormat::channels_last)}, tol);
    check_parity(
        [](const std::vector<Tensor>& x) {
          return F::local_response_norm(x[0], F::LocalResponseNormFuncOptions(9).k(2));
        },
        {gpu_randn({3, 5, 33}, dtype)}, tol);
  }
}

TEST_CASE("nn losses: CUDA matches the CPU for every reduction on awkward shapes" *
          doctest::skip(!cuda::is_available())) {
  using V = const std::vector<Tensor>&;
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    for (LossReduction r : {LossReduction::none, LossReduction::mean, LossReduction::sum}) {
      for (Shape s : {Shape{1, 5}, Shape{37, 33}}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(int(r));
        CAPTURE(s[0]);
        const int64_t n = s[0], c = s[1];
        const double tol = parity_tolerance(dtype);
        const bool hinge_grad = dtype != DType::bf16;                      // see check_parity
        Tensor x = gpu_randn(s, dtype), y = gpu_randn({c, n}, dtype).t();  // y: strided
        Tensor prob = gpu_uniform(s, dtype, 0.02, 0.98), soft = gpu_uniform(s, dtype, 0, 1);
        Tensor pos = gpu_uniform(s, dtype, 0.1, 3);
        Tensor labels_n = (randint(0, 2, {n}) * 2 - 1).to(Device::cuda(), dtype);
        Tensor labels_s = (randint(0, 2, s) * 2 - 1).to(Device::cuda(), dtype);
        Tensor classes = randint(0, c, {n}).to(Device::cuda());
        Tensor weight_c = gpu_uniform({c}, dtype, 0.5, 2);
        check_parity(
            [r](V v) {
              return F::smooth_l1_loss(v[0], v[1],
                                       F::SmoothL1LossFuncOptions().beta(0.4).reduction(r));
            },
            {x, y}, tol);
        check_parity(
            [r](V v) {
              return F::huber_loss(v[0], v[1], F::HuberLossFuncOptions().delta(0.7).reduction(r));
            },
            {x, y}, tol);
        check_parity(
            [r](V v) {
              return F::binary_cross_entropy(
                  v[0], v[1], F::BinaryCrossEntropyFuncOptions().weight(v[2]).reduction(r));
            },
            {prob, soft, weight_c}, tol);
        for (bool log_target : {false, true}) {
          auto kr = r == LossReduction::none  ? nn::KLDivReduction::none
                    : r == LossReduction::sum ? nn::KLDivReduction::sum
                                              : nn::KLDivReduction::batchmean;
          check_parity(
              [kr, log_target](V v) {
                return F::kl_div(v[0], v[1],
                                 F::KLDivFuncOptions().reduction(kr).log_target(log_target));
              },
              {x, log_target ? y : soft}, tol);
        }
        check_parity(
            [r](V v) {
              return F::poisson_nll_loss(v[0], v[1], F::PoissonNLLLossFuncOptions().reduction(r));
            },
            {x, pos}, tol);
        check_parity(
            [r](V v) {
              return F::poisson_nll_loss(
                  v[0], v[1],
                  F::PoissonNLLLossFuncOptions().log_input(false).full(true).reduction(r));
            },
            {pos, pos * 2.0}, tol);
        check_parity(
            [r](V v) {
              return F::gaussian_nll_loss(v[0], v[1], v[2],
                                          F::GaussianNLLLossFuncOptions().full(true).reduction(r));
            },
            {x, y, pos}, tol);
        check_parity(
            [r](V v) {
              return F::gaussian_nll_loss(v[0], v[1], v[2],
                                          F::GaussianNLLLossFuncOptions().reduction(r));
            },
            {x, y, gpu_uniform({n}, dtype, 0.1, 2)}, tol);
        check_parity(
            [r](V v) {
              return F::margin_ranking_loss(
                  v[0], v[1], v[2], F::MarginRankingLossFuncOptions().margin(0.3).reduction(r));
            },
            {x, y, labels_s}, tol, hinge_grad);
        check_parity(
            [r](V v) {
              return F::hinge_embedding_loss(
                  v[0], v[1], F::HingeEmbeddingLossFuncOptions().margin(0.8).reduction(r));
            },
            {x, labels_s}, tol, hinge_grad);
        check_parity(
            [r](V v) {
              return F::multilabel_soft_margin_loss(
                  v[0], v[1], F::MultilabelSoftMarginLossFuncOptions().weight(v[2]).reduction(r));
            },
            {x, soft, weight_c}, tol);
        for (int64_t p : {1, 2}) {
          check_parity(
              [r, p](V v) {
                return F::multi_margin_loss(
                    v[0], v[1],
                    F::MultiMarginLossFuncOptions().p(p).margin(0.6).weight(v[2]).reduction(r));
              },
              {y, classes, weight_c}, tol, hinge_grad || p == 2);
        }
        check_parity(
            [r](V v) {
              return F::cosine_embedding_loss(
                  v[0], v[1], v[2], F::CosineEmbeddingLossFuncOptions().margin(0.1).reduction(r));
            },
            {x, y, labels_n}, tol, hinge_grad);
        for (bool swap : {false, true}) {
          check_parity(
              [r, swap](V v) {
                return F::triplet_margin_loss(
                    v[0], v[1], v[2],
                    F::TripletMarginLossFuncOptions().margin(1.5).swap(swap).reduction(r));
              },
              {x, y, gpu_randn(s, dtype)}, tol, hinge_grad);
        }
      }
    }
  }
}

TEST_CASE("nn modules with state run on CUDA after to(device)" *
          doctest::skip(!cuda::is_available())) {
  nn::PReLU prelu(nn::PReLUOptions().num_parameters(5));
  prelu->to(Device::cuda());
  Tensor x = gpu_randn({3, 5, 4}, DType::f32);
  Tensor out = prelu(x);
  CHECK(out.device() == x.device());
  out.sum().backward();
  CHECK(prelu->weight.grad().device() == x.device());
  nn::MultiMarginLoss loss(nn::MultiMarginLossOptions().weight(ones({4})));
  loss->to(Device::cuda());
  Tensor l = loss(gpu_randn({6, 4}, DType::f32), randint(0, 4, {6}).to(Device::cuda()));
  CHECK(l.device() == x.device());
}
