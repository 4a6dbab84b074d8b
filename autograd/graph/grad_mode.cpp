// Thread-local grad mode and the process-wide anomaly flag, with their scope guards.
#include "ember/autograd/graph/grad_mode.h"

#include <atomic>

namespace ember::autograd {

namespace {
thread_local bool t_grad_enabled = true;
std::atomic<bool> g_anomaly{false};
}  // namespace

bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }
bool anomaly_enabled() { return g_anomaly.load(std::memory_order_relaxed); }
void set_anomaly_enabled(bool enabled) { g_anomaly.store(enabled); }

NoGradGuard::NoGradGuard() : prev_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = prev_; }
EnableGradGuard::EnableGradGuard() : prev_(t_grad_enabled) { t_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { t_grad_enabled = prev_; }
InferenceModeGuard::InferenceModeGuard() : prev_(t_grad_enabled) { t_grad_enabled = false; }
InferenceModeGuard::~InferenceModeGuard() { t_grad_enabled = prev_; }
AnomalyModeGuard::AnomalyModeGuard(bool enabled) : prev_(anomaly_enabled()) {
  set_anomaly_enabled(enabled);
}
AnomalyModeGuard::~AnomalyModeGuard() { set_anomaly_enabled(prev_); }

}  // namespace ember::autograd
