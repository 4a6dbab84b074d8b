// LSTM, GRU and RNN layers (see rnn.h).
#include "ember/nn/rnn.h"

#include <cmath>
#include <ostream>
#include <sstream>

#include "ember/nn/amp.h"
#include "ember/nn/init.h"

namespace ember::nn {

RNNImplBase::RNNImplBase(const char* type_name, RnnMode mode, int64_t input_size,
                         int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first,
                         double dropout, bool bidirectional, int64_t proj_size)
    : Module(type_name), batch_first_(batch_first), dropout_(dropout) {
  EMBER_CHECK(input_size >= 1 && hidden_size >= 1, type_name,
              ": input_size and hidden_size must be >= 1, got ", input_size, " and ", hidden_size);
  EMBER_CHECK(num_layers >= 1, type_name, ": num_layers must be >= 1, got ", num_layers);
  EMBER_CHECK(dropout >= 0 && dropout <= 1, type_name, ": dropout must be in [0, 1], got ",
              dropout);
  EMBER_CHECK(proj_size >= 0 && proj_size < hidden_size, type_name,
              ": proj_size must be in [0, hidden_size = ", hidden_size, "), got ", proj_size);
  config_.mode = mode;
  config_.num_layers = num_layers;
  config_.num_directions = bidirectional ? 2 : 1;
  config_.input_size = input_size;
  config_.hidden_size = hidden_size;
  config_.proj_size = proj_size;
  config_.bias = bias;
  for (int64_t i = 0; i < config_.num_weights(); ++i)
    flat_weights_.push_back(
        register_parameter(config_.weight_name(i), empty(config_.weight_shape(i))));
  reset_parameters();
}

void RNNImplBase::reset_parameters() {
  const double bound = 1.0 / std::sqrt(double(config_.hidden_size));
  for (Tensor& w : flat_weights_) init::uniform_(w, -bound, bound);
}

RnnResult RNNImplBase::run(const Tensor& input, const Tensor& h0, const Tensor& c0,
                           const Tensor& lengths) {
  std::vector<Tensor> tensors = {input, h0, c0};
  tensors.insert(tensors.end(), flat_weights_.begin(), flat_weights_.end());
  if (autocast_enabled()) tensors = autocast_inputs(tensors, OpClass::low_precision);
  const std::vector<Tensor> weights(tensors.begin() + 3, tensors.end());
  RnnOptions o;
  o.mode = config_.mode;
  o.num_layers = config_.num_layers;
  o.bias = config_.bias;
  o.batch_first = batch_first_;
  o.dropout = dropout_;
  o.training = is_training();
  o.bidirectional = config_.num_directions == 2;
  o.proj_size = config_.proj_size;
  return rnn(tensors[0], weights, tensors[1], tensors[2], lengths, o);
}

void RNNImplBase::pretty_print(std::ostream& os) const {
  // PyTorch's RNNBase.extra_repr: only the options that differ from the defaults.
  os << type_name() << "(" << config_.input_size << ", " << config_.hidden_size;
  if (config_.proj_size != 0) os << ", proj_size=" << config_.proj_size;
  if (config_.num_layers != 1) os << ", num_layers=" << config_.num_layers;
  if (!config_.bias) os << ", bias=false";
  if (batch_first_) os << ", batch_first=true";
  if (dropout_ != 0) os << ", dropout=" << detail::float_str(dropout_);
  if (config_.num_directions == 2) os << ", bidirectional=true";
  os << ")";
}

LSTMImpl::LSTMImpl(const LSTMOptions& o)
    : RNNImplBase("LSTM", RnnMode::lstm, o.input_size(), o.hidden_size(), o.num_layers(), o.bias(),
                  o.batch_first(), o.dropout(), o.bidirectional(), o.proj_size()),
      options(o) {}

RnnResult LSTMImpl::forward(const Tensor& input, const Tensor& h0, const Tensor& c0,
                            const Tensor& lengths) {
  return run(input, h0, c0, lengths);
}

GRUImpl::GRUImpl(const GRUOptions& o)
    : RNNImplBase("GRU", RnnMode::gru, o.input_size(), o.hidden_size(), o.num_layers(), o.bias(),
                  o.batch_first(), o.dropout(), o.bidirectional(), 0),
      options(o) {}

RnnResult GRUImpl::forward(const Tensor& input, const Tensor& h0, const Tensor& lengths) {
  return run(input, h0, Tensor(), lengths);
}

RNNImpl::RNNImpl(const RNNOptions& o)
    : RNNImplBase("RNN",
                  o.nonlinearity() == RNNNonlinearity::relu ? RnnMode::rnn_relu : RnnMode::rnn_tanh,
                  o.input_size(), o.hidden_size(), o.num_layers(), o.bias(), o.batch_first(),
                  o.dropout(), o.bidirectional(), 0),
      options(o) {}

RnnResult RNNImpl::forward(const Tensor& input, const Tensor& h0, const Tensor& lengths) {
  return run(input, h0, Tensor(), lengths);
}

void RNNImpl::pretty_print(std::ostream& os) const {
  std::ostringstream base;
  RNNImplBase::pretty_print(base);
  std::string s = base.str();
  if (options.nonlinearity() == RNNNonlinearity::relu)
    s.insert(s.size() - 1, ", nonlinearity='relu'");
  os << s;
}

}  // namespace ember::nn
