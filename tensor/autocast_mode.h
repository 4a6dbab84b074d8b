// The thread-local autocast state (torch.autocast's enabled flag and low-precision dtype) and its
// scope guard. It lives in the core layer so that ops below nn can follow the policy where PyTorch
// applies it at the op itself (the losses: ember::cross_entropy and ember::nll_loss compute in
// float32 under autocast, as ember::nn's do). The casting policy of the nn layers is nn/amp.h.
#pragma once

#include "ember/tensor/dtype.h"

namespace ember {

// True while an AutocastGuard enabled autocast on this thread (torch.is_autocast_enabled()).
bool autocast_enabled();
DType autocast_dtype();  // bf16 or f16; meaningful while autocast_enabled()

// Enables (or, with enabled = false, disables) autocast on this thread for its lifetime, restoring
// the previous state on destruction; scopes nest. dtype must be bf16 or f16.
class AutocastGuard {
 public:
  // Sets autocast on this thread to `enabled` with low-precision dtype `dtype` (default bf16;
  // throws bad_param for a dtype other than bf16 or f16). With enabled = false the dtype is left.
  explicit AutocastGuard(DType dtype = DType::bf16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_enabled_;
  DType prev_dtype_;
};

}  // namespace ember
