// Recurrent ops on CUDA (cuda_kernels/rnn/) against the CPU reference (cpu_kernels/rnn.cpp, in
// fp64 on the same rounded inputs): outputs, h_n, c_n and every gradient, float32 (TF32 off and
// on) and bfloat16, for LSTM / GRU / RNN with several layers (the wavefront schedule),
// bidirectional, proj_size, lengths, batch_first, dropout (the same Philox masks as the CPU) and
// odd sizes; each algorithm (cuBLAS per step, persistent) forced in turn for the forward and for
// the backward; the persistent backward also against cuBLAS-per-step's gradients and bitwise run
// to run; float16 through float32; float64 refused. Skips without a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ember/dispatch/algo_cache.h"
#include "ember/ember.h"
#include "ember/ops/rnn.h"
#include "ember/tensor/runtime/eager_replay.h"
#include "support/compare.h"

using namespace ember;

namespace {

struct Case {
  const char* name;
  RnnMode mode;
  int64_t layers = 1;
  bool bidirectional = false;
  int64_t proj = 0;
  bool batch_first = false;
  bool lengths = false;
  double dropout = 0;
  int64_t T = 7, B = 5, I = 13, H = 17;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"lstm", RnnMode::lstm},
      {"lstm_3layer_wavefront", RnnMode::lstm, 3, false, 0, false, false, 0, 20, 33, 64, 96},
      {"lstm_2layer_bidirectional_lengths", RnnMode::lstm, 2, true, 0, false, true},
      {"lstm_proj", RnnMode::lstm, 1, false, 7},
      {"lstm_proj_2layer_lengths_wavefront", RnnMode::lstm, 2, false, 5, true, true, 0, 19, 40, 9,
       24},
      {"lstm_dropout_wavefront", RnnMode::lstm, 2, false, 0, false, false, 0.3, 16, 64, 8, 32},
      {"gru", RnnMode::gru},
      {"gru_2layer_bidirectional_batch_first", RnnMode::gru, 2, true, 0, true},
      {"gru_lengths_wavefront", RnnMode::gru, 3, false, 0, false, true, 0, 12, 48, 5, 31},
      {"rnn_tanh_bidirectional_lengths_dropout", RnnMode::rnn_tanh, 2, true, 0, false, true, 0.2},
      {"rnn_relu", RnnMode::rnn_relu, 2},
      {"lstm_batch1", RnnMode::lstm, 1, false, 0, false, false, 0, 9, 1, 3, 8},
  };
  return all;
}

// The persistent backward's plan splits large batches into groups of rows: shapes that take that
// path (uneven groups, several staged tiles per group, the benchmark's CharLM width).
const std::vector<Case>& grouped_cases() {
  static const std::vector<Case> all = {
      {"lstm_charlm_width_lengths", RnnMode::lstm, 2, false, 0, false, true, 0, 6, 64, 16, 512},
      {"gru_bidirectional_odd_batch", RnnMode::gru, 1, true, 0, false, true, 0, 5, 37, 11, 45},
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
  return cfg;
}

using ember::testing::rel_err;

Tensor flat(const RnnResult& r) {
  std::vector<Tensor> parts = {r.output.flatten(), r.h_n.flatten()};
  if (r.c_n.defined()) parts.push_back(r.c_n.flatten());
  return cat(parts, 0);
}

struct Run {
  Tensor out;                 // flat(result), moved to the CPU as f64
  std::vector<Tensor> grads;  // of x, h0, c0 (LSTM), weights; CPU f64
};

// One forward + backward of case c on `device` / `dtype` from the fp64 CPU inputs `base`, rounded
// to `dtype` first (the CPU reference gets the rounded values in fp64).
Run run(const Case& c, const std::vector<Tensor>& base, Device device, DType dtype,
        uint64_t dropout_seed) {
  std::vector<Tensor> v;
  for (const Tensor& t : base)
    v.push_back(t.to(dtype)
                    .to(device, device.is_cpu() ? DType::f64 : dtype)
                    .detach()
                    .set_requires_grad(true));
  size_t at = 2;
  Tensor c0 = c.mode == RnnMode::lstm ? v[at++] : Tensor();
  std::vector<Tensor> weights(v.begin() + long(at), v.end());
  Tensor lengths;
  if (c.lengths) {
    std::vector<double> lens;
    for (int64_t b = 0; b < c.B; ++b) lens.push_back(double(b % 3 == 0 ? c.T : 1 + (b * 5) % c.T));
    lengths = from_vector(lens, {c.B}, TensorOptions(DType::i64));
  }
  Generator gen(device, dropout_seed);
  RnnOptions o;
  o.mode = c.mode;
  o.num_layers = c.layers;
  o.bidirectional = c.bidirectional;
  o.proj_size = c.proj;
  o.batch_first = c.batch_first;
  o.dropout = c.dropout;
  o.generator = &gen;
  RnnResult r = rnn(v[0], weights, v[1], c0, lengths, o);
  CHECK(r.output.device() == device);
  Tensor f = flat(r);
  Generator wgen(Device::cpu(), 5);
  Tensor w = rand(f.sizes(), TensorOptions(DType::f64), &wgen) - 0.5;
  sum(f * w.to(device, f.dtype())).backward();
  Run out;
  out.out = f.detach().to(Device::cpu(), DType::f64);
  for (const Tensor& t : v) {
    REQUIRE(t.grad().defined());
    out.grads.push_back(t.grad().to(Device::cpu(), DType::f64));
  }
  return out;
}

std::vector<Tensor> base_inputs(const Case& c, uint64_t seed) {
  Generator gen(Device::cpu(), seed);
  const RnnConfig cfg = config_of(c);
  const int64_t ld = cfg.num_layers * cfg.num_directions;
  auto u = [&](const Shape& s, double scale) {
    return (rand(s, TensorOptions(DType::f64), &gen) - 0.5) * (2 * scale);
  };
  std::vector<Tensor> v = {u(c.batch_first ? Shape{c.B, c.T, c.I} : Shape{c.T, c.B, c.I}, 1.0),
                           u({ld, c.B, cfg.out_size()}, 0.5)};
  if (c.mode == RnnMode::lstm) v.push_back(u({ld, c.B, c.H}, 0.5));
  const double bound = 1.0 / std::sqrt(double(c.H));
  for (int64_t i = 0; i < cfg.num_weights(); ++i) v.push_back(u(cfg.weight_shape(i), bound));
  return v;
}

// Case c on the GPU with the named forward and backward algorithms forced.
Run run_forced(const Case& c, const std::vector<Tensor>& base, DType dtype, bool tf32,
               const char* forward_algorithm, const char* backward_algorithm) {
  // Restores the TF32 setting also when the run throws.
  struct Tf32Guard {
    bool prev = rnn_allow_tf32();
    explicit Tf32Guard(bool on) { set_rnn_allow_tf32(on); }
    ~Tf32Guard() { set_rnn_allow_tf32(prev); }
  } tf32_guard(tf32);
  dispatch::AlgoSettingsGuard force(dispatch::current_algo_settings()
                                        .force("rnn.forward", forward_algorithm)
                                        .force("rnn.backward", backward_algorithm));
  return run(c, base, Device::cuda(), dtype, 123);
}

void compare(const Case& c, DType dtype, bool tf32, const char* forward_algorithm,
             const char* backward_algorithm = "cublas_steps") {
  CAPTURE(c.name);
  CAPTURE(dtype_name(dtype));
  CAPTURE(tf32);
  CAPTURE(forward_algorithm);
  CAPTURE(backward_algorithm);
  const std::vector<Tensor> base = base_inputs(c, 17);
  const Run ref = run(c, base, Device::cpu(), dtype, 123);
  const Run gpu = run_forced(c, base, dtype, tf32, forward_algorithm, backward_algorithm);
  const double tol = dtype == DType::bf16 ? 3e-2 : tf32 ? 5e-3 : 1e-4;
  CHECK(rel_err(gpu.out, ref.out) <= tol);
  REQUIRE(gpu.grads.size() == ref.grads.size());
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    CAPTURE(i);
    CHECK(rel_err(gpu.grads[i], ref.grads[i]) <= 4 * tol);
  }
}

}  // namespace

TEST_CASE("rnn cuda: cuBLAS-per-step algorithm matches the CPU reference, fp32" *
          doctest::skip(!cuda::is_available())) {
  for (const Case& c : cases()) compare(c, DType::f32, false, "cublas_steps");
  for (const Case& c : grouped_cases()) compare(c, DType::f32, false, "cublas_steps");
}

TEST_CASE("rnn cuda: cuBLAS-per-step algorithm matches the CPU reference, bf16 and TF32" *
          doctest::skip(!cuda::is_available())) {
  for (const Case& c : cases()) {
    compare(c, DType::bf16, false, "cublas_steps");
    compare(c, DType::f32, true, "cublas_steps");
  }
}

TEST_CASE("rnn cuda: persistent algorithm matches the CPU reference" *
          doctest::skip(!cuda::is_available())) {
  int compared = 0;
  for (const Case& c : cases()) {
    if (c.proj > 0) continue;  // the persistent kernel has no projection
    compare(c, DType::f32, false, "persistent");
    compare(c, DType::bf16, false, "persistent");
    ++compared;
  }
  CHECK(compared >= 8);
}

TEST_CASE("rnn cuda: persistent backward matches the CPU reference" *
          doctest::skip(!cuda::is_available())) {
  int compared = 0;
  std::vector<Case> all = cases();
  all.insert(all.end(), grouped_cases().begin(), grouped_cases().end());
  for (const Case& c : all) {
    if (c.proj > 0) continue;  // no projection (the algorithm does not apply)
    compare(c, DType::f32, false, "cublas_steps", "persistent");
    compare(c, DType::bf16, false, "cublas_steps", "persistent");
    ++compared;
  }
  CHECK(compared >= 10);
  // Both directions persistent, and with TF32 allowed (the backward's sums stay fp32).
  compare(cases()[2], DType::f32, false, "persistent", "persistent");
  compare(grouped_cases()[0], DType::bf16, false, "persistent", "persistent");
  compare(grouped_cases()[0], DType::f32, true, "persistent", "persistent");
}

TEST_CASE("rnn cuda: persistent backward agrees with cuBLAS-per-step and is bitwise reproducible" *
          doctest::skip(!cuda::is_available())) {
  std::vector<Case> all = {cases()[2], cases()[7],         cases()[8],
                           cases()[9], grouped_cases()[0], grouped_cases()[1]};
  for (const Case& c : all) {
    CAPTURE(c.name);
    const std::vector<Tensor> base = base_inputs(c, 29);
    const Run steps = run_forced(c, base, DType::f32, false, "cublas_steps", "cublas_steps");
    const Run first = run_forced(c, base, DType::f32, false, "cublas_steps", "persistent");
    const Run second = run_forced(c, base, DType::f32, false, "cublas_steps", "persistent");
    REQUIRE(first.grads.size() == steps.grads.size());
    for (size_t i = 0; i < steps.grads.size(); ++i) {
      CAPTURE(i);
      // The same fp32 math; only the order of the recurrent sums differs.
      CHECK(rel_err(first.grads[i], steps.grads[i]) <= 2e-5);
      CHECK(rel_err(second.grads[i], first.grads[i]) == 0.0);
    }
  }
}

TEST_CASE("rnn cuda: persistent backward refuses a projection" *
          doctest::skip(!cuda::is_available())) {
  const Case& c = cases()[3];
  REQUIRE(c.proj > 0);
  const std::vector<Tensor> base = base_inputs(c, 3);
  CHECK_THROWS_AS(run_forced(c, base, DType::f32, false, "cublas_steps", "persistent"), Error);
}

TEST_CASE("rnn cuda: the cache has both algorithms and picks one that applies" *
          doctest::skip(!cuda::is_available())) {
  for (dispatch::Direction direction :
       {dispatch::Direction::forward, dispatch::Direction::backward}) {
    const std::vector<std::string> names = rnn_slot(direction, DeviceType::CUDA).names();
    CHECK(std::find(names.begin(), names.end(), "cublas_steps") != names.end());
    CHECK(std::find(names.begin(), names.end(), "persistent") != names.end());
  }
  // Benchmark mode times both on a small problem and keeps a working choice.
  dispatch::AlgoModeGuard bench(dispatch::AlgoMode::benchmark);
  Case c{"small", RnnMode::lstm, 1, false, 0, false, false, 0, 10, 4, 8, 32};
  const std::vector<Tensor> base = base_inputs(c, 3);
  const Run ref = run(c, base, Device::cpu(), DType::f32, 1);
  set_rnn_allow_tf32(false);
  const Run gpu = run(c, base, Device::cuda(), DType::f32, 1);
  set_rnn_allow_tf32(true);
  CHECK(rel_err(gpu.out, ref.out) <= 1e-4);
}

TEST_CASE("rnn cuda: dtypes: float16 runs through float32, float64 is refused" *
          doctest::skip(!cuda::is_available())) {
  Case c{"lstm", RnnMode::lstm};
  const std::vector<Tensor> base = base_inputs(c, 7);
  const Run ref = run(c, base, Device::cpu(), DType::f16, 1);
  const Run gpu = run(c, base, Device::cuda(), DType::f16, 1);
  CHECK(rel_err(gpu.out, ref.out) <= 1e-2);
  Tensor x = zeros({3, 2, 4}, TensorOptions(DType::f64).with_device(Device::cuda()));
  std::vector<Tensor> w = {zeros({8, 4}, TensorOptions(DType::f64).with_device(Device::cuda())),
                           zeros({8, 2}, TensorOptions(DType::f64).with_device(Device::cuda()))};
  RnnOptions o;
  o.bias = false;
  try {
    (void)rnn(x, w, Tensor(), Tensor(), Tensor(), o);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.status() == Status::not_supported);
    CHECK(std::string(e.what()).find("float64") != std::string::npos);
  }
}

// The heuristic (no timing) ranks by the cost models fitted to bench_rnn's forced timings on a
// 132-SM GPU: cuBLAS-per-step for the 512->1024 and 256->512 forwards and for the f32 256->512
// backward; persistent for the small 128->256 backward (the measured winners; numbers in
// docs/perf-notes.md). Shapes of bench/rnn.cpp; on another GPU the plans (units per block)
// differ, so only an H100/H200-sized chip is checked.
TEST_CASE("rnn cuda: the heuristic's cost models rank the measured winner first" *
          doctest::skip(!cuda::is_available())) {
  if (cuda::device_properties(0).sm_count != 132) {
    MESSAGE("not checked: the cost models were fitted on a 132-SM GPU");
    return;
  }
  // The cache's own pick in heuristic mode (no timing), not a re-derivation of it.
  dispatch::AlgoModeGuard heuristic(dispatch::AlgoMode::heuristic);
  auto pick = [](dispatch::Direction direction, DType dtype, int64_t in, int64_t hidden,
                 int64_t layers, int64_t T, int64_t B) {
    RnnProblem p;
    p.direction = direction;
    p.dtype = dtype;
    p.config.mode = RnnMode::lstm;
    p.config.num_layers = layers;
    p.config.input_size = in;
    p.config.hidden_size = hidden;
    p.config.seq_len = T;
    p.config.batch = B;
    p.input = empty({T, B, in}, dtype, Device::cuda());
    return dispatch::algo_cache().choose(rnn_slot(direction, DeviceType::CUDA), rnn_key(p), p).name;
  };
  using dispatch::Direction;
  CHECK(pick(Direction::forward, DType::f32, 512, 1024, 2, 100, 64) == "cublas_steps");
  CHECK(pick(Direction::forward, DType::bf16, 256, 512, 2, 128, 64) == "cublas_steps");
  CHECK(pick(Direction::forward, DType::f32, 128, 256, 1, 50, 32) == "cublas_steps");
  CHECK(pick(Direction::backward, DType::f32, 512, 1024, 2, 100, 64) == "cublas_steps");
  CHECK(pick(Direction::backward, DType::f32, 256, 512, 2, 128, 64) == "cublas_steps");
  CHECK(pick(Direction::backward, DType::bf16, 256, 512, 2, 128, 64) == "persistent");
  CHECK(pick(Direction::backward, DType::f32, 128, 256, 1, 50, 32) == "persistent");
}

TEST_CASE(
    "rnn cuda: an eager call on the same buffers replays its launches from a CUDA graph, "
    "bitwise equal to running them directly" *
    doctest::skip(!cuda::is_available())) {
  struct ReplayGuard {
    bool prev = cuda::eager_replay_enabled();
    ~ReplayGuard() { cuda::set_eager_replay(prev); }
  } restore;
  // The wavefront schedule over four streams, a bidirectional stack with lengths, and the
  // persistent kernels (cooperative launches) in both directions.
  struct Forced {
    Case c;
    const char* forward;
    const char* backward;
    DType dtype;
  };
  const std::vector<Forced> all = {{cases()[1], "cublas_steps", "cublas_steps", DType::f32},
                                   {cases()[2], "cublas_steps", "cublas_steps", DType::bf16},
                                   {grouped_cases()[0], "persistent", "persistent", DType::f32}};
  for (const Forced& f : all) {
    CAPTURE(f.c.name);
    CAPTURE(f.forward);
    cuda::clear_eager_replay();  // earlier tests may have left this problem's buffers seen once
    const std::vector<Tensor> base = base_inputs(f.c, 41);
    cuda::set_eager_replay(false);
    const Run direct = run_forced(f.c, base, f.dtype, false, f.forward, f.backward);
    cuda::set_eager_replay(true);
    const cuda::EagerReplayStats before = cuda::eager_replay_stats();
    // Each run allocates the same tensors in the same order after the last one freed its own, so
    // the caching allocator hands out the same buffers: seen, captured, then replayed.
    for (int i = 0; i < 4; ++i) {
      CAPTURE(i);
      const Run again = run_forced(f.c, base, f.dtype, false, f.forward, f.backward);
      CHECK(rel_err(again.out, direct.out) == 0.0);
      REQUIRE(again.grads.size() == direct.grads.size());
      for (size_t g = 0; g < direct.grads.size(); ++g)
        CHECK(rel_err(again.grads[g], direct.grads[g]) == 0.0);
      // Seen once: run directly, nothing captured yet.
      if (i == 0) CHECK(cuda::eager_replay_stats().captures == before.captures);
    }
    const cuda::EagerReplayStats after = cuda::eager_replay_stats();
    CHECK(after.failures == before.failures);
    CHECK(after.captures - before.captures >= 2);  // the forward and the backward
    CHECK(after.replays - before.replays >= 4);  // ... each replayed in the last two runs at least
  }
}

TEST_CASE("rnn cuda: eager replay leaves a problem with dropout to direct launches" *
          doctest::skip(!cuda::is_available())) {
  const cuda::EagerReplayStats before = cuda::eager_replay_stats();
  // Dropout draws new Philox offsets every call: never replayed, however often it runs.
  const Case& c = cases()[5];
  REQUIRE(c.dropout > 0);
  const std::vector<Tensor> base = base_inputs(c, 43);
  for (int i = 0; i < 3; ++i)
    run_forced(c, base, DType::f32, false, "cublas_steps", "cublas_steps");
  const cuda::EagerReplayStats after = cuda::eager_replay_stats();
  CHECK(after.captures == before.captures);
  CHECK(after.replays == before.replays);
}
