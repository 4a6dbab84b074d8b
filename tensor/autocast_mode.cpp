// The thread-local autocast state of tensor/autocast_mode.h.
#include "ember/tensor/autocast_mode.h"

#include "ember/tensor/error.h"

namespace ember {
namespace {
struct AutocastState {
  bool enabled = false;
  DType dtype = DType::bf16;
};
thread_local AutocastState tls_autocast;
}  // namespace

bool autocast_enabled() { return tls_autocast.enabled; }
DType autocast_dtype() { return tls_autocast.dtype; }

AutocastGuard::AutocastGuard(DType dtype, bool enabled)
    : prev_enabled_(tls_autocast.enabled), prev_dtype_(tls_autocast.dtype) {
  EMBER_CHECK(dtype == DType::bf16 || dtype == DType::f16,
              "AutocastGuard: dtype must be bfloat16 or float16, got ", dtype_name(dtype));
  tls_autocast.enabled = enabled;
  if (enabled) tls_autocast.dtype = dtype;
}

AutocastGuard::~AutocastGuard() {
  tls_autocast.enabled = prev_enabled_;
  tls_autocast.dtype = prev_dtype_;
}

}  // namespace ember
