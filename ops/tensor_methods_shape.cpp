// libtorch's Tensor methods for shapes (view_as, chunk, split, unbind, index_select,
// ...) and reductions (prod(dim), max(dim), var, ...), each forwarding to the free op of
// ops/ops.h or ops/tensor_api.h. The one-dim reductions (x.sum(1)) are templates in tensor.h.
#include "ember/ops/ops.h"

namespace ember {

// ---- shape ----
Tensor Tensor::view_as(const Tensor& other) const { return view(other.sizes()); }
Tensor Tensor::expand_as(const Tensor& other) const { return expand(other.sizes()); }
Tensor Tensor::reshape_as(const Tensor& other) const { return reshape(other.sizes()); }
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim) const {
  return ::ember::chunk(*this, chunks, dim);
}
std::vector<Tensor> Tensor::split(int64_t split_size, int64_t dim) const {
  return ::ember::split(*this, split_size, dim);
}
std::vector<Tensor> Tensor::split(const Shape& split_sizes, int64_t dim) const {
  return ::ember::split_with_sizes(*this, split_sizes, dim);
}
std::vector<Tensor> Tensor::split_with_sizes(const Shape& split_sizes, int64_t dim) const {
  return ::ember::split_with_sizes(*this, split_sizes, dim);
}
std::vector<Tensor> Tensor::unbind(int64_t dim) const { return ::ember::unbind(*this, dim); }
Tensor Tensor::index_select(int64_t dim, const Tensor& index) const {
  return ::ember::index_select(*this, dim, index);
}
Tensor Tensor::gather(int64_t dim, const Tensor& index) const {
  return ::ember::gather(*this, dim, index);
}
Tensor Tensor::scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const {
  return ::ember::scatter_add(*this, dim, index, src);
}
Tensor Tensor::mm(const Tensor& other) const { return ::ember::mm(*this, other); }
Tensor Tensor::bmm(const Tensor& other) const { return ::ember::bmm(*this, other); }

// ---- reductions ----
Tensor Tensor::prod() const { return ::ember::prod(*this); }
Tensor Tensor::prod(int64_t dim, bool keepdim) const {
  return ::ember::prod(*this, {dim}, keepdim);
}
Tensor Tensor::amax(const Shape& dim, bool keepdim) const {
  return ::ember::amax(*this, dim, keepdim);
}
Tensor Tensor::amin(const Shape& dim, bool keepdim) const {
  return ::ember::amin(*this, dim, keepdim);
}
Tensor Tensor::var(bool unbiased) const { return ::ember::var(*this, {}, unbiased ? 1 : 0); }
Tensor Tensor::var(const Shape& dim, bool unbiased, bool keepdim) const {
  return ::ember::var(*this, dim, unbiased ? 1 : 0, keepdim);
}
Tensor Tensor::std(bool unbiased) const { return ::ember::std(*this, {}, unbiased ? 1 : 0); }
Tensor Tensor::std(const Shape& dim, bool unbiased, bool keepdim) const {
  return ::ember::std(*this, dim, unbiased ? 1 : 0, keepdim);
}
Tensor Tensor::max() const { return ::ember::max(*this); }
Tensor Tensor::min() const { return ::ember::min(*this); }
std::tuple<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim) const {
  ValuesIndices r = ::ember::max(*this, dim, keepdim);
  return {r.values, r.indices};
}
std::tuple<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim) const {
  ValuesIndices r = ::ember::min(*this, dim, keepdim);
  return {r.values, r.indices};
}
Tensor Tensor::max(const Tensor& other) const { return ::ember::maximum(*this, other); }
Tensor Tensor::min(const Tensor& other) const { return ::ember::minimum(*this, other); }
Tensor Tensor::argmax(std::optional<int64_t> dim, bool keepdim) const {
  return ::ember::argmax(*this, dim, keepdim);
}
Tensor Tensor::argmin(std::optional<int64_t> dim, bool keepdim) const {
  return ::ember::argmin(*this, dim, keepdim);
}
Tensor Tensor::logsumexp(const Shape& dim, bool keepdim) const {
  return ::ember::logsumexp(*this, dim, keepdim);
}

}  // namespace ember
