// The convolution kernel interface: what conv2d's algorithms see. ConvProblem is one call in one
// direction, chosen among by the AlgoCache (dispatch/algo_cache.h) from the slots
// "conv2d.forward", "conv2d.backward_data" and "conv2d.backward_filter"; a forward problem may
// carry an epilogue (bias, ReLU) that the algorithm which runs applies. CPU algorithms register
// in cpu_kernels/conv2d.cpp, CUDA ones in cuda_kernels/conv/.
#pragma once
#include <array>
#include <cstdint>

#include "ember/dispatch/algo_key.h"
#include "ember/dispatch/algorithm.h"
#include "ember/dispatch/registry.h"
#include "ember/tensor/tensor.h"

namespace ember {

// How a convolution's padding is given, as PyTorch's `padding` argument: the numbers in the
// params (explicit), "valid" (none) or "same" (the output has the input's spatial size; stride
// must be 1; where the total padding dilation * (kernel - 1) is odd, the extra zero goes on the
// right/bottom, exactly as torch.nn.functional.conv2d(padding='same')).
enum class ConvPaddingMode : uint8_t { explicit_sizes, valid, same };
const char* conv_padding_mode_name(ConvPaddingMode mode);  // "explicit", "valid", "same"

struct Conv2dParams {
  std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  // valid/same replace `padding`; kernels only ever see explicit params (conv2d resolves them).
  ConvPaddingMode padding_mode = ConvPaddingMode::explicit_sizes;
};

// What a forward convolution does to its output after the convolution: output = conv + bias
// (bias [K] of the problem's dtype, or undefined for none), then ReLU when `relu` (NaN stays NaN,
// as torch.relu).
struct ConvEpilogue {
  Tensor bias;
  bool relu = false;
  bool active() const { return bias.defined() || relu; }
};

// One convolution computation. The three tensors are named by their forward role; which one is
// written depends on the direction (as cuDNN's forward / backward-data / backward-filter):
//   forward          reads input, weight;       writes output
//   backward_data    reads output (= grad of output), weight; writes input (= grad of input)
//   backward_filter  reads input, output (= grad of output); writes weight (= grad of weight)
// The written tensor is overwritten, never accumulated into (autograd accumulates). All three have
// one dtype and device; shapes are as for conv2d.
struct ConvProblem {
  dispatch::Direction direction = dispatch::Direction::forward;
  Tensor input;   // [N, C, H, W]
  Tensor weight;  // [K, C / groups, R, S]
  Tensor output;  // [N, K, P, Q]
  Conv2dParams params;
  bool allow_tf32 = true;
  // Forward only, and only on device types that register conv2d_epilogue_kernel: every algorithm
  // there applies it, in its own kernel where it can (the algorithm declares so), else with
  // conv2d_epilogue_kernel after the convolution. Not part of the algorithm-cache key: the choice
  // is the convolution's.
  ConvEpilogue epilogue = {};

  Device device() const { return input.device(); }
  // The tensor this direction writes.
  const Tensor& written() const;
  // The same problem writing a fresh tensor of the written one's shape, without the epilogue
  // (benchmarking times the convolution the key describes).
  ConvProblem with_scratch_outputs() const;
  // The same problem without the epilogue.
  ConvProblem without_epilogue() const;
};

// The sizes of a ConvProblem as plain numbers, shared by the CPU and CUDA algorithms.
struct ConvDims {
  int64_t N, C, H, W;  // input
  int64_t K, R, S;     // weight [K, C/G, R, S]
  int64_t P, Q;        // output spatial
  int64_t G, Cg, Kg;   // groups, channels per group (input, output)
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t HW() const { return H * W; }
  int64_t PQ() const { return P * Q; }
  int64_t RS() const { return R * S; }
  int64_t CgRS() const { return Cg * R * S; }
  int64_t NPQ() const { return N * P * Q; }
  int64_t NHW() const { return N * H * W; }
  // Multiply-adds of the convolution (the same in every direction).
  double macs() const { return double(N) * double(K) * double(P * Q) * double(Cg * R * S); }
  // 1x1, stride 1, no padding: a plain GEMM over the pixels.
  bool pointwise() const { return R == 1 && S == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
  bool depthwise() const { return Cg == 1 && Kg == 1 && G > 1; }
};
ConvDims conv_dims(const ConvProblem& problem);

// The op id of "conv2d" and the slot of each direction on a device type.
dispatch::OpId conv2d_op();
dispatch::AlgoSlot& conv2d_slot(dispatch::Direction direction, DeviceType device_type);
// The algorithm-cache key of a problem (sizes, layouts, dtypes, parameters, math mode, device;
// not the epilogue).
dispatch::AlgoKey conv2d_key(const ConvProblem& problem);

// Applies problem.epilogue in place to problem.output, a forward problem's dense (NCHW or
// channels_last) output that already holds the convolution. Registered for a device type whose
// algorithms accept problems with an epilogue.
using ConvEpilogueKernel = void (*)(const ConvProblem& problem);
EMBER_DECLARE_KERNEL(conv2d_epilogue_kernel, ConvEpilogueKernel)

}  // namespace ember
