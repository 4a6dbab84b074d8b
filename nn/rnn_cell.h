// Recurrent cells, as torch.nn.RNNCell / LSTMCell / GRUCell: one time step on the ops of
// ops/ops.h (linear, sigmoid, tanh, relu), so forward and backward run on every device and dtype
// the ops do. Parameters, registered in PyTorch's order and with PyTorch's names and shapes (a
// state_dict converts 1:1 both ways):
//   weight_ih [G * hidden_size, input_size], weight_hh [G * hidden_size, hidden_size],
//   bias_ih [G * hidden_size], bias_hh [G * hidden_size] (when bias)
// with the gate blocks stacked in PyTorch's order: i, f, g, o (LSTMCell, G = 4); r, z, n
// (GRUCell, G = 3); one block for RNNCell. Every parameter starts ~ U(-1/sqrt(hidden_size),
// 1/sqrt(hidden_size)), PyTorch's default.
#pragma once
#include <optional>
#include <tuple>

#include "ember/nn/module.h"
#include "ember/nn/options.h"
#include "ember/nn/rnn.h"

namespace ember::nn {

// The options of RNNCell, as torch.nn.RNNCell's arguments (with their defaults).
struct RNNCellOptions {
  RNNCellOptions(int64_t input_size, int64_t hidden_size)
      : input_size_(input_size), hidden_size_(hidden_size) {}
  EMBER_ARG(int64_t, input_size);   // features of the input
  EMBER_ARG(int64_t, hidden_size);  // features of the hidden state h
  EMBER_ARG(bool, bias) = true;     // whether the cell has bias_ih and bias_hh
  EMBER_ARG(RNNNonlinearity, nonlinearity) = RNNNonlinearity::tanh;  // the cell's activation
};
// The options of LSTMCell, as torch.nn.LSTMCell's arguments (with their defaults).
struct LSTMCellOptions {
  LSTMCellOptions(int64_t input_size, int64_t hidden_size)
      : input_size_(input_size), hidden_size_(hidden_size) {}
  EMBER_ARG(int64_t, input_size);   // features of the input
  EMBER_ARG(int64_t, hidden_size);  // features of the states h and c
  EMBER_ARG(bool, bias) = true;     // whether the cell has bias_ih and bias_hh
};
// The options of GRUCell, as torch.nn.GRUCell's arguments (with their defaults).
struct GRUCellOptions {
  GRUCellOptions(int64_t input_size, int64_t hidden_size)
      : input_size_(input_size), hidden_size_(hidden_size) {}
  EMBER_ARG(int64_t, input_size);   // features of the input
  EMBER_ARG(int64_t, hidden_size);  // features of the hidden state h
  EMBER_ARG(bool, bias) = true;     // whether the cell has bias_ih and bias_hh
};

// What the cells share: the four parameters, their initialization, the input checks, printing.
class RNNCellImplBase : public Module {
 public:
  // Re-draws every parameter from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)).
  void reset_parameters();
  void pretty_print(std::ostream& os) const override;

  Tensor weight_ih;  // [G * hidden_size, input_size]
  Tensor weight_hh;  // [G * hidden_size, hidden_size]
  Tensor bias_ih;    // [G * hidden_size], undefined without bias
  Tensor bias_hh;    // [G * hidden_size], undefined without bias

 protected:
  // Checks the sizes (>= 1), registers the parameters and initializes them.
  RNNCellImplBase(const char* type_name, int64_t gates, int64_t input_size, int64_t hidden_size,
                  bool bias);
  // input [B, input_size] or [input_size] -> [B, input_size] (batched), and a state given for it
  // ([B, hidden_size] or [hidden_size], undefined: zeros) -> [B, hidden_size]; errors name the
  // cell, the argument and the shapes.
  Tensor batched_input(const Tensor& input, bool& unbatched) const;
  Tensor batched_state(const char* name, const Tensor& state, const Tensor& input,
                       bool unbatched) const;
  int64_t input_size_;   // the options' input_size
  int64_t hidden_size_;  // the options' hidden_size
  bool bias_;            // whether bias_ih and bias_hh exist
};

// input [B, input_size] (or [input_size] unbatched), hx [B, hidden_size] (zeros when undefined)
// -> h' = act(input W_ih^T + b_ih + hx W_hh^T + b_hh), [B, hidden_size] (or [hidden_size]).
class RNNCellImpl : public RNNCellImplBase {
 public:
  // clone() builds a fresh RNNCellImpl from options, then copies the parameters.
  EMBER_CLONEABLE(RNNCellImpl);
  explicit RNNCellImpl(const RNNCellOptions& options);
  RNNCellImpl(int64_t input_size, int64_t hidden_size)
      : RNNCellImpl(RNNCellOptions(input_size, hidden_size)) {}
  Tensor forward(const Tensor& input, const Tensor& hx = {});
  void pretty_print(std::ostream& os) const override;
  RNNCellOptions options;  // the options it was built with
};
EMBER_MODULE(RNNCell);

// input [B, input_size] (or [input_size]), hx = (h, c) each [B, hidden_size] (zeros when not
// given) -> (h', c') with i, f, g, o = chunks of input W_ih^T + b_ih + h W_hh^T + b_hh,
// c' = sigmoid(f) c + sigmoid(i) tanh(g), h' = sigmoid(o) tanh(c').
class LSTMCellImpl : public RNNCellImplBase {
 public:
  // clone() builds a fresh LSTMCellImpl from options, then copies the parameters.
  EMBER_CLONEABLE(LSTMCellImpl);
  explicit LSTMCellImpl(const LSTMCellOptions& options);
  LSTMCellImpl(int64_t input_size, int64_t hidden_size)
      : LSTMCellImpl(LSTMCellOptions(input_size, hidden_size)) {}
  std::tuple<Tensor, Tensor> forward(
      const Tensor& input, const std::optional<std::tuple<Tensor, Tensor>>& hx = std::nullopt);
  LSTMCellOptions options;  // the options it was built with
};
EMBER_MODULE(LSTMCell);

// input [B, input_size] (or [input_size]), hx [B, hidden_size] (zeros when undefined) -> h' =
// (1 - z) n + z hx with r, z = sigmoid of the first two gate blocks (input and hidden parts
// summed) and n = tanh(gi_n + r * gh_n), gi = input W_ih^T + b_ih, gh = hx W_hh^T + b_hh.
class GRUCellImpl : public RNNCellImplBase {
 public:
  // clone() builds a fresh GRUCellImpl from options, then copies the parameters.
  EMBER_CLONEABLE(GRUCellImpl);
  explicit GRUCellImpl(const GRUCellOptions& options);
  GRUCellImpl(int64_t input_size, int64_t hidden_size)
      : GRUCellImpl(GRUCellOptions(input_size, hidden_size)) {}
  Tensor forward(const Tensor& input, const Tensor& hx = {});
  GRUCellOptions options;  // the options it was built with
};
EMBER_MODULE(GRUCell);

}  // namespace ember::nn
