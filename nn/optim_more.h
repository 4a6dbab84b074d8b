// More optimizers, as torch.optim (PyTorch 2.x algorithms and defaults): RMSprop, Adagrad,
// Adadelta, Adamax, NAdam and RAdam, with parameter groups, maximize, GradScaler's step(found_inf)
// and state dicts, on the Optimizer base of nn/optim.h (whose rules they follow: learning rate and
// momentum/beta1 live on the device, steps are capturable in a CUDA graph). Each step is one fused
// kernel per group and dtype (kernel_interface/optim_more.h): a loop per tensor on the CPU, one
// multi-tensor launch on CUDA.
//
// State dict entries ("state.<i>.<name>", PyTorch's names; "step" and "mu_product" are float32
// 0-dim tensors, the others have the parameter's shape and dtype):
//   RMSprop   "step", "square_avg", "momentum_buffer" (momentum > 0), "grad_avg" (centered)
//   Adagrad   "step", "sum" (made at construction, filled with initial_accumulator_value, as
//             PyTorch does)
//   Adadelta  "step", "square_avg", "acc_delta"
//   Adamax    "step", "exp_avg", "exp_inf"
//   NAdam     "step", "mu_product", "exp_avg", "exp_avg_sq"
//   RAdam     "step", "exp_avg", "exp_avg_sq"
// The momentum that schedules cycle (Optimizer::momentum / set_momentum): RMSprop's momentum
// (switching its buffers on or off, as SGD's), Adamax's, NAdam's and RAdam's beta1; Adagrad and
// Adadelta have none (0).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "ember/kernel_interface/optim_more.h"
#include "ember/nn/optim.h"

namespace ember::optim {

// The options (hyperparameters) of RMSprop, as torch.optim.RMSprop's arguments (with their
// defaults).
struct RMSpropOptions {
  // lr defaults as PyTorch's RMSprop.
  explicit RMSpropOptions(double lr = 1e-2) : lr_(lr) {}
  EMBER_ARG(double, lr);                // the learning rate, >= 0
  EMBER_ARG(double, alpha) = 0.99;      // the smoothing constant of the squared-gradient average
  EMBER_ARG(double, eps) = 1e-8;        // added to the denominator for stability
  EMBER_ARG(double, weight_decay) = 0;  // L2 penalty: weight_decay * param added to the gradient
  EMBER_ARG(double, momentum) = 0;      // momentum factor, >= 0 (0: no momentum buffer)
  // Normalize by the gradient's estimated variance (the mean's square subtracted).
  EMBER_ARG(bool, centered) = false;
  EMBER_ARG(bool, maximize) = false;  // ascend the objective (the gradient is negated)
};

// The options (hyperparameters) of Adagrad, as torch.optim.Adagrad's arguments (with their
// defaults).
struct AdagradOptions {
  // lr defaults as PyTorch's Adagrad.
  explicit AdagradOptions(double lr = 1e-2) : lr_(lr) {}
  EMBER_ARG(double, lr);                // the learning rate, >= 0
  EMBER_ARG(double, lr_decay) = 0;      // lr / (1 + (step - 1) * lr_decay)
  EMBER_ARG(double, weight_decay) = 0;  // L2 penalty: weight_decay * param added to the gradient
  EMBER_ARG(double, initial_accumulator_value) = 0;  // the starting value of "sum"
  EMBER_ARG(double, eps) = 1e-10;                    // added to the denominator for stability
  EMBER_ARG(bool, maximize) = false;  // ascend the objective (the gradient is negated)
};

// The options (hyperparameters) of Adadelta, as torch.optim.Adadelta's arguments (with their
// defaults).
struct AdadeltaOptions {
  // lr defaults as PyTorch's Adadelta.
  explicit AdadeltaOptions(double lr = 1.0) : lr_(lr) {}
  EMBER_ARG(double, lr);                // the learning rate, >= 0
  EMBER_ARG(double, rho) = 0.9;         // the decay of the running averages
  EMBER_ARG(double, eps) = 1e-6;        // added to the denominator for stability
  EMBER_ARG(double, weight_decay) = 0;  // L2 penalty: weight_decay * param added to the gradient
  EMBER_ARG(bool, maximize) = false;    // ascend the objective (the gradient is negated)
};

// The options (hyperparameters) of Adamax, as torch.optim.Adamax's arguments (with their defaults).
struct AdamaxOptions {
  // lr defaults as PyTorch's Adamax.
  explicit AdamaxOptions(double lr = 2e-3) : lr_(lr) {}
  EMBER_ARG(double, lr);  // the learning rate, >= 0
  // Decay rates of the running averages (first moment; second moment or infinity norm).
  EMBER_ARG(std::pair<double, double>, betas) = {0.9, 0.999};
  EMBER_ARG(double, eps) = 1e-8;        // added to the denominator for stability
  EMBER_ARG(double, weight_decay) = 0;  // L2 penalty: weight_decay * param added to the gradient
  EMBER_ARG(bool, maximize) = false;    // ascend the objective (the gradient is negated)
};

// The options (hyperparameters) of NAdam, as torch.optim.NAdam's arguments (with their defaults).
struct NAdamOptions {
  // lr defaults as PyTorch's NAdam.
  explicit NAdamOptions(double lr = 2e-3) : lr_(lr) {}
  EMBER_ARG(double, lr);  // the learning rate, >= 0
  // Decay rates of the running averages (first moment; second moment or infinity norm).
  EMBER_ARG(std::pair<double, double>, betas) = {0.9, 0.999};
  EMBER_ARG(double, eps) = 1e-8;        // added to the denominator for stability
  EMBER_ARG(double, weight_decay) = 0;  // L2 penalty: weight_decay * param added to the gradient
  EMBER_ARG(double, momentum_decay) = 4e-3;  // psi of NAdam's momentum schedule
  // AdamW-style: param *= 1 - lr * weight_decay instead of adding to the gradient.
  EMBER_ARG(bool, decoupled_weight_decay) = false;
  EMBER_ARG(bool, maximize) = false;  // ascend the objective (the gradient is negated)
};

// The options (hyperparameters) of RAdam, as torch.optim.RAdam's arguments (with their defaults).
struct RAdamOptions {
  // lr defaults as PyTorch's RAdam.
  explicit RAdamOptions(double lr = 1e-3) : lr_(lr) {}
  EMBER_ARG(double, lr);  // the learning rate, >= 0
  // Decay rates of the running averages (first moment; second moment or infinity norm).
  EMBER_ARG(std::pair<double, double>, betas) = {0.9, 0.999};
  EMBER_ARG(double, eps) = 1e-8;        // added to the denominator for stability
  EMBER_ARG(double, weight_decay) = 0;  // L2 penalty: weight_decay * param added to the gradient
  // AdamW-style: param *= 1 - lr * weight_decay instead of adding to the gradient.
  EMBER_ARG(bool, decoupled_weight_decay) = false;
  EMBER_ARG(bool, maximize) = false;  // ascend the objective (the gradient is negated)
};

// What every element-wise optimizer's group boils down to: the kernel's hyperparameters.
struct ElementwiseGroupSettings {
  double lr = 0;                         // learning rate
  double momentum = 0;                   // RMSprop's momentum
  double alpha = 0;                      // RMSprop's smoothing constant
  double eps = 0;                        // added to denominators
  double weight_decay = 0;               // L2 penalty (or decoupled decay, see below)
  double lr_decay = 0;                   // Adagrad's learning-rate decay
  double momentum_decay = 0;             // NAdam's momentum decay
  double initial_accumulator_value = 0;  // Adagrad's starting sum of squares
  bool maximize = false;                 // ascend the objective
  bool decoupled_weight_decay = false;   // NAdam/RAdam: AdamW-style decay
  bool centered = false;                 // RMSprop: normalize by the centered variance
};

// The shared base of the six: state names, step_group and state initialization from the
// algorithm and each group's settings. Options (Options) convert to settings and JSON through
// the free functions of nn/optim_more.cpp.
template <typename Options>
class ElementwiseOptimizerOf : public Optimizer {
 public:
  // Adds a group (e.g. parameters without weight decay); errors as the constructors.
  void add_param_group(std::vector<Tensor> params, const Options& options);
  // The options of a group (its lr and momentum may since have been set by set_lr /
  // set_momentum).
  const Options& options(size_t group = 0) const { return options_.at(group); }
  std::string name() const override;

 protected:
  ElementwiseOptimizerOf() = default;
  // Validates and adds the groups (what the derived constructors call).
  void init(std::vector<ParamGroup<Options>> groups);
  void step_group(size_t g, const std::vector<size_t>& with_grad, const Tensor& found_inf) override;
  std::vector<std::string> state_names(size_t g) const override;
  std::string group_options_json(size_t g) const override;
  void load_group_options_json(size_t g, const std::string& json) override;
  void validate_momentum(double momentum) const override;

  std::vector<Options> options_;  // per group
};

// Declares optimizer Name on ElementwiseOptimizerOf<NameOptions>, constructed from one group of
// params with options or from several groups (errors as SGD's constructors).
#define EMBER_ELEMENTWISE_OPTIMIZER(Name)                                                     \
  class Name : public ElementwiseOptimizerOf<Name##Options> {                                 \
   public:                                                                                    \
    Name(std::vector<Tensor> params, const Name##Options& options) {                          \
      init({{std::move(params), options}});                                                   \
    }                                                                                         \
    explicit Name(std::vector<ParamGroup<Name##Options>> groups) { init(std::move(groups)); } \
  };

// torch.optim.RMSprop (alpha, eps, weight_decay, momentum, centered, maximize).
EMBER_ELEMENTWISE_OPTIMIZER(RMSprop)
// torch.optim.Adagrad (lr_decay, weight_decay, initial_accumulator_value, eps, maximize).
EMBER_ELEMENTWISE_OPTIMIZER(Adagrad)
// torch.optim.Adadelta (rho, eps, weight_decay, maximize; lr 1.0 by default).
EMBER_ELEMENTWISE_OPTIMIZER(Adadelta)
// torch.optim.Adamax (betas, eps, weight_decay, maximize).
EMBER_ELEMENTWISE_OPTIMIZER(Adamax)
// torch.optim.NAdam (betas, eps, weight_decay, momentum_decay, decoupled_weight_decay, maximize).
EMBER_ELEMENTWISE_OPTIMIZER(NAdam)
// torch.optim.RAdam (betas, eps, weight_decay, decoupled_weight_decay, maximize).
EMBER_ELEMENTWISE_OPTIMIZER(RAdam)

#undef EMBER_ELEMENTWISE_OPTIMIZER

}  // namespace ember::optim
