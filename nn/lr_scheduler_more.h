// More learning-rate schedules, as torch.optim.lr_scheduler (PyTorch 2.x semantics and defaults),
// on the closed-form LRScheduler base of nn/lr_scheduler.h (construction applies epoch 0, step()
// advances one epoch; rates go to the device through Optimizer::set_lr, no host sync):
//   ExponentialLR, LambdaLR, MultiplicativeLR, PolynomialLR, ConstantLR,
//   CosineAnnealingWarmRestarts, CyclicLR (triangular, triangular2, exp_range; cycle_momentum),
//   SequentialLR and ChainedScheduler (composites of the others), and ReduceLROnPlateau (driven by
//   a metric, stepped with step(metric)).
// PyTorch's recursive schedules are written here in their closed forms (equal as long as nothing
// else changes the learning rate). State: state_json() / load_state_json(); the lambdas of
// LambdaLR / MultiplicativeLR are code, not state (as in PyTorch, where they are saved only when
// they are callable objects).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ember/nn/lr_scheduler.h"

namespace ember::optim {

// base_lr * gamma^epoch.
class ExponentialLR : public LRScheduler {
 public:
  // gamma >= 0: the multiplicative factor per epoch (required, as in PyTorch).
  ExponentialLR(Optimizer& optimizer, double gamma);
  std::string name() const override { return "ExponentialLR"; }

 protected:
  double compute_lr(int64_t epoch, size_t group) const override;

 private:
  double gamma_;
};

// A function of the epoch giving a factor (LambdaLR, MultiplicativeLR), as PyTorch's lr_lambda.
using LRLambda = std::function<double(int64_t epoch)>;

// base_lr * lambda(epoch); one lambda for every group, or one per group.
class LambdaLR : public LRScheduler {
 public:
  // One lambda per group, or one lambda (for every group).
  LambdaLR(Optimizer& optimizer, std::vector<LRLambda> lr_lambdas);
  LambdaLR(Optimizer& optimizer, LRLambda lr_lambda)
      : LambdaLR(optimizer, std::vector<LRLambda>{std::move(lr_lambda)}) {}
  std::string name() const override { return "LambdaLR"; }

 protected:
  double compute_lr(int64_t epoch, size_t group) const override;

 private:
  std::vector<LRLambda> lambdas_;
};

// PyTorch's lr *= lambda(epoch) each epoch after the first: base_lr * prod_{e=1..epoch} lambda(e).
class MultiplicativeLR : public LRScheduler {
 public:
  // One lambda per group, or one lambda (for every group).
  MultiplicativeLR(Optimizer& optimizer, std::vector<LRLambda> lr_lambdas);
  MultiplicativeLR(Optimizer& optimizer, LRLambda lr_lambda)
      : MultiplicativeLR(optimizer, std::vector<LRLambda>{std::move(lr_lambda)}) {}
  std::string name() const override { return "MultiplicativeLR"; }

 protected:
  double compute_lr(int64_t epoch, size_t group) const override;

 private:
  std::vector<LRLambda> lambdas_;
};

// base_lr * (1 - min(epoch, total_iters) / total_iters)^power.
class PolynomialLR : public LRScheduler {
 public:
  // total_iters > 0: the epochs of the decay; power: the polynomial's degree. Defaults as PyTorch.
  PolynomialLR(Optimizer& optimizer, int64_t total_iters = 5, double power = 1.0);
  std::string name() const override { return "PolynomialLR"; }

 protected:
  double compute_lr(int64_t epoch, size_t group) const override;

 private:
  int64_t total_iters_;
  double power_;
};

// base_lr * factor before total_iters, base_lr from then on. 0 <= factor <= 1.
class ConstantLR : public LRScheduler {
 public:
  // Defaults as PyTorch: factor 1/3 for the first 5 epochs.
  ConstantLR(Optimizer& optimizer, double factor = 1.0 / 3, int64_t total_iters = 5);
  std::string name() const override { return "ConstantLR"; }

 protected:
  double compute_lr(int64_t epoch, size_t group) const override;

 private:
  double factor_;
  int64_t total_iters_;
};

// SGDR: cosine from base_lr to eta_min over T_i epochs, restarting; T_0 first, each next period
// T_mult times longer: eta_min + (base_lr - eta_min) * (1 + cos(pi * T_cur / T_i)) / 2.
class CosineAnnealingWarmRestarts : public LRScheduler {
 public:
  // T_0 > 0: the first period in epochs; T_mult >= 1: the growth of each next period; eta_min:
  // the minimum rate.
  CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t T_0, int64_t T_mult = 1,
                              double eta_min = 0);
  std::string name() const override { return "CosineAnnealingWarmRestarts"; }

 protected:
  double compute_lr(int64_t epoch, size_t group) const override;

 private:
  int64_t t_0_, t_mult_;
  double eta_min_;
};

// CyclicLR's amplitude policy, as PyTorch's mode strings (see CyclicLR).
enum class CyclicMode { triangular, triangular2, exp_range };

// The options of CyclicLR, as torch.optim.lr_scheduler.CyclicLR's arguments (with their defaults).
struct CyclicLROptions {
  EMBER_ARG(int64_t, step_size_up) = 2000;  // iterations of the rising half, > 0
  EMBER_ARG(int64_t, step_size_down) = 0;   // 0: equal to step_size_up (PyTorch's None)
  EMBER_ARG(CyclicMode, mode) = CyclicMode::triangular;  // how the amplitude changes per cycle
  EMBER_ARG(double, gamma) = 1.0;  // exp_range: the amplitude scales by gamma^iteration
  // Whether momentum cycles inversely to the rate (needs an optimizer with momentum / beta1).
  EMBER_ARG(bool, cycle_momentum) = true;
  EMBER_ARG(double, base_momentum) = 0.8;  // the momentum at the peak rate
  EMBER_ARG(double, max_momentum) = 0.9;   // the momentum at base_lr
};

// torch.optim.lr_scheduler.CyclicLR, stepped per batch: the rate cycles between base_lr and
// max_lr (up over step_size_up iterations, down over step_size_down), the amplitude kept
// (triangular), halved each cycle (triangular2) or scaled by gamma^iteration (exp_range); with
// cycle_momentum the momentum (SGD momentum / Adam-family beta1) moves the opposite way between
// max_momentum and base_momentum. Sets the groups' rates to base_lr at construction, as PyTorch.
class CyclicLR : public LRScheduler {
 public:
  // The cycle's lower and upper rates: one for every group, or one per group.
  CyclicLR(Optimizer& optimizer, std::vector<double> base_lrs, std::vector<double> max_lrs,
           const CyclicLROptions& options = {});
  CyclicLR(Optimizer& optimizer, double base_lr, double max_lr, const CyclicLROptions& options = {})
      : CyclicLR(optimizer, std::vector<double>{base_lr}, std::vector<double>{max_lr}, options) {}
  std::string name() const override { return "CyclicLR"; }

 protected:
  double compute_lr(int64_t epoch, size_t group) const override;
  std::optional<double> compute_momentum(int64_t epoch, size_t group) const override;

 private:
  // (scale_factor, scale_fn(...)) at `epoch`: the position in the cycle and the amplitude scale.
  std::pair<double, double> position(int64_t epoch) const;

  std::vector<double> max_lrs_;
  CyclicLROptions options_;
  double total_size_, step_ratio_;
};

// Runs schedulers[0] until milestones[0], then schedulers[1] (from its epoch 0) until
// milestones[1], ... as PyTorch's SequentialLR. The children must be made on the same optimizer,
// in order, just before this (their base rates become the first one's, the optimizer's rates
// before any of them ran, as PyTorch's initial_lr does); stepping them directly afterwards is up
// to the caller (don't).
class SequentialLR : public LRScheduler {
 public:
  // milestones: increasing epochs, one fewer than the schedulers (as PyTorch checks).
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  std::string name() const override { return "SequentialLR"; }
  std::string state_json() const override;
  void load_state_json(const std::string& json) override;

 protected:
  double compute_lr(int64_t epoch, size_t group) const override;
  std::optional<double> compute_momentum(int64_t epoch, size_t group) const override;

 private:
  std::pair<const LRScheduler*, int64_t> active(int64_t epoch) const;

  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

// Steps every scheduler each epoch, as PyTorch's ChainedScheduler: the rate is base_lr times the
// product of the children's factors (child rate / base rate), which is what PyTorch's chained
// recursive forms give for the multiplicative schedules (ConstantLR, LinearLR, ExponentialLR,
// StepLR, MultiStepLR, MultiplicativeLR, PolynomialLR, LambdaLR as the first). Momentum: the last
// child that sets one. Children as for SequentialLR.
class ChainedScheduler : public LRScheduler {
 public:
  // The children, at least one, all on `optimizer`.
  ChainedScheduler(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers);
  std::string name() const override { return "ChainedScheduler"; }
  std::string state_json() const override;
  void load_state_json(const std::string& json) override;

 protected:
  double compute_lr(int64_t epoch, size_t group) const override;
  std::optional<double> compute_momentum(int64_t epoch, size_t group) const override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
};

// Whether ReduceLROnPlateau's metric improves by decreasing (a loss) or increasing (an accuracy).
enum class PlateauMode { min, max };
// Whether the improvement threshold is relative to the best value (rel) or absolute (abs).
enum class ThresholdMode { rel, abs };

// The options of ReduceLROnPlateau, as PyTorch's arguments (with their defaults).
struct ReduceLROnPlateauOptions {
  EMBER_ARG(PlateauMode, mode) = PlateauMode::min;  // min: lower is better; max: higher
  EMBER_ARG(double, factor) = 0.1;                  // the rate's multiplier on a plateau, < 1
  EMBER_ARG(int64_t, patience) = 10;                // bad epochs tolerated before reducing
  EMBER_ARG(double, threshold) = 1e-4;              // the least change counted as improvement
  EMBER_ARG(ThresholdMode, threshold_mode) = ThresholdMode::rel;  // how threshold applies
  EMBER_ARG(int64_t, cooldown) = 0;  // epochs after a reduction before bad epochs count
  EMBER_ARG(std::vector<double>, min_lr) = {0.0};  // one for every group, or one per group
  EMBER_ARG(double, eps) = 1e-8;                   // a reduction smaller than this is skipped
};

// torch.optim.lr_scheduler.ReduceLROnPlateau: after more than `patience` epochs without the
// metric improving (by threshold, relative or absolute), each group's rate becomes
// max(lr * factor, min_lr) (skipped when that changes it by eps or less), then `cooldown` epochs
// pass before bad epochs count again. Reads the metric on the host: step(metric) between steps.
class ReduceLROnPlateau {
 public:
  // Checks the options (factor < 1, min_lr one or one per group, non-negative counts).
  explicit ReduceLROnPlateau(Optimizer& optimizer, const ReduceLROnPlateauOptions& options = {});
  // Records one epoch's metric (e.g. the validation loss) and reduces the rates on a plateau.
  void step(double metric);
  // The groups' current rates.
  std::vector<double> get_last_lr() const;
  // Epochs stepped so far.
  int64_t last_epoch() const { return last_epoch_; }
  // The best metric seen (+inf for min, -inf for max before the first step).
  double best() const { return best_; }
  // Consecutive epochs without improvement.
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  // Epochs of cooldown left.
  int64_t cooldown_counter() const { return cooldown_counter_; }
  // "ReduceLROnPlateau", the type recorded in the state JSON.
  std::string name() const { return "ReduceLROnPlateau"; }
  // {"type", "last_epoch", "best", "num_bad_epochs", "cooldown_counter"}.
  std::string state_json() const;
  void load_state_json(const std::string& json);

 private:
  bool is_better(double current) const;

  Optimizer& optimizer_;
  ReduceLROnPlateauOptions options_;
  std::vector<double> min_lrs_;
  double best_;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
};

}  // namespace ember::optim
