// MultiheadAttention (see multihead_attention.h). The computation runs batch-first internally:
// inputs [L, N, E] are transposed (views) to [N, L, E], heads are split as [N, H, L, head_dim]
// views, and the output goes back to the caller's layout at the end.
#include "ember/nn/multihead_attention.h"

#include <cmath>
#include <limits>
#include <ostream>

#include "ember/nn/amp.h"
#include "ember/nn/init.h"
#include "ember/ops/attention.h"
#include "ember/ops/dropout.h"
#include "ember/ops/softmax.h"

namespace ember::nn {

MultiheadAttentionImpl::MultiheadAttentionImpl(const MultiheadAttentionOptions& options_)
    : Module("MultiheadAttention"), options(options_) {
  const int64_t e = options.embed_dim(), h = options.num_heads();
  EMBER_CHECK(e > 0 && h > 0, "MultiheadAttention: embed_dim and num_heads must be positive, got ",
              e, " and ", h);
  EMBER_CHECK(e % h == 0, "MultiheadAttention: embed_dim (", e,
              ") must be divisible by num_heads (", h,
              "); choose num_heads among the divisors of embed_dim");
  EMBER_CHECK(options.kdim() > 0 && options.vdim() > 0,
              "MultiheadAttention: kdim and vdim must be positive, got ", options.kdim(), " and ",
              options.vdim());
  EMBER_CHECK(options.dropout() >= 0 && options.dropout() < 1,
              "MultiheadAttention: dropout must be in [0, 1), got ", options.dropout());
  if (qkv_same_embed_dim()) {
    in_proj_weight = register_parameter("in_proj_weight", empty({3 * e, e}));
  } else {
    q_proj_weight = register_parameter("q_proj_weight", empty({e, e}));
    k_proj_weight = register_parameter("k_proj_weight", empty({e, options.kdim()}));
    v_proj_weight = register_parameter("v_proj_weight", empty({e, options.vdim()}));
  }
  if (options.bias()) in_proj_bias = register_parameter("in_proj_bias", empty({3 * e}));
  out_proj = register_module("out_proj", Linear(LinearOptions(e, e).bias(options.bias())));
  if (options.add_bias_kv()) {
    bias_k = register_parameter("bias_k", empty({1, 1, e}));
    bias_v = register_parameter("bias_v", empty({1, 1, e}));
  }
  reset_parameters();
}

void MultiheadAttentionImpl::reset_parameters() {
  if (qkv_same_embed_dim()) {
    init::xavier_uniform_(in_proj_weight);
  } else {
    init::xavier_uniform_(q_proj_weight);
    init::xavier_uniform_(k_proj_weight);
    init::xavier_uniform_(v_proj_weight);
  }
  if (in_proj_bias.defined()) {
    init::zeros_(in_proj_bias);
    init::zeros_(out_proj->bias);
  }
  if (bias_k.defined()) {
    init::xavier_normal_(bias_k);
    init::xavier_normal_(bias_v);
  }
}

namespace {

constexpr const char* kOp = "MultiheadAttention";

// scaled_dot_product_attention's CUDA kernels take head sizes in [32, 256] (ops/attention.h); a
// CUDA module with another head size computes the attention explicitly even without weights.
bool fused_attention_fits(const Tensor& q, int64_t head_dim) {
  return !q.is_cuda() || (head_dim >= 32 && head_dim <= 256);
}

// A bool mask (true = not allowed) or a floating one as an additive mask of `like`'s dtype and
// device; undefined stays undefined.
Tensor additive_mask(const Tensor& mask, const Tensor& like, const char* name) {
  if (!mask.defined()) return mask;
  const TensorOptions opts = TensorOptions(like.dtype()).with_device(like.device());
  if (mask.dtype() == DType::boolean)
    return zeros(mask.shape(), opts)
        .masked_fill(mask.to(like.device()), -std::numeric_limits<double>::infinity());
  EMBER_CHECK(is_floating(mask.dtype()), kOp, ": ", name,
              " must be a bool or floating tensor, got ", dtype_name(mask.dtype()));
  return mask.to(like.device(), like.dtype());
}

// `mask` [..., S] with `columns` zero columns appended (the keys added by add_bias_kv and
// add_zero_attn are attended by every query).
Tensor pad_columns(const Tensor& mask, int64_t columns) {
  if (!mask.defined() || columns == 0) return mask;
  Shape extra = mask.shape();
  extra.back() = columns;
  return cat({mask, zeros(extra, mask.options())}, -1);
}

// x [N, T, in] projected by (weight, bias) under the autocast policy of Linear.
Tensor project(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  auto in = autocast_inputs({x, weight, bias}, OpClass::low_precision);
  return linear(in[0], in[1], in[2]);
}

// x [N, T, E] -> [N, H, T, E / H] (a view when x's strides allow).
Tensor split_heads(const Tensor& x, int64_t heads) {
  const int64_t n = x.size(0), t = x.size(1), e = x.size(2);
  return x.reshape({n, t, heads, e / heads}).transpose(1, 2);
}

}  // namespace

std::tuple<Tensor, Tensor> MultiheadAttentionImpl::forward(
    const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& key_padding_mask,
    bool need_weights, const Tensor& attn_mask, bool average_attn_weights, bool is_causal) {
  const int64_t e = options.embed_dim(), h = options.num_heads(), hd = head_dim();
  EMBER_CHECK(query.defined() && key.defined() && value.defined(), kOp,
              ": query, key and value must all be defined tensors");
  const bool unbatched = query.dim() == 2;
  EMBER_CHECK(query.dim() == 3 || unbatched, kOp,
              ": query must be 3-D (batched) or 2-D (unbatched), got shape ", query.shape_str());
  EMBER_CHECK(key.dim() == query.dim() && value.dim() == query.dim(), kOp,
              ": key and value must have the query's rank (", query.dim(), "), got key ",
              key.shape_str(), " and value ", value.shape_str());
  // Batch-first views [N, T, features].
  auto batch_first_view = [&](const Tensor& x) {
    if (unbatched) return x.unsqueeze(0);
    return options.batch_first() ? x : x.transpose(0, 1);
  };
  const Tensor q_in = batch_first_view(query), k_in = batch_first_view(key),
               v_in = batch_first_view(value);
  const int64_t n = q_in.size(0), l = q_in.size(1), s = k_in.size(1);
  EMBER_CHECK(q_in.size(2) == e, kOp, ": expected the query's last dim to be embed_dim = ", e,
              ", got query ", query.shape_str());
  EMBER_CHECK(k_in.size(2) == options.kdim() && v_in.size(2) == options.vdim(), kOp,
              ": expected key [..., kdim = ", options.kdim(),
              "] and value [..., vdim = ", options.vdim(), "], got key ", key.shape_str(),
              " and value ", value.shape_str());
  EMBER_CHECK(k_in.size(0) == n && v_in.size(0) == n && v_in.size(1) == s, kOp,
              ": query, key and value must share the batch size and key and value the source "
              "length; got query ",
              query.shape_str(), ", key ", key.shape_str(), ", value ", value.shape_str(),
              (options.batch_first() ? " (batch_first)" : ""));
  if (key_padding_mask.defined()) {
    const Shape want = unbatched ? Shape{s} : Shape{n, s};
    EMBER_CHECK(key_padding_mask.shape() == want, kOp, ": key_padding_mask must be [",
                unbatched ? "S" : "N, S", "] = ", shape_str(want), ", got ",
                key_padding_mask.shape_str());
  }
  if (attn_mask.defined()) {
    const bool ok = (attn_mask.dim() == 2 && attn_mask.shape() == Shape{l, s}) ||
                    (attn_mask.dim() == 3 && attn_mask.shape() == Shape{n * h, l, s});
    EMBER_CHECK(ok, kOp, ": attn_mask must be [L, S] = [", l, ", ", s,
                "] or [N * num_heads, L, S] = [", n * h, ", ", l, ", ", s, "], got ",
                attn_mask.shape_str());
  }

  // ---- projections ----
  Tensor q, k, v;
  if (qkv_same_embed_dim()) {
    if (query.is_same(key) && key.is_same(value)) {
      // Self-attention: one product with the packed weight, split afterwards.
      auto qkv = project(q_in, in_proj_weight, in_proj_bias).chunk(3, -1);
      q = qkv[0], k = qkv[1], v = qkv[2];
    } else {
      auto w = in_proj_weight.chunk(3, 0);
      std::vector<Tensor> b(3);
      if (in_proj_bias.defined()) b = in_proj_bias.chunk(3, 0);
      q = project(q_in, w[0], b[0]), k = project(k_in, w[1], b[1]), v = project(v_in, w[2], b[2]);
    }
  } else {
    std::vector<Tensor> b(3);
    if (in_proj_bias.defined()) b = in_proj_bias.chunk(3, 0);
    q = project(q_in, q_proj_weight, b[0]);
    k = project(k_in, k_proj_weight, b[1]);
    v = project(v_in, v_proj_weight, b[2]);
  }
  int64_t extra_keys = 0;  // keys appended by add_bias_kv and add_zero_attn
  if (bias_k.defined()) {
    k = cat({k, autocast_input(bias_k, OpClass::low_precision).expand({n, 1, e})}, 1);
    v = cat({v, autocast_input(bias_v, OpClass::low_precision).expand({n, 1, e})}, 1);
    ++extra_keys;
  }
  Tensor q4 = split_heads(q, h), k4 = split_heads(k, h), v4 = split_heads(v, h);
  if (options.add_zero_attn()) {
    k4 = cat({k4, zeros({n, h, 1, hd}, k4.options())}, 2);
    v4 = cat({v4, zeros({n, h, 1, hd}, v4.options())}, 2);
    ++extra_keys;
  }

  // ---- masks: one additive mask broadcastable to [N, H, L, S + extra_keys] ----
  const bool explicit_weights = need_weights || !fused_attention_fits(q, hd);
  const bool sdpa_causal = is_causal && !key_padding_mask.defined() && !explicit_weights;
  Tensor mask;
  if (!sdpa_causal) {
    Tensor am = attn_mask;
    if (is_causal && !am.defined())
      am = ones({l, s}, TensorOptions(DType::boolean).with_device(q.device())).triu(1);
    am = additive_mask(am, q, "attn_mask");
    if (am.defined()) am = am.dim() == 2 ? am.reshape({1, 1, l, s}) : am.reshape({n, h, l, s});
    Tensor kpm = additive_mask(key_padding_mask, q, "key_padding_mask");
    if (kpm.defined()) kpm = kpm.reshape({n, 1, 1, s});
    mask = am.defined() && kpm.defined() ? add(am, kpm) : (am.defined() ? am : kpm);
    mask = pad_columns(mask, extra_keys);
  }
  const double p = is_training() ? options.dropout() : 0.0;

  // ---- attention ----
  Tensor out, weights;
  if (explicit_weights) {
    Tensor scores = matmul(mul(q4, 1.0 / std::sqrt(double(hd))), k4.transpose(-2, -1));
    if (mask.defined()) scores = add(scores, mask);
    weights = softmax(autocast_input(scores, OpClass::fp32), -1);
    if (p > 0) weights = dropout(weights, p, true);
    auto wv = autocast_inputs({weights, v4}, OpClass::low_precision);
    out = matmul(wv[0], wv[1]);
    if (!need_weights)
      weights = Tensor();
    else if (average_attn_weights)
      weights = weights.mean(Shape{1});
    if (weights.defined() && unbatched) weights = weights.squeeze(0);
  } else {
    out = scaled_dot_product_attention(q4, k4, v4, mask, p, sdpa_causal);
  }
  out = out_proj->forward(out.transpose(1, 2).reshape({n, l, e}));
  if (unbatched)
    out = out.squeeze(0);
  else if (!options.batch_first())
    out = out.transpose(0, 1);
  return {out, weights};
}

}  // namespace ember::nn
