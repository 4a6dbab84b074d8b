// nn::MultiheadAttention and the Transformer layers (nn/multihead_attention.h, nn/transformer.h)
// on CUDA against the same modules on the CPU in float64 (parameters copied by state dict):
// outputs, attention weights and the gradients of the inputs and of every parameter, for the
// fused path (scaled_dot_product_attention, head sizes 32 and 64), the explicit path (weights
// asked for, and head sizes outside the fused kernels' range), bool and float masks, key padding,
// causal attention, batch_first; a pre-norm encoder layer under bf16 autocast; RotaryEmbedding's
// device cache. Every case skips without a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ember/ember.h"

using namespace ember;

namespace {

double rel_err(const Tensor& a, const Tensor& ref) {
  const double scale = std::max(1e-3, ref.to(DType::f64).abs().max().item());
  return max_abs_diff(a.cpu().to(DType::f64), ref.to(DType::f64)) / scale;
}

// The CPU module's state (float64) copied onto a CUDA float32 twin.
template <typename Holder>
Holder cuda_twin(const Holder& cpu, Holder cuda) {
  cuda->to(Device::cuda(0));
  cuda->load_state_dict(cpu->state_dict());
  cuda->eval();
  return cuda;
}

struct MhaCase {
  const char* name;
  int64_t embed_dim, heads;
  bool need_weights, batch_first, causal, masks;
};

}  // namespace

TEST_CASE("MultiheadAttention on CUDA matches the CPU: outputs, weights, gradients" *
          doctest::skip(!cuda::is_available())) {
  const std::vector<MhaCase> cases = {
      {"fused, head 32, masks", 64, 2, false, false, false, true},
      {"fused, head 64, causal, batch_first", 128, 2, false, true, true, false},
      {"explicit weights, head 32, masks", 64, 2, true, false, false, true},
      {"head 8 (explicit fallback), masks", 32, 4, false, true, false, true},
  };
  for (const MhaCase& c : cases) {
    CAPTURE(c.name);
    manual_seed(3);
    const int64_t L = 7, S = 7, N = 3, E = c.embed_dim;
    nn::MultiheadAttention cpu(
        nn::MultiheadAttentionOptions(E, c.heads).batch_first(c.batch_first));
    cpu->to(DType::f64);
    cpu->eval();
    auto gpu =
        cuda_twin(cpu, nn::MultiheadAttention(
                           nn::MultiheadAttentionOptions(E, c.heads).batch_first(c.batch_first)));
    const Shape qs = c.batch_first ? Shape{N, L, E} : Shape{L, N, E};
    const Shape ks = c.batch_first ? Shape{N, S, E} : Shape{S, N, E};
    Tensor q = randn(qs, TensorOptions(DType::f64)), k = randn(ks, TensorOptions(DType::f64)),
           v = randn(ks, TensorOptions(DType::f64));
    Tensor kpm, mask;
    if (c.masks) {
      kpm = zeros({N, S}, TensorOptions(DType::boolean));
      kpm.index_put_({1, 6}, 1.0);
      kpm.index_put_({2, 0}, 1.0);
      mask = mul(randn({L, S}, TensorOptions(DType::f64)), 0.5);
    }
    std::vector<Tensor> cpu_in = {q.clone().requires_grad_(), k.clone().requires_grad_(),
                                  v.clone().requires_grad_()};
    std::vector<Tensor> gpu_in;
    for (const Tensor& t : {q, k, v})
      gpu_in.push_back(t.to(Device::cuda(0), DType::f32).requires_grad_());
    auto [out_c, w_c] =
        cpu->forward(cpu_in[0], cpu_in[1], cpu_in[2], kpm, c.need_weights, mask, true, c.causal);
    auto [out_g, w_g] =
        gpu->forward(gpu_in[0], gpu_in[1], gpu_in[2], kpm.defined() ? kpm.cuda() : kpm,
                     c.need_weights, mask.defined() ? mask.cuda() : mask, true, c.causal);
    CHECK(out_g.is_cuda());
    CHECK(rel_err(out_g, out_c) < 1e-4);
    CHECK(w_g.defined() == c.need_weights);
    if (c.need_weights) CHECK(rel_err(w_g, w_c) < 1e-4);
    Tensor grad_out = randn(out_c.shape(), TensorOptions(DType::f64));
    out_c.backward(grad_out);
    out_g.backward(grad_out.to(Device::cuda(0), DType::f32));
    for (size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      CHECK(rel_err(gpu_in[i].grad(), cpu_in[i].grad()) < 1e-4);
    }
    auto gp = gpu->named_parameters(), cp = cpu->named_parameters();
    for (size_t i = 0; i < gp.size(); ++i) {
      CAPTURE(gp[i].first);
      CHECK(rel_err(gp[i].second.grad(), cp[i].second.grad()) < 1e-4);
    }
  }
}

TEST_CASE("TransformerEncoderLayer and TransformerDecoderLayer on CUDA match the CPU" *
          doctest::skip(!cuda::is_available())) {
  for (bool norm_first : {false, true}) {
    CAPTURE(norm_first);
    manual_seed(5);
    auto opts = nn::TransformerEncoderLayerOptions(64, 2)
                    .dim_feedforward(96)
                    .dropout(0)
                    .norm_first(norm_first)
                    .batch_first(true)
                    .activation(nn::TransformerActivation::gelu);
    nn::TransformerEncoderLayer enc(opts);
    enc->to(DType::f64);
    enc->eval();
    auto enc_g = cuda_twin(enc, nn::TransformerEncoderLayer(opts));
    Tensor x = randn({2, 9, 64}, TensorOptions(DType::f64));
    Tensor xc = x.clone().requires_grad_(), xg = x.to(Device::cuda(0), DType::f32).requires_grad_();
    Tensor yc = enc->forward(xc, {}, {}, /*is_causal=*/true);
    Tensor yg = enc_g->forward(xg, {}, {}, /*is_causal=*/true);
    CHECK(rel_err(yg, yc) < 1e-4);
    yc.sum().backward();
    yg.sum().backward();
    CHECK(rel_err(xg.grad(), xc.grad()) < 1e-4);

    nn::TransformerDecoderLayer dec(opts);
    dec->to(DType::f64);
    dec->eval();
    auto dec_g = cuda_twin(dec, nn::TransformerDecoderLayer(opts));
    Tensor mem = randn({2, 5, 64}, TensorOptions(DType::f64));
    Tensor tgt_mask = nn::TransformerImpl::generate_square_subsequent_mask(9, kCPU, DType::f64);
    Tensor zc = dec->forward(x, mem, tgt_mask);
    Tensor zg = dec_g->forward(x.to(Device::cuda(0), DType::f32),
                               mem.to(Device::cuda(0), DType::f32), tgt_mask.cuda());
    CHECK(rel_err(zg, zc) < 1e-4);
  }
}

TEST_CASE("A pre-norm encoder layer trains under bf16 autocast on CUDA" *
          doctest::skip(!cuda::is_available())) {
  manual_seed(7);
  nn::TransformerEncoderLayer layer(nn::TransformerEncoderLayerOptions(128, 4)
                                        .dim_feedforward(256)
                                        .dropout(0.1)
                                        .norm_first(true)
                                        .batch_first(true));
  layer->to(Device::cuda(0));
  Tensor x = randn({4, 32, 128}, TensorOptions(DType::f32).with_device(Device::cuda(0)));
  Tensor y;
  {
    nn::AutocastGuard ac(DType::bf16);
    y = layer->forward(x, {}, {}, /*is_causal=*/true);
  }
  CHECK(y.shape() == Shape{4, 32, 128});
  Tensor loss = y.to(DType::f32).square().mean();
  CHECK(std::isfinite(loss.item()));
  loss.backward();
  for (auto& entry : layer->named_parameters()) {
    const std::string& name = entry.first;  // CAPTURE of a binding fails on clang 14
    const Tensor& p = entry.second;
    CAPTURE(name);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == DType::f32);
    CHECK(isfinite(p.grad()).all().item() == 1);
  }
}

TEST_CASE("RotaryEmbedding on CUDA matches the CPU" * doctest::skip(!cuda::is_available())) {
  nn::RotaryEmbedding rope(nn::RotaryEmbeddingOptions(32).max_seq_len(64));
  Tensor x = randn({2, 4, 10, 48});
  Tensor ref = rope->forward(x, 5);
  CHECK(rel_err(rope->forward(x.cuda(), 5), ref) < 1e-6);
  CHECK(rel_err(rope->forward(x.cuda().to(DType::bf16), 5), ref) < 2e-2);
}
