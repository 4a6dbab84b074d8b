// LSTM benchmarks (GPU), Ember side; bench/rnn.py is the PyTorch side (torch.nn.LSTM on cuDNN)
// with the same bench/shape keys. The cases are shared/ANCHORS.md's LSTM rows (input, hidden,
// layers, seq, batch; seq-major input), each in float32 (TF32 allowed, as PyTorch's default
// torch.backends.cudnn.allow_tf32) and bfloat16:
//   lstm_fwd      the training forward (grad mode on: the reserve for backward is written)
//   lstm_fwdbwd   forward + output.backward(gy) (weights' .grad set to none before each step),
//                 with peak_MiB = peak device memory of one step above what was allocated before
// One JSON line per measurement: ms (median of CUDA-event timings after warm-up), TFLOPs over the
// GEMM flops (forward 2 * T * B * 4H * (in + H) per layer, backward twice that), host_ms (the
// wall time to issue one call: near ms means the host, not the GPU, is the limit), and check
// sums that must agree with bench/rnn.py's to a few digits (the weights and inputs are the same
// functions of the element index on both sides). Before timing, each case's first steps are
// compared with Ember's CPU reference (max_rel_err). lstm_fwd_algo times the forward with each
// CUDA algorithm forced (cublas_steps, persistent where it applies), lstm_fwdbwd_algo the training
// step with each backward algorithm forced; the cache runs in benchmark mode for the main lines,
// so it keeps the faster one.
//
// Two more modes serve scripts/check_rnn_torch.py (correctness against torch.nn.LSTM / GRU / RNN):
//   bench_rnn --export DIR   writes DIR/<case>.safetensors: an Ember module's state_dict under
//                            PyTorch's names, the inputs, and Ember's outputs and gradients
//   bench_rnn --import FILE  loads a PyTorch state_dict and outputs written by the script, runs
//                            Ember on them and prints the difference as JSON
#include "ember/nn/rnn.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ember/dispatch/algo_cache.h"
#include "ember/ember.h"
#include "ember/nn/checkpoint.h"
#include "timing.h"

using namespace ember;

namespace {

using bench::time_ms;

// Host wall time of issuing one call (the GPU is drained before and after, not during).
template <typename F>
double host_ms(F f, int iters = 5) {
  Stream s = current_stream(Device::cuda());
  s.synchronize();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f();
  auto t1 = std::chrono::steady_clock::now();
  s.synchronize();
  return std::chrono::duration<double, std::milli>(t1 - t0).count() / iters;
}

// sin(scale * i + phase) over the flat index i of a row-major tensor of `shape` (fp64 on the CPU).
Tensor index_signal(const Shape& shape, double scale, double phase) {
  Tensor i = arange(0, double(shape_numel(shape)), 1, TensorOptions(DType::f64));
  return sin(i * scale + phase).view(shape);
}

double mean_of_product(const Tensor& a, const Tensor& b) {
  return (a.to(Device::cpu(), DType::f64) * b.to(Device::cpu(), DType::f64)).mean().item();
}

// max |a - ref| / max(1, max |ref|). A size mismatch or a NaN / infinity anywhere is the largest
// finite error, so a broken kernel cannot be reported "correct" (std::max ignores a NaN second
// argument); finite because the value is printed into JSON, where "inf" would not parse.
double rel_err(const Tensor& a, const Tensor& ref) {
  std::vector<double> x = a.to_vector(), y = ref.to_vector();
  constexpr double kWorst = std::numeric_limits<double>::max();
  if (x.size() != y.size()) return kWorst;
  double scale = 1, err = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i]) || !std::isfinite(y[i])) return kWorst;
    scale = std::max(scale, std::abs(y[i]));
    err = std::max(err, std::abs(x[i] - y[i]));
  }
  return err / scale;
}

// Parameter i of a module = sin(i-dependent signal) * 1/sqrt(hidden): the same on both sides.
void set_signal_weights(nn::RNNImplBase& m) {
  autograd::NoGradGuard no_grad;
  const double bound = 1.0 / std::sqrt(double(m.config().hidden_size));
  const std::vector<Tensor>& w = m.flat_weights();
  for (size_t i = 0; i < w.size(); ++i) {
    Tensor t = w[i];
    t.copy_(index_signal(t.sizes(), 0.01 + 0.001 * double(i), 0.1 * double(i + 1)) * bound);
  }
}

struct LstmCase {
  int64_t input, hidden, layers, seq, batch;
};

std::string case_name(const LstmCase& c, DType dtype) {
  return detail::concat("in", c.input, "_h", c.hidden, "_L", c.layers, "_T", c.seq, "_B", c.batch,
                        " ", dtype == DType::f32 ? "f32" : "bf16");
}

void emit(const char* bench, const std::string& shape, double ms, double flops, double host,
          const std::string& extra) {
  std::printf(
      "{\"bench\":\"%s\",\"impl\":\"ember\",\"shape\":\"%s\",\"ms\":%.6f,\"TFLOPs\":%.3f,"
      "\"host_ms\":%.4f%s}\n",
      bench, shape.c_str(), ms, flops / (ms * 1e9), host, extra.c_str());
  std::fflush(stdout);
}

void bench_case(const LstmCase& c, DType dtype) {
  const Device dev = Device::cuda();
  const std::string shape = case_name(c, dtype);
  nn::LSTM lstm(nn::LSTMOptions(c.input, c.hidden).num_layers(c.layers));
  set_signal_weights(*lstm);
  Tensor x64 = index_signal({c.seq, c.batch, c.input}, 0.003, 0.5);
  Tensor gy64 = index_signal({c.seq, c.batch, c.hidden}, 0.007, 1.3);

  // Correct first: the first 4 steps against the CPU reference (float32; a unidirectional
  // network's first steps do not depend on the later ones).
  double max_err = 0;
  {
    autograd::NoGradGuard no_grad;
    nn::LSTM cpu(nn::LSTMOptions(c.input, c.hidden).num_layers(c.layers));
    set_signal_weights(*cpu);
    Tensor head = x64.narrow(0, 0, 4).to(dtype).to(DType::f32);
    for (const Tensor& w : cpu->flat_weights()) {
      Tensor t = w;
      t.copy_(w.to(dtype).to(DType::f32));  // the values the GPU sees
    }
    Tensor ref = cpu(head).output;
    lstm->to(dev, dtype);
    Tensor got = lstm(x64.narrow(0, 0, 4).to(dev, dtype)).output;
    max_err = rel_err(got, ref);
  }
  Tensor x = x64.to(dev, dtype), gy = gy64.to(dev, dtype);
  const bool ok = max_err < (dtype == DType::bf16 ? 5e-2 : 5e-3);

  double fwd_flops = 0;
  for (int64_t l = 0; l < c.layers; ++l)
    fwd_flops +=
        2.0 * c.seq * c.batch * 4 * c.hidden * double((l == 0 ? c.input : c.hidden) + c.hidden);

  dispatch::AlgoModeGuard benchmark_mode(dispatch::AlgoMode::benchmark);
  RnnResult r;
  auto forward = [&] { r = lstm(x); };
  auto step = [&] {
    lstm->zero_grad();
    RnnResult s = lstm(x);
    s.output.backward(gy);
  };
  const double fwd_ms = time_ms(forward, 10);
  const double fwd_host = host_ms(forward);
  const double check_fwd = mean_of_product(r.output, gy64);
  r = RnnResult();
  const double step_ms = time_ms(step, 10);
  const double step_host = host_ms(step);
  // Peak memory of one step above what is allocated before it.
  current_stream(dev).synchronize();
  lstm->zero_grad();
  const size_t before = cuda::memory_stats(dev.index).allocated_bytes;
  cuda::reset_peak_memory_stats(dev.index);
  step();
  current_stream(dev).synchronize();
  const double peak_mib =
      double(cuda::memory_stats(dev.index).peak_allocated_bytes - before) / (1 << 20);
  const Tensor& g = lstm->flat_weights()[1].grad();  // weight_hh_l0
  const double check_bwd = mean_of_product(g, index_signal(g.sizes(), 0.011, 0.2));

  const std::string verdict =
      detail::concat(",\"max_rel_err\":", max_err, ",\"correct\":", ok ? "true" : "false");
  emit("lstm_fwd", shape, fwd_ms, fwd_flops, fwd_host,
       detail::concat(",\"check\":", check_fwd, verdict));
  emit("lstm_fwdbwd", shape, step_ms, 3 * fwd_flops, step_host,
       detail::concat(",\"check\":", check_bwd, ",\"peak_MiB\":", peak_mib, verdict));

  // Each CUDA algorithm of one direction forced in turn: the forward alone (lstm_fwd_algo, what
  // the cache chose between) and the training step with the backward forced (lstm_fwdbwd_algo, the
  // forward as the cache chose). A forced algorithm that does not apply throws bad_param and is
  // reported skipped; any other error (a failing kernel) propagates and fails the benchmark.
  auto time_forced = [&](const char* slot, const char* bench, auto& fn, double flops) {
    for (const char* algo : {"cublas_steps", "persistent"}) {
      dispatch::AlgoSettingsGuard force(dispatch::current_algo_settings().force(slot, algo));
      try {
        const double ms = time_ms(fn, 10);
        emit(bench, shape + " " + algo, ms, flops, host_ms(fn), "");
      } catch (const Error& e) {
        if (e.status() != Status::bad_param) throw;
        std::printf(
            "{\"bench\":\"%s\",\"impl\":\"ember\",\"shape\":\"%s %s\",\"skipped\":\"does not "
            "apply\"}\n",
            bench, shape.c_str(), algo);
      }
    }
  };
  time_forced("rnn.forward", "lstm_fwd_algo", forward, fwd_flops);
  time_forced("rnn.backward", "lstm_fwdbwd_algo", step, 3 * fwd_flops);
}

// ---- export / import for scripts/check_rnn_torch.py
// ------------------------------------------------

struct ExportCase {
  const char* name;
  const char* module;  // LSTM, GRU, RNN
  int64_t input, hidden, layers, proj;
  bool bidirectional, batch_first, lengths, relu;
  DType dtype;
};

nn::RNNImplBase* make_module(const ExportCase& c, std::shared_ptr<nn::Module>& holder) {
  const std::string m = c.module;
  if (m == "LSTM") {
    auto p = std::make_shared<nn::LSTMImpl>(nn::LSTMOptions(c.input, c.hidden)
                                                .num_layers(c.layers)
                                                .proj_size(c.proj)
                                                .bidirectional(c.bidirectional)
                                                .batch_first(c.batch_first));
    holder = p;
    return p.get();
  }
  if (m == "GRU") {
    auto p = std::make_shared<nn::GRUImpl>(nn::GRUOptions(c.input, c.hidden)
                                               .num_layers(c.layers)
                                               .bidirectional(c.bidirectional)
                                               .batch_first(c.batch_first));
    holder = p;
    return p.get();
  }
  auto p = std::make_shared<nn::RNNImpl>(
      nn::RNNOptions(c.input, c.hidden)
          .num_layers(c.layers)
          .bidirectional(c.bidirectional)
          .batch_first(c.batch_first)
          .nonlinearity(c.relu ? nn::RNNNonlinearity::relu : nn::RNNNonlinearity::tanh));
  holder = p;
  return p.get();
}

RnnResult run_module(nn::RNNImplBase* m, const std::string& kind, const Tensor& x, const Tensor& h0,
                     const Tensor& c0, const Tensor& lengths) {
  if (kind == "LSTM") return static_cast<nn::LSTMImpl*>(m)->forward(x, h0, c0, lengths);
  if (kind == "GRU") return static_cast<nn::GRUImpl*>(m)->forward(x, h0, lengths);
  return static_cast<nn::RNNImpl*>(m)->forward(x, h0, lengths);
}

int export_cases(const std::string& dir) {
  const Device dev = cuda::is_available() ? Device::cuda() : Device::cpu();
  set_rnn_allow_tf32(false);  // compared with PyTorch at allow_tf32 = False
  const std::vector<ExportCase> cases = {
      {"lstm_2layer_bidirectional_lengths", "LSTM", 16, 32, 2, 0, true, false, true, false,
       DType::f32},
      {"lstm_proj_lengths", "LSTM", 8, 16, 2, 6, false, false, true, false, DType::f32},
      {"lstm_batch_first", "LSTM", 12, 24, 1, 0, false, true, false, false, DType::f32},
      {"gru_2layer_bidirectional_batch_first_lengths", "GRU", 10, 20, 2, 0, true, true, true, false,
       DType::f32},
      {"rnn_tanh", "RNN", 6, 12, 1, 0, false, false, false, false, DType::f32},
      {"rnn_relu_bidirectional", "RNN", 6, 12, 2, 0, true, false, true, true, DType::f32},
      {"lstm_bf16", "LSTM", 64, 128, 2, 0, false, false, false, false, DType::bf16},
  };
  manual_seed(1234);
  for (const ExportCase& c : cases) {
    const int64_t T = 9, B = 5;
    std::shared_ptr<nn::Module> holder;
    nn::RNNImplBase* m = make_module(c, holder);
    m->to(dev, c.dtype);
    const RnnConfig& cfg = m->config();
    const int64_t ld = cfg.num_layers * cfg.num_directions;
    const TensorOptions o = TensorOptions(c.dtype).with_device(dev);
    Tensor x = randn(c.batch_first ? Shape{B, T, c.input} : Shape{T, B, c.input}, o)
                   .set_requires_grad(true);
    Tensor h0 = (randn({ld, B, cfg.out_size()}, o) * 0.5).detach().set_requires_grad(true);
    Tensor c0;
    if (std::string(c.module) == "LSTM")
      c0 = (randn({ld, B, c.hidden}, o) * 0.5).detach().set_requires_grad(true);
    Tensor lengths;
    if (c.lengths) lengths = from_vector({9, 3, 7, 1, 9}, {B}, TensorOptions(DType::i64));
    RnnResult r = run_module(m, c.module, x, h0, c0, lengths);
    Tensor gy = randn(r.output.sizes(), o), gh = randn(r.h_n.sizes(), o);
    Tensor loss = sum(r.output * gy) + sum(r.h_n * gh);
    Tensor gc;
    if (r.c_n.defined()) {
      gc = randn(r.c_n.sizes(), o);
      loss = loss + sum(r.c_n * gc);
    }
    loss.backward();

    nn::NamedTensors tensors = m->state_dict();
    auto add = [&](const std::string& name, const Tensor& t) {
      if (t.defined()) tensors.emplace_back(name, t.detach());
    };
    add("input.x", x);
    add("input.h0", h0);
    add("input.c0", c0);
    add("input.lengths", lengths);
    add("input.grad_output", gy);
    add("input.grad_h_n", gh);
    add("input.grad_c_n", gc);
    add("ember.output", r.output);
    add("ember.h_n", r.h_n);
    add("ember.c_n", r.c_n);
    add("ember.grad.x", x.grad());
    add("ember.grad.h0", h0.grad());
    add("ember.grad.c0", c0.defined() ? c0.grad() : Tensor());
    for (const auto& [name, p] : m->named_parameters()) add("ember.grad." + name, p.grad());
    nn::CheckpointMetadata meta = {
        {"module", c.module},
        {"input_size", std::to_string(c.input)},
        {"hidden_size", std::to_string(c.hidden)},
        {"num_layers", std::to_string(c.layers)},
        {"proj_size", std::to_string(c.proj)},
        {"bidirectional", c.bidirectional ? "1" : "0"},
        {"batch_first", c.batch_first ? "1" : "0"},
        {"nonlinearity", c.relu ? "relu" : "tanh"},
        {"dtype", dtype_name(c.dtype)},
        {"device", dev.str()},
    };
    const std::string path = dir + "/" + c.name + ".safetensors";
    nn::save_checkpoint(path, tensors, meta);
    std::printf("{\"bench\":\"rnn_export\",\"case\":\"%s\",\"path\":\"%s\"}\n", c.name,
                path.c_str());
  }
  return 0;
}

// Reads a file written by check_rnn_torch.py: PyTorch's state_dict, the input and PyTorch's
// outputs (torch.output, torch.h_n, torch.c_n), with the module options as metadata.
int import_case(const std::string& path) {
  const Device dev = cuda::is_available() ? Device::cuda() : Device::cpu();
  set_rnn_allow_tf32(false);
  nn::LoadedTensors file = nn::load_checkpoint(path);
  auto meta = [&](const char* k) { return file.metadata.at(k); };
  ExportCase c{"import",
               nullptr,
               std::stoll(meta("input_size")),
               std::stoll(meta("hidden_size")),
               std::stoll(meta("num_layers")),
               std::stoll(meta("proj_size")),
               meta("bidirectional") == "1",
               meta("batch_first") == "1",
               false,
               meta("nonlinearity") == "relu",
               DType::f32};
  const std::string kind = meta("module");
  c.module = kind.c_str();
  std::shared_ptr<nn::Module> holder;
  nn::RNNImplBase* m = make_module(c, holder);
  nn::NamedTensors state;
  Tensor x, h0, c0, lengths, out, hn, cn;
  for (const auto& [name, t] : file.tensors) {
    if (name == "input.x")
      x = t;
    else if (name == "input.h0")
      h0 = t;
    else if (name == "input.c0")
      c0 = t;
    else if (name == "input.lengths")
      lengths = t;
    else if (name == "torch.output")
      out = t;
    else if (name == "torch.h_n")
      hn = t;
    else if (name == "torch.c_n")
      cn = t;
    else if (name.rfind("input.", 0) != 0 && name.rfind("torch.", 0) != 0)
      state.emplace_back(name, t);
  }
  m->load_state_dict(state, true);  // strict: every PyTorch name must be one of ours
  m->to(dev);
  m->eval();
  autograd::NoGradGuard no_grad;
  RnnResult r = run_module(m, kind, x.to(dev), h0.defined() ? h0.to(dev) : Tensor(),
                           c0.defined() ? c0.to(dev) : Tensor(), lengths);
  double err = std::max(rel_err(r.output, out), rel_err(r.h_n, hn));
  if (cn.defined()) err = std::max(err, rel_err(r.c_n, cn));
  std::printf("{\"bench\":\"rnn_import\",\"path\":\"%s\",\"max_rel_err\":%.3g}\n", path.c_str(),
              err);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 3 && std::strcmp(argv[1], "--export") == 0) return export_cases(argv[2]);
    if (argc == 3 && std::strcmp(argv[1], "--import") == 0) return import_case(argv[2]);
    if (argc != 1) {
      std::fprintf(stderr, "usage: %s [--export DIR | --import FILE]\n", argv[0]);
      return 2;
    }
    if (!cuda::is_available()) {
      std::printf("{\"bench\":\"lstm\",\"skipped\":\"no GPU\"}\n");
      return 0;
    }
    manual_seed(0);
    for (const LstmCase& c : {LstmCase{512, 1024, 2, 100, 64}, LstmCase{128, 256, 1, 50, 32},
                              LstmCase{256, 512, 2, 128, 64}})
      for (DType dtype : {DType::f32, DType::bf16}) bench_case(c, dtype);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_rnn: %s\n", e.what());
    return 1;
  }
  return 0;
}
