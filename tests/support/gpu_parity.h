// CUDA-vs-CPU parity of an op and its gradient (header-only), shared by the CUDA suites: the op
// runs on a GPU input (optionally under forced algorithm settings) and on its exact values in fp64
// on the CPU; outputs and the gradients of sum(out * w) for one random w are compared.
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <optional>

#include "dispatch/algo_cache.h"
#include "ember.h"
#include "support/compare.h"

namespace ember::testing {

// Outputs within `tol` (rel_err), input gradients within 4 * tol (a backward is one more pass).
// `gpu_settings` (forced algorithms) apply to the GPU run only.
inline void check_gpu_parity(const std::function<Tensor(const Tensor&)>& f,
                             const Tensor& gpu_input, double tol,
                             const std::optional<dispatch::AlgoSettings>& gpu_settings = {}) {
  Tensor g = gpu_input.detach().set_requires_grad(true);
  Tensor c = cpu_f64(g).set_requires_grad(true);
  Tensor out_c = f(c);
  Tensor w = rand(out_c.sizes(), TensorOptions(DType::f64));
  (out_c * w).sum().backward();
  Tensor out_g;
  {
    std::optional<dispatch::AlgoSettingsGuard> guard;
    if (gpu_settings) guard.emplace(*gpu_settings);
    out_g = f(g);
    (out_g * w.to(g.device(), out_g.dtype())).sum().backward();
  }
  REQUIRE(out_g.sizes() == out_c.sizes());
  CHECK(out_g.device() == gpu_input.device());
  CHECK(rel_err(out_g, out_c) <= tol);
  REQUIRE(g.grad().defined());
  CHECK(rel_err(g.grad(), c.grad()) <= 4 * tol);
}

// Normal values times `scale`, drawn in fp32 and rounded to `dtype` on the GPU.
inline Tensor gpu_randn(const Shape& s, DType dtype, double scale = 1) {
  return (randn(s, TensorOptions(DType::f32)) * scale).to(Device::cuda(), dtype);
}

}  // namespace ember::testing
