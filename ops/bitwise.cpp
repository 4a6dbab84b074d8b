// remainder and fmod (with their backward), the bitwise ops on integer and bool tensors, the
// logical ops on any dtype, and their operators (% & | ^ ~).
#include "ember/autograd/graph/graph.h"
#include "ember/ops/binary_dispatch.h"
#include "ember/ops/ops.h"

namespace ember {

using ops_internal::binary_dispatch;
using Grads = std::vector<Tensor>;

namespace {

Tensor grad_to(const Tensor& g, const Shape& sizes, DType dtype) {
  Tensor r = autograd::sum_to(g, sizes);
  return r.dtype() == dtype ? r : r.to(dtype);
}

// trunc(x) from the kernels that exist: ceil below zero, floor above.
Tensor trunc_values(const Tensor& x) { return where(lt(x, 0), ceil(x), floor(x)); }

// remainder and fmod: out = a - q * b with q = floor(a / b) (remainder) or trunc(a / b) (fmod),
// so d/da = 1 and d/db = -q, as PyTorch.
Tensor modulus(const char* op, const Tensor& a, const Tensor& b, BinaryOp bop) {
  EMBER_CHECK(a.defined() && b.defined(), op, ": undefined tensor");
  Tensor out = binary_dispatch(op, a, b, bop, promote_types(a.dtype(), b.dtype()));
  if (is_floating(out.dtype()) && autograd::needs_grad({&a, &b})) {
    autograd::SavedTensor sa(b.requires_grad() ? a : Tensor(), op),
        sb(b.requires_grad() ? b : Tensor(), op);
    const bool floored = bop == BinaryOp::remainder;
    autograd::record_backward(op, {a, b}, {&out},
                              [sa, sb, floored, as = a.sizes(), ad = a.dtype(), bs = b.sizes(),
                               bd = b.dtype()](const Grads& g, const auto& node) {
                                Grads r(2);
                                if (node.needs_input_grad(0)) r[0] = grad_to(g[0], as, ad);
                                if (node.needs_input_grad(1)) {
                                  Tensor q = div(sa.unpack(), sb.unpack());
                                  q = floored ? floor(q) : trunc_values(q);
                                  r[1] = grad_to(neg(mul(g[0], q)), bs, bd);
                                }
                                return r;
                              });
  }
  return out;
}

void check_bitwise(const char* op, const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.defined() && b.defined(), op, ": undefined tensor");
  EMBER_CHECK(!is_floating(a.dtype()) && !is_floating(b.dtype()), op,
              ": expected integer or bool tensors, got ", dtype_name(a.dtype()), " ", a.shape_str(),
              " and ", dtype_name(b.dtype()), " ", b.shape_str(),
              "; bitwise ops are not defined on floating values (compare first for a mask)");
}

Tensor bitwise(const char* op, const Tensor& a, const Tensor& b, BinaryOp bop) {
  check_bitwise(op, a, b);
  return binary_dispatch(op, a, b, bop, promote_types(a.dtype(), b.dtype()));
}

Tensor bitwise_scalar(const char* op, const Tensor& a, const Scalar& b, BinaryOp bop) {
  EMBER_CHECK(a.defined(), op, ": undefined tensor");
  EMBER_CHECK(!b.is_floating_point(), op, ": the number ", b.to_double(),
              " is floating; bitwise ops take integers or bools");
  return bitwise(op, a, scalar_operand(a, b), bop);
}

}  // namespace

Tensor remainder(const Tensor& a, const Tensor& b) {
  return modulus("remainder", a, b, BinaryOp::remainder);
}
Tensor remainder(const Tensor& a, const Scalar& b) {
  EMBER_CHECK(a.defined(), "remainder: undefined tensor");
  return remainder(result_type(a, b) == a.dtype() ? a : a.to(result_type(a, b)),
                   scalar_operand(a, b));
}
Tensor remainder(const Scalar& a, const Tensor& b) {
  EMBER_CHECK(b.defined(), "remainder: undefined tensor");
  return remainder(scalar_operand(b, a),
                   result_type(b, a) == b.dtype() ? b : b.to(result_type(b, a)));
}
Tensor fmod(const Tensor& a, const Tensor& b) { return modulus("fmod", a, b, BinaryOp::fmod); }
Tensor fmod(const Tensor& a, const Scalar& b) {
  EMBER_CHECK(a.defined(), "fmod: undefined tensor");
  return fmod(result_type(a, b) == a.dtype() ? a : a.to(result_type(a, b)), scalar_operand(a, b));
}

Tensor bitwise_and(const Tensor& a, const Tensor& b) {
  return bitwise("bitwise_and", a, b, BinaryOp::bitwise_and);
}
Tensor bitwise_or(const Tensor& a, const Tensor& b) {
  return bitwise("bitwise_or", a, b, BinaryOp::bitwise_or);
}
Tensor bitwise_xor(const Tensor& a, const Tensor& b) {
  return bitwise("bitwise_xor", a, b, BinaryOp::bitwise_xor);
}
Tensor bitwise_and(const Tensor& a, const Scalar& b) {
  return bitwise_scalar("bitwise_and", a, b, BinaryOp::bitwise_and);
}
Tensor bitwise_or(const Tensor& a, const Scalar& b) {
  return bitwise_scalar("bitwise_or", a, b, BinaryOp::bitwise_or);
}
Tensor bitwise_xor(const Tensor& a, const Scalar& b) {
  return bitwise_scalar("bitwise_xor", a, b, BinaryOp::bitwise_xor);
}
Tensor bitwise_not(const Tensor& a) {
  EMBER_CHECK(a.defined(), "bitwise_not: undefined tensor");
  EMBER_CHECK(!is_floating(a.dtype()), "bitwise_not: expected an integer or bool tensor, got ",
              dtype_name(a.dtype()), " ", a.shape_str(),
              "; use logical_not for a mask of the zeros");
  if (a.dtype() == DType::boolean) return logical_not(a);
  // ~x is x ^ (all ones): -1 in the signed types, 255 in uint8.
  const double ones = a.dtype() == DType::u8 ? 255.0 : -1.0;
  return bitwise("bitwise_not", a, full({}, ones, TensorOptions(a.dtype()).with_device(a.device())),
                 BinaryOp::bitwise_xor);
}

Tensor logical_and(const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.defined() && b.defined(), "logical_and: undefined tensor");
  return binary_dispatch("logical_and", a, b, BinaryOp::logical_and,
                         promote_types(a.dtype(), b.dtype()));
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.defined() && b.defined(), "logical_or: undefined tensor");
  return binary_dispatch("logical_or", a, b, BinaryOp::logical_or,
                         promote_types(a.dtype(), b.dtype()));
}
Tensor logical_xor(const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.defined() && b.defined(), "logical_xor: undefined tensor");
  return binary_dispatch("logical_xor", a, b, BinaryOp::logical_xor,
                         promote_types(a.dtype(), b.dtype()));
}

Tensor operator%(const Tensor& a, const Tensor& b) { return remainder(a, b); }
Tensor operator%(const Tensor& a, const Scalar& b) { return remainder(a, b); }
Tensor operator%(const Scalar& a, const Tensor& b) { return remainder(a, b); }
Tensor operator&(const Tensor& a, const Tensor& b) { return bitwise_and(a, b); }
Tensor operator|(const Tensor& a, const Tensor& b) { return bitwise_or(a, b); }
Tensor operator^(const Tensor& a, const Tensor& b) { return bitwise_xor(a, b); }
Tensor operator&(const Tensor& a, const Scalar& b) { return bitwise_and(a, b); }
Tensor operator|(const Tensor& a, const Scalar& b) { return bitwise_or(a, b); }
Tensor operator^(const Tensor& a, const Scalar& b) { return bitwise_xor(a, b); }
Tensor operator&(const Scalar& a, const Tensor& b) { return bitwise_and(b, a); }
Tensor operator|(const Scalar& a, const Tensor& b) { return bitwise_or(b, a); }
Tensor operator^(const Scalar& a, const Tensor& b) { return bitwise_xor(b, a); }
Tensor operator~(const Tensor& a) { return bitwise_not(a); }

}  // namespace ember
