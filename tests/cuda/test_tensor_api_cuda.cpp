// CUDA vs CPU for the elementwise kernels the libtorch-style API added or reaches in new ways:
// bitwise and / or / xor / not (integer and bool), logical_xor (any dtype), fmod and remainder
// (floating, 16-bit and integer), and comparisons with numbers (a broadcast 0-dim operand), over
// long contiguous inputs (the vector path and its tail), broadcasting, transposed views, empty and
// one-element shapes. These ops are exact, so the results must be equal. Skips without a GPU.
#include <doctest/doctest.h>

#include <functional>

#include "ember/ember.h"

using namespace ember;

namespace {

// A pair of shapes an op runs on, and whether the inputs are transposed views of dense tensors.
struct ShapeCase {
  const char* name;
  Shape a, b;
  bool transposed = false;
};
const std::vector<ShapeCase>& shape_cases() {
  static const std::vector<ShapeCase> cases = {
      {"long", {1000003}, {1000003}},
      {"long_scalar", {4099}, {}},
      {"broadcast", {7, 1, 5}, {3, 1}},
      {"broadcast_row", {33, 65}, {65}},
      {"transposed", {37, 19}, {37, 19}, true},
      {"empty", {0, 3}, {3}},
      {"one", {1}, {1}},
  };
  return cases;
}

// Integer-valued random numbers in about [-60, 60] (bool: their != 0), made on the CPU.
Tensor values(const Shape& s, DType dtype, uint64_t seed, bool transposed) {
  Generator gen(Device::cpu(), seed);
  Shape dense = s;
  if (transposed && s.size() == 2) std::swap(dense[0], dense[1]);
  Tensor v = (randn(dense, TensorOptions(DType::f64), &gen) * 20).round();
  if (transposed && s.size() == 2) v = v.t();
  return v.to(dtype);
}

// Nonzero integer-valued divisors in [-9, 9] (for fmod and remainder).
Tensor divisors(const Shape& s, DType dtype, uint64_t seed, bool transposed) {
  Generator gen(Device::cpu(), seed);
  Shape dense = s;
  if (transposed && s.size() == 2) std::swap(dense[0], dense[1]);
  Tensor magnitude = randint(1, 10, dense, TensorOptions(DType::f64), &gen);
  Tensor sign = randint(0, 2, dense, TensorOptions(DType::f64), &gen) * 2 - 1;
  Tensor v = magnitude * sign;
  if (transposed && s.size() == 2) v = v.t();
  return v.to(dtype);
}

using BinaryFn = std::function<Tensor(const Tensor&, const Tensor&)>;

// Runs f on the CPU inputs and on their copies on the GPU and requires equal results.
void check_binary(const char* op, const BinaryFn& f, DType dtype, bool nonzero_divisor) {
  uint64_t seed = 11;
  for (const ShapeCase& sc : shape_cases()) {
    CAPTURE(op);
    CAPTURE(sc.name);
    CAPTURE(dtype_name(dtype));
    Tensor a = values(sc.a, dtype, seed++, sc.transposed);
    Tensor b = nonzero_divisor ? divisors(sc.b, dtype, seed++, sc.transposed)
                               : values(sc.b, dtype, seed++, sc.transposed);
    Tensor ga = a.to(Device::cuda()), gb = b.to(Device::cuda());
    if (sc.transposed) {  // keep the GPU operands strided like the CPU ones
      ga = a.t().contiguous().to(Device::cuda()).t();
      gb = b.t().contiguous().to(Device::cuda()).t();
    }
    Tensor cpu = f(a, b);
    Tensor gpu = f(ga, gb);
    REQUIRE(gpu.device().is_cuda());
    CHECK(gpu.dtype() == cpu.dtype());
    REQUIRE(gpu.sizes() == cpu.sizes());
    CHECK(gpu.cpu().equal(cpu));
  }
}

}  // namespace

TEST_CASE("bitwise ops on CUDA match the CPU" * doctest::skip(!cuda::is_available())) {
  for (DType d : {DType::i32, DType::i64, DType::u8, DType::boolean}) {
    check_binary(
        "and", [](const Tensor& a, const Tensor& b) { return a & b; }, d, false);
    check_binary(
        "or", [](const Tensor& a, const Tensor& b) { return a | b; }, d, false);
    check_binary(
        "xor", [](const Tensor& a, const Tensor& b) { return a ^ b; }, d, false);
    check_binary(
        "not", [](const Tensor& a, const Tensor&) { return ~a; }, d, false);
    check_binary(
        "and_scalar", [](const Tensor& a, const Tensor&) { return a & 6; }, d, false);
    check_binary(
        "xor_scalar_left", [](const Tensor& a, const Tensor&) { return 3 ^ a; }, d, false);
    check_binary(
        "or_bool_scalar", [](const Tensor& a, const Tensor&) { return a | true; }, d, false);
  }
  // mixed dtypes promote before the kernel
  check_binary(
      "and_mixed",
      [](const Tensor& a, const Tensor& b) { return a.to(DType::i32) & b.to(DType::u8); },
      DType::i64, false);
}

TEST_CASE("logical ops on CUDA match the CPU" * doctest::skip(!cuda::is_available())) {
  for (DType d : {DType::f32, DType::bf16, DType::i64, DType::u8, DType::boolean}) {
    check_binary(
        "logical_xor", [](const Tensor& a, const Tensor& b) { return logical_xor(a, b); }, d,
        false);
    check_binary(
        "logical_and", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); }, d,
        false);
    check_binary(
        "logical_or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); }, d, false);
  }
}

TEST_CASE("fmod and remainder on CUDA match the CPU" * doctest::skip(!cuda::is_available())) {
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64}) {
    check_binary(
        "fmod", [](const Tensor& a, const Tensor& b) { return fmod(a, b); }, d, true);
    check_binary(
        "remainder", [](const Tensor& a, const Tensor& b) { return a % b; }, d, true);
    check_binary(
        "fmod_scalar", [](const Tensor& a, const Tensor&) { return fmod(a, -7); }, d, true);
    check_binary(
        "remainder_scalar", [](const Tensor& a, const Tensor&) { return a % 7; }, d, true);
  }
  // fractional operands in floating dtypes
  for (DType d : {DType::f32, DType::f64, DType::bf16}) {
    check_binary(
        "fmod_fraction", [](const Tensor& a, const Tensor& b) { return fmod(a * 0.37, b * 0.61); },
        d, true);
    check_binary(
        "remainder_fraction",
        [](const Tensor& a, const Tensor& b) { return (a * 0.37) % (b * 0.61); }, d, true);
  }
  check_binary(
      "u8_remainder", [](const Tensor& a, const Tensor& b) { return a % b; }, DType::u8, true);
  check_binary(
      "u8_fmod", [](const Tensor& a, const Tensor& b) { return fmod(a, b); }, DType::u8, true);
}

TEST_CASE("comparisons with numbers on CUDA match the CPU" * doctest::skip(!cuda::is_available())) {
  for (DType d :
       {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::boolean}) {
    check_binary(
        "eq_int", [](const Tensor& a, const Tensor&) { return a == 1; }, d, false);
    check_binary(
        "ne_int", [](const Tensor& a, const Tensor&) { return a != 0; }, d, false);
    check_binary(
        "gt_fraction", [](const Tensor& a, const Tensor&) { return a > 0.5; }, d, false);
    check_binary(
        "le_left", [](const Tensor& a, const Tensor&) { return 3 <= a; }, d, false);
    check_binary(
        "lt_bool", [](const Tensor& a, const Tensor&) { return a < true; }, d, false);
    check_binary(
        "ge_tensor", [](const Tensor& a, const Tensor& b) { return a >= b; }, d, false);
  }
}
