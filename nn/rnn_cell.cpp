// RNNCell, LSTMCell and GRUCell (see rnn_cell.h).
#include "ember/nn/rnn_cell.h"

#include <cmath>
#include <ostream>

#include "ember/nn/init.h"

namespace ember::nn {

RNNCellImplBase::RNNCellImplBase(const char* type_name, int64_t gates, int64_t input_size,
                                 int64_t hidden_size, bool bias)
    : Module(type_name), input_size_(input_size), hidden_size_(hidden_size), bias_(bias) {
  EMBER_CHECK(input_size >= 1 && hidden_size >= 1, type_name,
              ": input_size and hidden_size must be >= 1, got ", input_size, " and ", hidden_size);
  weight_ih = register_parameter("weight_ih", empty({gates * hidden_size, input_size}));
  weight_hh = register_parameter("weight_hh", empty({gates * hidden_size, hidden_size}));
  if (bias) {
    bias_ih = register_parameter("bias_ih", empty({gates * hidden_size}));
    bias_hh = register_parameter("bias_hh", empty({gates * hidden_size}));
  }
  reset_parameters();
}

void RNNCellImplBase::reset_parameters() {
  const double bound = 1.0 / std::sqrt(double(hidden_size_));
  for (Tensor* w : {&weight_ih, &weight_hh, &bias_ih, &bias_hh})
    if (w->defined()) init::uniform_(*w, -bound, bound);
}

void RNNCellImplBase::pretty_print(std::ostream& os) const {
  os << type_name() << "(" << input_size_ << ", " << hidden_size_;
  if (!bias_) os << ", bias=false";
  os << ")";
}

Tensor RNNCellImplBase::batched_input(const Tensor& input, bool& unbatched) const {
  EMBER_CHECK(input.defined() && (input.dim() == 1 || input.dim() == 2), type_name(),
              ": expected input [batch, ", input_size_, "] or [", input_size_,
              "] (unbatched), got ",
              input.defined() ? input.shape_str() : std::string("undefined"));
  EMBER_CHECK(input.size(-1) == input_size_, type_name(), ": input ", input.shape_str(), " has ",
              input.size(-1), " features, expected input_size = ", input_size_);
  unbatched = input.dim() == 1;
  return unbatched ? input.unsqueeze(0) : input;
}

Tensor RNNCellImplBase::batched_state(const char* name, const Tensor& state, const Tensor& input,
                                      bool unbatched) const {
  const int64_t batch = input.size(0);
  if (!state.defined())
    return zeros({batch, hidden_size_}, TensorOptions(input.dtype()).with_device(input.device()));
  const Shape want = unbatched ? Shape{hidden_size_} : Shape{batch, hidden_size_};
  EMBER_CHECK(state.sizes() == want, type_name(), ": ", name, " ", state.shape_str(), " must be ",
              shape_str(want), " for input ",
              unbatched ? input.squeeze(0).shape_str() : input.shape_str());
  return unbatched ? state.unsqueeze(0) : state;
}

RNNCellImpl::RNNCellImpl(const RNNCellOptions& o)
    : RNNCellImplBase("RNNCell", 1, o.input_size(), o.hidden_size(), o.bias()), options(o) {}

Tensor RNNCellImpl::forward(const Tensor& input0, const Tensor& hx0) {
  bool unbatched = false;
  const Tensor input = batched_input(input0, unbatched);
  const Tensor hx = batched_state("hx", hx0, input, unbatched);
  Tensor pre = linear(input, weight_ih, bias_ih) + linear(hx, weight_hh, bias_hh);
  Tensor h = options.nonlinearity() == RNNNonlinearity::relu ? relu(pre) : tanh(pre);
  return unbatched ? h.squeeze(0) : h;
}

void RNNCellImpl::pretty_print(std::ostream& os) const {
  os << "RNNCell(" << input_size_ << ", " << hidden_size_;
  if (!bias_) os << ", bias=false";
  if (options.nonlinearity() == RNNNonlinearity::relu) os << ", nonlinearity='relu'";
  os << ")";
}

LSTMCellImpl::LSTMCellImpl(const LSTMCellOptions& o)
    : RNNCellImplBase("LSTMCell", 4, o.input_size(), o.hidden_size(), o.bias()), options(o) {}

std::tuple<Tensor, Tensor> LSTMCellImpl::forward(
    const Tensor& input0, const std::optional<std::tuple<Tensor, Tensor>>& hx) {
  bool unbatched = false;
  const Tensor input = batched_input(input0, unbatched);
  const Tensor h = batched_state("h", hx ? std::get<0>(*hx) : Tensor(), input, unbatched);
  const Tensor c = batched_state("c", hx ? std::get<1>(*hx) : Tensor(), input, unbatched);
  const std::vector<Tensor> g =
      (linear(input, weight_ih, bias_ih) + linear(h, weight_hh, bias_hh)).chunk(4, 1);
  Tensor c_next = sigmoid(g[1]) * c + sigmoid(g[0]) * tanh(g[2]);
  Tensor h_next = sigmoid(g[3]) * tanh(c_next);
  if (unbatched) return {h_next.squeeze(0), c_next.squeeze(0)};
  return {h_next, c_next};
}

GRUCellImpl::GRUCellImpl(const GRUCellOptions& o)
    : RNNCellImplBase("GRUCell", 3, o.input_size(), o.hidden_size(), o.bias()), options(o) {}

Tensor GRUCellImpl::forward(const Tensor& input0, const Tensor& hx0) {
  bool unbatched = false;
  const Tensor input = batched_input(input0, unbatched);
  const Tensor hx = batched_state("hx", hx0, input, unbatched);
  const std::vector<Tensor> gi = linear(input, weight_ih, bias_ih).chunk(3, 1);
  const std::vector<Tensor> gh = linear(hx, weight_hh, bias_hh).chunk(3, 1);
  Tensor r = sigmoid(gi[0] + gh[0]);
  Tensor z = sigmoid(gi[1] + gh[1]);
  Tensor n = tanh(gi[2] + r * gh[2]);
  Tensor h = (1.0 - z) * n + z * hx;
  return unbatched ? h.squeeze(0) : h;
}

}  // namespace ember::nn
