// GraphedStep on the GPU: replayed steps equal eager steps, shape changes get their own graphs,
// the LRU bound evicts, and an uncapturable step falls back to eager with a message.
#include <doctest/doctest.h>

#include "ember/ember.h"
#include "ember/nn/graphed_step.h"

using namespace ember;

namespace {
struct TinyModel {
  Tensor w, b;
  explicit TinyModel(Device d) {
    Generator gen(Device::cpu(), 11);
    w = (randn({8, 16}, TensorOptions(), &gen) * 0.2).to(d).detach().set_requires_grad(true);
    b = zeros({8}, TensorOptions().with_device(d)).set_requires_grad(true);
  }
  // One SGD step; returns the loss as a 1-element tensor (no host sync).
  std::vector<Tensor> step(const std::vector<Tensor>& in) {
    Tensor y = tanh(linear(in[0], w, b));
    Tensor loss = mean(square(y - in[1]));
    loss.backward();
    autograd::NoGradGuard ng;
    sub_(w, w.grad(), 0.05);
    sub_(b, b.grad(), 0.05);
    w.mutable_grad().zero_();
    b.mutable_grad().zero_();
    return {loss};
  }
};
}  // namespace

TEST_CASE("replayed steps equal eager steps" * doctest::skip(!cuda::is_available())) {
  Device dev = Device::cuda();
  TinyModel graphed(dev), eager(dev);
  nn::GraphedStep step([&](const std::vector<Tensor>& in) { return graphed.step(in); });
  Generator gen(Device::cpu(), 5);
  for (int i = 0; i < 12; ++i) {
    Tensor x = randn({32, 16}, TensorOptions(), &gen).to(dev),
           t = randn({32, 8}, TensorOptions(), &gen).to(dev);
    double lg = step({x, t})[0].item();
    double le = eager.step({x, t})[0].item();
    CHECK(lg == doctest::Approx(le).epsilon(1e-5));
  }
  CHECK(step.stats().captures == 1);
  CHECK(step.stats().replays == 12 - 3);
  CHECK(max_abs_diff(graphed.w.detach(), eager.w.detach()) < 1e-5);
}

TEST_CASE("each input shape gets its own graph; the LRU bound evicts" *
          doctest::skip(!cuda::is_available())) {
  Device dev = Device::cuda();
  TinyModel m(dev);
  nn::GraphedStepOptions opts;
  opts.warmup_steps = 1;
  opts.max_graphs = 2;
  nn::GraphedStep step([&](const std::vector<Tensor>& in) { return m.step(in); }, opts);
  for (int round = 0; round < 3; ++round)
    for (int64_t batch : {16, 32}) {
      auto o = TensorOptions().with_device(dev);
      step({randn({batch, 16}, o), randn({batch, 8}, o)});
    }
  CHECK(step.stats().captures == 2);
  CHECK(step.cached_graphs() == 2);
  auto o = TensorOptions().with_device(dev);
  step({randn({8, 16}, o), randn({8, 8}, o)});  // a third shape evicts the least recent
  CHECK(step.stats().evictions == 1);
  CHECK(step.cached_graphs() == 2);
}

TEST_CASE("a step with a host sync falls back to eager, naming the cause" *
          doctest::skip(!cuda::is_available())) {
  Device dev = Device::cuda();
  TinyModel m(dev);
  nn::GraphedStepOptions opts;
  opts.warmup_steps = 1;
  double last = 0;
  nn::GraphedStep step(
      [&](const std::vector<Tensor>& in) {
        auto out = m.step(in);
        last = out[0].item();  // a host sync: cannot be captured
        return out;
      },
      opts);
  auto o = TensorOptions().with_device(dev);
  for (int i = 0; i < 4; ++i) step({randn({16, 16}, o), randn({16, 8}, o)});
  CHECK(step.stats().fallbacks == 1);
  CHECK(step.stats().captures == 0);
  CHECK(step.stats().eager_steps == 4);
  CHECK_FALSE(step.last_fallback_reason().empty());
  CHECK(last > 0);
  // The device is healthy afterwards.
  CHECK(sum(ones({4}, o)).item() == 4);
}

TEST_CASE("random numbers drawn inside a graph differ on every replay" *
          doctest::skip(!cuda::is_available())) {
  Device dev = Device::cuda();
  nn::GraphedStepOptions opts;
  opts.warmup_steps = 1;
  nn::GraphedStep step(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{in[0] + rand({64}, TensorOptions().with_device(dev))};
      },
      opts);
  Tensor x = zeros({64}, TensorOptions().with_device(dev));
  step({x});
  std::vector<double> a = step({x})[0].to_vector();  // capture + first replay
  std::vector<double> b = step({x})[0].to_vector();
  CHECK(a != b);
}

TEST_CASE("replayed steps draw the random numbers the same eager steps draw" *
          doctest::skip(!cuda::is_available())) {
  Device dev = Device::cuda();
  auto o = TensorOptions().with_device(dev);
  auto draws = [&](bool graphs) {
    manual_seed(3);
    nn::GraphedStepOptions opts;
    opts.warmup_steps = 1;
    opts.enabled = graphs;
    nn::GraphedStep step(
        [&](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{in[0] + rand({64}, o), randn({3, 5}, o)};
        },
        opts);
    Tensor x = zeros({64}, o);
    std::vector<std::vector<double>> seen;
    for (int i = 0; i < 5; ++i) {
      auto out = step({x});
      seen.push_back(out[0].to_vector());
      seen.push_back(out[1].to_vector());
      seen.push_back(rand({7}, o).to_vector());  // an eager draw between steps
    }
    return seen;
  };
  const auto eager = draws(false), graphed = draws(true);
  REQUIRE(eager.size() == graphed.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    CAPTURE(i);
    CHECK(graphed[i] == eager[i]);
  }
  CHECK(eager[0] != eager[3]);  // and every step draws new numbers
}
