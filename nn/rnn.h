// Recurrent layers, as torch.nn.LSTM / GRU / RNN: options builders
// (`LSTMOptions(256, 512).num_layers(2).dropout(0.1)`), PyTorch's parameters and initialization,
// printing, on the ops of ops/rnn.h.
//
// Parameters (registered in this order, so state_dict() lists them as PyTorch does):
//   for each layer l, for each direction (suffix "" then "_reverse" when bidirectional):
//     weight_ih_l{l}{suffix}  [G * hidden_size, in_l]   in_0 = input_size, in_l = D * H_out
//     weight_hh_l{l}{suffix}  [G * hidden_size, H_out]
//     bias_ih_l{l}{suffix}    [G * hidden_size]         (when bias)
//     bias_hh_l{l}{suffix}    [G * hidden_size]         (when bias)
//     weight_hr_l{l}{suffix}  [proj_size, hidden_size]  (LSTM with proj_size > 0)
// with the gate blocks stacked along dim 0 in PyTorch's order: i, f, g, o (LSTM, G = 4); r, z, n
// (GRU, G = 3); one block for RNN. H_out = proj_size when it is > 0, else hidden_size. Names,
// shapes, gate order and values are exactly PyTorch's, so a state_dict (or a safetensors file
// written by nn/checkpoint.h) converts 1:1 both ways: torch's `model.load_state_dict(
// safetensors.torch.load_file(path))` reads Ember's file, and Ember's load_state_dict reads
// PyTorch's, with no renaming or reshaping. Every parameter starts ~ U(-1/sqrt(hidden_size),
// 1/sqrt(hidden_size)), PyTorch's default.
//
// Under autocast (nn/amp.h) the input, states and weights run in the low precision (the op keeps
// the LSTM cell state and all accumulation in float32).
#pragma once
#include <vector>

#include "ember/nn/module.h"
#include "ember/nn/options.h"
#include "ember/ops/rnn.h"

namespace ember::nn {

// The options of LSTM, as torch.nn.LSTM's arguments (with their defaults).
struct LSTMOptions {
  // The required sizes; the rest default as PyTorch's.
  LSTMOptions(int64_t input_size, int64_t hidden_size)
      : input_size_(input_size), hidden_size_(hidden_size) {}
  EMBER_ARG(int64_t, input_size);          // features of each input step
  EMBER_ARG(int64_t, hidden_size);         // features of the hidden state h
  EMBER_ARG(int64_t, num_layers) = 1;      // stacked layers, each reading the previous one's output
  EMBER_ARG(bool, bias) = true;            // whether the layers have bias_ih and bias_hh
  EMBER_ARG(bool, batch_first) = false;    // input and output [B, T, *] instead of [T, B, *]
  EMBER_ARG(double, dropout) = 0;          // after every layer but the last, in training
  EMBER_ARG(bool, bidirectional) = false;  // also run each layer backwards (D = 2)
  // > 0: h is projected to proj_size features by weight_hr (H_out = proj_size); < hidden_size.
  EMBER_ARG(int64_t, proj_size) = 0;
};

// The options of GRU, as torch.nn.GRU's arguments (with their defaults).
struct GRUOptions {
  // The required sizes; the rest default as PyTorch's.
  GRUOptions(int64_t input_size, int64_t hidden_size)
      : input_size_(input_size), hidden_size_(hidden_size) {}
  EMBER_ARG(int64_t, input_size);          // features of each input step
  EMBER_ARG(int64_t, hidden_size);         // features of the hidden state h
  EMBER_ARG(int64_t, num_layers) = 1;      // stacked layers, each reading the previous one's output
  EMBER_ARG(bool, bias) = true;            // whether the layers have bias_ih and bias_hh
  EMBER_ARG(bool, batch_first) = false;    // input and output [B, T, *] instead of [T, B, *]
  EMBER_ARG(double, dropout) = 0;          // after every layer but the last, in training; in [0, 1]
  EMBER_ARG(bool, bidirectional) = false;  // also run each layer backwards (D = 2)
};

// The activation of RNN's cell, as torch.nn.RNN's nonlinearity='tanh' / 'relu'.
enum class RNNNonlinearity { tanh, relu };

// The options of RNN, as torch.nn.RNN's arguments (with their defaults).
struct RNNOptions {
  // The required sizes; the rest default as PyTorch's.
  RNNOptions(int64_t input_size, int64_t hidden_size)
      : input_size_(input_size), hidden_size_(hidden_size) {}
  EMBER_ARG(int64_t, input_size);      // features of each input step
  EMBER_ARG(int64_t, hidden_size);     // features of the hidden state h
  EMBER_ARG(int64_t, num_layers) = 1;  // stacked layers, each reading the previous one's output
  EMBER_ARG(RNNNonlinearity, nonlinearity) = RNNNonlinearity::tanh;  // the cell's activation
  EMBER_ARG(bool, bias) = true;            // whether the layers have bias_ih and bias_hh
  EMBER_ARG(bool, batch_first) = false;    // input and output [B, T, *] instead of [T, B, *]
  EMBER_ARG(double, dropout) = 0;          // after every layer but the last, in training; in [0, 1]
  EMBER_ARG(bool, bidirectional) = false;  // also run each layer backwards (D = 2)
};

// What every recurrent layer shares: the parameters, their initialization and printing.
class RNNImplBase : public Module {
 public:
  // The parameters in the flat order the op takes (the order above).
  const std::vector<Tensor>& flat_weights() const { return flat_weights_; }
  // The sizes that determine the parameter shapes.
  const RnnConfig& config() const { return config_; }
  // Re-draws every parameter from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)).
  void reset_parameters();
  void pretty_print(std::ostream& os) const override;

 protected:
  // Checks the sizes (positive; 0 <= proj_size < hidden_size, LSTM only; dropout in [0, 1]),
  // registers the parameters listed in the file comment and initializes them.
  RNNImplBase(const char* type_name, RnnMode mode, int64_t input_size, int64_t hidden_size,
              int64_t num_layers, bool bias, bool batch_first, double dropout, bool bidirectional,
              int64_t proj_size);
  // The op on this layer's parameters (autocast applied); c0 only for LSTM.
  RnnResult run(const Tensor& input, const Tensor& h0, const Tensor& c0, const Tensor& lengths);

  RnnConfig config_;                  // see config()
  bool batch_first_ = false;          // the options' batch_first
  double dropout_ = 0;                // the options' dropout
  std::vector<Tensor> flat_weights_;  // see flat_weights()
};

// input [T, B, input_size] ([B, T, input_size] when batch_first; [T, input_size] unbatched),
// h0 [L * D, B, H_out] and c0 [L * D, B, hidden_size] (zeros when undefined), lengths [B]
// (optional, see ops/rnn.h) -> {output [T, B, D * H_out], h_n, c_n}.
class LSTMImpl : public RNNImplBase {
 public:
  // clone() builds a fresh LSTMImpl from options, then copies the parameters.
  EMBER_CLONEABLE(LSTMImpl);
  // From options, or from (input_size, hidden_size) with PyTorch's other defaults (one
  // unidirectional layer with biases, sequence-first, no dropout).
  explicit LSTMImpl(const LSTMOptions& options);
  LSTMImpl(int64_t input_size, int64_t hidden_size)
      : LSTMImpl(LSTMOptions(input_size, hidden_size)) {}
  // The shapes of the class comment; errors on a size that does not match the options.
  RnnResult forward(const Tensor& input, const Tensor& h0 = {}, const Tensor& c0 = {},
                    const Tensor& lengths = {});
  LSTMOptions options;  // the options it was built with
};
EMBER_MODULE(LSTM);

// As LSTM without a cell state: {output, h_n} (c_n undefined).
class GRUImpl : public RNNImplBase {
 public:
  // clone() builds a fresh GRUImpl from options, then copies the parameters.
  EMBER_CLONEABLE(GRUImpl);
  // From options, or from (input_size, hidden_size) with PyTorch's other defaults (one
  // unidirectional layer with biases, sequence-first, no dropout).
  explicit GRUImpl(const GRUOptions& options);
  GRUImpl(int64_t input_size, int64_t hidden_size) : GRUImpl(GRUOptions(input_size, hidden_size)) {}
  // input as LSTM's, h0 [L * D, B, hidden_size] (zeros when undefined), lengths [B] (optional)
  // -> {output [T, B, D * hidden_size], h_n [L * D, B, hidden_size], undefined}.
  RnnResult forward(const Tensor& input, const Tensor& h0 = {}, const Tensor& lengths = {});
  GRUOptions options;  // the options it was built with
};
EMBER_MODULE(GRU);

// Elman RNN with tanh or relu: {output, h_n} (c_n undefined).
class RNNImpl : public RNNImplBase {
 public:
  // clone() builds a fresh RNNImpl from options, then copies the parameters.
  EMBER_CLONEABLE(RNNImpl);
  // From options, or from (input_size, hidden_size) with PyTorch's other defaults (one
  // unidirectional layer with biases, sequence-first, no dropout).
  explicit RNNImpl(const RNNOptions& options);
  RNNImpl(int64_t input_size, int64_t hidden_size) : RNNImpl(RNNOptions(input_size, hidden_size)) {}
  // Shapes as GRU's forward: {output [T, B, D * hidden_size], h_n, undefined}.
  RnnResult forward(const Tensor& input, const Tensor& h0 = {}, const Tensor& lengths = {});
  void pretty_print(std::ostream& os) const override;
  RNNOptions options;  // the options it was built with
};
EMBER_MODULE(RNN);

}  // namespace ember::nn
