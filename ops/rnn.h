// Recurrent networks: the public ops lstm, gru, rnn_tanh and rnn_relu (multi-layer, bidirectional,
// batch_first, dropout between layers, initial and final states, LSTM projections, per-sequence
// lengths), their autograd, and below them the kernel interface their algorithms implement:
// RnnProblem, chosen among by the AlgoCache from the slots "rnn.forward" and "rnn.backward".
// The CPU reference registers in cpu_kernels/rnn.cpp, the CUDA algorithms (cuBLAS per step and a
// persistent kernel) in cuda_kernels/rnn.cu.
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
//   GRU   r, z = sigmoid(W_i* x + b_i* + W_h* h + b_h*), n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
//         h' = (1 - z) * n + z * h
//   RNN   h' = tanh or relu(W_ih x + b_ih + W_hh h + b_hh)
// Between layers, in training, the layer output goes through dropout(p) (Philox; the mask of
// layer l's input is what ember::dropout draws from the same generator state, one draw per layer
// in layer order), never after the last layer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ember/dispatch/algo_cache.h"
#include "ember/kernel_interface/random.h"
#include "ember/tensor/runtime/generator.h"
#include "ember/tensor/tensor.h"

namespace ember {

enum class RnnMode : uint8_t { lstm, gru, rnn_tanh, rnn_relu };
const char* rnn_mode_name(RnnMode mode);  // "lstm", "gru", "rnn_tanh", "rnn_relu"
// Gates per hidden unit: 4 (LSTM), 3 (GRU), 1 (RNN).
int64_t rnn_gate_count(RnnMode mode);

struct RnnOptions {
  RnnMode mode = RnnMode::lstm;
  int64_t num_layers = 1;
  bool bias = true;           // the weight list holds bias_ih / bias_hh
  bool batch_first = false;   // input and output are [B, T, *] instead of [T, B, *]
  double dropout = 0;         // between layers, only when training
  bool training = true;
  bool bidirectional = false;
  int64_t proj_size = 0;      // LSTM only
  Generator* generator = nullptr;  // for dropout; the input device's default when null

  RnnOptions& with_mode(RnnMode m) { mode = m; return *this; }
  RnnOptions& with_num_layers(int64_t n) { num_layers = n; return *this; }
  RnnOptions& with_bias(bool b) { bias = b; return *this; }
  RnnOptions& with_batch_first(bool b) { batch_first = b; return *this; }
  RnnOptions& with_dropout(double p) { dropout = p; return *this; }
  RnnOptions& with_training(bool t) { training = t; return *this; }
  RnnOptions& with_bidirectional(bool b) { bidirectional = b; return *this; }
  RnnOptions& with_proj_size(int64_t p) { proj_size = p; return *this; }
  RnnOptions& with_generator(Generator* g) { generator = g; return *this; }
};

struct RnnResult {
  Tensor output;  // [T, B, D * H_out] ([B, T, D * H_out] when batch_first; [T, D * H_out] unbatched)
  Tensor h_n;     // [L * D, B, H_out]  ([L * D, H_out] unbatched)
  Tensor c_n;     // [L * D, B, H] for LSTM; undefined for GRU and RNN
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

// ---- weight names and shapes (nn/rnn.h builds its parameters from these) ----------------------

enum class RnnWeightKind : uint8_t { w_ih, w_hh, b_ih, b_hh, w_hr };

// The sizes that determine every weight and buffer shape.
struct RnnConfig {
  RnnMode mode = RnnMode::lstm;
  int64_t num_layers = 1;
  int64_t num_directions = 1;
  int64_t input_size = 0;
  int64_t hidden_size = 0;
  int64_t proj_size = 0;
  bool bias = true;
  int64_t seq_len = 0;  // T (kernel interface only)
  int64_t batch = 0;    // B (kernel interface only)

  int64_t gates() const { return rnn_gate_count(mode); }
  int64_t out_size() const { return proj_size > 0 ? proj_size : hidden_size; }  // H_out
  int64_t layer_input_size(int64_t layer) const {
    return layer == 0 ? input_size : num_directions * out_size();
  }
  // Tensors per (layer, direction): 2, +2 with bias, +1 with a projection.
  int64_t weights_per_layer_direction() const { return 2 + (bias ? 2 : 0) + (proj_size > 0 ? 1 : 0); }
  int64_t num_weights() const { return num_layers * num_directions * weights_per_layer_direction(); }
  // Position of a weight in the flat list, or -1 when this configuration has none of that kind.
  int64_t weight_index(int64_t layer, int64_t direction, RnnWeightKind kind) const;
  // PyTorch's name ("weight_ih_l0", "bias_hh_l1_reverse", "weight_hr_l0") and shape of entry i.
  std::string weight_name(int64_t index) const;
  Shape weight_shape(int64_t index) const;
};

// ---- kernel interface -------------------------------------------------------------------------

// What the forward saves for the backward, in one byte buffer (`reserve`, uint8) laid out by
// rnn_reserve_layout: byte offsets (multiples of 256) of each region, -1 when absent. Per layer:
//   output   [T, B, D * H_out] dtype   the layer's output (layers below the last: the last
//                                      layer's is the op's output)
//   dropped  [T, B, D * H_out] dtype   that output after dropout (the next layer's input)
//   mask     [T, B, D * H_out] bool    dropout's keep mask
// Per (layer, direction):
//   gates    [T, B, S * H] dtype       LSTM: activated i, f, g, o (S = 4); GRU: r, z, n and
//                                      W_hn h + b_hn (S = 4); RNN: none (S = 0)
//   cells    [T + 1, B, H] cell dtype  LSTM cell states; slot 0 = c0 going forward (slot T for
//                                      the reverse direction), then the state after each step
//   states   [T + 1, B, H_out] dtype   hidden states, slots as for cells
//   proj_in  [T, B, H] dtype           LSTM with a projection: o * tanh(c) before W_hr
// Slots: the forward direction's step at time t reads slot t and writes slot t + 1; the reverse
// direction's reads slot t + 1 and writes slot t. A step at t >= lengths[b] copies the state
// through (so the last slot written holds the final state).
// The cell dtype is float64 for float64 and float32 otherwise (fp32 cell state for bfloat16).
struct RnnReserveLayout {
  struct LayerDirection {
    int64_t gates = -1, cells = -1, states = -1, proj_in = -1;
  };
  struct Layer {
    int64_t output = -1, dropped = -1, mask = -1;
    LayerDirection dir[2];
  };
  std::vector<Layer> layers;
  DType cell_dtype = DType::f32;
  int64_t saved_gates = 0;  // S above
  int64_t total_bytes = 0;
};
// dropout_active: the layers below the last are followed by dropout.
RnnReserveLayout rnn_reserve_layout(const RnnConfig& config, DType dtype, bool dropout_active);

// One recurrent-network computation, over all layers and directions.
//   forward   reads input, weights, h0, c0, lengths; writes output, h_n, c_n and reserve
//   backward  reads input, weights, h0, c0, lengths, reserve (unchanged), grad_output, grad_h_n,
//             grad_c_n (undefined = zero); writes the defined ones of grad_input, grad_h0,
//             grad_c0 and, when need_weight_grads, grad_weights (every entry)
// Written tensors are overwritten, never accumulated into. All tensors are dense (contiguous),
// time-major and of one dtype (lengths: int32; reserve: uint8) on one device.
struct RnnProblem {
  dispatch::Direction direction = dispatch::Direction::forward;  // forward or backward
  RnnConfig config;
  DType dtype = DType::f32;
  bool allow_tf32 = true;
  double dropout = 0;  // applied between layers (0 when not training)
  std::vector<RandomParams> dropout_random;  // one per layer > 0 when dropout > 0

  Tensor input;                 // [T, B, input_size]
  std::vector<Tensor> weights;  // the flat list
  Tensor h0;                    // [L * D, B, H_out] (zeros when the caller gave none)
  Tensor c0;                    // [L * D, B, H] (LSTM)
  Tensor lengths;               // int32 [B], or undefined: every sequence has length T
  Tensor reserve;               // uint8 [rnn_reserve_layout(...).total_bytes]

  Tensor output;  // [T, B, D * H_out]
  Tensor h_n;     // [L * D, B, H_out]
  Tensor c_n;     // [L * D, B, H] (LSTM)

  Tensor grad_output, grad_h_n, grad_c_n;
  Tensor grad_input, grad_h0, grad_c0;
  bool need_weight_grads = false;
  std::vector<Tensor> grad_weights;  // shapes of weights when need_weight_grads

  Device device() const { return input.device(); }
  bool dropout_active() const { return dropout > 0 && config.num_layers > 1; }
  RnnReserveLayout layout() const { return rnn_reserve_layout(config, dtype, dropout_active()); }
  // The same problem with every written tensor replaced by a fresh one (benchmarking).
  RnnProblem with_scratch_outputs() const;
};

dispatch::OpId rnn_op();
dispatch::AlgoSlot& rnn_slot(dispatch::Direction direction, DeviceType device_type);
// The algorithm-cache key: sizes, dtype, mode, layers, directions, projection, bias, lengths,
// dropout, which gradients are wanted, TF32, and the device.
dispatch::AlgoKey rnn_key(const RnnProblem& problem);
// Chooses through algo_cache() and runs; the op's forward and backward call this.
void rnn_run(const RnnProblem& problem);

}  // namespace ember
