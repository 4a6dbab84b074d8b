// Optimizer twins for the CUDA optimizer suites (header-only): the same parameters on the CPU (the
// reference kernels) and on the GPU, the same gradients given to both, and the comparison of the
// two after some steps.
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <vector>

#include "ember/ember.h"
#include "ember/nn/optim.h"

namespace ember::testing {

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

// An optimizer factory over a parameter list with fixed options.
template <typename O, typename Options>
MakeOptimizer maker(Options options) {
  return [options](std::vector<Tensor> params) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<O>(std::move(params), options);
  };
}

struct Twin {
  std::vector<Tensor> cpu, gpu;  // the same starting values on both devices
};

// Parameters of `dtype` on the CPU and the GPU. The last GPU parameter is a view one element into
// a larger tensor, so its pointer is not 16-byte aligned (the kernels' element path).
inline Twin make_params(const std::vector<int64_t>& sizes, DType dtype, uint64_t seed) {
  Generator gen(Device::cpu(), seed);
  Twin t;
  for (size_t k = 0; k < sizes.size(); ++k) {
    Tensor values = randn({sizes[k]}, TensorOptions(DType::f32), &gen).to(dtype);
    t.cpu.push_back(values.clone().set_requires_grad(true));
    if (k + 1 == sizes.size()) {
      Tensor base = zeros({sizes[k] + 1}, TensorOptions(dtype).with_device(Device::cuda()));
      Tensor view = base.narrow(0, 1, sizes[k]);
      view.copy_(values);
      t.gpu.push_back(view.detach().set_requires_grad(true));
    } else {
      t.gpu.push_back(values.to(Device::cuda()).set_requires_grad(true));
    }
  }
  return t;
}

// The same normal gradients (of `dtype`) on both twins.
inline void give_grads(Twin& t, uint64_t seed, DType dtype) {
  Generator gen(Device::cpu(), seed);
  for (size_t k = 0; k < t.cpu.size(); ++k) {
    Tensor g = randn(t.cpu[k].sizes(), TensorOptions(DType::f32), &gen).to(dtype);
    t.cpu[k].set_grad(g);
    t.gpu[k].set_grad(g.to(Device::cuda()));
  }
}

// Every element within rtol/atol, except (when outlier_atol > 0) a few ill-conditioned ones:
// where a ratio such as Adam's m / (sqrt(v) + eps) divides by a value that cancels to ~0, a
// rounding difference (the GPU contracts multiply-adds into FMAs, the CPU may not) becomes a
// step-sized difference. At most `outlier_rate` of the elements (plus one) may do that, each still
// within outlier_atol. A NaN on either side counts as outside.
inline void check_twins(const Twin& t, double rtol, double atol, double outlier_atol = 0,
                        double outlier_rate = 1e-6) {
  for (size_t k = 0; k < t.cpu.size(); ++k) {
    const Tensor gpu = t.gpu[k].cpu().to(DType::f64), cpu = t.cpu[k].to(DType::f64);
    const Tensor diff = (gpu - cpu).abs();
    const Tensor bound = cpu.abs() * rtol + atol;
    const int64_t numel = cpu.numel();
    const double outside = double(numel) - sum(le(diff, bound).to(DType::f64)).item();
    const double max_diff = ember::max(diff).item();
    CAPTURE(k);
    CAPTURE(numel);
    CAPTURE(outside);
    CAPTURE(max_diff);
    if (outlier_atol > 0) {
      CHECK(outside <= 1.0 + double(numel) * outlier_rate);
      CHECK(max_diff <= outlier_atol);
    } else {
      CHECK(outside == 0.0);
    }
  }
}

}  // namespace ember::testing
