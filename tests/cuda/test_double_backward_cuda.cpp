// CUDA vs CPU parity of second derivatives over the op table: the first-order gradients built with
// create_graph and the gradients of a weighted sum of them (with respect to the inputs and the
// incoming gradient), in fp32 over contiguous and channels_last inputs. Skips without a GPU.
#include <doctest/doctest.h>

#include "support/compare.h"
#include "support/op_table.h"

using namespace ember;
using ember::testing::Layout;
using ember::testing::parity_tolerance;
using ember::testing::rel_err;

namespace {
// Gradients of one device's run: the create_graph first-order gradients of sum(out * v) and the
// gradients of sum_i sum(first_i * w_i) with respect to the inputs and v.
struct SecondOrder {
  std::vector<Tensor> first, second;
};

SecondOrder second_order(const ember::testing::OpCase& c, const std::vector<Tensor>& inputs,
                         const Tensor& v0, const std::vector<Tensor>& weights) {
  Tensor v = v0.detach().set_requires_grad(true);
  Tensor out = c.fn(inputs);
  SecondOrder r;
  r.first = autograd::grad({out}, inputs, {v}, true, /*create_graph=*/true, /*allow_unused=*/true);
  Tensor s;
  for (size_t i = 0; i < r.first.size(); ++i) {
    if (!r.first[i].defined() || !r.first[i].requires_grad()) continue;
    Tensor term = sum(mul(r.first[i], weights[i].to(r.first[i].device(), r.first[i].dtype())));
    s = s.defined() ? add(s, term) : term;
  }
  if (!s.defined()) return r;
  std::vector<Tensor> wrt = inputs;
  wrt.push_back(v);
  r.second = autograd::grad({s}, wrt, {}, false, false, /*allow_unused=*/true);
  return r;
}

// Compares a GPU gradient with the CPU reference; an undefined gradient counts as zeros.
void check_close(const Tensor& gpu, const Tensor& cpu, double tol) {
  if (!gpu.defined() && !cpu.defined()) return;
  if (!gpu.defined()) {
    CHECK(max(abs(cpu)).item() <= tol);
    return;
  }
  if (!cpu.defined()) {
    CHECK(max(abs(gpu.to(Device::cpu(), DType::f64))).item() <= tol);
    return;
  }
  CHECK(gpu.device() == Device::cuda());
  CHECK(rel_err(gpu, cpu) <= tol);
}
}  // namespace

TEST_CASE("second derivatives match the CPU reference on CUDA over the op table" *
          doctest::skip(!cuda::is_available())) {
  int compared = 0;
  const double tol = 8 * parity_tolerance(DType::f32);
  for (Layout layout : {Layout::contiguous, Layout::channels_last}) {
    for (const auto& c : ember::testing::op_cases()) {
      if (!c.fp64_gradcheck || !c.gradgradcheck) continue;
      CAPTURE(c.name);
      CAPTURE(int(layout));
      auto gpu = ember::testing::make_inputs(c, DType::f32, Device::cuda(), 31, layout, true);
      std::vector<Tensor> cpu;
      for (const Tensor& g : gpu)
        cpu.push_back(g.detach().to(Device::cpu(), DType::f64).set_requires_grad(true));
      Generator gen(Device::cpu(), 17);
      Shape out_shape;
      {
        autograd::NoGradGuard no_grad;
        out_shape = c.fn(cpu).sizes();
      }
      // The weights are rounded to fp32 once, so both devices use the same values.
      Tensor v = rand(out_shape, TensorOptions(DType::f64), &gen).to(DType::f32).to(DType::f64);
      std::vector<Tensor> weights;
      for (const Tensor& x : cpu)
        weights.push_back(
            rand(x.sizes(), TensorOptions(DType::f64), &gen).to(DType::f32).to(DType::f64));
      SecondOrder ref = second_order(c, cpu, v, weights);
      SecondOrder got = second_order(c, gpu, v.to(Device::cuda(), DType::f32), weights);
      REQUIRE(got.first.size() == ref.first.size());
      for (size_t i = 0; i < ref.first.size(); ++i) {
        CAPTURE(i);
        check_close(got.first[i], ref.first[i], 4 * parity_tolerance(DType::f32));
      }
      REQUIRE(got.second.size() == ref.second.size());
      for (size_t i = 0; i < ref.second.size(); ++i) {
        CAPTURE(i);
        check_close(got.second[i], ref.second[i], tol);
      }
      ++compared;
    }
  }
  CHECK(compared > 100);
}
