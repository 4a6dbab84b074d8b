// Recurrent networks: the public ops lstm, gru, rnn_tanh and rnn_relu (multi-layer, bidirectional,
// batch_first, dropout between layers, initial and final states, LSTM projections, per-sequence
// lengths) and their autograd (ops/rnn.cpp). The modes, the weight list (RnnConfig) and the kernel
// interface their algorithms implement (RnnProblem, slots "rnn.forward" and "rnn.backward") are in
// kernel_interface/rnn.h, included here.
//
// Weights, exactly as PyTorch's torch.nn.LSTM / GRU / RNN (so state_dicts convert 1:1):
//   for each layer l, for each direction (suffix "" then "_reverse"), in this order:
//     weight_ih_l{l}{suffix}  [G * H, in_l]     in_0 = input_size, in_l = D * H_out for l > 0
//     weight_hh_l{l}{suffix}  [G * H, H_out]
//     bias_ih_l{l}{suffix}    [G * H]           (when bias)
//     bias_hh_l{l}{suffix}    [G * H]           (when bias)
//     weight_hr_l{l}{suffix}  [P, H]            (LSTM with proj_size P > 0)
//   G = 4 for LSTM, rows in gate order i, f, g, o; G = 3 for GRU, order r, z, n; G = 1 for RNN.
//   H = hidden_size, H_out = P when proj_size > 0 else H, D = 2 when bidirectional else 1.
// The equations (PyTorch's), with x the layer input at step t and h, c the previous state:
//   LSTM  i, f, o = sigmoid(W_i* x + b_i* + W_h* h + b_h*), g = tanh(same for g)
//         c' = f * c + i * g,  h' = o * tanh(c')  (then h' = W_hr h' with a projection)
//   GRU   r, z = sigmoid(W_i* x + b_i* + W_h* h + b_h*), n = tanh(W_in x + b_in + r * (W_hn h +
//   b_hn))
//         h' = (1 - z) * n + z * h
//   RNN   h' = tanh or relu(W_ih x + b_ih + W_hh h + b_hh)
// Between layers, in training, the layer output goes through dropout(p) (Philox; the mask of
// layer l's input is what ember::dropout draws from the same generator state, one draw per layer
// in layer order), never after the last layer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ember/kernel_interface/rnn.h"
#include "ember/tensor/runtime/generator.h"
#include "ember/tensor/tensor.h"

namespace ember {

// The configuration of rnn() (torch.nn.LSTM / GRU / RNN's constructor arguments, with their
// defaults, plus the training flag and the dropout generator); set in a chain:
// RnnOptions().with_num_layers(2).with_bidirectional(true). The sizes (input_size, hidden_size)
// come from the weights.
struct RnnOptions {
  RnnMode mode = RnnMode::lstm;    // lstm (the default), gru, rnn_tanh or rnn_relu
  int64_t num_layers = 1;          // L, stacked layers (>= 1)
  bool bias = true;                // the weight list holds bias_ih / bias_hh
  bool batch_first = false;        // input and output are [B, T, *] instead of [T, B, *]
  double dropout = 0;              // between layers, only when training
  bool training = true;            // enables the dropout between layers
  bool bidirectional = false;      // D = 2: a reverse direction per layer, outputs concatenated
  int64_t proj_size = 0;           // LSTM only
  Generator* generator = nullptr;  // for dropout; the input device's default when null

  // Setters of the fields above, each returning *this for chaining.
  RnnOptions& with_mode(RnnMode m) {
    mode = m;
    return *this;
  }
  RnnOptions& with_num_layers(int64_t n) {
    num_layers = n;
    return *this;
  }
  RnnOptions& with_bias(bool b) {
    bias = b;
    return *this;
  }
  RnnOptions& with_batch_first(bool b) {
    batch_first = b;
    return *this;
  }
  RnnOptions& with_dropout(double p) {
    dropout = p;
    return *this;
  }
  RnnOptions& with_training(bool t) {
    training = t;
    return *this;
  }
  RnnOptions& with_bidirectional(bool b) {
    bidirectional = b;
    return *this;
  }
  RnnOptions& with_proj_size(int64_t p) {
    proj_size = p;
    return *this;
  }
  RnnOptions& with_generator(Generator* g) {
    generator = g;
    return *this;
  }
};

// What rnn() returns: the last layer's output at every step, and the final states of every layer
// and direction (layer-major, forward before reverse, as PyTorch's h_n).
struct RnnResult {
  Tensor
      output;  // [T, B, D * H_out] ([B, T, D * H_out] when batch_first; [T, D * H_out] unbatched)
  Tensor h_n;  // [L * D, B, H_out]  ([L * D, H_out] unbatched)
  Tensor c_n;  // [L * D, B, H] for LSTM; undefined for GRU and RNN
};

// A multi-layer recurrent network over a sequence, as torch.nn.LSTM / GRU / RNN's forward.
//   input    [T, B, input_size] ([B, T, input_size] when batch_first), or [T, input_size]
//            (one unbatched sequence); float32, float64, bfloat16 or float16 (16-bit floats
//            compute in float32 on the CPU; CUDA runs float32 and bfloat16 natively, float16
//            through float32, and not float64)
//   weights  the flat list described at the top of this file (PyTorch's _flat_weights order),
//            each of input's dtype and device
//   h0       [L * D, B, H_out] or undefined (zeros); c0 [L * D, B, H] or undefined (LSTM only)
//   lengths  undefined, or integers [B] (CPU, or on input's device: read on the host) with
//            1 <= lengths[b] <= T: sequence b is input[0 : lengths[b]]. Outputs at t >= lengths[b]
//            are zero and its final state is the state after step lengths[b] - 1 (the reverse
//            direction starts at lengths[b] - 1): what PyTorch's packed sequences give, with the
//            output padded to T. Lengths are handled inside the kernels (no packing copies).
// Differentiable in input, h0, c0 and every weight. Layer l > 0 takes the previous layer's
// output through dropout(options.dropout) when options.training.
RnnResult rnn(const Tensor& input, const std::vector<Tensor>& weights, const Tensor& h0,
              const Tensor& c0, const Tensor& lengths, const RnnOptions& options);
// The same with the mode set.
RnnResult lstm(const Tensor& input, const std::vector<Tensor>& weights, const Tensor& h0 = {},
               const Tensor& c0 = {}, const Tensor& lengths = {}, RnnOptions options = {});
RnnResult gru(const Tensor& input, const std::vector<Tensor>& weights, const Tensor& h0 = {},
              const Tensor& lengths = {}, RnnOptions options = {});
RnnResult rnn_tanh(const Tensor& input, const std::vector<Tensor>& weights, const Tensor& h0 = {},
                   const Tensor& lengths = {}, RnnOptions options = {});
RnnResult rnn_relu(const Tensor& input, const std::vector<Tensor>& weights, const Tensor& h0 = {},
                   const Tensor& lengths = {}, RnnOptions options = {});

// Whether float32 recurrent networks may use TF32 tensor cores on CUDA (on by default, as PyTorch's
// torch.backends.cudnn.allow_tf32, which governs cuDNN's RNNs). Part of every rnn algorithm key.
bool rnn_allow_tf32();
void set_rnn_allow_tf32(bool allow);

}  // namespace ember
