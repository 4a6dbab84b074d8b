// Automatic mixed precision (autocast), as torch.autocast: inside an AutocastGuard scope the nn
// layers and losses run their matrix products and convolutions in a low precision (bfloat16 or
// float16) and their numerically sensitive parts in float32. The policy lives at the nn level:
// each layer passes its inputs through autocast_input() with the class of the op it calls, so the
// ops themselves stay precision-agnostic. Plain ops called directly (ember::matmul, ember::add)
// are not affected, except the losses PyTorch casts at the op: ember::cross_entropy and
// ember::nll_loss compute in float32 under autocast, exactly as nn::cross_entropy/nll_loss.
//
// The policy, layer by layer (x = input, w/b = weight/bias; "low" = the scope's dtype):
//   Linear, Conv1d/2d/3d, ConvTranspose2d      x, w, b -> low; the output is low
//                                              (OpClass::low_precision)
//   BatchNorm1d/2d                             x as given: a low-precision x is normalized with
//                                              float32 statistics and float32 parameters inside
//                                              the op and the output stays low (as PyTorch's CUDA
//                                              batch_norm under autocast)
//   LayerNorm, GroupNorm                       x, w, b -> float32; the output is float32
//                                              (OpClass::fp32, PyTorch's fp32 list)
//   Softmax, LogSoftmax                        x -> float32                (OpClass::fp32)
//   cross_entropy, nll_loss, mse_loss, l1_loss,
//   binary_cross_entropy_with_logits (and the
//   loss modules)                              every floating input -> float32 (OpClass::fp32)
//   activations, MaxPool2d, AvgPool2d,
//   AdaptiveAvgPool2d, Dropout, Flatten,
//   Embedding                                  unchanged: they run in the dtype they are given
// Only floating tensors of float32, float16 or bfloat16 are cast (float64 stays float64 and integer
// tensors are never touched, as in PyTorch). Casts are differentiable: gradients flow back to the
// float32 parameters in float32. Casts are not cached across calls (unlike PyTorch's weight cache),
// so a scope may span several forward/backward passes.
#pragma once
#include <vector>

#include "ember/ops/ops.h"
#include "ember/tensor/autocast_mode.h"

namespace ember::nn {

// What an op does to precision under autocast.
enum class OpClass {
  low_precision,  // matmul, conv, linear: run in the scope's dtype (tensor cores)
  fp32,           // normalization, softmax, losses, reductions: run in float32
  promote,        // several inputs: all cast to the widest floating dtype among them
};

// The thread-local autocast state and its guard (tensor/autocast_mode.h), under their nn:: names
// as well.
using ::ember::autocast_dtype;
using ::ember::autocast_enabled;
using ::ember::AutocastGuard;

// `t` as the policy wants it for an op of class `cls` (unchanged outside autocast, for undefined,
// non-floating or float64 tensors, and for OpClass::promote, which needs several inputs).
Tensor autocast_input(const Tensor& t, OpClass cls);
// The same for several inputs of one op; OpClass::promote casts every eligible floating input to
// the widest floating dtype among them. Undefined entries stay undefined.
std::vector<Tensor> autocast_inputs(const std::vector<Tensor>& ts, OpClass cls);

}  // namespace ember::nn
