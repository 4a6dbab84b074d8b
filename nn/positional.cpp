// apply_rotary, RotaryEmbedding and LearnedPositionalEmbedding (see positional.h).
#include "ember/nn/positional.h"

#include <cmath>
#include <ostream>
#include <vector>

#include "ember/nn/init.h"

namespace ember::nn {

Tensor apply_rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved) {
  EMBER_CHECK(x.defined() && cos.defined() && sin.defined(),
              "apply_rotary: x, cos and sin must be defined tensors");
  EMBER_CHECK(x.dim() >= 2 && cos.dim() >= 1 && cos.shape() == sin.shape(),
              "apply_rotary: expected x [..., T, D] and cos, sin of one shape [..., T, R / 2]; got "
              "x ",
              x.shape_str(), ", cos ", cos.shape_str(), ", sin ", sin.shape_str());
  const int64_t d = x.size(-1), half = cos.size(-1), r = 2 * half;
  EMBER_CHECK(half > 0 && r <= d, "apply_rotary: cos and sin [..., R / 2] must rotate R <= D = ", d,
              " features of x ", x.shape_str(), ", got cos ", cos.shape_str());
  const Tensor c = cos.to(x.dtype()), s = sin.to(x.dtype());
  const Tensor rotated = r == d ? x : x.narrow(-1, 0, r);
  Tensor out;
  if (interleaved) {
    // Pairs (2i, 2i + 1).
    Shape pairs = rotated.shape();
    pairs.back() = half;
    pairs.push_back(2);
    const Tensor xp = rotated.reshape(pairs);
    const Tensor even = xp.select(-1, 0), odd = xp.select(-1, 1);
    out =
        stack({sub(mul(even, c), mul(odd, s)), add(mul(odd, c), mul(even, s))}, -1).flatten(-2, -1);
  } else {
    // Pairs (i, i + R / 2): x * cos + rotate_half(x) * sin, rotate_half(x) = (-x2, x1).
    const Tensor x1 = rotated.narrow(-1, 0, half), x2 = rotated.narrow(-1, half, half);
    out = cat({sub(mul(x1, c), mul(x2, s)), add(mul(x2, c), mul(x1, s))}, -1);
  }
  if (r == d) return out;
  return cat({out, x.narrow(-1, r, d - r)}, -1);
}

// ---- RotaryEmbedding -------------------------------------------------------------------------

RotaryEmbeddingImpl::RotaryEmbeddingImpl(const RotaryEmbeddingOptions& options_)
    : Module("RotaryEmbedding"), options(options_) {
  EMBER_CHECK(options.dim() > 0 && options.dim() % 2 == 0,
              "RotaryEmbedding: dim must be even and positive, got ", options.dim());
  EMBER_CHECK(options.max_seq_len() > 0, "RotaryEmbedding: max_seq_len must be positive, got ",
              options.max_seq_len());
  EMBER_CHECK(options.base() > 0, "RotaryEmbedding: base must be positive, got ", options.base());
}

std::pair<Tensor, Tensor> RotaryEmbeddingImpl::cos_sin(int64_t length, int64_t offset,
                                                       Device device, DType dtype) {
  EMBER_CHECK(length >= 0 && offset >= 0 && offset + length <= options.max_seq_len(),
              "RotaryEmbedding: positions ", offset, " .. ", offset + length - 1,
              " lie outside the cached 0 .. ", options.max_seq_len() - 1,
              "; raise max_seq_len in RotaryEmbeddingOptions");
  const auto key = std::make_tuple(int(device.type), device.index, int(dtype));
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    const int64_t half = options.dim() / 2, n = options.max_seq_len();
    std::vector<double> c(size_t(n * half)), s(size_t(n * half));
    for (int64_t i = 0; i < half; ++i) {
      const double inv_freq = std::pow(options.base(), -2.0 * double(i) / double(options.dim()));
      for (int64_t t = 0; t < n; ++t) {
        const double angle = double(t) * inv_freq;
        c[size_t(t * half + i)] = std::cos(angle);
        s[size_t(t * half + i)] = std::sin(angle);
      }
    }
    const TensorOptions opts = TensorOptions(dtype).with_device(device);
    it = cache_
             .emplace(key, std::make_pair(from_vector(c, {n, half}, opts),
                                          from_vector(s, {n, half}, opts)))
             .first;
  }
  return {it->second.first.narrow(0, offset, length), it->second.second.narrow(0, offset, length)};
}

Tensor RotaryEmbeddingImpl::forward(const Tensor& x, int64_t offset) {
  EMBER_CHECK(x.defined() && x.dim() >= 2 && x.size(-1) >= options.dim(),
              "RotaryEmbedding: x must be [..., T, D] with D >= dim = ", options.dim(), ", got ",
              x.defined() ? x.shape_str() : "undefined");
  auto [c, s] = cos_sin(x.size(-2), offset, x.device(), x.dtype());
  return apply_rotary(x, c, s, options.interleaved());
}

void RotaryEmbeddingImpl::pretty_print(std::ostream& os) const {
  os << "RotaryEmbedding(dim=" << options.dim() << ", max_seq_len=" << options.max_seq_len()
     << ", base=" << detail::float_str(options.base());
  if (options.interleaved()) os << ", interleaved=true";
  os << ")";
}

// ---- LearnedPositionalEmbedding ----------------------------------------------------------------

LearnedPositionalEmbeddingImpl::LearnedPositionalEmbeddingImpl(
    const LearnedPositionalEmbeddingOptions& options_)
    : Module("LearnedPositionalEmbedding"), options(options_) {
  EMBER_CHECK(options.max_len() > 0 && options.embedding_dim() > 0,
              "LearnedPositionalEmbedding: max_len and embedding_dim must be positive, got ",
              options.max_len(), " and ", options.embedding_dim());
  weight = register_parameter("weight", empty({options.max_len(), options.embedding_dim()}));
  reset_parameters();
}

void LearnedPositionalEmbeddingImpl::reset_parameters() {
  init::normal_(weight, 0.0, options.init_std());
}

Tensor LearnedPositionalEmbeddingImpl::positions(int64_t length, int64_t offset) const {
  EMBER_CHECK(length >= 0 && offset >= 0 && offset + length <= options.max_len(),
              "LearnedPositionalEmbedding: positions ", offset, " .. ", offset + length - 1,
              " lie outside the table's 0 .. ", options.max_len() - 1, "; raise max_len");
  return weight.narrow(0, offset, length);
}

Tensor LearnedPositionalEmbeddingImpl::forward(const Tensor& x, int64_t offset) {
  EMBER_CHECK(x.defined() && x.dim() >= 2 && x.size(-1) == options.embedding_dim(),
              "LearnedPositionalEmbedding: x must have at least 2 dims and last dim "
              "embedding_dim = ",
              options.embedding_dim(), ", got ", x.defined() ? x.shape_str() : "undefined");
  const int64_t dim = options.seq_dim() < 0 ? options.seq_dim() + x.dim() : options.seq_dim();
  EMBER_CHECK(dim >= 0 && dim < x.dim() - 1, "LearnedPositionalEmbedding: seq_dim ",
              options.seq_dim(), " must name a dim of x ", x.shape_str(), " before the last");
  // [T, 1, ..., 1, d]: one row per position, broadcast over the dims between.
  Shape shape(size_t(x.dim() - dim), 1);
  shape.front() = x.size(dim);
  shape.back() = options.embedding_dim();
  return add(x, positions(x.size(dim), offset).reshape(shape));
}

void LearnedPositionalEmbeddingImpl::pretty_print(std::ostream& os) const {
  os << "LearnedPositionalEmbedding(" << options.max_len() << ", " << options.embedding_dim()
     << ")";
}

}  // namespace ember::nn
