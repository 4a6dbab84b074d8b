// The one random fill every random op uses (ops/factory.cpp's rand/randn/... and
// ops/random_more.cpp's exponential_/cauchy_/...): not a public header.
#pragma once
#include "ember/kernel_interface/random.h"
#include "ember/tensor/runtime/generator.h"
#include "ember/tensor/tensor.h"

namespace ember {

// Fills the non-empty tensor t in place with random_kernel's `kind` (parameters a, b) from g, which
// is on t's device type (the caller checked both and names the op in its errors): dense tensors
// directly, others through a dense temporary; bumps t's version.
void fill_random_kind(Tensor& t, RandomKind kind, double a, double b, Generator& g);

}  // namespace ember
