// Attention benchmarks (GPU): scaled-dot-product attention forward and forward + backward in bf16
// through the kernel interface (kernel_interface/attention.h), the algorithm cache's choice and
// every CUDA algorithm that applies (the reference algorithm only where it is not far too slow),
// causal and not, on the shapes B, H, T, D = (16, 16, 1024, 64), (8, 16, 2048, 128),
// (4, 16, 4096, 128), (64, 12, 256, 64). The PyTorch side is bench/attention.py
// (torch.nn.functional.scaled_dot_product_attention with the cuDNN and flash backends; same bench
// and shape keys). TFLOPs counts 4 B H T^2 D for the forward (half of it when causal) and 3.5
// times that for forward + backward. Inputs are deterministic functions of the index (q = sin(0.001
// i), k = cos(0.0013 i), v = sin(0.0007 i + 1), dO = cos(0.0011 i), computed in fp64), identical
// in both scripts, and every line carries a checksum (the mean of the output, or of the three
// gradients) that the PyTorch line must match before its time means anything. One JSON line per
// measurement.
#include "ember/kernel_interface/attention.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "ember/ember.h"
#include "timing.h"

using namespace ember;
using dispatch::Direction;

namespace {

const Device kGpu = Device::cuda();
using bench::run_section;
using bench::time_ms;

void emit(const std::string& bench, const std::string& shape, double ms, double flops,
          double checksum, const std::string& algo) {
  std::printf(
      "{\"bench\":\"%s\",\"impl\":\"ember\",\"shape\":\"%s\",\"ms\":%.6f,\"TFLOPs\":%.3f,"
      "\"checksum\":%.6g,\"algo\":\"%s\"}\n",
      bench.c_str(), shape.c_str(), ms, flops / (ms * 1e9), checksum, algo.c_str());
  std::fflush(stdout);
}

// f(a i + c) over the flat index of a [B, H, T, D] tensor, in fp64, rounded to bf16.
Tensor deterministic(int64_t b, int64_t h, int64_t t, int64_t d, double a, double c, bool use_cos) {
  autograd::NoGradGuard no_grad;
  const auto f64 = TensorOptions(DType::f64).with_device(kGpu);
  Tensor i = arange(double(b * h * t * d), f64) * a + c;
  return (use_cos ? cos(i) : sin(i)).to(DType::bf16).reshape({b, h, t, d});
}

double mean_of(const Tensor& x) {
  autograd::NoGradGuard no_grad;
  return (sum(x.to(DType::f32)) / double(x.numel())).item();
}

void bench_attention(int64_t b, int64_t h, int64_t t, int64_t d, bool causal) {
  char shape_buf[96];
  std::snprintf(shape_buf, sizeof shape_buf, "B%lld H%lld T%lld D%lld%s bf16", (long long)b,
                (long long)h, (long long)t, (long long)d, causal ? " causal" : "");
  const std::string shape = shape_buf;
  const double fwd_flops =
      4.0 * double(b * h) * double(t) * double(t) * double(d) * (causal ? 0.5 : 1.0);
  AttentionProblem f;
  f.direction = Direction::forward;
  f.q = deterministic(b, h, t, d, 0.001, 0, false);
  f.k = deterministic(b, h, t, d, 0.0013, 0, true);
  f.v = deterministic(b, h, t, d, 0.0007, 1, false);
  f.out = empty({b, h, t, d}, DType::bf16, kGpu);
  f.lse = empty({b, h, t}, DType::f32, kGpu);
  f.causal = causal;
  f.scale = 1.0 / std::sqrt(double(d));
  AttentionProblem g = f;
  g.direction = Direction::backward;
  g.grad_out = deterministic(b, h, t, d, 0.0011, 0, true);
  g.grad_q = empty({b, h, t, d}, DType::bf16, kGpu);
  g.grad_k = empty({b, h, t, d}, DType::bf16, kGpu);
  g.grad_v = empty({b, h, t, d}, DType::bf16, kGpu);
  auto grads_checksum = [&] { return mean_of(g.grad_q) + mean_of(g.grad_k) + mean_of(g.grad_v); };

  // The cache's choice.
  double ms = time_ms([&] { attention_run(f); });
  emit("attention_fwd", shape, ms, fwd_flops, mean_of(f.out), attention_choose(f).name);
  ms = time_ms([&] {
    attention_run(f);
    attention_run(g);
  });
  emit("attention_fwd_bwd", shape, ms, 3.5 * fwd_flops, grads_checksum(), attention_choose(g).name);

  // Every flash algorithm that applies, forced (the reference would take seconds here).
  for (Direction dir : {Direction::forward, Direction::backward}) {
    auto& slot = attention_slot(dir, DeviceType::CUDA);
    const AttentionProblem& probe = dir == Direction::forward ? f : g;
    for (const std::string& name : slot.names()) {
      const auto& algo = slot.get<AttentionProblem>(slot.find(name));
      if (name == "reference" || (algo.applies && !algo.applies(probe))) continue;
      dispatch::AlgoSettingsGuard guard(dispatch::current_algo_settings().force(slot.name(), name));
      if (dir == Direction::forward) {
        ms = time_ms([&] { attention_run(f); });
        emit("attention_fwd_algo", shape + " " + name, ms, fwd_flops, mean_of(f.out), name);
      } else {
        attention_run(f);
        ms = time_ms([&] { attention_run(g); });
        emit("attention_bwd_algo", shape + " " + name, ms, 2.5 * fwd_flops, grads_checksum(), name);
      }
    }
  }
}

}  // namespace

int main() {
  if (!cuda::is_available()) {
    std::printf("{\"bench\":\"attention\",\"skipped\":\"no GPU\"}\n");
    return 0;
  }
  struct Shape4 {
    int64_t b, h, t, d;
  };
  for (Shape4 s : {Shape4{16, 16, 1024, 64}, Shape4{8, 16, 2048, 128}, Shape4{4, 16, 4096, 128},
                   Shape4{64, 12, 256, 64}})
    for (bool causal : {false, true})
      run_section("attention", [&] { bench_attention(s.b, s.h, s.t, s.d, causal); });
  return 0;
}
