// torch.optim.LBFGS (PyTorch 2.x algorithm and defaults, libtorch's closure API): limited-memory
// BFGS over all parameters taken as one flat vector, with a fixed step (lr) or the strong-Wolfe
// line search (line_search_fn "strong_wolfe": cubic interpolation, bracketing then zoom, as
// PyTorch's _strong_wolfe). Written with tensor ops on the parameters' device (no custom kernel);
// it reads scalars (loss, curvature, directional derivatives) on the host each iteration, so it
// is not capturable. One parameter group, as in PyTorch.
//
// Usage:
//   optim::LBFGS opt(model->parameters(), optim::LBFGSOptions(1).line_search_fn("strong_wolfe"));
//   opt.step([&] { opt.zero_grad(); Tensor loss = f(); loss.backward(); return loss; });
//
// State dict: "state.0.d", "state.0.prev_flat_grad" (flat vectors), "state.0.old_dirs" and
// "state.0.old_stps" ([history, n]), "state.0.ro" and "state.0.al" (float64), in the parameters'
// dtype and device; the scalars (func_evals, n_iter, t, H_diag, prev_loss) are in config_json().
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ember/nn/optim.h"

namespace ember::optim {

// The options of LBFGS, as torch.optim.LBFGS's arguments (with their defaults).
struct LBFGSOptions {
  explicit LBFGSOptions(double lr = 1) : lr_(lr) {}  // lr defaults to 1, as PyTorch
  EMBER_ARG(double, lr);              // the step length (scaled on the first iteration)
  EMBER_ARG(int64_t, max_iter) = 20;  // iterations per step() call
  EMBER_ARG(std::optional<int64_t>, max_eval) = std::nullopt;  // default max_iter * 5 / 4
  EMBER_ARG(double, tolerance_grad) = 1e-7;                    // stop when max |gradient| <= this
  // Stop when the step or the loss changes by at most this.
  EMBER_ARG(double, tolerance_change) = 1e-9;
  EMBER_ARG(int64_t, history_size) = 100;  // curvature pairs kept (the "limited memory")
  EMBER_ARG(std::optional<std::string>, line_search_fn) = std::nullopt;  // or "strong_wolfe"
};

// torch.optim.LBFGS: a quasi-Newton method over all parameters as one flat vector, one parameter
// group; each step() calls a closure that re-evaluates the loss.
class LBFGS : public Optimizer {
 public:
  // Zeroes the gradients, computes the loss, calls backward() and returns the loss.
  using LossClosure = std::function<Tensor()>;
  // One group of params (PyTorch's LBFGS takes no groups either); errors as SGD's constructor.
  LBFGS(std::vector<Tensor> params, const LBFGSOptions& options = LBFGSOptions());
  // Runs up to max_iter iterations; the closure recomputes the loss and the gradients (and is
  // called with gradient recording on). Returns the first loss the closure gave.
  Tensor step(const LossClosure& closure);
  const LBFGSOptions& options() const { return options_; }
  std::string name() const override { return "LBFGS"; }
  int64_t func_evals() const { return func_evals_; }
  int64_t n_iter() const { return n_iter_; }

  NamedTensors state_dict() const override;
  std::string config_json() const override;
  void load_state_dict(const NamedTensors& state, const std::string& config_json = "",
                       bool strict = true) override;

 protected:
  // step() without a closure is an error: LBFGS needs to re-evaluate the function.
  void step_group(size_t g, const std::vector<size_t>& with_grad, const Tensor& found_inf) override;
  std::vector<std::string> state_names(size_t) const override { return {}; }
  std::string group_options_json(size_t g) const override;
  void load_group_options_json(size_t g, const std::string& json) override;

 private:
  Tensor gather_flat_grad() const;
  void add_to_params(double step_size, const Tensor& direction);
  std::vector<Tensor> clone_params() const;
  void set_params(const std::vector<Tensor>& values);
  // Loss and flat gradient at x + t * d (the parameters are x again afterwards).
  std::pair<double, Tensor> directional_evaluate(const LossClosure& closure,
                                                 const std::vector<Tensor>& x, double t,
                                                 const Tensor& d);

  LBFGSOptions options_;
  int64_t func_evals_ = 0, n_iter_ = 0;
  Tensor d_, prev_flat_grad_;
  std::vector<Tensor> old_dirs_, old_stps_;
  std::vector<double> ro_, al_;
  double t_ = 0, h_diag_ = 1, prev_loss_ = 0;
  bool has_direction_ = false;
};

}  // namespace ember::optim
