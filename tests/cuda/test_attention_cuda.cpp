// CUDA tests of the attention kernels (cuda_kernels/attention/) through the kernel interface
// (kernel_interface/attention.h): every CUDA algorithm of the "attention" slots, forced in turn
// where it applies, against the CPU algorithm in fp32 (fp64 for f64) on the same rounded inputs:
// forward output and lse, backward grad_q / grad_k / grad_v, over odd lengths, Tq != Tk, head
// dims 32 to 256, bool and additive masks broadcast over batch and heads (with fully masked
// rows), causal top-left and bottom-right, GQA and MQA, variable-length batches, dropout (the
// keep rule is shared, so masks agree bit for bit), and q/k/v given as transposed [B, T, H, D]
// views. Also: the heuristic's choice, deterministic mode's choice and bitwise repeatability, and
// a CUDA graph capture of forward + backward with dropout replaying the eager results. Skips
// without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "ember/dispatch/algo_cache.h"
#include "ember/ember.h"
#include "ember/kernel_interface/attention.h"
#include "ember/tensor/runtime/cuda_graph.h"
#include "support/compare.h"

using namespace ember;
using dispatch::Direction;
using ember::testing::rel_err;

namespace {

const Device kGpu = Device::cuda();

// additive_native: the additive mask in q's dtype (on the CPU: its rounded values in fp32).
enum class MaskKind { none, bool_rows, bool_keys, additive, additive_native };

// One attention problem family: padded unless lens_q is given (variable-length batch).
struct Spec {
  int64_t batch = 2, hq = 2, hkv = 2, tq = 7, tk = 7, d = 64;
  DType dtype = DType::bf16;
  MaskKind mask = MaskKind::none;
  bool causal = false, bottom_right = false;
  double dropout = 0;
  std::vector<int64_t> lens_q, lens_k;
  bool transposed = false;  // q, k, v (and grad_out) as [B, T, H, D] tensors transposed
  bool varlen() const { return !lens_q.empty(); }
};

std::string describe(const Spec& s) {
  std::string r = std::string(dtype_name(s.dtype)) + " B" + std::to_string(s.batch) + " Hq" +
                  std::to_string(s.hq) + " Hkv" + std::to_string(s.hkv) + " Tq" +
                  std::to_string(s.tq) + " Tk" + std::to_string(s.tk) + " D" + std::to_string(s.d);
  if (s.causal) r += s.bottom_right ? " causal-br" : " causal-tl";
  if (s.mask != MaskKind::none) r += " mask" + std::to_string(int(s.mask));
  if (s.dropout > 0) r += " dropout";
  if (s.varlen()) r += " varlen";
  if (s.transposed) r += " transposed";
  return r;
}

// The reference dtype: the CPU computes the 16-bit problems in fp32 on the same rounded values.
DType cpu_dtype(DType d) { return d == DType::f64 ? DType::f64 : DType::f32; }

double out_tolerance(DType d) {
  switch (d) {
    case DType::bf16:
      return 2.5e-2;
    case DType::f16:
      return 5e-3;
    case DType::f32:
      return 1e-4;
    default:
      return 1e-10;
  }
}
// f64 gradients read the forward's lse, which is f32 on both backends: P = exp(s - lse) then
// carries lse's rounding, and the CPU may round it differently by one ulp.
double grad_tolerance(DType d) { return d == DType::f64 ? 1e-6 : 2 * out_tolerance(d); }
double lse_tolerance(DType d) { return std::max(out_tolerance(d), 1e-6); }

// The inputs, as exact values (rounded to the spec's dtype) in the reference dtype on the CPU.
struct Inputs {
  Tensor q, k, v, grad_out, mask;  // q/k/v/grad_out: [B, H, T, D] or [total, H, D]
  std::vector<int32_t> cu_q, cu_k;
};

Tensor rounded_randn(const Shape& shape, DType dtype) {
  return randn(shape, TensorOptions(DType::f32)).to(dtype).to(cpu_dtype(dtype));
}

Inputs make_inputs(const Spec& s, uint64_t seed) {
  manual_seed(seed);
  Inputs in;
  if (s.varlen()) {
    int64_t total_q = 0, total_k = 0;
    in.cu_q = {0};
    in.cu_k = {0};
    for (size_t b = 0; b < s.lens_q.size(); ++b) {
      total_q += s.lens_q[b];
      total_k += s.lens_k[b];
      in.cu_q.push_back(int32_t(total_q));
      in.cu_k.push_back(int32_t(total_k));
    }
    in.q = rounded_randn({total_q, s.hq, s.d}, s.dtype);
    in.k = rounded_randn({total_k, s.hkv, s.d}, s.dtype);
    in.v = rounded_randn({total_k, s.hkv, s.d}, s.dtype);
    in.grad_out = rounded_randn({total_q, s.hq, s.d}, s.dtype);
    return in;
  }
  in.q = rounded_randn({s.batch, s.hq, s.tq, s.d}, s.dtype);
  in.k = rounded_randn({s.batch, s.hkv, s.tk, s.d}, s.dtype);
  in.v = rounded_randn({s.batch, s.hkv, s.tk, s.d}, s.dtype);
  in.grad_out = rounded_randn({s.batch, s.hq, s.tq, s.d}, s.dtype);
  std::mt19937 rng{static_cast<unsigned>(seed)};
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> m;
  switch (s.mask) {
    case MaskKind::none:
      break;
    case MaskKind::bool_rows:  // [1, 1, Tq, Tk]; query row 0 sees no key
      for (int64_t i = 0; i < s.tq; ++i)
        for (int64_t j = 0; j < s.tk; ++j) m.push_back(i != 0 && u(rng) < 0.7 ? 1 : 0);
      in.mask = from_vector(m, {1, 1, s.tq, s.tk}, TensorOptions(DType::boolean));
      break;
    case MaskKind::bool_keys:  // [B, 1, 1, Tk] key padding: batch b keeps Tk - 3 b keys
      for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t j = 0; j < s.tk; ++j) m.push_back(j < s.tk - 3 * b ? 1 : 0);
      in.mask = from_vector(m, {s.batch, 1, 1, s.tk}, TensorOptions(DType::boolean));
      break;
    case MaskKind::additive:  // [1, Hq, Tq, Tk] f32; query row 1 all -inf
    case MaskKind::additive_native:
      for (int64_t h = 0; h < s.hq; ++h)
        for (int64_t i = 0; i < s.tq; ++i)
          for (int64_t j = 0; j < s.tk; ++j)
            m.push_back(i == 1 ? -INFINITY : (u(rng) < 0.2 ? -INFINITY : 2 * u(rng) - 1));
      in.mask = from_vector(m, {1, s.hq, s.tq, s.tk}, TensorOptions(DType::f32));
      if (s.mask == MaskKind::additive_native) in.mask = in.mask.to(s.dtype).to(DType::f32);
      break;
  }
  return in;
}

// An input on `device` in `dtype`; transposed specs get a [B, H, T, D] view of a dense
// [B, T, H, D] tensor.
Tensor place(const Tensor& x, const Spec& s, Device device, DType dtype) {
  if (s.transposed && x.dim() == 4)
    return x.transpose(1, 2).contiguous().to(device, dtype).transpose(1, 2);
  return x.to(device, dtype).contiguous();
}

constexpr uint64_t kSeed = 0x5eed1234abcdull;

// The forward problem of `s` on `device` in `dtype`, with fresh outputs.
AttentionProblem forward_problem(const Spec& s, const Inputs& in, Device device, DType dtype) {
  AttentionProblem p;
  p.direction = Direction::forward;
  p.q = place(in.q, s, device, dtype);
  p.k = place(in.k, s, device, dtype);
  p.v = place(in.v, s, device, dtype);
  if (s.varlen()) {
    std::vector<double> cq(in.cu_q.begin(), in.cu_q.end()), ck(in.cu_k.begin(), in.cu_k.end());
    p.cu_seqlens_q = from_vector(cq, {int64_t(cq.size())}, TensorOptions(DType::i32)).to(device);
    p.cu_seqlens_k = from_vector(ck, {int64_t(ck.size())}, TensorOptions(DType::i32)).to(device);
    for (size_t b = 0; b < s.lens_q.size(); ++b) {
      p.max_seqlen_q = std::max(p.max_seqlen_q, s.lens_q[b]);
      p.max_seqlen_k = std::max(p.max_seqlen_k, s.lens_k[b]);
    }
    const int64_t total_q = p.q.size(0);
    p.out = empty({total_q, s.hq, s.d}, dtype, device);
    p.lse = empty({s.hq, total_q}, DType::f32, device);
  } else {
    p.out = empty({s.batch, s.hq, s.tq, s.d}, dtype, device);
    p.lse = empty({s.batch, s.hq, s.tq}, DType::f32, device);
    if (in.mask.defined()) {
      const DType mask_dtype = in.mask.dtype() == DType::boolean     ? DType::boolean
                               : s.mask == MaskKind::additive_native ? dtype
                                                                     : DType::f32;
      Tensor m = in.mask.to(device, mask_dtype);
      p.mask = m.expand({s.batch, s.hq, s.tq, s.tk});
    }
  }
  p.causal = s.causal;
  p.causal_offset = s.bottom_right ? s.tk - s.tq : 0;
  p.scale = 1.0 / std::sqrt(double(s.d));
  p.dropout_p = s.dropout;
  p.philox = PhiloxState{kSeed, 8, nullptr};
  return p;
}

// The backward problem reading the forward `f`'s out and lse, with fresh gradients.
AttentionProblem backward_problem(const Spec& s, const Inputs& in, const AttentionProblem& f) {
  AttentionProblem p = f;
  p.direction = Direction::backward;
  p.grad_out = place(in.grad_out, s, f.q.device(), f.q.dtype());
  p.grad_q = empty(f.q.sizes(), f.q.dtype(), f.q.device());
  p.grad_k = empty(f.k.sizes(), f.k.dtype(), f.k.device());
  p.grad_v = empty(f.v.sizes(), f.v.dtype(), f.v.device());
  return p;
}

// Runs `p` with the slot's algorithm `name` forced (or the cache's choice when empty).
void run_forced(const AttentionProblem& p, const std::string& name) {
  if (name.empty()) {
    attention_run(p);
    return;
  }
  const auto& slot = attention_slot(p.direction, DeviceType::CUDA);
  dispatch::AlgoSettingsGuard guard(dispatch::current_algo_settings().force(slot.name(), name));
  attention_run(p);
}

// lse: the same rows are -inf, the finite ones agree within `tol` (absolute, lse is O(log T)).
void check_lse(const Tensor& gpu, const Tensor& cpu, double tol) {
  const std::vector<double> a = gpu.to_vector(), b = cpu.to_vector();
  REQUIRE(a.size() == b.size());
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool ia = std::isinf(a[i]) && a[i] < 0, ib = std::isinf(b[i]) && b[i] < 0;
    if (ia != ib || (!ib && !(std::abs(a[i] - b[i]) <= tol * std::max(1.0, std::abs(b[i]))))) {
      if (bad++ < 3) INFO("lse[" << i << "] gpu " << a[i] << " cpu " << b[i]);
      CHECK(false);
    }
  }
}

// Every CUDA algorithm that applies, forward then backward, against the CPU.
void check_spec(const Spec& s) {
  CAPTURE(describe(s));
  const Inputs in = make_inputs(s, 1234 + uint64_t(s.tq * 131 + s.tk * 7 + s.d));
  AttentionProblem cpu_f = forward_problem(s, in, Device::cpu(), cpu_dtype(s.dtype));
  attention_run(cpu_f);
  AttentionProblem cpu_b = backward_problem(s, in, cpu_f);
  attention_run(cpu_b);

  int forward_ran = 0, backward_ran = 0;
  const auto& fslot = attention_slot(Direction::forward, DeviceType::CUDA);
  for (const std::string& name : fslot.names()) {
    AttentionProblem f = forward_problem(s, in, kGpu, s.dtype);
    const auto& algo = fslot.get<AttentionProblem>(fslot.find(name));
    if (algo.applies && !algo.applies(f)) continue;
    CAPTURE(name);
    run_forced(f, name);
    CHECK(rel_err(f.out, cpu_f.out) <= out_tolerance(s.dtype));
    check_lse(f.lse, cpu_f.lse, lse_tolerance(s.dtype));
    ++forward_ran;
  }
  const auto& bslot = attention_slot(Direction::backward, DeviceType::CUDA);
  AttentionProblem gpu_f = forward_problem(s, in, kGpu, s.dtype);
  attention_run(gpu_f);
  for (const std::string& name : bslot.names()) {
    AttentionProblem b = backward_problem(s, in, gpu_f);
    const auto& algo = bslot.get<AttentionProblem>(bslot.find(name));
    if (algo.applies && !algo.applies(b)) continue;
    CAPTURE(name);
    run_forced(b, name);
    CHECK(rel_err(b.grad_q, cpu_b.grad_q) <= grad_tolerance(s.dtype));
    CHECK(rel_err(b.grad_k, cpu_b.grad_k) <= grad_tolerance(s.dtype));
    CHECK(rel_err(b.grad_v, cpu_b.grad_v) <= grad_tolerance(s.dtype));
    ++backward_ran;
  }
  CHECK(forward_ran >= 1);
  CHECK(backward_ran >= 1);
}

bool bitwise_equal(const Tensor& a, const Tensor& b) { return a.to_vector() == b.to_vector(); }

using LengthPairs = std::vector<std::pair<int64_t, int64_t>>;

}  // namespace

TEST_CASE("attention CUDA: head dims, odd and unequal lengths, every algorithm" *
          doctest::skip(!cuda::is_available())) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (int64_t d : {32, 64, 80, 96, 128, 256}) {
      for (const auto& [tq, tk] : LengthPairs{{1, 1}, {7, 7}, {33, 130}, {130, 33}}) {
        Spec s;
        s.dtype = dtype;
        s.d = d;
        s.tq = tq;
        s.tk = tk;
        check_spec(s);
      }
    }
  }
  for (DType dtype : {DType::f32, DType::f64}) {
    Spec s;
    s.dtype = dtype;
    s.d = 40;
    s.tq = 33;
    s.tk = 17;
    s.causal = true;
    s.mask = MaskKind::bool_rows;
    check_spec(s);
  }
}

TEST_CASE("attention CUDA: causal, masks, GQA, MQA" * doctest::skip(!cuda::is_available())) {
  for (int64_t d : {64, 128}) {
    for (const auto& [tq, tk] : LengthPairs{{7, 7}, {33, 130}, {130, 33}, {130, 130}}) {
      for (bool bottom_right : {false, true}) {
        Spec s;
        s.d = d;
        s.tq = tq;
        s.tk = tk;
        s.causal = true;
        s.bottom_right = bottom_right;
        check_spec(s);
      }
    }
    for (MaskKind mask : {MaskKind::bool_rows, MaskKind::bool_keys, MaskKind::additive,
                          MaskKind::additive_native}) {
      Spec s;
      s.d = d;
      s.tq = 33;
      s.tk = 130;
      s.mask = mask;
      check_spec(s);
      s.causal = true;  // both: the mask and the causal rule
      s.dtype = DType::f16;
      check_spec(s);
    }
    for (const auto& [hq, hkv] : LengthPairs{{8, 2}, {4, 1}}) {
      Spec s;
      s.d = d;
      s.hq = hq;
      s.hkv = hkv;
      s.tq = 70;
      s.tk = 130;
      check_spec(s);
      s.causal = true;
      s.bottom_right = true;
      check_spec(s);
    }
  }
}

TEST_CASE("attention CUDA: variable-length batches, dropout, transposed inputs" *
          doctest::skip(!cuda::is_available())) {
  for (int64_t d : {64, 128, 80}) {
    for (bool causal : {false, true}) {
      Spec s;
      s.d = d;
      s.batch = 3;
      s.hq = 4;
      s.hkv = 2;
      s.lens_q = {1, 17, 64};
      s.lens_k = {64, 1, 17};
      s.tq = 64;
      s.tk = 64;
      s.causal = causal;
      check_spec(s);
      s.lens_k = {1, 17, 64};
      s.dropout = 0.25;
      check_spec(s);
    }
    for (bool causal : {false, true}) {
      Spec s;
      s.d = d;
      s.tq = 130;
      s.tk = 33;
      s.causal = causal;
      s.dropout = 0.3;
      check_spec(s);
      s.transposed = true;
      s.dropout = 0;
      check_spec(s);
    }
  }
}

TEST_CASE("attention CUDA: the heuristic picks flash where it applies, reference elsewhere" *
          doctest::skip(!cuda::is_available())) {
  Spec s;
  s.tq = 130;
  s.tk = 130;
  const Inputs in = make_inputs(s, 7);
  AttentionProblem f = forward_problem(s, in, kGpu, DType::bf16);
  CHECK(attention_choose(f).name == "flash");
  CHECK(attention_choose(backward_problem(s, in, f)).name == "flash_atomic_dq");
  Spec odd = s;
  odd.d = 80;
  const Inputs in_odd = make_inputs(odd, 7);
  CHECK(attention_choose(forward_problem(odd, in_odd, kGpu, DType::bf16)).name == "reference");
  CHECK(attention_choose(forward_problem(s, in, kGpu, DType::f32)).name == "reference");
}

TEST_CASE("attention CUDA: deterministic mode picks a deterministic backward, bitwise repeatable" *
          doctest::skip(!cuda::is_available())) {
  for (int64_t d : {64, 80}) {
    Spec s;
    s.d = d;
    s.hq = 4;
    s.hkv = 2;
    s.tq = 130;
    s.tk = 130;
    s.causal = true;
    s.dropout = 0.1;
    CAPTURE(describe(s));
    const Inputs in = make_inputs(s, 11);
    dispatch::AlgoModeGuard mode(dispatch::AlgoMode::deterministic);
    AttentionProblem f = forward_problem(s, in, kGpu, s.dtype);
    attention_run(f);
    AttentionProblem b1 = backward_problem(s, in, f), b2 = backward_problem(s, in, f);
    const auto& slot = attention_slot(Direction::backward, DeviceType::CUDA);
    const std::string chosen = attention_choose(b1).name;
    CAPTURE(chosen);
    CHECK(slot.algorithm_deterministic(slot.find(chosen)));
    attention_run(b1);
    attention_run(b2);
    CHECK(bitwise_equal(b1.grad_q, b2.grad_q));
    CHECK(bitwise_equal(b1.grad_k, b2.grad_k));
    CHECK(bitwise_equal(b1.grad_v, b2.grad_v));
  }
}

TEST_CASE("attention CUDA: forward + backward with dropout captured in a graph replays eager" *
          doctest::skip(!cuda::is_available())) {
  for (int64_t d : {64, 80}) {  // flash and reference
    Spec s;
    s.d = d;
    s.tq = 70;
    s.tk = 130;
    s.causal = true;
    s.bottom_right = true;
    s.dropout = 0.2;
    CAPTURE(describe(s));
    const Inputs in = make_inputs(s, 21);
    Stream stream = new_stream(kGpu);
    StreamGuard stream_guard(stream);
    Generator& gen = default_generator(kGpu);
    const uint64_t increment = uint64_t((s.tk + 3) / 4 * 4);

    AttentionProblem ef = forward_problem(s, in, kGpu, s.dtype);
    AttentionProblem eb = backward_problem(s, in, ef);
    AttentionProblem cf = forward_problem(s, in, kGpu, s.dtype);
    AttentionProblem cb = backward_problem(s, in, cf);
    gen.set_offset(4096);
    ef.philox = eb.philox = gen.reserve(increment);
    attention_run(ef);
    attention_run(eb);
    // Run the captured problems once eagerly (cache entries, workspace, kernel attributes).
    cf.philox = cb.philox = gen.reserve(increment);
    attention_run(cf);
    attention_run(cb);
    stream.synchronize();

    cuda::Graph graph;
    {
      cuda::GraphCapture capture(graph, kGpu);
      cf.philox = cb.philox = gen.reserve(increment);
      CHECK(cf.philox.device_offset != nullptr);
      attention_run(cf);
      attention_run(cb);
      capture.end();
    }
    gen.set_offset(4096);  // the replay draws what the eager run drew
    graph.replay();
    stream.synchronize();
    CHECK(bitwise_equal(cf.out, ef.out));
    CHECK(bitwise_equal(cf.lse, ef.lse));
    CHECK(bitwise_equal(cb.grad_k, eb.grad_k));
    CHECK(bitwise_equal(cb.grad_v, eb.grad_v));
    // dQ through fp32 atomics (flash_atomic_dq) may differ in the last bits between runs.
    CHECK(rel_err(cb.grad_q, eb.grad_q) <= 1e-2);
    // A second replay draws a new mask.
    graph.replay();
    stream.synchronize();
    CHECK(!bitwise_equal(cf.out, ef.out));
  }
}
