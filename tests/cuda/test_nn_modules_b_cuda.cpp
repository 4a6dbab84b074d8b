// CUDA vs CPU for the nn breadth kernels: embedding_bag (every mode, offsets with empty bags,
// 2-D input, include_last_offset, padding_idx, per_sample_weights; rows of 1 to 257 features,
// zero and one bag, non-contiguous weights, f32/f64/f16/bf16; deterministic mode bitwise
// repeatable) and ctc_loss (repeated labels, empty targets and inputs, zero_infinity,
// concatenated targets, extended label sequences too long for shared memory; f32/f64). Every
// case skips without a GPU.
#include <doctest/doctest.h>

#include <optional>
#include <tuple>
#include <vector>

#include "ember/dispatch/algo_cache.h"
#include "ember/ember.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "support/compare.h"
#include "support/gpu_parity.h"

using namespace ember;
using ember::testing::check_gpu_parity;
using ember::testing::cpu_f64;
using ember::testing::gpu_randn;
using ember::testing::parity_tolerance;
using ember::testing::rel_err;

namespace {
const Device kGpu = Device::cuda(0);

Tensor random_indices(int64_t n, int64_t high, uint64_t seed) {
  Generator gen(Device::cpu(), seed);
  return randint(0, high, {n}, TensorOptions(DType::i64), &gen);
}
Tensor i64(std::vector<double> v) {
  const int64_t n = int64_t(v.size());
  return from_vector(v, {n}, TensorOptions(DType::i64));
}
// Bags of random sizes (some empty) over n entries, as offsets.
Tensor random_offsets(int64_t n, int64_t bags, uint64_t seed) {
  Tensor cuts = std::get<0>(random_indices(bags, n + 1, seed).sort());
  std::vector<double> v = cuts.to_vector();
  if (!v.empty()) v[0] = 0;
  return from_vector(v, {bags}, TensorOptions(DType::i64));
}

struct BagCase {
  int64_t rows, dim, n, bags;
  EmbeddingBagMode mode;
  bool two_d = false, last_offset = false;
  std::optional<int64_t> padding_idx;
};

BagCase bag(int64_t rows, int64_t dim, int64_t n, int64_t bags, EmbeddingBagMode mode,
            bool two_d = false, bool last_offset = false,
            std::optional<int64_t> padding_idx = std::nullopt) {
  return BagCase{rows, dim, n, bags, mode, two_d, last_offset, padding_idx};
}

EmbeddingBagParams params_on(const BagCase& c, const Tensor& offsets, Device d) {
  EmbeddingBagParams p;
  p.mode = c.mode;
  p.padding_idx = c.padding_idx;
  p.include_last_offset = c.last_offset;
  if (!c.two_d) p.offsets = offsets.to(d);
  return p;
}
}  // namespace

TEST_CASE("embedding_bag: CUDA matches the CPU over modes, forms and awkward shapes" *
          doctest::skip(!cuda::is_available())) {
  using M = EmbeddingBagMode;
  std::vector<BagCase> cases;
  for (M mode : {M::sum, M::mean, M::max})
    for (int64_t dim : {1, 3, 33, 130, 257}) {
      cases.push_back(bag(20, dim, 40, 7, mode));
      cases.push_back(bag(20, dim, 36, 6, mode, true));
    }
  cases.push_back(bag(9, 8, 0, 3, M::mean));              // no entries: every bag empty
  cases.push_back(bag(9, 8, 5, 1, M::max));               // one bag
  cases.push_back(bag(9, 8, 5, 0, M::sum, false, true));  // include_last_offset, zero bags
  cases.push_back(bag(12, 16, 30, 5, M::sum, false, true));
  cases.push_back(bag(12, 16, 30, 5, M::mean, false, false, 3));
  cases.push_back(bag(12, 16, 30, 5, M::max, true, false, -2));
  cases.push_back(bag(1000, 64, 1 << 15, 1000, M::mean));
  int seed = 0;
  for (const BagCase& c : cases)
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      CAPTURE(c.dim);
      CAPTURE(c.n);
      CAPTURE(embedding_bag_mode_name(c.mode));
      CAPTURE(dtype_name(dt));
      ++seed;
      const int64_t bags = c.two_d ? c.bags : c.bags + (c.last_offset ? 1 : 0);
      Tensor idx = c.two_d ? random_indices(c.n, c.rows, seed).reshape({c.bags, -1})
                           : random_indices(c.n, c.rows, seed);
      Tensor offsets = c.two_d ? Tensor() : random_offsets(c.n, bags, seed + 1000);
      if (c.last_offset && bags > 0)
        offsets.select(0, bags - 1).fill_(double(std::max<int64_t>(c.n - 1, 0)));
      // Non-contiguous weight: the transpose of a [dim, rows] tensor.
      auto f = [&](const Tensor& wt) {
        const Device d = wt.device();
        return embedding_bag(idx.to(d), wt.t(), params_on(c, offsets, d));
      };
      check_gpu_parity(f, gpu_randn({c.dim, c.rows}, dt), parity_tolerance(dt));
    }
}

TEST_CASE("embedding_bag: per_sample_weights gradients match the CPU" *
          doctest::skip(!cuda::is_available())) {
  for (int64_t dim : {1, 40, 300})
    for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
      CAPTURE(dim);
      const Tensor idx = random_indices(50, 11, uint64_t(dim));
      const Tensor offsets = random_offsets(50, 8, uint64_t(dim) + 7);
      const Tensor weight = gpu_randn({11, dim}, dt), psw = gpu_randn({50}, dt);
      auto run = [&](const Tensor& w, const Tensor& s) {
        EmbeddingBagParams p;
        p.mode = EmbeddingBagMode::sum;
        p.offsets = offsets.to(w.device());
        p.per_sample_weights = s;
        p.padding_idx = 4;
        return embedding_bag(idx.to(w.device()), w, p);
      };
      check_gpu_parity(
          [&](const Tensor& s) { return run(s.device() == kGpu ? weight : cpu_f64(weight), s); },
          psw, parity_tolerance(dt));
      check_gpu_parity(
          [&](const Tensor& w) { return run(w, w.device() == kGpu ? psw : cpu_f64(psw)); }, weight,
          parity_tolerance(dt));
    }
}

TEST_CASE("embedding_bag: deterministic mode repeats bitwise and matches the CPU" *
          doctest::skip(!cuda::is_available())) {
  dispatch::AlgoModeGuard deterministic(dispatch::AlgoMode::deterministic);
  const Tensor idx = random_indices(1 << 16, 97, 5);
  const Tensor offsets = random_offsets(1 << 16, 3000, 6);
  for (EmbeddingBagMode mode :
       {EmbeddingBagMode::sum, EmbeddingBagMode::mean, EmbeddingBagMode::max}) {
    CAPTURE(embedding_bag_mode_name(mode));
    const Tensor weight = gpu_randn({97, 24}, DType::f32);
    const Tensor g = gpu_randn({3000, 24}, DType::f32);
    auto grad_of = [&](const Tensor& w0, const Tensor& grad_out) {
      Tensor w = w0.detach().set_requires_grad(true);
      EmbeddingBagParams p;
      p.mode = mode;
      p.offsets = offsets.to(w.device());
      embedding_bag(idx.to(w.device()), w, p).backward(grad_out);
      return w.grad();
    };
    const Tensor first = grad_of(weight, g), second = grad_of(weight, g);
    CHECK(rel_err(first, second) == 0);
    CHECK(rel_err(first, grad_of(cpu_f64(weight), cpu_f64(g))) < 1e-4);
  }
}

TEST_CASE("embedding_bag: an out-of-range index raises at the next sync" *
          doctest::skip(!cuda::is_available())) {
  EmbeddingBagParams p;
  p.offsets = i64({0, 1}).to(kGpu);
  Tensor out = embedding_bag(i64({1, 9}).to(kGpu), gpu_randn({5, 4}, DType::f32), p);
  CHECK_THROWS_AS(cuda::synchronize(0), Error);
  cuda::synchronize(0);
}

// ---- ctc_loss ----------------------------------------------------------------------------------

namespace {
struct CtcCase {
  int64_t T, N, C;
  std::vector<int64_t> input_lengths, target_lengths;
  bool concatenated = false, zero_infinity = false;
  int64_t blank = 0;
};
// Labels in [0, C) other than blank, with runs of repeats.
Tensor ctc_targets(const CtcCase& c, uint64_t seed) {
  int64_t S = 0, total = 0;
  for (int64_t l : c.target_lengths) {
    S = std::max(S, l);
    total += l;
  }
  const int64_t n = c.concatenated ? total : c.N * std::max<int64_t>(S, 1);
  Tensor t = random_indices(n, c.C - 1, seed);
  t = t + (t >= double(c.blank)).to(DType::i64);  // skip blank
  for (int64_t i = 1; i < n; i += 5) t.select(0, i).copy_(t.select(0, i - 1));
  return c.concatenated ? t : t.reshape({c.N, -1});
}
}  // namespace

TEST_CASE("ctc_loss: CUDA matches the CPU (values and gradients)" *
          doctest::skip(!cuda::is_available())) {
  std::vector<CtcCase> cases = {
      {1, 1, 2, {1}, {1}},
      {6, 3, 5, {6, 5, 4}, {3, 2, 0}},
      {6, 3, 5, {6, 0, 4}, {3, 0, 2}, true},
      {50, 4, 20, {50, 31, 17, 1}, {10, 7, 0, 1}, false, false, 7},
      {40, 2, 6, {40, 3}, {5, 9}, false, true},  // sample 1 cannot align: zero_infinity
      {3400, 1, 4, {3400}, {1600}},              // 3201 extended labels: beyond shared memory
      {300, 2, 600, {300, 280}, {100, 90}, true},
  };
  int seed = 100;
  for (const CtcCase& c : cases)
    for (DType dt : {DType::f32, DType::f64}) {
      CAPTURE(c.T);
      CAPTURE(c.C);
      CAPTURE(dtype_name(dt));
      const Tensor targets = ctc_targets(c, uint64_t(++seed));
      for (LossReduction r : {LossReduction::none, LossReduction::mean}) {
        auto f = [&](const Tensor& x) {
          CtcLossParams p;
          p.reduction = r;
          p.zero_infinity = c.zero_infinity;
          p.blank = c.blank;
          return ctc_loss(log_softmax(x, 2), targets.to(x.device()), c.input_lengths,
                          c.target_lengths, p);
        };
        const double tol = dt == DType::f32 ? 1e-3 : 1e-9;
        check_gpu_parity(f, gpu_randn({c.T, c.N, c.C}, dt, 2.0), tol);
      }
    }
}

TEST_CASE("ctc_loss: the raw log_probs gradient matches the CPU, zero past input lengths" *
          doctest::skip(!cuda::is_available())) {
  const CtcCase c{12, 3, 7, {12, 8, 5}, {4, 3, 2}};
  const Tensor targets = ctc_targets(c, 3);
  auto f = [&](const Tensor& lp) {
    CtcLossParams p;
    p.reduction = LossReduction::sum;
    return ctc_loss(lp, targets.to(lp.device()), c.input_lengths, c.target_lengths, p);
  };
  const Tensor lp = log_softmax(gpu_randn({12, 3, 7}, DType::f64), 2);
  check_gpu_parity(f, lp, 1e-9);
}
