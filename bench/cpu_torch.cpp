// bench/cpu.cpp's libtorch C++ twin (issue 38's CPU bar table): the same rows, models, synthetic
// inputs, thread count, warm-up and medians, through libtorch on the CPU. Built only with
// -DEMBER_BUILD_TORCH_TWIN=ON when libtorch is found (bench/CMakeLists.txt); scripts/bench_cpu.sh
// runs it beside bench_cpu. Rows (see bench/cpu.cpp for what each measures):
//   resnet18_step  torchvision's ResNet-18 layout with the CIFAR stem (3x3 stride-1 conv, no max
//                  pool), restated below in torch::nn, 1 input channel, 10 classes, kaiming_normal_
//                  (fan_out, relu) conv init; batch 64 of 28x28 float32, NCHW; SGD momentum 0.9,
//                  weight decay 5e-4, lr 0.02; gradients set to none after each step
//   lstm_fwdbwd    torch::nn::LSTM 128 -> 256, T = 50, batch 32: forward + output.sum().backward()
//   matmul         torch::matmul 1024^3 float32 (libtorch's own BLAS): GFLOP/s
//   matmul_blas    not measured here (bench_cpu measures cblas_sgemm directly): "skipped"
//   add            a.add_(b), 2^26 float32 elements: GB/s over 3 * 4 * 2^26 bytes (reads + writes)
//   tiny_op        add_ of two 1-element float32 tensors: microseconds per op
// Every row prints {"bench":"cpu","impl":"libtorch",...} with the same keys as bench_cpu.
//
//   bench_cpu_torch [--rows ...] [--threads N] [--json] [--steps N] [--warmup N]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_harness.h"

namespace {

using cpu_bench::Clock;
using cpu_bench::emit;
using cpu_bench::ms_since;
using cpu_bench::Options;
using cpu_bench::Samples;
using cpu_bench::samples_json;
using cpu_bench::summarize;
using cpu_bench::time_cpu;

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, k).stride(stride).padding(pad).bias(false));
}

struct BasicBlockImpl : torch::nn::Module {
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Sequential downsample{nullptr};
  BasicBlockImpl(int64_t in, int64_t planes, int64_t stride) {
    conv1 = register_module("conv1", conv(in, planes, 3, stride, 1));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(planes));
    conv2 = register_module("conv2", conv(planes, planes, 3, 1, 1));
    bn2 = register_module("bn2", torch::nn::BatchNorm2d(planes));
    if (stride != 1 || in != planes)
      downsample = register_module(
          "downsample",
          torch::nn::Sequential(conv(in, planes, 1, stride, 0), torch::nn::BatchNorm2d(planes)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = torch::relu(bn1->forward(conv1->forward(x)));
    h = bn2->forward(conv2->forward(h));
    return torch::relu(h + (downsample ? downsample->forward(x) : x));
  }
};
TORCH_MODULE(BasicBlock);

struct ResNet18Impl : torch::nn::Module {
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Sequential layers[4];
  torch::nn::Linear fc{nullptr};
  ResNet18Impl(int64_t in_channels, int64_t classes) {
    conv1 = register_module("conv1", conv(in_channels, 64, 3, 1, 1));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(64));
    int64_t in = 64;
    const int64_t planes[4] = {64, 128, 256, 512};
    for (int i = 0; i < 4; ++i) {
      layers[i] = torch::nn::Sequential();
      for (int b = 0; b < 2; ++b) {
        layers[i]->push_back(BasicBlock(in, planes[i], b == 0 && i > 0 ? 2 : 1));
        in = planes[i];
      }
      register_module("layer" + std::to_string(i + 1), layers[i]);
    }
    fc = register_module("fc", torch::nn::Linear(in, classes));
    for (auto& m : modules(/*include_self=*/false))
      if (auto* c = m->as<torch::nn::Conv2d>())
        torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = torch::relu(bn1->forward(conv1->forward(x)));
    for (auto& l : layers) h = l->forward(h);
    h = torch::adaptive_avg_pool2d(h, {1, 1}).flatten(1);
    return fc->forward(h);
  }
};
TORCH_MODULE(ResNet18);

bool row_resnet18(const Options& o) {
  torch::manual_seed(0);
  const int64_t batch = 64;
  ResNet18 model(1, 10);
  // bench/models/varying.h's synthetic batch: image element i is sin(0.001 i + 0.5), label j is
  // (7 j) % 10.
  const torch::Tensor x =
      torch::sin(torch::arange(0, batch * 28 * 28, torch::kFloat64) * 0.001 + 0.5)
          .view({batch, 1, 28, 28})
          .to(torch::kFloat32);
  const torch::Tensor y = (torch::arange(0, batch, torch::kInt64) * 7) % 10;
  torch::optim::SGD opt(model->parameters(),
                        torch::optim::SGDOptions(0.02).momentum(0.9).weight_decay(5e-4));
  std::vector<double> losses;
  auto step = [&] {
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    for (auto& p : model->parameters()) p.mutable_grad().reset();  // set to none
    losses.push_back(loss.item<double>());
  };
  auto t0 = Clock::now();
  step();
  const double first_ms = ms_since(t0);
  for (int i = 1; i < o.warmup; ++i) step();
  std::vector<double> ms;
  for (int i = 0; i < o.steps; ++i) {
    t0 = Clock::now();
    step();
    ms.push_back(ms_since(t0));
  }
  const Samples s = summarize(ms);
  bool finite = true;
  for (double l : losses) finite = finite && std::isfinite(l);
  const bool ok = finite && losses.back() < losses.front();
  std::ostringstream j, h;
  j << samples_json("ms", s) << ",\"img_per_s\":" << double(batch) / (s.median / 1e3)
    << ",\"first_step_ms\":" << first_ms << ",\"steps\":" << o.steps << ",\"warmup\":" << o.warmup
    << ",\"loss_first\":" << losses.front() << ",\"loss_last\":" << losses.back()
    << ",\"correct\":" << (ok ? "true" : "false");
  h.precision(4);
  h << "ResNet-18 CIFAR stem 28x28x1 b64 f32 train step: " << s.median << " ms (min " << s.min
    << ", max " << s.max << "), " << double(batch) / (s.median / 1e3) << " img/s, first step "
    << first_ms << " ms, loss " << losses.front() << " -> " << losses.back();
  emit(o, "resnet18_step", j.str(), h.str());
  return ok;
}

void row_lstm(const Options& o) {
  torch::manual_seed(0);
  torch::nn::LSTM lstm(torch::nn::LSTMOptions(128, 256));
  const torch::Tensor x = torch::randn({50, 32, 128});
  auto step = [&] {
    torch::Tensor out = std::get<0>(lstm->forward(x));
    out.sum().backward();
    for (auto& p : lstm->parameters()) p.mutable_grad().reset();
  };
  const Samples s = time_cpu(step, o.warmup, std::max(o.steps, 5), 1);
  std::ostringstream h;
  h.precision(4);
  h << "LSTM 128->256 T50 b32 f32 forward+backward: " << s.median << " ms (min " << s.min
    << ", max " << s.max << ")";
  emit(o, "lstm_fwdbwd", samples_json("ms", s), h.str());
}

void row_matmul(const Options& o) {
  torch::manual_seed(0);
  const int64_t n = 1024;
  const torch::Tensor a = torch::randn({n, n}), b = torch::randn({n, n});
  const Samples s = time_cpu([&] { (void)torch::matmul(a, b); }, 2, 7, 2);
  const double gflop = 2.0 * double(n) * double(n) * double(n) / 1e9;
  std::ostringstream j, h;
  j << samples_json("ms", s) << ",\"GFLOPs\":" << gflop / (s.median / 1e3);
  h.precision(4);
  h << "matmul 1024^3 f32 (torch::matmul): " << s.median << " ms, " << gflop / (s.median / 1e3)
    << " GFLOP/s";
  emit(o, "matmul", j.str(), h.str());
}

void row_add(const Options& o) {
  const int64_t n = int64_t(1) << 26;
  torch::Tensor a = torch::full({n}, 1.0f), b = torch::full({n}, 1e-3f);
  const double bytes = 3.0 * 4.0 * double(n);
  const Samples add = time_cpu([&] { a.add_(b); }, 2, 7, 2);
  const Samples alloc = time_cpu([&] { (void)(a + b); }, 1, 5, 1);
  auto gbps = [](double by, double ms) { return by / (ms / 1e3) / 1e9; };
  std::ostringstream j, h;
  j << samples_json("ms", add) << ",\"GBps\":" << gbps(bytes, add.median)
    << ",\"add_alloc_GBps\":" << gbps(bytes, alloc.median) << ",\"bytes_add\":" << bytes;
  h.precision(4);
  h << "add_ f32 2^26: " << gbps(bytes, add.median)
    << " GB/s (reads+writes; a + b fresh: " << gbps(bytes, alloc.median) << ")";
  emit(o, "add", j.str(), h.str());
}

void row_tiny_op(const Options& o) {
  torch::Tensor a = torch::zeros({1}), b = torch::ones({1});
  const int iters = 100000;
  const Samples s = time_cpu([&] { a.add_(b); }, iters, 7, iters);
  std::ostringstream j, h;
  j << ",\"us\":" << s.median * 1e3 << ",\"min_us\":" << s.min * 1e3
    << ",\"max_us\":" << s.max * 1e3;
  h.precision(4);
  h << "1-element add_: " << s.median * 1e3 << " us/op (min " << s.min * 1e3 << ")";
  emit(o, "tiny_op", j.str(), h.str());
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  o.impl = "libtorch";
  o.threads_in_use = [] { return int(torch::get_num_threads()); };
  CLI::App app("bench_cpu_torch: issue 38's CPU rows, libtorch's side (bench/cpu.cpp is Ember's)");
  cpu_bench::add_common_flags(app, o);
  CLI11_PARSE(app, argc, argv);
  if (o.threads > 0) torch::set_num_threads(o.threads);
  return cpu_bench::run_rows(o, {
                                    {"resnet18_step", [&] { return row_resnet18(o); }},
                                    {"lstm_fwdbwd", [&] { return row_lstm(o), true; }},
                                    {"matmul", [&] { return row_matmul(o), true; }},
                                    {"matmul_blas",
                                     [&] {
                                       emit(o, "matmul_blas",
                                            ",\"skipped\":\"bench_cpu measures cblas_sgemm\"",
                                            "skipped: bench_cpu measures cblas_sgemm directly");
                                       return true;
                                     }},
                                    {"add", [&] { return row_add(o), true; }},
                                    {"tiny_op", [&] { return row_tiny_op(o), true; }},
                                });
}
