// CUDA kernels behind dropout_kernel and dropout_backward_kernel (kernel_interface/dropout.h).
//  - forward: a thread per group of 4 elements (one Philox4x32-10 block, tensor/philox.h, exactly
//    as the bernoulli fill of cuda_kernels/random/random.cu draws it, so the CPU kernel's mask is
//    the same bit for bit), two consecutive groups for 16-bit dtypes: loads the inputs as one
//    16-byte vector (before the Philox rounds), stores the outputs as one vector and the mask
//    bytes as 32-bit words when the pointers allow; grid-stride loop. Inside a CUDA graph capture
//    the Philox offset is read from the device, so each replay draws a new mask.
//  - backward: grad_input = mask ? grad_output * scale : 0, 16-byte vectors of the gradient with
//    the matching mask bytes, or a scalar loop for unaligned pointers.
// One instantiation per floating dtype and kernel; f16/bf16/f32 compute in float, f64 in double.
#include "ember/cuda_kernels/common/common.cuh"
#include "ember/kernel_interface/dropout.h"
#include "ember/tensor/philox.h"

namespace ember::cuda {
namespace {

// Philox groups (of 4 elements) a forward thread takes: 16 bytes of input for 16-bit dtypes.
template <typename T>
inline constexpr int kGroupsPerThread = sizeof(T) == 2 ? 2 : 1;

template <typename T>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    dropout_forward_kernel(const T* __restrict__ x, T* __restrict__ y, bool* __restrict__ mask,
                           int64_t n, double keep, OpMath<T> scale, uint64_t seed, uint64_t offset,
                           const uint64_t* device_offset, bool vec) {
  using A = OpMath<T>;
  constexpr int G = kGroupsPerThread<T>, E = 4 * G;  // groups and elements per thread
  const uint64_t base_offset = offset + (device_offset != nullptr ? *device_offset : 0);
  const int64_t items = (n + E - 1) / E;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < items; t += step) {
    const int64_t first = E * t;
    const bool whole = vec && first + E <= n;
    // The input vector is loaded before the Philox rounds, so its latency hides behind them.
    AlignedVec<T, E> in;
    if (whole) in = reinterpret_cast<const AlignedVec<T, E>*>(x)[t];
    bool kept[E];
#pragma unroll
    for (int k = 0; k < G; ++k) {
      const philox::F32x4 u =
          philox::uniform4_from_bits(philox::draw4(seed, uint64_t(G * t + k), base_offset));
#pragma unroll
      for (int l = 0; l < 4; ++l)
        kept[4 * k + l] = philox::bernoulli_from_uniform(philox::lane(u, l), keep);
    }
    if (whole) {
      AlignedVec<T, E> out;
      AlignedVec<uint32_t, G> bits{};
#pragma unroll
      for (int l = 0; l < E; ++l) {
        out.v[l] = convert<T>(kept[l] ? convert<A>(in.v[l]) * scale : A(0));
        // bool is one byte holding 0 or 1 (little endian)
        bits.v[l / 4] |= uint32_t(kept[l]) << (8 * (l % 4));
      }
      reinterpret_cast<AlignedVec<T, E>*>(y)[t] = out;
      reinterpret_cast<AlignedVec<uint32_t, G>*>(mask)[t] = bits;
      continue;
    }
#pragma unroll
    for (int l = 0; l < E; ++l) {
      if (first + l < n) {
        mask[first + l] = kept[l];
        y[first + l] = convert<T>(kept[l] ? convert<A>(x[first + l]) * scale : A(0));
      }
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    dropout_backward_kernel_impl(const T* __restrict__ g, const bool* __restrict__ mask,
                                 T* __restrict__ gx, int64_t n, OpMath<T> scale, bool vec) {
  using A = OpMath<T>;
  constexpr int V = 16 / sizeof(T);
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (vec) {
    const int64_t nvec = n / V;
    for (int64_t i = tid; i < nvec; i += step) {
      const AlignedVec<T, V> in = reinterpret_cast<const AlignedVec<T, V>*>(g)[i];
      const AlignedVec<bool, V> m = reinterpret_cast<const AlignedVec<bool, V>*>(mask)[i];
      AlignedVec<T, V> out;
#pragma unroll
      for (int j = 0; j < V; ++j)
        out.v[j] = convert<T>(m.v[j] ? convert<A>(in.v[j]) * scale : A(0));
      reinterpret_cast<AlignedVec<T, V>*>(gx)[i] = out;
    }
    done = nvec * V;
  }
  for (int64_t i = done + tid; i < n; i += step)
    gx[i] = convert<T>(mask[i] ? convert<A>(g[i]) * scale : A(0));
}

template <typename T>
void launch_dropout(const DropoutArgs& a, cudaStream_t stream) {
  const int64_t n = a.input.numel();
  const T* x = static_cast<const T*>(a.input.data_ptr());
  T* y = static_cast<T*>(a.output.data_ptr());
  bool* mask = a.mask.data<bool>();
  constexpr int E = 4 * kGroupsPerThread<T>;
  const bool vec =
      is_aligned(x, E * sizeof(T)) && is_aligned(y, E * sizeof(T)) && is_aligned(mask, E);
  const OpMath<T> scale = OpMath<T>(a.p >= 1 ? 0.0 : 1.0 / (1.0 - a.p));
  dropout_forward_kernel<T>
      <<<grid_for((n + E - 1) / E, a.input.device().index), kBlockThreads, 0, stream>>>(
          x, y, mask, n, 1.0 - a.p, scale, a.random.seed, a.random.offset, a.random.device_offset,
          vec);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void launch_dropout_backward(const Tensor& grad_input, const Tensor& grad_output,
                             const Tensor& mask, double scale, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  const int64_t n = grad_input.numel();
  const T* g = static_cast<const T*>(grad_output.data_ptr());
  T* gx = static_cast<T*>(grad_input.data_ptr());
  const bool* m = mask.data<bool>();
  const bool vec = is_aligned(g, 16) && is_aligned(gx, 16) && is_aligned(m, V);
  dropout_backward_kernel_impl<T><<<grid_for(vec ? (n + V - 1) / V : n, grad_input.device().index),
                                    kBlockThreads, 0, stream>>>(g, m, gx, n, OpMath<T>(scale), vec);
  EMBER_CUDA_LAUNCH_CHECK();
}

void dropout_cuda(const DropoutArgs& a) {
  EMBER_INTERNAL_ASSERT(a.input.is_contiguous() && a.output.is_contiguous() &&
                            a.mask.is_contiguous() && a.output.numel() == a.input.numel() &&
                            a.mask.numel() == a.input.numel(),
                        "dropout: input ", a.input.shape_str(), ", output ", a.output.shape_str(),
                        " and mask ", a.mask.shape_str(), " must be dense and of one size");
  if (a.input.numel() == 0) return;
  DeviceGuard device_guard(a.input.device());
  cudaStream_t stream = stream_of(a.input.device());
  dispatch_floating(a.input.dtype(), "dropout",
                    [&](auto tag) { launch_dropout<decltype(tag)>(a, stream); });
}

void dropout_backward_cuda(const Tensor& grad_input, const Tensor& grad_output, const Tensor& mask,
                           double scale) {
  if (grad_input.numel() == 0) return;
  DeviceGuard device_guard(grad_input.device());
  cudaStream_t stream = stream_of(grad_input.device());
  dispatch_floating(grad_input.dtype(), "dropout", [&](auto tag) {
    launch_dropout_backward<decltype(tag)>(grad_input, grad_output, mask, scale, stream);
  });
}

}  // namespace
}  // namespace ember::cuda

namespace ember {
EMBER_REGISTER_KERNEL(dropout_kernel, CUDA, dispatch::kFloatingTypes, &cuda::dropout_cuda);
EMBER_REGISTER_KERNEL(dropout_backward_kernel, CUDA, dispatch::kFloatingTypes,
                      &cuda::dropout_backward_cuda);
}  // namespace ember
