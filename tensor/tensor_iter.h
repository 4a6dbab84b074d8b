// ElementwiseIter: the description of an elementwise loop that CPU and CUDA kernels share. Operand
// 0 is the output, 1.. the inputs, all with the same logical shape after broadcasting (a broadcast
// dim has stride 0). Dims are coalesced where memory allows, innermost last, strides in BYTES.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "ember/tensor/tensor.h"

namespace ember {

inline constexpr int kMaxIterDims = 8;
inline constexpr int kMaxIterOperands = 4;

struct ElementwiseIter {
  int ndim = 0;
  int num_operands = 0;
  int64_t numel = 0;
  int64_t sizes[kMaxIterDims] = {};
  int64_t strides[kMaxIterOperands][kMaxIterDims] = {};  // bytes
  char* data[kMaxIterOperands] = {};
  DType dtypes[kMaxIterOperands] = {};
  Device device;

  // True when every operand is dense and laid out in the same order as the loop (one flat loop).
  bool is_contiguous() const;
  // Byte offset of flat element `linear` for operand `op` (slow path helper for the CPU).
  int64_t offset_of(int op, int64_t linear) const;
};

// Builds the loop for `out` (already of the broadcast shape) and `inputs` (broadcast to it).
// Throws bad_param naming `op` if a shape cannot broadcast or if devices differ. Allocates
// nothing (the braced-list form: make_elementwise_iter(op, out, {a, b})).
ElementwiseIter make_elementwise_iter(const char* op, const Tensor& out,
                                      std::initializer_list<Tensor> inputs);
ElementwiseIter make_elementwise_iter(const char* op, const Tensor& out,
                                      const std::vector<Tensor>& inputs);

// Whether a tensor of shape `from` broadcasts to `to` (numpy rules, `to` unchanged); allocates
// nothing, for the in-place ops' fast path.
bool broadcasts_to(const Shape& from, const Shape& to);

// The broadcast shape of several shapes (numpy rules); throws bad_param naming `op`.
Shape broadcast_shapes(const char* op, const std::vector<Shape>& shapes);

}  // namespace ember
