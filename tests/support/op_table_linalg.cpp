// Op-table rows (see op_table.h) for linear algebra. op_cases_linalg(): the products of
// ops/linalg.h (mv, dot, outer, addmv, baddbmm, addbmm, kron, tensordot, einsum over many
// subscript strings, broadcast matmul), which run on every device. op_cases_linalg_decomp(): the
// torch.linalg decompositions (CPU only, so kept out of op_cases(), which the CUDA parity suite
// walks too); tests/cpu/test_linalg_decomp.cpp gradchecks them. Decomposition inputs are built
// well conditioned from the raw input x: x + 3 I for LU-based ops, x x^T + n I for the symmetric
// positive-definite ones; eigenvector / singular-vector outputs enter as squares (independent of
// the arbitrary signs).
#include "support/op_table.h"

namespace ember::testing {

namespace {
using V = const std::vector<Tensor>&;
Tensor shifted(const Tensor& x, double s) {  // x + s I over the last two dims
  return x + eye(x.size(-1), TensorOptions(x.dtype()).with_device(x.device())) * s;
}
Tensor spd(const Tensor& x) {  // x x^T + n I
  return shifted(matmul(x, x.transpose(-2, -1)), double(x.size(-1)));
}
Tensor flat_cat(std::vector<Tensor> ts) {
  for (Tensor& t : ts) t = t.reshape({-1});
  return cat(ts, 0);
}
}  // namespace

const std::vector<OpCase>& op_cases_linalg() {
  static const std::vector<OpCase> cases = {
      {"mv", {{4, 3}, {3}}, [](V x) { return mv(x[0], x[1]); }},
      {"dot", {{5}, {5}}, [](V x) { return dot(x[0], x[1]); }},
      {"dot_one", {{1}, {1}}, [](V x) { return dot(x[0], x[1]); }},
      {"outer", {{4}, {3}}, [](V x) { return outer(x[0], x[1]); }},
      {"addmv", {{4}, {4, 3}, {3}}, [](V x) { return addmv(x[0], x[1], x[2], 0.5, 2.0); }},
      {"addmv_bcast", {{1}, {4, 3}, {3}}, [](V x) { return x[0].addmv(x[1], x[2]); }},
      {"baddbmm",
       {{2, 3, 4}, {2, 3, 5}, {2, 5, 4}},
       [](V x) { return baddbmm(x[0], x[1], x[2], 0.5, 1.5); }},
      {"baddbmm_bcast",
       {{3, 1}, {2, 3, 5}, {2, 5, 4}},
       [](V x) { return baddbmm(x[0], x[1], x[2]); }},
      {"addbmm",
       {{3, 4}, {2, 3, 5}, {2, 5, 4}},
       [](V x) { return addbmm(x[0], x[1], x[2], 2, 0.5); }},
      {"kron", {{2, 3}, {3, 2}}, [](V x) { return kron(x[0], x[1]); }},
      {"kron_one", {{1, 1}, {2, 3, 2}}, [](V x) { return kron(x[0], x[1]); }},
      {"kron_rank", {{2}, {2, 3, 2}}, [](V x) { return x[0].kron(x[1]); }},
      {"tensordot", {{2, 3, 4}, {3, 4, 5}}, [](V x) { return tensordot(x[0], x[1], 2); }},
      {"tensordot_dims",
       {{3, 4, 2}, {2, 5, 3}},
       [](V x) {
         return tensordot(x[0], x[1], {0, 2}, {2, 0});
       }},
      {"matmul_bcast_batch", {{2, 1, 3, 4}, {3, 4, 2}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_vec_batch", {{5}, {2, 5, 3}}, [](V x) { return matmul(x[0], x[1]); }},
      {"einsum_mm",
       {{3, 4}, {4, 5}},
       [](V x) {
         return einsum("ij,jk->ik", {x[0], x[1]});
       }},
      {"einsum_bmm",
       {{2, 3, 4}, {2, 4, 5}},
       [](V x) {
         return einsum("bij,bjk->bik", {x[0], x[1]});
       }},
      {"einsum_trace", {{4, 4}}, [](V x) { return einsum("ii", {x[0]}); }},
      {"einsum_diag", {{4, 4}}, [](V x) { return einsum("ii->i", {x[0]}); }},
      {"einsum_transpose", {{3, 4}}, [](V x) { return einsum("ij->ji", {x[0]}); }},
      {"einsum_sum", {{3, 4}}, [](V x) { return einsum("ij->", {x[0]}); }},
      {"einsum_outer",
       {{3}, {4}},
       [](V x) {
         return einsum("i,j", {x[0], x[1]});
       }},
      {"einsum_ellipsis",
       {{2, 3, 4}, {4, 5}},
       [](V x) {
         return einsum("...ij,jk->...ik", {x[0], x[1]});
       }},
      {"einsum_ellipsis_bcast",
       {{2, 1, 3, 4}, {5, 4, 2}},
       [](V x) {
         return einsum("...ij,...jk->...ik", {x[0], x[1]});
       }},
      {"einsum_three",
       {{2, 3}, {3, 4}, {4, 2}},
       [](V x) {
         return einsum("ij,jk,kl->il", {x[0], x[1], x[2]});
       }},
      {"einsum_bilinear",
       {{2, 3}, {5, 3, 4}, {2, 4}},
       [](V x) {
         return einsum("bn,anm,bm->ba", {x[0], x[1], x[2]});
       }},
      {"einsum_repeated_pair",
       {{3, 4, 3}, {4, 2}},
       [](V x) {
         return einsum("iji,jk->k", {x[0], x[1]});
       }},
      {"einsum_transposed_out",  // a contraction long enough for cuBLAS, written transposed
       {{9, 70}, {70, 5}},
       [](V x) {
         return einsum("ij,jk->ki", {x[0], x[1]});
       }},
      {"einsum_sum_each",
       {{3, 4}, {5, 2}},
       [](V x) {
         return einsum("ij,kl->jl", {x[0], x[1]});
       }},
  };
  return cases;
}

const std::vector<OpCase>& op_cases_linalg_decomp() {
  static const std::vector<OpCase> cases = {
      {"linalg_inv", {{3, 3}}, [](V x) { return linalg::inv(shifted(x[0], 4)); }},
      {"linalg_inv_batch", {{2, 3, 3}}, [](V x) { return inverse(shifted(x[0], 4)); }},
      {"linalg_solve", {{3, 3}, {3, 2}}, [](V x) { return linalg::solve(shifted(x[0], 4), x[1]); }},
      {"linalg_solve_vec",
       {{2, 3, 3}, {2, 3}},
       [](V x) { return linalg::solve(shifted(x[0], 4), x[1]); }},
      {"linalg_solve_bcast",
       {{3, 3}, {2, 3, 2}},
       [](V x) { return linalg::solve(shifted(x[0], 4), x[1]); }},
      {"linalg_cholesky", {{3, 3}}, [](V x) { return linalg::cholesky(spd(x[0])); }},
      {"linalg_cholesky_upper", {{2, 3, 3}}, [](V x) { return linalg::cholesky(spd(x[0]), true); }},
      {"linalg_det", {{3, 3}}, [](V x) { return linalg::det(shifted(x[0], 4)); }},
      {"linalg_det_batch", {{2, 3, 3}}, [](V x) { return det(shifted(x[0], -4)); }},
      {"linalg_slogdet",
       {{2, 3, 3}},
       [](V x) { return linalg::slogdet(shifted(x[0], 4)).logabsdet; }},
      {"logdet", {{3, 3}}, [](V x) { return logdet(spd(x[0])); }},
      {"linalg_qr_tall",
       {{4, 3}},
       [](V x) {
         auto f = linalg::qr(x[0]);
         return flat_cat({f.Q, f.R});
       }},
      {"linalg_qr_square_complete",
       {{2, 3, 3}},
       [](V x) {
         auto f = linalg::qr(x[0], "complete");
         return flat_cat({f.Q, f.R});
       }},
      {"linalg_qr_R_only_grad", {{4, 3}}, [](V x) { return linalg::qr(x[0]).R; }},
      {"linalg_eigh",
       {{3, 3}},
       [](V x) {
         auto e = linalg::eigh(spd(x[0]));
         return flat_cat({e.eigenvalues, e.eigenvectors * e.eigenvectors});
       }},
      {"linalg_eigh_upper",
       {{2, 3, 3}},
       [](V x) {
         auto e = linalg::eigh(x[0] + x[0].transpose(-2, -1), "U");
         return flat_cat({e.eigenvalues, e.eigenvectors * e.eigenvectors});
       }},
      {"linalg_eigvalsh", {{4, 4}}, [](V x) { return linalg::eigvalsh(spd(x[0])); }},
      {"linalg_svd_tall",
       {{4, 3}},
       [](V x) {
         auto f = linalg::svd(x[0], false);
         return flat_cat({f.S, f.U * f.U, f.Vh * f.Vh});
       }},
      {"linalg_svd_wide",
       {{2, 3, 5}},
       [](V x) {
         auto f = linalg::svd(x[0], false);
         return flat_cat({f.S, f.U * f.U, f.Vh * f.Vh});
       }},
      {"linalg_svd_full",
       {{4, 3}},
       [](V x) {
         auto f = linalg::svd(x[0], true);
         Tensor u = f.U.narrow(-1, 0, 3);
         return flat_cat({f.S, u * u, f.Vh * f.Vh});
       }},
      {"linalg_svd_reconstruct",
       {{3, 4}},
       [](V x) {
         auto f = linalg::svd(x[0], false);
         return matmul(f.U * f.S.unsqueeze(-2), f.Vh);
       }},
      {"linalg_svdvals", {{5, 3}}, [](V x) { return linalg::svdvals(x[0]); }},
      {"linalg_lstsq_tall",
       {{5, 3}, {5, 2}},
       [](V x) { return linalg::lstsq(x[0], x[1]).solution; }},
      {"linalg_lstsq_wide",
       {{3, 5}, {3, 2}},
       [](V x) { return linalg::lstsq(x[0], x[1]).solution; }},
      {"matrix_norm_fro", {{3, 4}}, [](V x) { return linalg::matrix_norm(x[0]); }},
      {"matrix_norm_nuc",
       {{2, 3, 4}},
       [](V x) { return linalg::matrix_norm(x[0], std::string("nuc")); }},
      {"matrix_norm_2", {{4, 3}}, [](V x) { return linalg::matrix_norm(x[0], 2.0); }},
      {"matrix_norm_m2", {{4, 3}}, [](V x) { return linalg::matrix_norm(x[0], -2.0); }},
      {"matrix_norm_1", {{4, 3}}, [](V x) { return linalg::matrix_norm(x[0], 1.0); }},
      {"matrix_norm_inf_dims",
       {{4, 2, 3}},
       [](V x) {
         return linalg::matrix_norm(x[0], -std::numeric_limits<double>::infinity(), {2, 0}, true);
       }},
  };
  return cases;
}

}  // namespace ember::testing
