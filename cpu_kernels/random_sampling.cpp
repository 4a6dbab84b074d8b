// The CPU poisson_kernel and multinomial_kernel (kernel_interface/random.h): per-element samplers
// of kernel_interface/random_samplers.h over Philox subsequences, the same draws the CUDA kernels
// make, parallel over elements (each element's draws depend only on its index).
#include <cstdint>

#include "ember/kernel_interface/random.h"
#include "ember/kernel_interface/random_samplers.h"
#include "ember/tensor/parallel.h"

namespace ember {
namespace {

template <typename T>
void poisson_fill(const Tensor& out, const Tensor& rates, const PhiloxState& s) {
  const T* rate = static_cast<const T*>(rates.data_ptr());
  T* dst = static_cast<T*>(out.data_ptr());
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i)
    EMBER_CHECK(rate[i] >= T(0), "poisson: the rate at flat index ", i, " is ", double(rate[i]),
                "; rates must be non-negative (and not NaN)");
  parallel_for(0, n, 256, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      random_samplers::UniformStream u =
          random_samplers::uniform_stream(s.seed, uint64_t(i), s.offset);
      dst[i] = T(random_samplers::sample_poisson(double(rate[i]), u));
    }
  });
}

void poisson_cpu(const Tensor& out, const Tensor& rates, const PhiloxState& s) {
  EMBER_INTERNAL_ASSERT(out.is_contiguous() && rates.is_contiguous() &&
                            out.dtype() == rates.dtype() && out.numel() == rates.numel(),
                        "poisson_kernel: expects contiguous out and rates of one dtype");
  if (out.dtype() == DType::f64) return poisson_fill<double>(out, rates, s);
  EMBER_INTERNAL_ASSERT(out.dtype() == DType::f32, "poisson_kernel: dtype ",
                        dtype_name(out.dtype()), " (ops/ computes in float32 or float64)");
  poisson_fill<float>(out, rates, s);
}

template <typename T>
void multinomial_fill(const Tensor& out, const Tensor& cdf, const PhiloxState& s) {
  const int64_t rows = cdf.size(0), categories = cdf.size(1), samples = out.size(1);
  const T* c = static_cast<const T*>(cdf.data_ptr());
  int64_t* dst = static_cast<int64_t*>(out.data_ptr());
  parallel_for(0, rows * samples, 1024, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T u = T(philox::lane(
          philox::uniform4_from_bits(philox::draw4(s.seed, uint64_t(i), s.offset)), 0));
      dst[i] = random_samplers::search_cdf(c + (i / samples) * categories, categories, u);
    }
  });
}

void multinomial_cpu(const Tensor& out, const Tensor& cdf, const PhiloxState& s) {
  EMBER_INTERNAL_ASSERT(out.is_contiguous() && cdf.is_contiguous() && cdf.dim() == 2 &&
                            out.dim() == 2 && out.dtype() == DType::i64,
                        "multinomial_kernel: expects contiguous 2-D out (int64) and cdf");
  if (cdf.dtype() == DType::f64) return multinomial_fill<double>(out, cdf, s);
  EMBER_INTERNAL_ASSERT(cdf.dtype() == DType::f32, "multinomial_kernel: dtype ",
                        dtype_name(cdf.dtype()), " (ops/ computes in float32 or float64)");
  multinomial_fill<float>(out, cdf, s);
}

}  // namespace

EMBER_REGISTER_KERNEL(poisson_kernel, CPU, dispatch::kFloatingTypes, poisson_cpu);
EMBER_REGISTER_KERNEL(multinomial_kernel, CPU, dispatch::kFloatingTypes, multinomial_cpu);

}  // namespace ember
