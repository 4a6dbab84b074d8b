// The casting policy helpers of nn/amp.h (the autocast state itself: tensor/autocast_mode.h).
#include "ember/nn/amp.h"

namespace ember::nn {

namespace {

// Autocast casts only the dtypes mixed precision trades between; float64 is an explicit request
// for precision and integers are data (indices, labels).
bool eligible(const Tensor& t) {
  if (!t.defined()) return false;
  DType d = t.dtype();
  return d == DType::f32 || d == DType::f16 || d == DType::bf16;
}

int precision_rank(DType d) { return d == DType::f32 ? 1 : 0; }
}  // namespace

Tensor autocast_input(const Tensor& t, OpClass cls) {
  if (!autocast_enabled() || !eligible(t)) return t;
  switch (cls) {
    case OpClass::low_precision:
      return t.dtype() == autocast_dtype() ? t : cast(t, autocast_dtype());
    case OpClass::fp32:
      return t.dtype() == DType::f32 ? t : cast(t, DType::f32);
    case OpClass::promote:
      return t;
  }
  return t;
}

std::vector<Tensor> autocast_inputs(const std::vector<Tensor>& ts, OpClass cls) {
  if (!autocast_enabled()) return ts;
  std::vector<Tensor> out;
  out.reserve(ts.size());
  if (cls != OpClass::promote) {
    for (const Tensor& t : ts) out.push_back(autocast_input(t, cls));
    return out;
  }
  // Promote: the widest of the eligible dtypes; float16 and bfloat16 together widen to float32.
  bool any = false, mixed_low = false;
  DType widest = DType::bf16;
  for (const Tensor& t : ts) {
    if (!eligible(t)) continue;
    if (!any) {
      widest = t.dtype();
      any = true;
    } else if (precision_rank(t.dtype()) > precision_rank(widest)) {
      widest = t.dtype();
    } else if (precision_rank(t.dtype()) == 0 && precision_rank(widest) == 0 &&
               t.dtype() != widest) {
      mixed_low = true;
    }
  }
  if (mixed_low) widest = DType::f32;
  for (const Tensor& t : ts)
    out.push_back(eligible(t) && t.dtype() != widest ? cast(t, widest) : t);
  return out;
}

}  // namespace ember::nn
