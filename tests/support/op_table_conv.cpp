// Op-table rows (see op_table.h) for the convolution ops: conv2d (padding, stride, dilation,
// groups, depthwise, 1x1), conv2d_bias_relu, conv1d, conv3d and conv_transpose2d (with
// output_padding and groups), for the fp64 gradcheck on the CPU and the
// CUDA-vs-CPU parity suite. The rows run their convolutions in full fp32 (TF32 off for the call):
// the parity suite's fp32 tolerance is tighter than TF32 rounding. op_cases_conv() is meant to be
// chained into op_cases(); tests/cpu/test_conv_fused.cpp also runs these rows directly.
#include "ember/ops/conv.h"
#include "ember/ops/conv_fused.h"
#include "ember/ops/conv_variants.h"
#include "support/op_table.h"

namespace ember::testing {

const std::vector<OpCase>& op_cases_conv();

namespace {
using V = const std::vector<Tensor>&;

// TF32 off for the scope; the op records the setting for its backward.
class StrictFp32 {
 public:
  StrictFp32() : saved_(conv_allow_tf32()) { set_conv_allow_tf32(false); }
  ~StrictFp32() { set_conv_allow_tf32(saved_); }
  StrictFp32(const StrictFp32&) = delete;
  StrictFp32& operator=(const StrictFp32&) = delete;

 private:
  bool saved_;
};

Conv2dParams conv_params(int64_t stride, int64_t padding, int64_t dilation, int64_t groups) {
  Conv2dParams p;
  p.stride = {stride, stride};
  p.padding = {padding, padding};
  p.dilation = {dilation, dilation};
  p.groups = groups;
  return p;
}

Tensor conv(V x, const Conv2dParams& p) {
  StrictFp32 strict;
  return conv2d(x[0], x[1], x.size() > 2 ? x[2] : Tensor(), p);
}
Tensor conv_bias_relu(V x, const Conv2dParams& p) {
  StrictFp32 strict;
  return conv2d_bias_relu(x[0], x[1], x.size() > 2 ? x[2] : Tensor(), p);
}
Tensor conv_1d(V x, const Conv1dParams& p) {
  StrictFp32 strict;
  return conv1d(x[0], x[1], x.size() > 2 ? x[2] : Tensor(), p);
}
Tensor conv_3d(V x, const Conv3dParams& p) {
  StrictFp32 strict;
  return conv3d(x[0], x[1], x.size() > 2 ? x[2] : Tensor(), p);
}
Tensor conv_transpose(V x, const ConvTranspose2dParams& p) {
  StrictFp32 strict;
  return conv_transpose2d(x[0], x[1], x.size() > 2 ? x[2] : Tensor(), p);
}
Conv3dParams conv3d_params(int64_t stride, int64_t padding, int64_t dilation, int64_t groups) {
  Conv3dParams p;
  p.stride = {stride, 1, stride};
  p.padding = {padding, padding, 0};
  p.dilation = {dilation, 1, 1};
  p.groups = groups;
  return p;
}
ConvTranspose2dParams transpose_params(int64_t stride, int64_t padding, int64_t output_padding,
                                       int64_t dilation, int64_t groups) {
  ConvTranspose2dParams p;
  p.stride = {stride, stride};
  p.padding = {padding, padding};
  p.output_padding = {output_padding, output_padding};
  p.dilation = {dilation, dilation};
  p.groups = groups;
  return p;
}
}  // namespace

const std::vector<OpCase>& op_cases_conv() {
  static const std::vector<OpCase> cases = {
      {"conv2d_3x3_padded",
       {{2, 3, 5, 6}, {4, 3, 3, 3}, {4}},
       [](V x) { return conv(x, conv_params(1, 1, 1, 1)); }},
      {"conv2d_stride2_dilation2_groups2",
       {{1, 4, 7, 7}, {6, 2, 3, 3}, {6}},
       [](V x) { return conv(x, conv_params(2, 2, 2, 2)); }},
      {"conv2d_depthwise",
       {{2, 4, 5, 5}, {4, 1, 3, 3}, {4}},
       [](V x) { return conv(x, conv_params(1, 1, 1, 4)); }},
      {"conv2d_1x1_nobias",
       {{2, 8, 3, 4}, {5, 8, 1, 1}},
       [](V x) { return conv(x, conv_params(1, 0, 1, 1)); }},
      {"conv2d_bias_relu",
       {{2, 3, 5, 5}, {4, 3, 3, 3}, {4}},
       [](V x) { return conv_bias_relu(x, conv_params(1, 1, 1, 1)); }},
      {"conv2d_bias_relu_stride2_groups",
       {{1, 4, 6, 7}, {4, 2, 3, 3}, {4}},
       [](V x) { return conv_bias_relu(x, conv_params(2, 1, 1, 2)); }},
      {"conv2d_relu_nobias",
       {{1, 3, 5, 4}, {2, 3, 2, 2}},
       [](V x) { return conv_bias_relu(x, conv_params(1, 0, 1, 1)); }},
      {"conv1d_stride2_padded",
       {{2, 3, 9}, {4, 3, 3}, {4}},
       [](V x) {
         return conv_1d(x, Conv1dParams{2, 1, 1, 1});
       }},
      {"conv1d_dilation2_groups3",
       {{1, 6, 8}, {3, 2, 2}},
       [](V x) {
         return conv_1d(x, Conv1dParams{1, 1, 2, 3});
       }},
      {"conv3d_padded",
       {{1, 2, 4, 5, 4}, {3, 2, 3, 2, 2}, {3}},
       [](V x) { return conv_3d(x, conv3d_params(1, 1, 1, 1)); }},
      {"conv3d_stride2_dilation2_groups2",
       {{2, 4, 6, 3, 5}, {2, 2, 2, 3, 1}},
       [](V x) { return conv_3d(x, conv3d_params(2, 0, 2, 2)); }},
      {"conv_transpose2d",
       {{2, 3, 4, 3}, {3, 2, 3, 3}, {2}},
       [](V x) { return conv_transpose(x, transpose_params(1, 1, 0, 1, 1)); }},
      {"conv_transpose2d_stride2_outpad",
       {{1, 4, 3, 4}, {4, 3, 3, 2}, {6}},
       [](V x) { return conv_transpose(x, transpose_params(2, 1, 1, 1, 2)); }},
      {"conv_transpose2d_dilation2",
       {{1, 2, 4, 4}, {2, 3, 2, 2}},
       [](V x) { return conv_transpose(x, transpose_params(2, 0, 1, 2, 1)); }},
  };
  return cases;
}

}  // namespace ember::testing
