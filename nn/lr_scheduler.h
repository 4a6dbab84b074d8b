// Learning-rate schedules, as torch.optim.lr_scheduler: StepLR, MultiStepLR, CosineAnnealingLR,
// LinearLR (linear warm-up), OneCycleLR, and WarmupCosineLR (linear warm-up then cosine decay in
// one scheduler, what SequentialLR([LinearLR, CosineAnnealingLR]) gives in PyTorch). More
// (ExponentialLR, LambdaLR, CyclicLR, SequentialLR, ReduceLROnPlateau, ...) in
// nn/lr_scheduler_more.h.
//
// Each scheduler computes its rates in closed form from the epoch count (PyTorch's
// _get_closed_form_lr formulas; see each class) and writes them with Optimizer::set_lr, which
// fills the group's device-resident learning rate: no host sync, and a training step captured in a
// CUDA graph reads the new value at its next replay without being captured again. Call step()
// between replays, never inside a captured region (that is an error).
//
// As in PyTorch, constructing a scheduler applies the rate of epoch 0, and step() advances one
// epoch (or one iteration, for schedules counted in iterations such as OneCycleLR) and applies
// its rate; call it after optimizer.step(). The base learning rates are the optimizer's at
// construction. Since rates are computed in closed form, two schedulers on one optimizer do not
// compose: the last one to step decides (use WarmupCosineLR for warm-up plus cosine).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ember/nn/optim.h"

namespace ember::optim {

// The base of every learning-rate scheduler: the epoch count, the base rates and the state JSON;
// a derived class gives compute_lr (and optionally compute_momentum). Not copyable: it refers to
// its optimizer, which must outlive it.
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances one epoch and applies its learning rates (and momentum, for OneCycleLR).
  void step();
  // The current epoch (0 right after construction), as PyTorch's last_epoch.
  int64_t last_epoch() const { return last_epoch_; }
  // The optimizer's learning rates at construction, one per parameter group.
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  // The rates of the current epoch, one per parameter group.
  std::vector<double> get_last_lr() const;
  // The rate group `group` gets at `epoch` (pure; does not touch the optimizer).
  double lr_at(int64_t epoch, size_t group = 0) const;
  virtual std::string name() const = 0;

  // {"type": ..., "last_epoch": ..., "base_lrs": [...]} for checkpoints (Checkpoint::scheduler).
  // Loading restores the epoch count and base rates without touching the optimizer (whose own
  // state dict restores its rates), as PyTorch does; the type must match.
  // Composite schedulers (SequentialLR, ChainedScheduler) add their children's states.
  virtual std::string state_json() const;
  virtual void load_state_json(const std::string& json);

 protected:
  // Records the optimizer and its current rates as base_lrs; applies nothing yet.
  explicit LRScheduler(Optimizer& optimizer);
  // Applies epoch 0; derived constructors call it last, once their parameters are set.
  void initial_step();
  virtual double compute_lr(int64_t epoch, size_t group) const = 0;
  // OneCycleLR's momentum (SGD momentum / Adam beta1); nullopt leaves momentum alone.
  virtual std::optional<double> compute_momentum(int64_t /*epoch*/, size_t /*group*/) const {
    return std::nullopt;
  }
  void apply();

  Optimizer& optimizer_;          // the optimizer whose rates it sets
  std::vector<double> base_lrs_;  // per group, see base_lrs()
  int64_t last_epoch_ = -1;       // -1 until initial_step() applies epoch 0

  // The composites of nn/lr_scheduler_more.h evaluate and re-base their children.
  friend class SequentialLR;
  friend class ChainedScheduler;
};

// base_lr * gamma^(epoch / step_size) (integer division).
class StepLR : public LRScheduler {
 public:
  // step_size > 0 epochs between decays; gamma the multiplicative factor (PyTorch's default 0.1).
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  std::string name() const override { return "StepLR"; }

 protected:
  double compute_lr(int64_t epoch, size_t group) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// base_lr * gamma^(number of milestones <= epoch). Milestones must be increasing.
class MultiStepLR : public LRScheduler {
 public:
  // milestones: the epochs at which the rate is multiplied by gamma (PyTorch's default 0.1).
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  std::string name() const override { return "MultiStepLR"; }

 protected:
  double compute_lr(int64_t epoch, size_t group) const override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

// eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2 (periodic past T_max, as
// PyTorch's closed form).
class CosineAnnealingLR : public LRScheduler {
 public:
  // T_max > 0: the epochs of a half cosine period; eta_min: the minimum rate (default 0).
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0);
  std::string name() const override { return "CosineAnnealingLR"; }

 protected:
  double compute_lr(int64_t epoch, size_t group) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// Linear warm-up: base_lr * (start_factor + (end_factor - start_factor) * min(epoch, total_iters)
// / total_iters). 0 < start_factor <= 1, 0 <= end_factor <= 1.
class LinearLR : public LRScheduler {
 public:
  // The factors multiply the base rates at epoch 0 and from total_iters on; defaults as PyTorch.
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0,
           int64_t total_iters = 5);
  std::string name() const override { return "LinearLR"; }

 protected:
  double compute_lr(int64_t epoch, size_t group) const override;

 private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

// Linear warm-up for warmup_iters (from base_lr * warmup_start_factor to base_lr), then cosine
// decay to eta_min at total_iters, where it stays. Equals PyTorch's
// SequentialLR([LinearLR(start_factor, 1, warmup_iters), CosineAnnealingLR(total_iters -
// warmup_iters, eta_min)], milestones=[warmup_iters]) up to total_iters.
class WarmupCosineLR : public LRScheduler {
 public:
  // 0 <= warmup_iters < total_iters; warmup_start_factor in (0, 1] scales the first rate;
  // eta_min is the final rate.
  WarmupCosineLR(Optimizer& optimizer, int64_t warmup_iters, int64_t total_iters,
                 double warmup_start_factor = 1e-3, double eta_min = 0);
  std::string name() const override { return "WarmupCosineLR"; }

 protected:
  double compute_lr(int64_t epoch, size_t group) const override;

 private:
  int64_t warmup_iters_, total_iters_;
  double warmup_start_factor_, eta_min_;
};

// How OneCycleLR moves between two rates: cosine or linear interpolation (anneal_strategy 'cos' /
// 'linear' in PyTorch).
enum class AnnealStrategy { cos, linear };

// The options of OneCycleLR, as torch.optim.lr_scheduler.OneCycleLR's keyword arguments (with
// their defaults).
struct OneCycleLROptions {
  EMBER_ARG(double, pct_start) = 0.3;  // the fraction of the steps spent raising the rate, [0, 1]
  EMBER_ARG(AnnealStrategy, anneal_strategy) = AnnealStrategy::cos;  // cosine or linear
  // Whether momentum cycles inversely to the rate (needs an optimizer with momentum / beta1).
  EMBER_ARG(bool, cycle_momentum) = true;
  EMBER_ARG(double, base_momentum) = 0.85;    // the momentum at the peak rate
  EMBER_ARG(double, max_momentum) = 0.95;     // the momentum at the initial and final rates
  EMBER_ARG(double, div_factor) = 25;         // initial rate = max_lr / div_factor
  EMBER_ARG(double, final_div_factor) = 1e4;  // minimum rate = initial rate / final_div_factor
  // Three phases (up, back down to the initial rate, down to the minimum) instead of two.
  EMBER_ARG(bool, three_phase) = false;
};

// torch.optim.lr_scheduler.OneCycleLR, stepped once per iteration, total_steps times at most:
// from max_lr / div_factor up to max_lr over the first pct_start of the steps, then down to
// max_lr / div_factor / final_div_factor (three_phase: back to the initial rate first, then to the
// minimum), annealed by cosine or linearly; momentum (SGD momentum / Adam beta1) moves the
// opposite way between max_momentum and base_momentum when cycle_momentum is set. Stepping past
// total_steps is an error, as in PyTorch. max_lrs: one rate for every group, or one per group.
class OneCycleLR : public LRScheduler {
 public:
  // max_lrs: one peak rate for every group, or one per group; total_steps > 0 (PyTorch's
  // total_steps, or epochs * steps_per_epoch).
  OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps,
             const OneCycleLROptions& options = {});
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps,
             const OneCycleLROptions& options = {})
      : OneCycleLR(optimizer, std::vector<double>{max_lr}, total_steps, options) {}
  std::string name() const override { return "OneCycleLR"; }

 protected:
  double compute_lr(int64_t epoch, size_t group) const override;
  std::optional<double> compute_momentum(int64_t epoch, size_t group) const override;

 private:
  // Which of a group's three rates a phase starts or ends at.
  enum class Level { initial, max, min };
  struct Phase {
    double end_step;  // as PyTorch: a float, e.g. pct_start * total_steps - 1
    Level start_lr, end_lr;
    double start_momentum, end_momentum;
  };
  double level_lr(Level level, size_t group) const;
  // (lr, momentum) at `epoch` for group `group`.
  std::pair<double, double> at(int64_t epoch, size_t group) const;

  std::vector<double> max_lrs_, initial_lrs_, min_lrs_;
  int64_t total_steps_;
  OneCycleLROptions options_;
  std::vector<Phase> phases_;
};

}  // namespace ember::optim
