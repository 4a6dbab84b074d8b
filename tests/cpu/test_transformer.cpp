// nn::MultiheadAttention and the Transformer layers and stacks (nn/multihead_attention.h,
// nn/transformer.h) on the CPU in float64: values against libtorch 1.13.1 (its C++ API run on the
// same parameters and inputs, both filled by the formulas below; only the numbers are kept here),
// PyTorch's state-dict names, mask semantics (bool true = not allowed; float masks added), the
// two attention paths (explicit weights and scaled_dot_product_attention) agreeing, batch_first
// and unbatched layouts, fp64 gradchecks through inputs and parameters, and the argument errors.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ember/ember.h"

using namespace ember;

namespace {

// Each parameter element k gets 0.5 sin(0.731 k + 0.1 seed(name)): keyed by the name, so the
// libtorch run and this one agree only when the names do.
double name_seed(const std::string& n) {
  long s = 0;
  for (size_t i = 0; i < n.size(); ++i) s += long(static_cast<unsigned char>(n[i])) * long(i + 1);
  return double(s % 1000);
}

void fill_parameters(nn::Module& m) {
  autograd::NoGradGuard no_grad;
  for (auto& [name, p] : m.named_parameters()) {
    std::vector<double> v(size_t(p.numel()));
    for (size_t k = 0; k < v.size(); ++k)
      v[k] = 0.5 * std::sin(0.731 * double(k) + 0.1 * name_seed(name));
    p.copy_(from_vector(v, p.shape(), TensorOptions(p.dtype())));
  }
}

// Inputs: sin(0.5 k + off) + 0.1 cos(1.7 k), float64.
Tensor input(const Shape& shape, double off) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> v(static_cast<size_t>(n));
  for (size_t k = 0; k < v.size(); ++k)
    v[k] = std::sin(0.5 * double(k) + off) + 0.1 * std::cos(1.7 * double(k));
  return from_vector(v, shape, TensorOptions(DType::f64));
}

Tensor bools(const std::vector<double>& v, const Shape& shape) {
  return from_vector(v, shape, TensorOptions(DType::boolean));
}

void check_values(const Tensor& t, const std::vector<double>& want, double tol = 1e-9) {
  REQUIRE(t.defined());
  std::vector<double> got = t.contiguous().to_vector();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])));
  }
}

void check_close(const Tensor& a, const Tensor& b, double tol = 1e-10) {
  REQUIRE(a.shape() == b.shape());
  CHECK(max_abs_diff(a, b) < tol);
}

std::vector<std::string> names_of(const nn::Module& m) {
  std::vector<std::string> out;
  for (auto& [name, t] : m.state_dict()) out.push_back(name);
  return out;
}

template <typename Holder>
Holder f64_eval(Holder h) {
  h->to(DType::f64);
  fill_parameters(*h);
  h->eval();
  return h;
}

// ---- libtorch 1.13.1 reference values (float64) ----
const std::vector<std::string> k_mha_names = {"in_proj_weight", "in_proj_bias", "out_proj.weight",
                                              "out_proj.bias"};
const std::vector<double> k_mha1_out = {
    -0.399998333593,  0.637254186071,   -0.884098130555, -0.0888760891767, -0.301480668444,
    0.606958125814,   -0.923452438888,  0.0182726366211, -0.219381621114,  0.509074793946,
    -0.814401005247,  -0.0968040277966, -0.103707350968, 0.400831908657,   -0.718694244632,
    -0.175461128181,  -0.308846311625,  0.612945862953,  -0.927779888006,  0.0207357150037,
    -0.0117844023376, 0.363241731972,   -0.737209594481, -0.101713436611};
const std::vector<double> k_mha1_w = {0,
                                      0.665770694877,
                                      0,
                                      0.334229305123,
                                      0,
                                      0.301037551248,
                                      0.365548946144,
                                      0.333413502607,
                                      0,
                                      0,
                                      0.380027240371,
                                      0.619972759629,
                                      0.281481248263,
                                      0.718518751737,
                                      0,
                                      0,
                                      0.284876411588,
                                      0.144574371675,
                                      0.570549216737,
                                      0,
                                      0.592333071092,
                                      0,
                                      0.407666928908,
                                      0};
const std::vector<std::string> k_mha2_names = {"q_proj_weight",   "k_proj_weight", "v_proj_weight",
                                               "in_proj_bias",    "bias_k",        "bias_v",
                                               "out_proj.weight", "out_proj.bias"};
const std::vector<double> k_mha2_out = {
    -0.164524148182,  0.44812849931,    -0.750240119172, -0.161153674755, -0.168251127618,
    0.434968272162,   -0.720813322404,  -0.205459271955, 0.0222124061142, 0.26397716227,
    -0.577358585538,  -0.314612303319,  0.0536401652953, 0.245513443887,  -0.572729657825,
    -0.305188139903,  -0.0387880364162, 0.319704700498,  -0.625185106009, -0.276942301672,
    -0.0649358208283, 0.335221403007,   -0.629338958158, -0.284347195756};
const std::vector<double> k_mha2_w = {
    0.0560278713572, 0.376642836215,  0.0618790678655, 0.289555814444, 0.109881038043,
    0.106013372075,  0.234459524699,  0.0857830346152, 0.118451147731, 0.0760204099158,
    0.286205024567,  0.199080858472,  0.113439568951,  0.102016282872, 0.139101932312,
    0.187457813143,  0.251746896287,  0.206237506435,  0.109627580194, 0.296087837851,
    0.103042000767,  0.273040212534,  0.110765718053,  0.107436650601, 0.227891480346,
    0.138582733725,  0.137659683777,  0.10048776781,   0.204885950276, 0.190492384066,
    0.131321150712,  0.0849424051584, 0.192042565096,  0.128279682601, 0.257791540119,
    0.205622656314,  0.207203784834,  0.134079721681,  0.222994094009, 0.114032478691,
    0.181848012956,  0.13984190783,   0.171512197815,  0.187438804374, 0.0778548568808,
    0.171234273033,  0.200210808314,  0.191749059584,  0.122941190377, 0.0647808215849,
    0.180408005235,  0.107065597802,  0.311911591646,  0.212892793355, 0.115157702039,
    0.254252507324,  0.124649679342,  0.187796805633,  0.179532821431, 0.13861048423,
    0.281692011283,  0.128555058115,  0.141932315658,  0.117192631206, 0.163509590017,
    0.167118393721,  0.0951109758636, 0.136833501571,  0.129946470759, 0.216531613708,
    0.22200840866,   0.199569029438};
const std::vector<std::string> k_enc_names = {"self_attn.in_proj_weight",
                                              "self_attn.in_proj_bias",
                                              "self_attn.out_proj.weight",
                                              "self_attn.out_proj.bias",
                                              "linear1.weight",
                                              "linear1.bias",
                                              "linear2.weight",
                                              "linear2.bias",
                                              "norm1.weight",
                                              "norm1.bias",
                                              "norm2.weight",
                                              "norm2.bias"};
const std::vector<double> k_enc_out = {
    -0.00935761829321, -0.410465451492, 0.277776445555,   0.644413112429,   0.0275801536415,
    -0.0232980956093,  -0.125200424517, 0.518184291955,   -0.0324605275438, -0.299977908214,
    0.0434293312777,   0.768175997639,  -0.0218383793305, -0.437196318206,  0.315091392328,
    0.67155151282,     0.0261491000174, -0.0808586921152, -0.0926710288621, 0.544520292838,
    -0.0158894386189,  -0.316179297385, 0.0801919588935,  0.715929299984};
const std::vector<double> k_enc_prenorm_gelu_out = {
    -0.0712583498098, 2.12281609813,    0.875124937865,  2.21268910589,  0.547744733458,
    1.92489763282,    -0.0866156527867, 0.553958394305,  -1.17627188329, 0.387043693293,
    -0.863361445486,  0.70416663676,    -0.444254026707, 1.76199099766,  0.908523742936,
    2.20972284672,    0.522037100421,   2.1255035332,    0.335649049005, 0.860447925829,
    -1.13059147059,   0.467716655092,   -0.811976524527, 0.38275022677};
const std::vector<std::string> k_dec_names = {"self_attn.in_proj_weight",
                                              "self_attn.in_proj_bias",
                                              "self_attn.out_proj.weight",
                                              "self_attn.out_proj.bias",
                                              "multihead_attn.in_proj_weight",
                                              "multihead_attn.in_proj_bias",
                                              "multihead_attn.out_proj.weight",
                                              "multihead_attn.out_proj.bias",
                                              "linear1.weight",
                                              "linear1.bias",
                                              "linear2.weight",
                                              "linear2.bias",
                                              "norm1.weight",
                                              "norm1.bias",
                                              "norm2.weight",
                                              "norm2.bias",
                                              "norm3.weight",
                                              "norm3.bias"};
const std::vector<double> k_dec_out = {
    0.269396390199,  -0.351584659366, 0.39020001446,   0.469487441778,  0.217789065919,
    -0.472918025392, 0.743033448803,  0.423213079557,  0.270401238316,  -0.393212055812,
    0.455837859652,  0.461576667475,  0.262824285221,  -0.378432161934, 0.434825706927,
    0.465807988604,  0.228826639832,  -0.457177489335, 0.632855538963,  0.443204552286,
    0.239865810911,  -0.4466660193,   0.590166155706,  0.448283143275};
const std::vector<std::string> k_tr_names = {"encoder.layers.0.self_attn.in_proj_weight",
                                             "encoder.layers.0.self_attn.in_proj_bias",
                                             "encoder.layers.0.self_attn.out_proj.weight",
                                             "encoder.layers.0.self_attn.out_proj.bias",
                                             "encoder.layers.0.linear1.weight",
                                             "encoder.layers.0.linear1.bias",
                                             "encoder.layers.0.linear2.weight",
                                             "encoder.layers.0.linear2.bias",
                                             "encoder.layers.0.norm1.weight",
                                             "encoder.layers.0.norm1.bias",
                                             "encoder.layers.0.norm2.weight",
                                             "encoder.layers.0.norm2.bias",
                                             "encoder.layers.1.self_attn.in_proj_weight",
                                             "encoder.layers.1.self_attn.in_proj_bias",
                                             "encoder.layers.1.self_attn.out_proj.weight",
                                             "encoder.layers.1.self_attn.out_proj.bias",
                                             "encoder.layers.1.linear1.weight",
                                             "encoder.layers.1.linear1.bias",
                                             "encoder.layers.1.linear2.weight",
                                             "encoder.layers.1.linear2.bias",
                                             "encoder.layers.1.norm1.weight",
                                             "encoder.layers.1.norm1.bias",
                                             "encoder.layers.1.norm2.weight",
                                             "encoder.layers.1.norm2.bias",
                                             "encoder.norm.weight",
                                             "encoder.norm.bias",
                                             "decoder.layers.0.self_attn.in_proj_weight",
                                             "decoder.layers.0.self_attn.in_proj_bias",
                                             "decoder.layers.0.self_attn.out_proj.weight",
                                             "decoder.layers.0.self_attn.out_proj.bias",
                                             "decoder.layers.0.multihead_attn.in_proj_weight",
                                             "decoder.layers.0.multihead_attn.in_proj_bias",
                                             "decoder.layers.0.multihead_attn.out_proj.weight",
                                             "decoder.layers.0.multihead_attn.out_proj.bias",
                                             "decoder.layers.0.linear1.weight",
                                             "decoder.layers.0.linear1.bias",
                                             "decoder.layers.0.linear2.weight",
                                             "decoder.layers.0.linear2.bias",
                                             "decoder.layers.0.norm1.weight",
                                             "decoder.layers.0.norm1.bias",
                                             "decoder.layers.0.norm2.weight",
                                             "decoder.layers.0.norm2.bias",
                                             "decoder.layers.0.norm3.weight",
                                             "decoder.layers.0.norm3.bias",
                                             "decoder.norm.weight",
                                             "decoder.norm.bias"};
const std::vector<double> k_tr_out = {
    -0.409961037249, 0.279887017055,  -0.250348758818, -0.374129699408, -0.494102622196,
    0.0596792314675, -0.164679937934, -0.406516536683, -0.492596730769, 0.125724842591,
    -0.18868872115,  -0.401654472326, -0.422564055662, 0.257539253013,  -0.239152587684,
    -0.377267831487, -0.495430780678, 0.0609527757063, -0.165430796829, -0.406870311081,
    -0.491172549484, 0.135720219133,  -0.192432273715, -0.400685173885};

// The first MultiheadAttention case's inputs: E = 4, 2 heads, L = 3, S = 4, N = 2.
struct MhaInputs {
  Tensor q = input({3, 2, 4}, 0.0), k = input({4, 2, 4}, 1.0), v = input({4, 2, 4}, 2.0);
  Tensor kpm = bools({1, 0, 0, 0, 0, 0, 0, 1}, {2, 4});
  Tensor attn_mask = bools({0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0}, {3, 4});
};

Tensor neg_inf_where(const Tensor& mask) {
  return zeros(mask.shape(), TensorOptions(DType::f64))
      .masked_fill(mask, -std::numeric_limits<double>::infinity());
}

}  // namespace

TEST_CASE("MultiheadAttention: libtorch values with bool masks, both attention paths") {
  auto mha = f64_eval(nn::MultiheadAttention(4, 2));
  CHECK(names_of(*mha) == k_mha_names);
  MhaInputs in;
  auto [out, weights] = mha->forward(in.q, in.k, in.v, in.kpm, true, in.attn_mask);
  CHECK(out.shape() == Shape{3, 2, 4});
  CHECK(weights.shape() == Shape{2, 3, 4});
  check_values(out, k_mha1_out);
  check_values(weights, k_mha1_w);
  // The scaled_dot_product_attention path gives the same output and no weights.
  auto [fast, none] = mha->forward(in.q, in.k, in.v, in.kpm, false, in.attn_mask);
  check_close(fast, out);
  CHECK_FALSE(none.defined());
  // Float masks with -inf where the bool ones are true give the same.
  auto [as_float, w2] =
      mha->forward(in.q, in.k, in.v, neg_inf_where(in.kpm), true, neg_inf_where(in.attn_mask));
  check_close(as_float, out);
  check_close(w2, weights);
}

TEST_CASE("MultiheadAttention: kdim/vdim, add_bias_kv, add_zero_attn, per-head weights") {
  auto mha = f64_eval(nn::MultiheadAttention(
      nn::MultiheadAttentionOptions(4, 2).kdim(3).vdim(3).add_bias_kv(true).add_zero_attn(true)));
  CHECK(names_of(*mha) == k_mha2_names);
  Tensor q = input({3, 2, 4}, 0.3), k = input({4, 2, 3}, 1.3), v = input({4, 2, 3}, 2.3);
  Tensor mask = mul(input({3, 4}, 0.9), 0.5);
  auto [out, weights] = mha->forward(q, k, v, {}, true, mask, /*average_attn_weights=*/false);
  CHECK(weights.shape() == Shape{2, 2, 3, 6});  // S + bias_k + the zero row
  check_values(out, k_mha2_out);
  check_values(weights, k_mha2_w);
  auto [fast, none] = mha->forward(q, k, v, {}, false, mask);
  check_close(fast, out);
  // vdim may differ from kdim (libtorch's C++ module asserts equal shapes; PyTorch's does not).
  auto mha5 = f64_eval(nn::MultiheadAttention(nn::MultiheadAttentionOptions(4, 2).kdim(3).vdim(5)));
  CHECK(mha5->v_proj_weight.shape() == Shape{4, 5});
  auto [o5, w5] = mha5->forward(q, k, input({4, 2, 5}, 0.1));
  CHECK(o5.shape() == Shape{3, 2, 4});
  CHECK(w5.shape() == Shape{2, 3, 4});
}

TEST_CASE("MultiheadAttention: parameters, initialization and state dicts") {
  nn::MultiheadAttention mha(8, 2);
  CHECK(mha->in_proj_weight.shape() == Shape{24, 8});
  CHECK(mha->in_proj_bias.shape() == Shape{24});
  CHECK(mha->out_proj->weight.shape() == Shape{8, 8});
  CHECK(mha->in_proj_bias.abs().max().item() == 0);
  CHECK(mha->out_proj->bias.abs().max().item() == 0);
  // xavier_uniform_ on [3E, E]: bound sqrt(6 / (E + 3E)).
  CHECK(mha->in_proj_weight.abs().max().item() <= std::sqrt(6.0 / 32.0));
  CHECK(mha->in_proj_weight.abs().max().item() > 0.5 * std::sqrt(6.0 / 32.0));
  nn::MultiheadAttention no_bias(nn::MultiheadAttentionOptions(8, 2).bias(false));
  CHECK(names_of(*no_bias) == std::vector<std::string>{"in_proj_weight", "out_proj.weight"});
  nn::MultiheadAttention kv(nn::MultiheadAttentionOptions(8, 4).add_bias_kv(true));
  CHECK(names_of(*kv) == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "bias_k",
                                                  "bias_v", "out_proj.weight", "out_proj.bias"});
  CHECK(kv->bias_k.shape() == Shape{1, 1, 8});
  // A state dict loads into a fresh module and reproduces the outputs; clone copies too.
  auto a = f64_eval(nn::MultiheadAttention(4, 2));
  nn::MultiheadAttention b(4, 2);
  b->to(DType::f64);
  b->load_state_dict(a->state_dict());
  b->eval();
  MhaInputs in;
  check_close(std::get<0>(b->forward(in.q, in.k, in.v)), std::get<0>(a->forward(in.q, in.k, in.v)));
  auto c = a.clone();
  check_close(std::get<0>(c->forward(in.q, in.k, in.v)), std::get<0>(a->forward(in.q, in.k, in.v)));
}

TEST_CASE("MultiheadAttention: batch_first and unbatched inputs match the sequence-first layout") {
  auto seq = f64_eval(nn::MultiheadAttention(4, 2));
  auto bf = f64_eval(nn::MultiheadAttention(nn::MultiheadAttentionOptions(4, 2).batch_first(true)));
  MhaInputs in;
  for (bool need_weights : {true, false}) {
    CAPTURE(need_weights);
    auto [o, w] = seq->forward(in.q, in.k, in.v, in.kpm, need_weights, in.attn_mask);
    auto [ob, wb] = bf->forward(in.q.transpose(0, 1), in.k.transpose(0, 1), in.v.transpose(0, 1),
                                in.kpm, need_weights, in.attn_mask);
    CHECK(ob.shape() == Shape{2, 3, 4});
    check_close(ob.transpose(0, 1), o);
    if (need_weights) check_close(wb, w);
    // Unbatched [L, E] is batch 1 without the batch dim (batch_first does not apply).
    auto [ou, wu] = bf->forward(in.q.select(1, 1), in.k.select(1, 1), in.v.select(1, 1),
                                in.kpm.select(0, 1), need_weights, in.attn_mask);
    CHECK(ou.shape() == Shape{3, 4});
    check_close(ou, o.select(1, 1));
    if (need_weights) check_close(wu, w.select(0, 1));
  }
  // Self-attention (one tensor for query, key and value) takes the packed projection.
  auto [self, sw] = seq->forward(in.q, in.q, in.q);
  auto [sep, sw2] = seq->forward(in.q, in.q.clone(), in.q.clone());
  check_close(self, sep);
}

TEST_CASE("MultiheadAttention: mask semantics") {
  auto mha = f64_eval(nn::MultiheadAttention(4, 2));
  MhaInputs in;
  // key_padding_mask true = that key is ignored for every query of the batch entry.
  auto [o, w] = mha->forward(in.q, in.k, in.v, in.kpm, true, {}, false);
  CHECK(w.index({0, indexing::Slice(), indexing::Slice(), 0}).abs().max().item() == 0);
  CHECK(w.index({1, indexing::Slice(), indexing::Slice(), 3}).abs().max().item() == 0);
  CHECK(w.index({1, indexing::Slice(), indexing::Slice(), 0}).abs().min().item() > 0);
  check_close(w.sum(Shape{-1}), ones({2, 2, 3}, TensorOptions(DType::f64)));
  // Masking a key is the same as removing it.
  auto [o_cut, w_cut] = mha->forward(in.q.narrow(1, 1, 1), in.k.narrow(1, 1, 1).narrow(0, 0, 3),
                                     in.v.narrow(1, 1, 1).narrow(0, 0, 3));
  check_close(o.narrow(1, 1, 1), o_cut);
  // A 3-D mask [N * H, L, S] masks per batch entry and head.
  std::vector<double> m(2 * 2 * 3 * 4, 0.0);
  for (int64_t bh = 0; bh < 4; ++bh)
    for (int64_t l = 0; l < 3; ++l) m[size_t((bh * 3 + l) * 4 + bh)] = 1;  // key bh hidden
  Tensor mask3 = bools(m, {4, 3, 4});
  auto [o3, w3] = mha->forward(in.q, in.k, in.v, {}, true, mask3, false);
  for (int64_t bh = 0; bh < 4; ++bh) {
    CAPTURE(bh);
    CHECK(w3.index({bh / 2, bh % 2, indexing::Slice(), bh}).abs().max().item() == 0);
    CHECK(w3.index({bh / 2, bh % 2, indexing::Slice(), (bh + 1) % 4}).abs().min().item() > 0);
  }
  auto [o3f, n3] = mha->forward(in.q, in.k, in.v, {}, false, mask3);
  check_close(o3f, o3);
  // The same 2-D mask repeated over N * H equals the 2-D mask; masks merge with key padding.
  Tensor rep = in.attn_mask.unsqueeze(0).expand({4, 3, 4}).contiguous();
  check_close(std::get<0>(mha->forward(in.q, in.k, in.v, in.kpm, true, rep)),
              std::get<0>(mha->forward(in.q, in.k, in.v, in.kpm, true, in.attn_mask)));
  // is_causal without a mask builds the causal mask (L == S here); with need_weights false and
  // no key padding it runs scaled_dot_product_attention's causal path.
  Tensor causal = nn::TransformerImpl::generate_square_subsequent_mask(3, kCPU, DType::f64);
  Tensor q = in.q, k = in.k.narrow(0, 0, 3), v = in.v.narrow(0, 0, 3);
  auto [oc, wc] = mha->forward(q, k, v, {}, true, causal);
  check_close(std::get<0>(mha->forward(q, k, v, {}, true, {}, true, true)), oc);
  check_close(std::get<0>(mha->forward(q, k, v, {}, false, {}, true, true)), oc);
  check_close(std::get<0>(mha->forward(q, k, v, {}, false, causal, true, true)), oc);
  CHECK(wc.index({indexing::Slice(), 0, indexing::Slice(1, 3)}).abs().max().item() == 0);
}

TEST_CASE("MultiheadAttention: argument errors") {
  CHECK_THROWS_WITH_AS(nn::MultiheadAttention(6, 4), doctest::Contains("divisible by num_heads"),
                       Error);
  CHECK_THROWS_WITH_AS(nn::MultiheadAttention(0, 1), doctest::Contains("positive"), Error);
  CHECK_THROWS_WITH_AS(nn::MultiheadAttention(nn::MultiheadAttentionOptions(4, 2).dropout(1.0)),
                       doctest::Contains("dropout"), Error);
  auto mha = f64_eval(nn::MultiheadAttention(4, 2));
  MhaInputs in;
  CHECK_THROWS_WITH_AS(mha->forward(input({3, 2, 5}, 0), in.k, in.v),
                       doctest::Contains("embed_dim = 4"), Error);
  CHECK_THROWS_WITH_AS(mha->forward(input({3, 2, 1, 4}, 0), in.k, in.v),
                       doctest::Contains("3-D (batched) or 2-D"), Error);
  CHECK_THROWS_WITH_AS(mha->forward(in.q, in.k, in.v.narrow(0, 0, 3)),
                       doctest::Contains("source length"), Error);
  CHECK_THROWS_WITH_AS(mha->forward(in.q, in.k, in.v, bools({0, 0, 0}, {1, 3})),
                       doctest::Contains("key_padding_mask must be [N, S]"), Error);
  CHECK_THROWS_WITH_AS(mha->forward(in.q, in.k, in.v, {}, true, bools({0, 0, 0, 0}, {4, 1})),
                       doctest::Contains("attn_mask must be [L, S]"), Error);
  CHECK_THROWS_WITH_AS(
      mha->forward(in.q, in.k, in.v, {}, true, zeros({3, 4}, TensorOptions(kInt64))),
      doctest::Contains("bool or floating"), Error);
}

TEST_CASE("MultiheadAttention: fp64 gradcheck through inputs and parameters") {
  struct Case {
    const char* name;
    nn::MultiheadAttentionOptions options;
    bool need_weights;
  };
  const std::vector<Case> cases = {
      {"plain, explicit weights", nn::MultiheadAttentionOptions(4, 2), true},
      {"plain, sdpa path", nn::MultiheadAttentionOptions(4, 2), false},
      {"kdim/vdim, bias_kv, zero_attn",
       nn::MultiheadAttentionOptions(4, 2).kdim(3).vdim(5).add_bias_kv(true).add_zero_attn(true),
       true},
      {"batch_first, sdpa, no bias",
       nn::MultiheadAttentionOptions(4, 2).batch_first(true).bias(false), false},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    auto mha = f64_eval(nn::MultiheadAttention(c.options));
    const int64_t kdim = c.options.kdim(), vdim = c.options.vdim();
    const bool bf = c.options.batch_first();
    auto layout = [&](Shape s) { return bf ? Shape{s[1], s[0], s[2]} : s; };
    std::vector<Tensor> inputs = {input(layout({2, 2, 4}), 0.1).requires_grad_(),
                                  input(layout({3, 2, kdim}), 0.7).requires_grad_(),
                                  input(layout({3, 2, vdim}), 1.9).requires_grad_()};
    for (const Tensor& p : mha->parameters()) inputs.push_back(p);
    Tensor kpm = bools({0, 0, 1, 0, 0, 0}, {2, 3});
    Tensor mask = mul(input({2, 3}, 0.4), 0.3);
    auto fn = [&](const std::vector<Tensor>& x) {
      auto [out, w] = mha->forward(x[0], x[1], x[2], kpm, c.need_weights, mask);
      return c.need_weights ? cat({out.flatten(), w.flatten()}) : out;
    };
    std::string report;
    CHECK_MESSAGE(autograd::gradcheck(fn, inputs, 1e-6, 1e-5, 1e-3, &report), report);
  }
}

// ---- Transformer layers ------------------------------------------------------------------------

TEST_CASE("TransformerEncoderLayer: libtorch values, post-norm and pre-norm with gelu") {
  auto opts = nn::TransformerEncoderLayerOptions(4, 2).dim_feedforward(6).dropout(0);
  auto layer = f64_eval(nn::TransformerEncoderLayer(opts));
  CHECK(names_of(*layer) == k_enc_names);
  Tensor src = input({3, 2, 4}, 0.2);
  Tensor mask = nn::TransformerImpl::generate_square_subsequent_mask(3, kCPU, DType::f64);
  Tensor kpm = bools({0, 0, 0, 0, 0, 1}, {2, 3});
  check_values(layer->forward(src, mask, kpm), k_enc_out);
  auto pre = f64_eval(nn::TransformerEncoderLayer(
      nn::TransformerEncoderLayerOptions(opts).norm_first(true).activation(
          nn::TransformerActivation::gelu)));
  check_values(pre->forward(src, mask, kpm), k_enc_prenorm_gelu_out);
  // is_causal with the causal mask is a hint only; batch_first is the transposed layout.
  check_values(layer->forward(src, mask, kpm, true), k_enc_out);
  auto bf = f64_eval(
      nn::TransformerEncoderLayer(nn::TransformerEncoderLayerOptions(opts).batch_first(true)));
  check_values(bf->forward(src.transpose(0, 1), mask, kpm).transpose(0, 1), k_enc_out);
}

TEST_CASE("TransformerDecoderLayer and Transformer: libtorch values and names") {
  auto layer = f64_eval(nn::TransformerDecoderLayer(
      nn::TransformerDecoderLayerOptions(4, 2).dim_feedforward(6).dropout(0)));
  CHECK(names_of(*layer) == k_dec_names);
  Tensor tgt = input({3, 2, 4}, 0.4), memory = input({5, 2, 4}, 1.4);
  Tensor mask = nn::TransformerImpl::generate_square_subsequent_mask(3, kCPU, DType::f64);
  Tensor memory_kpm = bools({0, 0, 0, 0, 1, 0, 0, 0, 0, 0}, {2, 5});
  check_values(layer->forward(tgt, memory, mask, {}, {}, memory_kpm), k_dec_out);

  auto tr =
      f64_eval(nn::Transformer(nn::TransformerOptions(4, 2, 2, 1).dim_feedforward(6).dropout(0)));
  CHECK(names_of(*tr) == k_tr_names);
  Tensor src = input({5, 2, 4}, 0.6), tgt2 = input({3, 2, 4}, 1.6);
  check_values(tr->forward(src, tgt2, {}, mask), k_tr_out);
  CHECK_THROWS_WITH_AS(tr->forward(src, input({3, 1, 4}, 0)), doctest::Contains("batch number"),
                       Error);
  CHECK_THROWS_WITH_AS(tr->forward(src, input({3, 2, 5}, 0)), doctest::Contains("d_model = 4"),
                       Error);
}

TEST_CASE("Transformer stacks: layers start equal, final norm, Transformer init, masks") {
  auto layer = nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16);
  nn::TransformerEncoder enc(
      nn::TransformerEncoderOptions(layer, 3).norm(nn::LayerNormOptions({8})));
  auto names = names_of(*enc);
  CHECK(names.front() == "layers.0.self_attn.in_proj_weight");
  CHECK(names.back() == "norm.bias");
  CHECK(names.size() == 3 * 12 + 2);
  // As PyTorch's deep copies: every layer starts with the first one's values (in its own storage).
  auto sd = enc->state_dict();
  CHECK(max_abs_diff(sd[0].second, sd[12].second) == 0);
  CHECK(max_abs_diff(sd[0].second, sd[24].second) == 0);
  CHECK(sd[0].second.data_ptr() != sd[12].second.data_ptr());
  nn::TransformerDecoder dec(nn::TransformerDecoderOptions(layer, 2));
  CHECK(names_of(*dec).size() == 2 * 18);
  CHECK(names_of(*dec).back() == "layers.1.norm3.bias");
  // Transformer: every parameter with more than one dim redrawn by xavier_uniform_.
  nn::Transformer tr(nn::TransformerOptions(8, 2, 1, 1).dim_feedforward(16));
  for (auto& entry : tr->named_parameters())
    if (const Tensor& p = entry.second; p.dim() > 1) {
      const std::string& name = entry.first;  // CAPTURE of a binding fails on clang 14
      CAPTURE(name);
      const double bound = std::sqrt(6.0 / double(p.size(0) + p.size(1)));
      CHECK(p.abs().max().item() <= bound);
    }
  Tensor m = nn::TransformerImpl::generate_square_subsequent_mask(3);
  CHECK(m.dtype() == DType::f32);
  CHECK(m.to_vector() == std::vector<double>{0, -INFINITY, -INFINITY, 0, 0, -INFINITY, 0, 0, 0});
  // Dropout acts in training only; eval is deterministic.
  nn::TransformerEncoderLayer drop(
      nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.5));
  Tensor x = randn({4, 2, 8});
  drop->eval();
  check_close(drop->forward(x), drop->forward(x), 1e-12);
  drop->train();
  CHECK(max_abs_diff(drop->forward(x), drop->forward(x)) > 0);
  CHECK_THROWS_WITH_AS(nn::TransformerEncoderLayer(6, 4), doctest::Contains("divisible"), Error);
  CHECK_THROWS_WITH_AS(nn::TransformerEncoder(nn::TransformerEncoderOptions(layer, 0)),
                       doctest::Contains("num_layers"), Error);
}

TEST_CASE(
    "TransformerEncoderLayer and TransformerDecoderLayer: fp64 gradcheck, norm_first both ways") {
  for (bool norm_first : {false, true}) {
    CAPTURE(norm_first);
    auto opts = nn::TransformerEncoderLayerOptions(4, 2).dim_feedforward(6).dropout(0).norm_first(
        norm_first);
    auto enc = f64_eval(nn::TransformerEncoderLayer(
        nn::TransformerEncoderLayerOptions(opts).activation(nn::TransformerActivation::gelu)));
    Tensor mask = nn::TransformerImpl::generate_square_subsequent_mask(3, kCPU, DType::f64);
    Tensor kpm = bools({0, 0, 0, 0, 1, 0}, {2, 3});
    std::vector<Tensor> inputs = {input({3, 2, 4}, 0.3).requires_grad_()};
    for (const Tensor& p : enc->parameters()) inputs.push_back(p);
    std::string report;
    CHECK_MESSAGE(autograd::gradcheck(
                      [&](const std::vector<Tensor>& x) { return enc->forward(x[0], mask, kpm); },
                      inputs, 1e-6, 1e-5, 1e-3, &report),
                  report);
    auto dec = f64_eval(nn::TransformerDecoderLayer(opts));
    std::vector<Tensor> dec_inputs = {input({3, 2, 4}, 0.5).requires_grad_(),
                                      input({2, 2, 4}, 1.5).requires_grad_()};
    for (const Tensor& p : dec->parameters()) dec_inputs.push_back(p);
    CHECK_MESSAGE(autograd::gradcheck(
                      [&](const std::vector<Tensor>& x) { return dec->forward(x[0], x[1], mask); },
                      dec_inputs, 1e-6, 1e-5, 1e-3, &report),
                  report);
  }
}

// ---- positional helpers (nn/positional.h) ------------------------------------------------------

TEST_CASE("apply_rotary and RotaryEmbedding: values, pairing, offsets and relative positions") {
  const int64_t t = 3, d = 4;
  nn::RotaryEmbedding rope(nn::RotaryEmbeddingOptions(d).max_seq_len(16));
  Tensor x = input({2, 1, t, d}, 0.3);
  Tensor y = rope->forward(x);
  // out_i = x_i cos(a) - x_{i+2} sin(a), out_{i+2} = x_{i+2} cos(a) + x_i sin(a), a = pos
  // 10000^(-i/2).
  std::vector<double> xv = x.to_vector(), yv = y.to_vector();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t p = 0; p < t; ++p)
      for (int64_t i = 0; i < 2; ++i) {
        const double a = double(p) * std::pow(10000.0, -2.0 * double(i) / double(d));
        const size_t row = size_t((b * t + p) * d);
        CHECK(yv[row + size_t(i)] == doctest::Approx(xv[row + size_t(i)] * std::cos(a) -
                                                     xv[row + size_t(i) + 2] * std::sin(a)));
        CHECK(yv[row + size_t(i) + 2] == doctest::Approx(xv[row + size_t(i) + 2] * std::cos(a) +
                                                         xv[row + size_t(i)] * std::sin(a)));
      }
  // A rotation keeps each position's norm.
  check_close(y.square().sum(Shape{-1}), x.square().sum(Shape{-1}));
  // q . k depends only on the distance between their positions.
  Tensor q = input({1, 1, 1, d}, 1.1), k = input({1, 1, 1, d}, 2.2);
  auto score = [&](int64_t m, int64_t n) {
    return (rope->forward(q, m) * rope->forward(k, n)).sum().item();
  };
  CHECK(score(5, 2) == doctest::Approx(score(9, 6)));
  CHECK(score(1, 1) == doctest::Approx((q * k).sum().item()));
  // offset: positions offset.., as a slice of a longer sequence.
  Tensor longer = input({1, 2, 6, d}, 0.9);
  check_close(rope->forward(longer.narrow(2, 3, 3), 3), rope->forward(longer).narrow(2, 3, 3));
  // GPT-J pairing (2i, 2i + 1) is NeoX's on features permuted to (0, 2, 1, 3).
  nn::RotaryEmbedding gptj(nn::RotaryEmbeddingOptions(d).interleaved(true));
  Tensor perm = tensor({0, 2, 1, 3}, TensorOptions(kInt64));
  check_close(gptj->forward(x).index_select(-1, perm), rope->forward(x.index_select(-1, perm)));
  // Partial rotary: the features after dim pass unchanged.
  nn::RotaryEmbedding partial(2);
  Tensor z = partial->forward(x);
  check_close(z.narrow(-1, 2, 2), x.narrow(-1, 2, 2));
  CHECK(max_abs_diff(z.narrow(-1, 0, 2), x.narrow(-1, 0, 2)) > 1e-3);
  // Gradients through apply_rotary, both pairings.
  for (bool interleaved : {false, true}) {
    CAPTURE(interleaved);
    const auto cos_sin = rope->cos_sin(t, 1, kCPU, DType::f64);
    const Tensor c = cos_sin.first, s = cos_sin.second;  // captured below: no bindings (clang 14)
    std::string report;
    CHECK_MESSAGE(autograd::gradcheck(
                      [&](const std::vector<Tensor>& in) {
                        return nn::apply_rotary(in[0], c, s, interleaved);
                      },
                      {input({2, t, 6}, 0.1).requires_grad_()}, 1e-6, 1e-5, 1e-3, &report),
                  report);
  }
  CHECK_THROWS_WITH_AS(nn::RotaryEmbedding(3), doctest::Contains("even"), Error);
  CHECK_THROWS_WITH_AS(rope->forward(x, 14), doctest::Contains("max_seq_len"), Error);
  CHECK_THROWS_WITH_AS(nn::apply_rotary(x, ones({t, 3}), ones({t, 3})), doctest::Contains("R <= D"),
                       Error);
  CHECK(names_of(*rope).empty());
}

TEST_CASE("LearnedPositionalEmbedding: adds a row per position and learns it") {
  nn::LearnedPositionalEmbedding pos(8, 4);
  CHECK(names_of(*pos) == std::vector<std::string>{"weight"});
  CHECK(pos->weight.shape() == Shape{8, 4});
  nn::LearnedPositionalEmbedding big(1000, 64);
  CHECK(big->weight.std().item() == doctest::Approx(0.02).epsilon(0.05));
  Tensor x = randn({2, 3, 4});
  check_close(pos->forward(x), x + pos->weight.narrow(0, 0, 3));
  check_close(pos->forward(x, 2), x + pos->weight.narrow(0, 2, 3));
  // Sequence-first inputs [T, N, d] with seq_dim 0.
  nn::LearnedPositionalEmbedding seq_first(nn::LearnedPositionalEmbeddingOptions(8, 4).seq_dim(0));
  seq_first->weight.detach().copy_(pos->weight.detach());
  check_close(seq_first->forward(x.transpose(0, 1)).transpose(0, 1), pos->forward(x));
  // The gradient reaches the rows used, summed over the batch.
  pos->forward(x).sum().backward();
  Tensor g = pos->weight.grad();
  check_close(g.narrow(0, 0, 3), full({3, 4}, 2.0));
  CHECK(g.narrow(0, 3, 5).abs().max().item() == 0);
  CHECK_THROWS_WITH_AS(pos->forward(randn({2, 9, 4})), doctest::Contains("raise max_len"), Error);
  CHECK_THROWS_WITH_AS(pos->forward(randn({2, 3, 5})), doctest::Contains("embedding_dim"), Error);
}
