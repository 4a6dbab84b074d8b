// Comparisons with numbers and their operators, Scalar's dtype rule (result_type, scalar_operand),
// equal, and the internal binary/unary dispatch helpers of ops/binary_dispatch.h.
#include "ember/autograd/graph/graph.h"
#include "ember/ops/binary_dispatch.h"
#include "ember/ops/ops.h"

namespace ember {

namespace ops_internal {

Tensor binary_dispatch(const char* op, const Tensor& a0, const Tensor& b0, BinaryOp bop,
                       DType compute) {
  EMBER_CHECK(a0.defined(), op, ": argument 'input' is an undefined tensor");
  EMBER_CHECK(b0.defined(), op, ": argument 'other' is an undefined tensor");
  EMBER_CHECK(a0.device() == b0.device(), op,
              ": expected both tensors on the same device, but got ", a0.device().str(), " and ",
              b0.device().str(), "; move one with .to(device)");
  autograd::NoGradGuard ng;
  const Tensor a = a0.dtype() == compute ? a0 : a0.to(compute);
  const Tensor b = b0.dtype() == compute ? b0 : b0.to(compute);
  const Shape shape = broadcast_shapes(op, {a.sizes(), b.sizes()});
  Tensor out = empty(shape, binary_op_writes_bool(bop) ? DType::boolean : compute, a.device());
  if (out.numel() > 0) {
    ElementwiseIter it = make_elementwise_iter(op, out, {a, b});
    binary_kernel().get(a.device().type, compute)(it, bop, 1);
  }
  return out;
}

Tensor unary_dispatch(const char* op, const Tensor& in, UnaryOp uop, UnaryParams params) {
  EMBER_CHECK(in.defined(), op, ": argument 'input' is an undefined tensor");
  Tensor out = empty(in.sizes(), in.dtype(), in.device());
  if (out.numel() > 0) {
    ElementwiseIter it = make_elementwise_iter(op, out, {in});
    unary_kernel().get(in.device().type, in.dtype())(it, uop, params);
  }
  return out;
}

}  // namespace ops_internal

using ops_internal::binary_dispatch;

DType result_type(const Tensor& t, const Scalar& s) {
  const DType d = t.dtype();
  switch (s.kind()) {
    case Scalar::Kind::boolean:
      return d;
    case Scalar::Kind::integral:
      return d == DType::boolean ? DType::i64 : d;
    case Scalar::Kind::floating:
      return is_floating(d) ? d : DType::f32;
  }
  return d;
}

Tensor scalar_operand(const Tensor& t, const Scalar& s) {
  EMBER_CHECK(t.defined(), "scalar operand: the tensor beside the number ", s.to_double(),
              " is undefined");
  return full({}, s.to_double(), TensorOptions(result_type(t, s)).with_device(t.device()));
}

namespace {
Tensor compare_scalar(const char* op, const Tensor& a, const Scalar& b, BinaryOp bop) {
  EMBER_CHECK(a.defined(), op, ": argument 'input' is an undefined tensor");
  return binary_dispatch(op, a, scalar_operand(a, b), bop, result_type(a, b));
}
}  // namespace

Tensor eq(const Tensor& a, const Scalar& b) { return compare_scalar("eq", a, b, BinaryOp::eq); }
Tensor ne(const Tensor& a, const Scalar& b) { return compare_scalar("ne", a, b, BinaryOp::ne); }
Tensor lt(const Tensor& a, const Scalar& b) { return compare_scalar("lt", a, b, BinaryOp::lt); }
Tensor le(const Tensor& a, const Scalar& b) { return compare_scalar("le", a, b, BinaryOp::le); }
Tensor gt(const Tensor& a, const Scalar& b) { return compare_scalar("gt", a, b, BinaryOp::gt); }
Tensor ge(const Tensor& a, const Scalar& b) { return compare_scalar("ge", a, b, BinaryOp::ge); }

bool equal(const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.defined() && b.defined(), "equal: undefined tensor");
  if (a.sizes() != b.sizes()) return false;
  if (a.numel() == 0) return true;
  Tensor same = eq(a, b.device() == a.device() ? b : b.to(a.device()));
  for (double v : same.to_vector())
    if (v == 0) return false;
  return true;
}

Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, const Scalar& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Scalar& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Scalar& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Scalar& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Scalar& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Scalar& b) { return ge(a, b); }
// A number on the left compares as the mirrored comparison with the number on the right.
Tensor operator==(const Scalar& a, const Tensor& b) { return eq(b, a); }
Tensor operator!=(const Scalar& a, const Tensor& b) { return ne(b, a); }
Tensor operator<(const Scalar& a, const Tensor& b) { return gt(b, a); }
Tensor operator<=(const Scalar& a, const Tensor& b) { return ge(b, a); }
Tensor operator>(const Scalar& a, const Tensor& b) { return lt(b, a); }
Tensor operator>=(const Scalar& a, const Tensor& b) { return le(b, a); }

}  // namespace ember
