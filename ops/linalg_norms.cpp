// linalg.matrix_norm and linalg.vector_norm: compositions of differentiable ops, so their
// gradients are the compositions' ('fro' through linalg_vector_norm, whose gradient at a zero norm
// is zero; 'nuc', 2 and -2 through svdvals, whose gradient needs distinct singular values; 1, -1,
// inf, -inf through abs, sum and amax / amin).
#include <cmath>

#include "ember/ops/linalg_internal.h"

namespace ember::linalg {

namespace {

std::string ord_str(const NormOrd& ord) {
  if (const auto* s = std::get_if<std::string>(&ord)) return "'" + *s + "'";
  return std::to_string(std::get<double>(ord));
}

}  // namespace

Tensor matrix_norm(const Tensor& a, const NormOrd& ord, const Shape& dims, bool keepdim) {
  const char* op = "linalg.matrix_norm";
  EMBER_CHECK(a.defined() && a.dim() >= 2, op, ": expects a tensor of >= 2 dims, got ",
              a.defined() ? a.shape_str() : "undefined");
  EMBER_CHECK(is_floating(a.dtype()), op, ": needs a floating-point input, got ",
              dtype_name(a.dtype()));
  EMBER_CHECK(dims.size() == 2, op, ": dims must name two dims, got ", shape_str(dims));
  const int64_t d0 = wrap_dim(dims[0], a.dim(), op), d1 = wrap_dim(dims[1], a.dim(), op);
  EMBER_CHECK(d0 != d1, op, ": dims must be different, got ", shape_str(dims));
  // The matrix dims moved last: rows = d0, cols = d1.
  Tensor x = a.movedim({d0, d1}, {a.dim() - 2, a.dim() - 1});
  Tensor r;
  if (const auto* s = std::get_if<std::string>(&ord)) {
    if (*s == "fro") {
      r = linalg_vector_norm(x, 2, {-2, -1});
    } else if (*s == "nuc") {
      r = sum(svdvals(x), {-1});
    } else {
      EMBER_CHECK(false, op, ": ord must be 'fro', 'nuc', 1, -1, 2, -2, inf or -inf, got ",
                  ord_str(ord));
    }
  } else {
    const double p = std::get<double>(ord);
    if (p == 2 || p == -2) {
      Tensor sv = svdvals(x);
      r = p > 0 ? amax(sv, {-1}) : amin(sv, {-1});
    } else if (p == 1 || p == -1) {  // max / min column sum
      Tensor cols = sum(abs(x), {-2});
      r = p > 0 ? amax(cols, {-1}) : amin(cols, {-1});
    } else if (std::isinf(p)) {  // max / min row sum
      Tensor rows = sum(abs(x), {-1});
      r = p > 0 ? amax(rows, {-1}) : amin(rows, {-1});
    } else {
      EMBER_CHECK(false, op, ": ord must be 'fro', 'nuc', 1, -1, 2, -2, inf or -inf, got ",
                  ord_str(ord));
    }
  }
  if (keepdim) {
    r = r.unsqueeze(std::min(d0, d1));
    r = r.unsqueeze(std::max(d0, d1));
  }
  return r;
}

Tensor vector_norm(const Tensor& a, double ord, const Shape& dims, bool keepdim) {
  return linalg_vector_norm(a, ord, dims, keepdim);
}

}  // namespace ember::linalg
