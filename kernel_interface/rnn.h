// The recurrent-network kernel interface: the cell modes, the flat weight list and its shapes
// (RnnConfig; nn/rnn.h builds its parameters from these), the reserve buffer the forward saves for
// the backward, and RnnProblem, one computation over all layers and directions, chosen among by
// the AlgoCache from the slots "rnn.forward" and "rnn.backward". The CPU reference registers in
// cpu_kernels/rnn.cpp, the CUDA algorithms (cuBLAS per step and a persistent kernel) in
// cuda_kernels/rnn/. Definitions in kernel_interface/rnn.cpp; the public ops are in ops/rnn.h,
// whose top comment gives the weight layout and the equations.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ember/dispatch/algo_cache.h"
#include "ember/kernel_interface/random.h"
#include "ember/tensor/tensor.h"

namespace ember {

enum class RnnMode : uint8_t { lstm, gru, rnn_tanh, rnn_relu };
const char* rnn_mode_name(RnnMode mode);  // "lstm", "gru", "rnn_tanh", "rnn_relu"
// Gates per hidden unit: 4 (LSTM), 3 (GRU), 1 (RNN).
int64_t rnn_gate_count(RnnMode mode);

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
  int64_t weights_per_layer_direction() const {
    return 2 + (bias ? 2 : 0) + (proj_size > 0 ? 1 : 0);
  }
  int64_t num_weights() const {
    return num_layers * num_directions * weights_per_layer_direction();
  }
  // Position of a weight in the flat list, or -1 when this configuration has none of that kind.
  int64_t weight_index(int64_t layer, int64_t direction, RnnWeightKind kind) const;
  // PyTorch's name ("weight_ih_l0", "bias_hh_l1_reverse", "weight_hr_l0") and shape of entry i.
  std::string weight_name(int64_t index) const;
  Shape weight_shape(int64_t index) const;
};

// ---- the reserve and the problem --------------------------------------------------------------

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
  double dropout = 0;                        // applied between layers (0 when not training)
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
