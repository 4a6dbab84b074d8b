// PoolProblem's helpers (kernel_interface/pooling.h): the encoding read off PoolArgs, and the
// scratch outputs the algorithm cache benchmarks on.
#include "ember/kernel_interface/pooling.h"

#include <algorithm>

namespace ember {
namespace {

// A fresh tensor with the sizes and strides of `like` (non-negative strides: a written operand),
// so that the element offsets PoolArgs' strides give stay inside it.
Tensor fresh_with_strides_of(const Tensor& like) {
  int64_t extent = 1;
  for (int64_t d = 0; d < like.dim(); ++d) {
    if (like.size(d) == 0) return empty_like(like);
    extent += (like.size(d) - 1) * std::max<int64_t>(like.stride(d), 0);
  }
  return make_view(empty({extent}, like.dtype(), like.device()), like.sizes(), like.strides(), 0);
}

}  // namespace

PoolProblem pool_problem(dispatch::Direction direction, const PoolArgs& args) {
  PoolProblem p;
  p.direction = direction;
  p.args = args;
  if (!args.indices.defined())
    p.indices = PoolIndices::none;
  else if (args.indices.dtype() == DType::i64)
    p.indices = PoolIndices::flat_i64;
  else
    p.indices = args.packed_taps ? PoolIndices::taps_packed : PoolIndices::taps_u8;
  return p;
}

PoolProblem PoolProblem::with_scratch_outputs() const {
  PoolProblem scratch = *this;
  PoolArgs& a = scratch.args;
  if (direction == dispatch::Direction::backward) {
    a.input = fresh_with_strides_of(args.input);
    return scratch;
  }
  a.output = fresh_with_strides_of(args.output);
  if (indices == PoolIndices::none) {
    a.indices = Tensor();
  } else if (args.indices.defined()) {
    a.indices = fresh_with_strides_of(args.indices);
  } else {
    // Not allocated yet (the forward is chosen first): as ops/pooling.cpp will allocate them.
    Shape shape = args.output.sizes();
    if (indices == PoolIndices::taps_packed) shape[1] /= 2;
    a.indices = empty(shape, indices == PoolIndices::flat_i64 ? DType::i64 : DType::u8,
                      args.output.device(), args.output.suggest_memory_format());
  }
  a.packed_taps = indices == PoolIndices::taps_packed;
  return scratch;
}

}  // namespace ember
