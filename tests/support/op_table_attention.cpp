// Rows of the shared gradcheck / CUDA parity table (support/op_table.h) for the attention ops of
// ops/attention.h: plain, bool and additive masks, causal (top-left and bottom-right, L != S),
// grouped-query heads and variable-length batches. The head dims are 32 so that the CUDA parity
// suite runs the same rows as the CPU gradcheck (CUDA takes head dims in [32, 256]); the mask and
// the sequence offsets are built inside each row on the inputs' device. No row has dropout: the
// parity suite compares devices, and dropout draws differ only by design through the generator
// (tests/cpu/test_attention.cpp checks dropout). op_cases_attention() is meant to be chained into
// op_cases(); tests/cpu/test_attention.cpp also runs these rows directly.
#include <limits>

#include "ember/ops/attention.h"
#include "support/op_table.h"

namespace ember::testing {

const std::vector<OpCase>& op_cases_attention();

namespace {
using V = const std::vector<Tensor>&;

TensorOptions on(const Tensor& t, DType d) { return TensorOptions(d).with_device(t.device()); }

// A bool mask [L, S] (true = attend) with a fully masked row (row 1) and a key masked for all.
Tensor bool_mask(const Tensor& like, int64_t L, int64_t S) {
  std::vector<double> m(size_t(L * S), 1.0);
  for (int64_t j = 0; j < S; ++j) m[size_t(1 * S + j)] = 0;  // row 1 sees nothing
  for (int64_t i = 0; i < L; ++i) m[size_t(i * S + S - 1)] = (i % 2 == 0) ? 1 : 0;
  return from_vector(m, {L, S}, on(like, DType::f32)).to(DType::boolean);
}

// An additive mask [B=1, H, 1, S] broadcast over batch and queries: smooth values and -inf.
Tensor additive_mask(const Tensor& like, int64_t H, int64_t S) {
  std::vector<double> m(size_t(H * S));
  for (int64_t i = 0; i < H * S; ++i) m[size_t(i)] = 0.25 * double(i % 5) - 0.5;
  m[0] = -std::numeric_limits<double>::infinity();
  return from_vector(m, {1, H, 1, S}, on(like, like.dtype()));
}

OpCase row(std::string name, std::vector<Shape> shapes, std::function<Tensor(V)> fn) {
  OpCase c;
  c.name = std::move(name);
  c.shapes = std::move(shapes);
  c.fn = std::move(fn);
  c.gradgradcheck = false;  // one fused backward kernel, as PyTorch's flash attention
  return c;
}

}  // namespace

const std::vector<OpCase>& op_cases_attention() {
  static const std::vector<OpCase> cases = {
      row("sdpa", {{2, 2, 3, 32}, {2, 2, 4, 32}, {2, 2, 4, 32}},
          [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2]); }),
      row("sdpa_3d_scale", {{2, 5, 32}, {2, 3, 32}, {2, 3, 32}},
          [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2], {}, 0, false, 0.3); }),
      row("sdpa_bool_mask", {{2, 2, 3, 32}, {2, 2, 4, 32}, {2, 2, 4, 32}},
          [](V x) {
            return scaled_dot_product_attention(x[0], x[1], x[2], bool_mask(x[0], 3, 4));
          }),
      row("sdpa_additive_mask", {{2, 2, 3, 32}, {2, 2, 4, 32}, {2, 2, 4, 32}},
          [](V x) {
            return scaled_dot_product_attention(x[0], x[1], x[2], additive_mask(x[0], 2, 4));
          }),
      row("sdpa_causal", {{1, 2, 5, 32}, {1, 2, 3, 32}, {1, 2, 3, 32}},
          [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2], {}, 0, true); }),
      row("sdpa_causal_bottom_right", {{1, 2, 3, 32}, {1, 2, 5, 32}, {1, 2, 5, 32}},
          [](V x) {
            return std::get<0>(scaled_dot_product_attention_with_lse(
                x[0], x[1], x[2], AttentionOptions().with_causal(AttentionCausal::bottom_right)));
          }),
      row("sdpa_gqa", {{1, 4, 3, 32}, {1, 2, 4, 32}, {1, 2, 4, 32}},
          [](V x) {
            return scaled_dot_product_attention(x[0], x[1], x[2], {}, 0, false, std::nullopt, true);
          }),
      row("sdpa_varlen_causal", {{9, 2, 32}, {10, 1, 32}, {10, 1, 32}},
          [](V x) {
            Tensor cu_q = from_vector(std::vector<double>{0, 1, 6, 9}, {4}, on(x[0], DType::i32));
            Tensor cu_k = from_vector(std::vector<double>{0, 2, 6, 10}, {4}, on(x[0], DType::i32));
            return scaled_dot_product_attention_varlen(x[0], x[1], x[2], cu_q, cu_k, 5, 4, 0.0,
                                                       true);
          }),
  };
  return cases;
}

}  // namespace ember::testing
