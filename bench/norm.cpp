// Normalization benchmarks (GPU), Ember side; bench/norm.py is the PyTorch side with the same
// bench/shape keys (batch_norm_train_fwd_algo rows, one per batch-norm forward algorithm, are
// Ember only). One JSON line per measurement: ms (median of CUDA-event timings after warm-up)
// and GBps over the minimum bytes:
//   batch-norm training forward:  3 x |x|  (statistics read + normalize read and write: the
//                                  two-pass algorithm's bytes and PyTorch's; single_read moves
//                                  2 x |x|, and its rows keep the 3 x |x| accounting, so GB/s
//                                  compare as inverse times)
//   batch-norm forward+backward:  8 x |x|  (forward 3 + backward: dy and x read for the sums,
//                                  dy and x read and dx written)
//   layer-norm forward+backward:  5 x |x|  (x read and y written; dy and x read and dx written)
// Parameters and statistics ([C] or [rows]) are negligible and not counted.
// Inputs are deterministic functions of the element index (sin of the flat NCHW index), so the
// "check" field (a checksum of outputs and gradients) must agree with bench/norm.py's.
// Before timing, each op is also compared with Ember's CPU fp64 reference on a smaller shape.
#include "ember/ops/norm.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "timing.h"

using namespace ember;

namespace {

using bench::time_ms;

// `extra`: more ,"key":value fields for the line (empty: none).
void emit(const std::string& bench, const std::string& shape, double ms, double bytes, double check,
          const std::string& extra = "") {
  std::printf(
      "{\"bench\":\"%s\",\"impl\":\"ember\",\"shape\":\"%s\",\"ms\":%.6f,\"GBps\":%.1f,\"check\":%."
      "9g%s}\n",
      bench.c_str(), shape.c_str(), ms, bytes / (ms * 1e6), check, extra.c_str());
  std::fflush(stdout);
}

// sin(scale * i + phase) over the flat index i of a logical (row-major) tensor of `shape`.
Tensor index_signal(const Shape& shape, double scale, double phase, DType dtype) {
  const int64_t n = shape_numel(shape);
  Tensor i = arange(0, double(n), 1, TensorOptions(DType::f64).with_device(Device::cuda()));
  return sin(i * scale + phase).view(shape).to(dtype);
}

double mean_of_product(const Tensor& a, const Tensor& b) {
  return (a.to(DType::f64) * b.to(DType::f64)).mean().item();
}

const char* dtype_tag(DType d) { return d == DType::f32 ? "f32" : "bf16"; }

// Ember CUDA vs Ember CPU (fp64) on a smaller shape, forward and backward; aborts the run if off.
bool validate_batch_norm(DType dtype) {
  const Shape shape{8, 64, 14, 14};
  Tensor x = index_signal(shape, 0.01, 0.3, dtype).contiguous(MemoryFormat::channels_last);
  Tensor gy = index_signal(shape, 0.003, 1.1, dtype);
  const TensorOptions popts = TensorOptions(dtype).with_device(Device::cuda());
  Tensor w = ones({64}, popts), b = zeros({64}, popts);
  Tensor xg = x.detach().set_requires_grad(true);
  Tensor y = batch_norm(xg, w, b, Tensor(), Tensor(), true);
  Tensor dx = autograd::grad({y}, {xg}, {gy})[0];
  Tensor xc = x.detach().to(Device::cpu(), DType::f64).set_requires_grad(true);
  Tensor yc = batch_norm(xc, Tensor(), Tensor(), Tensor(), Tensor(), true);
  Tensor dxc = autograd::grad({yc}, {xc}, {gy.to(Device::cpu(), DType::f64)})[0];
  const double tol = dtype == DType::f32 ? 1e-4 : 5e-2;
  const double ey = max_abs_diff(y, yc), edx = max_abs_diff(dx, dxc);
  if (ey > tol || edx > 4 * tol) {
    std::printf(
        "{\"bench\":\"batch_norm_validate\",\"impl\":\"ember\",\"error\":\"mismatch vs CPU: y %g, "
        "dx %g\"}\n",
        ey, edx);
    return false;
  }
  return true;
}

// One batch_norm_train_fwd_algo row per training-forward algorithm that applies to channels_last
// x ("<tag> <algorithm>", 3 x |x| bytes), the algorithm forced.
void bench_bn_algorithms(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& rm,
                         const Tensor& rv, const std::string& tag, double bytes) {
  const Device dev = x.device();
  const int64_t C = x.size(1);
  BatchNormForwardProblem probe;  // the problem batch_norm builds, to ask each algorithm
  probe.x = x;
  probe.y = empty_like(x);
  probe.weight = w;
  probe.bias = b;
  probe.layout = ChannelLayout{x.size(0), C, x.size(2) * x.size(3), true};
  probe.save_mean = empty({C}, DType::f32, dev);
  probe.save_invstd = empty({C}, DType::f32, dev);
  probe.running_mean = rm;
  probe.running_var = rv;
  const dispatch::AlgoSlot& slot = batch_norm_forward_slot(DeviceType::CUDA);
  for (const std::string& algo : slot.names()) {
    const auto& candidate = slot.get<BatchNormForwardProblem>(slot.find(algo));
    if (candidate.applies && !candidate.applies(probe)) {
      std::printf(
          "{\"bench\":\"batch_norm_train_fwd_algo\",\"impl\":\"ember\",\"shape\":\"%s %s\","
          "\"skipped\":\"does not apply\"}\n",
          tag.c_str(), algo.c_str());
      continue;
    }
    dispatch::AlgoSettingsGuard forced(dispatch::current_algo_settings().force("batch_norm", algo));
    Tensor y;
    const double ms = time_ms([&] { y = batch_norm(x, w, b, rm, rv, true); });
    emit("batch_norm_train_fwd_algo", tag + " " + algo, ms, 3 * bytes, mean_of_product(y, y));
  }
}

}  // namespace

int main() {
  if (!cuda::is_available()) {
    std::printf("{\"bench\":\"norm\",\"skipped\":\"no GPU\"}\n");
    return 0;
  }
  const Device dev = Device::cuda();

  // BatchNorm2d training, channels_last, parameters in the input dtype: 256x64x56x56 (ImageNet
  // ResNet stage 1) and 128x64x32x32 (CIFAR ResNet-18).
  // The _fwd and _fwd_bwd rows use the algorithm the cache picks; the _fwd_algo rows force each
  // training-forward algorithm that applies ("<shape> <algorithm>"), with _fwd's byte accounting.
  for (DType dtype : {DType::f32, DType::bf16}) {
    if (!validate_batch_norm(dtype)) return 1;
    for (const Shape& shape : {Shape{256, 64, 56, 56}, Shape{128, 64, 32, 32}}) {
      const std::string tag = std::to_string(shape[0]) + "x64x" + std::to_string(shape[2]) + "x" +
                              std::to_string(shape[3]) + " cl " + std::string(dtype_tag(dtype));
      const double bytes = double(shape_numel(shape)) * double(element_size(dtype));
      const TensorOptions popts = TensorOptions(dtype).with_device(dev);
      Tensor x = index_signal(shape, 0.01, 0.3, dtype).contiguous(MemoryFormat::channels_last);
      Tensor gy = index_signal(shape, 0.003, 1.1, dtype).contiguous(MemoryFormat::channels_last);
      Tensor w = ones({64}, popts).set_requires_grad(true),
             b = zeros({64}, popts).set_requires_grad(true);
      Tensor rm = zeros({64}, popts), rv = ones({64}, popts);

      Tensor y;
      auto fwd = [&] { y = batch_norm(x, w.detach(), b.detach(), rm, rv, true); };
      double ms = time_ms(fwd);
      emit("batch_norm_train_fwd", tag, ms, 3 * bytes, mean_of_product(y, y),
           ",\"host_ms\":" + std::to_string(bench::host_ms(fwd)));

      Tensor xg = x.detach().set_requires_grad(true);
      std::vector<Tensor> grads;
      auto fwd_bwd = [&] {
        Tensor out = batch_norm(xg, w, b, rm, rv, true);
        grads = autograd::grad({out}, {xg, w, b}, {gy});
      };
      ms = time_ms(fwd_bwd);
      emit("batch_norm_train_fwd_bwd", tag, ms, 8 * bytes, mean_of_product(grads[0], gy),
           ",\"host_ms\":" + std::to_string(bench::host_ms(fwd_bwd)));

      bench_bn_algorithms(x, w.detach(), b.detach(), rm, rv, tag, bytes);
    }
  }

  // The other BN shapes of CIFAR ResNet-18 at batch 128 (bf16, its training dtype): per algorithm
  // only, to rank them where the activation is small.
  for (const Shape& shape :
       {Shape{128, 128, 16, 16}, Shape{128, 256, 8, 8}, Shape{128, 512, 4, 4}}) {
    const std::string tag = std::to_string(shape[0]) + "x" + std::to_string(shape[1]) + "x" +
                            std::to_string(shape[2]) + "x" + std::to_string(shape[3]) + " cl bf16";
    const TensorOptions popts = TensorOptions(DType::bf16).with_device(dev);
    Tensor x = index_signal(shape, 0.01, 0.3, DType::bf16).contiguous(MemoryFormat::channels_last);
    Tensor rm = zeros({shape[1]}, popts), rv = ones({shape[1]}, popts);
    bench_bn_algorithms(x, ones({shape[1]}, popts), zeros({shape[1]}, popts), rm, rv, tag,
                        double(shape_numel(shape)) * 2.0);
  }

  // LayerNorm(1024) forward+backward on 8192x1024.
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Shape shape{8192, 1024};
    const std::string tag = "8192x1024 " + std::string(dtype_tag(dtype));
    const double bytes = double(shape_numel(shape)) * double(element_size(dtype));
    const TensorOptions popts = TensorOptions(dtype).with_device(dev);
    Tensor x = index_signal(shape, 0.01, 0.3, dtype).set_requires_grad(true);
    Tensor gy = index_signal(shape, 0.003, 1.1, dtype);
    Tensor w = ones({1024}, popts).set_requires_grad(true),
           b = zeros({1024}, popts).set_requires_grad(true);
    Tensor y;
    // host_ms: the host's time per call; where it approaches ms, the line measures the host.
    auto fwd = [&] { y = layer_norm(x.detach(), {1024}, w.detach(), b.detach()); };
    double ms = time_ms(fwd);
    emit("layer_norm_fwd", tag, ms, 2 * bytes, mean_of_product(y, y),
         ",\"host_ms\":" + std::to_string(bench::host_ms(fwd)));
    std::vector<Tensor> grads;
    auto fwd_bwd = [&] {
      Tensor out = layer_norm(x, {1024}, w, b);
      grads = autograd::grad({out}, {x, w, b}, {gy});
    };
    ms = time_ms(fwd_bwd);
    emit("layer_norm_fwd_bwd", tag, ms, 5 * bytes, mean_of_product(grads[0], gy),
         ",\"host_ms\":" + std::to_string(bench::host_ms(fwd_bwd)));
  }
  return 0;
}
