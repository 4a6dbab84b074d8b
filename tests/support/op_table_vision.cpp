// Op-table rows (see op_table.h) for the functionals of ops/pooling_more.h, ops/interpolate.h and
// ops/norm_more.h: adaptive max pooling, LP pooling, max unpooling, fold / unfold, every
// interpolate mode and rms_norm, in fp64 gradcheck on the CPU and CUDA-vs-CPU parity. Max
// unpooling's indices are constants made on the input's device (one position per pooling
// window, as max pooling would return); LP pooling's inputs are positive so that x^p is smooth.
#include "ember/ops/interpolate.h"
#include "ember/ops/norm_more.h"
#include "ember/ops/pooling_more.h"
#include "support/op_table.h"

namespace ember::testing {

namespace {
using V = const std::vector<Tensor>&;
using Sizes = std::vector<int64_t>;
using Scales = std::vector<double>;

// Indices into [n, c, h_out, w_out] planes for a [n, c, h, w] input pooled by 2 x 2 windows
// (w = 1 for the 1-d form): each cell picks a different tap of its window.
Tensor unpool_indices(V x, int64_t n, int64_t c, int64_t h, int64_t w, int64_t w_out) {
  std::vector<double> v;
  for (int64_t p = 0; p < n * c; ++p)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < w; ++j) {
        const int64_t t = (p + i + j) % 4;
        v.push_back(w == 1 && w_out == 1 ? double(2 * i + t % 2)
                                         : double((2 * i + t / 2) * w_out + 2 * j + t % 2));
      }
  Shape s = w == 1 && w_out == 1 ? Shape{n, c, h} : Shape{n, c, h, w};
  return from_vector(v, s, TensorOptions(DType::i64).with_device(x[0].device()));
}

Tensor interp(V x, std::optional<Sizes> size, std::optional<Scales> scale, const char* mode,
              std::optional<bool> align_corners = std::nullopt,
              std::optional<bool> recompute = std::nullopt) {
  return interpolate(x[0], size, scale, mode, align_corners, recompute);
}
}  // namespace

const std::vector<OpCase>& op_cases_vision() {
  static const std::vector<OpCase> cases = {
      // adaptive max pooling (values; the gradient lands on each argmax)
      {"adaptive_max_pool1d", {{2, 3, 7}}, [](V x) { return adaptive_max_pool1d(x[0], {3}); }},
      {"adaptive_max_pool2d",
       {{2, 2, 5, 7}},
       [](V x) {
         return adaptive_max_pool2d(x[0], {3, 4});
       }},
      {"adaptive_max_pool2d_unbatched",
       {{2, 5, 6}},
       [](V x) {
         return adaptive_max_pool2d(x[0], {2, 3});
       }},
      {"adaptive_max_pool3d",
       {{1, 2, 4, 5, 3}},
       [](V x) {
         return adaptive_max_pool3d(x[0], {2, 3, 2});
       }},
      // LP pooling
      {"lp_pool1d",
       {{2, 3, 8}},
       [](V x) { return lp_pool1d(x[0], 2.0, {3}, {2}); },
       0.2,
       1.0,
       false},
      {"lp_pool2d_ceil",
       {{1, 2, 5, 5}},
       [](V x) { return lp_pool2d(x[0], 3.0, {2}, {}, true); },
       0.2,
       1.0,
       false},
      {"lp_pool2d_p2_signed",
       {{2, 2, 4, 5}},
       [](V x) {
         return lp_pool2d(x[0], 2.0, {2, 3}, {1});
       },
       -1.0,
       1.0,
       false},
      // max unpooling at fixed indices
      {"max_unpool1d",
       {{2, 2, 3}},
       [](V x) { return max_unpool1d(x[0], unpool_indices(x, 2, 2, 3, 1, 1), {2}); }},
      {"max_unpool2d",
       {{1, 2, 2, 3}},
       [](V x) { return max_unpool2d(x[0], unpool_indices(x, 1, 2, 2, 3, 6), {2}); }},
      {"max_unpool2d_output_size",
       {{1, 2, 2, 3}},
       [](V x) {
         return max_unpool2d(x[0], unpool_indices(x, 1, 2, 2, 3, 7), {2}, {}, {0}, Sizes{5, 7});
       }},
      // sliding windows
      {"unfold",
       {{2, 2, 4, 5}},
       [](V x) {
         return unfold(x[0], {2, 3}, {1, 2}, {1}, {2, 1});
       }},
      {"unfold_unbatched", {{2, 3, 3}}, [](V x) { return unfold(x[0], {2}); }},
      {"fold",
       {{2, 12, 9}},
       [](V x) {
         return fold(x[0], {4, 5}, {2, 3}, {1, 2}, {1}, {2, 1});
       }},
      {"fold_overlapping",
       {{6, 6}},
       [](V x) {
         return fold(x[0], {3}, {2, 1}, {1}, {0}, {1});
       }},
      // interpolate, each mode
      {"interpolate_nearest",
       {{1, 2, 3, 4}},
       [](V x) {
         return interp(x, Sizes{5, 7}, {}, "nearest");
       }},
      {"interpolate_nearest_down",
       {{1, 2, 5, 6}},
       [](V x) {
         return interp(x, Sizes{2, 4}, {}, "nearest");
       }},
      {"interpolate_nearest_exact_scale",
       {{1, 2, 3, 4}},
       [](V x) {
         return interp(x, {}, Scales{1.7, 2.3}, "nearest-exact");
       }},
      {"interpolate_nearest_3d",
       {{1, 1, 2, 3, 3}},
       [](V x) {
         return interp(x, {}, Scales{2, 1.5, 2}, "nearest");
       }},
      {"interpolate_linear", {{2, 2, 5}}, [](V x) { return interp(x, Sizes{8}, {}, "linear"); }},
      {"interpolate_linear_align_corners",
       {{2, 2, 5}},
       [](V x) { return interp(x, Sizes{8}, {}, "linear", true); }},
      {"interpolate_bilinear",
       {{1, 2, 3, 4}},
       [](V x) {
         return interp(x, Sizes{5, 7}, {}, "bilinear");
       }},
      {"interpolate_bilinear_align_corners",
       {{1, 2, 3, 4}},
       [](V x) {
         return interp(x, Sizes{5, 7}, {}, "bilinear", true);
       }},
      {"interpolate_bilinear_down_scale",
       {{1, 2, 6, 7}},
       [](V x) {
         return interp(x, {}, Scales{0.5, 0.6}, "bilinear", false, true);
       }},
      {"interpolate_bicubic",
       {{1, 2, 3, 4}},
       [](V x) {
         return interp(x, Sizes{5, 7}, {}, "bicubic");
       }},
      {"interpolate_bicubic_align_corners",
       {{1, 1, 4, 3}},
       [](V x) { return interp(x, {}, Scales{1.5}, "bicubic", true); }},
      {"interpolate_trilinear",
       {{1, 1, 2, 3, 3}},
       [](V x) {
         return interp(x, Sizes{3, 4, 5}, {}, "trilinear");
       }},
      {"interpolate_area",
       {{1, 2, 5, 7}},
       [](V x) {
         return interp(x, Sizes{2, 3}, {}, "area");
       }},
      // rms_norm
      {"rms_norm_weight", {{3, 4, 5}, {5}}, [](V x) { return rms_norm(x[0], {5}, x[1]); }},
      {"rms_norm_2d_eps",
       {{2, 3, 4}},
       [](V x) {
         return rms_norm(x[0], {3, 4}, {}, 1e-3);
       }},
  };
  return cases;
}

}  // namespace ember::testing
