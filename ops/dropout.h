// dropout driven by the Philox generator (tensor/runtime/generator.h): the keep mask is a pure
// function of the generator's (seed, offset), identical on the CPU and on CUDA, so a run is
// reproducible from the seed and a CPU reference can check the GPU's mask bit for bit. The mask is
// saved for the backward as bool (1 byte per element): that keeps the backward one elementwise pass
// and stays correct whatever happens to the generator between forward and backward (graph captures
// that split forward and backward, reseeding), at the cost of a 1-byte write and read per element.
// The kernel tables are kernel_interface/dropout.h (CPU kernels in cpu_kernels/dropout.cpp, CUDA
// kernels in cuda_kernels/elementwise/dropout.cu).
#pragma once
#include <cstdint>

#include "ember/kernel_interface/dropout.h"
#include "ember/tensor/runtime/generator.h"
#include "ember/tensor/tensor.h"

namespace ember {

// torch.nn.functional.dropout: in training, each element is kept with probability 1 - p and
// scaled by 1 / (1 - p), else zeroed. Element i (in logical order) is kept when lane i % 4 of
// the Philox uniforms of subsequence i / 4 (at the generator's offset) is below 1 - p: exactly
// the mask bernoulli(x, 1 - p, gen) draws from the same generator state. Not training, or p == 0:
// returns x itself (no copy, no random numbers consumed). p must be in [0, 1]; p == 1 zeroes.
// The output is contiguous, of x's shape and dtype. `gen` defaults to x's device's generator.
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);

// What dropout_with_mask returns.
struct DropoutResult {
  Tensor output;  // as dropout(x, p, training, gen) returns it
  Tensor mask;    // bool, contiguous, x's shape; undefined when dropout was the identity
};
// dropout that also returns the keep mask (tests, and ops that fuse dropout with a neighbour).
DropoutResult dropout_with_mask(const Tensor& x, double p, bool training = true,
                                Generator* gen = nullptr);

}  // namespace ember
