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
  // Views `data` through the arrays `sizes` and `strides` (in elements, one per remaining dim);
  // the arrays are not copied, so they must outlive the accessor. Tensor::accessor() builds it.
  TensorAccessorBase(T* data, const int64_t* sizes, const int64_t* strides)
      : data_(data), sizes_(sizes), strides_(strides) {}
  // The size of remaining dim `d` (0 is the accessor's first dim; no negative dims, no checks).
  int64_t size(size_t d) const { return sizes_[d]; }
  // The stride in elements of remaining dim `d`.
  int64_t stride(size_t d) const { return strides_[d]; }
  // The sizes of the remaining dims (N of them for a TensorAccessor<T, N>).
  const int64_t* sizes() const { return sizes_; }
  // The strides in elements of the remaining dims.
  const int64_t* strides() const { return strides_; }
  // The address of the first element of this (sub-)view.
  T* data() const { return data_; }

 protected:
  T* data_;                 // the first element of this view
  const int64_t* sizes_;    // the tensor's sizes from this accessor's first dim on
  const int64_t* strides_;  // the tensor's strides (in elements) from this accessor's first dim on
};

// An N-dim view of a CPU tensor's elements of type T: acc[i] is an (N-1)-dim accessor, and at one
// dim acc[i] is the element itself (a reference). Indices are not bounds-checked.
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

// The last dimension: indexing gives the element.
template <typename T>
class TensorAccessor<T, 1> : public TensorAccessorBase<T> {
 public:
  using TensorAccessorBase<T>::TensorAccessorBase;

  // A reference to element i along the dimension (through its stride; no bounds check).
  T& operator[](int64_t i) const { return this->data_[this->strides_[0] * i]; }
};

// Tensor::accessor<T, N>(): throws bad_param when the tensor is undefined, not on the CPU, not of
// dtype T (const T reads a tensor of T) or not N-dim.
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
