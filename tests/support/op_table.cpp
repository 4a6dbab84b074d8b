// The rows of the op table (see op_table.h) and the deterministic input maker.
#include "support/op_table.h"

#include <numeric>

namespace ember::testing {

namespace {
using V = const std::vector<Tensor>&;
TensorOptions like(const Tensor& t, DType d) { return TensorOptions(d).with_device(t.device()); }
Tensor idx(V x, std::vector<double> v, Shape s) {
  return from_vector(v, s, like(x[0], DType::i64));
}
}  // namespace

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> all = [] {
    std::vector<OpCase> v;
    for (const auto* area :
         {&op_cases_core(), &op_cases_norm(), &op_cases_act(), &op_cases_nn(), &op_cases_rnn(),
          &op_cases_conv(), &op_cases_index(), &op_cases_tapi(), &op_cases_reduce(),
          &op_cases_shape(), &op_cases_ewise(), &op_cases_linalg(), &op_cases_nnfunc(),
          &op_cases_attention(), &op_cases_nn_extra(), &op_cases_vision()})
      v.insert(v.end(), area->begin(), area->end());
    return v;
  }();
  return all;
}

const std::vector<OpCase>& op_cases_core() {
  static const std::vector<OpCase> cases = {
      // binary, with broadcasting
      {"add", {{3, 4}, {4}}, [](V x) { return add(x[0], x[1], 0.5); }},
      {"add_bcast3", {{2, 1, 3}, {4, 1}}, [](V x) { return x[0] + x[1]; }},
      {"sub", {{3, 4}, {3, 1}}, [](V x) { return x[0] - x[1]; }},
      {"mul", {{2, 3, 4}, {3, 1}}, [](V x) { return x[0] * x[1]; }},
      {"div", {{3, 5}, {5}}, [](V x) { return x[0] / x[1]; }, 0.5, 2.0},
      {"pow", {{4, 3}, {4, 3}}, [](V x) { return pow(x[0], x[1]); }, 0.5, 2.0},
      {"maximum", {{5, 4}, {4}}, [](V x) { return maximum(x[0], x[1]); }},
      {"minimum", {{5, 4}, {5, 1}}, [](V x) { return minimum(x[0], x[1]); }},
      // scalar operand
      {"add_scalar", {{3, 4}}, [](V x) { return x[0] + 2.5; }},
      {"mul_scalar", {{3, 4}}, [](V x) { return x[0] * -1.5; }},
      {"rsub_scalar", {{3, 4}}, [](V x) { return 1.0 - x[0]; }},
      {"div_scalar", {{3, 4}}, [](V x) { return x[0] / 4.0; }},
      {"rdiv_scalar", {{3, 4}}, [](V x) { return 2.0 / x[0]; }, 0.5, 2.0},
      {"pow_scalar", {{3, 4}}, [](V x) { return pow(x[0], 2.5); }, 0.5, 2.0},
      // unary
      {"neg", {{7}}, [](V x) { return -x[0]; }},
      {"exp", {{3, 5}}, [](V x) { return exp(x[0]); }},
      {"log", {{3, 5}}, [](V x) { return log(x[0]); }, 0.2, 3.0},
      {"sqrt", {{3, 5}}, [](V x) { return sqrt(x[0]); }, 0.2, 3.0},
      {"rsqrt", {{3, 5}}, [](V x) { return rsqrt(x[0]); }, 0.2, 3.0},
      {"abs", {{3, 5}}, [](V x) { return abs(x[0]); }, 0.1, 1.0},
      {"abs_neg", {{3, 5}}, [](V x) { return abs(x[0]); }, -1.0, -0.1},
      {"tanh", {{3, 5}}, [](V x) { return tanh(x[0]); }},
      {"sigmoid", {{3, 5}}, [](V x) { return sigmoid(x[0]); }},
      {"relu", {{4, 5}}, [](V x) { return relu(x[0]); }},
      {"sin", {{3, 5}}, [](V x) { return sin(x[0]); }},
      {"cos", {{3, 5}}, [](V x) { return cos(x[0]); }},
      {"square", {{3, 5}}, [](V x) { return square(x[0]); }},
      {"reciprocal", {{3, 5}}, [](V x) { return reciprocal(x[0]); }, 0.5, 2.0},
      {"clamp", {{4, 5}}, [](V x) { return clamp(x[0], -0.5, 0.6); }},
      {"clamp_min", {{4, 5}}, [](V x) { return clamp(x[0], 0.1, std::nullopt); }},
      {"where", {{3, 4}, {3, 4}}, [](V x) { return where(gt(x[0], x[1]), x[0] * 2.0, x[1]); }},
      {"to_float_roundtrip",
       {{3, 4}},
       [](V x) { return x[0].to(DType::f32).to(x[0].dtype()) * 3.0; },
       -1,
       1,
       false,
       false},
      // reductions
      {"sum_all", {{3, 4, 5}}, [](V x) { return sum(x[0]); }},
      {"sum_dims",
       {{3, 4, 5}},
       [](V x) {
         return sum(x[0], {0, 2});
       }},
      {"sum_keepdim", {{3, 4, 5}}, [](V x) { return sum(x[0], {1}, true); }},
      {"sum_last", {{6, 33}}, [](V x) { return sum(x[0], {-1}); }},
      {"mean", {{4, 6}}, [](V x) { return mean(x[0], {1}); }},
      {"mean_all", {{4, 6}}, [](V x) { return mean(x[0]); }},
      {"prod", {{3, 4}}, [](V x) { return prod(x[0], {1}); }, 0.5, 1.5},
      {"amax", {{4, 7}}, [](V x) { return amax(x[0], {1}); }},
      {"amin_all", {{4, 7}}, [](V x) { return amin(x[0]); }},
      {"max_dim", {{4, 7}}, [](V x) { return max(x[0], 0).values; }},
      {"min_dim_keep", {{4, 7}}, [](V x) { return min(x[0], 1, true).values; }},
      {"var", {{5, 6}}, [](V x) { return var(x[0], {1}); }},
      {"var_biased", {{5, 6}}, [](V x) { return var(x[0], {0}, 0); }},
      {"std", {{5, 6}}, [](V x) { return ember::std(x[0], {1}); }},
      {"logsumexp", {{4, 9}}, [](V x) { return logsumexp(x[0], {1}); }},
      {"log_softmax_ref", {{4, 9}}, [](V x) { return log_softmax_reference(x[0], 1); }},
      // linear algebra
      {"mm", {{5, 3}, {3, 4}}, [](V x) { return mm(x[0], x[1]); }},
      {"mm_transposed", {{3, 5}, {4, 3}}, [](V x) { return mm(x[0].t(), x[1].t()); }},
      {"bmm", {{2, 3, 4}, {2, 4, 5}}, [](V x) { return bmm(x[0], x[1]); }},
      {"matmul_bcast", {{2, 1, 3, 4}, {3, 4, 2}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_nd_2d", {{2, 3, 4}, {4, 5}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_vec", {{4}, {4, 3}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_mat_vec", {{3, 4}, {4}}, [](V x) { return matmul(x[0], x[1]); }},
      {"dot", {{6}, {6}}, [](V x) { return matmul(x[0], x[1]); }},
      {"addmm", {{4}, {3, 5}, {5, 4}}, [](V x) { return addmm(x[0], x[1], x[2], 0.5, 2.0); }},
      {"linear", {{2, 3, 5}, {4, 5}, {4}}, [](V x) { return linear(x[0], x[1], x[2]); }},
      {"linear_nobias", {{3, 5}, {4, 5}}, [](V x) { return linear(x[0], x[1]); }},
      // indexing
      {"index_select",
       {{5, 3}},
       [](V x) {
         return index_select(x[0], 0, idx(x, {4, 0, 4, 2}, {4}));
       },
       -1,
       1,
       true,
       true,
       true},
      {"index_select_d1",
       {{3, 5, 2}},
       [](V x) {
         return index_select(x[0], 1, idx(x, {1, 3}, {2}));
       },
       -1,
       1,
       true,
       true,
       true},
      {"gather",
       {{3, 4}},
       [](V x) {
         return gather(x[0], 1, idx(x, {0, 3, 1, 1, 2, 0}, {3, 2}));
       }},
      {"scatter_add",
       {{3, 4}, {2, 4}},
       [](V x) {
         return scatter_add(x[0], 0, idx(x, {0, 2, 1, 0, 2, 2, 0, 1}, {2, 4}), x[1]);
       }},
      {"embedding",
       {{6, 3}},
       [](V x) {
         return embedding(x[0], idx(x, {5, 1, 1, 0, 3, 5}, {2, 3}));
       },
       -1,
       1,
       true,
       true,
       true},
      // views and shape ops (gradients flow through their backward)
      {"reshape",
       {{3, 4}},
       [](V x) {
         return x[0].reshape({2, 6}) * x[0].reshape({2, 6});
       }},
      {"permute",
       {{2, 3, 4}},
       [](V x) {
         return x[0].permute({2, 0, 1}) * 2.0;
       }},
      {"transpose", {{3, 4}}, [](V x) { return mm(x[0].transpose(0, 1), x[0]); }},
      {"narrow", {{5, 4}}, [](V x) { return x[0].narrow(0, 1, 3) * 3.0; }},
      {"slice_step", {{7, 3}}, [](V x) { return x[0].slice(0, 1, 7, 2).exp(); }},
      {"select", {{4, 3}}, [](V x) { return x[0].select(1, -1) * 2.0; }},
      {"expand",
       {{3, 1}},
       [](V x) {
         return x[0].expand({3, 4}) * x[0].expand({2, 3, 4}).sum({0});
       }},
      {"squeeze_unsqueeze", {{3, 1, 4}}, [](V x) { return x[0].squeeze(1).unsqueeze(0) * 2.0; }},
      {"flatten", {{2, 3, 4}}, [](V x) { return x[0].flatten(1) * 2.0; }},
      {"cat",
       {{2, 3}, {4, 3}},
       [](V x) {
         return cat({x[0] * 2.0, x[1]}, 0);
       }},
      {"stack",
       {{2, 3}, {2, 3}},
       [](V x) {
         return stack({x[0], x[1] * x[1]}, 1);
       }},
      {"split",
       {{5, 3}},
       [](V x) {
         auto parts = split(x[0], 2, 0);
         return parts[0].sum() * 2.0 + parts[2].sum() + (parts[1] * parts[1]).sum();
       }},
      {"clone_contiguous", {{3, 4}}, [](V x) { return x[0].t().contiguous().clone() * 2.0; }},
      // a composite: the MLP building blocks of the Foundation issue
      {"mlp_block",
       {{4, 5}, {3, 5}, {3}},
       [](V x) { return log_softmax_reference(relu(linear(x[0], x[1], x[2])), 1); }},
  };
  return cases;
}

std::vector<Tensor> make_inputs(const OpCase& c, DType dtype, Device device, uint64_t seed,
                                Layout layout, bool requires_grad) {
  std::vector<Tensor> out;
  Generator gen(Device::cpu(), seed);
  for (const Shape& s : c.shapes) {
    Shape base_shape = s;
    const bool transpose = layout == Layout::transposed && s.size() >= 2;
    if (transpose) std::reverse(base_shape.begin(), base_shape.end());
    Tensor base = rand(base_shape, TensorOptions(DType::f64), &gen);
    base = base * (c.high - c.low) + c.low;
    Tensor t = base.to(device, dtype);
    if (transpose) {
      Shape perm(s.size());
      std::iota(perm.begin(), perm.end(), 0);
      std::reverse(perm.begin(), perm.end());
      t = t.permute(perm);
    } else if (layout == Layout::channels_last && s.size() == 4) {
      t = t.contiguous(MemoryFormat::channels_last);
    }
    t = t.detach();
    if (requires_grad) t.set_requires_grad(true);
    out.push_back(t);
  }
  return out;
}

}  // namespace ember::testing
