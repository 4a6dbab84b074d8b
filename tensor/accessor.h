// TensorAccessor<T, N>: libtorch's accessor for element loops over a CPU tensor (Tensor::accessor):
// acc[i][j] indexes through the tensor's strides, one multiply-add per dimension, no checks per
// element. It points into the tensor's data, sizes and strides, so it is valid while the tensor
// lives and keeps its shape.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "ember/tensor/tensor.h"

namespace ember {

// What every TensorAccessor holds: a data pointer and its (remaining) sizes and strides.
template <typename T>
class TensorAccessorBase {
 public:
  TensorAccessorBase(T* data, const int64_t* sizes, const int64_t* strides)
      : data_(data), sizes_(sizes), strides_(strides) {}
  int64_t size(size_t d) const { return sizes_[d]; }
  int64_t stride(size_t d) const { return strides_[d]; }
  const int64_t* sizes() const { return sizes_; }
  const int64_t* strides() const { return strides_; }
  T* data() const { return data_; }

 protected:
  T* data_;
  const int64_t* sizes_;
  const int64_t* strides_;
};

template <typename T, size_t N>
class TensorAccessor : public TensorAccessorBase<T> {
 public:
  static_assert(N >= 1, "TensorAccessor needs at least one dimension");
  using TensorAccessorBase<T>::TensorAccessorBase;

  // The sub-accessor of index i along the first dimension.
  TensorAccessor<T, N - 1> operator[](int64_t i) const {
    return TensorAccessor<T, N - 1>(this->data_ + this->strides_[0] * i, this->sizes_ + 1,
                                    this->strides_ + 1);
  }
};

template <typename T>
class TensorAccessor<T, 1> : public TensorAccessorBase<T> {
 public:
  using TensorAccessorBase<T>::TensorAccessorBase;

  T& operator[](int64_t i) const { return this->data_[this->strides_[0] * i]; }
};

template <typename T, size_t N>
TensorAccessor<T, N> Tensor::accessor() const& {
  using Element = std::remove_const_t<T>;
  EMBER_CHECK(defined(), "accessor: undefined tensor");
  EMBER_CHECK(device().is_cpu(), "accessor: the tensor is on ", device().str(),
              "; accessors read host memory, so copy it with .cpu() first");
  EMBER_CHECK(dtype() == dtype_of<Element>::value, "accessor: tensor has dtype ",
              dtype_name(dtype()), " but the accessor reads ", dtype_name(dtype_of<Element>::value),
              "; convert with .to(dtype) first");
  EMBER_CHECK(dim() == int64_t(N), "accessor: expected a ", N, "-dim tensor but the tensor has ",
              dim(), " dims (shape ", shape_str(), ")");
  return TensorAccessor<T, N>(static_cast<T*>(data_ptr()), sizes().data(), strides().data());
}

}  // namespace ember
