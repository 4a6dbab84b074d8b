// The convolution epilogue on CUDA, y = conv + bias, then ReLU when asked, as one elementwise
// pass over a convolution's output (NCHW or channels_last y; fp32 math, fp64 for f64): what
// register_conv_algorithm runs after an algorithm that does not apply ConvProblem::epilogue in its
// own kernel, registered as conv2d_epilogue_kernel (kernel_interface/conv.h). ReLU keeps NaN (as
// torch.relu). The output is updated in place.
#include "ember/cuda_kernels/common/reduce.cuh"
#include "ember/cuda_kernels/conv/conv_common.cuh"

namespace ember::cuda::conv {
namespace {

// y[i] = y[i] + bias[channel of i], then ReLU when `relu`; the channel is i % K (channels_last)
// or (i / PQ) % K.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    bias_act_inplace_kernel(T* __restrict__ y, const T* __restrict__ bias, bool relu, int64_t total,
                            int64_t K, FastDivmod64 by_pq, FastDivmod64 by_k, bool channels_last,
                            bool use32) {
  using Acc = OpMath<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    int64_t k;
    if (channels_last) {
      k = i - by_k.div(i, use32) * K;
    } else {
      const int64_t plane = by_pq.div(i, use32);
      k = plane - by_k.div(plane, use32) * K;
    }
    Acc v = convert<Acc>(y[i]);
    if (bias != nullptr) v += convert<Acc>(bias[k]);
    y[i] = convert<T>(relu && v < Acc(0) ? Acc(0) : v);
  }
}

void bias_act_inplace(const Tensor& y, const Tensor& bias, bool relu) {
  const bool channels_last = !y.is_contiguous() && y.is_contiguous(MemoryFormat::channels_last);
  EMBER_INTERNAL_ASSERT(channels_last || y.is_contiguous(), "conv2d epilogue: the output (shape ",
                        y.shape_str(), ") must be dense NCHW or channels_last");
  Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  const int64_t total = y.numel(), K = y.size(1), PQ = y.size(2) * y.size(3);
  const bool use32 = total <= std::numeric_limits<int32_t>::max();
  const Device dev = y.device();
  dispatch_conv_dtype<true>(y.dtype(), "epilogue", [&](auto tag) {
    using T = decltype(tag);
    bias_act_inplace_kernel<T><<<grid_for(total, dev.index), kBlockThreads, 0, stream_of(dev)>>>(
        static_cast<T*>(y.data_ptr()), b.defined() ? static_cast<const T*>(b.data_ptr()) : nullptr,
        relu, total, K, FastDivmod64(std::max<int64_t>(PQ, 1), use32), FastDivmod64(K, use32),
        channels_last, use32);
    EMBER_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace

void apply_conv_epilogue(const ConvProblem& pr) {
  EMBER_INTERNAL_ASSERT(pr.direction == Direction::forward,
                        "conv2d epilogue: only a forward problem has one");
  if (!pr.epilogue.active()) return;
  DeviceGuard device_guard(pr.device());
  bias_act_inplace(pr.output, pr.epilogue.bias, pr.epilogue.relu);
}

}  // namespace ember::cuda::conv

namespace ember {
EMBER_REGISTER_KERNEL(conv2d_epilogue_kernel, CUDA, dispatch::kFloatingTypes,
                      &cuda::conv::apply_conv_epilogue);
}  // namespace ember
