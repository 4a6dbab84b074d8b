// The Tensor methods of the indexing block of tensor/tensor.h: each forwards to the free function
// of ops/indexing.h (or ops/ops.h) of the same name.
#include "ember/ops/indexing.h"
#include "ember/ops/ops.h"

namespace ember {

using indexing::TensorIndex;

Tensor Tensor::index(std::initializer_list<TensorIndex> indices) const {
  return ::ember::index(*this, std::vector<TensorIndex>(indices));
}
Tensor Tensor::index(const std::vector<TensorIndex>& indices) const {
  return ::ember::index(*this, indices);
}
Tensor& Tensor::index_put_(std::initializer_list<TensorIndex> indices, const Tensor& values,
                           bool accumulate) {
  return ::ember::index_put_(*this, std::vector<TensorIndex>(indices), values, accumulate);
}
Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, const Tensor& values,
                           bool accumulate) {
  return ::ember::index_put_(*this, indices, values, accumulate);
}
Tensor& Tensor::index_put_(std::initializer_list<TensorIndex> indices, double value) {
  return ::ember::index_put_(*this, std::vector<TensorIndex>(indices), value);
}
Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, double value) {
  return ::ember::index_put_(*this, indices, value);
}

Tensor Tensor::masked_fill(const Tensor& mask, double value) const {
  return ::ember::masked_fill(*this, mask, value);
}
Tensor Tensor::masked_fill(const Tensor& mask, const Tensor& value) const {
  return ::ember::masked_fill(*this, mask, value);
}
Tensor& Tensor::masked_fill_(const Tensor& mask, double value) {
  return ::ember::masked_fill_(*this, mask, value);
}
Tensor& Tensor::masked_fill_(const Tensor& mask, const Tensor& value) {
  return ::ember::masked_fill_(*this, mask, value);
}
Tensor Tensor::masked_select(const Tensor& mask) const {
  return ::ember::masked_select(*this, mask);
}
Tensor Tensor::masked_scatter(const Tensor& mask, const Tensor& source) const {
  return ::ember::masked_scatter(*this, mask, source);
}
Tensor& Tensor::masked_scatter_(const Tensor& mask, const Tensor& source) {
  return ::ember::masked_scatter_(*this, mask, source);
}
Tensor Tensor::nonzero() const { return ::ember::nonzero(*this); }
Tensor Tensor::argwhere() const { return ::ember::argwhere(*this); }

Tensor Tensor::scatter(int64_t dim, const Tensor& index, const Tensor& src) const {
  return ::ember::scatter(*this, dim, index, src);
}
Tensor Tensor::scatter(int64_t dim, const Tensor& index, double value) const {
  return ::ember::scatter(*this, dim, index, value);
}
Tensor Tensor::scatter(int64_t dim, const Tensor& index, const Tensor& src,
                       const std::string& reduce) const {
  return ::ember::scatter(*this, dim, index, src, reduce);
}
Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, const Tensor& src) {
  return ::ember::scatter_(*this, dim, index, src);
}
Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, double value) {
  return ::ember::scatter_(*this, dim, index, value);
}
Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, const Tensor& src,
                         const std::string& reduce) {
  return ::ember::scatter_(*this, dim, index, src, reduce);
}
Tensor Tensor::scatter_reduce(int64_t dim, const Tensor& index, const Tensor& src,
                              const std::string& reduce, bool include_self) const {
  return ::ember::scatter_reduce(*this, dim, index, src, reduce, include_self);
}
Tensor& Tensor::scatter_reduce_(int64_t dim, const Tensor& index, const Tensor& src,
                                const std::string& reduce, bool include_self) {
  return ::ember::scatter_reduce_(*this, dim, index, src, reduce, include_self);
}

Tensor Tensor::index_add(int64_t dim, const Tensor& index, const Tensor& source,
                         double alpha) const {
  return ::ember::index_add(*this, dim, index, source, alpha);
}
Tensor& Tensor::index_add_(int64_t dim, const Tensor& index, const Tensor& source, double alpha) {
  return ::ember::index_add_(*this, dim, index, source, alpha);
}
Tensor Tensor::index_copy(int64_t dim, const Tensor& index, const Tensor& source) const {
  return ::ember::index_copy(*this, dim, index, source);
}
Tensor& Tensor::index_copy_(int64_t dim, const Tensor& index, const Tensor& source) {
  return ::ember::index_copy_(*this, dim, index, source);
}
Tensor Tensor::index_fill(int64_t dim, const Tensor& index, double value) const {
  return ::ember::index_fill(*this, dim, index, value);
}
Tensor Tensor::index_fill(int64_t dim, const Tensor& index, const Tensor& value) const {
  return ::ember::index_fill(*this, dim, index, value);
}
Tensor& Tensor::index_fill_(int64_t dim, const Tensor& index, double value) {
  return ::ember::index_fill_(*this, dim, index, value);
}
Tensor& Tensor::index_fill_(int64_t dim, const Tensor& index, const Tensor& value) {
  return ::ember::index_fill_(*this, dim, index, value);
}
Tensor Tensor::take_along_dim(const Tensor& indices, std::optional<int64_t> dim) const {
  return ::ember::take_along_dim(*this, indices, dim);
}

}  // namespace ember
