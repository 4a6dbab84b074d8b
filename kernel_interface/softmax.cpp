// The definitions behind kernel_interface/softmax.h: the softmax algorithm slots and their cache
// key, SoftmaxProblem's scratch outputs, and the cross-entropy kernel tables.
#include "ember/kernel_interface/softmax.h"

#include <algorithm>

namespace ember {

using dispatch::Direction;

EMBER_DEFINE_KERNEL(cross_entropy_forward_kernel, CrossEntropyForwardKernel)
EMBER_DEFINE_KERNEL(cross_entropy_backward_kernel, CrossEntropyBackwardKernel)

namespace {

uint8_t pointer_alignment(const Tensor& t) {
  if (!t.defined() || t.numel() == 0) return 16;
  const auto address = reinterpret_cast<uintptr_t>(t.data_ptr());
  uint8_t align = 16;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

}  // namespace

// The output is dense (ops/softmax.cpp allocates it with empty_with_layout_of): the scratch output
// gets its sizes and strides over fresh storage.
SoftmaxProblem SoftmaxProblem::with_scratch_outputs() const {
  SoftmaxProblem scratch = *this;
  scratch.output = empty_with_layout_of(output, output.dtype());
  return scratch;
}

dispatch::OpId softmax_op() {
  static const dispatch::OpId id = dispatch::op_id("softmax");
  return id;
}

dispatch::AlgoSlot& softmax_slot(Direction direction, DeviceType device_type) {
  return dispatch::algo_slot(softmax_op(), direction, device_type);
}

dispatch::AlgoKey softmax_key(const SoftmaxProblem& p) {
  dispatch::AlgoKey key = dispatch::make_algo_key(softmax_op(), p.direction, p.device());
  key.rank = 3;
  key.assign(key.input_sizes[0], p.outer);
  key.assign(key.input_sizes[1], p.dim_size);
  key.assign(key.input_sizes[2], p.inner);
  key.input_dtype = uint8_t(p.input.dtype());
  key.output_dtype = uint8_t(p.output.dtype());
  uint8_t align = std::min(pointer_alignment(p.input), pointer_alignment(p.output));
  if (p.grad_output.defined()) align = std::min(align, pointer_alignment(p.grad_output));
  key.alignment_bytes = align;
  key.extra[0] = p.log ? 1 : 0;
  return key;
}

const dispatch::Algorithm<SoftmaxProblem>& softmax_choose(const SoftmaxProblem& p) {
  return dispatch::algo_cache().choose(softmax_slot(p.direction, p.device().type), softmax_key(p),
                                       p);
}

void softmax_run(const SoftmaxProblem& p) {
  dispatch::algo_cache().run(softmax_slot(p.direction, p.device().type), softmax_key(p), p);
}

}  // namespace ember
