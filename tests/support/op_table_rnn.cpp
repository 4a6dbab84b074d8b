// Rows of the shared gradcheck / CUDA parity table (support/op_table.h) for the recurrent ops of
// ops/rnn.h: LSTM (with h0/c0, with a projection, two bidirectional layers), GRU and the tanh /
// relu RNNs, one with per-sequence lengths. Each row's output is the op's output, h_n and c_n
// flattened and concatenated, so every gradient path is checked. The rows run in full fp32 (TF32
// off for the call): the parity suite's fp32 tolerance is tighter than TF32 rounding.
// op_cases_rnn() is meant to be chained into op_cases(); tests/cpu/test_rnn.cpp also runs these
// rows directly.
#include "ember/ops/rnn.h"
#include "support/op_table.h"

namespace ember::testing {

const std::vector<OpCase>& op_cases_rnn();

namespace {
using V = const std::vector<Tensor>&;

// TF32 off for the scope; the op records the setting for its backward.
class StrictFp32 {
 public:
  StrictFp32() : saved_(rnn_allow_tf32()) { set_rnn_allow_tf32(false); }
  ~StrictFp32() { set_rnn_allow_tf32(saved_); }
  StrictFp32(const StrictFp32&) = delete;
  StrictFp32& operator=(const StrictFp32&) = delete;

 private:
  bool saved_;
};

struct RnnRow {
  RnnMode mode;
  int64_t layers, hidden, proj;
  bool bidirectional;
  bool with_h0;
  bool lengths;
};

RnnConfig config_of(const RnnRow& r, int64_t input_size) {
  RnnConfig c;
  c.mode = r.mode;
  c.num_layers = r.layers;
  c.num_directions = r.bidirectional ? 2 : 1;
  c.input_size = input_size;
  c.hidden_size = r.hidden;
  c.proj_size = r.proj;
  return c;
}

constexpr int64_t kT = 3, kB = 2, kI = 3;

// Input shapes: x [T, B, I], then h0 (and c0 for LSTM) when the row has them, then the weights.
std::vector<Shape> shapes_of(const RnnRow& r) {
  const RnnConfig c = config_of(r, kI);
  std::vector<Shape> shapes = {{kT, kB, kI}};
  const int64_t ld = c.num_layers * c.num_directions;
  if (r.with_h0) {
    shapes.push_back({ld, kB, c.out_size()});
    if (r.mode == RnnMode::lstm) shapes.push_back({ld, kB, c.hidden_size});
  }
  for (int64_t i = 0; i < c.num_weights(); ++i) shapes.push_back(c.weight_shape(i));
  return shapes;
}

OpCase row(const char* name, RnnRow r) {
  OpCase oc;
  oc.name = name;
  oc.shapes = shapes_of(r);
  oc.fn = [r](V x) {
    const size_t states = r.with_h0 ? (r.mode == RnnMode::lstm ? 2 : 1) : 0;
    const std::vector<Tensor> weights(x.begin() + 1 + long(states), x.end());
    Tensor h0 = states >= 1 ? x[1] : Tensor(), c0 = states == 2 ? x[2] : Tensor();
    Tensor lengths;
    if (r.lengths) lengths = from_vector({2, 3}, {kB}, TensorOptions(DType::i64));
    RnnOptions o;
    o.mode = r.mode;
    o.num_layers = r.layers;
    o.bidirectional = r.bidirectional;
    o.proj_size = r.proj;
    StrictFp32 strict;
    RnnResult res = rnn(x[0], weights, h0, c0, lengths, o);
    std::vector<Tensor> parts = {res.output.flatten(), res.h_n.flatten()};
    if (res.c_n.defined()) parts.push_back(res.c_n.flatten());
    return cat(parts, 0);
  };
  oc.gradgradcheck = false;  // fused-kernel (as cuDNN's RNN, no double backward)
  return oc;
}
}  // namespace

const std::vector<OpCase>& op_cases_rnn() {
  static const std::vector<OpCase> cases = {
      row("lstm", {RnnMode::lstm, 1, 4, 0, false, true, false}),
      row("lstm_proj", {RnnMode::lstm, 1, 4, 2, false, true, false}),
      row("lstm_2layer_bidirectional", {RnnMode::lstm, 2, 3, 0, true, false, false}),
      row("gru_lengths", {RnnMode::gru, 1, 3, 0, false, true, true}),
      row("gru_bidirectional", {RnnMode::gru, 1, 3, 0, true, true, false}),
      row("rnn_tanh_2layer", {RnnMode::rnn_tanh, 2, 3, 0, false, true, false}),
      row("rnn_relu", {RnnMode::rnn_relu, 1, 4, 0, false, true, false}),
  };
  return cases;
}

}  // namespace ember::testing
