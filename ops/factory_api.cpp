// The libtorch-style factories: the *_like family with options, linspace, logspace, eye,
// tensor({...}) from nested braced lists, and from_blob over caller-owned memory.
#include <cmath>
#include <cstring>

#include "ember/autograd/graph/graph.h"
#include "ember/ops/ops.h"

namespace ember {

namespace {

// The dtype and device of a *_like factory: from options when given, else from `like`.
TensorOptions like_options(const char* op, const Tensor& like, const TensorOptions& o) {
  EMBER_CHECK(like.defined(), op, ": argument 'like' is an undefined tensor");
  TensorOptions r = o;
  r.dtype = o.has_dtype ? o.dtype : like.dtype();
  r.device = o.has_device ? o.device : like.device();
  r.has_dtype = r.has_device = true;
  // The like tensor's layout unless options ask for another (libtorch's preserve).
  if (o.memory_format == MemoryFormat::contiguous || o.memory_format == MemoryFormat::preserve)
    r.memory_format = like.suggest_memory_format();
  return r;
}

Tensor finish(Tensor t, const TensorOptions& o) {
  if (o.requires_grad) t.set_requires_grad(true);
  return t;
}

}  // namespace

Tensor empty_like(const Tensor& like, const TensorOptions& options) {
  const TensorOptions o = like_options("empty_like", like, options);
  return finish(empty(like.sizes(), o.dtype, o.device, o.memory_format), o);
}
Tensor full_like(const Tensor& like, double value, const TensorOptions& options) {
  const TensorOptions o = like_options("full_like", like, options);
  Tensor t = empty(like.sizes(), o.dtype, o.device, o.memory_format);
  t.fill_(value);
  return finish(t, o);
}
Tensor zeros_like(const Tensor& like, const TensorOptions& options) {
  return full_like(like, 0.0, options);
}
Tensor ones_like(const Tensor& like, const TensorOptions& options) {
  return full_like(like, 1.0, options);
}
Tensor rand_like(const Tensor& like, const TensorOptions& options) {
  return rand(like.sizes(), like_options("rand_like", like, options));
}
Tensor randn_like(const Tensor& like, const TensorOptions& options) {
  return randn(like.sizes(), like_options("randn_like", like, options));
}
Tensor randint_like(const Tensor& like, int64_t high, const TensorOptions& options) {
  return randint_like(like, 0, high, options);
}
Tensor randint_like(const Tensor& like, int64_t low, int64_t high, const TensorOptions& options) {
  const TensorOptions o = like_options("randint_like", like, options);
  return finish(randint(low, high, like.sizes(), o), o);
}

Tensor linspace(double start, double end, int64_t steps, const TensorOptions& o) {
  EMBER_CHECK(steps >= 0, "linspace: steps must be non-negative, got ", steps);
  EMBER_CHECK(std::isfinite(start) && std::isfinite(end), "linspace: start (", start, ") and end (",
              end, ") must be finite");
  checked_numel({steps}, "linspace");
  Tensor v = empty({steps}, DType::f64, Device::cpu());
  double* p = static_cast<double*>(v.data_ptr());
  const double step = steps > 1 ? (end - start) / double(steps - 1) : 0.0;
  // From both ends, as PyTorch, so that the last value is exactly `end`.
  const int64_t half = steps == 1 ? 1 : steps / 2;
  for (int64_t i = 0; i < steps; ++i)
    p[i] = i < half ? start + step * double(i) : end - step * double(steps - 1 - i);
  return from_data(p, DType::f64, {steps}, o);
}

Tensor logspace(double start, double end, int64_t steps, double base, const TensorOptions& o) {
  Tensor exponents = linspace(start, end, steps, DType::f64);
  double* p = static_cast<double*>(exponents.data_ptr());
  for (int64_t i = 0; i < steps; ++i) p[i] = std::pow(base, p[i]);
  return from_data(p, DType::f64, {steps}, o);
}

Tensor eye(int64_t n, const TensorOptions& o) { return eye(n, n, o); }
Tensor eye(int64_t n, int64_t m, const TensorOptions& o) {
  EMBER_CHECK(n >= 0 && m >= 0, "eye: n and m must be non-negative, got ", n, " and ", m);
  TensorOptions plain = o;
  plain.requires_grad = false;
  Tensor t = zeros({n, m}, plain);
  const int64_t diag = std::min(n, m);
  if (diag > 0) make_view(t, {diag}, {t.stride(0) + t.stride(1)}, t.offset()).fill_(1.0);
  return finish(t, o);
}

namespace detail {

void literal_list_size(Shape& sizes, size_t depth, size_t size) {
  if (sizes.size() == depth) {
    sizes.push_back(int64_t(size));
    return;
  }
  EMBER_CHECK(sizes[depth] == int64_t(size),
              "tensor: the nested lists are not rectangular: a list ", "at depth ", depth, " has ",
              size, " elements but the first one there has ", sizes[depth],
              "; give every list at one depth the same length");
}

Tensor tensor_from_literal(const void* values, DType values_dtype, const Shape& sizes,
                           DType default_dtype, const TensorOptions& options) {
  TensorOptions o = options;
  if (!o.has_dtype) o.dtype = default_dtype;
  o.requires_grad = false;
  return finish(from_data(values, values_dtype, sizes, o), options);
}

}  // namespace detail

Tensor from_blob(void* data, const Shape& sizes, const Shape& strides, const BlobDeleter& deleter,
                 const TensorOptions& o) {
  const int64_t n = checked_numel(sizes, "from_blob");
  EMBER_CHECK(strides.size() == sizes.size(), "from_blob: strides ", shape_str(strides),
              " do not match sizes ", shape_str(sizes), " (one stride per dim)");
  EMBER_CHECK(data != nullptr || n == 0, "from_blob: data is null for a tensor of shape ",
              shape_str(sizes));
  int64_t extent = 0;  // the offset of the last element, in elements
  for (size_t d = 0; d < sizes.size(); ++d) {
    EMBER_CHECK(strides[d] >= 0, "from_blob: negative stride in ", shape_str(strides));
    if (sizes[d] > 0) extent += (sizes[d] - 1) * strides[d];
  }
  const size_t nbytes = n == 0 ? 0 : size_t(extent + 1) * element_size(o.dtype);
  // The Storage never frees the memory itself (no DataPtr deleter); a given deleter runs when the
  // last tensor on the storage goes.
  auto* impl = new StorageImpl(DataPtr{data, nullptr}, nbytes, o.device);
  Storage storage = deleter ? Storage(impl,
                                      [deleter](StorageImpl* s) {
                                        void* p = s->data.ptr;
                                        delete s;
                                        deleter(p);
                                      })
                            : Storage(impl);
  auto t = std::make_shared<TensorImpl>();
  t->storage = std::move(storage);
  t->sizes = sizes;
  t->strides = strides;
  t->dtype = o.dtype;
  return finish(Tensor(std::move(t)), o);
}
Tensor from_blob(void* data, const Shape& sizes, const BlobDeleter& deleter,
                 const TensorOptions& o) {
  return from_blob(data, sizes, contiguous_strides(sizes), deleter, o);
}
Tensor from_blob(void* data, const Shape& sizes, const Shape& strides, const TensorOptions& o) {
  return from_blob(data, sizes, strides, BlobDeleter(), o);
}
Tensor from_blob(void* data, const Shape& sizes, const TensorOptions& o) {
  return from_blob(data, sizes, contiguous_strides(sizes), BlobDeleter(), o);
}

}  // namespace ember
