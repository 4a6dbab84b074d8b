// Tensor metadata, storage creation, raw views, dense-layout helpers and printing.
#include "ember/tensor/tensor.h"

#include <algorithm>
#include <cmath>
#include <ostream>
#include <utility>
#include <vector>

namespace ember {

const char* memory_format_name(MemoryFormat f) {
  switch (f) {
    case MemoryFormat::contiguous:
      return "contiguous";
    case MemoryFormat::channels_last:
      return "channels_last";
    case MemoryFormat::preserve:
      return "preserve";
  }
  return "?";
}

Storage new_storage(size_t nbytes, Device device) {
  return std::make_shared<StorageImpl>(allocate(nbytes, device), nbytes, device);
}

int64_t checked_numel(const Shape& s, const char* op) {
  int64_t n = 1, clamped = 1;
  for (int64_t d : s) {
    if (d < 0) [[unlikely]]
      EMBER_THROW(bad_param, op, ": negative size ", d, " in ", shape_str(s),
                  "; sizes must be >= 0");
    if (__builtin_mul_overflow(clamped, std::max<int64_t>(d, 1), &clamped) || clamped > kMaxNumel)
        [[unlikely]]
      EMBER_THROW(bad_param, op, ": the sizes ", shape_str(s),
                  " exceed Ember's limit of 2^48 "
                  "elements per tensor (kMaxNumel, counting a size of 0 as 1); check the sizes "
                  "for a wrong or overflowed value");
    n *= d;  // cannot overflow: n <= clamped <= kMaxNumel
  }
  return n;
}

int64_t shape_numel(const Shape& s) { return checked_numel(s, "numel"); }

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t n = ndim == 0 ? 1 : ndim;  // a 0-d tensor accepts dim 0 / -1 like PyTorch
  EMBER_CHECK(dim >= -n && dim < n, op, ": dimension ", dim, " is out of range for a tensor with ",
              ndim, " dims (expected in [", -n, ", ", n - 1, "])");
  return dim < 0 ? dim + n : dim;
}

Shape contiguous_strides(const Shape& sizes, MemoryFormat format) {
  checked_numel(sizes, "contiguous_strides");  // the strides below then cannot overflow
  const int64_t nd = int64_t(sizes.size());
  Shape st(sizes.size());
  if (format == MemoryFormat::channels_last && (nd == 4 || nd == 5)) {
    // Order of dims from innermost: C, W, H, (D), N.
    std::vector<int64_t> order;
    order.push_back(1);
    for (int64_t d = nd - 1; d >= 2; --d) order.push_back(d);
    order.push_back(0);
    int64_t s = 1;
    for (int64_t d : order) {
      st[d] = s;
      s *= std::max<int64_t>(sizes[d], 1);
    }
    return st;
  }
  EMBER_CHECK(format != MemoryFormat::channels_last,
              "channels_last needs a 4-D (NCHW) or 5-D "
              "(NCDHW) tensor, got sizes ",
              shape_str(sizes));
  int64_t s = 1;
  for (int64_t d = nd - 1; d >= 0; --d) {
    st[d] = s;
    s *= std::max<int64_t>(sizes[d], 1);
  }
  return st;
}

Tensor empty(const Shape& sizes, DType dtype, Device device, MemoryFormat format) {
  const int64_t n = checked_numel(sizes, "empty");  // also bounds the strides and nbytes
  if (format == MemoryFormat::preserve) format = MemoryFormat::contiguous;
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = new_storage(size_t(n) * element_size(dtype), device);
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes, format);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor empty_like(const Tensor& like, MemoryFormat format) {
  if (format == MemoryFormat::preserve) format = like.suggest_memory_format();
  return empty(like.sizes(), like.dtype(), like.device(), format);
}

Tensor make_view(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset) {
  EMBER_INTERNAL_ASSERT(sizes.size() == strides.size());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->sizes = sizes;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

// ---- metadata ----
#define EMBER_REQUIRE_DEFINED(what) \
  EMBER_CHECK(impl_ != nullptr, what, ": the tensor is undefined (default-constructed)")

const Shape& Tensor::sizes() const {
  EMBER_REQUIRE_DEFINED("sizes");
  return impl_->sizes;
}
const Shape& Tensor::strides() const {
  EMBER_REQUIRE_DEFINED("strides");
  return impl_->strides;
}
int64_t Tensor::dim() const { return int64_t(sizes().size()); }
int64_t Tensor::size(int64_t d) const { return sizes()[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }
int64_t Tensor::numel() const { return shape_numel(sizes()); }
int64_t Tensor::offset() const { return impl_->offset; }
DType Tensor::dtype() const {
  EMBER_REQUIRE_DEFINED("dtype");
  return impl_->dtype;
}
Device Tensor::device() const {
  EMBER_REQUIRE_DEFINED("device");
  return impl_->storage->device;
}
const Storage& Tensor::storage() const {
  EMBER_REQUIRE_DEFINED("storage");
  return impl_->storage;
}
void* Tensor::data_ptr() const {
  EMBER_REQUIRE_DEFINED("data_ptr");
  return static_cast<char*>(impl_->storage->data.ptr) + impl_->offset * int64_t(element_size());
}
uint64_t Tensor::version() const { return storage()->version.load(std::memory_order_relaxed); }
void Tensor::bump_version() const { storage()->version.fetch_add(1, std::memory_order_relaxed); }

bool Tensor::is_contiguous(MemoryFormat format) const {
  const Shape& sz = sizes();
  const Shape& st = strides();
  if (format == MemoryFormat::preserve) format = suggest_memory_format();
  if (format == MemoryFormat::channels_last && !(sz.size() == 4 || sz.size() == 5)) return false;
  Shape expect = contiguous_strides(sz, format);
  for (size_t i = 0; i < sz.size(); ++i)
    if (sz[i] != 1 && st[i] != expect[i]) return false;
  return true;
}

MemoryFormat Tensor::suggest_memory_format() const {
  const int64_t nd = dim();
  if ((nd == 4 || nd == 5) && !is_contiguous(MemoryFormat::contiguous) &&
      is_contiguous(MemoryFormat::channels_last))
    return MemoryFormat::channels_last;
  // A 4-D tensor with C as the smallest stride and C > 1 reads as channels_last too.
  if ((nd == 4 || nd == 5) && size(1) > 1 && stride(1) == 1 &&
      is_contiguous(MemoryFormat::channels_last))
    return MemoryFormat::channels_last;
  return MemoryFormat::contiguous;
}

std::string Tensor::shape_str() const { return ::ember::shape_str(sizes()); }

void Tensor::set_data(const Tensor& other) {
  EMBER_CHECK(defined() && other.defined(), "set_data: undefined tensor");
  impl_->storage = other.impl()->storage;
  impl_->sizes = other.impl()->sizes;
  impl_->strides = other.impl()->strides;
  impl_->offset = other.impl()->offset;
  impl_->dtype = other.impl()->dtype;
}

bool is_dense_layout(const Tensor& t) {
  if (t.numel() == 0) return true;
  std::vector<std::pair<int64_t, int64_t>> stride_size;  // dims of size > 1
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) != 1) stride_size.emplace_back(t.stride(d), t.size(d));
  std::sort(stride_size.begin(), stride_size.end());
  int64_t expect = 1;
  for (const auto& [stride, size] : stride_size) {
    if (stride != expect) return false;
    expect *= size;
  }
  return true;
}

bool same_layout(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (a.size(d) != 1 && a.stride(d) != b.stride(d)) return false;
  return true;
}

Tensor empty_with_layout_of(const Tensor& like, DType dtype) {
  EMBER_INTERNAL_ASSERT(is_dense_layout(like), "empty_with_layout_of: ", like.shape_str(),
                        " is not dense");
  Tensor base = empty({like.numel()}, dtype, like.device());
  // Size-1 dims keep like's strides: they are never multiplied by a non-zero index.
  return make_view(base, like.sizes(), like.strides(), 0);
}

}  // namespace ember
