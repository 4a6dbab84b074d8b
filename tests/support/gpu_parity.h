// CUDA-vs-CPU parity of an op and its gradient (header-only), shared by the CUDA suites: the op
// runs on a GPU input (optionally under forced algorithm settings) and on its exact values in fp64
// on the CPU; outputs and the gradients of sum(out * w) for one random w (or, for backward kernels
// that take another layout, of out with an output gradient w in a chosen memory format) are
// compared.
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <optional>

#include "ember/dispatch/algo_cache.h"
#include "ember/ember.h"
#include "support/compare.h"

namespace ember::testing {

// Normal values times `scale`, drawn in fp32 and rounded to `dtype` on the GPU.
inline Tensor gpu_randn(const Shape& s, DType dtype, double scale = 1) {
  return (randn(s, TensorOptions(DType::f32)) * scale).to(Device::cuda(), dtype);
}

// The values of 4-D `t` in a dense channels_last tensor on t's device whose data starts one element
// past its allocation's (16-byte aligned) start: kernels with 16-byte vector paths take their
// element-at-a-time paths on it.
inline Tensor misaligned_channels_last(const Tensor& t) {
  const int64_t n = t.size(0), c = t.size(1), h = t.size(2), w = t.size(3);
  Tensor buffer = empty({n * c * h * w + 1}, t.dtype(), t.device());
  Tensor r = buffer.narrow(0, 1, n * c * h * w).view({n, h, w, c}).permute({0, 3, 1, 2});
  r.copy_(t);
  return r;
}

// Outputs within `tol` (rel_err), input gradients within 4 * tol (a backward is one more pass).
// `gpu_settings` (forced algorithms) apply to the GPU run only. The output gradient is that of
// sum(out * w) for a uniform fp64 w, which reaches the op's backward laid out as the product's
// gradient is (NCHW for pooling). With `grad_format`, a normal w rounded to the output's dtype and
// laid out in that format on the GPU is handed to backward directly instead (its exact values in
// fp64 on the CPU): backward kernels that take another layout (pooling's fast channels_last
// paths) see that gradient.
inline void check_gpu_parity(const std::function<Tensor(const Tensor&)>& f, const Tensor& gpu_input,
                             double tol,
                             const std::optional<dispatch::AlgoSettings>& gpu_settings = {},
                             std::optional<MemoryFormat> grad_format = {}) {
  Tensor g = gpu_input.detach().set_requires_grad(true);
  Tensor c = cpu_f64(g).set_requires_grad(true);
  Tensor out_c = f(c);
  Tensor w;  // the output gradient on the CPU, fp64
  if (!grad_format) {
    w = rand(out_c.sizes(), TensorOptions(DType::f64));
    (out_c * w).sum().backward();
  }
  Tensor out_g;
  {
    std::optional<dispatch::AlgoSettingsGuard> guard;
    if (gpu_settings) guard.emplace(*gpu_settings);
    out_g = f(g);
    if (grad_format) {
      REQUIRE(out_g.sizes() == out_c.sizes());
      Tensor w_gpu = gpu_randn(out_g.sizes(), out_g.dtype()).contiguous(*grad_format);
      out_g.backward(w_gpu);
      w = cpu_f64(w_gpu);
    } else {
      (out_g * w.to(g.device(), out_g.dtype())).sum().backward();
    }
  }
  if (grad_format) out_c.backward(w);
  REQUIRE(out_g.sizes() == out_c.sizes());
  CHECK(out_g.device() == gpu_input.device());
  CHECK(rel_err(out_g, out_c) <= tol);
  REQUIRE(g.grad().defined());
  CHECK(rel_err(g.grad(), c.grad()) <= 4 * tol);
}

}  // namespace ember::testing
