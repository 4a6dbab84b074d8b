// Positional information for Transformers: a learned absolute positional embedding (a table
// weight [max_len, d], as GPT-2's wpe) and rotary position embeddings (RoPE, as in GPT-NeoX and
// LLaMA): apply_rotary and a RotaryEmbedding module that caches cos / sin for its maximum length.
// Everything is built from differentiable ops, so gradients flow to x and to the table.
#pragma once
#include <cstdint>
#include <map>
#include <tuple>
#include <utility>

#include "ember/nn/module.h"
#include "ember/nn/options.h"

namespace ember::nn {

// Rotates the features of x by position-dependent angles (RoPE). x [..., T, D]; cos and sin
// [..., T, R / 2] broadcastable against x[..., :R / 2] (usually [T, R / 2] for x [N, H, T, D]),
// where R = 2 * cos.size(-1) <= D is the number of rotated features (the rest pass unchanged, as
// GPT-NeoX's rotary_pct < 1). Pairs the features as GPT-NeoX / LLaMA (interleaved false: feature
// i with i + R / 2, i.e. x * cos + rotate_half(x) * sin) or as GPT-J (interleaved true: 2i with
// 2i + 1). Errors when the shapes do not fit.
Tensor apply_rotary(const Tensor& x, const Tensor& cos, const Tensor& sin,
                    bool interleaved = false);

// The options of RotaryEmbedding.
struct RotaryEmbeddingOptions {
  // dim: the rotated features per head (even; usually the head size).
  /* implicit */ RotaryEmbeddingOptions(int64_t dim) : dim_(dim) {}  // NOLINT
  EMBER_ARG(int64_t, dim);                 // R, the rotated features (even, > 0)
  EMBER_ARG(int64_t, max_seq_len) = 2048;  // positions 0 .. max_seq_len - 1 are cached
  EMBER_ARG(double, base) = 10000.0;       // theta_i = base^(-2i / dim)
  EMBER_ARG(bool, interleaved) = false;    // GPT-J pairing instead of GPT-NeoX / LLaMA's
};

// RoPE with angles t * base^(-2i / dim) for position t and pair i. It has no parameters or
// state-dict entries (as the non-persistent buffers of common PyTorch implementations); cos and
// sin are computed once in float64 and cached per device and dtype on first use.
class RotaryEmbeddingImpl : public Module {
 public:
  // clone() builds a fresh RotaryEmbeddingImpl from options.
  EMBER_CLONEABLE(RotaryEmbeddingImpl);
  // Checks the options (dim even and positive, max_seq_len positive, base > 0).
  explicit RotaryEmbeddingImpl(const RotaryEmbeddingOptions& options);
  // x [..., T, D] with D >= dim -> the same shape, positions offset .. offset + T - 1 (offset is
  // where the sequence starts, e.g. the cached length when decoding). x is usually [N, H, T, D]
  // (queries or keys after the head split).
  Tensor forward(const Tensor& x, int64_t offset = 0);
  // (cos, sin) [length, dim / 2] for positions offset .. offset + length - 1, on `device` in
  // `dtype` (views of the cache).
  std::pair<Tensor, Tensor> cos_sin(int64_t length, int64_t offset, Device device, DType dtype);
  void pretty_print(std::ostream& os) const override;

  RotaryEmbeddingOptions options;  // the options it was built with

 private:
  // (device kind, index, dtype) -> the cached cos and sin [max_seq_len, dim / 2].
  std::map<std::tuple<int, int, int>, std::pair<Tensor, Tensor>> cache_;
};
EMBER_MODULE(RotaryEmbedding);

// The options of LearnedPositionalEmbedding.
struct LearnedPositionalEmbeddingOptions {
  // A table for max_len positions of embedding_dim features.
  LearnedPositionalEmbeddingOptions(int64_t max_len, int64_t embedding_dim)
      : max_len_(max_len), embedding_dim_(embedding_dim) {}
  EMBER_ARG(int64_t, max_len);        // positions 0 .. max_len - 1
  EMBER_ARG(int64_t, embedding_dim);  // d, the features of each position
  // The input dim that indexes positions: -2 for [N, T, d] or [T, d]; 0 for [T, N, d].
  EMBER_ARG(int64_t, seq_dim) = -2;
  EMBER_ARG(double, init_std) = 0.02;  // weight ~ N(0, init_std^2), as GPT-2's wpe
};

// A learned absolute position table, weight [max_len, embedding_dim] (named "weight", so it maps
// to an nn.Embedding(max_len, d) state dict such as GPT-2's wpe.weight).
class LearnedPositionalEmbeddingImpl : public Module {
 public:
  // clone() builds a fresh LearnedPositionalEmbeddingImpl from options, then copies the weight.
  EMBER_CLONEABLE(LearnedPositionalEmbeddingImpl);
  // Checks the sizes, registers weight and initializes it.
  explicit LearnedPositionalEmbeddingImpl(const LearnedPositionalEmbeddingOptions& options);
  LearnedPositionalEmbeddingImpl(int64_t max_len, int64_t embedding_dim)
      : LearnedPositionalEmbeddingImpl(LearnedPositionalEmbeddingOptions(max_len, embedding_dim)) {}
  // weight ~ N(0, init_std^2).
  void reset_parameters();
  // The rows for positions offset .. offset + length - 1: [length, embedding_dim] (a view).
  Tensor positions(int64_t length, int64_t offset = 0) const;
  // x (positions along options.seq_dim, features last) -> x + the position rows, broadcast over
  // the other dims.
  Tensor forward(const Tensor& x, int64_t offset = 0);
  void pretty_print(std::ostream& os) const override;

  LearnedPositionalEmbeddingOptions options;  // the options it was built with
  Tensor weight;                              // [max_len, embedding_dim]
};
EMBER_MODULE(LearnedPositionalEmbedding);

}  // namespace ember::nn
