// The CUDA random_kernel (see kernel_interface/): uniform, normal, bernoulli and randint fills with
// cuRAND's Philox4x32-10 numbers, one thread per group of four elements (grid-stride). Group g
// holds what curand_init(seed, g, offset [+ *device_offset]) followed by curand_uniform4 /
// curand_normal4 / curand4 returns, element 4g + l taking lane l, exactly as the CPU kernel
// (cpu_kernels/random.cpp) computes. Also the one-thread kernels that move a graph's device
// offset, and a plain cuRAND reference that the tests hold the fill to.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <curand_kernel.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "ember/cuda_kernels/random/random.cuh"
#include "ember/kernel_interface/random.h"
#include "ember/kernel_interface/random_samplers.h"
#include "ember/tensor/philox.h"
#include "ember/tensor/runtime/cuda_check.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "ember/tensor/runtime/stream.h"
#include "ember/tensor/tensor_iter.h"

namespace ember {
namespace {

// Everything a fill needs, passed by value. Non-contiguous outputs carry their (coalesced) sizes
// and strides in elements; ndim == 0 means contiguous.
struct RandomLaunch {
  void* out = nullptr;
  int64_t numel = 0;
  int ndim = 0;
  int64_t sizes[kMaxIterDims] = {};
  int64_t strides[kMaxIterDims] = {};
  RandomKind kind = RandomKind::uniform;
  double a = 0, b = 1;
  uint64_t randint_range = 0;
  uint64_t seed = 0, offset = 0;
  const uint64_t* device_offset = nullptr;
  bool vector_stores = false;  // contiguous and aligned to four elements
};

template <typename T>
inline constexpr bool kIsFloating = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                    std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// float -> output type and back, for the float-computed dtypes (f32, f16, bf16): round to nearest
// even like ember::Half / ember::BFloat16 on the host.
__device__ __forceinline__ void store_float(float v, float& out) { out = v; }
__device__ __forceinline__ void store_float(float v, __half& out) { out = __float2half_rn(v); }
__device__ __forceinline__ void store_float(float v, __nv_bfloat16& out) {
  out = __float2bfloat16_rn(v);
}
__device__ __forceinline__ double as_double(float v) { return v; }
__device__ __forceinline__ double as_double(__half v) { return __half2float(v); }
__device__ __forceinline__ double as_double(__nv_bfloat16 v) { return __bfloat162float(v); }

__device__ __forceinline__ float next_below(float v) { return philox::next_below(v); }
__device__ __forceinline__ __half next_below(__half v) {
  return __ushort_as_half(philox::next_below_bits16(__half_as_ushort(v)));
}
__device__ __forceinline__ __nv_bfloat16 next_below(__nv_bfloat16 v) {
  return __ushort_as_bfloat16(philox::next_below_bits16(__bfloat16_as_ushort(v)));
}

__device__ __forceinline__ int64_t memory_offset(const RandomLaunch& L, int64_t logical) {
  if (L.ndim == 0) return logical;
  int64_t at = 0;
  for (int d = L.ndim - 1; d >= 0; --d) {
    at += (logical % L.sizes[d]) * L.strides[d];
    logical /= L.sizes[d];
  }
  return at;
}

// The four raw values of group g: curand_init(seed, g, offset) then curand4, computed by
// tensor/philox.h's device path. That is bit-identical to cuRAND (and so are philox.h's uniform
// and normal conversions on the device, which use cuRAND's own __sincosf and logf; tests/cuda
// checks both against philox_curand_reference below), but evaluates one Philox block per group
// when offset % 4 == 0 where curand_init + curand4 evaluate two.
__device__ __forceinline__ philox::U32x4 group_bits(const RandomLaunch& L, uint64_t group,
                                                    uint64_t offset) {
  return philox::draw4(L.seed, group, offset);
}

template <typename T>
__device__ __forceinline__ void group_values(const RandomLaunch& L, const philox::U32x4& bits,
                                             T values[4]) {
  switch (L.kind) {
    case RandomKind::uniform: {
      if constexpr (kIsFloating<T>) {
        const philox::F32x4 u = philox::uniform4_from_bits(bits);
#pragma unroll
        for (int l = 0; l < 4; ++l) {
          const float v = philox::to_half_open(philox::lane(u, l));
          if constexpr (std::is_same_v<T, double>) {
            const double out = philox::affine(v, L.b - L.a, L.a);
            values[l] = out >= L.b ? philox::next_below(out) : out;
          } else {
            T out;
            store_float(philox::affine(v, float(L.b - L.a), float(L.a)), out);
            // Rounding to the output type can reach b: keep [a, b) (see philox::next_below).
            if (as_double(out) >= L.b) out = next_below(out);
            values[l] = out;
          }
        }
      }
      break;
    }
    case RandomKind::normal: {
      if constexpr (kIsFloating<T>) {
        const philox::F32x4 n = philox::normal4_from_bits(bits);
#pragma unroll
        for (int l = 0; l < 4; ++l) {
          if constexpr (std::is_same_v<T, double>)
            values[l] = philox::affine(philox::lane(n, l), L.b, L.a);
          else
            store_float(philox::affine(philox::lane(n, l), float(L.b), float(L.a)), values[l]);
        }
      }
      break;
    }
    case RandomKind::bernoulli: {
      const philox::F32x4 u = philox::uniform4_from_bits(bits);
#pragma unroll
      for (int l = 0; l < 4; ++l) {
        const float one_or_zero =
            philox::bernoulli_from_uniform(philox::lane(u, l), L.a) ? 1.0f : 0.0f;
        if constexpr (kIsFloating<T> && !std::is_same_v<T, double>)
          store_float(one_or_zero, values[l]);
        else
          values[l] = static_cast<T>(one_or_zero);
      }
      break;
    }
    case RandomKind::randint: {
#pragma unroll
      for (int l = 0; l < 4; ++l) {
        const int64_t v = int64_t(L.a) + int64_t(philox::randint_from_bits(philox::lane(bits, l),
                                                                           L.randint_range));
        if constexpr (std::is_same_v<T, double>)
          values[l] = double(v);
        else if constexpr (kIsFloating<T>)
          store_float(float(v), values[l]);
        else
          values[l] = static_cast<T>(v);
      }
      break;
    }
    case RandomKind::exponential:
    case RandomKind::geometric:
    case RandomKind::cauchy:
    case RandomKind::log_normal: {
      if constexpr (kIsFloating<T>) {
        const philox::F32x4 d = L.kind == RandomKind::log_normal ? philox::normal4_from_bits(bits)
                                                                 : philox::uniform4_from_bits(bits);
#pragma unroll
        for (int l = 0; l < 4; ++l) {
          const double v =
              random_samplers::transform_draw(L.kind, double(philox::lane(d, l)), L.a, L.b);
          if constexpr (std::is_same_v<T, double>)
            values[l] = v;
          else
            store_float(float(v), values[l]);
        }
      }
      break;
    }
  }
}

// Four outputs stored with one vector access where the group is whole and aligned.
template <typename T>
struct alignas(4 * sizeof(T)) Group4 {
  T v[4];
};

// out: [numel] in logical order (memory through memory_offset). One thread per group of four.
template <typename T>
__global__ void random_fill_kernel(RandomLaunch L) {
  // Inside a captured graph the base offset lives on the device and advances per replay.
  const uint64_t offset = L.offset + (L.device_offset != nullptr ? *L.device_offset : 0);
  T* out = static_cast<T*>(L.out);
  const int64_t groups = (L.numel + 3) / 4;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += step) {
    Group4<T> group;
    group_values<T>(L, group_bits(L, uint64_t(g), offset), group.v);
    const int64_t first = 4 * g;
    if (L.vector_stores && first + 4 <= L.numel) {
      *reinterpret_cast<Group4<T>*>(out + first) = group;
      continue;
    }
#pragma unroll
    for (int l = 0; l < 4; ++l)
      if (first + l < L.numel) out[memory_offset(L, first + l)] = group.v[l];
  }
}

template <typename T>
void launch_random_fill(RandomLaunch L, int device, cudaStream_t stream) {
  constexpr int kThreads = 256;
  L.vector_stores = L.ndim == 0 && reinterpret_cast<uintptr_t>(L.out) % sizeof(Group4<T>) == 0;
  const int64_t groups = (L.numel + 3) / 4;
  // Enough blocks to fill the GPU several times over; the grid-stride loop covers the rest.
  const int64_t max_blocks = int64_t(cuda::device_properties(device).sm_count) * 8;
  const int64_t blocks =
      std::max<int64_t>(1, std::min((groups + kThreads - 1) / kThreads, max_blocks));
  random_fill_kernel<T><<<unsigned(blocks), kThreads, 0, stream>>>(L);
  EMBER_CUDA_LAUNCH_CHECK();
}

// Drops size-1 dims and merges dims that are contiguous with each other, so that any dense output
// fits in kMaxIterDims; leaves ndim == 0 when the output is plainly contiguous.
void describe_layout(const Tensor& out, RandomLaunch& L) {
  if (out.is_contiguous()) return;
  int64_t sizes[64], strides[64];
  int n = 0;
  for (int64_t d = 0; d < out.dim(); ++d) {
    if (out.size(d) == 1) continue;
    if (n > 0 && strides[n - 1] == out.stride(d) * out.size(d)) {
      sizes[n - 1] *= out.size(d);
      strides[n - 1] = out.stride(d);
      continue;
    }
    EMBER_INTERNAL_ASSERT(n < 64, "random_kernel: too many dims");
    sizes[n] = out.size(d);
    strides[n] = out.stride(d);
    ++n;
  }
  if (n == 0 || (n == 1 && strides[0] == 1)) return;
  EMBER_CHECK_STATUS(n <= kMaxIterDims, not_supported, "random_kernel: output of sizes ",
                     out.shape_str(), " and strides ", shape_str(out.strides()), " has ", n,
                     " dims that cannot be merged (at most ", kMaxIterDims,
                     "); fill a contiguous tensor and copy it");
  L.ndim = n;
  for (int d = 0; d < n; ++d) {
    L.sizes[d] = sizes[d];
    L.strides[d] = strides[d];
  }
}

void random_cuda(const Tensor& out, const RandomParams& p) {
  const DType dtype = out.dtype();
  if (!is_floating(dtype)) {
    EMBER_CHECK_STATUS(p.kind == RandomKind::randint || p.kind == RandomKind::bernoulli,
                       not_supported, "random_kernel: ", random_kind_name(p.kind),
                       " values need a floating output, got dtype ", dtype_name(dtype),
                       "; fill a float32/float64/float16/bfloat16 tensor instead");
  }
  RandomLaunch L;
  if (p.kind == RandomKind::randint) {
    const int64_t low = int64_t(p.a), high = int64_t(p.b);
    EMBER_CHECK(high > low && uint64_t(high) - uint64_t(low) <= philox::kMaxRandintRange,
                "randint: the range [", low, ", ", high, ") must hold between 1 and 2^32 values; ",
                "split a wider range into a high and a low draw");
    L.randint_range = uint64_t(high) - uint64_t(low);
  }
  L.numel = out.numel();
  if (L.numel == 0) return;
  L.out = out.data_ptr();
  L.kind = p.kind;
  L.a = p.a;
  L.b = p.b;
  L.seed = p.seed;
  L.offset = p.offset;
  L.device_offset = p.device_offset;
  describe_layout(out, L);

  const Device device = out.device();
  DeviceGuard device_guard(device);
  auto stream = static_cast<cudaStream_t>(current_stream(device).handle);
  switch (dtype) {
    case DType::f32:
      launch_random_fill<float>(L, device.index, stream);
      break;
    case DType::f64:
      launch_random_fill<double>(L, device.index, stream);
      break;
    case DType::f16:
      launch_random_fill<__half>(L, device.index, stream);
      break;
    case DType::bf16:
      launch_random_fill<__nv_bfloat16>(L, device.index, stream);
      break;
    case DType::i32:
      launch_random_fill<int32_t>(L, device.index, stream);
      break;
    case DType::i64:
      launch_random_fill<int64_t>(L, device.index, stream);
      break;
    case DType::u8:
      launch_random_fill<uint8_t>(L, device.index, stream);
      break;
    case DType::boolean:
      launch_random_fill<bool>(L, device.index, stream);
      break;
  }
}

// Every dtype, like the CPU kernel: floating outputs take all four kinds, integral ones randint and
// bernoulli.
EMBER_REGISTER_KERNEL(random_kernel, CUDA, dispatch::kAllTypes, random_cuda);

// groups x 4 values of each cuRAND call, for the tests: bits from curand4, uniforms from
// curand_uniform4 and normals from curand_normal4, each right after curand_init(seed, g, offset).
__global__ void philox_curand_reference_kernel(uint32_t* bits, float* uniforms, float* normals,
                                               int64_t groups, uint64_t seed, uint64_t offset) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += step) {
    curandStatePhilox4_32_10_t state;
    curand_init(seed, uint64_t(g), offset, &state);
    const uint4 b = curand4(&state);
    curand_init(seed, uint64_t(g), offset, &state);
    const float4 u = curand_uniform4(&state);
    curand_init(seed, uint64_t(g), offset, &state);
    const float4 n = curand_normal4(&state);
    reinterpret_cast<uint4*>(bits)[g] = b;
    reinterpret_cast<float4*>(uniforms)[g] = u;
    reinterpret_cast<float4*>(normals)[g] = n;
  }
}

}  // namespace

namespace cuda {

void philox_curand_reference(uint32_t* bits, float* uniforms, float* normals, int64_t groups,
                             uint64_t seed, uint64_t offset, cudaStream_t stream) {
  if (groups == 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((groups + kThreads - 1) / kThreads, 4096);
  philox_curand_reference_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(bits, uniforms, normals,
                                                                            groups, seed, offset);
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace cuda
}  // namespace ember
