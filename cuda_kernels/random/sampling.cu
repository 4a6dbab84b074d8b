// The CUDA poisson_kernel and multinomial_kernel (kernel_interface/random.h): one thread per
// element (grid-stride), each running the samplers of kernel_interface/random_samplers.h on its
// own Philox subsequence, as the CPU kernels (cpu_kernels/random_sampling.cpp) do. One
// instantiation per kernel for float and double (ops/ computes 16-bit dtypes in float32).
#include <algorithm>
#include <cstdint>

#include "ember/kernel_interface/random.h"
#include "ember/kernel_interface/random_samplers.h"
#include "ember/tensor/runtime/cuda_check.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "ember/tensor/runtime/stream.h"

namespace ember {
namespace {

constexpr int kThreads = 256;

int64_t blocks_for_elements(int64_t n, int device) {
  const int64_t max_blocks = int64_t(cuda::device_properties(device).sm_count) * 8;
  return std::max<int64_t>(1, std::min((n + kThreads - 1) / kThreads, max_blocks));
}

__device__ __forceinline__ uint64_t base_offset(uint64_t offset, const uint64_t* device_offset) {
  return offset + (device_offset != nullptr ? *device_offset : 0);
}

template <typename T>
__global__ void poisson_kernel_impl(T* out, const T* rates, int64_t n, uint64_t seed,
                                    uint64_t offset, const uint64_t* device_offset) {
  const uint64_t base = base_offset(offset, device_offset);
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    random_samplers::UniformStream u = random_samplers::uniform_stream(seed, uint64_t(i), base);
    out[i] = T(random_samplers::sample_poisson(double(rates[i]), u));
  }
}

template <typename T>
__global__ void multinomial_kernel_impl(int64_t* out, const T* cdf, int64_t rows,
                                        int64_t categories, int64_t samples, uint64_t seed,
                                        uint64_t offset, const uint64_t* device_offset) {
  const uint64_t base = base_offset(offset, device_offset);
  const int64_t n = rows * samples;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const T u =
        T(philox::lane(philox::uniform4_from_bits(philox::draw4(seed, uint64_t(i), base)), 0));
    out[i] = random_samplers::search_cdf(cdf + (i / samples) * categories, categories, u);
  }
}

void poisson_cuda(const Tensor& out, const Tensor& rates, const PhiloxState& s) {
  EMBER_INTERNAL_ASSERT(out.is_contiguous() && rates.is_contiguous() &&
                            out.dtype() == rates.dtype() && out.numel() == rates.numel(),
                        "poisson_kernel: expects contiguous out and rates of one dtype");
  const int64_t n = out.numel();
  if (n == 0) return;
  const Device device = out.device();
  DeviceGuard device_guard(device);
  auto stream = static_cast<cudaStream_t>(current_stream(device).handle);
  const auto blocks = unsigned(blocks_for_elements(n, device.index));
  if (out.dtype() == DType::f64) {
    poisson_kernel_impl<double><<<blocks, kThreads, 0, stream>>>(
        static_cast<double*>(out.data_ptr()), static_cast<const double*>(rates.data_ptr()), n,
        s.seed, s.offset, s.device_offset);
  } else {
    EMBER_INTERNAL_ASSERT(out.dtype() == DType::f32, "poisson_kernel: dtype ",
                          dtype_name(out.dtype()), " (ops/ computes in float32 or float64)");
    poisson_kernel_impl<float><<<blocks, kThreads, 0, stream>>>(
        static_cast<float*>(out.data_ptr()), static_cast<const float*>(rates.data_ptr()), n, s.seed,
        s.offset, s.device_offset);
  }
  EMBER_CUDA_LAUNCH_CHECK();
}

void multinomial_cuda(const Tensor& out, const Tensor& cdf, const PhiloxState& s) {
  EMBER_INTERNAL_ASSERT(out.is_contiguous() && cdf.is_contiguous() && cdf.dim() == 2 &&
                            out.dim() == 2 && out.dtype() == DType::i64,
                        "multinomial_kernel: expects contiguous 2-D out (int64) and cdf");
  const int64_t rows = cdf.size(0), categories = cdf.size(1), samples = out.size(1);
  if (rows * samples == 0) return;
  const Device device = out.device();
  DeviceGuard device_guard(device);
  auto stream = static_cast<cudaStream_t>(current_stream(device).handle);
  const auto blocks = unsigned(blocks_for_elements(rows * samples, device.index));
  auto* dst = static_cast<int64_t*>(out.data_ptr());
  if (cdf.dtype() == DType::f64) {
    multinomial_kernel_impl<double>
        <<<blocks, kThreads, 0, stream>>>(dst, static_cast<const double*>(cdf.data_ptr()), rows,
                                          categories, samples, s.seed, s.offset, s.device_offset);
  } else {
    EMBER_INTERNAL_ASSERT(cdf.dtype() == DType::f32, "multinomial_kernel: dtype ",
                          dtype_name(cdf.dtype()), " (ops/ computes in float32 or float64)");
    multinomial_kernel_impl<float>
        <<<blocks, kThreads, 0, stream>>>(dst, static_cast<const float*>(cdf.data_ptr()), rows,
                                          categories, samples, s.seed, s.offset, s.device_offset);
  }
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace

EMBER_REGISTER_KERNEL(poisson_kernel, CUDA, dispatch::kFloatingTypes, poisson_cuda);
EMBER_REGISTER_KERNEL(multinomial_kernel, CUDA, dispatch::kFloatingTypes, multinomial_cuda);

}  // namespace ember
