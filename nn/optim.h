// Optimizers, as torch.optim: SGD (momentum, dampening, Nesterov, weight decay, maximize), Adam and
// AdamW (optionally AMSGrad, maximize), with parameter groups and state dicts. RMSprop, Adagrad,
// Adadelta, Adamax, NAdam and RAdam are in nn/optim_more.h, LBFGS in nn/optim_lbfgs.h.
//
// Each step is a few fused kernel launches per parameter group and dtype
// (kernel_interface/optim.h), on the CPU one fused loop per tensor. Nothing on the step path
// synchronizes the host: the learning rate and the momentum (Adam's beta1) of each group live in
// float64 one-element tensors on the group's device, which the kernels read; the Adam step counts
// live on the device too. So `step()` can be captured in a CUDA graph and replayed while a
// scheduler changes the learning rate between replays, and GradScaler can skip a step on the device
// (step(found_inf)).
//
// Usage:
//   optim::AdamW opt(model->parameters(), optim::AdamWOptions(1e-3).weight_decay(0.05));
//   loss.backward(); opt.step(); opt.zero_grad();
//
// Rules a captured step relies on (all hold after one eager warm-up step): parameters and state
// keep their memory, the set of parameters with gradients does not change, and hyperparameters
// other than the learning rate and the momentum are not changed (those are baked into the captured
// launches). Gradients may go either way inside the step: zero_grad() (set_to_none) at its end
// makes them step-local tensors of the graph's pool, like activations, which the next replay's
// backward writes afresh (the fast way: no fill and no accumulating add per parameter);
// zero_grad(false) keeps their memory, for what holds them across steps (DDP's bucket views).
//
// State dict (for checkpoints, nn/checkpoint.h): tensors named "state.<i>.<name>", where i counts
// the parameters over all groups in order (as PyTorch's optimizer state_dict does) and name is
//   SGD with momentum: "momentum_buffer", "step"
//   Adam, AdamW:       "step", "exp_avg", "exp_avg_sq", and "max_exp_avg_sq" with amsgrad
//   (the optimizers of nn/optim_more.h list theirs there)
// ("step" is a float32 0-dim tensor, as in PyTorch; the others have the parameter's shape and
// dtype), plus the non-tensor state as JSON text (config_json(): the optimizer type and each
// group's hyperparameters, learning rate and parameter indices).
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "ember/nn/module.h"
#include "ember/nn/options.h"

namespace ember::optim {

using nn::NamedTensors;

// The base of every optimizer: parameter groups, their device-resident learning rate and
// momentum, per-parameter state, zero_grad and the state dict.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter that has a gradient (the others are skipped, as in PyTorch).
  void step();
  // The same, skipped on the device when found_inf (float32, one element, on the parameters'
  // device) is nonzero: how GradScaler steps without a host sync.
  void step(const Tensor& found_inf);
  // set_to_none drops the gradients (PyTorch's default); false zeroes them in place, which keeps
  // their memory (what a captured step needs).
  void zero_grad(bool set_to_none = true);

  // How many parameter groups there are (one per constructor group and add_param_group call).
  size_t num_param_groups() const { return groups_.size(); }
  // The parameters of a group, in the order given; errors when there is no such group.
  const std::vector<Tensor>& params(size_t group) const;
  std::vector<Tensor> parameters() const;  // every group's, in state-dict index order
  virtual std::string name() const = 0;    // "SGD", "Adam", "AdamW"

  // The learning rate of a group: the host value, and setting it (host value and device scalar;
  // the write is a fill on the device's current stream, no host sync). Not while capturing.
  double lr(size_t group = 0) const;
  void set_lr(size_t group, double lr);
  void set_lr(double lr);  // every group
  // The float64 one-element tensor the kernels read (on the group's device).
  const Tensor& lr_tensor(size_t group = 0) const;
  // The momentum one-cycle schedules cycle: SGD's momentum, Adam's beta1 (host value and device
  // scalar, like the learning rate). An SGD group switches its momentum buffers on or off with it.
  double momentum(size_t group = 0) const;
  void set_momentum(size_t group, double momentum);

  // Tensor state and non-tensor state, see the file comment. load_state_dict validates everything
  // (names, parameter indices, shapes, the JSON's group layout) before changing anything, converts
  // tensors to each parameter's device and dtype, and restores learning rates and hyperparameters;
  // a failed load changes nothing. Strict (the default): every parameter that had state when it
  // was saved (config_json lists them; without a config, every parameter with an entry) must have
  // all of its entries, and an empty state is an error; strict=false recreates missing state as
  // zeros on the next step.
  // Virtual for LBFGS (nn/optim_lbfgs.h), whose state is not per parameter.
  virtual NamedTensors state_dict() const;
  virtual std::string config_json() const;
  virtual void load_state_dict(const NamedTensors& state, const std::string& config_json = "",
                               bool strict = true);

 protected:
  Optimizer() = default;

  // A parameter group: its parameters and its learning rate and momentum, kept both on the host
  // (for reading) and on the device (for the kernels, so a captured step sees later changes).
  struct Group {
    std::vector<Tensor> params;  // the group's parameters, in the order given
    size_t first_index = 0;      // state-dict index of params[0]
    // The host values of the learning rate and the momentum (SGD's momentum, Adam's beta1).
    double lr = 0, momentum = 0;  // momentum: SGD's momentum or Adam's beta1, host value
    // The device copies of lr and momentum the kernels read.
    Tensor lr_device, momentum_device;  // float64 scalars on the group's device
  };
  // One entry per parameter, in state-dict index order: named state tensors (empty until the
  // parameter's first step).
  using ParamState = NamedTensors;

  // Derived constructors call this once per group, after validating their options.
  void add_group(std::vector<Tensor> params, double lr, double momentum);
  // Runs the kernels of group `g` for the parameters `with_grad` (indices into the group, all with
  // a gradient, one device; the device scalars are in place). found_inf may be undefined.
  virtual void step_group(size_t g, const std::vector<size_t>& with_grad,
                          const Tensor& found_inf) = 0;
  // The state names this optimizer keeps for a parameter of group g (for load_state_dict checks).
  virtual std::vector<std::string> state_names(size_t g) const = 0;
  // Each group's hyperparameters (JSON object text, without lr/params) and their restoration.
  virtual std::string group_options_json(size_t g) const = 0;
  virtual void load_group_options_json(size_t g, const std::string& json) = 0;
  // The state tensor `name` of parameter `index` (a state-dict index), created on first use as
  // zeros of the parameter's layout (or a float32 0-dim zero for "step"), and moved along when the
  // parameter changed device, dtype or layout since (Module::to after the optimizer was made).
  // "step" and NAdam's "mu_product" are float32 0-dim tensors (is_scalar_state).
  Tensor state(size_t index, const std::string& name);
  // Whether parameter `index` already has state `name` (to initialize fresh state otherwise).
  bool has_state(size_t index, const std::string& name) const;
  static bool is_scalar_state(const std::string& name) {
    return name == "step" || name == "mu_product";
  }
  // Extra range checks of set_momentum (Adam: beta1 < 1).
  virtual void validate_momentum(double /*momentum*/) const {}
  // The gradient of a parameter in the parameter's layout (itself, or a relaid copy when the
  // strides differ), ready to be updated alongside it element by element.
  static Tensor grad_for_update(const Tensor& param);

  std::vector<Group> groups_;      // the parameter groups, in order
  std::vector<ParamState> state_;  // per parameter (state-dict index order), its named state

 private:
  void step_impl(const Tensor& found_inf);
  void place_group_scalars(Group& group, Device device);
};

// ---- SGD --------------------------------------------------------------------------------------

// The options (hyperparameters) of SGD, as torch.optim.SGD's arguments.
struct SGDOptions {
  // lr defaults to 1e-3, as PyTorch's SGD since 2.0.
  explicit SGDOptions(double lr = 1e-3) : lr_(lr) {}
  EMBER_ARG(double, lr);                // the learning rate, >= 0
  EMBER_ARG(double, momentum) = 0;      // momentum factor, >= 0 (0: no momentum buffer)
  EMBER_ARG(double, dampening) = 0;     // the gradient enters the buffer scaled by 1 - dampening
  EMBER_ARG(double, weight_decay) = 0;  // L2 penalty: weight_decay * param added to the gradient
  EMBER_ARG(bool, nesterov) = false;    // Nesterov momentum (needs momentum > 0, dampening 0)
  EMBER_ARG(bool, maximize) = false;    // ascend the objective (the gradient is negated)
};

// A parameter group for an optimizer's constructor: parameters and their own options (as a dict
// in PyTorch's param_groups list), e.g. no weight decay for biases and norms.
template <typename Options>
struct ParamGroup {
  std::vector<Tensor> params;  // the group's parameters (floating, leaf, in no other group)
  Options options;             // the group's hyperparameters
};

// torch.optim.SGD. Nesterov needs momentum > 0 and dampening 0.
class SGD : public Optimizer {
 public:
  // One group of params with options, or several groups. Errors on an empty group, a parameter
  // that is undefined, not floating, not a leaf or given twice, and on invalid options.
  SGD(std::vector<Tensor> params, const SGDOptions& options);
  SGD(const std::vector<ParamGroup<SGDOptions>>& groups);
  // Adds a group (e.g. parameters without weight decay).
  void add_param_group(std::vector<Tensor> params, const SGDOptions& options);
  // The options of a group (its lr and momentum may since have been set by set_lr / set_momentum).
  const SGDOptions& options(size_t group = 0) const { return options_.at(group); }
  std::string name() const override { return "SGD"; }

 protected:
  void step_group(size_t g, const std::vector<size_t>& with_grad, const Tensor& found_inf) override;
  std::vector<std::string> state_names(size_t g) const override;
  std::string group_options_json(size_t g) const override;
  void load_group_options_json(size_t g, const std::string& json) override;

 private:
  std::vector<SGDOptions> options_;
};

// ---- Adam / AdamW -----------------------------------------------------------------------------

// The options (hyperparameters) of Adam, as torch.optim.Adam's arguments.
struct AdamOptions {
  // lr defaults to 1e-3, as PyTorch.
  explicit AdamOptions(double lr = 1e-3) : lr_(lr) {}
  EMBER_ARG(double, lr);  // the learning rate, >= 0
  // Decay rates of the running averages of the gradient and its square, each in [0, 1).
  EMBER_ARG(std::pair<double, double>, betas) = {0.9, 0.999};
  EMBER_ARG(double, eps) = 1e-8;        // added to the denominator sqrt(v_hat), >= 0
  EMBER_ARG(double, weight_decay) = 0;  // L2 penalty added to the gradient
  EMBER_ARG(bool, amsgrad) = false;     // use the maximum of past v (AMSGrad)
  EMBER_ARG(bool, maximize) = false;    // ascend the objective (the gradient is negated)
};

// AdamW's options: Adam's, with PyTorch's AdamW default weight decay of 0.01.
struct AdamWOptions {
  // lr defaults to 1e-3, as PyTorch.
  explicit AdamWOptions(double lr = 1e-3) : lr_(lr) {}
  EMBER_ARG(double, lr);                                       // the learning rate, >= 0
  EMBER_ARG(std::pair<double, double>, betas) = {0.9, 0.999};  // as AdamOptions::betas
  EMBER_ARG(double, eps) = 1e-8;           // added to the denominator sqrt(v_hat)
  EMBER_ARG(double, weight_decay) = 1e-2;  // decoupled: param *= 1 - lr * weight_decay
  EMBER_ARG(bool, amsgrad) = false;        // use the maximum of past v (AMSGrad)
  EMBER_ARG(bool, maximize) = false;       // ascend the objective (the gradient is negated)
};

// torch.optim.Adam (L2 weight decay added to the gradient).
class Adam : public Optimizer {
 public:
  // One group of params with options, or several groups; errors as SGD's constructors.
  Adam(std::vector<Tensor> params, const AdamOptions& options);
  Adam(const std::vector<ParamGroup<AdamOptions>>& groups);
  // Adds a group (e.g. parameters without weight decay).
  void add_param_group(std::vector<Tensor> params, const AdamOptions& options);
  // The options of a group (AdamW's are kept as AdamOptions with its weight decay).
  const AdamOptions& options(size_t group = 0) const { return options_.at(group); }
  std::string name() const override { return decoupled_ ? "AdamW" : "Adam"; }

 protected:
  // For AdamW: no groups yet; decoupled selects AdamW's weight decay.
  explicit Adam(bool decoupled) : decoupled_(decoupled) {}
  void step_group(size_t g, const std::vector<size_t>& with_grad, const Tensor& found_inf) override;
  std::vector<std::string> state_names(size_t g) const override;
  std::string group_options_json(size_t g) const override;
  void load_group_options_json(size_t g, const std::string& json) override;
  void validate_momentum(double beta1) const override;

  std::vector<AdamOptions> options_;  // per group
  bool decoupled_ = false;            // true for AdamW (decoupled weight decay)
};

// torch.optim.AdamW (decoupled weight decay: param *= 1 - lr * weight_decay before the update).
class AdamW : public Adam {
 public:
  // One group of params with options, or several groups; errors as SGD's constructors.
  AdamW(std::vector<Tensor> params, const AdamWOptions& options);
  AdamW(const std::vector<ParamGroup<AdamWOptions>>& groups);
  // Adds a group (e.g. parameters without weight decay).
  void add_param_group(std::vector<Tensor> params, const AdamWOptions& options);
};

}  // namespace ember::optim
