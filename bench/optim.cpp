// Optimizer-step benchmarks (GPU): the fused multi-tensor AdamW and SGD-momentum steps and
// clip_grad_norm_, on ResNet-50's 161 parameter tensors (25.6M float32 values) and on 2000 small
// tensors (launch packing). The PyTorch side is bench/optim.py (torch.optim with fused=True, and
// torch.nn.utils.clip_grad_norm_), same bench/shape keys. Parameters and gradients are
// deterministic (tensor k: p = sin(0.001 (i + k)), g = 0.01 cos(0.002 (i + k)), in fp64 then
// float32) and each line's checksum (the sum of all parameters after three steps from that
// state, or the norm) must match PyTorch's before its time means anything. GBps counts the
// minimum traffic: AdamW 28 bytes per parameter, SGD with momentum 20, clipping 12.
#include "ember/nn/optim.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/nn/clip_grad.h"
#include "timing.h"

using namespace ember;

namespace {

const Device kGpu = Device::cuda();

using bench::time_ms;

void emit(const std::string& bench, const std::string& shape, double ms, double bytes,
          double checksum) {
  std::printf(
      "{\"bench\":\"%s\",\"impl\":\"ember\",\"shape\":\"%s\",\"ms\":%.6f,\"GBps\":%.3f,"
      "\"checksum\":%.9g}\n",
      bench.c_str(), shape.c_str(), ms, bytes / (ms * 1e6), checksum);
  std::fflush(stdout);
}

// ResNet-50's parameter sizes in registration order (conv weights, BN weight and bias, fc).
std::vector<int64_t> resnet50_sizes() {
  std::vector<int64_t> s = {64 * 3 * 7 * 7, 64, 64};
  int64_t in = 64;
  const int64_t widths[] = {64, 128, 256, 512}, blocks[] = {3, 4, 6, 3};
  for (int layer = 0; layer < 4; ++layer) {
    const int64_t w = widths[layer], out = 4 * w;
    for (int64_t b = 0; b < blocks[layer]; ++b) {
      for (int64_t n : {in * w, w, w, w * w * 9, w, w, w * out, out, out}) s.push_back(n);
      if (b == 0)
        for (int64_t n : {in * out, out, out}) s.push_back(n);
      in = out;
    }
  }
  s.push_back(1000 * 2048);
  s.push_back(1000);
  return s;
}

std::vector<int64_t> many_small_sizes() {
  std::vector<int64_t> s;
  for (int64_t k = 0; k < 2000; ++k) s.push_back(1000 + (k * 7919) % 1000);
  return s;
}

// Fresh parameters with their gradients set, deterministic as the file comment says.
std::vector<Tensor> make_params(const std::vector<int64_t>& sizes) {
  autograd::NoGradGuard no_grad;
  const auto f64 = TensorOptions(DType::f64).with_device(kGpu);
  std::vector<Tensor> params;
  for (size_t k = 0; k < sizes.size(); ++k) {
    Tensor i = arange(double(sizes[k]), f64) + double(k);
    Tensor p = sin(i * 0.001).to(DType::f32).set_requires_grad(true);
    p.set_grad((cos(i * 0.002) * 0.01).to(DType::f32));
    params.push_back(p);
  }
  return params;
}

double sum_all(const std::vector<Tensor>& params) {
  autograd::NoGradGuard no_grad;
  Tensor total = zeros({}, TensorOptions(DType::f64).with_device(kGpu));
  for (const Tensor& p : params) total = total + sum(p.detach().to(DType::f64));
  return total.item();
}

int64_t count(const std::vector<int64_t>& sizes) {
  int64_t n = 0;
  for (int64_t s : sizes) n += s;
  return n;
}

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

void bench_optimizer(const std::string& bench, const MakeOptimizer& make, double bytes_per_param,
                     const std::string& shape, const std::vector<int64_t>& sizes) {
  std::vector<Tensor> params = make_params(sizes);
  auto opt = make(params);
  for (int i = 0; i < 3; ++i) opt->step();
  const double checksum = sum_all(params);
  const double ms = time_ms([&] { opt->step(); });
  emit(bench, shape, ms, bytes_per_param * double(count(sizes)), checksum);
}

void bench_clip(const std::string& shape, const std::vector<int64_t>& sizes) {
  std::vector<Tensor> params = make_params(sizes);
  const double checksum = nn::clip_grad_norm_(params, 1e9).item();
  const double ms = time_ms([&] { nn::clip_grad_norm_(params, 1e9); });
  emit("clip_grad_norm", shape, ms, 12.0 * double(count(sizes)), checksum);
}

}  // namespace

int main() {
  if (!cuda::is_available()) {
    std::printf("{\"bench\":\"optim\",\"skipped\":\"no GPU\"}\n");
    return 0;
  }
  const MakeOptimizer adamw = [](std::vector<Tensor> p) {
    return std::make_unique<optim::AdamW>(std::move(p),
                                          optim::AdamWOptions(1e-3).weight_decay(1e-2));
  };
  const MakeOptimizer sgd = [](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(std::move(p),
                                        optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-4));
  };
  for (const auto& [shape, sizes] :
       {std::pair{std::string("resnet50 f32"), resnet50_sizes()},
        std::pair{std::string("2000 small f32"), many_small_sizes()}}) {
    try {
      bench_optimizer("adamw_step", adamw, 28, shape, sizes);
      bench_optimizer("sgd_momentum_step", sgd, 20, shape, sizes);
      bench_clip(shape, sizes);
    } catch (const Error& e) {
      std::printf("{\"bench\":\"optim\",\"shape\":\"%s\",\"error\":\"%s\"}\n", shape.c_str(),
                  e.message().c_str());
    }
  }
  return 0;
}
