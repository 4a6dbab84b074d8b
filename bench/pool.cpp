// Pooling benchmarks (GPU), Ember side; bench/pool.py is the PyTorch side with the same
// bench/shape keys. The pooling layers of ResNet-50 at batch 256, channels_last: the stem's 3x3
// stride-2 max pool (on 64x112x112), a 2x2 average pool (on 256x56x56) and the global average
// pool before the classifier (on 2048x7x7), each forward and forward+backward, in fp32 and bf16;
// also a 3x3 stride-2 average pool (padding 1, padded cells counted) on the stem pool's input, an
// average pool whose overlapping windows' backward runs by tiles.
// GBps counts the minimum bytes: forward |x| + |y|, backward |dy| + |dx| (indices, an
// implementation's choice, are not counted). Inputs are x = 4 sin(0.001 i) over the NCHW flat
// index i, computed in fp64 and rounded, identical in both scripts; the upstream gradient is y
// itself. Each line carries a checksum (mean of y, or mean of dx * x) that PyTorch's line must
// match to a few digits (bf16 max-pool ties may pick another index) before its time means anything.
// The _fwd_bwd lines also carry `expect`, what their checksum must be for any correct backward:
// with dy = y, sum(dx * x) = sum(y * y) for every pool here (each y is linear in x, or a max that
// dx routes back to), so mean(dx * x) = sum(y * y) / |x|. PyTorch 2.11's avg_pool2d_3x3s2_fwd_bwd
// misses it (1.92435 for 1.94422 in f32): its channels_last backward drops the padding offset
// (pytorch/pytorch#188344, fixed after 2.11). They also carry host_ms (bench::host_ms): the
// host's time to enqueue one eager forward+backward.
#include <cstdio>
#include <functional>
#include <string>

#include "ember/ember.h"
#include "ember/ops/pooling.h"
#include "timing.h"

using namespace ember;
using bench::run_section;
using bench::time_ms;

namespace {

const Device kGpu = Device::cuda();

// `extra`: more ,"key":value fields for the line (empty: none).
void emit(const std::string& bench, const std::string& shape, double ms, double bytes,
          double checksum, const std::string& extra = "") {
  std::printf(
      "{\"bench\":\"%s\",\"impl\":\"ember\",\"shape\":\"%s\",\"ms\":%.6f,\"GBps\":%.3f,"
      "\"checksum\":%.6g%s}\n",
      bench.c_str(), shape.c_str(), ms, bytes / (ms * 1e6), checksum, extra.c_str());
  std::fflush(stdout);
}

// x = 4 sin(0.001 i) over the NCHW flat index, stored channels_last.
Tensor deterministic_input(const Shape& shape, DType dtype) {
  autograd::NoGradGuard no_grad;
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  Tensor i = arange(double(n), TensorOptions(DType::f64).with_device(kGpu));
  return (sin(i * 0.001) * 4.0).to(dtype).reshape(shape).contiguous(MemoryFormat::channels_last);
}

double mean_of(const Tensor& t) {
  autograd::NoGradGuard no_grad;
  return (sum(t.to(DType::f64)) / double(t.numel())).item();
}

double mean_of_product(const Tensor& a, const Tensor& b) {
  autograd::NoGradGuard no_grad;
  return (sum(a.to(DType::f64) * b.to(DType::f64)) / double(a.numel())).item();
}

// One pooling layer: forward, then forward+backward with dy = y.
void bench_pool(const std::string& name, const Shape& shape, DType dtype,
                const std::function<Tensor(const Tensor&)>& pool) {
  const std::string shape_name = std::to_string(shape[0]) + "x" + std::to_string(shape[1]) + "x" +
                                 std::to_string(shape[2]) + "x" + std::to_string(shape[3]) +
                                 " cl " + (dtype == DType::f32 ? "f32" : "bf16");
  const double esize = double(element_size(dtype));
  const Tensor x = deterministic_input(shape, dtype);
  Tensor y;
  {
    autograd::NoGradGuard no_grad;
    const double ms = time_ms([&] { y = pool(x); });
    emit(name, shape_name, ms, double(x.numel() + y.numel()) * esize, mean_of(y));
  }
  Tensor xg = x.detach().set_requires_grad(true);
  Tensor dx;
  auto fwd_bwd = [&] {
    Tensor yg = pool(xg);
    dx = autograd::grad({yg}, {xg}, {yg.detach()})[0];
  };
  const double ms = time_ms(fwd_bwd);
  const double host = bench::host_ms(fwd_bwd);
  const double bytes = double(2 * x.numel() + 2 * y.numel()) * esize;  // x, y, dy, dx
  const double expect = mean_of_product(y, y) * double(y.numel()) / double(x.numel());
  emit(name + "_fwd_bwd", shape_name, ms, bytes, mean_of_product(dx, x),
       ",\"expect\":" + std::to_string(expect) + ",\"host_ms\":" + std::to_string(host));
}

}  // namespace

int main() {
  if (!cuda::is_available()) {
    std::printf("{\"bench\":\"pool\",\"skipped\":\"no GPU\"}\n");
    return 0;
  }
  // A failing section is reported and the others still run.
  for (DType dt : {DType::f32, DType::bf16}) {
    run_section("max_pool2d", [&] {
      bench_pool("max_pool2d_3x3s2", {256, 64, 112, 112}, dt, [](const Tensor& t) {
        return max_pool2d(t, {3, 3}, {2, 2}, {1, 1});
      });
    });
    run_section("avg_pool2d", [&] {
      bench_pool("avg_pool2d_2x2s2", {256, 256, 56, 56}, dt, [](const Tensor& t) {
        return avg_pool2d(t, {2, 2}, {2, 2});
      });
    });
    run_section("avg_pool2d_3x3", [&] {
      bench_pool("avg_pool2d_3x3s2", {256, 64, 112, 112}, dt, [](const Tensor& t) {
        return avg_pool2d(t, {3, 3}, {2, 2}, {1, 1});
      });
    });
    run_section("global_avg_pool", [&] {
      bench_pool("global_avg_pool", {256, 2048, 7, 7}, dt, [](const Tensor& t) {
        return adaptive_avg_pool2d(t, {1, 1});
      });
    });
  }
  return 0;
}
