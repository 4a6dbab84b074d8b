// to_layout_of, nchw_to_nhwc / nhwc_to_nchw and try_fast_layout_copy (see ops/layout.h).
#include "ember/ops/layout.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "ember/autograd/graph/graph.h"
#include "ember/ops/ops.h"

namespace ember {

Tensor to_layout_of(const Tensor& t, const Tensor& like) {
  if (same_layout(t, like) && t.dtype() == like.dtype()) return t;
  autograd::NoGradGuard no_grad;
  Tensor out = empty_with_layout_of(like, like.dtype());
  out.copy_(t);
  return out;
}

namespace {

// [N, C, spatial...] as (batch, channels, spatial size).
struct LayoutDims {
  int64_t batch, channels, spatial;
};
LayoutDims layout_dims(const Tensor& t) {
  int64_t spatial = 1;
  for (int64_t d = 2; d < t.dim(); ++d) spatial *= t.size(d);
  return {t.size(0), t.size(1), spatial};
}

Tensor convert_format(const Tensor& x, MemoryFormat to, const char* op) {
  EMBER_CHECK(x.defined(), op, ": the input is an undefined tensor");
  EMBER_CHECK(x.dim() == 4 || x.dim() == 5, op, ": expected a 4-D [N, C, H, W] or 5-D ",
              "[N, C, D, H, W] tensor, got shape ", x.shape_str());
  if (x.is_contiguous(to)) return x;
  Tensor out = empty(x.sizes(), x.dtype(), x.device(), to);
  {
    autograd::NoGradGuard no_grad;
    if (!try_fast_layout_copy(out, x)) out.copy_(x);
  }
  if (autograd::needs_grad({&x})) {
    // The values are the same in logical order: the gradient passes through unchanged.
    autograd::record_backward(op, {x}, {&out}, [](const std::vector<Tensor>& g, const auto&) {
      return std::vector<Tensor>{g[0]};
    });
  }
  return out;
}

}  // namespace

Tensor nchw_to_nhwc(const Tensor& x) {
  return convert_format(x, MemoryFormat::channels_last, "nchw_to_nhwc");
}
Tensor nhwc_to_nchw(const Tensor& x) {
  return convert_format(x, MemoryFormat::contiguous, "nhwc_to_nchw");
}

bool try_fast_layout_copy(const Tensor& dst, const Tensor& src) {
  if (!dst.defined() || !src.defined()) return false;
  if (dst.device() != src.device() || dst.dtype() != src.dtype() || dst.sizes() != src.sizes())
    return false;
  if ((dst.dim() != 4 && dst.dim() != 5) || dst.numel() == 0) return false;
  const bool src_nchw = src.is_contiguous(MemoryFormat::contiguous);
  const bool src_nhwc = src.is_contiguous(MemoryFormat::channels_last);
  const bool dst_nchw = dst.is_contiguous(MemoryFormat::contiguous);
  const bool dst_nhwc = dst.is_contiguous(MemoryFormat::channels_last);
  // Both layouts at once (C == 1 or H*W == 1) is a plain copy: not this path's job.
  const bool to_nhwc = src_nchw && !src_nhwc && dst_nhwc && !dst_nchw;
  const bool to_nchw = src_nhwc && !src_nchw && dst_nchw && !dst_nhwc;
  if (!to_nhwc && !to_nchw) return false;
  if (!layout_transpose_kernel().has(dst.device().type, dst.dtype())) return false;
  const LayoutDims d = layout_dims(dst);
  layout_transpose_kernel().get(dst.device().type, dst.dtype())(
      dst, src, d.batch, to_nhwc ? d.channels : d.spatial, to_nhwc ? d.spatial : d.channels);
  return true;
}

}  // namespace ember
