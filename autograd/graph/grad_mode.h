// Grad mode (thread-local): whether ops record backward nodes. NoGradGuard / EnableGradGuard /
// InferenceModeGuard switch it for a scope; AnomalyModeGuard makes every op check its outputs and
// every backward node its gradients for NaN/Inf and throw naming the op (slow: it syncs).
#pragma once

namespace ember::autograd {

bool grad_enabled();
void set_grad_enabled(bool enabled);
bool anomaly_enabled();
void set_anomaly_enabled(bool enabled);

class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

// Like NoGradGuard; tensors made inside never record history. (Ember has no separate inference
// tensor kind: the guard exists so that libtorch-style code reads the same.)
class InferenceModeGuard {
 public:
  InferenceModeGuard();
  ~InferenceModeGuard();
  InferenceModeGuard(const InferenceModeGuard&) = delete;
  InferenceModeGuard& operator=(const InferenceModeGuard&) = delete;

 private:
  bool prev_;
};

class AnomalyModeGuard {
 public:
  explicit AnomalyModeGuard(bool enabled = true);
  ~AnomalyModeGuard();
  AnomalyModeGuard(const AnomalyModeGuard&) = delete;
  AnomalyModeGuard& operator=(const AnomalyModeGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace ember::autograd
