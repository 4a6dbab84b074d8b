// The random-fill kernel interface: counter-based Philox draws (tensor/runtime/generator.h), the
// same numbers on the CPU and CUDA for one seed.
#pragma once
#include <cstdint>

#include "ember/dispatch/registry.h"
#include "ember/tensor/runtime/generator.h"
#include "ember/tensor/tensor.h"

namespace ember {

enum class RandomKind : uint8_t { uniform, normal, bernoulli, randint };
// The Philox state (seed, offset, device offset inside graphs) comes from Generator::reserve.
struct RandomParams : PhiloxState {
  RandomKind kind = RandomKind::uniform;
  double a = 0, b = 1;  // uniform [a, b); normal mean a, std b; bernoulli p = a; randint [a, b)
};
// Fills the dense tensor `out` (logical order). Element i takes lane i % 4 of the four values that
// cuRAND's Philox4x32-10 yields for (seed, subsequence i / 4, offset): curand_uniform4 for uniform,
// bernoulli and randint, curand_normal4 for normal. The CPU kernel replicates this bit for bit, so
// one seed gives the same numbers on both. A call consumes 4 values of offset per subsequence.
using RandomKernel = void (*)(const Tensor& out, const RandomParams& p);
EMBER_DECLARE_KERNEL(random_kernel, RandomKernel)

}  // namespace ember
