// Tensor: a reference-counted view (sizes, strides, offset, dtype) onto shared Storage, plus the
// autograd state of that view. Copying a Tensor copies the reference, as in libtorch. Metadata
// accessors and the raw view constructor live in tensor.cpp; every op (views included, since they
// have gradients) lives in ops/ and is declared in ops/ops.h.
#pragma once
#include <atomic>
#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "ember/tensor/allocator.h"
#include "ember/tensor/device.h"
#include "ember/tensor/dtype.h"

namespace ember {

// A tensor's sizes (or strides), outermost dim first, as in PyTorch's torch.Size.
using Shape = std::vector<int64_t>;
// The order of a tensor's elements in memory, as PyTorch's torch.memory_format: contiguous is
// row-major (the last dim fastest); channels_last is NHWC for 4-d tensors (NDHWC for 5-d) while the
// sizes stay NCHW; preserve (for to(), clone() and the *_like factories) keeps the source's format
// as suggest_memory_format() reads it.
enum class MemoryFormat : uint8_t { contiguous, channels_last, preserve };
// The format's name: "contiguous", "channels_last" or "preserve" (for messages).
const char* memory_format_name(MemoryFormat f);

// Bytes on a device. Views share one Storage; its version counter counts in-place writes so that
// autograd can detect a saved tensor that was modified.
struct StorageImpl {
  DataPtr data;
  size_t nbytes = 0;
  Device device;
  std::atomic<uint64_t> version{0};
  StorageImpl(DataPtr d, size_t n, Device dev) : data(d), nbytes(n), device(dev) {}
  ~StorageImpl() {
    if (data.deleter) data.deleter(data.ptr);
  }
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;
};
using Storage = std::shared_ptr<StorageImpl>;
Storage new_storage(size_t nbytes, Device device);

struct AutogradMeta;   // autograd/autograd.h
struct TensorOptions;  // ops/ops.h
class Scalar;          // ops/tensor_api.h
class Generator;       // tensor/runtime/generator.h
template <typename T, size_t N>
class TensorAccessor;  // tensor/accessor.h
namespace autograd {
class Node;  // autograd/graph/node.h
}
namespace indexing {
class TensorIndex;  // ops/indexing.h
}

// The state a Tensor handle shares with its copies: which Storage it views, how (sizes, strides
// and offset in elements, dtype) and its autograd state. Ops create it; user code reads it through
// Tensor's accessors rather than directly.
struct TensorImpl {
  Storage storage;                         // the bytes viewed; shared by every view of them
  Shape sizes;                             // the logical shape, outermost dim first
  Shape strides;                           // in elements
  int64_t offset = 0;                      // in elements
  DType dtype = DType::f32;                // the element type
  std::shared_ptr<AutogradMeta> autograd;  // null until the tensor takes part in autograd
};

// An n-dimensional array of one dtype on one device, with autograd, as libtorch's at::Tensor: a
// cheap handle that copies by reference (use clone() for a copy of the data). Create one with the
// factories of ops/ops.h (zeros, randn, from_vector, ...); a default-constructed Tensor is
// undefined (defined() is false) and most methods throw on it.
class Tensor {
 public:
  // An undefined tensor: the "no tensor" value of optional arguments and missing gradients.
  Tensor() = default;
  // Wraps an existing TensorImpl (ops build tensors this way; user code uses the factories).
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // True when the handle refers to a tensor (false for Tensor{}, as PyTorch's defined()).
  bool defined() const { return impl_ != nullptr; }
  // The shared state behind the handle (null when undefined), for code below the public API.
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  // True when both handles refer to the same TensorImpl (PyTorch's is_same): the same view, not
  // merely equal values or a shared storage.
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // ---- metadata ----
  const Shape& sizes() const;
  const Shape& strides() const;
  Shape shape() const { return sizes(); }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int64_t stride(int64_t dim) const;
  int64_t dim() const;
  int64_t numel() const;
  int64_t offset() const;
  DType dtype() const;
  Device device() const;
  bool is_cuda() const { return device().is_cuda(); }
  size_t element_size() const { return ::ember::element_size(dtype()); }
  size_t nbytes() const { return size_t(numel()) * element_size(); }
  const Storage& storage() const;
  void* data_ptr() const;  // address of the first element
  template <typename T>
  T* data() const {
    EMBER_CHECK(dtype() == dtype_of<T>::value, "Tensor::data<T>: tensor has dtype ",
                dtype_name(dtype()), " but ", dtype_name(dtype_of<T>::value), " was asked for");
    return static_cast<T*>(data_ptr());
  }
  bool is_contiguous(MemoryFormat format = MemoryFormat::contiguous) const;
  // The memory format the strides follow (channels_last for 4-D NHWC strides, else contiguous).
  MemoryFormat suggest_memory_format() const;
  uint64_t version() const;
  void bump_version() const;

  // ---- views and copies (ops/views.cpp, ops/copy.cpp); all record autograd ----
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // 2-D transpose
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;
  Tensor squeeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor contiguous(MemoryFormat format = MemoryFormat::contiguous) const;
  Tensor clone(MemoryFormat format = MemoryFormat::preserve) const;
  Tensor detach() const;  // shares storage, no autograd history
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  Tensor to(MemoryFormat format) const;
  Tensor to(Device device, DType dtype) const;
  Tensor cpu() const { return to(Device::cpu()); }
  Tensor cuda(int index = 0) const { return to(Device::cuda(index)); }
  Tensor& copy_(const Tensor& src);  // broadcasts src; converts dtype and device
  // Makes this tensor (and every handle to it) refer to `other`'s data, sizes and dtype, keeping
  // its autograd identity (requires_grad, hooks, .grad: the caller converts or drops .grad).
  // Modules use it to move parameters between devices and dtypes in place, like PyTorch's .data.
  void set_data(const Tensor& other);
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }

  // ---- element access (host sync for CUDA tensors) ----
  double item() const;  // the value of a one-element tensor
  template <typename T>
  T item() const {
    return static_cast<T>(item());
  }
  std::vector<double> to_vector() const;  // all elements in logical order, as double

  // ---- autograd (autograd/variable.cpp) ----
  bool requires_grad() const;
  Tensor& set_requires_grad(bool requires_grad);
  Tensor& requires_grad_(bool requires_grad = true) { return set_requires_grad(requires_grad); }
  const Tensor& grad() const;  // undefined Tensor when no gradient has been accumulated
  Tensor& mutable_grad();
  void set_grad(const Tensor& g);
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  bool is_leaf() const;
  void retain_grad();
  // Computes gradients of this tensor w.r.t. graph leaves; `gradient` defaults to ones for a
  // one-element tensor. With create_graph the gradients get a grad_fn (higher-order gradients);
  // retain_graph defaults to create_graph. As in PyTorch, a .grad with history that saved its own
  // tensor is a reference cycle: reset it (set_grad(Tensor())) when done, or use autograd::grad.
  void backward(const Tensor& gradient = Tensor(), std::optional<bool> retain_graph = std::nullopt,
                bool create_graph = false) const;
  // The hook sees the gradient flowing into this tensor and may return a replacement (or an
  // undefined Tensor to keep it). Returns a handle for remove_hook.
  using Hook = std::function<Tensor(const Tensor&)>;
  int register_hook(Hook hook);
  void remove_hook(int handle);
  // Runs after the gradient of this leaf was accumulated into .grad (data parallel uses it).
  using PostAccumulateHook = std::function<void(Tensor&)>;
  void register_post_accumulate_grad_hook(PostAccumulateHook hook);

  // ---- arithmetic sugar (ops/tensor_methods.cpp) ----
  Tensor operator-() const;
  Tensor& operator+=(const Tensor& o);
  Tensor& operator-=(const Tensor& o);
  Tensor& operator*=(const Tensor& o);
  Tensor& operator/=(const Tensor& o);
  Tensor& operator+=(double o);
  Tensor& operator*=(double o);
  Tensor sum() const;
  Tensor mean() const;
  Tensor sum(const Shape& dims, bool keepdim = false) const;
  Tensor mean(const Shape& dims, bool keepdim = false) const;
  Tensor matmul(const Tensor& o) const;
  Tensor relu() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor pow(double e) const;
  Tensor abs() const;
  Tensor sqrt() const;

  // ---- indexing (ops/indexing*.cpp) ----
  // x.index({Slice(1, None, 2), None, Ellipsis, idx, mask}) and friends (ops/indexing.h).
  Tensor index(std::initializer_list<indexing::TensorIndex> indices) const;
  Tensor index(const std::vector<indexing::TensorIndex>& indices) const;
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, const Tensor& values,
                     bool accumulate = false);
  Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, const Tensor& values,
                     bool accumulate = false);
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, double value);
  Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, double value);
  Tensor masked_fill(const Tensor& mask, double value) const;
  Tensor masked_fill(const Tensor& mask, const Tensor& value) const;
  Tensor& masked_fill_(const Tensor& mask, double value);
  Tensor& masked_fill_(const Tensor& mask, const Tensor& value);
  Tensor masked_select(const Tensor& mask) const;
  Tensor masked_scatter(const Tensor& mask, const Tensor& source) const;
  Tensor& masked_scatter_(const Tensor& mask, const Tensor& source);
  Tensor nonzero() const;
  Tensor argwhere() const;
  Tensor scatter(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor scatter(int64_t dim, const Tensor& index, double value) const;
  Tensor scatter(int64_t dim, const Tensor& index, const Tensor& src,
                 const std::string& reduce) const;
  Tensor& scatter_(int64_t dim, const Tensor& index, const Tensor& src);
  Tensor& scatter_(int64_t dim, const Tensor& index, double value);
  Tensor& scatter_(int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce);
  Tensor scatter_reduce(int64_t dim, const Tensor& index, const Tensor& src,
                        const std::string& reduce, bool include_self = true) const;
  Tensor& scatter_reduce_(int64_t dim, const Tensor& index, const Tensor& src,
                          const std::string& reduce, bool include_self = true);
  Tensor index_add(int64_t dim, const Tensor& index, const Tensor& source, double alpha = 1) const;
  Tensor& index_add_(int64_t dim, const Tensor& index, const Tensor& source, double alpha = 1);
  Tensor index_copy(int64_t dim, const Tensor& index, const Tensor& source) const;
  Tensor& index_copy_(int64_t dim, const Tensor& index, const Tensor& source);
  Tensor index_fill(int64_t dim, const Tensor& index, double value) const;
  Tensor index_fill(int64_t dim, const Tensor& index, const Tensor& value) const;
  Tensor& index_fill_(int64_t dim, const Tensor& index, double value);
  Tensor& index_fill_(int64_t dim, const Tensor& index, const Tensor& value);
  Tensor take_along_dim(const Tensor& indices, std::optional<int64_t> dim = std::nullopt) const;
  // ---- end of indexing ----

  // ==== libtorch's method surface (ops/tensor_methods_*.cpp, tensor/accessor.h) ====
  // Named and defaulted as libtorch names them; each forwards to the free op of ops/ops.h (or
  // ops/tensor_api.h), so errors name the op. Scalars are double where the free op takes double.

  // ---- access and conversion (ops/tensor_methods_access.cpp) ----
  template <typename T>
  T* data_ptr() const {
    EMBER_CHECK(dtype() == dtype_of<std::remove_const_t<T>>::value,
                "data_ptr<T>: tensor has dtype ", dtype_name(dtype()), " but ",
                dtype_name(dtype_of<std::remove_const_t<T>>::value),
                " was asked for; convert with .to(dtype) first");
    return static_cast<T*>(data_ptr());
  }
  // A view for element loops on a CPU tensor of dtype T and N dims: acc[i][j] is a T&. Valid while
  // the tensor lives (it points into its sizes and strides).
  template <typename T, size_t N>
  TensorAccessor<T, N> accessor() const&;
  template <typename T, size_t N>
  TensorAccessor<T, N> accessor() && = delete;  // would outlive the tensor
  TensorOptions options() const;                // dtype and device (requires_grad off, as libtorch)
  int64_t ndimension() const { return dim(); }
  bool is_floating_point() const { return is_floating(dtype()); }
  DType scalar_type() const { return dtype(); }
  Tensor to(const TensorOptions& options) const;  // the options' dtype and device
  Tensor type_as(const Tensor& other) const;
  Tensor half() const;
  Tensor bfloat16() const;

  // ---- shape (ops/tensor_methods_shape.cpp) ----
  Tensor view_as(const Tensor& other) const;
  Tensor expand_as(const Tensor& other) const;
  Tensor reshape_as(const Tensor& other) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split(const Shape& split_sizes, int64_t dim = 0) const;
  std::vector<Tensor> split_with_sizes(const Shape& split_sizes, int64_t dim = 0) const;
  std::vector<Tensor> unbind(int64_t dim = 0) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor mm(const Tensor& other) const;
  Tensor bmm(const Tensor& other) const;

  // ---- reductions (ops/tensor_methods_shape.cpp) ----
  // One dim given as an integer (x.sum(1)) takes the templates: a braced list, even {} or {1},
  // stays a list of dims (x.sum({}) reduces everything, as with no dims).
  template <std::integral Dim>
  Tensor sum(Dim dim, bool keepdim = false) const {
    return sum(Shape{int64_t(dim)}, keepdim);
  }
  template <std::integral Dim>
  Tensor mean(Dim dim, bool keepdim = false) const {
    return mean(Shape{int64_t(dim)}, keepdim);
  }
  Tensor prod() const;
  Tensor prod(int64_t dim, bool keepdim = false) const;
  Tensor amax(const Shape& dim = {}, bool keepdim = false) const;
  template <std::integral Dim>
  Tensor amax(Dim dim, bool keepdim = false) const {
    return amax(Shape{int64_t(dim)}, keepdim);
  }
  Tensor amin(const Shape& dim = {}, bool keepdim = false) const;
  template <std::integral Dim>
  Tensor amin(Dim dim, bool keepdim = false) const {
    return amin(Shape{int64_t(dim)}, keepdim);
  }
  // As libtorch: x.var(1) means unbiased = true; give a dim with x.var(1, true) or x.var({0, 1}).
  Tensor var(bool unbiased = true) const;
  Tensor var(const Shape& dim, bool unbiased = true, bool keepdim = false) const;
  template <std::integral Dim>
  Tensor var(Dim dim, bool unbiased, bool keepdim = false) const {
    return var(Shape{int64_t(dim)}, unbiased, keepdim);
  }
  Tensor std(bool unbiased = true) const;
  Tensor std(const Shape& dim, bool unbiased = true, bool keepdim = false) const;
  template <std::integral Dim>
  Tensor std(Dim dim, bool unbiased, bool keepdim = false) const {
    return std(Shape{int64_t(dim)}, unbiased, keepdim);
  }
  Tensor max() const;
  Tensor min() const;
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;  // values, indices
  std::tuple<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor max(const Tensor& other) const;  // maximum
  Tensor min(const Tensor& other) const;  // minimum
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor argmin(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor logsumexp(const Shape& dim, bool keepdim = false) const;
  template <std::integral Dim>
  Tensor logsumexp(Dim dim, bool keepdim = false) const {
    return logsumexp(Shape{int64_t(dim)}, keepdim);
  }

  // ---- arithmetic (ops/tensor_methods_math.cpp) ----
  Tensor add(const Tensor& other, double alpha = 1) const;
  Tensor add(double other, double alpha = 1) const;
  Tensor sub(const Tensor& other, double alpha = 1) const;
  Tensor sub(double other, double alpha = 1) const;
  Tensor mul(const Tensor& other) const;
  Tensor mul(double other) const;
  Tensor div(const Tensor& other) const;
  Tensor div(double other) const;
  Tensor remainder(const Tensor& other) const;
  Tensor remainder(const Scalar& other) const;
  Tensor fmod(const Tensor& other) const;
  Tensor fmod(const Scalar& other) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor& add_(const Tensor& other, double alpha = 1);
  Tensor& add_(double other, double alpha = 1);
  Tensor& sub_(const Tensor& other, double alpha = 1);
  Tensor& sub_(double other, double alpha = 1);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double other);
  Tensor& div_(const Tensor& other);
  Tensor& div_(double other);
  Tensor& pow_(double exponent);
  Tensor& operator-=(double o);
  Tensor& operator/=(double o);
  Tensor neg() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor square() const;
  Tensor rsqrt() const;
  Tensor reciprocal() const;
  Tensor sign() const;
  Tensor floor() const;
  Tensor ceil() const;
  Tensor round() const;
  Tensor log1p() const;
  Tensor expm1() const;
  Tensor clamp(std::optional<double> min = std::nullopt,
               std::optional<double> max = std::nullopt) const;
  Tensor clamp_min(double min) const;
  Tensor clamp_max(double max) const;
  // In place: the result is computed out of place and copied back (one extra pass), recording
  // autograd like the out-of-place op; a leaf that requires grad cannot be modified.
  Tensor& neg_();
  Tensor& exp_();
  Tensor& log_();
  Tensor& sqrt_();
  Tensor& rsqrt_();
  Tensor& abs_();
  Tensor& sigmoid_();
  Tensor& tanh_();
  Tensor& sin_();
  Tensor& cos_();
  Tensor& square_();
  Tensor& reciprocal_();
  Tensor& relu_();
  Tensor& clamp_(std::optional<double> min = std::nullopt,
                 std::optional<double> max = std::nullopt);
  Tensor& clamp_min_(double min);
  Tensor& clamp_max_(double max);
  Tensor& uniform_(double from = 0, double to = 1, Generator* generator = nullptr);
  Tensor& normal_(double mean = 0, double std = 1, Generator* generator = nullptr);

  // ---- comparisons, logical and bitwise (ops/tensor_methods_math.cpp); results are bool ----
  Tensor eq(const Tensor& other) const;
  Tensor ne(const Tensor& other) const;
  Tensor lt(const Tensor& other) const;
  Tensor le(const Tensor& other) const;
  Tensor gt(const Tensor& other) const;
  Tensor ge(const Tensor& other) const;
  Tensor eq(const Scalar& other) const;
  Tensor ne(const Scalar& other) const;
  Tensor lt(const Scalar& other) const;
  Tensor le(const Scalar& other) const;
  Tensor gt(const Scalar& other) const;
  Tensor ge(const Scalar& other) const;
  bool equal(const Tensor& other) const;  // same shape and values
  bool allclose(const Tensor& other, double rtol = 1e-5, double atol = 1e-8) const;
  Tensor isnan() const;
  Tensor isfinite() const;
  Tensor logical_not() const;
  Tensor logical_and(const Tensor& other) const;
  Tensor logical_or(const Tensor& other) const;
  Tensor logical_xor(const Tensor& other) const;
  Tensor bitwise_and(const Tensor& other) const;
  Tensor bitwise_or(const Tensor& other) const;
  Tensor bitwise_xor(const Tensor& other) const;
  Tensor bitwise_not() const;
  Tensor where(const Tensor& condition, const Tensor& other) const;  // condition ? *this : other

  // ---- reductions and scans (ops/reduction_more*.cpp) ----
  Tensor any() const;
  Tensor any(int64_t dim, bool keepdim = false) const;
  Tensor all() const;
  Tensor all(int64_t dim, bool keepdim = false) const;
  Tensor count_nonzero(const Shape& dims = {}) const;
  std::tuple<Tensor, Tensor> aminmax(std::optional<int64_t> dim = std::nullopt,
                                     bool keepdim = false) const;
  Tensor norm(double p = 2, const Shape& dims = {}, bool keepdim = false) const;
  Tensor cumsum(int64_t dim, std::optional<DType> dtype = std::nullopt) const;
  Tensor cumprod(int64_t dim, std::optional<DType> dtype = std::nullopt) const;
  std::tuple<Tensor, Tensor> cummax(int64_t dim) const;  // (values, indices)
  std::tuple<Tensor, Tensor> cummin(int64_t dim) const;
  std::tuple<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false) const;
  std::tuple<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true,
                                  bool sorted = true) const;
  std::tuple<Tensor, Tensor> kthvalue(int64_t k, int64_t dim = -1, bool keepdim = false) const;
  Tensor median() const;
  std::tuple<Tensor, Tensor> median(int64_t dim, bool keepdim = false) const;
  Tensor nanmedian() const;
  std::tuple<Tensor, Tensor> nanmedian(int64_t dim, bool keepdim = false) const;
  // ---- end of reductions and scans ----

  // ---- shape ops (ops/shape_more*.cpp) ----
  Tensor movedim(int64_t source, int64_t destination) const;
  Tensor movedim(const Shape& source, const Shape& destination) const;
  Tensor moveaxis(int64_t source, int64_t destination) const;
  Tensor moveaxis(const Shape& source, const Shape& destination) const;
  Tensor swapaxes(int64_t axis0, int64_t axis1) const;
  Tensor swapdims(int64_t dim0, int64_t dim1) const;
  Tensor unflatten(int64_t dim, const Shape& sizes) const;
  Tensor narrow_copy(int64_t dim, int64_t start, int64_t length) const;
  std::vector<Tensor> tensor_split(int64_t sections, int64_t dim = 0) const;
  std::vector<Tensor> tensor_split(const Shape& indices, int64_t dim = 0) const;
  std::vector<Tensor> hsplit(int64_t sections) const;
  std::vector<Tensor> hsplit(const Shape& indices) const;
  std::vector<Tensor> vsplit(int64_t sections) const;
  std::vector<Tensor> vsplit(const Shape& indices) const;
  std::vector<Tensor> dsplit(int64_t sections) const;
  std::vector<Tensor> dsplit(const Shape& indices) const;
  Tensor diagonal(int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1) const;
  Tensor repeat(const Shape& repeats) const;
  Tensor tile(const Shape& dims) const;
  Tensor flip(const Shape& dims) const;
  Tensor roll(const Shape& shifts, const Shape& dims = {}) const;
  Tensor rot90(int64_t k = 1, const Shape& dims = {0, 1}) const;
  Tensor repeat_interleave(int64_t repeats, std::optional<int64_t> dim = std::nullopt) const;
  Tensor repeat_interleave(const Tensor& repeats, std::optional<int64_t> dim = std::nullopt) const;
  Tensor diag_embed(int64_t offset = 0, int64_t dim1 = -2, int64_t dim2 = -1) const;
  Tensor diag(int64_t diagonal = 0) const;
  Tensor trace() const;
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;
  Tensor& tril_(int64_t diagonal = 0);
  Tensor& triu_(int64_t diagonal = 0);
  // ---- end of shape ops ----

  // ---- issue 34 elementwise ops (ops/elementwise_more.cpp; see ops/elementwise_more.h) ----
  Tensor log2() const;
  Tensor log10() const;
  Tensor tan() const;
  Tensor asin() const;
  Tensor acos() const;
  Tensor atan() const;
  Tensor sinh() const;
  Tensor cosh() const;
  Tensor asinh() const;
  Tensor acosh() const;
  Tensor atanh() const;
  Tensor erf() const;
  Tensor erfc() const;
  Tensor erfinv() const;
  Tensor trunc() const;
  Tensor fix() const;
  Tensor frac() const;
  Tensor sgn() const;
  Tensor round(int64_t decimals) const;
  Tensor nan_to_num(std::optional<double> nan = 0.0, std::optional<double> posinf = std::nullopt,
                    std::optional<double> neginf = std::nullopt) const;
  Tensor isinf() const;
  Tensor atan2(const Tensor& other) const;
  Tensor arctan2(const Tensor& other) const;
  Tensor hypot(const Tensor& other) const;
  Tensor lerp(const Tensor& end, double weight) const;
  Tensor lerp(const Tensor& end, const Tensor& weight) const;
  Tensor addcmul(const Tensor& tensor1, const Tensor& tensor2, double value = 1) const;
  Tensor addcdiv(const Tensor& tensor1, const Tensor& tensor2, double value = 1) const;
  Tensor clamp(const std::optional<Tensor>& min, const std::optional<Tensor>& max) const;
  Tensor isclose(const Tensor& other, double rtol = 1e-05, double atol = 1e-08,
                 bool equal_nan = false) const;
  // random (ops/random_more.cpp): in-place fills from the given or the default generator
  Tensor& exponential_(double lambd = 1, Generator* generator = nullptr);
  Tensor& geometric_(double p, Generator* generator = nullptr);
  Tensor& cauchy_(double median = 0, double sigma = 1, Generator* generator = nullptr);
  Tensor& log_normal_(double mean = 1, double std = 2, Generator* generator = nullptr);
  Tensor multinomial(int64_t num_samples, bool replacement = false,
                     Generator* generator = nullptr) const;
  // ---- end of issue 34 elementwise ops ----
  // ---- linear algebra (ops/linalg_products.cpp, ops/linalg_decomp.cpp) ----
  Tensor mv(const Tensor& vec) const;
  Tensor dot(const Tensor& other) const;
  Tensor outer(const Tensor& other) const;
  Tensor addmv(const Tensor& mat, const Tensor& vec, double beta = 1, double alpha = 1) const;
  Tensor baddbmm(const Tensor& batch1, const Tensor& batch2, double beta = 1,
                 double alpha = 1) const;
  Tensor addbmm(const Tensor& batch1, const Tensor& batch2, double beta = 1,
                double alpha = 1) const;
  Tensor kron(const Tensor& other) const;
  Tensor inverse() const;
  Tensor det() const;
  std::tuple<Tensor, Tensor> slogdet() const;  // (sign, logabsdet)
  Tensor logdet() const;
  // ---- end of linear algebra ----

  std::string str() const;  // printed like PyTorch, summarised when large
  std::string shape_str() const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Prints `t` as PyTorch prints a tensor (the same text as t.str(), see tensor_print.cpp).
std::ostream& operator<<(std::ostream& os, const Tensor& t);
// `s` as "[2, 3, 4]", the form error messages use for shapes.
std::string shape_str(const Shape& s);

// Contiguous strides for `sizes` in `format` (channels_last needs 4 dims, NHWC order; 5 dims
// NDHWC).
Shape contiguous_strides(const Shape& sizes, MemoryFormat format = MemoryFormat::contiguous);

// The element limit: a tensor holds at most 2^48 elements (2^51 bytes at 8 bytes an element, more
// than any machine's memory), so that element counts, byte counts, strides and offsets computed
// from valid sizes never overflow int64. The product of the sizes, with 0 counted as 1 (which the
// contiguous strides of an empty tensor need), must stay within it.
constexpr int64_t kMaxNumel = int64_t(1) << 48;
// The number of elements of `s`; throws bad_param naming `op` and the sizes when a size is
// negative or the count exceeds kMaxNumel.
int64_t checked_numel(const Shape& s, const char* op);
int64_t shape_numel(const Shape& s);  // checked_numel(s, "numel")
// Wraps a possibly negative dim into [0, ndim); throws bad_param naming `op`.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op = "");

// An uninitialised tensor (the allocation of every factory and op output).
Tensor empty(const Shape& sizes, DType dtype = DType::f32, Device device = Device::cpu(),
             MemoryFormat format = MemoryFormat::contiguous);
// Same shape, dtype, device and (for `preserve`) the memory format of `like`, without autograd.
Tensor empty_like(const Tensor& like, MemoryFormat format = MemoryFormat::preserve);
// A view of `base`'s storage with new sizes/strides/offset; no autograd (ops/views.cpp wraps it).
Tensor make_view(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset);

// Dense layouts: the elements fill one block of memory in some order of the dims (contiguous,
// channels_last, any permutation of them). Ops that only need "rows" of memory (softmax,
// cross-entropy, dropout) work on such tensors in place of a transpose copy.
// True when `t`'s elements occupy exactly numel consecutive elements from its offset, in some
// order of its dims (size-1 dims are ignored). Empty tensors are dense.
bool is_dense_layout(const Tensor& t);
// True when `a` and `b` have the same sizes and the same strides on every dim of size > 1.
bool same_layout(const Tensor& a, const Tensor& b);
// An uninitialised tensor with the sizes and strides of the dense tensor `like` (its own storage,
// offset 0) and dtype `dtype`.
Tensor empty_with_layout_of(const Tensor& like, DType dtype);

}  // namespace ember

#include "ember/tensor/accessor.h"  // IWYU pragma: export (Tensor::accessor's definition)
