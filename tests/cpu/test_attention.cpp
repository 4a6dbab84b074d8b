// scaled_dot_product_attention on the CPU (ops/attention.h, cpu_kernels/attention.cpp): forward
// values against a naive composition of existing ops (matmul, masked softmax, matmul) in f32 and
// f64, against values computed with libtorch 1.13.1, fp64 gradchecks of query, key and value over
// every feature (masks, causal alignments, grouped-query heads, variable-length batches, dropout at
// a fixed generator state), dropout's reproducibility and rate, fully masked rows, and the error
// messages of bad input. The op table rows (support/op_table_attention.cpp) are run here too.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/ops/attention.h"
#include "ember/ops/elementwise_more.h"
#include "ember/ops/shape_more.h"
#include "support/op_table.h"

namespace ember::testing {
const std::vector<OpCase>& op_cases_attention();
}

using namespace ember;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TensorOptions f64() { return TensorOptions(DType::f64); }

Tensor uniform(const Shape& s, uint64_t seed, DType dtype = DType::f64) {
  Generator gen(Device::cpu(), seed);
  return rand(s, f64(), &gen).mul(2.0).sub(1.0).to(dtype);
}

// The attention written with existing differentiable ops: the reference for the fused op.
// `mask`: undefined, bool (true = attend) or additive; `group`: query heads per key/value head.
Tensor naive(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
             AttentionCausal causal, double scale, int64_t group = 1) {
  Tensor kk = group > 1 ? repeat_interleave(k, group, -3) : k;
  Tensor vv = group > 1 ? repeat_interleave(v, group, -3) : v;
  Tensor s = matmul(q, kk.transpose(-2, -1)).mul(scale);
  const int64_t L = q.size(-2), S = k.size(-2);
  Tensor visible;
  if (causal != AttentionCausal::none) {
    const int64_t diagonal = causal == AttentionCausal::bottom_right ? S - L : 0;
    visible = eq(tril(ones({L, S}, TensorOptions(q.dtype())), diagonal), 1.0);
  }
  if (mask.defined() && mask.dtype() == DType::boolean) visible = mask;
  if (mask.defined() && mask.dtype() != DType::boolean) s = s + mask.to(q.dtype());
  if (visible.defined()) s = where(visible, s, -kInf);
  Tensor p = nan_to_num(softmax(s, -1), 0.0);  // a row with no visible key gives 0
  return matmul(p, vv);
}

double max_difference(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to(DType::f64).to_vector(), y = b.to(DType::f64).to_vector();
  REQUIRE(x.size() == y.size());
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Cumulative sequence lengths, int32.
Tensor offsets(const std::vector<double>& v) {
  return from_vector(v, {int64_t(v.size())}, TensorOptions(DType::i32));
}

Tensor bool_from(const std::vector<int>& values, const Shape& s) {
  return from_vector(std::vector<double>(values.begin(), values.end()), s, f64())
      .to(DType::boolean);
}

struct Config {
  const char* name;
  Shape q, k, v;
  AttentionCausal causal = AttentionCausal::none;
  int mask = 0;  // 0 none, 1 bool [1, S] per row broadcast (over batch, heads), 2 additive [L, S]
  bool gqa = false;
  std::optional<double> scale = std::nullopt;
};

std::vector<Config> configs() {
  using C = AttentionCausal;
  return {
      {"plain", {2, 3, 5, 8}, {2, 3, 6, 8}, {2, 3, 6, 8}},
      {"3d", {2, 4, 3}, {2, 7, 3}, {2, 7, 5}},
      {"2d", {4, 3}, {5, 3}, {5, 2}},
      {"5d", {2, 2, 2, 3, 4}, {2, 2, 2, 5, 4}, {2, 2, 2, 5, 4}},
      {"T1", {1, 2, 1, 8}, {1, 2, 1, 8}, {1, 2, 1, 8}},
      {"D1", {2, 1, 3, 1}, {2, 1, 4, 1}, {2, 1, 4, 1}},
      {"odd", {1, 2, 7, 3}, {1, 2, 7, 3}, {1, 2, 7, 3}, C::top_left},
      {"scale", {1, 2, 3, 8}, {1, 2, 4, 8}, {1, 2, 4, 8}, C::none, 0, false, 0.7},
      {"bool_mask", {2, 3, 4, 8}, {2, 3, 5, 8}, {2, 3, 5, 8}, C::none, 1},
      {"additive_mask", {2, 3, 4, 8}, {2, 3, 5, 8}, {2, 3, 5, 8}, C::none, 2},
      {"causal_L<S", {1, 2, 3, 8}, {1, 2, 6, 8}, {1, 2, 6, 8}, C::top_left},
      {"causal_L>S", {1, 2, 6, 8}, {1, 2, 3, 8}, {1, 2, 3, 8}, C::top_left},
      {"bottom_right_L<S", {1, 2, 3, 8}, {1, 2, 6, 8}, {1, 2, 6, 8}, C::bottom_right},
      {"bottom_right_L>S", {1, 2, 6, 8}, {1, 2, 3, 8}, {1, 2, 3, 8}, C::bottom_right},
      {"gqa", {2, 4, 3, 8}, {2, 2, 5, 8}, {2, 2, 5, 8}, C::none, 0, true},
      {"mqa_causal", {1, 4, 5, 3}, {1, 1, 5, 3}, {1, 1, 5, 3}, C::top_left, 0, true},
      {"gqa_bool_mask", {1, 4, 4, 8}, {1, 2, 5, 8}, {1, 2, 5, 8}, C::none, 1, true},
  };
}

Tensor mask_for(const Config& c, DType dtype) {
  const int64_t L = c.q[c.q.size() - 2], S = c.k[c.k.size() - 2];
  if (c.mask == 1) {
    // [L, S], row 1 fully masked when L > 1: broadcast over batch and heads.
    std::vector<int> m(size_t(L * S));
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) m[size_t(i * S + j)] = (i == 1) ? 0 : (i + j) % 3 != 0;
    return bool_from(m, {L, S});
  }
  if (c.mask == 2) return uniform({L, S}, 77, dtype).mul(2.0);
  return Tensor();
}

Tensor run_config(const Config& c, const Tensor& q, const Tensor& k, const Tensor& v) {
  AttentionOptions o;
  o.attn_mask = mask_for(c, q.dtype());
  o.causal = c.causal;
  o.scale = c.scale;
  o.enable_gqa = c.gqa;
  return std::get<0>(scaled_dot_product_attention_with_lse(q, k, v, o));
}

Tensor naive_config(const Config& c, const Tensor& q, const Tensor& k, const Tensor& v) {
  const double scale = c.scale.value_or(1.0 / std::sqrt(double(q.size(-1))));
  const int64_t group = q.dim() >= 4 ? q.size(-3) / k.size(-3) : 1;
  return naive(q, k, v, mask_for(c, q.dtype()), c.causal, scale, group);
}

}  // namespace

TEST_CASE("attention: forward matches the naive composition (f64, f32)") {
  for (const Config& c : configs()) {
    CAPTURE(c.name);
    for (DType dtype : {DType::f64, DType::f32}) {
      CAPTURE(dtype_name(dtype));
      Tensor q = uniform(c.q, 1, dtype), k = uniform(c.k, 2, dtype), v = uniform(c.v, 3, dtype);
      Tensor out = run_config(c, q, k, v);
      Tensor ref = naive_config(c, q, k, v);
      CHECK(out.sizes() == ref.sizes());
      CHECK(out.dtype() == dtype);
      CHECK(max_difference(out, ref) < (dtype == DType::f64 ? 1e-12 : 2e-6));
    }
  }
}

TEST_CASE("attention: bf16 and f16 compute in higher precision") {
  const Config c = configs()[8];  // bool mask
  for (DType dtype : {DType::bf16, DType::f16}) {
    Tensor q = uniform(c.q, 1), k = uniform(c.k, 2), v = uniform(c.v, 3);
    Tensor out = run_config(c, q.to(dtype), k.to(dtype), v.to(dtype));
    CHECK(out.dtype() == dtype);
    Tensor ref = naive_config(c, q.to(dtype).to(DType::f64), k.to(dtype).to(DType::f64),
                              v.to(dtype).to(DType::f64));
    CHECK(max_difference(out, ref) < (dtype == DType::bf16 ? 1e-2 : 2e-3));
  }
}

TEST_CASE("attention: transposed [B, T, H, D] inputs are taken as they are") {
  Tensor q = uniform({2, 5, 3, 8}, 1).transpose(1, 2), k = uniform({2, 6, 3, 8}, 2).transpose(1, 2);
  Tensor v = uniform({2, 6, 3, 8}, 3).transpose(1, 2);
  Tensor out = scaled_dot_product_attention(q, k, v, {}, 0.0, true);
  Tensor ref = naive(q, k, v, {}, AttentionCausal::top_left, 1.0 / std::sqrt(8.0));
  CHECK(max_difference(out, ref) < 1e-12);
}

TEST_CASE("attention: lse is the log-sum-exp of the scaled, masked scores") {
  Tensor q = uniform({2, 3, 4, 8}, 1), k = uniform({2, 3, 5, 8}, 2), v = uniform({2, 3, 5, 8}, 3);
  Tensor mask = bool_from({1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 1, 1, 1}, {4, 5});
  auto [out, lse] = scaled_dot_product_attention_with_lse(
      q, k, v, AttentionOptions().with_mask(mask).with_scale(0.5));
  CHECK(lse.sizes() == Shape{2, 3, 4});
  CHECK(lse.dtype() == DType::f32);
  Tensor s = where(mask, matmul(q, k.transpose(-2, -1)).mul(0.5), -kInf);
  const std::vector<double> expect = s.logsumexp({-1}).to_vector(), got = lse.to_vector();
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(expect[i])) {
      CHECK(got[i] == -kInf);  // row 1: no visible key
    } else {
      CHECK(got[i] == doctest::Approx(expect[i]).epsilon(1e-6));
    }
  }
}

// Reference values from libtorch 1.13.1 (CPU, float64): softmax(q k^T / sqrt(2) + causal) v for
// q = arange(12).reshape(1, 2, 3, 2) / 10 - 0.5, k = cos(arange(16)).reshape(1, 2, 4, 2),
// v = sin(arange(16)).reshape(1, 2, 4, 2), causal top-left.
TEST_CASE("attention: libtorch reference values") {
  std::vector<double> qv(12), kv(16), vv(16);
  for (int i = 0; i < 12; ++i) qv[size_t(i)] = i / 10.0 - 0.5;
  for (int i = 0; i < 16; ++i) kv[size_t(i)] = std::cos(double(i));
  for (int i = 0; i < 16; ++i) vv[size_t(i)] = std::sin(double(i));
  Tensor q = from_vector(qv, {1, 2, 3, 2}, f64()), k = from_vector(kv, {1, 2, 4, 2}, f64());
  Tensor v = from_vector(vv, {1, 2, 4, 2}, f64());
  Tensor out = scaled_dot_product_attention(q, k, v, {}, 0.0, true);
  const std::vector<double> expect = {0,
                                      0.8414709848078965,
                                      0.56958881044334264,
                                      0.40276735718263418,
                                      0.047808002209537181,
                                      -0.024901567472275288,
                                      0.98935824662338179,
                                      0.41211848524175659,
                                      0.17984388890891112,
                                      -0.33337365605954472,
                                      -0.24606082851946592,
                                      0.10484998821580027};
  const std::vector<double> got = out.to_vector();
  REQUIRE(got.size() == expect.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(expect[i]).epsilon(1e-9));
}

TEST_CASE("attention: fp64 gradcheck of query, key and value") {
  for (const Config& c : configs()) {
    CAPTURE(c.name);
    std::vector<Tensor> inputs = {uniform(c.q, 1), uniform(c.k, 2), uniform(c.v, 3)};
    for (Tensor& t : inputs) t.set_requires_grad(true);
    std::string report;
    const bool ok = autograd::gradcheck(
        [&](const std::vector<Tensor>& x) { return run_config(c, x[0], x[1], x[2]); }, inputs, 1e-6,
        1e-5, 1e-4, &report);
    CHECK_MESSAGE(ok, report);
  }
}

TEST_CASE("attention: the op table rows pass gradcheck, contiguous and transposed") {
  for (const auto& c : ember::testing::op_cases_attention()) {
    CAPTURE(c.name);
    for (bool transposed : {false, true}) {
      CAPTURE(transposed);
      std::vector<Tensor> inputs;
      uint64_t seed = 10;
      for (const Shape& s : c.shapes) {
        // Transposed: reversed strides, as the generic suite's Layout::transposed.
        Shape reversed(s.rbegin(), s.rend()), dims;
        for (int64_t d = int64_t(s.size()) - 1; d >= 0; --d) dims.push_back(d);
        Tensor t = transposed ? uniform(reversed, seed).permute(dims) : uniform(s, seed);
        ++seed;
        t.set_requires_grad(true);
        inputs.push_back(t);
      }
      std::string report;
      const bool ok = autograd::gradcheck(c.fn, inputs, 1e-6, 1e-5, 1e-4, &report);
      CHECK_MESSAGE(ok, report);
    }
  }
}

TEST_CASE("attention: gradients of larger problems match the naive composition's") {
  // Several row blocks per head and several threads; a key-padding mask [B, 1, 1, S].
  struct Big {
    Shape q, k;
    AttentionCausal causal;
    bool key_padding;
  };
  const std::vector<Big> cases = {
      {{2, 4, 37, 16}, {2, 2, 45, 16}, AttentionCausal::bottom_right, false},
      {{2, 4, 45, 16}, {2, 1, 37, 16}, AttentionCausal::top_left, false},
      {{3, 2, 40, 8}, {3, 2, 33, 8}, AttentionCausal::none, true},
  };
  for (const Big& c : cases) {
    CAPTURE(c.q);
    Tensor q = uniform(c.q, 1).mul(2.0), k = uniform(c.k, 2).mul(2.0), v = uniform(c.k, 3);
    Tensor mask;
    if (c.key_padding) {
      const int64_t B = c.k[0], S = c.k[2];
      std::vector<int> m(size_t(B * S));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < S; ++j) m[size_t(b * S + j)] = j < S - 5 * b;
      mask = bool_from(m, {B, 1, 1, S});
    }
    Tensor weight = uniform({c.q[0], c.q[1], c.q[2], c.k[3]}, 4);
    std::vector<Tensor> fused_grads, naive_grads;
    for (bool fused : {true, false}) {
      std::vector<Tensor> x = {q.clone(), k.clone(), v.clone()};
      for (Tensor& t : x) t.set_requires_grad(true);
      const double scale = 1.0 / std::sqrt(double(c.q[3]));
      Tensor out = fused ? std::get<0>(scaled_dot_product_attention_with_lse(
                               x[0], x[1], x[2],
                               AttentionOptions().with_mask(mask).with_causal(c.causal).with_gqa()))
                         : naive(x[0], x[1], x[2], mask, c.causal, scale, c.q[1] / c.k[1]);
      out.mul(weight).sum().backward();
      for (Tensor& t : x) (fused ? fused_grads : naive_grads).push_back(t.grad());
    }
    for (size_t i = 0; i < 3; ++i) CHECK(max_difference(fused_grads[i], naive_grads[i]) < 1e-12);
  }
}

TEST_CASE("attention: empty batches, queries and value dims") {
  Tensor q0 = zeros({0, 2, 3, 4}, f64()), k0 = zeros({0, 2, 5, 4}, f64());
  CHECK(scaled_dot_product_attention(q0, k0, k0).sizes() == Shape{0, 2, 3, 4});
  Tensor q = uniform({1, 2, 0, 4}, 1), k = uniform({1, 2, 5, 4}, 2);
  q.set_requires_grad(true);
  k.set_requires_grad(true);
  Tensor out = scaled_dot_product_attention(q, k, k);
  CHECK(out.sizes() == Shape{1, 2, 0, 4});
  out.sum().backward();
  CHECK(k.grad().abs().sum().item() == 0);
  // Ev = 0: an empty output, and the lse is still computed.
  auto [o, lse] = scaled_dot_product_attention_with_lse(
      uniform({1, 1, 2, 3}, 1), uniform({1, 1, 4, 3}, 2), zeros({1, 1, 4, 0}, f64()));
  CHECK(o.sizes() == Shape{1, 1, 2, 0});
  CHECK(std::isfinite(lse.to_vector()[0]));
}

TEST_CASE("attention: varlen equals per-sequence attention, bottom-right causal") {
  const std::vector<int64_t> lq = {1, 5, 3}, lk = {2, 4, 6};
  const int64_t Hq = 4, Hkv = 2, E = 3, Ev = 5, tq = 9, tk = 12;
  Tensor q = uniform({tq, Hq, E}, 1), k = uniform({tk, Hkv, E}, 2), v = uniform({tk, Hkv, Ev}, 3);
  Tensor cu_q = offsets({0, 1, 6, 9});
  Tensor cu_k = offsets({0, 2, 6, 12});
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    Tensor out = scaled_dot_product_attention_varlen(q, k, v, cu_q, cu_k, 5, 6, 0.0, causal);
    CHECK(out.sizes() == Shape{tq, Hq, Ev});
    int64_t sq = 0, sk = 0;
    for (size_t b = 0; b < lq.size(); ++b) {
      // [len, H, E] -> [1, H, len, E]
      auto seq = [](const Tensor& t, int64_t start, int64_t len) {
        return t.narrow(0, start, len).transpose(0, 1).unsqueeze(0);
      };
      Tensor ref = naive(seq(q, sq, lq[b]), seq(k, sk, lk[b]), seq(v, sk, lk[b]), {},
                         causal ? AttentionCausal::bottom_right : AttentionCausal::none,
                         1.0 / std::sqrt(double(E)), Hq / Hkv);
      CHECK(max_difference(seq(out, sq, lq[b]), ref) < 1e-12);
      sq += lq[b];
      sk += lk[b];
    }
    // gradcheck over the packed tensors (int64 offsets are accepted too).
    std::vector<Tensor> inputs = {q.clone(), k.clone(), v.clone()};
    for (Tensor& t : inputs) t.set_requires_grad(true);
    Tensor cu_q64 = cu_q.to(DType::i64), cu_k64 = cu_k.to(DType::i64);
    std::string report;
    const bool ok = autograd::gradcheck(
        [&](const std::vector<Tensor>& x) {
          return scaled_dot_product_attention_varlen(x[0], x[1], x[2], cu_q64, cu_k64, 5, 6, 0.0,
                                                     causal);
        },
        inputs, 1e-6, 1e-5, 1e-4, &report);
    CHECK_MESSAGE(ok, report);
  }
}

TEST_CASE("attention: varlen rows outside every sequence output 0 and get 0 gradients") {
  Tensor q = uniform({5, 1, 4}, 1), k = uniform({4, 1, 4}, 2), v = uniform({4, 1, 4}, 3);
  q.set_requires_grad(true);
  k.set_requires_grad(true);
  Tensor cu_q = offsets({0, 3});
  Tensor cu_k = offsets({0, 2});
  Tensor out = scaled_dot_product_attention_varlen(q, k, v, cu_q, cu_k, 3, 2);
  out.sum().backward();
  CHECK(out.narrow(0, 3, 2).abs().sum().item() == 0);
  CHECK(q.grad().narrow(0, 3, 2).abs().sum().item() == 0);
  CHECK(k.grad().narrow(0, 2, 2).abs().sum().item() == 0);
}

TEST_CASE("attention: a fully masked row outputs 0 and passes no gradient") {
  Tensor q = uniform({1, 2, 3, 4}, 1), k = uniform({1, 2, 3, 4}, 2), v = uniform({1, 2, 3, 4}, 3);
  for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
  Tensor mask = bool_from({1, 1, 0, 0, 0, 0, 1, 0, 1}, {3, 3});  // row 1 sees nothing
  Tensor out = scaled_dot_product_attention(q, k, v, mask);
  CHECK(out.select(2, 1).abs().sum().item() == 0);
  // Only row 1 gets a gradient: the others' gradients then are all zero.
  Tensor weight = zeros({1, 2, 3, 4}, f64());
  weight.select(2, 1).fill_(1.0);
  out.mul(weight).sum().backward();
  CHECK(q.grad().abs().sum().item() == 0);
  CHECK(k.grad().abs().sum().item() == 0);
  CHECK(v.grad().abs().sum().item() == 0);
  // An additive mask of -inf does the same, and the lse says -inf.
  Tensor additive = where(mask, 0.0, -kInf);
  auto [out2, lse] = scaled_dot_product_attention_with_lse(q.detach(), k.detach(), v.detach(),
                                                           AttentionOptions().with_mask(additive));
  CHECK(out2.select(2, 1).abs().sum().item() == 0);
  CHECK(lse.select(2, 1).to_vector() == std::vector<double>{-kInf, -kInf});
  // No key at all (S = 0): zeros, as PyTorch's math backend.
  Tensor k0 = zeros({1, 2, 0, 4}, f64());
  Tensor empty_out = scaled_dot_product_attention(q.detach(), k0, k0);
  CHECK(empty_out.sizes() == Shape{1, 2, 3, 4});
  CHECK(empty_out.abs().sum().item() == 0);
}

TEST_CASE("attention: dropout is reproducible from the generator state and drops about p") {
  // q = 0: every probability is 1 / S; v = identity: out[i, j] = keep(i, j) / (S (1 - p)).
  const int64_t H = 4, L = 64, S = 64;
  const double p = 0.3;
  Tensor q = zeros({1, H, L, 8}, f64()), k = uniform({1, H, S, 8}, 2);
  Tensor v = eye(S, f64()).expand({1, H, S, S});
  Generator gen(Device::cpu(), 1234);
  auto run = [&] {
    return std::get<0>(scaled_dot_product_attention_with_lse(
        q, k, v, AttentionOptions().with_dropout(p).with_generator(&gen)));
  };
  Tensor a = run();
  gen.manual_seed(1234);
  Tensor b = run();
  Tensor c = run();  // the generator moved on: another mask
  CHECK(max_difference(a, b) == 0);
  CHECK(max_difference(a, c) > 0);
  const std::vector<double> values = a.to_vector();
  int64_t dropped = 0;
  for (double x : values) {
    if (x == 0) {
      ++dropped;
    } else {
      CHECK(x == doctest::Approx(1.0 / (double(S) * (1 - p))));
    }
  }
  CHECK(double(dropped) / double(values.size()) == doctest::Approx(p).epsilon(0.07));
  // The kept entries are attention_dropout_keep's, at the state the op reserved (offset 0).
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < S; ++j)
        CHECK(attention_dropout_keep(1234, 0, uint64_t(h), uint64_t(i), uint64_t(j), float(p)) ==
              (values[size_t((h * L + i) * S + j)] != 0));
  // p = 1 drops everything.
  Tensor none = std::get<0>(scaled_dot_product_attention_with_lse(
      q, k, v, AttentionOptions().with_dropout(1.0).with_generator(&gen)));
  CHECK(none.abs().sum().item() == 0);
}

TEST_CASE("attention: gradcheck with dropout at a fixed generator state") {
  std::vector<Tensor> inputs = {uniform({2, 2, 5, 3}, 1), uniform({2, 2, 6, 3}, 2),
                                uniform({2, 2, 6, 4}, 3)};
  for (Tensor& t : inputs) t.set_requires_grad(true);
  for (AttentionCausal causal : {AttentionCausal::none, AttentionCausal::bottom_right}) {
    std::string report;
    const bool ok = autograd::gradcheck(
        [&](const std::vector<Tensor>& x) {
          Generator gen(Device::cpu(), 99);  // the same mask at every call
          return std::get<0>(scaled_dot_product_attention_with_lse(
              x[0], x[1], x[2],
              AttentionOptions().with_dropout(0.4).with_causal(causal).with_generator(&gen)));
        },
        inputs, 1e-6, 1e-5, 1e-4, &report);
    CHECK_MESSAGE(ok, report);
  }
  // Through the default generator, re-seeded inside the function; varlen too.
  Tensor cu = offsets({0, 2, 5});
  std::vector<Tensor> packed = {uniform({5, 2, 3}, 4), uniform({5, 1, 3}, 5),
                                uniform({5, 1, 3}, 6)};
  for (Tensor& t : packed) t.set_requires_grad(true);
  std::string report;
  const bool ok = autograd::gradcheck(
      [&](const std::vector<Tensor>& x) {
        default_generator(Device::cpu()).manual_seed(7);
        return scaled_dot_product_attention_varlen(x[0], x[1], x[2], cu, cu, 3, 3, 0.3, true);
      },
      packed, 1e-6, 1e-5, 1e-4, &report);
  CHECK_MESSAGE(ok, report);
}

TEST_CASE("attention: a second-order gradient raises an Error") {
  Tensor q = uniform({1, 1, 2, 3}, 1), k = uniform({1, 1, 2, 3}, 2), v = uniform({1, 1, 2, 3}, 3);
  q.set_requires_grad(true);
  Tensor out = scaled_dot_product_attention(q, k, v);
  std::vector<Tensor> g = autograd::grad({out.sum()}, {q}, {}, true, true);
  const std::string message = error_of([&] { g[0].sum().backward(); });
  CHECK(message.find("scaled_dot_product_attention") != std::string::npos);
}

TEST_CASE("attention: bad input raises Errors that say what is wrong") {
  Tensor q = uniform({2, 3, 4, 8}, 1), k = uniform({2, 3, 5, 8}, 2), v = uniform({2, 3, 5, 8}, 3);
  auto sdpa_error = [&](const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& mask = {},
                        bool causal = false, bool gqa = false) {
    return error_of(
        [&] { scaled_dot_product_attention(a, b, c, mask, 0.0, causal, std::nullopt, gqa); });
  };
  auto has = [](const std::string& message, std::vector<std::string> parts) {
    for (const std::string& part : parts)
      if (message.find(part) == std::string::npos) {
        INFO(message);
        INFO(part);
        return false;
      }
    return true;
  };
  CHECK(has(sdpa_error(q, uniform({2, 3, 5, 7}, 2), v),
            {"scaled_dot_product_attention", "head", "[2, 3, 4, 8]", "[2, 3, 5, 7]"}));
  CHECK(has(sdpa_error(q, k, uniform({2, 3, 6, 8}, 3)), {"sequence length", "[2, 3, 6, 8]"}));
  CHECK(has(sdpa_error(q, uniform({1, 3, 5, 8}, 2), uniform({1, 3, 5, 8}, 3)),
            {"batch", "[1, 3, 5, 8]"}));
  CHECK(has(sdpa_error(q, uniform({2, 1, 5, 8}, 2), uniform({2, 1, 5, 8}, 3)),
            {"3 heads", "enable_gqa"}));
  CHECK(has(sdpa_error(q, uniform({2, 2, 5, 8}, 2), uniform({2, 2, 5, 8}, 3), {}, false, true),
            {"multiple", "enable_gqa"}));
  CHECK(has(sdpa_error(q, k, v, ones({3, 5}, f64())), {"attn_mask", "[3, 5]", "[2, 3, 4, 5]"}));
  CHECK(has(sdpa_error(q, k, v, ones({4, 5}, f64()), true), {"not both"}));
  CHECK(has(sdpa_error(q, k.to(DType::f32), v), {"dtype", "float64", "float32"}));
  CHECK(
      has(sdpa_error(q.to(DType::i64), k.to(DType::i64), v.to(DType::i64)), {"int64", "floating"}));
  CHECK(has(sdpa_error(q, k, v, ones({4, 5}, TensorOptions(DType::i32))), {"attn_mask", "int32"}));
  CHECK(has(error_of([&] { scaled_dot_product_attention(q, k, v, {}, 1.5); }), {"dropout_p"}));
  CHECK(has(sdpa_error(q.select(0, 0).select(0, 0), k, v), {"rank"}));
  // varlen
  Tensor pq = uniform({6, 2, 4}, 1), pk = uniform({6, 2, 4}, 2);
  Tensor cu = offsets({0, 2, 6});
  auto varlen_error = [&](const Tensor& cq, const Tensor& ck, int64_t mq, int64_t mk) {
    return error_of([&] { scaled_dot_product_attention_varlen(pq, pk, pk, cq, ck, mq, mk); });
  };
  CHECK(has(varlen_error(cu, cu, 3, 4), {"scaled_dot_product_attention_varlen", "max_seqlen_q"}));
  CHECK(has(varlen_error(offsets({0, 4, 2}), cu, 4, 4), {"decrease"}));
  CHECK(has(varlen_error(cu, offsets({0, 2, 7}), 4, 5), {"beyond"}));
  CHECK(has(varlen_error(cu.to(DType::f32), cu, 4, 4), {"cu_seqlens_q", "float32", "int32"}));
  CHECK(has(error_of([&] {
              scaled_dot_product_attention_varlen(uniform({6, 3, 4}, 1), pk, pk, cu, cu, 4, 4);
            }),
            {"multiple"}));
}

TEST_CASE("attention: the CPU slots hold the reference algorithm; the key tells problems apart") {
  AttentionProblem p;
  p.q = uniform({1, 2, 3, 4}, 1);
  p.k = uniform({1, 2, 5, 4}, 2);
  p.v = uniform({1, 2, 5, 4}, 3);
  p.out = empty({1, 2, 3, 4}, DType::f64);
  p.lse = empty({1, 2, 3}, DType::f32);
  CHECK(attention_choose(p).name == "reference");
  const dispatch::AlgoKey plain = attention_key(p);
  AttentionProblem causal = p;
  causal.causal = true;
  AttentionProblem masked = p;
  masked.mask = bool_from({1, 0, 1, 1, 1}, {1, 1, 1, 5}).expand({1, 2, 3, 5});
  AttentionProblem per_head = p;
  per_head.mask = bool_from(std::vector<int>(10, 1), {1, 2, 1, 5}).expand({1, 2, 3, 5});
  AttentionProblem dropped = p;
  dropped.dropout_p = 0.1;
  CHECK(attention_key(causal) != plain);
  CHECK(attention_key(masked) != plain);
  CHECK(attention_key(masked) != attention_key(per_head));
  CHECK(attention_key(dropped) != plain);
  CHECK(attention_key(p) == plain);
}

TEST_CASE("attention: results do not depend on the thread count") {
  Tensor q = uniform({2, 4, 40, 8}, 1), k = uniform({2, 2, 50, 8}, 2),
         v = uniform({2, 2, 50, 8}, 3);
  const int threads = get_num_threads();
  std::vector<std::vector<double>> results;
  for (int n : {1, 4}) {
    default_generator(Device::cpu()).manual_seed(3);
    set_num_threads(n);
    std::vector<Tensor> x = {q.clone(), k.clone(), v.clone()};
    for (Tensor& t : x) t.set_requires_grad(true);
    Tensor out = std::get<0>(scaled_dot_product_attention_with_lse(
        x[0], x[1], x[2],
        AttentionOptions()
            .with_causal(AttentionCausal::bottom_right)
            .with_gqa()
            .with_dropout(0.2)
            .with_generator(&default_generator(Device::cpu()))));
    out.sum().backward();
    std::vector<double> all = out.to_vector();
    for (const Tensor& t : x) {
      const std::vector<double> g = t.grad().to_vector();
      all.insert(all.end(), g.begin(), g.end());
    }
    results.push_back(all);
  }
  set_num_threads(threads);
  CHECK(results[0] == results[1]);
}
