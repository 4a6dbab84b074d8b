// Copies and conversions: copy_ (any dtype, any device, broadcasting), fill_, clone, contiguous,
// to(device / dtype / memory format), detach, item and to_vector. Differentiable where it makes
// sense (clone, contiguous, to between floating dtypes and devices).
#include <cmath>
#include <cstring>

#include "ember/autograd/graph/graph.h"
#include "ember/kernel_interface/elementwise.h"
#include "ember/ops/layout.h"
#include "ember/ops/ops.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "ember/tensor/runtime/memcpy.h"

namespace ember {

namespace {

// Same-device copy with dtype conversion and broadcasting of src to dst's shape.
void copy_same_device(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (try_fast_layout_copy(dst, src)) return;  // NCHW <-> NHWC through a tiled transpose
  Tensor s = src;
  ElementwiseIter it = make_elementwise_iter("copy_", dst, {s});
  copy_kernel().get(dst.device().type, dst.dtype())(it);
}

// Raw copy (no autograd, no version bump) from src into dst, any devices.
void copy_raw(const Tensor& dst, const Tensor& src) {
  EMBER_CHECK(broadcast_shapes("copy_", {dst.sizes(), src.sizes()}) == dst.sizes(),
              "copy_: source of shape ", src.shape_str(),
              " cannot be broadcast to the destination "
              "shape ",
              dst.shape_str());
  if (dst.device() == src.device()) {
    copy_same_device(dst, src);
    return;
  }
  // Cross-device: move a dense block of the destination's dtype, then place it.
  Tensor s = src.sizes() == dst.sizes() ? src : src.expand(dst.sizes());
  if (src.device().is_cpu()) {  // host -> device
    Tensor host = s;
    if (host.dtype() != dst.dtype() || !host.is_contiguous()) {
      host = empty(dst.sizes(), dst.dtype(), Device::cpu());
      copy_same_device(host, s);
    }
    Stream stream = current_stream(dst.device());
    if (dst.is_contiguous()) {
      memcpy_host_to_device(dst.data_ptr(), host.data_ptr(), dst.nbytes(), stream);
    } else {
      Tensor dev = empty(dst.sizes(), dst.dtype(), dst.device());
      memcpy_host_to_device(dev.data_ptr(), host.data_ptr(), dst.nbytes(), stream);
      copy_same_device(dst, dev);
    }
    // A pageable host source must stay alive until the copy has read it; cudaMemcpyAsync from
    // pageable memory returns only after staging it, so `host` may be freed here.
    return;
  }
  EMBER_CHECK(dst.device().is_cpu(), "copy_: copies between two GPUs (", src.device().str(), " -> ",
              dst.device().str(), ") are not supported yet; go through the CPU");
  Tensor dev = s;
  if (!dev.is_contiguous()) {
    dev = empty(dst.sizes(), s.dtype(), s.device());
    copy_same_device(dev, s);
  }
  Stream stream = current_stream(src.device());
  if (dst.is_contiguous() && dst.dtype() == dev.dtype()) {
    memcpy_device_to_host(dst.data_ptr(), dev.data_ptr(), dst.nbytes(), stream);
  } else {
    Tensor host = empty(dst.sizes(), dev.dtype(), Device::cpu());
    memcpy_device_to_host(host.data_ptr(), dev.data_ptr(), host.nbytes(), stream);
    copy_same_device(dst, host);
  }
}

Tensor copy_to(const Tensor& src, Device device, DType dtype, MemoryFormat format) {
  Tensor out = empty(src.sizes(), dtype, device,
                     format == MemoryFormat::preserve ? src.suggest_memory_format() : format);
  copy_raw(out, src);
  if (autograd::needs_grad({&src}) && is_floating(dtype)) {
    DType in_dtype = src.dtype();
    Device in_device = src.device();
    autograd::record_backward("to", {src}, {&out},
                              [in_dtype, in_device](const auto& g, const auto&) {
                                return std::vector<Tensor>{g[0].to(in_device, in_dtype)};
                              });
  }
  return out;
}

}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  EMBER_CHECK(defined() && src.defined(), "copy_: undefined tensor");
  if (autograd::needs_grad({this, &src})) {
    EMBER_CHECK(!(is_leaf() && requires_grad()),
                "copy_: a leaf tensor that requires grad cannot be "
                "written in place; wrap the update in NoGradGuard");
    Tensor converted = src.to(device(), dtype());
    Tensor expanded = converted.sizes() == sizes() ? converted : converted.expand(sizes());
    copy_raw(*this, expanded);
    bump_version();
    autograd::record_backward("copy_", {*this, expanded}, {this}, [](const auto& g, const auto&) {
      return std::vector<Tensor>{Tensor(), g[0]};
    });
    return *this;
  }
  copy_raw(*this, src);
  bump_version();
  return *this;
}

Tensor& Tensor::fill_(double value) {
  EMBER_CHECK(defined(), "fill_: undefined tensor");
  EMBER_CHECK(!(autograd::grad_enabled() && requires_grad() && is_leaf()),
              "fill_: a leaf tensor that requires grad cannot be written in place; wrap the update "
              "in NoGradGuard");
  if (numel() > 0) {
    ElementwiseIter it = make_elementwise_iter("fill_", *this, {});
    unary_kernel().get(device().type, dtype())(it, UnaryOp::fill, {value, 0});
  }
  bump_version();
  return *this;
}

Tensor Tensor::clone(MemoryFormat format) const {
  return copy_to(*this, device(), dtype(), format);
}

Tensor Tensor::contiguous(MemoryFormat format) const {
  if (is_contiguous(format)) return *this;
  return clone(format);
}

Tensor Tensor::detach() const { return make_view(*this, sizes(), strides(), offset()); }

Tensor Tensor::to(Device device) const { return to(device, dtype()); }
Tensor Tensor::to(DType t) const { return to(device(), t); }
Tensor Tensor::to(Device d, DType t) const {
  if (d == device() && t == dtype()) return *this;
  if (d.is_cuda()) cuda::check_device(d);
  return copy_to(*this, d, t, MemoryFormat::preserve);
}
Tensor Tensor::to(MemoryFormat format) const { return contiguous(format); }

Tensor cast(const Tensor& a, DType t) { return a.to(t); }

std::vector<double> Tensor::to_vector() const {
  EMBER_CHECK(defined(), "to_vector: undefined tensor");
  Tensor host = empty(sizes(), DType::f64, Device::cpu());
  {
    autograd::NoGradGuard ng;
    copy_raw(host, *this);
  }
  const double* p = static_cast<const double*>(host.data_ptr());
  return std::vector<double>(p, p + host.numel());
}

double Tensor::item() const {
  EMBER_CHECK(defined() && numel() == 1,
              "item: the tensor must have exactly one element, but it "
              "has shape ",
              defined() ? shape_str() : std::string("undefined"));
  return to_vector()[0];
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  EMBER_CHECK(a.sizes() == b.sizes(), "allclose: shapes ", a.shape_str(), " and ", b.shape_str(),
              " differ");
  std::vector<double> x = a.to_vector(), y = b.to_vector();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    if (!(std::abs(x[i] - y[i]) <= atol + rtol * std::abs(y[i]))) return false;
  }
  return true;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.sizes() == b.sizes(), "max_abs_diff: shapes ", a.shape_str(), " and ",
              b.shape_str(), " differ");
  std::vector<double> x = a.to_vector(), y = b.to_vector();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

}  // namespace ember
