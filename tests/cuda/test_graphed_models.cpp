// Issue 8's correctness bar on real models: N steps through nn::GraphedStep (eager warm-up,
// capture, replays) leave the same losses and the same parameters as N eager steps, bitwise, in
// the algorithm cache's deterministic mode. Two models in the shape of the bundled examples: a
// small residual CNN (conv, BatchNorm with running statistics, fused add+ReLU, bf16 autocast, SGD
// with momentum and weight decay, a cosine LR schedule stepped between replays) and a character
// LSTM language model (embedding, 2-layer LSTM with dropout, Adam, gradient clipping).
#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <vector>

#include "ember/ember.h"
#include "ember/nn/graphed_step.h"
#include "ember/nn/nn.h"

using namespace ember;

namespace {

struct SmallResNetImpl : nn::Module {
  nn::Conv2d stem{nullptr}, conv1{nullptr}, conv2{nullptr}, down{nullptr};
  nn::BatchNorm2d bn0{nullptr}, bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  nn::Linear head{nullptr};
  SmallResNetImpl() : nn::Module("SmallResNet") {
    stem = register_module("stem", nn::Conv2d(nn::Conv2dOptions(1, 16, 3).padding(1).bias(false)));
    bn0 = register_module("bn0", nn::BatchNorm2d(16));
    conv1 =
        register_module("conv1", nn::Conv2d(nn::Conv2dOptions(16, 16, 3).padding(1).bias(false)));
    bn1 = register_module("bn1", nn::BatchNorm2d(16));
    conv2 =
        register_module("conv2", nn::Conv2d(nn::Conv2dOptions(16, 16, 3).padding(1).bias(false)));
    bn2 = register_module("bn2", nn::BatchNorm2d(16));
    down = register_module(
        "down", nn::Conv2d(nn::Conv2dOptions(16, 32, 3).stride(2).padding(1).bias(false)));
    bn3 = register_module("bn3", nn::BatchNorm2d(32));
    head = register_module("head", nn::Linear(32, 10));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = bn0->forward_relu(stem->forward(x));
    Tensor r = bn1->forward_relu(conv1->forward(h));
    h = bn2->forward_add_relu(conv2->forward(r), h);
    h = bn3->forward_relu(down->forward(h));
    return head->forward(mean(h, {2, 3}));
  }
};

struct CharModelImpl : nn::Module {
  nn::Embedding embed{nullptr};
  nn::LSTM lstm{nullptr};
  nn::Linear head{nullptr};
  CharModelImpl() : nn::Module("CharModel") {
    embed = register_module("embed", nn::Embedding(64, 32));
    lstm = register_module(
        "lstm", nn::LSTM(nn::LSTMOptions(32, 64).num_layers(2).batch_first(true).dropout(0.2)));
    head = register_module("head", nn::Linear(64, 64));
  }
  Tensor forward(const Tensor& tokens) {
    return head->forward(lstm->forward(embed->forward(tokens)).output);
  }
};

// Losses and final parameters (and buffers) of `steps` training steps, graphed or eager. The
// model, optimizer and data are rebuilt from the same seeds for each run, and the global
// generator is reseeded, so both runs draw the same dropout masks.
struct RunResult {
  std::vector<double> losses;
  std::vector<Tensor> state;
  nn::GraphedStepStats stats;
};

template <typename Model, typename MakeStep, typename MakeBatch>
RunResult run(bool graphs, int steps, MakeStep make_step, MakeBatch make_batch) {
  dispatch::AlgoModeGuard deterministic(dispatch::AlgoMode::deterministic);
  const Device dev = Device::cuda();
  manual_seed(1234);
  auto model = std::make_shared<Model>();
  model->to(dev);
  manual_seed(99);  // the same stream of device random numbers (dropout) in both runs
  auto [step_fn, between_steps] = make_step(*model);
  nn::GraphedStepOptions options;
  options.enabled = graphs;
  options.warmup_steps = 2;
  nn::GraphedStep step(step_fn, options);
  Generator data_gen(Device::cpu(), 7);
  RunResult result;
  for (int i = 0; i < steps; ++i) {
    std::vector<Tensor> batch = make_batch(data_gen);
    for (Tensor& t : batch) t = t.to(dev);
    result.losses.push_back(step(batch)[0].item());
    between_steps();
  }
  for (const auto& [name, p] : model->named_parameters()) result.state.push_back(p.detach().cpu());
  for (const auto& [name, b] : model->named_buffers()) result.state.push_back(b.detach().cpu());
  result.stats = step.stats();
  return result;
}

void check_same(const RunResult& graphed, const RunResult& eager, int steps) {
  CHECK(graphed.stats.captures == 1);
  CHECK(graphed.stats.replays == uint64_t(steps - 2));
  CHECK(graphed.stats.fallbacks == 0);
  REQUIRE(graphed.losses.size() == eager.losses.size());
  for (size_t i = 0; i < eager.losses.size(); ++i) {
    CAPTURE(i);
    CHECK(graphed.losses[i] == eager.losses[i]);  // bitwise: the same kernels in the same order
  }
  // Training moved the parameters (the comparison below is not between untouched copies).
  CHECK(eager.losses.back() != eager.losses.front());
  REQUIRE(graphed.state.size() == eager.state.size());
  for (size_t k = 0; k < eager.state.size(); ++k) {
    CAPTURE(k);
    CHECK(max_abs_diff(graphed.state[k].to(DType::f64), eager.state[k].to(DType::f64)) == 0.0);
  }
}

}  // namespace

// Both ways of clearing gradients at the end of the step: zeroed in place (their memory is kept
// across replays) and dropped (set_to_none: each replay's backward writes fresh gradients from the
// graph's pool, with no fill and no accumulating add).
TEST_CASE("a residual CNN: N graphed steps equal N eager steps, bitwise" *
          doctest::skip(!cuda::is_available())) {
  constexpr int kSteps = 10;
  for (const bool set_to_none : {false, true}) {
    CAPTURE(set_to_none);
    auto make_step = [set_to_none](SmallResNetImpl& model) {
      const int64_t schedule_length = kSteps;
      auto opt = std::make_shared<optim::SGD>(
          model.parameters(), optim::SGDOptions(0.05).momentum(0.9).weight_decay(5e-4));
      auto sched = std::make_shared<optim::CosineAnnealingLR>(*opt, schedule_length);
      std::function<std::vector<Tensor>(const std::vector<Tensor>&)> step =
          [&model, opt, set_to_none](const std::vector<Tensor>& in) {
            Tensor loss;
            {
              nn::AutocastGuard autocast(DType::bf16);
              loss = cross_entropy(model.forward(in[0]).to(DType::f32), in[1]);
            }
            loss.backward();
            opt->step();
            opt->zero_grad(set_to_none);
            return std::vector<Tensor>{loss.detach()};
          };
      std::function<void()> between = [sched = sched] { sched->step(); };
      return std::make_pair(step, between);
    };
    auto make_batch = [](Generator& gen) {
      return std::vector<Tensor>{randn({32, 1, 12, 12}, TensorOptions(), &gen),
                                 randint(0, 10, {32}, TensorOptions(DType::i64), &gen)};
    };
    const RunResult eager = run<SmallResNetImpl>(false, kSteps, make_step, make_batch);
    const RunResult graphed = run<SmallResNetImpl>(true, kSteps, make_step, make_batch);
    check_same(graphed, eager, kSteps);
  }
}

TEST_CASE("an LSTM language model: N graphed steps equal N eager steps, bitwise" *
          doctest::skip(!cuda::is_available())) {
  constexpr int kSteps = 8;
  auto make_step = [](CharModelImpl& model) {
    auto opt = std::make_shared<optim::Adam>(model.parameters(), optim::AdamOptions(3e-3));
    std::function<std::vector<Tensor>(const std::vector<Tensor>&)> step =
        [&model, opt](const std::vector<Tensor>& in) {
          Tensor logits = model.forward(in[0]);
          Tensor loss = cross_entropy(logits.reshape({-1, 64}), in[1].reshape({-1}));
          loss.backward();
          nn::clip_grad_norm_(model.parameters(), 1.0);
          opt->step();
          opt->zero_grad();  // dropped, as examples/lstm does without DDP
          return std::vector<Tensor>{loss.detach()};
        };
    std::function<void()> between = [] {};
    return std::make_pair(step, between);
  };
  auto make_batch = [](Generator& gen) {
    return std::vector<Tensor>{randint(0, 64, {16, 24}, TensorOptions(DType::i64), &gen),
                               randint(0, 64, {16, 24}, TensorOptions(DType::i64), &gen)};
  };
  const RunResult eager = run<CharModelImpl>(false, kSteps, make_step, make_batch);
  const RunResult graphed = run<CharModelImpl>(true, kSteps, make_step, make_batch);
  check_same(graphed, eager, kSteps);
}
