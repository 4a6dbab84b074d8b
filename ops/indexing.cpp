// Indexing ops: index_select, gather, scatter_add and embedding, with their backward formulas.
// Index tensors are int32 or int64; out-of-range indices are errors (on CUDA reported through the
// device error flag at the next sync point, so no op here waits for the GPU).
#include "ember/kernel_interface/indexing.h"

#include "ember/autograd/graph/graph.h"
#include "ember/ops/ops.h"

namespace ember {

using Grads = std::vector<Tensor>;

namespace {
void check_index(const char* op, const Tensor& a, const Tensor& index) {
  EMBER_CHECK(a.defined() && index.defined(), op, ": undefined input");
  EMBER_CHECK(index.dtype() == DType::i64 || index.dtype() == DType::i32, op,
              ": index must be int64 or int32, got ", dtype_name(index.dtype()));
  EMBER_CHECK(a.device() == index.device(), op, ": input is on ", a.device().str(),
              " but index is on ", index.device().str(), "; move the index with .to(device)");
}

// [outer, size, inner] of a dense tensor around `dim`.
void split_dims(const Shape& s, int64_t dim, int64_t& outer, int64_t& inner) {
  outer = 1;
  inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= s[size_t(d)];
  for (size_t d = size_t(dim) + 1; d < s.size(); ++d) inner *= s[d];
}
}  // namespace

Tensor index_select(const Tensor& a0, int64_t dim, const Tensor& index0) {
  check_index("index_select", a0, index0);
  EMBER_CHECK(index0.dim() <= 1, "index_select: index must be 0-D or 1-D, got ",
              index0.shape_str());
  const int64_t d = wrap_dim(dim, a0.dim(), "index_select");
  Tensor a = a0.contiguous(), index = index0.reshape({-1}).contiguous();
  Shape shape = a.sizes();
  if (a.dim() > 0) shape[size_t(d)] = index.numel();
  Tensor out = empty(shape, a.dtype(), a.device());
  int64_t outer, inner;
  split_dims(a.sizes(), d, outer, inner);
  if (out.numel() > 0)
    index_select_kernel().get(a.device().type, a.dtype())(out, a, index, outer,
                                                          a.dim() > 0 ? a.size(d) : 1, inner);
  if (autograd::needs_grad({&a0})) {
    autograd::record_backward("index_select", {a0}, {&out},
                              [index, d, in = a0.sizes(), dt = a0.dtype(), dev = a0.device(), outer,
                               inner](const Grads& g, const auto&) {
                                Tensor r = zeros(in, TensorOptions(dt).with_device(dev));
                                // A create_graph backward: index_add is differentiable (its
                                // backward is index_select of the gradient).
                                if (autograd::grad_enabled())
                                  return Grads{index_add(r, d, index, g[0])};
                                Tensor gc = g[0].contiguous();
                                if (gc.numel() > 0)
                                  index_add_kernel().get(dev.type, dt)(
                                      r, index, gc, outer, in.empty() ? 1 : in[size_t(d)], inner);
                                return Grads{r};
                              });
  }
  return out;
}

Tensor gather(const Tensor& a0, int64_t dim, const Tensor& index0) {
  check_index("gather", a0, index0);
  const int64_t d = wrap_dim(dim, a0.dim(), "gather");
  EMBER_CHECK(index0.dim() == a0.dim(), "gather: index must have as many dims as the input (",
              a0.dim(), "), got ", index0.shape_str());
  for (int64_t i = 0; i < a0.dim(); ++i)
    EMBER_CHECK(i == d || index0.size(i) <= a0.size(i), "gather: index of shape ",
                index0.shape_str(), " is larger than the input ", a0.shape_str(), " at dim ", i);
  Tensor a = a0.contiguous(), index = index0.contiguous();
  Tensor out = empty(index.sizes(), a.dtype(), a.device());
  if (out.numel() > 0) gather_kernel().get(a.device().type, a.dtype())(out, a, index, d);
  if (autograd::needs_grad({&a0})) {
    autograd::record_backward("gather", {a0}, {&out},
                              [index, d, in = a0.sizes(), dt = a0.dtype(), dev = a0.device()](
                                  const Grads& g, const auto&) {
                                Tensor r = zeros(in, TensorOptions(dt).with_device(dev));
                                return Grads{scatter_add(r, d, index, g[0])};
                              });
  }
  return out;
}

Tensor scatter_add(const Tensor& a0, int64_t dim, const Tensor& index0, const Tensor& src0) {
  check_index("scatter_add", a0, index0);
  const int64_t d = wrap_dim(dim, a0.dim(), "scatter_add");
  EMBER_CHECK(src0.defined() && src0.dtype() == a0.dtype() && src0.device() == a0.device(),
              "scatter_add: src must be a tensor of the input's dtype and device");
  EMBER_CHECK(index0.dim() == a0.dim() && src0.dim() == a0.dim(),
              "scatter_add: input, index and src need the same number of dims, got ",
              a0.shape_str(), ", ", index0.shape_str(), ", ", src0.shape_str());
  for (int64_t i = 0; i < a0.dim(); ++i)
    EMBER_CHECK(index0.size(i) <= src0.size(i) && (i == d || index0.size(i) <= a0.size(i)),
                "scatter_add: index of shape ", index0.shape_str(), " does not fit src ",
                src0.shape_str(), " and input ", a0.shape_str(), " at dim ", i);
  Tensor out = a0.clone(MemoryFormat::contiguous).detach();
  Tensor index = index0.contiguous();
  // src is read over the index's extent.
  Tensor src = src0;
  for (int64_t i = 0; i < src.dim(); ++i)
    if (src.size(i) != index.size(i)) src = src.narrow(i, 0, index.size(i));
  src = src.contiguous();
  if (index.numel() > 0)
    scatter_add_kernel().get(out.device().type, out.dtype())(out, index, src, d);
  if (autograd::needs_grad({&a0, &src0})) {
    autograd::record_backward("scatter_add", {a0, src}, {&out},
                              [index, d](const Grads& g, const auto& node) {
                                Grads r(2);
                                if (node.needs_input_grad(0)) r[0] = g[0];
                                if (node.needs_input_grad(1)) r[1] = gather(g[0], d, index);
                                return r;
                              });
  }
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  EMBER_CHECK(weight.defined() && weight.dim() == 2,
              "embedding: weight must be 2-D [num, dim], got ",
              weight.defined() ? weight.shape_str() : std::string("undefined"));
  Shape out_shape = indices.sizes();
  out_shape.push_back(weight.size(1));
  return index_select(weight, 0, indices.reshape({-1})).reshape(out_shape);
}

}  // namespace ember
