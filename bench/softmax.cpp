// Softmax-family benchmarks (GPU): softmax / log_softmax forward and backward over the last dim,
// each registered softmax algorithm on its own, the fused cross_entropy forward+backward, the
// activations and dropout, on the shapes of shared/ANCHORS.md. The PyTorch side is bench/softmax.py
// (same bench/shape keys). GBps counts the minimum bytes (each input read once, each output written
// once). Inputs are deterministic functions of the index (x = 4 sin(0.001 i), target (7919 r) mod
// C), identical in both scripts, and every line carries a checksum that the PyTorch line must match
// before its time means anything. Prints one JSON line per measurement.
#include "ember/ops/softmax.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/ops/activation.h"
#include "timing.h"

using namespace ember;

namespace {

const Device kGpu = Device::cuda();

using bench::run_section;
using bench::time_ms;

void emit(const std::string& bench, const std::string& shape, double ms, double bytes,
          double checksum, const std::string& algo = "") {
  std::printf(
      "{\"bench\":\"%s\",\"impl\":\"ember\",\"shape\":\"%s\",\"ms\":%.6f,\"GBps\":%.3f,"
      "\"checksum\":%.6g%s}\n",
      bench.c_str(), shape.c_str(), ms, bytes / (ms * 1e6), checksum,
      algo.empty() ? "" : (",\"algo\":\"" + algo + "\"").c_str());
  std::fflush(stdout);
}

// x[r, c] = 4 sin(0.001 (r C + c)), computed in fp64 so both scripts agree to the last bit of
// the rounded value.
Tensor deterministic_input(int64_t rows, int64_t cols, DType dtype) {
  autograd::NoGradGuard no_grad;
  const auto f64 = TensorOptions(DType::f64).with_device(kGpu);
  // i = r * cols + c, built by broadcasting (exact in fp64) rather than on the host.
  Tensor i = arange(double(rows), f64).reshape({rows, 1}) * double(cols) +
             arange(double(cols), f64).reshape({1, cols});
  return (sin(i * 0.001) * 4.0).to(dtype);
}

std::string shape_name(int64_t rows, int64_t cols, DType dtype) {
  return std::to_string(rows) + "x" + std::to_string(cols) + " " +
         (dtype == DType::f32 ? "f32" : "bf16");
}

// mean over rows of sum_c y[r, c] * x[r, c]: cheap, and sensitive to every output.
double checksum(const Tensor& y, const Tensor& x) {
  autograd::NoGradGuard no_grad;
  return (sum(y.to(DType::f32) * x.to(DType::f32)) / double(x.size(0))).item();
}

// Every measurement is timed before its checksum is taken (the checksum reads the last output).
void bench_softmax(int64_t rows, int64_t cols, DType dtype) {
  const std::string shape = shape_name(rows, cols, dtype);
  const double esize = double(element_size(dtype)), n = double(rows * cols);
  Tensor x = deterministic_input(rows, cols, dtype);
  Tensor y;
  double ms = time_ms([&] { y = softmax(x, -1); });
  const std::string chosen =
      softmax_choose(SoftmaxProblem{dispatch::Direction::forward, false, x, {}, y, rows, cols, 1})
          .name;
  emit("softmax", shape, ms, 2 * n * esize, checksum(y, x), chosen);
  Tensor ly;
  ms = time_ms([&] { ly = log_softmax(x, -1); });
  emit("log_softmax", shape, ms, 2 * n * esize, checksum(ly, x));
  // Backward alone: dL/dx from y and dL/dy = x (2 reads + 1 write).
  Tensor xg = x.detach().set_requires_grad(true);
  Tensor yg = softmax(xg, -1);
  Tensor dx;
  ms = time_ms([&] { dx = autograd::grad({yg}, {xg}, {x}, true)[0]; });
  emit("softmax_backward", shape, ms, 3 * n * esize, checksum(dx, x));

  // Every algorithm that applies, forced (same shape key with the algorithm in it).
  for (dispatch::Direction dir : {dispatch::Direction::forward, dispatch::Direction::backward}) {
    auto& slot = softmax_slot(dir, DeviceType::CUDA);
    SoftmaxProblem probe{dir, false, y, x, y, rows, cols, 1};
    for (const std::string& name : slot.names()) {
      const auto& algo = slot.get<SoftmaxProblem>(slot.find(name));
      if (algo.applies && !algo.applies(probe)) continue;
      const std::string key = std::string("softmax.") + dispatch::direction_name(dir);
      dispatch::AlgoSettingsGuard guard(dispatch::current_algo_settings().force(key, name));
      if (dir == dispatch::Direction::forward) {
        ms = time_ms([&] { y = softmax(x, -1); });
        emit("softmax_algo", shape + " " + name, ms, 2 * n * esize, checksum(y, x), name);
      } else {
        ms = time_ms([&] { dx = autograd::grad({yg}, {xg}, {x}, true)[0]; });
        emit("softmax_backward_algo", shape + " " + name, ms, 3 * n * esize, checksum(dx, x), name);
      }
    }
  }
}

void bench_cross_entropy(int64_t rows, int64_t cols, DType dtype) {
  const std::string shape = shape_name(rows, cols, dtype);
  const double esize = double(element_size(dtype)), n = double(rows * cols);
  Tensor x = deterministic_input(rows, cols, dtype).set_requires_grad(true);
  std::vector<double> target(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) target[size_t(r)] = double((r * 7919) % cols);
  Tensor t = from_vector(target, {rows}, TensorOptions(DType::i64).with_device(kGpu));
  Tensor loss;
  double ms = time_ms([&] { loss = cross_entropy(x, t); });
  emit("cross_entropy_fwd", shape, ms, n * esize, loss.item());
  // Forward + backward; autograd::grad returns dL/dx without accumulating into x.grad.
  Tensor dx;
  ms = time_ms([&] {
    loss = cross_entropy(x, t);
    dx = autograd::grad({loss}, {x})[0];
  });
  emit("cross_entropy_fwd_bwd", shape, ms, 3 * n * esize, checksum(dx, x.detach()) * 1e6);
}

// Elementwise activations over 2^28 elements (1 read + 1 write; backward 2 reads + 1 write).
void bench_activations(DType dtype) {
  const int64_t n = int64_t(1) << 28;
  const std::string shape = std::string("2^28 ") + (dtype == DType::f32 ? "f32" : "bf16");
  const double esize = double(element_size(dtype));
  Tensor x = deterministic_input(8192, n / 8192, dtype).reshape({n});
  Tensor y;
  double ms = time_ms([&] { y = gelu(x); });
  emit("gelu", shape, ms, 2 * double(n) * esize, checksum(y.reshape({1, n}), x.reshape({1, n})));
  ms = time_ms([&] { y = silu(x); });
  emit("silu", shape, ms, 2 * double(n) * esize, checksum(y.reshape({1, n}), x.reshape({1, n})));
  // dL/dy = y: a tensor of its own, so both reads stream from memory (with dL/dy = x the second
  // read of each line hits the cache and the byte count overstates the traffic by a third).
  Tensor xg = x.detach().set_requires_grad(true);
  Tensor yg = gelu(xg);
  Tensor dy = gelu(x);
  Tensor dx;
  ms = time_ms([&] { dx = autograd::grad({yg}, {xg}, {dy}, true)[0]; });
  emit("gelu_backward", shape, ms, 3 * double(n) * esize,
       checksum(dx.reshape({1, n}), x.reshape({1, n})));
}

// Dropout, p = 0.1, over 2^28 elements. Forward: x read, y and a byte of mask per element written;
// forward+backward adds dL/dy and the mask read, dx written. The checksum is sum(y x) / sum(x x):
// 1 within sampling noise (about 2e-5 here), since Ember and PyTorch draw different masks.
void bench_dropout(DType dtype) {
  const int64_t n = int64_t(1) << 28;
  const std::string shape = std::string("2^28 ") + (dtype == DType::f32 ? "f32" : "bf16");
  const double esize = double(element_size(dtype));
  Tensor x = deterministic_input(8192, n / 8192, dtype).reshape({n});
  auto ratio = [&](const Tensor& y) {
    autograd::NoGradGuard no_grad;
    const Tensor x64 = x.to(DType::f64);
    return (sum(y.to(DType::f64) * x64) / sum(x64 * x64)).item();
  };
  Tensor y;
  double ms = time_ms([&] { y = dropout(x, 0.1); });
  emit("dropout", shape, ms, (2 * esize + 1) * double(n), ratio(y));
  Tensor xg = x.detach().set_requires_grad(true);
  Tensor dy = x * 0.5;  // a tensor of its own, so the backward's reads stream from memory
  Tensor dx;
  ms = time_ms([&] { dx = autograd::grad({dropout(xg, 0.1)}, {xg}, {dy})[0]; });
  emit("dropout_fwd_bwd", shape, ms, (4 * esize + 2) * double(n), 2 * ratio(dx));
}

}  // namespace

int main() {
  if (!cuda::is_available()) {
    std::printf("{\"bench\":\"softmax\",\"skipped\":\"no GPU\"}\n");
    return 0;
  }
  // A failing section is reported and the others still run.
  for (DType dt : {DType::f32, DType::bf16})
    run_section("softmax", [&] { bench_softmax(8192, 32768, dt); });
  for (DType dt : {DType::f32, DType::bf16})
    run_section("cross_entropy", [&] { bench_cross_entropy(8192, 32768, dt); });
  for (DType dt : {DType::f32, DType::bf16})
    run_section("softmax", [&] { bench_softmax(65536, 1024, dt); });
  for (DType dt : {DType::f32, DType::bf16})
    run_section("activations", [&] { bench_activations(dt); });
  for (DType dt : {DType::f32, DType::bf16}) run_section("dropout", [&] { bench_dropout(dt); });
  return 0;
}
