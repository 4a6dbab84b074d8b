// conv1d, conv3d and conv_transpose2d on the CPU: values against naive fp64 loops (conv3d's
// sum over taps, conv_transpose2d's scatter form), shapes, the 16-bit path, empty inputs and
// argument errors. Gradients are checked by the op_cases_conv rows (tests/cpu/test_gradcheck.cpp).
#include <doctest/doctest.h>

#include <cstring>

#include "ember/ember.h"
#include "ember/ops/conv_variants.h"

using namespace ember;

namespace {

// y[n, k, od, oh, ow] = sum over c, t, r, s of x[n, g*Cg + c, od*sd - pd + t*dd, ...] * w[k, c, t,
// r, s].
std::vector<double> conv3d_reference(const Tensor& x, const Tensor& w, const Conv3dParams& p,
                                     const Shape& out) {
  std::vector<double> xv = x.to_vector(), wv = w.to_vector(), y(size_t(shape_numel(out)), 0.0);
  const int64_t C = x.size(1), Cg = w.size(1), K = w.size(0), Kg = K / p.groups;
  const int64_t in[3] = {x.size(2), x.size(3), x.size(4)};
  const int64_t ker[3] = {w.size(2), w.size(3), w.size(4)};
  size_t at = 0;
  for (int64_t n = 0; n < out[0]; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t o0 = 0; o0 < out[2]; ++o0)
        for (int64_t o1 = 0; o1 < out[3]; ++o1)
          for (int64_t o2 = 0; o2 < out[4]; ++o2, ++at)
            for (int64_t c = 0; c < Cg; ++c)
              for (int64_t t = 0; t < ker[0]; ++t)
                for (int64_t r = 0; r < ker[1]; ++r)
                  for (int64_t s = 0; s < ker[2]; ++s) {
                    const int64_t i0 = o0 * p.stride[0] - p.padding[0] + t * p.dilation[0];
                    const int64_t i1 = o1 * p.stride[1] - p.padding[1] + r * p.dilation[1];
                    const int64_t i2 = o2 * p.stride[2] - p.padding[2] + s * p.dilation[2];
                    if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2])
                      continue;
                    const int64_t ch = (k / Kg) * Cg + c;
                    y[at] += xv[size_t((((n * C + ch) * in[0] + i0) * in[1] + i1) * in[2] + i2)] *
                             wv[size_t((((k * Cg + c) * ker[0] + t) * ker[1] + r) * ker[2] + s)];
                  }
  return y;
}

// The scatter form: every input element adds w * x into the outputs its taps reach.
std::vector<double> conv_transpose2d_reference(const Tensor& x, const Tensor& w,
                                               const ConvTranspose2dParams& p, const Shape& out) {
  std::vector<double> xv = x.to_vector(), wv = w.to_vector(), y(size_t(shape_numel(out)), 0.0);
  const int64_t Cin = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t Coutg = w.size(1), R = w.size(2), S = w.size(3), Cing = Cin / p.groups;
  for (int64_t n = 0; n < x.size(0); ++n)
    for (int64_t ci = 0; ci < Cin; ++ci)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t ww = 0; ww < W; ++ww)
          for (int64_t co = 0; co < Coutg; ++co)
            for (int64_t r = 0; r < R; ++r)
              for (int64_t s = 0; s < S; ++s) {
                const int64_t oh = h * p.stride[0] - p.padding[0] + r * p.dilation[0];
                const int64_t ow = ww * p.stride[1] - p.padding[1] + s * p.dilation[1];
                if (oh < 0 || oh >= out[2] || ow < 0 || ow >= out[3]) continue;
                const int64_t oc = (ci / Cing) * Coutg + co;
                y[size_t(((n * out[1] + oc) * out[2] + oh) * out[3] + ow)] +=
                    xv[size_t(((n * Cin + ci) * H + h) * W + ww)] *
                    wv[size_t(((ci * Coutg + co) * R + r) * S + s)];
              }
  return y;
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

}  // namespace

TEST_CASE("conv1d is conv2d over a height-1 image") {
  Tensor x = randn({2, 6, 11}, DType::f64), w = randn({4, 3, 3}, DType::f64),
         b = randn({4}, DType::f64);
  Conv1dParams p{2, 1, 2, 2};
  Tensor y = conv1d(x, w, b, p);
  CHECK(y.sizes() == Shape{2, 4, 5});
  Conv2dParams q;
  q.stride = {1, 2};
  q.padding = {0, 1};
  q.dilation = {1, 2};
  q.groups = 2;
  CHECK(max_abs_diff(y, conv2d(x.unsqueeze(2), w.unsqueeze(2), b, q).squeeze(2)) < 1e-12);
  CHECK_THROWS_WITH_AS(
      conv1d(randn({6, 11}), randn({4, 6, 3})),
      doctest::Contains("conv1d: input must be 3-D [N, C, L], got shape [6, 11]; add a batch dim"),
      Error);
}

TEST_CASE("conv3d matches the naive loop") {
  struct Row {
    const char* name;
    Shape x, w;
    Conv3dParams p;
  };
  Conv3dParams strided;
  strided.stride = {2, 1, 2};
  strided.padding = {1, 0, 1};
  strided.dilation = {1, 2, 1};
  Conv3dParams grouped;
  grouped.padding = {2, 1, 1};
  grouped.dilation = {2, 1, 1};
  grouped.groups = 2;
  const std::vector<Row> rows = {
      {"plain", {2, 3, 4, 5, 4}, {2, 3, 2, 3, 2}, Conv3dParams{}},
      {"stride, padding, dilation", {1, 2, 7, 6, 5}, {3, 2, 3, 2, 3}, strided},
      {"groups, depth dilation", {2, 4, 5, 4, 4}, {6, 2, 3, 3, 3}, grouped},
  };
  for (const Row& row : rows) {
    CAPTURE(row.name);
    Tensor x = randn(row.x, DType::f64), w = randn(row.w, DType::f64),
           b = randn({row.w[0]}, DType::f64);
    Tensor y = conv3d(x, w, b, row.p);
    std::vector<double> expected = conv3d_reference(x, w, row.p, y.sizes());
    const int64_t per_channel = y.size(2) * y.size(3) * y.size(4);
    std::vector<double> bias = b.to_vector();
    for (size_t i = 0; i < expected.size(); ++i)
      expected[i] += bias[(i / size_t(per_channel)) % size_t(row.w[0])];
    CHECK(max_diff(y.to_vector(), expected) < 1e-10);
  }
  CHECK_THROWS_WITH_AS(conv3d(randn({1, 2, 2, 5, 5}), randn({3, 2, 4, 1, 1})),
                       doctest::Contains("conv3d: the kernel depth (4"), Error);
  CHECK_THROWS_WITH_AS(conv3d(randn({1, 3, 4, 4, 4}), randn({2, 2, 1, 1, 1})),
                       doctest::Contains("do not match groups = 1"), Error);
}

TEST_CASE("conv_transpose2d matches the scatter loop and is conv2d's adjoint") {
  struct Row {
    const char* name;
    Shape x, w;
    ConvTranspose2dParams p;
  };
  ConvTranspose2dParams s2;
  s2.stride = {2, 3};
  s2.padding = {1, 0};
  s2.output_padding = {1, 2};
  ConvTranspose2dParams grouped;
  grouped.stride = {2, 2};
  grouped.dilation = {2, 1};
  grouped.groups = 2;
  const std::vector<Row> rows = {
      {"plain", {2, 3, 4, 5}, {3, 2, 3, 3}, ConvTranspose2dParams{}},
      {"stride, output_padding", {1, 2, 3, 4}, {2, 4, 3, 2}, s2},
      {"groups, dilation", {2, 4, 3, 3}, {4, 3, 2, 3}, grouped},
  };
  for (const Row& row : rows) {
    CAPTURE(row.name);
    Tensor x = randn(row.x, DType::f64), w = randn(row.w, DType::f64);
    Tensor y = conv_transpose2d(x, w, Tensor(), row.p);
    for (int i = 0; i < 2; ++i) {
      const int64_t expect = (row.x[2 + i] - 1) * row.p.stride[i] - 2 * row.p.padding[i] +
                             row.p.dilation[i] * (row.w[2 + i] - 1) + row.p.output_padding[i] + 1;
      CHECK(y.size(2 + i) == expect);
    }
    CHECK(max_diff(y.to_vector(), conv_transpose2d_reference(x, w, row.p, y.sizes())) < 1e-10);
    // <conv2d(u, w), x> == <u, conv_transpose2d(x, w)> for any u of y's shape.
    Conv2dParams q;
    q.stride = row.p.stride;
    q.padding = row.p.padding;
    q.dilation = row.p.dilation;
    q.groups = row.p.groups;
    Tensor u = randn(y.sizes(), DType::f64);
    CHECK((conv2d(u, w, Tensor(), q) * x).sum().item() ==
          doctest::Approx((u * y).sum().item()).epsilon(1e-10));
  }
}

TEST_CASE("conv_transpose2d: bias, 16-bit, empty batch and errors") {
  Tensor x = randn({2, 3, 4, 4}), w = randn({3, 5, 3, 3}), b = randn({5});
  Tensor y = conv_transpose2d(x, w, b);
  CHECK(max_abs_diff(y, conv_transpose2d(x, w) + b.view({1, 5, 1, 1})) < 1e-5);
  Tensor yh = conv_transpose2d(x.to(DType::bf16), w.to(DType::bf16), b.to(DType::bf16));
  CHECK(yh.dtype() == DType::bf16);
  CHECK(max_abs_diff(yh, y) < 0.3);
  Tensor empty_batch = randn({0, 3, 4, 4}).set_requires_grad(true);
  Tensor we = w.detach().set_requires_grad(true);
  Tensor ye = conv_transpose2d(empty_batch, we);
  CHECK(ye.sizes() == Shape{0, 5, 6, 6});
  ye.sum().backward();
  CHECK(we.grad().abs().sum().item() == 0.0);

  ConvTranspose2dParams bad;
  bad.stride = {2, 2};
  bad.output_padding = {2, 0};
  CHECK_THROWS_WITH_AS(conv_transpose2d(x, w, Tensor(), bad),
                       doctest::Contains("output_padding must be >= 0 and smaller than the stride"),
                       Error);
  CHECK_THROWS_WITH_AS(conv_transpose2d(x, randn({4, 5, 3, 3})),
                       doctest::Contains("must be [Cin, Cout / groups, R, S] with Cin = 3"), Error);
  CHECK_THROWS_WITH_AS(conv_transpose2d(x, w, randn({3})), doctest::Contains("bias must be [5]"),
                       Error);
}
