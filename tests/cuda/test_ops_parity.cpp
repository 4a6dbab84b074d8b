// CUDA vs CPU parity for every row of the op table: forward values and gradients, in fp32, bf16
// and fp16, over contiguous, transposed and channels_last inputs. Skips without a GPU.
#include <doctest/doctest.h>

#include <cmath>

#include "support/compare.h"
#include "support/mlp.h"
#include "support/op_table.h"

using namespace ember;
using ember::testing::Layout;

namespace {
using ember::testing::parity_tolerance;
using ember::testing::rel_err;
}  // namespace

TEST_CASE("every op matches the CPU reference on CUDA, forward and backward" *
          doctest::skip(!cuda::is_available())) {
  int compared = 0;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::channels_last}) {
      for (const auto& c : ember::testing::op_cases()) {
        if (dtype != DType::f32 && !c.bf16_ok) continue;
        CAPTURE(c.name);
        CAPTURE(dtype_name(dtype));
        CAPTURE(int(layout));
        auto gpu = ember::testing::make_inputs(c, dtype, Device::cuda(), 99, layout, true);
        // The reference sees exactly the (rounded) values the GPU sees, in fp64.
        std::vector<Tensor> cpu;
        for (const Tensor& g : gpu)
          cpu.push_back(g.detach().to(Device::cpu(), DType::f64).set_requires_grad(true));
        Tensor out_gpu = c.fn(gpu), out_cpu = c.fn(cpu);
        REQUIRE(out_gpu.sizes() == out_cpu.sizes());
        CHECK(out_gpu.device() == Device::cuda());
        CHECK(rel_err(out_gpu, out_cpu) <= parity_tolerance(dtype));
        // Backward of sum(out * w) for a fixed random w.
        Generator gen(Device::cpu(), 5);
        Tensor w = rand(out_cpu.sizes(), TensorOptions(DType::f64), &gen);
        // The reference weighs with exactly the (rounded) weights the GPU uses.
        Tensor w_gpu = w.to(Device::cuda(), out_gpu.dtype());
        (out_cpu * w_gpu.to(Device::cpu(), DType::f64)).sum().backward();
        (out_gpu * w_gpu).sum().backward();
        for (size_t i = 0; i < gpu.size(); ++i) {
          CAPTURE(i);
          REQUIRE(gpu[i].grad().defined() == cpu[i].grad().defined());
          if (!gpu[i].grad().defined()) continue;
          CHECK(gpu[i].grad().device() == Device::cuda());
          CHECK(rel_err(gpu[i].grad(), cpu[i].grad()) <= 4 * parity_tolerance(dtype));
        }
        ++compared;
      }
    }
  }
  CHECK(compared > 100);
}

TEST_CASE("the primitives-only MLP trains on CUDA" * doctest::skip(!cuda::is_available())) {
  auto r = ember::testing::train_mlp(Device::cuda(), DType::f32, 60);
  CHECK(r.last_loss < 0.5 * r.first_loss);
  CHECK(r.accuracy > 0.9);
  auto cpu = ember::testing::train_mlp(Device::cpu(), DType::f32, 60);
  CHECK(r.last_loss == doctest::Approx(cpu.last_loss).epsilon(1e-3));
  auto bf = ember::testing::train_mlp(Device::cuda(), DType::bf16, 60);
  CHECK(bf.accuracy > 0.85);
}

TEST_CASE("large and awkward sizes: elementwise, reductions, casts" *
          doctest::skip(!cuda::is_available())) {
  for (int64_t n : {1, 3, 4097, (1 << 20) + 3}) {
    CAPTURE(n);
    Tensor a = randn({n}), b = randn({n});
    Tensor ga = a.cuda(), gb = b.cuda();
    CHECK(max_abs_diff((ga + gb * 2.0).cpu(), a + b * 2.0) < 1e-5);
    CHECK(std::abs(sum(ga).item() - sum(a.to(DType::f64)).item()) < 1e-3 * std::sqrt(double(n)));
    CHECK(max_abs_diff(ga.to(DType::bf16).cpu(), a.to(DType::bf16)) == 0);
    CHECK(max_abs_diff(ga.to(DType::f16).cpu(), a.to(DType::f16)) == 0);
    // Misaligned views (offset by one element) take the general path.
    if (n > 2) {
      Tensor va = ga.narrow(0, 1, n - 1), vb = gb.narrow(0, 0, n - 1);
      CHECK(max_abs_diff((va * vb).cpu(), a.narrow(0, 1, n - 1) * b.narrow(0, 0, n - 1)) < 1e-5);
    }
  }
  Tensor m = randn({513, 1025});
  CHECK(max_abs_diff(amax(m.cuda(), {0}).cpu(), amax(m, {0})) == 0);
  CHECK(max_abs_diff(argmax(m.cuda(), 1).cpu(), argmax(m, 1)) == 0);
  CHECK(max_abs_diff(var(m.cuda(), {1}).cpu(), var(m, {1})) < 1e-4);
  CHECK(max_abs_diff(sum(m.cuda(), {0}).cpu(), sum(m, {0})) < 1e-3);
}

TEST_CASE("out-of-range indices on CUDA are reported at the next sync point" *
          doctest::skip(!cuda::is_available())) {
  Tensor w = ones({4, 3}, TensorOptions().with_device(Device::cuda()));
  Tensor bad = from_vector({1, 7}, {2}, TensorOptions(DType::i64).with_device(Device::cuda()));
  Tensor r = index_select(w, 0, bad);  // no host sync here
  try {
    (void)r.cpu();
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.status() == Status::bad_param);
    CHECK(std::string(e.what()).find("7") != std::string::npos);
  }
  // The flag was reset: later work is fine.
  CHECK(sum(w).item() == 12);
}

TEST_CASE("mixed devices are an error naming both" * doctest::skip(!cuda::is_available())) {
  try {
    (void)(ones({2}) + ones({2}, TensorOptions().with_device(Device::cuda())));
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("cuda:0") != std::string::npos);
    CHECK(std::string(e.what()).find("cpu") != std::string::npos);
  }
}
