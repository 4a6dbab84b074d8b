// dropout: argument checks, drawing the Philox parameters from the generator, the saved mask and
// the backward node. The kernel tables are kernel_interface/dropout.h.
#include "ember/ops/dropout.h"

#include "ember/autograd/graph/graph.h"
#include "ember/ops/ops.h"

namespace ember {

namespace {

double keep_scale(double p) { return p >= 1 ? 0.0 : 1.0 / (1.0 - p); }

Tensor dropout_backward(const Tensor& grad_y, const Tensor& mask, double scale, DType dtype) {
  Tensor g = grad_y.dtype() == dtype ? grad_y : grad_y.to(dtype);
  g = g.contiguous();
  Tensor grad_x = empty(mask.sizes(), dtype, mask.device());
  if (grad_x.numel() > 0)
    dropout_backward_kernel().get(mask.device().type, dtype)(grad_x, g, mask, scale);
  return grad_x;
}

}  // namespace

DropoutResult dropout_with_mask(const Tensor& x, double p, bool training, Generator* gen) {
  EMBER_CHECK(x.defined(), "dropout: the input is an undefined tensor");
  EMBER_CHECK(p >= 0 && p <= 1, "dropout: p must be in [0, 1], got ", p);
  EMBER_CHECK_STATUS(is_floating(x.dtype()), not_supported, "dropout: input has dtype ",
                     dtype_name(x.dtype()), "; dropout needs a floating dtype");
  if (!training || p == 0 || x.numel() == 0) return {x, Tensor()};
  Generator& g = gen != nullptr ? *gen : default_generator(x.device());
  EMBER_CHECK(g.device().type == x.device().type, "dropout: a generator for ", g.device().str(),
              " cannot draw the mask of a tensor on ", x.device().str());
  DropoutArgs a;
  a.p = p;
  a.random = RandomParams{g.reserve(4)};  // every subsequence (4 elements) uses its first 4 values
  a.random.kind = RandomKind::bernoulli;
  a.random.a = 1.0 - p;
  a.input = x.detach().contiguous();
  a.output = empty(x.sizes(), x.dtype(), x.device());
  a.mask = empty(x.sizes(), DType::boolean, x.device());
  dropout_kernel().get(x.device().type, x.dtype())(a);

  Tensor out = a.output;
  if (autograd::needs_grad({&x})) {
    // Saved with its version: the mask is handed to the caller too, who must not modify it.
    const autograd::SavedTensor saved_mask(a.mask, "dropout");
    const double scale = keep_scale(p);
    const DType dtype = x.dtype();
    autograd::record_backward(
        "dropout", {x}, {&out},
        [saved_mask, scale, dtype](const std::vector<Tensor>& grads, const auto&) {
          if (autograd::grad_enabled()) {
            // A create_graph backward: grad * mask * scale is linear in grad, in differentiable
            // ops.
            Tensor g = grads[0].dtype() == dtype ? grads[0] : grads[0].to(dtype);
            return std::vector<Tensor>{mul(mul(g, saved_mask.unpack().to(dtype)), scale)};
          }
          return std::vector<Tensor>{dropout_backward(grads[0], saved_mask.unpack(), scale, dtype)};
        });
  }
  return {out, a.mask};
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  return dropout_with_mask(x, p, training, gen).output;
}

}  // namespace ember
