// scaled_dot_product_attention and its variants: argument checks, the [B, H, T, E] (or packed
// variable-length) view of the inputs the kernels take, the mask broadcast to [B, Hq, Tq, Tk]
// through strides, the Philox state reserved for dropout, and the one backward node, which calls
// the backward kernel with the forward's saved output, log-sum-exp and Philox state. Nothing here
// depends on the device beyond the checks: the algorithm cache picks the CPU or CUDA kernels.
#include "ember/ops/attention.h"

#include <cmath>
#include <limits>
#include <string>

#include "ember/autograd/graph/graph.h"
#include "ember/ops/ops.h"

namespace ember {

using dispatch::Direction;

namespace {

constexpr const char* kSdpa = "scaled_dot_product_attention";
constexpr const char* kVarlen = "scaled_dot_product_attention_varlen";

// The head dims the CUDA kernels take (query/key and value alike).
constexpr int64_t kCudaMinHeadDim = 32, kCudaMaxHeadDim = 256;

// How the kernels see an input: its shape for the kernel and a view of it with unit stride on the
// last dim and no broadcast (stride 0) dim, as kernel_interface/attention.h promises the kernels;
// a copy only when the given tensor is not such a view.
Tensor kernel_view(const Tensor& t, const Shape& shape) {
  Tensor v = t.detach().reshape(shape);
  bool usable = v.size(-1) <= 1 || v.stride(-1) == 1;
  for (int64_t d = 0; d < v.dim(); ++d) usable = usable && (v.size(d) <= 1 || v.stride(d) != 0);
  return usable ? v : v.contiguous();
}

// A [..., T, E] input as [B, H, T, E]: the dim before T is the head dim (none for 3-D and 2-D
// inputs), the dims before it the batch.
struct BatchHeads {
  Shape batch_dims;  // the batch dims as given (the head dim excluded)
  int64_t batch = 1, heads = 1;
};
BatchHeads batch_heads(const Tensor& t) {
  BatchHeads r;
  const int64_t n = t.dim();
  const int64_t batch_end = n >= 4 ? n - 3 : n - 2;
  for (int64_t d = 0; d < batch_end; ++d) {
    r.batch_dims.push_back(t.size(d));
    r.batch *= t.size(d);
  }
  if (n >= 4) r.heads = t.size(-3);
  return r;
}

void check_common(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                  double dropout_p) {
  EMBER_CHECK(q.defined() && k.defined() && v.defined(), op,
              ": query, key and value must all be defined tensors");
  for (const Tensor* t : {&q, &k, &v})
    EMBER_CHECK_STATUS(is_floating(t->dtype()), not_supported, op, ": ",
                       t == &q   ? "query"
                       : t == &k ? "key"
                                 : "value",
                       " has dtype ", dtype_name(t->dtype()), " (shape ", t->shape_str(),
                       "); attention needs a floating dtype (float32, float64, float16, bfloat16)");
  EMBER_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), op, ": query (",
              dtype_name(q.dtype()), "), key (", dtype_name(k.dtype()), ") and value (",
              dtype_name(v.dtype()), ") must have one dtype; convert them with .to()");
  EMBER_CHECK(k.device() == q.device() && v.device() == q.device(), op, ": query is on ",
              q.device().str(), ", key on ", k.device().str(), " and value on ", v.device().str(),
              "; move them to one device");
  EMBER_CHECK(dropout_p >= 0 && dropout_p <= 1, op, ": dropout_p must be in [0, 1], got ",
              dropout_p);
  const int64_t e = q.size(-1), ev = v.size(-1);
  EMBER_CHECK(e >= 1, op, ": the query/key head dim (last dim) must be at least 1; query is ",
              q.shape_str());
  if (q.device().is_cuda())
    EMBER_CHECK_STATUS(e >= kCudaMinHeadDim && e <= kCudaMaxHeadDim && ev >= kCudaMinHeadDim &&
                           ev <= kCudaMaxHeadDim,
                       not_supported, op, ": head dims E = ", e, " (query ", q.shape_str(),
                       ") and Ev = ", ev, " (value ", v.shape_str(),
                       ") are not supported on CUDA, which takes head dims in [", kCudaMinHeadDim,
                       ", ", kCudaMaxHeadDim, "]; pad the head dim or run on the CPU");
}

// The dropout state: nothing for p == 0, else `per_row` values (a multiple of 4) reserved from
// the generator for every (batch * head, query) row.
PhiloxState reserve_dropout(const char* op, double p, int64_t per_row, Generator* gen,
                            Device device) {
  if (p == 0 || per_row == 0) return {};
  Generator& g = gen != nullptr ? *gen : default_generator(device);
  EMBER_CHECK(g.device().type == device.type, op, ": a generator for ", g.device().str(),
              " cannot draw the dropout of attention on ", device.str());
  return g.reserve(uint64_t((per_row + 3) / 4 * 4));
}

// One forward call: the problem (kernel views of q, k, v, the mask and the options) plus the
// shapes the op returns and the backward writes.
struct Call {
  const char* op;
  AttentionProblem problem;
  Shape q_kernel, k_kernel, v_kernel;  // the kernels' shapes of q, k, v
  Shape out_kernel, lse_kernel;
  Shape out_shape, lse_shape;  // what the op returns
  bool run_kernels = true;     // false when there is no row or no key (nothing to compute)
};

// Backward: grad q, k, v of the kernels' shapes, reshaped to the inputs' shapes.
std::vector<Tensor> attention_backward(const Call& call, const Tensor& query, const Tensor& key,
                                       const Tensor& value, const Tensor& out, const Tensor& lse,
                                       const Tensor& grad) {
  AttentionProblem p = call.problem;
  p.direction = Direction::backward;
  p.q = kernel_view(query, call.q_kernel);
  p.k = kernel_view(key, call.k_kernel);
  p.v = kernel_view(value, call.v_kernel);
  p.out = kernel_view(out, call.out_kernel);
  p.lse = lse.detach();
  Tensor g = grad.detach();
  if (g.dtype() != p.q.dtype()) g = g.to(p.q.dtype());
  p.grad_out = kernel_view(g, call.out_kernel);
  const TensorOptions options = TensorOptions(p.q.dtype()).with_device(p.q.device());
  // Variable-length batches may leave rows outside every sequence: those gradients are 0.
  const bool zero = p.varlen() || !call.run_kernels;
  auto make = [&](const Shape& s) { return zero ? zeros(s, options) : empty(s, options); };
  p.grad_q = make(call.q_kernel);
  p.grad_k = make(call.k_kernel);
  p.grad_v = make(call.v_kernel);
  if (call.run_kernels) attention_run(p);
  return {p.grad_q.reshape(query.sizes()), p.grad_k.reshape(key.sizes()),
          p.grad_v.reshape(value.sizes())};
}

// Runs the forward, records the backward node; returns (out, lse) in the op's shapes.
std::tuple<Tensor, Tensor> run_attention(const Call& call, const Tensor& query, const Tensor& key,
                                         const Tensor& value) {
  AttentionProblem p = call.problem;
  p.direction = Direction::forward;
  p.q = kernel_view(query, call.q_kernel);
  p.k = kernel_view(key, call.k_kernel);
  p.v = kernel_view(value, call.v_kernel);
  const Device device = p.q.device();
  const TensorOptions options = TensorOptions(p.q.dtype()).with_device(device);
  const TensorOptions lse_options = TensorOptions(DType::f32).with_device(device);
  // Rows outside every sequence (variable-length) and rows with no key output 0 with lse -inf.
  const bool fill = p.varlen() || !call.run_kernels;
  p.out = fill ? zeros(call.out_kernel, options) : empty(call.out_kernel, options);
  p.lse = fill ? full(call.lse_kernel, -std::numeric_limits<double>::infinity(), lse_options)
               : empty(call.lse_kernel, lse_options);
  if (call.run_kernels) attention_run(p);
  Tensor out = p.out.reshape(call.out_shape);
  Tensor lse = p.lse.reshape(call.lse_shape);
  if (autograd::needs_grad({&query, &key, &value})) {
    const char* op = call.op;
    const autograd::SavedTensor saved_q(query, op), saved_k(key, op), saved_v(value, op);
    const autograd::SavedTensor saved_out(out, op, true), saved_lse(p.lse, op);
    const Call c = call;  // q, k and v travel in the saved tensors (with their versions)
    autograd::record_backward(
        op, {query, key, value}, {&out},
        [c, saved_q, saved_k, saved_v, saved_out, saved_lse](const std::vector<Tensor>& grads,
                                                             const autograd::Node& node) {
          std::vector<Tensor> result(3);
          if (!grads[0].defined()) return result;
          result = attention_backward(c, saved_q.unpack(), saved_k.unpack(), saved_v.unpack(),
                                      saved_out.unpack(), saved_lse.unpack(), grads[0]);
          for (size_t i = 0; i < 3; ++i)
            if (!node.needs_input_grad(i)) result[i] = Tensor();
          // One fused backward kernel: a second-order gradient through it raises an Error.
          return autograd::no_double_backward(c.op, std::move(result), grads, node);
        });
  }
  return {out, lse};
}

// The mask broadcast to [B, Hq, L, S] (stride 0 where broadcast; a copy only for inputs of more
// than 4 dims whose merged batch dims cannot be viewed), detached; floating masks in q's dtype.
Tensor expand_mask(const Tensor& mask, const Tensor& q, const Shape& full_shape,
                   const Shape& kernel_shape) {
  EMBER_CHECK(mask.device() == q.device(), kSdpa, ": attn_mask is on ", mask.device().str(),
              " but query is on ", q.device().str(), "; move it to the query's device");
  EMBER_CHECK_STATUS(mask.dtype() == DType::boolean || is_floating(mask.dtype()), not_supported,
                     kSdpa, ": attn_mask has dtype ", dtype_name(mask.dtype()),
                     "; pass a bool mask (true = take part in attention) or a floating mask "
                     "(added to the scores)");
  bool broadcastable = mask.dim() <= int64_t(full_shape.size());
  for (int64_t d = 1; broadcastable && d <= mask.dim(); ++d) {
    const int64_t m = mask.size(-d), f = full_shape[full_shape.size() - size_t(d)];
    broadcastable = m == f || m == 1;
  }
  EMBER_CHECK(broadcastable, kSdpa, ": attn_mask of shape ", mask.shape_str(),
              " cannot be broadcast to the attention scores' shape ", shape_str(full_shape),
              " ([..., L, S] of query ", q.shape_str(), " and key)");
  Tensor m = mask.detach();
  if (m.dtype() != DType::boolean && m.dtype() != q.dtype()) m = m.to(q.dtype());
  return m.expand(full_shape).reshape(kernel_shape);
}

}  // namespace

std::tuple<Tensor, Tensor> scaled_dot_product_attention_with_lse(const Tensor& query,
                                                                 const Tensor& key,
                                                                 const Tensor& value,
                                                                 const AttentionOptions& o) {
  const char* op = kSdpa;
  check_common(op, query, key, value, o.dropout_p);
  const int64_t n = query.dim();
  EMBER_CHECK(n >= 2 && key.dim() == n && value.dim() == n, op,
              ": query, key and value must have one rank of at least 2 ([..., L, E], "
              "[..., S, E], [..., S, Ev]); got query ",
              query.shape_str(), ", key ", key.shape_str(), ", value ", value.shape_str());
  const BatchHeads bq = batch_heads(query), bk = batch_heads(key), bv = batch_heads(value);
  const int64_t L = query.size(-2), S = key.size(-2), E = query.size(-1), Ev = value.size(-1);
  EMBER_CHECK(key.size(-1) == E, op, ": query and key must share the last (head) dim E; got query ",
              query.shape_str(), " and key ", key.shape_str());
  EMBER_CHECK(value.size(-2) == S, op,
              ": key and value must have the same sequence length S (dim -2); got key ",
              key.shape_str(), " and value ", value.shape_str());
  EMBER_CHECK(bk.batch_dims == bq.batch_dims && bv.batch_dims == bq.batch_dims, op,
              ": query, key and value must have the same batch dims (no broadcasting); got query ",
              query.shape_str(), ", key ", key.shape_str(), ", value ", value.shape_str());
  EMBER_CHECK(bk.heads == bv.heads, op,
              ": key and value must have the same number of heads "
              "(dim -3); got key ",
              key.shape_str(), " and value ", value.shape_str());
  if (o.enable_gqa)
    EMBER_CHECK(bk.heads > 0 && bq.heads % bk.heads == 0, op, ": with enable_gqa the query heads (",
                bq.heads, ", query ", query.shape_str(),
                ") must be a multiple of the key/value heads (", bk.heads, ", key ",
                key.shape_str(), ")");
  else
    EMBER_CHECK(bq.heads == bk.heads, op, ": query has ", bq.heads, " heads (", query.shape_str(),
                ") but key and value have ", bk.heads, " (", key.shape_str(),
                "); pass enable_gqa = true for grouped-query attention");
  EMBER_CHECK(!(o.attn_mask.defined() && o.causal != AttentionCausal::none), op,
              ": pass either attn_mask or a causal mask (is_causal), not both");

  const int64_t B = bq.batch, Hq = bq.heads, Hkv = bk.heads;
  Call call;
  call.op = op;
  call.q_kernel = {B, Hq, L, E};
  call.k_kernel = {B, Hkv, S, E};
  call.v_kernel = {B, Hkv, S, Ev};
  call.out_kernel = {B, Hq, L, Ev};
  call.lse_kernel = {B, Hq, L};
  Shape lead(query.sizes().begin(), query.sizes().end() - 2);
  call.out_shape = lead;
  call.out_shape.insert(call.out_shape.end(), {L, Ev});
  call.lse_shape = lead;
  call.lse_shape.push_back(L);
  call.run_kernels = B * Hq * L > 0 && S > 0;
  AttentionProblem& p = call.problem;
  if (o.attn_mask.defined()) {
    Shape full_shape = lead;
    full_shape.insert(full_shape.end(), {L, S});
    p.mask = expand_mask(o.attn_mask, query, full_shape, {B, Hq, L, S});
  }
  p.causal = o.causal != AttentionCausal::none;
  p.causal_offset = o.causal == AttentionCausal::bottom_right ? S - L : 0;
  p.scale = o.scale.has_value() ? *o.scale : 1.0 / std::sqrt(double(E));
  p.dropout_p = o.dropout_p;
  if (call.run_kernels) p.philox = reserve_dropout(op, o.dropout_p, S, o.generator, query.device());
  return run_attention(call, query, key, value);
}

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale, bool enable_gqa) {
  AttentionOptions o;
  o.attn_mask = attn_mask;
  o.dropout_p = dropout_p;
  o.causal = is_causal ? AttentionCausal::top_left : AttentionCausal::none;
  o.scale = scale;
  o.enable_gqa = enable_gqa;
  return std::get<0>(scaled_dot_product_attention_with_lse(query, key, value, o));
}

Tensor scaled_dot_product_attention_varlen(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k,
                                           int64_t max_seqlen_q, int64_t max_seqlen_k,
                                           double dropout_p, bool is_causal,
                                           std::optional<double> scale) {
  const char* op = kVarlen;
  check_common(op, q, k, v, dropout_p);
  EMBER_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, op,
              ": q, k and v must be packed [total, heads, head_dim]; got q ", q.shape_str(), ", k ",
              k.shape_str(), ", v ", v.shape_str());
  const int64_t Hq = q.size(1), Hkv = k.size(1), E = q.size(2), Ev = v.size(2);
  EMBER_CHECK(k.size(2) == E && v.size(0) == k.size(0) && v.size(1) == Hkv, op,
              ": k must be [total_k, Hkv, E] with q's E, and v [total_k, Hkv, Ev]; got q ",
              q.shape_str(), ", k ", k.shape_str(), ", v ", v.shape_str());
  EMBER_CHECK(Hkv > 0 && Hq % Hkv == 0, op, ": the query heads (", Hq,
              ") must be a multiple of the key/value heads (", Hkv, "); got q ", q.shape_str(),
              ", k ", k.shape_str());
  for (const Tensor* cu : {&cu_seqlens_q, &cu_seqlens_k}) {
    const char* name = cu == &cu_seqlens_q ? "cu_seqlens_q" : "cu_seqlens_k";
    EMBER_CHECK(cu->defined() && cu->dim() == 1 && cu->numel() >= 1, op, ": ", name,
                " must be a 1-D tensor [B + 1] of cumulative sequence lengths; got ",
                cu->defined() ? cu->shape_str() : std::string("an undefined tensor"));
    EMBER_CHECK(cu->dtype() == DType::i32 || cu->dtype() == DType::i64, op, ": ", name,
                " has dtype ", dtype_name(cu->dtype()), "; it must be int32 (or int64)");
    EMBER_CHECK(cu->device() == q.device(), op, ": ", name, " is on ", cu->device().str(),
                " but q is on ", q.device().str(), "; move it to q's device");
  }
  EMBER_CHECK(cu_seqlens_q.numel() == cu_seqlens_k.numel(), op, ": cu_seqlens_q ",
              cu_seqlens_q.shape_str(), " and cu_seqlens_k ", cu_seqlens_k.shape_str(),
              " must describe the same number of sequences");
  EMBER_CHECK(max_seqlen_q >= 0 && max_seqlen_k >= 0, op,
              ": max_seqlen_q and max_seqlen_k must be >= 0; got ", max_seqlen_q, " and ",
              max_seqlen_k);
  EMBER_CHECK(q.size(0) < (int64_t(1) << 31) && k.size(0) < (int64_t(1) << 31), op,
              ": at most 2^31 - 1 packed rows are supported; got q ", q.shape_str(), ", k ",
              k.shape_str());
  Call call;
  call.op = op;
  AttentionProblem& p = call.problem;
  p.cu_seqlens_q = cu_seqlens_q.dtype() == DType::i32 ? cu_seqlens_q.contiguous()
                                                      : cu_seqlens_q.to(DType::i32).contiguous();
  p.cu_seqlens_k = cu_seqlens_k.dtype() == DType::i32 ? cu_seqlens_k.contiguous()
                                                      : cu_seqlens_k.to(DType::i32).contiguous();
  const int64_t B = p.cu_seqlens_q.numel() - 1;
  if (q.device().is_cpu()) {
    // The host can afford the full check; on CUDA that would need a device-to-host copy.
    const int32_t* cq = p.cu_seqlens_q.data<int32_t>();
    const int32_t* ck = p.cu_seqlens_k.data<int32_t>();
    EMBER_CHECK(cq[0] == 0 && ck[0] == 0, op, ": cu_seqlens_q and cu_seqlens_k must start at 0");
    for (int64_t b = 0; b < B; ++b) {
      const int64_t lq = cq[b + 1] - cq[b], lk = ck[b + 1] - ck[b];
      EMBER_CHECK(lq >= 0 && lk >= 0, op, ": cu_seqlens must not decrease; sequence ", b,
                  " has lengths ", lq, " (q) and ", lk, " (k)");
      EMBER_CHECK(lq <= max_seqlen_q && lk <= max_seqlen_k, op, ": sequence ", b, " has lengths ",
                  lq, " (q) and ", lk, " (k), beyond max_seqlen_q = ", max_seqlen_q,
                  " / max_seqlen_k = ", max_seqlen_k);
    }
    EMBER_CHECK(cq[B] <= q.size(0) && ck[B] <= k.size(0), op, ": cu_seqlens_q ends at ", cq[B],
                " and cu_seqlens_k at ", ck[B], ", beyond q ", q.shape_str(), " / k ",
                k.shape_str());
  }
  call.q_kernel = q.sizes();
  call.k_kernel = k.sizes();
  call.v_kernel = v.sizes();
  call.out_kernel = {q.size(0), Hq, Ev};
  call.lse_kernel = {Hq, q.size(0)};
  call.out_shape = call.out_kernel;
  call.lse_shape = call.lse_kernel;
  call.run_kernels = B > 0 && max_seqlen_q > 0 && max_seqlen_k > 0 && q.size(0) > 0;
  p.max_seqlen_q = max_seqlen_q;
  p.max_seqlen_k = max_seqlen_k;
  p.causal = is_causal;
  p.causal_offset = 0;  // bottom-right per sequence (kernel_interface/attention.h)
  p.scale = scale.has_value() ? *scale : 1.0 / std::sqrt(double(E));
  p.dropout_p = dropout_p;
  if (call.run_kernels)
    p.philox = reserve_dropout(op, dropout_p, max_seqlen_k, nullptr, q.device());
  return std::get<0>(run_attention(call, q, k, v));
}

}  // namespace ember
