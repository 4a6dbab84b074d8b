// The random-fill kernel interface: counter-based Philox draws (tensor/runtime/generator.h), the
// same numbers on the CPU and CUDA for one seed.
#pragma once
#include <cstdint>

#include "ember/dispatch/registry.h"
#include "ember/tensor/runtime/generator.h"
#include "ember/tensor/tensor.h"

namespace ember {

// The last four transform the same draws (uniform lanes in (0, 1], normal lanes):
// exponential -log(u) / a; geometric max(1, ceil(log(u) / log1p(-a))); cauchy
// a + b * tan(pi * (u - 1/2)); log_normal exp(a + b * normal).
enum class RandomKind : uint8_t {
  uniform,
  normal,
  bernoulli,
  randint,
  exponential,
  geometric,
  cauchy,
  log_normal
};
// The kind's name, for messages.
inline const char* random_kind_name(RandomKind kind) {
  switch (kind) {
    case RandomKind::uniform:
      return "uniform";
    case RandomKind::normal:
      return "normal";
    case RandomKind::bernoulli:
      return "bernoulli";
    case RandomKind::randint:
      return "randint";
    case RandomKind::exponential:
      return "exponential";
    case RandomKind::geometric:
      return "geometric";
    case RandomKind::cauchy:
      return "cauchy";
    case RandomKind::log_normal:
      return "log_normal";
  }
  return "?";
}
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

// out[i] ~ Poisson(rates[i]); out and rates contiguous, of one dtype (float32 or float64; the
// kernel is selected by it). Element i draws from Philox subsequence i at the state's offset
// (kernel_interface/random_samplers.h, shared by both backends); ops reserve
// kPoissonOffsetIncrement values per subsequence.
using PoissonKernel = void (*)(const Tensor& out, const Tensor& rates, const PhiloxState& s);
EMBER_DECLARE_KERNEL(poisson_kernel, PoissonKernel)

// Multinomial sampling with replacement: out [rows, samples] int64 gets, for each (r, s), the
// first category j with cdf[r, j] >= u, u a (0, 1] uniform of subsequence r * samples + s. cdf
// [rows, categories] is contiguous, non-decreasing, float32 or float64 (selects the kernel), with
// cdf[r, categories - 1] == 1, so zero-probability categories are never drawn.
using MultinomialKernel = void (*)(const Tensor& out, const Tensor& cdf, const PhiloxState& s);
EMBER_DECLARE_KERNEL(multinomial_kernel, MultinomialKernel)

}  // namespace ember
