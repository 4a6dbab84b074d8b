// Concurrency stress test (label stress; scripts/sanitize.sh tsan runs it under ThreadSanitizer):
// at the same time, two threads each train their own small model, four threads serve no_grad
// inference from one shared model, and a data loader with many workers runs epochs. Each activity
// runs for EMBER_STRESS_SECONDS (default 2) and checks its own results, so a race shows as a TSan
// report, a wrong value or a crash.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ember/ember.h"
#include "ember/nn/nn.h"

using namespace ember;

namespace {

std::chrono::steady_clock::time_point deadline() {
  double s = 2;
  if (const char* v = std::getenv("EMBER_STRESS_SECONDS")) s = std::atof(v);
  return std::chrono::steady_clock::now() +
         std::chrono::milliseconds(int64_t(1000 * (s > 0 ? s : 2)));
}

nn::Sequential make_mlp() {
  return nn::Sequential(nn::Linear(8, 16), nn::ReLU(), nn::Linear(16, 3));
}

// Runs `body` on a thread; an exception is kept and rethrown by join_all.
struct Threads {
  std::vector<std::thread> threads;
  std::mutex mutex;
  std::vector<std::string> errors;
  template <typename F>
  void spawn(const std::string& name, F body) {
    threads.emplace_back([this, name, body] {
      try {
        body();
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        errors.push_back(name + ": " + e.what());
      }
    });
  }
  void join_all() {
    for (auto& t : threads) t.join();
    for (const auto& e : errors) FAIL_CHECK(e);
  }
};

}  // namespace

TEST_CASE("stress: training, shared no_grad inference and a many-worker loader at once") {
  const auto end = deadline();
  Threads threads;

  // Two trainers, each with its own model, data and optimizer.
  std::atomic<int> train_steps{0};
  std::vector<double> first_loss(2), last_loss(2);
  for (int k = 0; k < 2; ++k) {
    threads.spawn("trainer " + std::to_string(k), [&, k] {
      Generator gen(Device::cpu(), 100 + uint64_t(k));
      nn::Sequential model = make_mlp();
      optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
      Tensor x = randn({32, 8}, {}, &gen);
      Tensor y = randint(0, 3, {32}, TensorOptions(DType::i64), &gen);
      int step = 0;
      do {
        opt.zero_grad();
        Tensor loss = nn::cross_entropy(model->forward(x), y);
        loss.backward();
        opt.step();
        const double l = loss.item<double>();
        if (step == 0) first_loss[size_t(k)] = l;
        last_loss[size_t(k)] = l;
        ++step;
        train_steps.fetch_add(1);
      } while (std::chrono::steady_clock::now() < end || step < 5);
    });
  }

  // One model, four inference threads: every answer must match the single-threaded one.
  nn::Sequential served = make_mlp();
  Tensor query = randn({4, 8});
  Tensor expected;
  {
    autograd::NoGradGuard no_grad;
    expected = served->forward(query);
  }
  std::atomic<int> inferences{0};
  for (int k = 0; k < 4; ++k) {
    threads.spawn("inference " + std::to_string(k), [&] {
      autograd::NoGradGuard no_grad;
      do {
        Tensor out = served->forward(query);
        if (!allclose(out, expected, 1e-6, 1e-7))
          throw std::runtime_error("inference result differs");
        inferences.fetch_add(1);
      } while (std::chrono::steady_clock::now() < end);
    });
  }

  // A loader with 8 workers over 200 examples in batches of 7: each epoch must yield every
  // example exactly once.
  std::atomic<int> epochs{0};
  threads.spawn("loader", [&] {
    const int64_t n = 200;
    auto dataset = std::make_shared<data::TensorDataset>(
        std::vector<Tensor>{arange(double(n), TensorOptions(DType::i64)), randn({n, 3})});
    data::DataLoader loader(dataset,
                            data::DataLoaderOptions(7).shuffle(true).num_workers(8).seed(5));
    do {
      std::vector<int> seen(size_t(n), 0);
      for (auto& batch : loader) {
        Tensor ids = batch[0].contiguous();
        for (int64_t i = 0; i < ids.numel(); ++i) ++seen[size_t(ids.data<int64_t>()[i])];
      }
      for (int c : seen)
        if (c != 1) throw std::runtime_error("an epoch did not yield every example exactly once");
      epochs.fetch_add(1);
    } while (std::chrono::steady_clock::now() < end);
  });

  threads.join_all();
  MESSAGE("training steps ", train_steps.load(), ", inferences ", inferences.load(),
          ", loader epochs ", epochs.load());
  for (int k = 0; k < 2; ++k) {
    CHECK(std::isfinite(last_loss[size_t(k)]));
    CHECK(last_loss[size_t(k)] < first_loss[size_t(k)]);
  }
  CHECK(inferences.load() >= 4);
  CHECK(epochs.load() >= 1);
}
