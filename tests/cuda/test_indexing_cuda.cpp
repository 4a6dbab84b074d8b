// CUDA vs CPU for the indexing ops of ops/indexing.h: x.index / index_put_ with every index kind
// over awkward shapes (empty, one element, non-contiguous, broadcast index tensors, separated
// advanced indices), accumulation with duplicate indices in f32 / bf16 / i64, nonzero and
// masked_select on large masks, the scatter and index families; deterministic mode giving
// bitwise-identical repeated accumulations; out-of-range indices raising ember::Error at the next
// sync point. Every case skips without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ember/dispatch/algo_cache.h"
#include "ember/ember.h"
#include "ember/tensor/runtime/cuda_device.h"

using namespace ember;
using namespace ember::indexing;

namespace {
const Device kGpu = Device::cuda(0);

// Integer-valued data (exact in bf16 up to 256) so moved values compare bit for bit.
Tensor values(Shape s, DType d, uint64_t seed) {
  Generator gen(Device::cpu(), seed);
  return randint(-100, 100, s, TensorOptions(DType::f32), &gen).to(d);
}
Tensor indices(Shape s, int64_t high, uint64_t seed, int64_t low = 0) {
  Generator gen(Device::cpu(), seed);
  return randint(low, high, s, TensorOptions(DType::i64), &gen);
}
Tensor bool_mask(Shape s, uint64_t seed, double p = 0.5) {
  Generator gen(Device::cpu(), seed);
  return rand(s, TensorOptions(DType::f32), &gen) < full({}, p);
}
// The same index list with every tensor moved to the GPU.
std::vector<TensorIndex> on_gpu(const std::vector<TensorIndex>& ix) {
  std::vector<TensorIndex> out;
  for (const TensorIndex& i : ix)
    out.push_back(i.is_tensor() ? TensorIndex(i.tensor().to(kGpu)) : i);
  return out;
}
void check_same(const Tensor& gpu, const Tensor& cpu, double tol = 0) {
  REQUIRE(gpu.device() == kGpu);
  REQUIRE(gpu.sizes() == cpu.sizes());
  const std::vector<double> a = gpu.to_vector(), b = cpu.to_vector();
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    if (tol == 0)
      REQUIRE(a[i] == b[i]);
    else
      REQUIRE(std::abs(a[i] - b[i]) <= tol * std::max(1.0, std::abs(b[i])));
  }
}
}  // namespace

TEST_CASE("index matches the CPU for every index kind" * doctest::skip(!cuda::is_available())) {
  for (DType dt : {DType::f32, DType::bf16, DType::i64}) {
    CAPTURE(dtype_name(dt));
    const Tensor x = values({5, 6, 7}, dt, 1);
    const Tensor xt = values({7, 6, 5}, dt, 2).permute({2, 1, 0});  // non-contiguous
    const std::vector<std::vector<TensorIndex>> cases = {
        {Slice(), indices({9}, 6, 3)},
        {indices({4}, 5, 4, -5)},                                        // negative indices
        {indices({3, 1}, 5, 5), Slice(1, None, 2), indices({4}, 7, 6)},  // separated, broadcast
        {Slice(), indices({2, 3}, 6, 7), indices({3}, 7, 8)},            // adjacent, broadcast
        {bool_mask({5, 6, 7}, 9)},
        {Ellipsis, bool_mask({6, 7}, 10)},
        {None, 2, bool_mask({6}, 11), Slice(None, None, 3)},
        {indices({1}, 5, 12)},               // one element
        {indices({0}, 5, 13)},               // empty index
        {bool_mask({5}, 14, 0.0)},           // mask with no true element
        {Slice(2, 2), indices({3}, 6, 15)},  // empty slice
    };
    for (size_t k = 0; k < cases.size(); ++k) {
      CAPTURE(k);
      check_same(x.to(kGpu).index(on_gpu(cases[k])), x.index(cases[k]));
      check_same(xt.to(kGpu).index(on_gpu(cases[k])), xt.index(cases[k]));
    }
  }
}

TEST_CASE("index_put_ matches the CPU, accumulating duplicates" *
          doctest::skip(!cuda::is_available())) {
  for (DType dt : {DType::f32, DType::bf16, DType::i64}) {
    CAPTURE(dtype_name(dt));
    const double tol = dt == DType::bf16 ? 1e-2 : 0;
    const Tensor base = values({40, 8}, dt, 20);
    // {indices, whether they may repeat a position (then only accumulate is compared: an
    // overwrite's winner is unspecified)}
    const std::vector<std::pair<std::vector<TensorIndex>, bool>> cases = {
        {{indices({300}, 40, 21)}, true},
        {{indices({50}, 40, 22), indices({50}, 8, 23, -8)}, true},  // two dims, negatives
        {{Slice(), indices({6}, 8, 24)}, true},
        {{Slice(), from_vector({5, -1, 0}, {3}, TensorOptions(DType::i64))}, false},
        {{bool_mask({40, 8}, 25)}, false},
        {{indices({0}, 40, 26)}, false},
    };
    for (size_t k = 0; k < cases.size(); ++k) {
      CAPTURE(k);
      const auto& [ix, repeats] = cases[k];
      for (bool accumulate : {false, true}) {
        if (!accumulate && repeats) continue;
        CAPTURE(accumulate);
        const Tensor v = values(base.index(ix).sizes(), dt, 27 + k);
        Tensor cpu = base.clone(), gpu = base.to(kGpu);
        cpu.index_put_(ix, v, accumulate);
        gpu.index_put_(on_gpu(ix), v.to(kGpu), accumulate);
        check_same(gpu, cpu, tol);
      }
    }
    // Into a non-contiguous view, with broadcast values.
    Tensor cpu = values({8, 40}, dt, 30), gpu = cpu.to(kGpu);
    Tensor cv = cpu.t(), gv = gpu.t();
    const Tensor idx = indices({12}, 40, 31);
    cv.index_put_({idx}, values({1, 8}, dt, 32), true);
    gv.index_put_({idx.to(kGpu)}, values({1, 8}, dt, 32).to(kGpu), true);
    check_same(gpu, cpu, tol);
  }
}

TEST_CASE("deterministic mode accumulates bitwise repeatably" *
          doctest::skip(!cuda::is_available())) {
  dispatch::AlgoModeGuard deterministic(dispatch::AlgoMode::deterministic);
  const Tensor idx = indices({1 << 16}, 97, 40).to(kGpu);
  Generator gen(Device::cpu(), 41);
  const Tensor v = randn({1 << 16, 3}, TensorOptions(DType::f32), &gen).to(kGpu);
  auto run = [&] {
    Tensor out = zeros({97, 3}, TensorOptions(DType::f32).with_device(kGpu));
    out.index_put_({idx}, v, true);
    return out.cpu();
  };
  const Tensor first = run();
  for (int rep = 0; rep < 3; ++rep) CHECK(run().to_vector() == first.to_vector());
  // The backward of index is the same accumulation.
  auto grad = [&] {
    Tensor w = zeros({97, 3}, TensorOptions(DType::f32).with_device(kGpu)).set_requires_grad(true);
    (w.index({idx}) * v).sum().backward();
    return w.grad().cpu();
  };
  const Tensor g0 = grad();
  CHECK(grad().to_vector() == g0.to_vector());
  CHECK(max_abs_diff(g0, first) < 1e-3);
  // Both deterministic variants add in index order, as the CPU does, so they match it bit for
  // bit: the row scan (rows x indices up to 2^24, above) and the sorted runs (beyond it, here).
  const Tensor idx_cpu = idx.cpu(), v_cpu = v.cpu();
  Tensor ref = zeros({97, 3});
  ref.index_put_({idx_cpu}, v_cpu, true);
  CHECK(first.to_vector() == ref.to_vector());
  const Tensor many_idx = indices({1 << 13}, 4096, 42, -4096);
  Generator gen2(Device::cpu(), 43);
  const Tensor many_v = randn({1 << 13, 2}, TensorOptions(DType::f32), &gen2);
  Tensor many_ref = zeros({4096, 2});
  many_ref.index_put_({many_idx}, many_v, true);
  for (int rep = 0; rep < 2; ++rep) {
    Tensor out = zeros({4096, 2}, TensorOptions(DType::f32).with_device(kGpu));
    out.index_put_({many_idx.to(kGpu)}, many_v.to(kGpu), true);
    CHECK(out.cpu().to_vector() == many_ref.to_vector());
  }
}

TEST_CASE("deterministic scatter sums repeat bitwise and match the CPU" *
          doctest::skip(!cuda::is_available())) {
  dispatch::AlgoModeGuard deterministic(dispatch::AlgoMode::deterministic);
  const Tensor index = indices({200, 33}, 64, 44);
  Generator gen(Device::cpu(), 45);
  const Tensor src = randn({200, 33}, TensorOptions(DType::f32), &gen);
  const Tensor base = zeros({64, 33});
  const Tensor ref_add = scatter_add(base, 0, index, src);
  const Tensor ref_sum = base.scatter_reduce(0, index, src, "sum");
  for (int rep = 0; rep < 2; ++rep) {
    const Tensor g = base.to(kGpu);
    CHECK(scatter_add(g, 0, index.to(kGpu), src.to(kGpu)).cpu().to_vector() == ref_add.to_vector());
    CHECK(g.scatter_reduce(0, index.to(kGpu), src.to(kGpu), "sum").cpu().to_vector() ==
          ref_sum.to_vector());
  }
  // take_along_dim's backward is a scatter_add.
  auto grad = [&](Device d) {
    Tensor w = zeros({64, 33}, TensorOptions(DType::f32).with_device(d)).set_requires_grad(true);
    (w.take_along_dim(index.to(d), 0) * src.to(d)).sum().backward();
    return w.grad().cpu();
  };
  CHECK(grad(kGpu).to_vector() == grad(Device::cpu()).to_vector());
}

TEST_CASE("nonzero and masked_select match the CPU on large and empty masks" *
          doctest::skip(!cuda::is_available())) {
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(1000), (int64_t(1) << 20) + 3}) {
    CAPTURE(n);
    const Tensor m = bool_mask({n}, 50, 0.3);
    check_same(m.to(kGpu).nonzero(), m.nonzero());
    const Tensor x = values({n}, DType::f32, 51);
    check_same(x.to(kGpu).masked_select(m.to(kGpu)), x.masked_select(m));
  }
  const Tensor x = values({33, 17}, DType::f32, 52);
  check_same(x.to(kGpu).nonzero(), x.nonzero());          // a float input
  check_same(x.to(kGpu).t().nonzero(), x.t().nonzero());  // non-contiguous
  const Tensor m = bool_mask({17}, 53);                   // broadcast mask
  check_same(x.to(kGpu).masked_select(m.to(kGpu)), x.masked_select(m));
  check_same(zeros({0, 4}).to(kGpu).nonzero(), zeros({0, 4}).nonzero());
}

TEST_CASE("the mask, scatter and index families match the CPU" *
          doctest::skip(!cuda::is_available())) {
  for (DType dt : {DType::f32, DType::bf16, DType::i64}) {
    CAPTURE(dtype_name(dt));
    const double tol = dt == DType::bf16 ? 1e-2 : 0;
    const Tensor x = values({6, 9}, dt, 60), xg = x.to(kGpu);
    const Tensor m = bool_mask({6, 1}, 61), mg = m.to(kGpu);
    check_same(xg.masked_fill(mg, 3.0), x.masked_fill(m, 3.0));
    check_same(xg.t().masked_fill(mg.t(), -1.0), x.t().masked_fill(m.t(), -1.0));
    const Tensor src = values({60}, dt, 62);
    check_same(xg.masked_scatter(mg, src.to(kGpu)), x.masked_scatter(m, src));
    // scatter without duplicates per row; the reductions with duplicates.
    const Tensor perm = from_vector({3, 7, 0, 8, 1, 5, 2, 6, 4}, {1, 9}, TensorOptions(DType::i64))
                            .expand({6, 9})
                            .contiguous();
    const Tensor dup = indices({6, 5}, 9, 64);
    const Tensor s = values({6, 9}, dt, 65);
    check_same(xg.scatter(1, perm.to(kGpu), s.to(kGpu)), x.scatter(1, perm, s));
    check_same(xg.scatter(1, dup.to(kGpu), 2.0), x.scatter(1, dup, 2.0));
    for (const char* r : {"sum", "prod", "amax", "amin"}) {
      CAPTURE(r);
      if (dt == DType::bf16 && std::string(r) == "prod") continue;  // rounding order differs
      const Tensor raw = values({6, 5}, dt, 66);
      const Tensor small = dt == DType::i64 ? raw : div(raw, 50.0);
      check_same(xg.scatter_reduce(1, dup.to(kGpu), small.to(kGpu), r),
                 x.scatter_reduce(1, dup, small, r), dt == DType::i64 ? 0 : 1e-2);
    }
    const Tensor rows = indices({7}, 6, 67);
    const Tensor add_src = values({7, 9}, dt, 68);
    check_same(xg.index_add(0, rows.to(kGpu), add_src.to(kGpu), 2.0),
               x.index_add(0, rows, add_src, 2.0), tol);
    const Tensor distinct = from_vector({4, 0, 2}, {3}, TensorOptions(DType::i64));
    const Tensor copy_src = values({6, 3}, dt, 69);
    check_same(xg.index_copy(1, distinct.to(kGpu), copy_src.to(kGpu)),
               x.index_copy(1, distinct, copy_src));
    check_same(xg.index_fill(1, rows.to(kGpu), 7.0), x.index_fill(1, rows, 7.0));
    const Tensor along = indices({6, 4}, 9, 70);
    check_same(xg.take_along_dim(along.to(kGpu), 1), x.take_along_dim(along, 1));
    check_same(where(mg, 1.0, xg), where(m, 1.0, x));
  }
}

TEST_CASE("out-of-range indices raise ember::Error at the next sync point" *
          doctest::skip(!cuda::is_available())) {
  cuda::synchronize(0);
  const Tensor x = zeros({4, 5}, TensorOptions(DType::f32).with_device(kGpu));
  const Tensor bad = from_vector({1, 5}, {2}, TensorOptions(DType::i64)).to(kGpu);
  CHECK_THROWS_AS(x.index({Slice(), bad}).cpu(), Error);
  Tensor y = x.clone();
  y.index_put_({Slice(), bad}, 1.0);
  CHECK_THROWS_AS(cuda::synchronize(0), Error);
  y.index_put_({Slice(), bad}, ones({4, 2}, TensorOptions(DType::f32).with_device(kGpu)), true);
  CHECK_THROWS_AS(cuda::synchronize(0), Error);
  y.scatter_(1, from_vector({7}, {1, 1}, TensorOptions(DType::i64)).to(kGpu), 1.0);
  CHECK_THROWS_AS(cuda::synchronize(0), Error);
  cuda::synchronize(0);  // the flag was reset by the throw
}
