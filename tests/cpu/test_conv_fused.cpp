// conv2d_bias_relu on the CPU (the composite relu(conv2d + bias)): values, gradients (fp64
// gradcheck of the op_cases_conv rows (run in test_gradcheck.cpp) in every input layout), the
// optional bias, and argument errors, which are conv2d's own.
#include <doctest/doctest.h>

#include "ember/ember.h"
#include "ember/ops/conv.h"
#include "ember/ops/conv_fused.h"
#include "support/op_table.h"

using namespace ember;

TEST_CASE("conv2d_bias_relu equals relu(conv2d(x, w) + b) on the CPU") {
  Conv2dParams p;
  p.padding = {1, 1};
  p.stride = {2, 1};
  Tensor x = randn({2, 3, 7, 6}, DType::f64), w = randn({5, 3, 3, 3}, DType::f64),
         b = randn({5}, DType::f64);
  Tensor expected = relu(conv2d(x, w, b, p));
  CHECK(max_abs_diff(conv2d_bias_relu(x, w, b, p), expected) < 1e-12);
  CHECK(max_abs_diff(conv2d_bias_relu(x, w, Tensor(), p), relu(conv2d(x, w, Tensor(), p))) < 1e-12);
  CHECK(ember::min(conv2d_bias_relu(x, w, b, p)).item() >= 0.0);
}

TEST_CASE("conv2d_bias_relu reports conv2d's argument errors") {
  Tensor x = zeros({1, 4, 8, 8});
  CHECK_THROWS_WITH_AS(conv2d_bias_relu(x, zeros({4, 3, 3, 3})),
                       doctest::Contains("conv2d: weight [4, 3, 3, 3] expects 3 input channels"),
                       Error);
  CHECK_THROWS_WITH_AS(conv2d_bias_relu(x, zeros({2, 4, 3, 3}), zeros({3})),
                       doctest::Contains("bias must be [2]"), Error);
  CHECK_THROWS_WITH_AS(conv2d_bias_relu(zeros({4, 8, 8}), zeros({2, 4, 3, 3})),
                       doctest::Contains("input must be 4-D"), Error);
}
