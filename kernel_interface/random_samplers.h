// Per-element samplers shared by the CPU and CUDA random kernels (host and device functions):
// a stream of Philox uniforms for one element, Poisson sampling (PyTorch's scheme: multiplication
// of uniforms below rate 10, Hoermann's transformed rejection PTRS from 10 on) and the
// binary search of multinomial sampling. Included by cpu_kernels/ and cuda_kernels/random/.
#pragma once
#include <cmath>
#include <cstdint>

#include "ember/kernel_interface/random.h"
#include "ember/tensor/philox.h"

namespace ember::random_samplers {

// The value of the exponential, geometric, cauchy and log_normal fills (kernel_interface/random.h)
// from one draw: a (0, 1] uniform lane, or a standard normal lane for log_normal. Computed in
// double on both backends, then rounded to the output dtype.
EMBER_PHILOX_FN double transform_draw(RandomKind kind, double draw, double a, double b) {
  switch (kind) {
    case RandomKind::exponential:
      return -::log(draw) / a;
    case RandomKind::geometric: {
      const double k = ::ceil(::log(draw) / ::log1p(-a));
      return k < 1 ? 1 : k;
    }
    case RandomKind::cauchy:
      return a + b * ::tan(3.14159265358979323846 * (draw - 0.5));
    case RandomKind::log_normal:
      return ::exp(a + b * draw);
    default:
      return draw;
  }
}

// How many 32-bit values a Poisson draw reserves per subsequence. A draw that needs more (rare:
// large rejection runs) reads on into values a later call may reuse, as PyTorch's CUDA sampler.
inline constexpr uint64_t kPoissonOffsetIncrement = 64;

// Uniforms in (0, 1] from Philox subsequence `subsequence` starting at `offset`, four per block.
struct UniformStream {
  philox::State state;
  philox::F32x4 buffer;
  int used;
};
EMBER_PHILOX_FN UniformStream uniform_stream(uint64_t seed, uint64_t subsequence, uint64_t offset) {
  UniformStream s;
  s.state = philox::init(seed, subsequence, offset);
  s.buffer = philox::F32x4{0, 0, 0, 0};
  s.used = 4;
  return s;
}
EMBER_PHILOX_FN double next_uniform(UniformStream& s) {
  if (s.used == 4) {
    s.buffer = philox::uniform4(s.state);
    s.used = 0;
  }
  return double(philox::lane(s.buffer, s.used++));
}

// One Poisson(rate) count (as double). A NaN or negative rate gives 0 (the ops check rates).
EMBER_PHILOX_FN double sample_poisson(double rate, UniformStream& s) {
  if (rate >= 10) {
    const double slam = ::sqrt(rate);
    const double loglam = ::log(rate);
    const double b = 0.931 + 2.53 * slam;
    const double a = -0.059 + 0.02483 * b;
    const double invalpha = 1.1239 + 1.1328 / (b - 3.4);
    const double vr = 0.9277 - 3.6224 / (b - 2);
    while (true) {
      const double U = next_uniform(s) - 0.5;
      const double V = next_uniform(s);
      const double us = 0.5 - ::fabs(U);
      const double k = ::floor((2 * a / us + b) * U + rate + 0.43);
      if (us >= 0.07 && V <= vr) return k;
      if (k < 0 || (us < 0.013 && V > us)) continue;
      if (::log(V) + ::log(invalpha) - ::log(a / (us * us) + b) <=
          -rate + k * loglam - ::lgamma(k + 1))
        return k;
    }
  }
  if (!(rate > 0)) return 0;
  const double enlam = ::exp(-rate);
  double count = 0, prod = 1;
  while (true) {
    prod *= next_uniform(s);
    if (prod > enlam)
      count += 1;
    else
      return count;
  }
}

// The first index j in [0, n) with cdf[j] >= u (cdf non-decreasing, cdf[n - 1] == 1, u in (0, 1]).
template <typename T>
EMBER_PHILOX_FN int64_t search_cdf(const T* cdf, int64_t n, T u) {
  int64_t left = 0, right = n;
  while (right > left) {
    const int64_t mid = left + (right - left) / 2;
    if (cdf[mid] < u)
      left = mid + 1;
    else
      right = mid;
  }
  return left < n ? left : n - 1;
}

}  // namespace ember::random_samplers
