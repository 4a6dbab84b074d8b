// Recurrent ops on the CPU (ops/rnn.h) and the nn layers (nn/rnn.h): forward values and every
// gradient against a hand-unrolled reference built from ops (linear, sigmoid, tanh, chunk, stack),
// for LSTM / GRU / RNN with 2 layers, bidirectional, proj_size, lengths, batch_first, no bias and
// dropout (bit-identical masks from the same Philox state); fp64 gradcheck of every mode; lengths
// against truncated sequences; unbatched input; 16-bit input; the rows of support/op_table_rnn.cpp;
// PyTorch's parameter names, shapes and init; and the argument errors.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/nn/rnn.h"
#include "ember/ops/rnn.h"
#include "support/op_table.h"

using namespace ember;

namespace {

TensorOptions f64() { return TensorOptions(DType::f64); }

struct Case {
  const char* name;
  RnnMode mode;
  int64_t layers = 1;
  bool bidirectional = false;
  int64_t proj = 0;
  bool bias = true;
  bool batch_first = false;
  bool lengths = false;
  double dropout = 0;
  int64_t T = 4, B = 3, I = 3, H = 4;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"lstm", RnnMode::lstm},
      {"lstm_2layer_bidirectional", RnnMode::lstm, 2, true},
      {"lstm_proj", RnnMode::lstm, 1, false, 2},
      {"lstm_proj_bidirectional_lengths", RnnMode::lstm, 2, true, 3, true, false, true},
      {"lstm_lengths_batch_first", RnnMode::lstm, 1, false, 0, true, true, true},
      {"lstm_no_bias_dropout", RnnMode::lstm, 3, false, 0, false, false, false, 0.4},
      {"gru", RnnMode::gru},
      {"gru_2layer_bidirectional_lengths", RnnMode::gru, 2, true, 0, true, false, true},
      {"gru_batch_first_dropout", RnnMode::gru, 2, false, 0, true, true, false, 0.3},
      {"rnn_tanh_2layer", RnnMode::rnn_tanh, 2},
      {"rnn_tanh_bidirectional_lengths", RnnMode::rnn_tanh, 1, true, 0, true, false, true},
      {"rnn_relu_no_bias", RnnMode::rnn_relu, 2, false, 0, false, true},
  };
  return all;
}

RnnConfig config_of(const Case& c) {
  RnnConfig cfg;
  cfg.mode = c.mode;
  cfg.num_layers = c.layers;
  cfg.num_directions = c.bidirectional ? 2 : 1;
  cfg.input_size = c.I;
  cfg.hidden_size = c.H;
  cfg.proj_size = c.proj;
  cfg.bias = c.bias;
  return cfg;
}

RnnOptions options_of(const Case& c, Generator* gen) {
  RnnOptions o;
  o.mode = c.mode;
  o.num_layers = c.layers;
  o.bias = c.bias;
  o.batch_first = c.batch_first;
  o.dropout = c.dropout;
  o.bidirectional = c.bidirectional;
  o.proj_size = c.proj;
  o.generator = gen;
  return o;
}

Tensor leaf(const Shape& shape, Generator& gen, double scale = 0.6) {
  return ((rand(shape, f64(), &gen) - 0.5) * (2 * scale)).detach().set_requires_grad(true);
}

// Everything one call needs: the user-layout input, states, weights and lengths.
struct Inputs {
  Tensor x;  // [T, B, I], or [B, T, I] with batch_first
  Tensor h0, c0;
  std::vector<Tensor> weights;
  std::vector<int64_t> lengths;  // empty: all T
  Tensor lengths_tensor;
  std::vector<Tensor> all() const {
    std::vector<Tensor> v = {x, h0};
    if (c0.defined()) v.push_back(c0);
    v.insert(v.end(), weights.begin(), weights.end());
    return v;
  }
};

Inputs make_inputs(const Case& c, uint64_t seed) {
  Generator gen(Device::cpu(), seed);
  const RnnConfig cfg = config_of(c);
  const int64_t ld = cfg.num_layers * cfg.num_directions;
  Inputs in;
  in.x = leaf(c.batch_first ? Shape{c.B, c.T, c.I} : Shape{c.T, c.B, c.I}, gen, 1.0);
  in.h0 = leaf({ld, c.B, cfg.out_size()}, gen);
  if (c.mode == RnnMode::lstm) in.c0 = leaf({ld, c.B, c.H}, gen);
  for (int64_t i = 0; i < cfg.num_weights(); ++i)
    in.weights.push_back(leaf(cfg.weight_shape(i), gen));
  if (c.lengths) {
    // Unsorted, one full, one of length 1.
    for (int64_t b = 0; b < c.B; ++b) in.lengths.push_back(b == 0 ? 2 : b == 1 ? c.T : 1);
    std::vector<double> v(in.lengths.begin(), in.lengths.end());
    in.lengths_tensor = from_vector(v, {c.B}, TensorOptions(DType::i64));
  }
  return in;
}

// The recurrence unrolled by hand from ops, time-major; masked steps keep the state and output 0.
RnnResult reference(const Tensor& x_tm, const Inputs& in, const RnnConfig& cfg, double dropout,
                    Generator* gen) {
  const int64_t T = x_tm.size(0), B = x_tm.size(1), D = cfg.num_directions;
  Tensor layer_in = x_tm;
  std::vector<Tensor> hn, cn;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    std::vector<Tensor> outs;
    for (int64_t d = 0; d < D; ++d) {
      auto w = [&](RnnWeightKind k) {
        const int64_t i = cfg.weight_index(l, d, k);
        return i < 0 ? Tensor() : in.weights[size_t(i)];
      };
      Tensor h = in.h0.select(0, l * D + d);
      Tensor c = in.c0.defined() ? in.c0.select(0, l * D + d) : Tensor();
      std::vector<Tensor> ys(static_cast<size_t>(T));
      for (int64_t s = 0; s < T; ++s) {
        const int64_t t = d == 0 ? s : T - 1 - s;
        Tensor gx = linear(layer_in.select(0, t), w(RnnWeightKind::w_ih), w(RnnWeightKind::b_ih));
        Tensor gh = linear(h, w(RnnWeightKind::w_hh), w(RnnWeightKind::b_hh));
        Tensor h_new, c_new;
        switch (cfg.mode) {
          case RnnMode::lstm: {
            std::vector<Tensor> g = chunk(gx + gh, 4, 1);
            c_new = sigmoid(g[1]) * c + sigmoid(g[0]) * tanh(g[2]);
            h_new = sigmoid(g[3]) * tanh(c_new);
            if (cfg.proj_size > 0) h_new = linear(h_new, w(RnnWeightKind::w_hr));
            break;
          }
          case RnnMode::gru: {
            std::vector<Tensor> a = chunk(gx, 3, 1), b = chunk(gh, 3, 1);
            Tensor r = sigmoid(a[0] + b[0]), z = sigmoid(a[1] + b[1]);
            Tensor n = tanh(a[2] + r * b[2]);
            h_new = (1.0 - z) * n + z * h;
            break;
          }
          case RnnMode::rnn_tanh:
            h_new = tanh(gx + gh);
            break;
          case RnnMode::rnn_relu:
            h_new = relu(gx + gh);
            break;
        }
        if (in.lengths.empty()) {
          h = h_new;
          c = c_new;
          ys[size_t(t)] = h_new;
        } else {
          std::vector<double> m(static_cast<size_t>(B));
          for (int64_t b = 0; b < B; ++b) m[size_t(b)] = t < in.lengths[size_t(b)] ? 1.0 : 0.0;
          Tensor mask = from_vector(m, {B, 1}, f64());
          h = mask * h_new + (1.0 - mask) * h;
          if (c.defined()) c = mask * c_new + (1.0 - mask) * c;
          ys[size_t(t)] = mask * h_new;
        }
      }
      outs.push_back(stack(ys, 0));
      hn.push_back(h);
      cn.push_back(c);
    }
    Tensor out = D == 2 ? cat(outs, 2) : outs[0];
    if (l + 1 < cfg.num_layers && dropout > 0) out = ember::dropout(out, dropout, true, gen);
    layer_in = out;
  }
  return {layer_in, stack(hn, 0), cfg.mode == RnnMode::lstm ? stack(cn, 0) : Tensor()};
}

RnnResult run_op(const Case& c, const Inputs& in, Generator* gen) {
  return rnn(in.x, in.weights, in.h0, in.c0, in.lengths_tensor, options_of(c, gen));
}

// Output, h_n and c_n flattened into one tensor (for gradcheck and for weighted sums).
Tensor flat(const RnnResult& r) {
  std::vector<Tensor> parts = {r.output.flatten(), r.h_n.flatten()};
  if (r.c_n.defined()) parts.push_back(r.c_n.flatten());
  return cat(parts, 0);
}

}  // namespace

TEST_CASE("rnn: forward values and gradients match a reference unrolled from ops") {
  for (const Case& c : cases()) {
    CAPTURE(c.name);
    const Inputs in = make_inputs(c, 11);
    Generator gen_op(Device::cpu(), 3), gen_ref(Device::cpu(), 3);
    RnnResult op = run_op(c, in, &gen_op);
    Tensor x_tm = c.batch_first ? in.x.transpose(0, 1) : in.x;
    RnnResult ref = reference(x_tm, in, config_of(c), c.dropout, &gen_ref);
    if (c.batch_first) ref.output = ref.output.transpose(0, 1);
    REQUIRE(op.output.sizes() == ref.output.sizes());
    REQUIRE(op.h_n.sizes() == ref.h_n.sizes());
    CHECK(max_abs_diff(op.output, ref.output) < 1e-12);
    CHECK(max_abs_diff(op.h_n, ref.h_n) < 1e-12);
    CHECK(op.c_n.defined() == ref.c_n.defined());
    if (op.c_n.defined()) CHECK(max_abs_diff(op.c_n, ref.c_n) < 1e-12);
    // The values are not trivially zero or saturated.
    CHECK(sum(abs(op.output)).item() > 0.1);

    Generator gen_w(Device::cpu(), 5);
    Tensor weight = rand(flat(op).sizes(), f64(), &gen_w) - 0.5;
    const std::vector<Tensor> leaves = in.all();
    std::vector<Tensor> g_op = autograd::grad({sum(flat(op) * weight)}, leaves);
    std::vector<Tensor> g_ref = autograd::grad({sum(flat(ref) * weight)}, leaves);
    for (size_t i = 0; i < leaves.size(); ++i) {
      CAPTURE(i);
      REQUIRE(g_op[i].defined());
      REQUIRE(g_op[i].sizes() == leaves[i].sizes());
      CHECK(max_abs_diff(g_op[i], g_ref[i]) < 1e-11);
    }
  }
}

TEST_CASE("rnn: fp64 gradcheck of every mode") {
  for (Case c : cases()) {
    CAPTURE(c.name);
    c.T = 3;
    c.B = 3;
    c.I = 2;
    c.H = 3;
    if (c.proj > 0) c.proj = 2;
    const Inputs in = make_inputs(c, 21);
    auto fn = [&](const std::vector<Tensor>& v) {
      Inputs call = in;
      call.x = v[0];
      call.h0 = v[1];
      size_t at = 2;
      if (in.c0.defined()) call.c0 = v[at++];
      call.weights.assign(v.begin() + long(at), v.end());
      Generator gen(Device::cpu(), 9);  // the same dropout masks at every evaluation
      return flat(run_op(c, call, &gen));
    };
    std::string report;
    CHECK_MESSAGE(autograd::gradcheck(fn, in.all(), 1e-6, 1e-6, 1e-4, &report), report);
  }
}

TEST_CASE("rnn: a sequence of length n gives what the first n steps alone give") {
  for (RnnMode mode : {RnnMode::lstm, RnnMode::gru, RnnMode::rnn_tanh}) {
    CAPTURE(rnn_mode_name(mode));
    Case c{"lengths", mode, 2, true};
    c.T = 5;
    c.B = 3;
    c.lengths = true;
    const Inputs in = make_inputs(c, 31);
    RnnResult full = run_op(c, in, nullptr);
    for (int64_t b = 0; b < c.B; ++b) {
      const int64_t n = in.lengths[size_t(b)];
      CAPTURE(b);
      Inputs one = in;
      one.x = in.x.narrow(0, 0, n).narrow(1, b, 1);
      one.h0 = in.h0.narrow(1, b, 1);
      if (in.c0.defined()) one.c0 = in.c0.narrow(1, b, 1);
      one.lengths.clear();
      one.lengths_tensor = Tensor();
      RnnResult alone = run_op(c, one, nullptr);
      CHECK(max_abs_diff(full.output.narrow(0, 0, n).narrow(1, b, 1), alone.output) < 1e-12);
      if (n < c.T) CHECK(max(abs(full.output.narrow(0, n, c.T - n).narrow(1, b, 1))).item() == 0);
      CHECK(max_abs_diff(full.h_n.narrow(1, b, 1), alone.h_n) < 1e-12);
      if (full.c_n.defined()) CHECK(max_abs_diff(full.c_n.narrow(1, b, 1), alone.c_n) < 1e-12);
    }
  }
}

TEST_CASE("rnn: dropout applies between layers in training only, with ember::dropout's masks") {
  Case c{"dropout", RnnMode::lstm, 2};
  c.dropout = 0.5;
  const Inputs in = make_inputs(c, 41);
  Generator g1(Device::cpu(), 77), g2(Device::cpu(), 77);
  RnnResult a = run_op(c, in, &g1);
  RnnResult b = run_op(c, in, &g2);
  CHECK(max_abs_diff(a.output, b.output) == 0);  // same generator state, same masks
  RnnResult again = run_op(c, in, &g1);          // the generator moved on: new masks
  CHECK(max_abs_diff(a.output, again.output) > 1e-6);
  RnnOptions eval = options_of(c, &g1);
  eval.training = false;
  RnnResult e1 = rnn(in.x, in.weights, in.h0, in.c0, Tensor(), eval);
  Case no_dropout = c;
  no_dropout.dropout = 0;
  RnnResult e2 = run_op(no_dropout, in, nullptr);
  CHECK(max_abs_diff(e1.output, e2.output) == 0);
  // A single layer has nothing between layers: dropout draws nothing and changes nothing.
  Case one = c;
  one.layers = 1;
  const Inputs in1 = make_inputs(one, 42);
  Generator g3(Device::cpu(), 5);
  run_op(one, in1, &g3);
  CHECK(g3.offset() == 0);
}

TEST_CASE("rnn: unbatched input, default states and 16-bit input") {
  Case c{"lstm", RnnMode::lstm, 2, true};
  c.B = 1;
  const Inputs in = make_inputs(c, 51);
  RnnOptions o = options_of(c, nullptr);
  RnnResult batched = rnn(in.x, in.weights, in.h0, in.c0, Tensor(), o);
  RnnResult unbatched =
      rnn(in.x.squeeze(1), in.weights, in.h0.squeeze(1), in.c0.squeeze(1), Tensor(), o);
  CHECK(unbatched.output.sizes() == Shape{c.T, 2 * c.H});
  CHECK(max_abs_diff(unbatched.output, batched.output.squeeze(1)) == 0);
  CHECK(max_abs_diff(unbatched.h_n, batched.h_n.squeeze(1)) == 0);

  // Undefined h0 / c0 are zeros.
  RnnResult zero_state = rnn(in.x, in.weights, Tensor(), Tensor(), Tensor(), o);
  RnnResult explicit_zero =
      rnn(in.x, in.weights, zeros(in.h0.sizes(), f64()), zeros(in.c0.sizes(), f64()), Tensor(), o);
  CHECK(max_abs_diff(zero_state.output, explicit_zero.output) == 0);

  // bfloat16 computes in float32 on the CPU and returns bfloat16, gradients included.
  std::vector<Tensor> w16;
  for (const Tensor& w : in.weights)
    w16.push_back(w.detach().to(DType::bf16).set_requires_grad(true));
  Tensor x16 = in.x.detach().to(DType::bf16).set_requires_grad(true);
  RnnResult r16 = rnn(x16, w16, Tensor(), Tensor(), Tensor(), o);
  CHECK(r16.output.dtype() == DType::bf16);
  std::vector<Tensor> w32;
  for (const Tensor& w : w16) w32.push_back(w.detach().to(DType::f32));
  RnnResult r32 = rnn(x16.detach().to(DType::f32), w32, Tensor(), Tensor(), Tensor(), o);
  CHECK(max_abs_diff(r16.output.to(DType::f32), r32.output) < 1e-2);
  sum(r16.output).backward();
  CHECK(x16.grad().dtype() == DType::bf16);
  CHECK(w16[0].grad().dtype() == DType::bf16);
}

TEST_CASE("rnn: bad input is an Error naming the shapes") {
  Case c{"lstm", RnnMode::lstm, 2};
  const Inputs in = make_inputs(c, 61);
  const RnnOptions o = options_of(c, nullptr);
  auto fails_with = [](auto&& call, const std::string& needle) {
    try {
      call();
      FAIL("expected an ember::Error containing '" << needle << "'");
    } catch (const Error& e) {
      CHECK(e.status() == Status::bad_param);
      CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
    }
  };
  // Input size that does not match weight_ih_l0 [16, 3].
  Tensor wide = zeros({c.T, c.B, 5}, f64());
  fails_with([&] { rnn(wide, in.weights, in.h0, in.c0, Tensor(), o); }, "[4, 3, 5]");
  fails_with([&] { rnn(wide, in.weights, in.h0, in.c0, Tensor(), o); }, "[16, 3]");
  // Lengths longer than the sequence, or not positive, or of the wrong size.
  fails_with(
      [&] {
        rnn(in.x, in.weights, in.h0, in.c0, from_vector({4, 5, 1}, {3}, TensorOptions(DType::i64)),
            o);
      },
      "lengths[1] = 5");
  fails_with(
      [&] {
        rnn(in.x, in.weights, in.h0, in.c0, from_vector({4, 0, 1}, {3}, TensorOptions(DType::i64)),
            o);
      },
      "lengths[1] = 0");
  fails_with(
      [&] {
        rnn(in.x, in.weights, in.h0, in.c0, from_vector({4, 1}, {2}, TensorOptions(DType::i64)), o);
      },
      "[3]");
  // h0 / c0 of the wrong shape.
  fails_with(
      [&] {
        rnn(in.x, in.weights, zeros({2, 3, 5}, f64()), in.c0, Tensor(), o);
      },
      "[2, 3, 4]");
  fails_with(
      [&] {
        rnn(in.x, in.weights, zeros({2, 3, 5}, f64()), in.c0, Tensor(), o);
      },
      "[2, 3, 5]");
  fails_with(
      [&] {
        rnn(in.x, in.weights, in.h0, zeros({1, 3, 4}, f64()), Tensor(), o);
      },
      "[1, 3, 4]");
  // Weights: wrong count, wrong shape; c0 given to a GRU.
  std::vector<Tensor> fewer(in.weights.begin(), in.weights.end() - 1);
  fails_with([&] { rnn(in.x, fewer, in.h0, in.c0, Tensor(), o); }, "expected 8 weights");
  std::vector<Tensor> bad = in.weights;
  bad[1] = zeros({16, 5}, f64());
  fails_with([&] { rnn(in.x, bad, in.h0, in.c0, Tensor(), o); }, "weight_hh_l0");
  RnnOptions g = o;
  g.mode = RnnMode::gru;
  fails_with([&] { rnn(in.x, in.weights, in.h0, in.c0, Tensor(), g); }, "c0 is only used by LSTM");
  fails_with(
      [&] { rnn(in.x, in.weights, in.h0, in.c0, Tensor(), RnnOptions(o).with_proj_size(9)); },
      "proj_size");
}

TEST_CASE("nn::LSTM / GRU / RNN: PyTorch's parameter names, shapes, init and printing") {
  manual_seed(0);
  nn::LSTM lstm(nn::LSTMOptions(10, 20).num_layers(2).bidirectional(true).proj_size(5));
  const std::vector<std::string> expected = {
      "weight_ih_l0",         "weight_hh_l0",         "bias_ih_l0",
      "bias_hh_l0",           "weight_hr_l0",         "weight_ih_l0_reverse",
      "weight_hh_l0_reverse", "bias_ih_l0_reverse",   "bias_hh_l0_reverse",
      "weight_hr_l0_reverse", "weight_ih_l1",         "weight_hh_l1",
      "bias_ih_l1",           "bias_hh_l1",           "weight_hr_l1",
      "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse",
      "bias_hh_l1_reverse",   "weight_hr_l1_reverse"};
  const std::vector<Shape> shapes = {
      {80, 10}, {80, 5}, {80}, {80}, {5, 20}, {80, 10}, {80, 5}, {80}, {80}, {5, 20},
      {80, 10}, {80, 5}, {80}, {80}, {5, 20}, {80, 10}, {80, 5}, {80}, {80}, {5, 20}};
  const nn::NamedTensors params = lstm->named_parameters();
  REQUIRE(params.size() == expected.size());
  const double bound = 1.0 / std::sqrt(20.0);
  for (size_t i = 0; i < params.size(); ++i) {
    CAPTURE(i);
    CHECK(params[i].first == expected[i]);
    CHECK(params[i].second.sizes() == shapes[i]);
    CHECK(max(abs(params[i].second)).item() <= bound);
    CHECK(params[i].second.requires_grad());
  }
  CHECK(lstm->str() == "LSTM(10, 20, proj_size=5, num_layers=2, bidirectional=true)");

  nn::GRU gru(nn::GRUOptions(4, 6).bias(false).batch_first(true));
  CHECK(gru->named_parameters().size() == 2);
  CHECK(gru->named_parameters()[1].first == "weight_hh_l0");
  CHECK(gru->named_parameters()[1].second.sizes() == Shape{18, 6});
  CHECK(gru->str() == "GRU(4, 6, bias=false, batch_first=true)");
  nn::RNN rnn_relu(
      nn::RNNOptions(3, 5).nonlinearity(nn::RNNNonlinearity::relu).dropout(0.25).num_layers(2));
  CHECK(rnn_relu->str() == "RNN(3, 5, num_layers=2, dropout=0.25, nonlinearity='relu')");

  // A state_dict round-trips into a fresh module and gives the same outputs.
  nn::LSTM copy(nn::LSTMOptions(10, 20).num_layers(2).bidirectional(true).proj_size(5));
  copy->load_state_dict(lstm->state_dict());
  Tensor x = randn({7, 3, 10});
  lstm->eval();
  copy->eval();
  RnnResult a = lstm(x), b = copy(x);
  CHECK(a.output.sizes() == Shape{7, 3, 10});
  CHECK(a.h_n.sizes() == Shape{4, 3, 5});
  CHECK(a.c_n.sizes() == Shape{4, 3, 20});
  CHECK(max_abs_diff(a.output, b.output) == 0);

  // The module runs the op on its flat weights; GRU / RNN have no cell state.
  Tensor xg = randn({2, 5, 4});  // batch_first
  RnnResult rg = gru(xg);
  RnnOptions og;
  og.mode = RnnMode::gru;
  og.bias = false;
  og.batch_first = true;
  RnnResult direct = ember::gru(xg, gru->flat_weights(), Tensor(), Tensor(), og);
  CHECK(max_abs_diff(rg.output, direct.output) == 0);
  CHECK_FALSE(rg.c_n.defined());
  // Training uses dropout between layers; eval does not.
  RnnResult t1 = rnn_relu(randn({4, 2, 3}));
  CHECK(t1.output.sizes() == Shape{4, 2, 5});
  sum(t1.output).backward();
  CHECK(rnn_relu->flat_weights()[0].grad().defined());
}
