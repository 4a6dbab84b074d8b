// Convolution: the public conv2d op (argument checks, output shape, autograd), and below it the
// kernel interface its algorithms implement: ConvProblem, one per call and direction, chosen among
// by the AlgoCache (dispatch/algo_cache.h) from the slots "conv2d.forward", "conv2d.backward_data"
// and "conv2d.backward_filter". CPU algorithms register in cpu_kernels/conv2d.cpp, CUDA ones in
// cuda_kernels/.
#pragma once
#include <array>
#include <cstdint>

#include "ember/dispatch/algo_cache.h"
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

// 2-D convolution (cross-correlation, as torch.nn.functional.conv2d).
//   input  [N, C, H, W]          (channels_last accepted; the CPU computes on an NCHW copy)
//   weight [K, C / groups, R, S]
//   bias   [K] or undefined
//   output [N, K, P, Q] with P = (H + 2 * padding[0] - dilation[0] * (R - 1) - 1) / stride[0] + 1,
//          and Q likewise along W ('same': P = H, Q = W; 'valid': padding 0).
// The output and the gradients are allocated in conv_result_memory_format(input, weight).
// float32 and float64; float16 and bfloat16 compute in float32 on the CPU. Differentiable in
// input, weight and bias; the backward runs the backward-data and backward-filter algorithms
// through the algorithm cache.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
              const Conv2dParams& p = {});

// The memory format of the tensors a 2-D convolution allocates (its output and the gradients of
// its input and weight), one rule for conv2d, conv_transpose2d and conv2d_bias_relu. On CUDA it is
// PyTorch's (cudnn_conv_suggest_memory_format): channels_last when the input and the weight are
// 4-D and either suggests channels_last, else contiguous; so channels_last networks stay
// channels_last and no operand is staged through a workspace. On the CPU, whose algorithms
// compute in NCHW, contiguous.
MemoryFormat conv_result_memory_format(const Tensor& input, const Tensor& weight);

// The explicit form of a valid/same convolution: the params with padding_mode explicit and the
// padding it stands for, and the input to convolve, which for an odd 'same' total is `input` with
// one zero row/column appended on the bottom/right (differentiably), as PyTorch does. Explicit
// params come back unchanged with `input`. `op` names the caller in error messages (stride != 1
// with 'same').
struct ResolvedConv2dPadding {
  Tensor input;
  Conv2dParams params;
};
ResolvedConv2dPadding resolve_conv2d_padding(const char* op, const Tensor& input,
                                             const Tensor& weight, const Conv2dParams& p);

// conv2d's argument checks (explicit padding): throws conv2d's error for anything a user can get
// wrong, else returns the output shape [N, K, P, Q]. For ops built on conv2d's algorithms.
Shape check_conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                   const Conv2dParams& p);

// Whether float32 convolutions may use TF32 tensor cores (on by default, as PyTorch's
// torch.backends.cudnn.allow_tf32). Part of every conv algorithm key.
bool conv_allow_tf32();
void set_conv_allow_tf32(bool allow);

// ---- kernel interface -------------------------------------------------------------------------

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

  Device device() const { return input.device(); }
  // The tensor this direction writes.
  const Tensor& written() const;
  // The same problem with the written tensor replaced by a fresh one of its shape (benchmarking).
  ConvProblem with_scratch_outputs() const;
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
// The algorithm-cache key of a problem (sizes, layouts, dtypes, parameters, math mode, device).
dispatch::AlgoKey conv2d_key(const ConvProblem& problem);
// The algorithm the cache picks for `problem` under the current settings (tests, introspection).
const dispatch::Algorithm<ConvProblem>& conv2d_choose(const ConvProblem& problem);
// Chooses through algo_cache() and runs; the op's forward and backward call this.
void conv2d_run(const ConvProblem& problem);
// conv2d_run, or zeros in the written tensor when the reduction is empty (no channels or no
// images): algorithms are never handed empty problems.
void conv2d_run_or_zero(const ConvProblem& problem);

}  // namespace ember
