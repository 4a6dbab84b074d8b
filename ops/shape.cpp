// Joining and splitting: cat, stack, split, split_with_sizes, chunk (splits are views).
#include "ember/autograd/graph/graph.h"
#include "ember/ops/ops.h"

namespace ember {

using Grads = std::vector<Tensor>;

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  EMBER_CHECK(!tensors.empty(), "cat: expects a non-empty list of tensors");
  const Tensor& first = tensors[0];
  const int64_t d = wrap_dim(dim, first.dim(), "cat");
  DType dt = first.dtype();
  for (const Tensor& t : tensors) dt = promote_types(dt, t.dtype());
  Shape shape = first.sizes();
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    EMBER_CHECK(t.dim() == first.dim(), "cat: tensor ", i, " has shape ", t.shape_str(),
                " but tensor 0 has ", first.shape_str(), " (different number of dims)");
    EMBER_CHECK(t.device() == first.device(), "cat: tensor ", i, " is on ", t.device().str(),
                " but tensor 0 is on ", first.device().str());
    for (int64_t j = 0; j < t.dim(); ++j)
      EMBER_CHECK(j == d || t.size(j) == first.size(j), "cat: tensor ", i, " has shape ",
                  t.shape_str(), " which does not match ", first.shape_str(), " except in dim ", d);
    EMBER_CHECK(!__builtin_add_overflow(total, t.size(d), &total), "cat: the sizes in dim ", d,
                " of the tensors overflow (tensor ", i, " has shape ", t.shape_str(), ")");
  }
  shape[size_t(d)] = total;
  Tensor out = empty(shape, dt, first.device(), first.suggest_memory_format());
  std::vector<int64_t> sizes;
  {
    autograd::NoGradGuard ng;
    int64_t off = 0;
    for (const Tensor& t : tensors) {
      out.narrow(d, off, t.size(d)).copy_(t);
      sizes.push_back(t.size(d));
      off += t.size(d);
    }
  }
  if (autograd::needs_grad(tensors)) {
    autograd::record_backward("cat", tensors, {&out}, [sizes, d](const Grads& g, const auto& node) {
      Grads r(sizes.size());
      int64_t off = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        if (node.needs_input_grad(i)) r[i] = g[0].narrow(d, off, sizes[i]);
        off += sizes[i];
      }
      return r;
    });
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  EMBER_CHECK(!tensors.empty(), "stack: expects a non-empty list of tensors");
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    EMBER_CHECK(tensors[i].sizes() == tensors[0].sizes(), "stack: tensor ", i, " has shape ",
                tensors[i].shape_str(), " but tensor 0 has ", tensors[0].shape_str());
    parts.push_back(tensors[i].unsqueeze(d));
  }
  return cat(parts, d);
}

std::vector<Tensor> split_with_sizes(const Tensor& a, const Shape& sizes, int64_t dim) {
  const int64_t d = wrap_dim(dim, a.dim(), "split_with_sizes");
  int64_t total = 0;
  for (int64_t s : sizes)
    EMBER_CHECK(s >= 0 && !__builtin_add_overflow(total, s, &total), "split_with_sizes: sizes ",
                shape_str(sizes), " must be non-negative and sum to the size ", a.size(d),
                " of dim ", d, " of ", a.shape_str());
  EMBER_CHECK(total == a.size(d), "split_with_sizes: sizes ", shape_str(sizes), " sum to ", total,
              " but dim ", d, " of ", a.shape_str(), " has size ", a.size(d));
  std::vector<Tensor> out;
  int64_t off = 0;
  for (int64_t s : sizes) {
    out.push_back(a.narrow(d, off, s));
    off += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& a, int64_t split_size, int64_t dim) {
  EMBER_CHECK(split_size > 0, "split: split_size must be positive, got ", split_size);
  const int64_t d = wrap_dim(dim, a.dim(), "split");
  Shape sizes;
  for (int64_t off = 0; off < a.size(d); off += split_size)
    sizes.push_back(std::min(split_size, a.size(d) - off));
  return split_with_sizes(a, sizes, d);
}

std::vector<Tensor> chunk(const Tensor& a, int64_t chunks, int64_t dim) {
  EMBER_CHECK(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  const int64_t d = wrap_dim(dim, a.dim(), "chunk");
  return split(a, std::max<int64_t>((a.size(d) + chunks - 1) / chunks, 1), d);
}

}  // namespace ember
