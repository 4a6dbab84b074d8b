// CUDA for ops/linalg.h beyond the op table: the linear-algebra products' rows of
// op_table_linalg.cpp run through test_ops_parity.cpp (fp32, bf16, fp16; contiguous and transposed
// inputs); here the empty products (zero-size outputs and zero-size contractions), forward and the
// gradient of a weighted sum against the CPU in fp64. The decompositions of ember::linalg have no
// CUDA kernels yet: they must raise not_supported naming the op, never copy to the host silently.
// Every case skips without a GPU.
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "support/compare.h"
#include "support/errors.h"

using namespace ember;
using ember::testing::cpu_f64;
using ember::testing::parity_tolerance;
using ember::testing::rel_err;

namespace {
const Device kGpu = Device::cuda(0);
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

Tensor values(Shape s, uint64_t seed) {
  Generator gen(Device::cpu(), seed);
  return rand(s, TensorOptions(DType::f64), &gen) * 2.0 - 1.0;
}

// Runs fn on GPU inputs (dtype, optionally transposed views of the last two dims) and on their
// exact fp64 CPU copies; compares outputs and the gradients of sum(out * w).
void check_parity(const std::string& name, const std::vector<Shape>& shapes, const Fn& fn,
                  DType dtype, bool transposed) {
  CAPTURE(name);
  CAPTURE(dtype_name(dtype));
  CAPTURE(transposed);
  std::vector<Tensor> gpu, cpu;
  uint64_t seed = 7;
  for (const Shape& s : shapes) {
    Tensor base = values(s, seed++);
    Tensor g = base.to(kGpu, dtype);
    if (transposed && s.size() >= 2)  // same values, non-contiguous layout
      g = g.transpose(-2, -1).contiguous().transpose(-2, -1);
    g.set_requires_grad(true);
    gpu.push_back(g);
    cpu.push_back(cpu_f64(g).set_requires_grad(true));
  }
  Tensor out_gpu = fn(gpu), out_cpu = fn(cpu);
  REQUIRE(out_gpu.sizes() == out_cpu.sizes());
  CHECK(out_gpu.device() == kGpu);
  CHECK(rel_err(out_gpu, out_cpu) <= parity_tolerance(dtype));
  if (out_cpu.numel() == 0) return;
  Tensor w = values(out_cpu.sizes(), 99).to(dtype).to(DType::f64);
  (out_cpu * w).sum().backward();
  (out_gpu * w.to(kGpu, dtype)).sum().backward();
  for (size_t i = 0; i < gpu.size(); ++i) {
    CAPTURE(i);
    REQUIRE(gpu[i].grad().defined() == cpu[i].grad().defined());
    if (!gpu[i].grad().defined()) continue;
    CHECK(rel_err(gpu[i].grad(), cpu[i].grad()) <= 4 * parity_tolerance(dtype));
  }
}

struct Case {
  std::string name;
  std::vector<Shape> shapes;
  Fn fn;
};
using V = const std::vector<Tensor>&;

// The empty products (the op table's rows, compared by test_ops_parity.cpp, are never empty):
// a zero-size output, and a zero-size contraction whose output is all zeros (or the added term).
std::vector<Case> empty_product_cases() {
  return {
      {"mv_empty", {{0, 3}, {3}}, [](V x) { return mv(x[0], x[1]); }},
      {"mv_k0", {{4, 0}, {0}}, [](V x) { return mv(x[0], x[1]); }},
      {"baddbmm_empty",
       {{0, 3, 4}, {0, 3, 5}, {0, 5, 4}},
       [](V x) { return baddbmm(x[0], x[1], x[2]); }},
      {"baddbmm_k0",
       {{2, 3, 4}, {2, 3, 0}, {2, 0, 4}},
       [](V x) { return baddbmm(x[0], x[1], x[2], 0.5, 2); }},
      {"einsum_empty",
       {{3, 0}, {0, 2}},
       [](V x) {
         return einsum("ij,jk->ik", {x[0], x[1]});
       }},
  };
}
}  // namespace

TEST_CASE("empty linalg products match the CPU on CUDA, forward and backward" *
          doctest::skip(!cuda::is_available())) {
  for (DType dtype : {DType::f32, DType::bf16})
    for (bool transposed : {false, true})
      for (const Case& c : empty_product_cases())
        check_parity(c.name, c.shapes, c.fn, dtype, transposed);
}

TEST_CASE("linalg decompositions raise not_supported on CUDA, naming the op" *
          doctest::skip(!cuda::is_available())) {
  using ember::testing::contains;
  using ember::testing::error_of;
  Tensor a = (values({3, 3}, 1) + eye(3, TensorOptions(DType::f64)) * 4.0).to(kGpu, DType::f32);
  Tensor b = values({3, 2}, 2).to(kGpu, DType::f32);
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"linalg.inv", [&] { linalg::inv(a); }},
      {"linalg.solve", [&] { linalg::solve(a, b); }},
      {"linalg.cholesky", [&] { linalg::cholesky(matmul(a, a.t())); }},
      {"linalg.slogdet", [&] { linalg::det(a); }},
      {"linalg.slogdet", [&] { linalg::slogdet(a); }},
      {"linalg.qr", [&] { linalg::qr(a); }},
      {"linalg.eigh", [&] { linalg::eigh(a); }},
      {"linalg.svd", [&] { linalg::svd(a); }},
      {"linalg.svd", [&] { linalg::matrix_norm(a, std::string("nuc")); }},
      {"linalg.qr", [&] { linalg::lstsq(a, b); }},
  };
  for (const auto& [op, call] : calls) {
    // CAPTURE takes a variable, not a structured binding (clang 14).
    const auto captured_op = op;
    CAPTURE(captured_op);
    std::string msg = error_of(call, Status::not_supported);
    CHECK(contains(msg, op));
    CHECK(contains(msg, "no cuda"));
  }
  // The norms that are compositions of elementwise ops and reductions do run on CUDA.
  Tensor ac = cpu_f64(a);
  for (double ord : {1.0, -1.0, std::numeric_limits<double>::infinity()}) {
    CAPTURE(ord);
    CHECK(rel_err(linalg::matrix_norm(a, ord), linalg::matrix_norm(ac, ord)) <= 1e-5);
  }
  CHECK(rel_err(linalg::matrix_norm(a), linalg::matrix_norm(ac)) <= 1e-5);
}
