// The CPU dropout loops over raw element arrays, shared by the dropout op's CPU kernels
// (cpu_kernels/dropout.cpp) and the CPU rnn's dropout between layers (cpu_kernels/rnn.cpp), so that
// both draw the one mask of ember::dropout (ops/dropout.h) on the thread pool: element i is kept
// when lane i % 4 of the Philox uniforms of subsequence i / 4 is below 1 - p, exactly as the CUDA
// kernels draw it.
#pragma once
#include <cstdint>
#include <type_traits>

#include "ember/kernel_interface/random.h"
#include "ember/tensor/parallel.h"
#include "ember/tensor/philox.h"

namespace ember::cpu {

// The arithmetic type of the scaling: float for 16-bit floats and float32, double for float64.
template <typename T>
using dropout_compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// For i < n: mask[i] = keep(i), y[i] = keep(i) ? x[i] * scale : 0, scale = 1 / (1 - p) (0 when
// p == 1). y may alias x.
template <typename T>
void dropout_forward_elements(const T* x, T* y, bool* mask, int64_t n, double p,
                              const RandomParams& random) {
  using A = dropout_compute_t<T>;
  const double keep = 1.0 - p;
  const A scale = A(p >= 1 ? 0.0 : 1.0 / keep);
  // Groups of 4 elements share one draw; a group is one parallel item (8K groups per thread at
  // least: a draw costs about as much as several simple elementwise ops).
  parallel_for(0, (n + 3) / 4, 8192, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const philox::F32x4 u =
          philox::uniform4_from_bits(philox::draw4(random.seed, uint64_t(g), random.offset));
      for (int l = 0; l < 4 && 4 * g + l < n; ++l) {
        const int64_t i = 4 * g + l;
        const bool kept = philox::bernoulli_from_uniform(philox::lane(u, l), keep);
        mask[i] = kept;
        y[i] = T(kept ? A(x[i]) * scale : A(0));
      }
    }
  });
}

// For i < n: grad_input[i] = mask[i] ? grad_output[i] * scale : 0 (written, not accumulated).
// grad_input may alias grad_output.
template <typename T>
void dropout_backward_elements(const T* grad_output, const bool* mask, T* grad_input, int64_t n,
                               double scale) {
  using A = dropout_compute_t<T>;
  const A s = A(scale);
  // 32K elements per thread at least, as the elementwise kernels.
  parallel_for(0, n, 32768, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) grad_input[i] = T(mask[i] ? A(grad_output[i]) * s : A(0));
  });
}

}  // namespace ember::cpu
