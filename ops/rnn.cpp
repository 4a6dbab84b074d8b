// lstm / gru / rnn_tanh / rnn_relu: argument checks, layouts (batch_first, unbatched input),
// lengths, dropout draws, and the autograd node that runs the backward algorithm. The glue to the
// algorithm cache (RnnProblem keys, slots, the reserve layout) is in kernel_interface/rnn.cpp.
#include "ember/ops/rnn.h"

#include <algorithm>
#include <atomic>

#include "ember/autograd/graph/grad_mode.h"
#include "ember/autograd/graph/node.h"
#include "ember/ops/ops.h"

namespace ember {

using dispatch::Direction;

namespace {
std::atomic<bool> g_rnn_allow_tf32{true};
}  // namespace

bool rnn_allow_tf32() { return g_rnn_allow_tf32.load(std::memory_order_relaxed); }
void set_rnn_allow_tf32(bool allow) { g_rnn_allow_tf32 = allow; }

// ---- the op
// ---------------------------------------------------------------------------------------

namespace {

const char* op_name(RnnMode mode) {
  switch (mode) {
    case RnnMode::lstm:
      return "lstm";
    case RnnMode::gru:
      return "gru";
    default:
      return "rnn";
  }
}

// Checks the weight list against the options and the input; returns the configuration (without
// seq_len and batch).
RnnConfig check_weights(const char* op, const Tensor& input, const std::vector<Tensor>& weights,
                        const RnnOptions& o) {
  EMBER_CHECK(o.num_layers >= 1, op, ": num_layers must be >= 1, got ", o.num_layers);
  EMBER_CHECK(o.dropout >= 0 && o.dropout <= 1, op, ": dropout must be in [0, 1], got ", o.dropout);
  EMBER_CHECK(o.proj_size >= 0, op, ": proj_size must be >= 0, got ", o.proj_size);
  EMBER_CHECK(o.proj_size == 0 || o.mode == RnnMode::lstm, op,
              ": proj_size is only supported by LSTM, got proj_size = ", o.proj_size, " for ",
              rnn_mode_name(o.mode));
  RnnConfig c;
  c.mode = o.mode;
  c.num_layers = o.num_layers;
  c.num_directions = o.bidirectional ? 2 : 1;
  c.bias = o.bias;
  c.proj_size = o.proj_size;
  const int64_t per = c.weights_per_layer_direction();
  EMBER_CHECK(!weights.empty() && weights[0].defined() && weights[0].dim() == 2, op,
              ": weights[0] must be weight_ih_l0 [gates * hidden_size, input_size]",
              weights.empty() || !weights[0].defined() ? std::string(", got none")
                                                       : ", got shape " + weights[0].shape_str());
  const int64_t G = c.gates();
  EMBER_CHECK(weights[0].size(0) % G == 0 && weights[0].size(0) > 0, op, ": weight_ih_l0 ",
              weights[0].shape_str(), " must have a positive multiple of ", G,
              " rows (gates * hidden_size)");
  c.hidden_size = weights[0].size(0) / G;
  c.input_size = weights[0].size(1);
  EMBER_CHECK(c.proj_size < c.hidden_size || c.proj_size == 0, op, ": proj_size (", c.proj_size,
              ") must be smaller than hidden_size (", c.hidden_size, ")");
  EMBER_CHECK(int64_t(weights.size()) == c.num_weights(), op, ": expected ", c.num_weights(),
              " weights (", c.num_layers, " layers x ", c.num_directions, " directions x ", per,
              ": weight_ih, weight_hh", c.bias ? ", bias_ih, bias_hh" : "",
              c.proj_size > 0 ? ", weight_hr" : "", "), got ", weights.size());
  for (int64_t i = 0; i < c.num_weights(); ++i) {
    const Tensor& w = weights[size_t(i)];
    const std::string name = c.weight_name(i);
    const Shape expect = c.weight_shape(i);
    EMBER_CHECK(w.defined(), op, ": ", name, " (weights[", i, "]) is undefined");
    EMBER_CHECK(w.sizes() == expect, op, ": ", name, " (weights[", i, "]) must have shape ",
                shape_str(expect), " for hidden_size ", c.hidden_size, ", input_size ",
                c.input_size, (c.proj_size > 0 ? ", proj_size " : ""),
                (c.proj_size > 0 ? std::to_string(c.proj_size) : std::string()), ", got ",
                w.shape_str());
    EMBER_CHECK(w.dtype() == input.dtype(), op, ": ", name, " has dtype ", dtype_name(w.dtype()),
                " but input has ", dtype_name(input.dtype()), "; convert one with .to(dtype)");
    EMBER_CHECK(w.device() == input.device(), op, ": ", name, " is on ", w.device().str(),
                " but input is on ", input.device().str(), "; move them to one device");
  }
  return c;
}

// The per-sequence lengths on the host, validated; empty when every sequence is full (no masking).
std::vector<int32_t> host_lengths(const char* op, const Tensor& lengths, int64_t T, int64_t B) {
  if (!lengths.defined()) return {};
  EMBER_CHECK(is_integral(lengths.dtype()) && lengths.dtype() != DType::boolean, op,
              ": lengths must be an integer tensor, got dtype ", dtype_name(lengths.dtype()));
  EMBER_CHECK(lengths.dim() == 1 && lengths.size(0) == B, op, ": lengths must be [batch] = [", B,
              "], got shape ", lengths.shape_str());
  const std::vector<double> values = lengths.to_vector();
  std::vector<int32_t> out(values.size());
  bool all_full = true;
  for (size_t b = 0; b < values.size(); ++b) {
    EMBER_CHECK(values[b] >= 1 && values[b] <= double(T), op, ": lengths[", b,
                "] = ", int64_t(values[b]), " is out of range: every length must be in [1, ", T,
                "] (the input's sequence length; input time dim is ", T, ", lengths shape ",
                lengths.shape_str(), ")");
    out[b] = int32_t(values[b]);
    all_full &= out[b] == T;
  }
  if (all_full) return {};
  return out;
}

void check_state(const char* op, const char* name, const Tensor& s, const Shape& expect,
                 const Tensor& input) {
  if (!s.defined()) return;
  EMBER_CHECK(s.sizes() == expect, op, ": ", name, " must have shape ", shape_str(expect),
              " ([num_layers * num_directions, batch, ",
              std::string(name) == "c0" ? "hidden_size" : "hidden_size or proj_size",
              "]) for input ", input.shape_str(), ", got ", s.shape_str());
  EMBER_CHECK(s.dtype() == input.dtype(), op, ": ", name, " has dtype ", dtype_name(s.dtype()),
              " but input has ", dtype_name(input.dtype()));
  EMBER_CHECK(s.device() == input.device(), op, ": ", name, " is on ", s.device().str(),
              " but input is on ", input.device().str());
}

Tensor dense(const Tensor& t) { return t.detach().contiguous(); }

// The op on time-major input x [T, B, I] with states h0/c0 [L * D, B, *] (defined or not), once
// every check has passed. Records one autograd node for all layers and directions.
RnnResult rnn_time_major(const Tensor& x, const std::vector<Tensor>& weights, const Tensor& h0,
                         const Tensor& c0, const std::vector<int32_t>& lengths, RnnConfig config,
                         const RnnOptions& o) {
  const Device device = x.device();
  const DType dtype = x.dtype();
  config.seq_len = x.size(0);
  config.batch = x.size(1);
  const int64_t T = config.seq_len, B = config.batch,
                LD = config.num_layers * config.num_directions;
  const bool is_lstm = config.mode == RnnMode::lstm;

  RnnProblem p;
  p.direction = Direction::forward;
  p.config = config;
  p.dtype = dtype;
  p.allow_tf32 = rnn_allow_tf32();
  p.dropout = o.training ? o.dropout : 0.0;
  if (p.dropout_active()) {
    Generator& gen = o.generator != nullptr ? *o.generator : default_generator(device);
    EMBER_CHECK(gen.device().type == device.type, op_name(config.mode), ": a generator for ",
                gen.device().str(), " cannot draw the dropout masks of a tensor on ", device.str());
    for (int64_t l = 1; l < config.num_layers; ++l) {
      // One draw per layer, as ember::dropout on the layer's output would make.
      RandomParams r{gen.reserve(4)};
      r.kind = RandomKind::bernoulli;
      r.a = 1.0 - p.dropout;
      p.dropout_random.push_back(r);
    }
  }

  std::vector<Tensor> inputs = {x};
  if (h0.defined()) inputs.push_back(h0);
  if (c0.defined()) inputs.push_back(c0);
  const size_t first_weight = inputs.size();
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  const bool record = autograd::needs_grad(inputs);

  {
    autograd::NoGradGuard no_grad;
    p.input = dense(x);
    for (const Tensor& w : weights) p.weights.push_back(dense(w));
    p.h0 = h0.defined()
               ? dense(h0)
               : zeros({LD, B, config.out_size()}, TensorOptions(dtype).with_device(device));
    if (is_lstm)
      p.c0 = c0.defined()
                 ? dense(c0)
                 : zeros({LD, B, config.hidden_size}, TensorOptions(dtype).with_device(device));
    if (!lengths.empty()) {
      std::vector<double> v(lengths.begin(), lengths.end());
      p.lengths = from_vector(v, {B}, TensorOptions(DType::i32).with_device(device));
    }
    p.output = empty({T, B, config.num_directions * config.out_size()}, dtype, device);
    p.h_n = empty({LD, B, config.out_size()}, dtype, device);
    if (is_lstm) p.c_n = empty({LD, B, config.hidden_size}, dtype, device);
    p.reserve = empty({p.layout().total_bytes}, DType::u8, device);
    rnn_run(p);
  }

  RnnResult result{p.output, p.h_n, p.c_n};
  if (!record) return result;

  // Everything the backward reads, saved with its version (an in-place change of a weight
  // between forward and backward is reported, not silently used).
  const char* name = op_name(config.mode);
  struct Saved {
    autograd::SavedTensor input, h0, c0, lengths, reserve;
    std::vector<autograd::SavedTensor> weights;
  };
  auto saved = std::make_shared<Saved>();
  saved->input = autograd::SavedTensor(p.input, name);
  saved->h0 = autograd::SavedTensor(p.h0, name);
  if (p.c0.defined()) saved->c0 = autograd::SavedTensor(p.c0, name);
  if (p.lengths.defined()) saved->lengths = autograd::SavedTensor(p.lengths, name);
  saved->reserve = autograd::SavedTensor(p.reserve, name);
  for (const Tensor& w : p.weights) saved->weights.emplace_back(w, name);

  RnnProblem meta = p;  // sizes and parameters only: tensors are dropped below
  meta.input = meta.h0 = meta.c0 = meta.lengths = meta.reserve = Tensor();
  meta.output = meta.h_n = meta.c_n = Tensor();
  meta.weights.clear();
  const bool has_h0 = h0.defined(), has_c0 = c0.defined();

  std::vector<Tensor*> outputs = {&result.output, &result.h_n};
  if (is_lstm) outputs.push_back(&result.c_n);
  autograd::record_backward(
      is_lstm                       ? "LstmBackward"
      : config.mode == RnnMode::gru ? "GruBackward"
                                    : "RnnBackward",
      inputs, outputs,
      [saved, meta, has_h0, has_c0, first_weight, name = op_name(config.mode)](
          const std::vector<Tensor>& grads, const autograd::Node& node) {
        std::vector<Tensor> result(first_weight + saved->weights.size());
        bool any = false;
        for (const Tensor& g : grads) any |= g.defined();
        if (!any) return result;
        RnnProblem b = meta;
        b.direction = Direction::backward;
        b.input = saved->input.unpack();
        b.h0 = saved->h0.unpack();
        if (saved->c0.defined()) b.c0 = saved->c0.unpack();
        if (saved->lengths.defined()) b.lengths = saved->lengths.unpack();
        b.reserve = saved->reserve.unpack();
        for (const autograd::SavedTensor& w : saved->weights) b.weights.push_back(w.unpack());
        auto grad_in = [&](size_t i) {
          return i < grads.size() && grads[i].defined() ? grads[i].to(b.dtype).contiguous()
                                                        : Tensor();
        };
        b.grad_output = grad_in(0);
        b.grad_h_n = grad_in(1);
        b.grad_c_n = grad_in(2);
        const Device device = b.input.device();
        if (node.needs_input_grad(0)) b.grad_input = empty(b.input.sizes(), b.dtype, device);
        size_t at = 1;
        const size_t h0_slot = has_h0 ? at++ : 0, c0_slot = has_c0 ? at++ : 0;
        if (has_h0 && node.needs_input_grad(h0_slot))
          b.grad_h0 = empty(b.h0.sizes(), b.dtype, device);
        if (has_c0 && node.needs_input_grad(c0_slot))
          b.grad_c0 = empty(b.c0.sizes(), b.dtype, device);
        for (size_t i = 0; i < b.weights.size(); ++i)
          b.need_weight_grads |= node.needs_input_grad(first_weight + i);
        if (b.need_weight_grads)
          for (const Tensor& w : b.weights)
            b.grad_weights.push_back(empty(w.sizes(), b.dtype, device));
        rnn_run(b);
        result[0] = b.grad_input;
        if (has_h0) result[h0_slot] = b.grad_h0;
        if (has_c0) result[c0_slot] = b.grad_c0;
        if (b.need_weight_grads)
          for (size_t i = 0; i < b.weights.size(); ++i)
            if (node.needs_input_grad(first_weight + i))
              result[first_weight + i] = b.grad_weights[i];
        // The backward is one fused kernel: a second backward through it
        // raises an Error (cuDNN's RNN has no double backward either).
        return autograd::no_double_backward(name, std::move(result), grads, node);
      });
  return result;
}

}  // namespace

RnnResult rnn(const Tensor& input, const std::vector<Tensor>& weights, const Tensor& h0,
              const Tensor& c0, const Tensor& lengths, const RnnOptions& o) {
  const char* op = op_name(o.mode);
  EMBER_CHECK(input.defined(), op, ": input is undefined");
  EMBER_CHECK(input.dim() == 2 || input.dim() == 3, op,
              ": input must be [T, B, input_size] (or [B, T, input_size] with batch_first, or "
              "[T, input_size] unbatched), got shape ",
              input.shape_str());
  EMBER_CHECK_STATUS(is_floating(input.dtype()), not_supported, op, ": dtype ",
                     dtype_name(input.dtype()),
                     " is not supported; use float32, float64, bfloat16 or float16");
  EMBER_CHECK(o.mode == RnnMode::lstm || !c0.defined(), op,
              ": c0 is only used by LSTM; pass an undefined tensor for ", rnn_mode_name(o.mode));
  RnnConfig config = check_weights(op, input, weights, o);
  EMBER_CHECK(input.size(-1) == config.input_size, op, ": input has ", input.size(-1),
              " features (input shape ", input.shape_str(), ") but weight_ih_l0 ",
              weights[0].shape_str(), " expects input_size = ", config.input_size);

  const bool unbatched = input.dim() == 2;
  // Time-major view of the input (differentiable).
  Tensor x = unbatched ? input.unsqueeze(1) : o.batch_first ? input.transpose(0, 1) : input;
  const int64_t T = x.size(0), B = x.size(1);
  EMBER_CHECK(T >= 1 && B >= 1, op, ": input ", input.shape_str(),
              " must have at least one time step and one sequence");
  const int64_t LD = config.num_layers * config.num_directions;
  Tensor h = h0, c = c0;
  if (unbatched) {
    EMBER_CHECK(!lengths.defined(), op, ": lengths need batched input [T, B, input_size], got ",
                input.shape_str());
    if (h.defined()) {
      EMBER_CHECK(h.dim() == 2, op, ": for unbatched input ", input.shape_str(),
                  " h0 must be 2-D [", LD, ", ", config.out_size(), "], got ", h.shape_str());
      h = h.unsqueeze(1);
    }
    if (c.defined()) {
      EMBER_CHECK(c.dim() == 2, op, ": for unbatched input ", input.shape_str(),
                  " c0 must be 2-D [", LD, ", ", config.hidden_size, "], got ", c.shape_str());
      c = c.unsqueeze(1);
    }
  }
  check_state(op, "h0", h, {LD, B, config.out_size()}, input);
  check_state(op, "c0", c, {LD, B, config.hidden_size}, input);
  const std::vector<int32_t> lens = host_lengths(op, lengths, T, B);

  EMBER_CHECK_STATUS(
      !x.is_cuda() || x.dtype() != DType::f64, not_supported, op,
      ": float64 is not supported on CUDA (the kernels run float32 and bfloat16; "
      "float16 runs through float32); convert with .to(DType::f32) or run on the CPU");
  RnnResult r;
  const bool half = x.dtype() == DType::f16 || x.dtype() == DType::bf16;
  if ((x.device().is_cpu() && half) || (x.is_cuda() && x.dtype() == DType::f16)) {
    // No kernel of that dtype (the CPU has no 16-bit arithmetic worth having; CUDA runs bfloat16
    // natively but not float16): compute in fp32 through differentiable casts, so gradients come
    // back in the caller's dtype.
    const DType dt = x.dtype();
    std::vector<Tensor> w32;
    for (const Tensor& w : weights) w32.push_back(cast(w, DType::f32));
    Tensor h32 = h.defined() ? cast(h, DType::f32) : Tensor();
    Tensor c32 = c.defined() ? cast(c, DType::f32) : Tensor();
    r = rnn_time_major(cast(x, DType::f32), w32, h32, c32, lens, config, o);
    r.output = cast(r.output, dt);
    r.h_n = cast(r.h_n, dt);
    if (r.c_n.defined()) r.c_n = cast(r.c_n, dt);
  } else {
    r = rnn_time_major(x, weights, h, c, lens, config, o);
  }
  if (unbatched) {
    r.output = r.output.squeeze(1);
    r.h_n = r.h_n.squeeze(1);
    if (r.c_n.defined()) r.c_n = r.c_n.squeeze(1);
  } else if (o.batch_first) {
    r.output = r.output.transpose(0, 1);
  }
  return r;
}

RnnResult lstm(const Tensor& input, const std::vector<Tensor>& weights, const Tensor& h0,
               const Tensor& c0, const Tensor& lengths, RnnOptions options) {
  return rnn(input, weights, h0, c0, lengths, options.with_mode(RnnMode::lstm));
}

RnnResult gru(const Tensor& input, const std::vector<Tensor>& weights, const Tensor& h0,
              const Tensor& lengths, RnnOptions options) {
  return rnn(input, weights, h0, Tensor(), lengths, options.with_mode(RnnMode::gru));
}

RnnResult rnn_tanh(const Tensor& input, const std::vector<Tensor>& weights, const Tensor& h0,
                   const Tensor& lengths, RnnOptions options) {
  return rnn(input, weights, h0, Tensor(), lengths, options.with_mode(RnnMode::rnn_tanh));
}

RnnResult rnn_relu(const Tensor& input, const std::vector<Tensor>& weights, const Tensor& h0,
                   const Tensor& lengths, RnnOptions options) {
  return rnn(input, weights, h0, Tensor(), lengths, options.with_mode(RnnMode::rnn_relu));
}

}  // namespace ember
