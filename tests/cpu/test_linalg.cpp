// Linear algebra on the CPU: the products of ops/linalg.h against explicit compositions (einsum
// over many subscript strings vs matmul / permute / sum), the decompositions of ember::linalg
// against values computed with libtorch 1.13.1 (torch.linalg, float64) and against their defining
// identities (Q R = A with orthonormal Q, U S Vh = A, inv(A) A = I, L L^T = A, V diag(L) V^T = A),
// float32 as well as float64, and the errors bad input raises.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "ember/ember.h"
#include "support/errors.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
using Vals = std::vector<double>;

namespace {
Tensor t64(Vals v, Shape s) { return from_vector(v, s, TensorOptions(DType::f64)); }
Tensor rnd(Shape s, uint64_t seed, DType d = DType::f64) {
  Generator g(Device::cpu(), seed);
  return rand(s, TensorOptions(d), &g) * 2.0 - 1.0;
}
Tensor eye_like(const Tensor& x) { return eye(x.size(-1), TensorOptions(x.dtype())); }
// Whether the batch of square matrices x is the identity within tol.
bool is_identity(const Tensor& x, double tol) {
  return max_abs_diff(x, eye_like(x).expand(x.sizes())) <= tol;
}
bool close(const Tensor& a, const Tensor& b, double tol = 1e-10) {
  REQUIRE(a.sizes() == b.sizes());
  return max_abs_diff(a, b) <= tol;
}
// The fixed inputs of the libtorch reference values.
Tensor A() { return t64({4, 1, 2, 1, 5, 3, 2, 3, 6}, {3, 3}); }   // symmetric positive definite
Tensor C() { return t64({2, -1, 0, 1, 3, 1, 0, 1, 4}, {3, 3}); }  // det 26
Tensor B() { return t64({1, 2, 3, 4, 5, 6}, {3, 2}); }
Tensor M() { return t64({1, 2, 3, 4, 5, 6, 7, 8, 10, 1, 0, 2}, {4, 3}); }
}  // namespace

TEST_CASE("mv, dot, outer, addmv, baddbmm, addbmm, kron, tensordot: values") {
  Tensor m = rnd({4, 3}, 1), v = rnd({3}, 2), w = rnd({4}, 3);
  CHECK(close(mv(m, v), matmul(m, v.unsqueeze(1)).squeeze(1)));
  CHECK(close(m.mv(v), mv(m, v)));
  CHECK(dot(v, v).item<double>() == doctest::Approx(sum(v * v).item<double>()));
  CHECK(dot(v, v).dim() == 0);
  CHECK(close(outer(w, v), matmul(w.unsqueeze(1), v.unsqueeze(0))));
  CHECK(close(addmv(w, m, v, 0.5, 2), w * 0.5 + mv(m, v) * 2.0));
  // beta = 0 ignores the input, NaNs included (as PyTorch).
  Tensor nan = full({4}, std::numeric_limits<double>::quiet_NaN(), TensorOptions(DType::f64));
  CHECK(close(addmv(nan, m, v, 0, 1), mv(m, v)));
  Tensor b1 = rnd({2, 3, 5}, 4), b2 = rnd({2, 5, 4}, 5), s = rnd({3, 4}, 6);
  CHECK(close(baddbmm(s, b1, b2, 0.5, 1.5), s * 0.5 + bmm(b1, b2) * 1.5));
  CHECK(close(s.addbmm(b1, b2, 2, 0.5), s * 2.0 + sum(bmm(b1, b2), {0}) * 0.5));
  Tensor k = kron(t64({1, 2, 3, 4}, {2, 2}), t64({0, 1, 1, 0, 2, 3}, {2, 3}));
  CHECK(k.sizes() == Shape{4, 6});
  CHECK(close(
      k, t64({0, 1, 1, 0, 2, 2, 0, 2, 3, 0, 4, 6, 0, 3, 3, 0, 4, 4, 0, 6, 9, 0, 8, 12}, {4, 6})));
  Tensor x = rnd({2, 3, 4}, 7), y = rnd({3, 4, 5}, 8);
  CHECK(close(tensordot(x, y, 2), matmul(x.reshape({2, 12}), y.reshape({12, 5}))));
  CHECK(close(tensordot(x, y, {1, 2}, {0, 1}), tensordot(x, y, 2)));
  CHECK(tensordot(x, y, 0).sizes() == Shape{2, 3, 4, 3, 4, 5});
}

TEST_CASE("einsum equals the explicit matmul / permute / sum result") {
  Tensor a = rnd({3, 4}, 11), b = rnd({4, 5}, 12), sq = rnd({4, 4}, 13), v = rnd({4}, 14);
  Tensor ba = rnd({2, 3, 4}, 15), bb = rnd({2, 4, 5}, 16), t3 = rnd({3, 4, 3}, 17);
  CHECK(close(einsum("ij,jk->ik", {a, b}), matmul(a, b)));
  CHECK(close(einsum("ij,jk", {a, b}), matmul(a, b)));  // implicit output
  CHECK(close(einsum(" i j , j k -> k i ", {a, b}), matmul(a, b).t()));
  CHECK(close(einsum("bij,bjk->bik", {ba, bb}), bmm(ba, bb)));
  CHECK(close(einsum("ii", {sq}), trace(sq)));
  CHECK(close(einsum("ii->i", {sq}), diagonal(sq)));
  CHECK(close(einsum("ij->ji", {a}), a.t()));
  CHECK(close(einsum("ji", {a}), a.t()));  // implicit: alphabetical order
  CHECK(close(einsum("ij->", {a}), sum(a)));
  CHECK(close(einsum("ij->j", {a}), sum(a, {0})));
  CHECK(close(einsum("i,i->", {v, v}), dot(v, v)));
  CHECK(close(einsum("i,j->ij", {v, v}), outer(v, v)));
  CHECK(close(einsum("ij,j->i", {a, v}), mv(a, v)));
  CHECK(close(einsum("ij,ij->ij", {a, a}), a * a));
  CHECK(close(einsum("bij->bji", {ba}), ba.transpose(1, 2)));
  CHECK(close(einsum("...ij->...ji", {ba}), ba.transpose(1, 2)));
  CHECK(close(einsum("...ij,jk->...ik", {ba, b}), matmul(ba, b)));
  CHECK(close(einsum("ij,...jk->...ik", {a, bb}), matmul(a, bb)));
  CHECK(close(einsum("b...,b...->b", {ba, ba}), sum(ba * ba, {1, 2})));
  CHECK(close(einsum("...ij->ij", {ba}), sum(ba, {0})));  // ellipsis dims summed
  CHECK(close(einsum("iji->j", {t3}), sum(diagonal(t3, 0, 0, 2), {1})));
  CHECK(close(einsum("iji,jk->k", {t3, b}), matmul(sum(diagonal(t3, 0, 0, 2), {1}), b)));
  CHECK(close(einsum("ij,jk,kl->il", {a, b, rnd({5, 2}, 18)}),
              matmul(matmul(a, b), rnd({5, 2}, 18))));
  CHECK(close(einsum("ij,kl->jl", {a, rnd({5, 2}, 19)}),
              outer(sum(a, {0}), sum(rnd({5, 2}, 19), {0}))));
  Tensor x2 = rnd({2, 1, 3, 4}, 20), y2 = rnd({5, 4, 2}, 21);
  CHECK(close(einsum("...ij,...jk->...ik", {x2, y2}), matmul(x2, y2)));
  Tensor bl = rnd({5, 3, 4}, 22), l = rnd({2, 3}, 23), r = rnd({2, 4}, 24);
  Tensor bil = einsum("bn,anm,bm->ba", {l, bl, r});
  CHECK(close(
      bil,
      sum(matmul(l.unsqueeze(1).unsqueeze(1), bl.unsqueeze(0)).squeeze(2) * r.unsqueeze(1), {2})));
  CHECK(close(einsum("BiJ,BJk->Bik", {ba, bb}), bmm(ba, bb)));  // upper-case labels
  // Empty operand dims.
  CHECK(einsum("ij,jk->ik", {rnd({3, 0}, 25), rnd({0, 2}, 26)}).sizes() == Shape{3, 2});
  CHECK(sum(abs(einsum("ij,jk->ik", {rnd({3, 0}, 25), rnd({0, 2}, 26)}))).item<double>() == 0);
  // float32 too.
  Tensor af = a.to(DType::f32), bf = b.to(DType::f32);
  CHECK(max_abs_diff(einsum("ij,jk->ik", {af, bf}), matmul(af, bf)) < 1e-5);
}

TEST_CASE("decompositions match torch.linalg (libtorch 1.13.1, float64)") {
  CHECK(close(linalg::inv(C()),
              t64({0.42307692307692307, 0.15384615384615383, -0.038461538461538457,
                   -0.15384615384615383, 0.30769230769230765, -0.076923076923076913,
                   0.038461538461538457, -0.076923076923076913, 0.26923076923076922},
                  {3, 3})));
  CHECK(linalg::det(C()).item<double>() == doctest::Approx(26).epsilon(1e-12));
  CHECK(C().det().item<double>() == doctest::Approx(26).epsilon(1e-12));
  auto sl = linalg::slogdet(-C());
  CHECK(sl.sign.item<double>() == -1);
  CHECK(sl.logabsdet.item<double>() == doctest::Approx(3.2580965380214821).epsilon(1e-12));
  CHECK(close(linalg::solve(C(), B()),
              t64({0.69230769230769229, 1.2307692307692308, 0.38461538461538458,
                   0.46153846153846151, 1.1538461538461537, 1.3846153846153846},
                  {3, 2})));
  CHECK(close(linalg::cholesky(A()),
              t64({2, 0, 0, 0.5, 2.179449471770337, 0, 1, 1.1470786693528088, 1.9194297398747862},
                  {3, 3})));
  auto qr = linalg::qr(M());
  CHECK(close(qr.Q, t64({-0.12216944435630528, 0.56427649268687896, 0.78896626774472534,
                         -0.48867777742522095, 0.23175641663925339, -0.017339917972411602,
                         -0.85518611049413662, -0.10076365940837118, -0.18640411820342423,
                         -0.12216944435630524, -0.78595654338529486, 0.58522223156889042},
                        {4, 3})));
  CHECK(close(qr.R, t64({-8.1853527718724504, -9.5292166597918087, -12.094774991274218, 0,
                         1.481225793303057, 0.50381829704185677, 0, 0, 1.5692625765032455},
                        {3, 3})));
  CHECK(close(linalg::eigh(A()).eigenvalues,
              t64({2.1943971674224092, 3.3867701566075485, 9.4188326759700374}, {3})));
  CHECK(close(linalg::svdvals(M()),
              t64({17.510656102879587, 1.2922681494967512, 0.84081262864102502}, {3})));
  Tensor y = t64({1, 0, 2, -1}, {4, 1});
  CHECK(close(linalg::lstsq(M(), y).solution,
              t64({-0.57734806629834212, 0.81215469613259716, -0.10773480662983521}, {3, 1})));
  CHECK(close(
      linalg::lstsq(M().t(), t64({1, 2, 3}, {3, 1})).solution,
      t64({0.95580110497237591, 0.17679558011049695, -0.099447513812154956, 0.033149171270718703},
          {4, 1})));
  const double inf = std::numeric_limits<double>::infinity();
  auto norm = [&](linalg::NormOrd o) { return linalg::matrix_norm(M(), o).item<double>(); };
  CHECK(norm(std::string("fro")) == doctest::Approx(17.578395831246947).epsilon(1e-12));
  CHECK(norm(std::string("nuc")) == doctest::Approx(19.643736881017364).epsilon(1e-12));
  CHECK(norm(1.0) == 21);
  CHECK(norm(-1.0) == 13);
  CHECK(norm(2.0) == doctest::Approx(17.510656102879587).epsilon(1e-12));
  CHECK(norm(-2.0) == doctest::Approx(0.84081262864102502).epsilon(1e-12));
  CHECK(norm(inf) == 25);
  CHECK(norm(-inf) == 3);
  CHECK(linalg::matrix_norm(M(), 1.0, {-2, -1}, true).sizes() == Shape{1, 1});
  CHECK(logdet(A()).item<double>() == doctest::Approx(4.2484952420493585).epsilon(1e-12));
  CHECK(std::isnan(logdet(-C()).item<double>()));
  CHECK(close(linalg::vector_norm(M(), 2), linalg::matrix_norm(M())));
}

TEST_CASE("decompositions satisfy their identities (batched, float32 and float64)") {
  for (DType d : {DType::f64, DType::f32}) {
    CAPTURE(dtype_name(d));
    const double tol = d == DType::f64 ? 1e-10 : 2e-4;
    Tensor a = rnd({2, 3, 5, 5}, 31, d) + eye(5, TensorOptions(d)) * 4.0;
    CHECK(close(matmul(linalg::inv(a), a), eye_like(a).expand(a.sizes()), tol));
    Tensor rhs = rnd({3, 5, 2}, 32, d);  // broadcast over the batch of a
    CHECK(close(matmul(a, linalg::solve(a, rhs)), rhs.expand({2, 3, 5, 2}), tol));
    Tensor s = matmul(a, a.transpose(-2, -1));
    Tensor l = linalg::cholesky(s);
    CHECK(close(matmul(l, l.transpose(-2, -1)), s, tol * 10));
    CHECK(close(l, tril(l), 0));
    Tensor u = linalg::cholesky(s, true);
    CHECK(close(u, l.transpose(-2, -1), tol * 10));
    auto e = linalg::eigh(s);
    CHECK(close(
        matmul(e.eigenvectors * e.eigenvalues.unsqueeze(-2), e.eigenvectors.transpose(-2, -1)), s,
        tol * 100));
    Tensor ratio = linalg::det(s) / prod(linalg::eigvalsh(s), {-1});
    CHECK(close(ratio, ones_like(ratio), tol * 100));
    for (Shape shape : {Shape{2, 6, 4}, Shape{2, 4, 6}, Shape{5, 5}}) {
      CAPTURE(shape_str(shape));
      Tensor m = rnd(shape, 33, d);
      const int64_t rows = m.size(-2), cols = m.size(-1), k = std::min(rows, cols);
      for (std::string mode : {"reduced", "complete"}) {
        auto f = linalg::qr(m, mode);
        CHECK(close(matmul(f.Q, f.R), m, tol));
        CHECK(is_identity(matmul(f.Q.transpose(-2, -1), f.Q), tol));
        CHECK(close(f.R, triu(f.R), 0));
      }
      CHECK(close(linalg::qr(m, "r").R, linalg::qr(m).R, 0));
      CHECK_FALSE(linalg::qr(m, "r").Q.defined());
      for (bool full : {false, true}) {
        auto f = linalg::svd(m, full);
        CHECK(f.U.size(-1) == (full ? rows : k));
        CHECK(f.Vh.size(-2) == (full ? cols : k));
        Tensor us = f.U.narrow(-1, 0, k) * f.S.unsqueeze(-2);
        CHECK(close(matmul(us, f.Vh.narrow(-2, 0, k)), m, tol * 10));
        CHECK(is_identity(matmul(f.U.transpose(-2, -1), f.U), tol * 10));
        CHECK(is_identity(matmul(f.Vh, f.Vh.transpose(-2, -1)), tol * 10));
      }
      Tensor sv = linalg::svdvals(m);
      CHECK(close(sv, std::get<0>(sort(sv, -1, true)), 0));
    }
  }
  // Empty batches and 0 x 0 matrices.
  CHECK(linalg::inv(rnd({0, 3, 3}, 40)).sizes() == Shape{0, 3, 3});
  CHECK(linalg::det(rnd({2, 0, 0}, 41)).to_vector() == Vals{1, 1});
  CHECK(linalg::svd(rnd({3, 0}, 42), false).S.sizes() == Shape{0});
}

TEST_CASE("decomposition gradients flow through a batch and broadcasting") {
  Tensor a = (rnd({2, 3, 3}, 50) + eye(3, TensorOptions(DType::f64)) * 4.0).set_requires_grad(true);
  Tensor b = rnd({3, 1}, 51).set_requires_grad(true);
  linalg::solve(a, b).sum().backward();
  CHECK(a.grad().sizes() == a.sizes());
  CHECK(b.grad().sizes() == b.sizes());
  // d log|det A| / dA = A^-T
  Tensor c = C().set_requires_grad(true);
  linalg::slogdet(c).logabsdet.backward();
  CHECK(close(c.grad(), linalg::inv(C()).t()));
}

TEST_CASE("linear algebra errors name the op, the argument and the shapes") {
  Tensor m = rnd({3, 4}, 60), v = rnd({5}, 61);
  CHECK(contains(error_of([&] { mv(m, v); }), "mv"));
  CHECK(contains(error_of([&] { mv(m, v); }), "[3, 4]"));
  CHECK(contains(error_of([&] { dot(v, rnd({4}, 62)); }), "dot"));
  CHECK(contains(error_of([&] { outer(m, v); }), "outer: expects two 1-D"));
  CHECK(contains(error_of([&] { addmv(rnd({7}, 63), m, rnd({4}, 64)); }), "addmv"));
  CHECK(contains(error_of([&] { baddbmm(m, rnd({2, 3, 4}, 65), rnd({3, 4, 5}, 66)); }), "baddbmm"));
  CHECK(contains(error_of([&] { addbmm(m, rnd({2, 3}, 65), rnd({2, 3, 4}, 66)); }), "addbmm"));
  CHECK(contains(error_of([&] { tensordot(m, m, {0}, {1}); }), "tensordot: contracted dim"));
  CHECK(contains(error_of([&] { tensordot(m, m, 3); }), "tensordot"));
  // einsum
  CHECK(contains(error_of([&] { einsum("ij,jk->ik", {m}); }), "2 operand terms but 1"));
  CHECK(contains(error_of([&] { einsum("ijk", {m}); }), "has 2 dims but its subscripts name 3"));
  CHECK(contains(error_of([&] { einsum("ij->k", {m}); }), "output subscript k"));
  CHECK(contains(error_of([&] { einsum("ij->ii", {m}); }), "more than once"));
  CHECK(contains(error_of([&] { einsum("i1", {m}); }), "letters"));
  CHECK(contains(error_of([&] { einsum("i.j", {m}); }), "'...'"));
  CHECK(contains(error_of([&] { einsum("ij->i->j", {m}); }), "more than one '->'"));
  CHECK(contains(error_of([&] { einsum("ii", {m}); }), "different sizes"));
  CHECK(contains(error_of([&] {
                   einsum("ij,ij->i", {m, rnd({3, 5}, 67)});
                 }),
                 "subscript j has size 4"));
  // decompositions
  CHECK(contains(error_of([&] { linalg::inv(m); }),
                 "linalg.inv: expects square matrices, got [3, 4]"));
  CHECK(contains(error_of([&] { linalg::det(v); }), "linalg.slogdet"));
  Tensor singular = t64({1, 2, 2, 4}, {2, 2});
  CHECK(contains(error_of([&] { linalg::inv(singular); }), "singular"));
  CHECK(contains(error_of([&] { linalg::solve(singular, rnd({2}, 68)); }), "linalg.solve"));
  CHECK(contains(error_of([&] {
                   linalg::inv(stack({C(), t64({1, 2, 3, 2, 4, 6, 0, 0, 1}, {3, 3})}));
                 }),
                 "matrix 1"));
  CHECK(contains(error_of([&] { linalg::cholesky(-A()); }), "not positive-definite"));
  CHECK(contains(error_of([&] { linalg::solve(C(), rnd({4, 2}, 69)); }), "B needs 3 rows"));
  CHECK(contains(error_of([&] { linalg::inv(C().to(DType::i64)); }), "float32 and float64"));
  CHECK(contains(error_of([&] { linalg::qr(M(), "full"); }), "mode"));
  CHECK(contains(error_of([&] { linalg::eigh(A(), "X"); }), "uplo"));
  CHECK(contains(error_of([&] { linalg::matrix_norm(M(), 3.0); }), "ord must be"));
  CHECK(contains(error_of([&] { linalg::matrix_norm(M(), std::string("max")); }), "ord must be"));
  CHECK(contains(error_of([&] { linalg::matrix_norm(M(), 1.0, {0, 0}); }), "different"));
  CHECK(contains(error_of([&] { linalg::lstsq(M(), rnd({3, 1}, 70)); }), "linalg.lstsq"));
  // Backward through an exactly singular input raises rather than returning inf.
  Tensor s2 = singular.clone().set_requires_grad(true);
  Tensor d = linalg::det(s2);
  CHECK(d.item<double>() == 0);
  CHECK(contains(error_of([&] { d.backward(); }), "singular"));
  Tensor q = M().set_requires_grad(true);
  CHECK(contains(error_of([&] { linalg::qr(q, "r").R.sum().backward(); }), "mode='r'"));
  Tensor wide = rnd({3, 5}, 71).set_requires_grad(true);
  CHECK(contains(error_of([&] { linalg::qr(wide).R.sum().backward(); }), "more columns"));
}
