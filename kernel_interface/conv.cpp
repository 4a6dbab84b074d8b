// The convolution kernel interface's definitions (kernel_interface/conv.h): ConvProblem's
// helpers, the problem's sizes, the conv2d slots and cache key, and the epilogue kernel table.
#include "ember/kernel_interface/conv.h"

namespace ember {

using dispatch::Direction;

EMBER_DEFINE_KERNEL(conv2d_epilogue_kernel, ConvEpilogueKernel)

const char* conv_padding_mode_name(ConvPaddingMode mode) {
  switch (mode) {
    case ConvPaddingMode::valid:
      return "valid";
    case ConvPaddingMode::same:
      return "same";
    default:
      return "explicit";
  }
}

const Tensor& ConvProblem::written() const {
  switch (direction) {
    case Direction::backward_data:
      return input;
    case Direction::backward_filter:
      return weight;
    default:
      return output;
  }
}

ConvDims conv_dims(const ConvProblem& pr) {
  ConvDims d{};
  d.N = pr.input.size(0);
  d.C = pr.input.size(1);
  d.H = pr.input.size(2);
  d.W = pr.input.size(3);
  d.K = pr.weight.size(0);
  d.R = pr.weight.size(2);
  d.S = pr.weight.size(3);
  d.P = pr.output.size(2);
  d.Q = pr.output.size(3);
  d.G = pr.params.groups;
  d.Cg = d.C / d.G;
  d.Kg = d.K / d.G;
  d.sh = pr.params.stride[0];
  d.sw = pr.params.stride[1];
  d.ph = pr.params.padding[0];
  d.pw = pr.params.padding[1];
  d.dh = pr.params.dilation[0];
  d.dw = pr.params.dilation[1];
  return d;
}

ConvProblem ConvProblem::with_scratch_outputs() const {
  ConvProblem scratch = without_epilogue();
  switch (direction) {
    case Direction::backward_data:
      scratch.input = empty_like(input);
      break;
    case Direction::backward_filter:
      scratch.weight = empty_like(weight);
      break;
    default:
      scratch.output = empty_like(output);
      break;
  }
  return scratch;
}

ConvProblem ConvProblem::without_epilogue() const {
  ConvProblem plain = *this;
  plain.epilogue = {};
  return plain;
}

dispatch::OpId conv2d_op() {
  static const dispatch::OpId id = dispatch::op_id("conv2d");
  return id;
}

dispatch::AlgoSlot& conv2d_slot(Direction direction, DeviceType device_type) {
  return dispatch::algo_slot(conv2d_op(), direction, device_type);
}

dispatch::AlgoKey conv2d_key(const ConvProblem& pr) {
  dispatch::AlgoKey key = dispatch::make_algo_key(conv2d_op(), pr.direction, pr.device());
  key.describe(pr.input, pr.weight, pr.output);
  for (int i = 0; i < 2; ++i) {
    key.assign(key.stride[i], pr.params.stride[i]);
    key.assign(key.padding[i], pr.params.padding[i]);
    key.assign(key.dilation[i], pr.params.dilation[i]);
  }
  key.assign(key.groups, pr.params.groups);
  key.allow_tf32 = pr.allow_tf32;
  return key;
}

}  // namespace ember
