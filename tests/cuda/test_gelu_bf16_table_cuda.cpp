// CUDA test of the bf16 exact-gelu table (gelu_bf16_table_kernel in
// cuda_kernels/elementwise/activation.cu): for every one of the 65536 bf16 values (zeros,
// subnormals, the table's edges at 2^-12 and 16, inf, NaN), forward and backward results of the
// dense aligned path (the table) are bit-identical to the strided path (a view starting one element
// in, computed directly with erff). Skips without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ember/ember.h"
#include "ember/ops/activation.h"

using namespace ember;

namespace {

const Device kGpu = Device::cuda();
constexpr int64_t kValues = 65536;

// Every bf16 value in bit order, after one leading zero (so that the view of elements 1..65536
// starts 2 bytes into the allocation).
Tensor every_bf16_after_a_zero() {
  std::vector<double> v(size_t(kValues + 1), 0.0);
  for (int64_t bits = 0; bits < kValues; ++bits) {
    const uint32_t word = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &word, sizeof f);
    v[size_t(bits + 1)] = double(f);
  }
  return from_vector(v, {kValues + 1}).to(kGpu, DType::bf16);
}

// Equal values of the same sign, or both NaN.
int64_t count_mismatches(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = a.to_vector(), vb = b.to_vector();
  int64_t bad = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    const bool same = (std::isnan(va[i]) && std::isnan(vb[i])) ||
                      (va[i] == vb[i] && std::signbit(va[i]) == std::signbit(vb[i]));
    bad += same ? 0 : 1;
  }
  return bad;
}

Tensor gelu_grad(const Tensor& x, const Tensor& dy) {
  Tensor xg = x.detach().set_requires_grad(true);
  Tensor y = gelu(xg);
  return autograd::grad({y}, {xg}, {dy})[0];
}

}  // namespace

TEST_CASE("gelu bf16: the table path is bit-identical to the direct path for every bf16 value" *
          doctest::skip(!cuda::is_available())) {
  Tensor base = every_bf16_after_a_zero();
  Tensor shifted = base.narrow(0, 1, kValues);  // 2 bytes in: the strided kernel
  Tensor dense = shifted.contiguous();          // a fresh aligned allocation: the table kernel
  REQUIRE(dense.is_contiguous());
  CHECK(count_mismatches(gelu(dense), gelu(shifted)) == 0);

  Tensor dy_base = (randn({kValues + 1}, TensorOptions(DType::f32)) * 3).to(kGpu, DType::bf16);
  Tensor dy_shifted = dy_base.narrow(0, 1, kValues);
  CHECK(count_mismatches(gelu_grad(dense, dy_shifted.contiguous()),
                         gelu_grad(shifted, dy_shifted)) == 0);

  // A length that is not a whole number of vectors: the tail elements.
  Tensor odd = dense.narrow(0, 0, kValues - 3).contiguous();
  CHECK(count_mismatches(gelu(odd), gelu(shifted.narrow(0, 0, kValues - 3))) == 0);
}
