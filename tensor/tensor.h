// Tensor: a reference-counted view (sizes, strides, offset, dtype) onto shared Storage, plus the
// autograd state of that view. Copying a Tensor copies the reference, as in libtorch. Metadata
// accessors and the raw view constructor live in tensor.cpp; every op (views included, since they
// have gradients) lives in ops/ and is declared in ops/ops.h.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/tensor/allocator.h"
#include "ember/tensor/device.h"
#include "ember/tensor/dtype.h"

namespace ember {

using Shape = std::vector<int64_t>;
enum class MemoryFormat : uint8_t { contiguous, channels_last, preserve };
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

struct AutogradMeta;  // autograd/autograd.h
namespace autograd {
class Node;  // autograd/graph/node.h
}
namespace indexing {
class TensorIndex;  // ops/indexing.h
}

struct TensorImpl {
  Storage storage;
  Shape sizes;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  std::shared_ptr<AutogradMeta> autograd;  // null until the tensor takes part in autograd
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
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
  // one-element tensor. Backward formulas run without recording (no higher-order gradients).
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
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

  std::string str() const;  // printed like PyTorch, summarised when large
  std::string shape_str() const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);
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
