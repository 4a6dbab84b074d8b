// The CPU kernels on the thread pool give bitwise the same results for any thread count: each
// family (elementwise with broadcast and strided inputs, activations, dropout, copies, reductions
// over dims and over everything, scans, softmax / log_softmax / cross-entropy, batch / layer /
// group norm forward and backward, max / avg pooling forward and backward, SGD with momentum and
// Adam) runs on tensors large enough to be split with 1, 2 and 3 threads, and the outputs are
// compared byte for byte.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/tensor/parallel.h"

using namespace ember;

namespace {

// Restores the thread count a test changed.
struct ThreadCountGuard {
  int saved = get_num_threads();
  ~ThreadCountGuard() { set_num_threads(saved); }
};

Tensor random_f32(const Shape& shape, uint64_t seed) {
  Generator gen(Device::cpu(), seed);
  return randn(shape, TensorOptions(DType::f32), &gen);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// Runs compute() with 1, 2 and 3 threads and checks that every tensor it returns is bitwise the
// same as with one thread.
void check_thread_independent(const std::function<std::vector<Tensor>()>& compute) {
  ThreadCountGuard guard;
  set_num_threads(1);
  const std::vector<Tensor> reference = compute();
  for (int threads : {2, 3}) {
    set_num_threads(threads);
    const std::vector<Tensor> got = compute();
    REQUIRE(got.size() == reference.size());
    for (size_t k = 0; k < got.size(); ++k) {
      INFO("threads ", threads, ", output ", k);
      CHECK(same_bytes(got[k], reference[k]));
    }
  }
}

// x and the gradient backward() leaves in it, for a scalar made of f(x) and fixed weights.
std::vector<Tensor> value_and_grad(const Tensor& input, const std::function<Tensor(Tensor)>& f) {
  Tensor x = input.detach().clone();
  x.requires_grad_(true);
  Tensor y = f(x);
  Tensor weights = random_f32(y.sizes(), 99);
  sum(y * weights).backward();
  return {y.detach(), x.grad()};
}

}  // namespace

TEST_CASE("cpu threads: elementwise unary and binary, broadcast and strided inputs") {
  const Tensor a = random_f32({3, 100003}, 1), b = random_f32({100003}, 2);
  const Tensor c = random_f32({257, 4099}, 3);
  const Tensor strided = c.transpose(0, 1);  // [4099, 257], inner stride 4099
  check_thread_independent([&] {
    return std::vector<Tensor>{add(a, b, 0.5),
                               mul(a, b),
                               exp(a),
                               tanh(c),
                               sigmoid(strided),
                               add(strided, 1.5),
                               mul(strided, c.transpose(0, 1).contiguous()),
                               where(gt(a, b), a, b),
                               strided.contiguous(),
                               a.to(DType::f64),
                               c.to(DType::bf16),
                               gelu(c),
                               leaky_relu(strided, 0.1)};
  });
}

TEST_CASE("cpu threads: rows broadcast along the inner dim match the dense computation") {
  const Tensor x = random_f32({257, 4099}, 20), bias = random_f32({257, 1}, 21);
  const Tensor dense_bias = bias.expand({257, 4099}).contiguous();
  check_thread_independent([&] {
    const Tensor sum_broadcast = add(x, bias, 0.5), product_broadcast = mul(bias, x);
    CHECK(same_bytes(sum_broadcast, add(x, dense_bias, 0.5)));
    CHECK(same_bytes(product_broadcast, mul(dense_bias, x)));
    return std::vector<Tensor>{sum_broadcast, product_broadcast, add(x.transpose(0, 1), 2.0)};
  });
}

TEST_CASE("cpu threads: activation backward and dropout") {
  const Tensor x = random_f32({257, 4099}, 4);
  check_thread_independent([&] {
    std::vector<Tensor> out = value_and_grad(x, [](Tensor t) { return silu(t); });
    Generator gen(Device::cpu(), 7);
    Tensor dropped = x.detach().clone();
    dropped.requires_grad_(true);
    Tensor y = dropout(dropped, 0.3, true, &gen);
    sum(y * 2.0).backward();
    out.push_back(y.detach());
    out.push_back(dropped.grad());
    return out;
  });
}

TEST_CASE("cpu threads: sum, mean, max, argmax, var over dims and over everything") {
  const Tensor a = random_f32({3, 100003}, 5), c = random_f32({257, 4099}, 6);
  const Tensor big = random_f32({1 << 20}, 7);
  check_thread_independent([&] {
    return std::vector<Tensor>{
        sum(a, {1}), sum(c, {0}),  sum(c, {1}),           sum(big),
        mean(c),     mean(a, {0}), amax(c, {0}),          max(big),
        argmax(big), argmax(c, 1), argmax(c, 0),          var(big),
        var(c, {1}), var(c, {0}),  sum(c.to(DType::f64)), sum(c.transpose(0, 1), {1})};
  });
}

TEST_CASE("cpu threads: cumsum along rows and columns") {
  const Tensor a = random_f32({3, 100003}, 8), c = random_f32({257, 4099}, 9);
  check_thread_independent([&] {
    return std::vector<Tensor>{cumsum(a, 1), cumsum(c, 0), cumsum(c, 1)};
  });
}

TEST_CASE("cpu threads: softmax, log_softmax and cross-entropy, forward and backward") {
  const Tensor c = random_f32({257, 4099}, 10);
  const Tensor target = randint(0, 4099, {257});
  check_thread_independent([&] {
    std::vector<Tensor> out = value_and_grad(c, [](Tensor t) { return softmax(t, 1); });
    for (const Tensor& t : value_and_grad(c, [](Tensor t) { return log_softmax(t, 0); }))
      out.push_back(t);
    for (const Tensor& t : value_and_grad(c, [&](Tensor t) {
           return cross_entropy(t, target, CrossEntropyOptions{}.with_ignore_index(3));
         }))
      out.push_back(t);
    return out;
  });
}

TEST_CASE("cpu threads: batch, layer and group norm, forward and backward") {
  const Tensor x = random_f32({16, 24, 28, 28}, 11);
  const Tensor w = random_f32({24}, 12), bias = random_f32({24}, 13);
  const Tensor rows = random_f32({257, 4099}, 14);
  const Tensor ln_w = random_f32({4099}, 15), ln_b = random_f32({4099}, 16);
  check_thread_independent([&] {
    std::vector<Tensor> out;
    for (const Tensor& t : value_and_grad(
             x, [&](Tensor t) { return batch_norm(t, w, bias, Tensor(), Tensor(), true); }))
      out.push_back(t);
    for (const Tensor& t : value_and_grad(x, [&](Tensor t) { return group_norm(t, 6, w, bias); }))
      out.push_back(t);
    Tensor lw = ln_w.clone(), lb = ln_b.clone();
    lw.requires_grad_(true);
    lb.requires_grad_(true);
    for (const Tensor& t :
         value_and_grad(rows, [&](Tensor t) { return layer_norm(t, {4099}, lw, lb); }))
      out.push_back(t);
    out.push_back(lw.grad());
    out.push_back(lb.grad());
    return out;
  });
}

TEST_CASE("cpu threads: max and avg pooling, forward and backward") {
  const Tensor x = random_f32({8, 32, 56, 56}, 17);
  check_thread_independent([&] {
    std::vector<Tensor> out = value_and_grad(x, [](Tensor t) {
      return max_pool2d(t, {3, 3}, {2, 2}, {1});
    });
    for (const Tensor& t : value_and_grad(x, [](Tensor t) {
           return avg_pool2d(t, {3, 3}, {2, 2}, {1});
         }))
      out.push_back(t);
    return out;
  });
}

TEST_CASE("cpu threads: SGD with momentum and Adam steps") {
  const Tensor p0 = random_f32({257, 4099}, 18), g0 = random_f32({257, 4099}, 19);
  check_thread_independent([&] {
    std::vector<Tensor> out;
    {
      Tensor p = p0.clone();
      p.requires_grad_(true);
      optim::SGD sgd({p}, optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-2).nesterov(true));
      for (int step = 0; step < 2; ++step) {
        sum(p * g0).backward();
        sgd.step();
        sgd.zero_grad();
      }
      out.push_back(p.detach());
    }
    {
      Tensor p = p0.clone();
      p.requires_grad_(true);
      optim::Adam adam({p}, optim::AdamOptions(1e-2).weight_decay(1e-2));
      for (int step = 0; step < 2; ++step) {
        sum(p * g0).backward();
        adam.step();
        adam.zero_grad();
      }
      out.push_back(p.detach());
    }
    return out;
  });
}
