// CUDA vs CPU for the shape ops of ops/shape_more.h (they compose the existing CUDA kernels:
// index_select, cat, copies of strided views, where): flips, rolls, rot90, repeats, diagonals,
// triangles (out of place and in place through a non-contiguous view), one_hot, tensor
// repeat_interleave, pad in every mode and the pixel shuffles, over empty, one-element,
// non-contiguous and bf16 inputs. Integer-valued data, exact in bf16, so values compare bit for
// bit. Gradients are covered by the op table's parity suite (test_ops_parity.cpp). Every case skips
// without a GPU.
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/tensor/runtime/cuda_device.h"

using namespace ember;

namespace {
const Device kGpu = Device::cuda(0);

Tensor values(Shape s, DType d, uint64_t seed) {
  Generator gen(Device::cpu(), seed);
  return randint(-100, 100, s, TensorOptions(DType::f32), &gen).to(d);
}

// An input made on the CPU and its exact copy on the GPU, laid out alike (same strides).
struct Input {
  Tensor cpu, gpu;
};
Input same_on_both(const Tensor& dense, const std::function<Tensor(const Tensor&)>& layout) {
  return {layout(dense), layout(dense.to(kGpu))};
}

// f on the GPU input equals f on the CPU input (same dtype), bit for bit.
void check_same(const std::function<Tensor(const Tensor&)>& f, const Input& x,
                const std::string& what) {
  CAPTURE(what);
  CAPTURE(x.cpu.shape_str());
  CAPTURE(dtype_name(x.cpu.dtype()));
  REQUIRE(x.gpu.strides() == x.cpu.strides());
  Tensor want = f(x.cpu), got = f(x.gpu);
  REQUIRE(got.device() == kGpu);
  REQUIRE(got.sizes() == want.sizes());
  CHECK(got.dtype() == want.dtype());
  CHECK(got.cpu().to_vector() == want.to_vector());
}

// The inputs each op meets: dense, transposed (non-contiguous), a strided slice, one element
// and empty, in f32 and bf16.
std::vector<Input> inputs_3d() {
  std::vector<Input> v;
  auto same = [](const Tensor& t) { return t; };
  for (DType d : {DType::f32, DType::bf16}) {
    v.push_back(same_on_both(values({3, 5, 7}, d, 1), same));
    v.push_back(same_on_both(values({7, 5, 3}, d, 2), [](const Tensor& t) {
      return t.permute({2, 1, 0});
    }));
    v.push_back(same_on_both(values({3, 10, 7}, d, 3),
                             [](const Tensor& t) { return t.slice(1, 0, 10, 2); }));
    v.push_back(same_on_both(values({1, 1, 1}, d, 4), same));
    v.push_back(same_on_both(values({2, 0, 3}, d, 5), same));
  }
  return v;
}
}  // namespace

TEST_CASE("flip, roll, rot90, repeat, tile, repeat_interleave match the CPU" *
          doctest::skip(!cuda::is_available())) {
  for (const Input& x : inputs_3d()) {
    check_same([](const Tensor& t) { return t.flip({0, 2}); }, x, "flip");
    check_same([](const Tensor& t) { return t.flip({-2}); }, x, "flip -2");
    check_same([](const Tensor& t) { return t.roll({2, -9}, {0, 2}); }, x, "roll");
    check_same([](const Tensor& t) { return t.roll({4}); }, x, "roll flat");
    check_same([](const Tensor& t) { return t.rot90(1, {1, 2}); }, x, "rot90");
    check_same([](const Tensor& t) { return t.rot90(2, {0, -1}); }, x, "rot90 k2");
    check_same([](const Tensor& t) { return t.repeat({2, 1, 1, 3}); }, x, "repeat");
    check_same([](const Tensor& t) { return t.tile({2}); }, x, "tile");
    check_same([](const Tensor& t) { return t.repeat_interleave(3, 1); }, x, "repeat_interleave");
    check_same(
        [](const Tensor& t) {
          Tensor r = from_vector({2, 0, 1}, {3}, TensorOptions(DType::i64).with_device(t.device()));
          return t.size(0) == 3 ? t.repeat_interleave(r, 0) : t.repeat_interleave(2, 0);
        },
        x, "repeat_interleave tensor");
  }
}

TEST_CASE("diagonal, diag_embed, diag, trace, block_diag, tril, triu match the CPU" *
          doctest::skip(!cuda::is_available())) {
  for (const Input& x : inputs_3d()) {
    check_same([](const Tensor& t) { return t.diagonal(1, 0, 2).contiguous(); }, x, "diagonal");
    check_same([](const Tensor& t) { return t.diag_embed(-1); }, x, "diag_embed");
    check_same([](const Tensor& t) { return t.tril(1); }, x, "tril");
    check_same([](const Tensor& t) { return t.triu(-2); }, x, "triu");
    if (x.cpu.numel() == 0) continue;
    check_same([](const Tensor& t) { return t.select(0, 0).diag(2); }, x, "diag 2-d");
    check_same([](const Tensor& t) { return t.select(1, 0).reshape({-1}).diag(); }, x, "diag 1-d");
    check_same(
        [](const Tensor& t) {
          return block_diag({t.select(0, 0), t.select(0, 0)});
        },
        x, "block_diag");
    check_same(
        [](const Tensor& t) {
          Tensor c = t.clone();
          Tensor view = c.narrow(2, 0, c.size(2) > 1 ? c.size(2) - 1 : c.size(2));
          view.triu_(1);
          c.select(0, 0).tril_(-1);
          return c;
        },
        x, "tril_ / triu_ through views");
  }
  check_same([](const Tensor& t) { return t.trace(); },
             same_on_both(values({5, 4}, DType::f32, 9), [](const Tensor& t) { return t.t(); }),
             "trace");
}

TEST_CASE("pad in every mode matches the CPU" * doctest::skip(!cuda::is_available())) {
  for (const Input& x : inputs_3d()) {
    check_same([](const Tensor& t) { return pad(t, {-1, 2, 1, 3}, "constant", 7); }, x, "constant");
    if (x.cpu.numel() == 0) continue;
    check_same([](const Tensor& t) { return pad(t, {0, 2}, "replicate"); }, x, "replicate 1d");
    check_same(
        [](const Tensor& t) {
          return pad(t, {1, 0, 0, 2}, "replicate");
        },
        x, "replicate 2d");
    check_same([](const Tensor& t) { return pad(t, {1, 1, 0, 0}, "circular"); }, x, "circular");
    if (x.cpu.size(-1) > 2 && x.cpu.size(-2) > 1)
      check_same([](const Tensor& t) { return pad(t, {2, 1, 1, 0}, "reflect"); }, x, "reflect");
  }
  Input v = same_on_both(values({1, 2, 3, 4, 5}, DType::bf16, 11), [](const Tensor& t) {
    return t.permute({0, 1, 4, 3, 2});
  });
  check_same(
      [](const Tensor& t) {
        return pad(t, {1, 2, 3, 0, 0, 1}, "reflect");
      },
      v, "reflect 3d");
  check_same(
      [](const Tensor& t) {
        return pad(t, {3, 1, 1, 2, 0, 1}, "circular");
      },
      v, "circular 3d");
}

TEST_CASE("one_hot, pixel_shuffle, pixel_unshuffle, cartesian_prod match the CPU" *
          doctest::skip(!cuda::is_available())) {
  Generator gen(Device::cpu(), 5);
  Input cls = same_on_both(randint(0, 6, {4, 9}, TensorOptions(DType::i64), &gen),
                           [](const Tensor& t) { return t; });
  check_same([](const Tensor& t) { return one_hot(t); }, cls, "one_hot");
  check_same([](const Tensor& t) { return one_hot(t.t(), 8); }, cls, "one_hot transposed");
  check_same([](const Tensor& t) { return one_hot(t.narrow(0, 0, 0), 3); }, cls, "one_hot empty");
  for (DType d : {DType::f32, DType::bf16}) {
    Input x = same_on_both(values({2, 12, 3, 5}, d, 6), [](const Tensor& t) { return t; });
    check_same([](const Tensor& t) { return pixel_shuffle(t, 2); }, x, "pixel_shuffle");
    check_same([](const Tensor& t) { return pixel_unshuffle(t.transpose(2, 3), 1); }, x,
               "pixel_unshuffle r=1");
    Input y = same_on_both(values({3, 6, 4, 2}, d, 7), [](const Tensor& t) {
      return t.permute({0, 2, 1, 3});
    });
    check_same([](const Tensor& t) { return pixel_unshuffle(t, 2); }, y, "pixel_unshuffle");
    const Tensor b = values({3}, d, 9);
    check_same(
        [b](const Tensor& t) {
          return cartesian_prod({t, b.to(t.device())});
        },
        same_on_both(values({4}, d, 8), [](const Tensor& t) { return t; }), "cartesian_prod");
  }
}
