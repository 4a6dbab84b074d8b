// The recurrent-network kernel interface's definitions (kernel_interface/rnn.h): mode names and
// gate counts, the flat weight list's names, shapes and positions, the reserve layout, and the
// glue to the algorithm cache (RnnProblem's scratch outputs, op id, slots and key).
#include "ember/kernel_interface/rnn.h"

#include <algorithm>

namespace ember {

using dispatch::Direction;

const char* rnn_mode_name(RnnMode mode) {
  switch (mode) {
    case RnnMode::lstm:
      return "lstm";
    case RnnMode::gru:
      return "gru";
    case RnnMode::rnn_tanh:
      return "rnn_tanh";
    case RnnMode::rnn_relu:
      return "rnn_relu";
  }
  return "?";
}

int64_t rnn_gate_count(RnnMode mode) {
  switch (mode) {
    case RnnMode::lstm:
      return 4;
    case RnnMode::gru:
      return 3;
    default:
      return 1;
  }
}

// ---- weight names and shapes --------------------------------------------------------------------

int64_t RnnConfig::weight_index(int64_t layer, int64_t direction, RnnWeightKind kind) const {
  int64_t within = 0;
  switch (kind) {
    case RnnWeightKind::w_ih:
      within = 0;
      break;
    case RnnWeightKind::w_hh:
      within = 1;
      break;
    case RnnWeightKind::b_ih:
      if (!bias) return -1;
      within = 2;
      break;
    case RnnWeightKind::b_hh:
      if (!bias) return -1;
      within = 3;
      break;
    case RnnWeightKind::w_hr:
      if (proj_size <= 0) return -1;
      within = bias ? 4 : 2;
      break;
  }
  return (layer * num_directions + direction) * weights_per_layer_direction() + within;
}

namespace {
// Which (layer, direction, kind) entry `index` of the flat list is.
struct WeightSlot {
  int64_t layer, direction;
  RnnWeightKind kind;
};
WeightSlot weight_slot(const RnnConfig& c, int64_t index) {
  const int64_t per = c.weights_per_layer_direction();
  const int64_t ld = index / per, within = index % per;
  RnnWeightKind kind = RnnWeightKind::w_ih;
  if (within == 1)
    kind = RnnWeightKind::w_hh;
  else if (within == 2)
    kind = c.bias ? RnnWeightKind::b_ih : RnnWeightKind::w_hr;
  else if (within == 3)
    kind = RnnWeightKind::b_hh;
  else if (within == 4)
    kind = RnnWeightKind::w_hr;
  return {ld / c.num_directions, ld % c.num_directions, kind};
}
}  // namespace

std::string RnnConfig::weight_name(int64_t index) const {
  const WeightSlot s = weight_slot(*this, index);
  const char* base = "";
  switch (s.kind) {
    case RnnWeightKind::w_ih:
      base = "weight_ih";
      break;
    case RnnWeightKind::w_hh:
      base = "weight_hh";
      break;
    case RnnWeightKind::b_ih:
      base = "bias_ih";
      break;
    case RnnWeightKind::b_hh:
      base = "bias_hh";
      break;
    case RnnWeightKind::w_hr:
      base = "weight_hr";
      break;
  }
  return detail::concat(base, "_l", s.layer, s.direction == 1 ? "_reverse" : "");
}

Shape RnnConfig::weight_shape(int64_t index) const {
  const WeightSlot s = weight_slot(*this, index);
  const int64_t rows = gates() * hidden_size;
  switch (s.kind) {
    case RnnWeightKind::w_ih:
      return {rows, layer_input_size(s.layer)};
    case RnnWeightKind::w_hh:
      return {rows, out_size()};
    case RnnWeightKind::b_ih:
    case RnnWeightKind::b_hh:
      return {rows};
    case RnnWeightKind::w_hr:
      return {proj_size, hidden_size};
  }
  return {};
}

// ---- reserve layout -----------------------------------------------------------------------------

RnnReserveLayout rnn_reserve_layout(const RnnConfig& c, DType dtype, bool dropout_active) {
  RnnReserveLayout r;
  r.cell_dtype = dtype == DType::f64 ? DType::f64 : DType::f32;
  r.saved_gates = c.mode == RnnMode::lstm || c.mode == RnnMode::gru ? 4 : 0;
  const int64_t T = c.seq_len, B = c.batch, H = c.hidden_size, Ho = c.out_size();
  const int64_t D = c.num_directions;
  const int64_t es = int64_t(element_size(dtype)), cs = int64_t(element_size(r.cell_dtype));
  int64_t at = 0;
  auto region = [&at](int64_t bytes) {
    const int64_t offset = at;
    at += (bytes + 255) / 256 * 256;
    return offset;
  };
  r.layers.resize(size_t(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    RnnReserveLayout::Layer& layer = r.layers[size_t(l)];
    if (l + 1 < c.num_layers) {
      layer.output = region(T * B * D * Ho * es);
      if (dropout_active) {
        layer.dropped = region(T * B * D * Ho * es);
        layer.mask = region(T * B * D * Ho);
      }
    }
    for (int64_t d = 0; d < D; ++d) {
      RnnReserveLayout::LayerDirection& ld = layer.dir[d];
      if (r.saved_gates > 0) ld.gates = region(T * B * r.saved_gates * H * es);
      if (c.mode == RnnMode::lstm) ld.cells = region((T + 1) * B * H * cs);
      ld.states = region((T + 1) * B * Ho * es);
      if (c.proj_size > 0) ld.proj_in = region(T * B * H * es);
    }
  }
  r.total_bytes = std::max<int64_t>(at, 256);
  return r;
}

// ---- the problem and its slots ------------------------------------------------------------------

RnnProblem RnnProblem::with_scratch_outputs() const {
  RnnProblem s = *this;
  auto fresh = [](Tensor& t) {
    if (t.defined()) t = empty_like(t);
  };
  if (direction == Direction::forward) {
    fresh(s.output);
    fresh(s.h_n);
    fresh(s.c_n);
    fresh(s.reserve);
  } else {
    fresh(s.grad_input);
    fresh(s.grad_h0);
    fresh(s.grad_c0);
    for (Tensor& g : s.grad_weights) fresh(g);
  }
  return s;
}

dispatch::OpId rnn_op() {
  static const dispatch::OpId id = dispatch::op_id("rnn");
  return id;
}

dispatch::AlgoSlot& rnn_slot(Direction direction, DeviceType device_type) {
  return dispatch::algo_slot(rnn_op(), direction, device_type);
}

dispatch::AlgoKey rnn_key(const RnnProblem& p) {
  using Operand = dispatch::AlgoKey::Operand;
  const RnnConfig& c = p.config;
  dispatch::AlgoKey key = dispatch::make_algo_key(rnn_op(), p.direction, p.device());
  key.describe(Operand::input, p.input);  // [T, B, input_size]
  const int64_t weight_sizes[5] = {c.num_layers, c.num_directions, c.hidden_size, c.proj_size,
                                   c.gates()};
  const int64_t output_sizes[3] = {c.seq_len, c.batch, c.num_directions * c.out_size()};
  for (int i = 0; i < 5; ++i) key.assign(key.weight_sizes[i], weight_sizes[i]);
  for (int i = 0; i < 3; ++i) key.assign(key.output_sizes[i], output_sizes[i]);
  key.weight_dtype = key.output_dtype = uint8_t(p.dtype);
  key.rank = 5;
  key.extra[0] = int32_t(c.mode);
  key.extra[1] = c.bias ? 1 : 0;
  key.extra[2] = (p.lengths.defined() ? 1 : 0) | (p.dropout_active() ? 2 : 0);
  if (p.direction != Direction::forward)
    key.extra[3] = (p.grad_input.defined() ? 1 : 0) | (p.need_weight_grads ? 2 : 0) |
                   (p.grad_h0.defined() ? 4 : 0) | (p.grad_c0.defined() ? 8 : 0);
  key.allow_tf32 = p.allow_tf32;
  return key;
}

void rnn_run(const RnnProblem& p) {
  dispatch::algo_cache().run(rnn_slot(p.direction, p.device().type), rnn_key(p), p);
}

}  // namespace ember
